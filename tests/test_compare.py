"""`kernlog compare` between two commits on the CPU: a planted regression fails the gate,
noise does not, another GPU's profile is refused unless asked for, a bad profile at a ref is
one line and exit 2."""
import json

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.render import compare as compare_text

from .helpers import git, git_repo, make_record, put


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), "compare", *args])


@pytest.fixture
def repo(tmp_path):
    root = git_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.100, seed=1))
    put(root, make_record("torch_compile", median_ms=0.090, seed=2))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def head(root, **recs):
    for rec in recs.values():
        put(root, rec)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "head")


def test_a_planted_regression_exits_1_and_is_named(repo):
    head(repo, torch=make_record("torch", median_ms=0.110, seed=3))  # 10% slower
    r = run(repo, "HEAD~1", "HEAD")
    assert r.exit_code == 1, r.output
    row = next(ln for ln in r.stdout.splitlines() if "softmax/torch |" in ln)
    assert "**REGRESSION** slower" in row and "| 1.098 |" in row
    assert "1 regression(s)" in r.stdout.splitlines()[0]


def test_noise_exits_0(repo):
    head(repo, torch=make_record("torch", median_ms=0.1003, seed=4), torch_compile=make_record(
        "torch_compile", median_ms=0.0898, seed=5))
    r = run(repo, "HEAD~1", "HEAD", "--format", "json")
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)
    assert c["regressions"] == 0 and {row["judgement"] for row in c["rows"]} <= {"same", "inconclusive"}


def test_the_threshold_lets_a_small_slowdown_pass(repo):
    head(repo, torch=make_record("torch", median_ms=0.104, seed=3))  # 4% slower: beyond the band
    assert run(repo, "HEAD~1", "HEAD", "--threshold", "0.05").exit_code == 0
    assert run(repo, "HEAD~1", "HEAD", "--threshold", "0.03").exit_code == 1


def test_the_work_tree_is_the_default_head_and_one_side_only_is_listed(repo):
    put(repo, make_record("triton", median_ms=0.2))
    c = json.loads(run(repo, "HEAD", "--format", "json").stdout)
    assert c["head"] == "work tree" and c["regressions"] == 0
    assert [r["judgement"] for r in c["rows"] if r["revision"] == "triton"] == ["only in HEAD"]


def test_another_driver_is_refused_unless_asked(repo):
    rec = make_record("torch", median_ms=0.2, seed=3)
    rec["gpu"] = dict(rec["gpu"], driver="590.1")
    head(repo, torch=rec)
    r = run(repo, "HEAD~1", "HEAD")
    assert r.exit_code == 0 and "refused: driver 580.159.04 -> 590.1" in r.stdout
    asked = run(repo, "HEAD~1", "HEAD", "--allow-different-setup")
    assert asked.exit_code == 1 and "another GPU, driver or ncu are compared" in asked.stdout


@pytest.mark.parametrize("ref, message", [("nope", "'nope' names no commit"),
                                          ("HEAD", "lacks the field metrics")])
def test_bad_input_is_one_line_and_exit_2(repo, ref, message):
    path = next((repo / "profiles").rglob("torch.*.json"))
    rec = json.loads(path.read_text())
    del rec["metrics"]
    path.write_text(json.dumps(rec))
    git(repo, "commit", "-qam", "broken")
    r = run(repo, ref, "HEAD~1")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


def test_rows_judged_same_are_counted_not_listed_unless_all(repo):
    head(repo, torch=make_record("torch", median_ms=0.110, seed=3))  # 10% slower: listed
    r = run(repo, "HEAD~1", "HEAD")
    listed = [ln for ln in r.stdout.splitlines() if ln.startswith("| nvidia")]
    assert [ln.split(" | ")[1] for ln in listed] == ["softmax/torch"]
    c = json.loads(run(repo, "HEAD~1", "HEAD", "--format", "json").stdout)
    same = sum(row["judgement"] == "same" and not row["source_changed"] for row in c["rows"])
    assert same >= 1 and f"{same} of {len(c['rows'])} pairs judged same, source unchanged" in r.stdout
    everything = run(repo, "HEAD~1", "HEAD", "--all").stdout
    assert sum(ln.startswith("| nvidia") for ln in everything.splitlines()) == len(c["rows"])


def test_nothing_moved_is_one_line_not_a_table(repo):
    c = json.loads(run(repo, "HEAD", "HEAD", "--format", "json").stdout)
    text = compare_text.render(c, "md")
    assert "| gpu |" not in text and f"{len(c['rows'])} of {len(c['rows'])} pairs judged same" in text
    assert "(all of them)" in text


# Nothing to compare is never a pass: no profile at either side is exit 2, one line naming what to
# do, unless --allow-empty; a side with profiles the other lacks is something to compare.

@pytest.fixture
def bare(tmp_path):
    """A repository with operators and a commit, and no profile anywhere."""
    root = git_repo(tmp_path)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "operators, no profiles")
    return root


@pytest.mark.parametrize("args, where", [(["HEAD"], "no profiles at HEAD nor in the work tree"),
                                         (["HEAD", "HEAD"], "no profiles at HEAD nor at HEAD")])
def test_no_profile_on_either_side_is_exit_2_not_a_pass(bare, args, where):
    for fmt in ("md", "json"):
        r = run(bare, *args, "--format", fmt)
        assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output
        assert r.stderr.strip().splitlines() == [
            f"kernlog: nothing to compare: {where} (profile on a GPU machine: kernlog profile KERNEL; "
            "or pass --allow-empty to let an empty comparison pass)"]


def test_allow_empty_lets_an_empty_comparison_pass_with_a_note(bare):
    r = run(bare, "HEAD", "--allow-empty")
    assert r.exit_code == 0, r.output
    assert "note: nothing to compare: no profiles at HEAD nor in the work tree; passed under --allow-empty" \
        in r.stdout.splitlines()
    c = json.loads(run(bare, "HEAD", "--allow-empty", "--format", "json").stdout)
    assert c["rows"] == [] and c["nothing_to_compare"] == "no profiles at HEAD nor in the work tree"


def test_a_branch_that_adds_the_first_profiles_passes(bare):
    """No pair to judge, but the new profiles are listed: not an empty comparison."""
    put(bare, make_record("torch", median_ms=0.100, seed=1))
    r = run(bare, "HEAD")
    assert r.exit_code == 0, r.output
    assert "only in HEAD" in r.stdout and "nothing to compare" not in r.output
    head(bare)
    c = json.loads(run(bare, "HEAD~1", "HEAD", "--format", "json").stdout)
    assert c["nothing_to_compare"] is None and [row["judgement"] for row in c["rows"]] == ["only in HEAD"]


def test_profiles_only_at_base_are_listed_not_empty(repo):
    """Every profile removed from the work tree: each is listed "only in BASE", which is something to report."""
    for path in (repo / "profiles").rglob("*"):
        if path.is_file():
            path.unlink()
    r = run(repo, "HEAD", "--format", "json")
    assert r.exit_code == 0, r.output
    assert {row["judgement"] for row in json.loads(r.stdout)["rows"]} == {"only in BASE"}


def test_a_comparison_with_pairs_is_never_called_empty(repo):
    c = json.loads(run(repo, "HEAD", "--allow-empty", "--format", "json").stdout)
    assert c["rows"] and c["nothing_to_compare"] is None
    assert "nothing to compare" not in compare_text.render(c, "md")


def test_a_lost_report_in_the_work_tree_is_said_once_beside_the_comparison(repo):
    """The work tree's profiles are read once: compared, then each one's report glanced at."""
    rec = json.loads(next((repo / "profiles").rglob("torch.*.json")).read_text())
    report = next((repo / "profiles").rglob("torch.*.json")).parent / rec["ncu"]["report"]
    for found in (report, report.with_name(report.name + ".xz")):
        found.unlink(missing_ok=True)
    r = run(repo, "HEAD")
    assert r.exit_code == 0 and "2 of 2 pairs judged same" in r.stdout, r.output  # it compares all the same
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("kernlog: ")]
    assert len(said) == 1 and rec["ncu"]["report"] in said[0], r.stderr
    assert run(repo, "HEAD", "HEAD").stderr == ""  # two commits: no work tree to glance at


def test_a_ref_outside_any_repository_or_before_the_first_commit_says_which(tmp_path):
    """Where there is no repository, or no commit yet, a ref names nothing for that reason, and the line says so
    with the fix, not "names no commit of this repository" (as if HEAD were a typo)."""
    from kernlog.errors import KernlogError
    from kernlog.store.gitrefs import resolve

    with pytest.raises(KernlogError, match=r"is no git repository, so 'HEAD' names nothing: `git init` there"):
        resolve(tmp_path, "HEAD")
    git(tmp_path, "init", "-q")
    with pytest.raises(KernlogError, match=r"^'HEAD' names no commit: the repository has none yet"):
        resolve(tmp_path, "HEAD")
