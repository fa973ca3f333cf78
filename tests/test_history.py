"""History across commits: every committed version of a profile an entry, each judged
against the one before (a step only beyond the noise), and any entry a side of a diff as
COMMIT:KERNEL/REV; a git repository built here, its profiles from real H100 reports."""
import json

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.render import history as history_text

from .helpers import git, git_repo, kernel_page, make_record, put


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args])


@pytest.fixture
def repo(tmp_path):
    return git_repo(tmp_path)


def commit(root, rec, message):
    put(root, rec)
    git(root, "add", "-A", "profiles")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


def version(median_ms, seed, source):
    rec = make_record("torch", median_ms=median_ms, seed=seed)
    rec["source_sha256"] = source * 64
    return rec


def test_history_lists_each_commit_and_marks_only_the_step_beyond_noise(repo):
    c1 = commit(repo, version(0.100, 1, "a"), "first")
    commit(repo, version(0.1002, 2, "a"), "re-profiled, same source")  # 0.2%: noise
    c3 = commit(repo, version(0.090, 3, "b"), "faster source")  # 10% faster, new source
    r = run(repo, "history", "softmax/torch", "--format", "json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)
    rows = t["entries"]
    assert [e["stored_in"] for e in rows][0] == c1 and rows[-1]["stored_in"] == c3 and len(rows) == 3
    assert [e["verdict"] for e in rows] == [None, "same", "faster"]
    assert [e["step"] for e in rows] == [False, False, True] and rows[2]["source_changed"] is True
    text = run(repo, "history", "softmax/torch").stdout
    assert f"step: faster by 10.4% in {c3[:8]}" in text and "its source changed" in text  # medians of noisy samples
    header = text.splitlines()[1].split()
    assert header[:8] == ["stored", "in", "captured", "profiled", "at", "source", "median", "GB/s"], header


def test_an_uncommitted_profile_is_the_last_entry(repo):
    commit(repo, version(0.100, 1, "a"), "first")
    put(repo, version(0.120, 2, "a"))  # slower, same source, not committed
    rows = json.loads(run(repo, "history", "softmax/torch", "--format", "json").stdout)["entries"]
    assert [e["stored_in"] for e in rows][1] is None and rows[1]["verdict"] == "slower"
    assert "same source: the tool, driver or machine" in run(repo, "history", "softmax/torch").stdout


def test_diff_takes_a_commit_side(repo):
    c1 = commit(repo, version(0.100, 1, "a"), "first")
    commit(repo, version(0.090, 3, "b"), "faster")
    r = run(repo, "diff", f"{c1[:7]}:softmax/torch", "softmax/torch", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["timing"]["verdict"] == "faster" and d["timing"]["ratio"] < 0.95
    same = json.loads(run(repo, "diff", "HEAD:softmax/torch", "softmax/torch", "--format", "json").stdout)
    assert same["timing"]["ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("side, message", [
    ("nope:softmax/torch", "'nope' names no commit of this repository"),
    ("HEAD:softmax/torch_compile", "softmax/torch_compile has no profile at HEAD"),
])
def test_a_bad_commit_side_is_one_line(repo, side, message):
    commit(repo, version(0.100, 1, "a"), "first")
    r = run(repo, "diff", side, "softmax/torch")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


def test_a_commit_whose_report_was_not_committed_is_refused(repo):
    rec = version(0.100, 1, "a")
    path = put(repo, rec)
    git(repo, "add", str(path))  # the JSON alone
    git(repo, "commit", "-qm", "half a pair")
    r = run(repo, "diff", "HEAD:softmax/torch", "softmax/torch")
    assert r.exit_code == 2 and "ncu report" in r.stderr and "is missing" in r.stderr
    rows = json.loads(run(repo, "history", "softmax/torch", "--format", "json").stdout)["entries"]
    errors = [e for e in rows if "error" in e]
    assert len(rows) == 2 and len(errors) == 1 and "is missing" in errors[0]["error"]  # listed, not fatal


def test_a_commit_side_takes_the_profile_not_the_noise_calibration_of_that_name(repo):
    c1 = commit(repo, version(0.100, 1, "a"), "first")
    noise = repo / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "noise"
    noise.mkdir()
    (noise / "torch.8192x4096.fp32.json").write_text('{"revision": "torch", "runs": []}')  # not a profile
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a calibration")
    r = run(repo, "diff", "HEAD:softmax/torch", f"{c1[:7]}:softmax/torch", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["timing"]["ratio"] == pytest.approx(1.0)


def test_a_revision_on_two_gpus_has_a_history_on_each(repo):
    commit(repo, version(0.12, 1, "a"), "h100")
    h200 = version(0.09, 2, "a")
    h200["gpu"] = dict(h200["gpu"], slug="nvidia-h200", name="NVIDIA H200")
    commit(repo, h200, "h200")
    r = run(repo, "history", "softmax/torch")
    assert r.exit_code == 0, r.output
    heads = [line for line in r.output.splitlines() if line.startswith("softmax/torch ")]
    assert len(heads) == 2 and "on nvidia-h100-80gb-hbm3" in heads[0] and "on nvidia-h200" in heads[1]
    both = json.loads(run(repo, "history", "softmax/torch", "--format", "json").output)
    assert [t["gpu"] for t in both] == ["nvidia-h100-80gb-hbm3", "nvidia-h200"]
    one = json.loads(run(repo, "history", "softmax/torch@nvidia-h200", "--format", "json").output)
    assert one["gpu"] == "nvidia-h200" and len(one["entries"]) == 1


def test_the_log_plots_a_revision_with_two_committed_entries(repo):
    from kernlog.registry import load_kernel
    from kernlog.render import plots, report

    commit(repo, version(0.12, 1, "a"), "first")
    commit(repo, version(0.10, 2, "b"), "second")
    (section,) = report.collect(repo, [load_kernel(repo, "softmax")])
    hist = section["ladders"][0]["history"]
    assert [ms for _, ms, _ in hist["revisions"]["torch"]] == pytest.approx([0.12, 0.10], rel=0.05)
    assert hist["revisions"]["torch"][1][2] is True  # 0.12 -> 0.10 ms: a step
    page = kernel_page(repo, sections=[section])  # reports/softmax.md links its sibling plot
    assert f"Each revision across commits: [plot]({hist['plot'].removeprefix('reports/')})" in page
    assert plots.plot_histories(repo, [section]) == [repo / hist["plot"]] and (repo / hist["plot"]).stat().st_size
    assert not [p for p in report.out_of_date(repo, [section]) if "history" in p]
    commit(repo, version(0.11, 3, "c"), "third")  # one more entry in git: the plot no longer shows the history
    (section,) = report.collect(repo, [load_kernel(repo, "softmax")])
    assert f"{hist['plot']} was drawn from other data than profiles/ holds" in report.out_of_date(repo, [section])


def test_what_a_commit_holds_is_read_once_but_a_moving_ref_each_time(repo):
    from kernlog.store import gitrefs

    first = commit(repo, version(0.12, 1, "a"), "first")
    before = gitrefs.paths(repo, "HEAD")
    rec = make_record("torch_compile")
    commit(repo, rec, "second")
    assert len(gitrefs.paths(repo, "HEAD")) > len(before)  # HEAD moved: read again
    assert gitrefs.paths(repo, first) == before and gitrefs.paths(repo, first) is not gitrefs.paths(repo, first)
    assert gitrefs.commit_date(repo, first) == git(repo, "show", "-s", "--format=%cI", first)
    assert gitrefs.commit_date(repo, "0" * 40) is None
    # a ref is not a commit: an old profile that recorded "HEAD" is dated by its capture, not today's HEAD
    assert gitrefs.commit_date(repo, "HEAD") is None and gitrefs.commit_date(repo, "main") is None
    assert gitrefs.commit_date(repo, first[:7]) == git(repo, "show", "-s", "--format=%cI", first)


def test_an_unreadable_entry_is_one_line_and_the_entries_after_it_still_show():

    row = {"stored_in": "b" * 40, "captured_at": "2026-11-25T07:00:00", "profiled_at": "b" * 40, "dirty": False,
           "source_sha256": "0123456789abcdef", "median_ms": 0.1, "gbps": 1000.0, "verdict": None, "step": False}
    t = {"kernel": "softmax", "revision": "torch", "shape": [4, 64], "dtype": "fp32", "gpu": "H100",
         "path": "p.json", "entries": [{"stored_in": "a" * 40, "error": "not profiled at this commit: gone"}, row]}
    lines = history_text.render(t).splitlines()
    assert lines[2].split() == ["aaaaaaaa", "not", "profiled", "at", "this", "commit:", "gone"]
    assert lines[3].split()[:4] == ["bbbbbbbb", "2026-11-25T07:00", "bbbbbbbb", "0123456789"]


def test_an_entry_that_recorded_head_keeps_its_date_when_head_moves(repo):
    """Old profiles recorded the commit as "HEAD": dated by their capture, the timeline (and the
    log's history plot, whose digest `report --check` compares) must not move with every commit."""
    from kernlog.judge.history import timeline
    from kernlog.store.keys import ProfileKey

    rec = version(0.12, 1, "a")
    rec["git"] = dict(rec.get("git") or {}, commit="HEAD")
    commit(repo, rec, "first")
    side = ProfileKey("softmax", "torch", (8192, 4096), "fp32", "nvidia-h100-80gb-hbm3")
    before = [e["when"] for e in timeline(repo, side)["entries"]]
    assert before == [rec["captured_at"][:len(before[0])]]
    (repo / "README").write_text("moves HEAD")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "later")
    assert [e["when"] for e in timeline(repo, side)["entries"]] == before


def test_the_header_counts_entries_in_words_and_a_judged_history_states_its_step_rule():

    row = {"stored_in": "b" * 40, "captured_at": "2026-11-25T07:00:00", "profiled_at": "b" * 40, "dirty": False,
           "source_sha256": "0123456789abcdef", "median_ms": 0.1, "gbps": 1000.0, "verdict": None, "step": False}
    t = {"kernel": "softmax", "revision": "torch", "shape": [4, 64], "dtype": "fp32", "gpu": "H100",
         "path": "p.json", "entries": [row]}
    text = history_text.render(t)
    assert "(1 entry of p.json)" in text and "STEP is" not in text  # nothing judged: no rule to explain
    judged = dict(row, stored_in="c" * 40, verdict="same", ratio=1.019, p_value=1e-56, band=0.02,
                  source_changed=False, driver_changed=False)
    text = history_text.render(dict(t, entries=[row, judged]))
    assert "(2 entries of p.json)" in text
    rule = text.splitlines()[-1]
    assert "beyond the noise band" in rule and "p < 0.01" in rule and "inside the band is 'same'" in rule


def test_report_refuses_a_shallow_clone_whose_history_plots_it_would_drop(tmp_path):
    """A CI job that checks out with depth 1 and runs `kernlog report` would redraw every history plot from one
    commit and commit the loss: report (and --check) stop in one line with the fix instead."""
    from click.testing import CliRunner

    from kernlog.commands.main import main

    from .helpers import git, git_repo

    src = git_repo(tmp_path / "src")
    (src / "pyproject.toml").write_text("[tool.kernlog]\n")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "one")
    (src / "README").write_text("two\n")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "two")
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{src}", "shallow")
    for args in (["report"], ["report", "--check"]):
        got = CliRunner().invoke(main, ["--root", str(tmp_path / "shallow"), *args])
        assert got.exit_code == 2 and got.stderr.startswith(f"kernlog: {tmp_path / 'shallow'} is a shallow clone: "), \
            got.output
        assert "`git fetch --unshallow` (in CI, check out with fetch-depth: 0)" in got.stderr
