"""Corrupt input through the CLI: each way a stored profile can be bad is one line on stderr
naming the file and the fix, a non-zero exit, no traceback and nothing written; one bad file
never hides the others from `list` and `report`; a bad ncu report stops only `report --check`
(and what needs its bytes), the profile read from its JSON; a save that dies leaves a whole pair."""
import json
import math
import os
import shutil

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.store import integrity
from kernlog.store import profiles as store

from .helpers import FULL_REP, SECTIONS_REP, make_record, put, scratch_repo

BAD = "profiles/nvidia-h100-80gb-hbm3/softmax/torch.8192x4096.fp32"
FIX = "kernlog profile softmax --rev torch --shape 8192x4096 --dtype fp32 --force"


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """Three good softmax profiles and the log rendered from them (built once: reading the
    ncu reports is the slow part)."""
    root = scratch_repo(tmp_path_factory.mktemp("golden"))
    put(root, make_record("torch", median_ms=0.12), report=FULL_REP)
    put(root, make_record("torch_compile", report=SECTIONS_REP, median_ms=0.09, seed=1), report=SECTIONS_REP)
    put(root, make_record("v0_naive", median_ms=0.3, kernel="softmax", seed=2))
    assert run(root, "report").exit_code == 0
    return root


@pytest.fixture
def repo(golden, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(golden, root, symlinks=True)
    return root


def fresh(path):
    path.mkdir(parents=True)
    return scratch_repo(path)


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def snapshot(root):
    """Every file kernlog could write: the log, reports/ and profiles/."""
    files = [*root.glob("*.md"), *root.glob("reports/**/*"), *root.glob("profiles/**/*")]
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(files) if p.is_file()}


def edit_json(root, change):
    path = root / f"{BAD}.json"
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))


def report_of(root, name=BAD):
    """The report the profile `name` (a path without .json) names."""
    path = root / f"{name}.json"
    return path.parent / json.loads(path.read_text())["ncu"]["report"]


def truncate(root):
    rep = report_of(root)
    rep.write_bytes(rep.read_bytes()[:1000])


def remove(root):
    report_of(root).unlink()


def foreign(root):
    """Another profile's valid report copied over this one's."""
    shutil.copy(report_of(root, "profiles/nvidia-h100-80gb-hbm3/softmax/torch_compile.8192x4096.fp32"),
                report_of(root))


def same_size_other_bytes(root):
    rep = report_of(root)
    data = bytearray(rep.read_bytes())
    data[len(data) // 2] ^= 0x01
    rep.write_bytes(bytes(data))


def drop(*keys):
    def change(rec):
        d = rec
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return lambda root: edit_json(root, change)


def setting(value, *keys):
    def change(rec):
        d = rec
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return lambda root: edit_json(root, change)


def invalid_json(root):
    (root / f"{BAD}.json").write_text('{"schema": 1, "kernel": "softmax",')


# A bad report: the profile still reads from its JSON (show, diff and list name a report that is
# missing or of another size in one line; they hash nothing, so a same-size one passes them);
# `report --check` fails, naming the file and the `git checkout` that restores it.
REPORT_CASES = {
    "truncated report": (truncate, "ncu report truncated or replaced", "is 1000 bytes, not the 1321356 recorded"),
    "missing report": (remove, "ncu report missing", ""),
    "foreign report": (foreign, "ncu report truncated or replaced", "is 123109 bytes, not the 1321356 recorded"),
    "same-size report, other bytes": (same_size_other_bytes, "ncu report replaced",
                                      "has the recorded size but another sha256 (other bytes)"),
}

CASES = {
    "missing samples field": (drop("timing", "samples_ms"), "lacks the field timing.samples_ms"),
    "missing metrics": (drop("metrics"), "lacks the field metrics"),
    "a catalog metric removed": (drop("metrics", "dram_gbps"), "lacks the field metrics.dram_gbps"),
    "missing gpu name": (drop("gpu", "name"), "lacks the field gpu.name"),
    "shape of wrong type": (setting("8192x4096", "shape"), "has shape a str, expected list"),
    "metrics of wrong type": (setting([1.0], "metrics"), "has metrics a list, expected dict"),
    "samples of wrong type": (setting("0.1 0.2", "timing", "samples_ms"), "has timing.samples_ms a str"),
    "report size of wrong type": (setting("1321356", "ncu", "report_bytes"), "has ncu.report_bytes a str"),
    "empty samples": (setting([], "timing", "samples_ms"), "has no timing samples"),
    "NaN sample": (setting([0.1, math.nan, 0.1], "timing", "samples_ms"), "timing sample of nan ms"),
    "inf sample": (setting([0.1, math.inf], "timing", "samples_ms"), "timing sample of inf ms"),
    "NaN metric": (setting(math.nan, "metrics", "dram_mb"), "metrics.dram_mb = nan"),
    "zero wall time": (setting(0.0, "metrics", "wall_ms"), "metrics.wall_ms = 0.0"),
    "invalid JSON": (invalid_json, "cannot read profile"),
    "not a profile": (setting(7, "schema"), "is not a kernlog profile"),
    "JSON of another revision": (setting("v0_naive", "revision"), "holds softmax/v0_naive 8192x4096 fp32"),
}


def one_bad_line(result, fragment, path=BAD):
    """Exactly one line on stderr: it names the file, the problem and the fix."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert path in lines[0] and fragment in lines[0] and FIX in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", CASES)
def test_show_diff_and_report_check_refuse_a_bad_profile_in_one_line(repo, case):
    corrupt, fragment = CASES[case]
    corrupt(repo)
    before = snapshot(repo)
    one_bad_line(run(repo, "show", "softmax/torch"), fragment)
    one_bad_line(run(repo, "diff", "softmax/torch", "softmax/torch_compile"), fragment)
    one_bad_line(run(repo, "report", "--check"), fragment)
    assert snapshot(repo) == before


@pytest.mark.parametrize("case", CASES)
def test_list_marks_the_bad_profile_and_lists_the_others(repo, case):
    corrupt, fragment = CASES[case]
    corrupt(repo)
    before = snapshot(repo)
    r = run(repo, "list")
    one_bad_line(r, fragment)
    softmax = r.stdout.split("\nsoftmax ")[1].splitlines()[1:]
    rows = {ln.split()[0]: ln for ln in softmax[:next(i for i, ln in enumerate(softmax) if ln[:1] != " ")]}
    assert "nvidia-h100-80gb-hbm3: 8192x4096 fp32 UNREADABLE (" in rows["torch"]
    for rev in ("torch_compile", "v0_naive"):
        assert rows[rev].endswith("nvidia-h100-80gb-hbm3: 8192x4096 fp32"), rows[rev]
    assert snapshot(repo) == before


@pytest.mark.parametrize("case", CASES)
def test_report_renders_the_others_names_the_bad_one_and_fails(repo, case):
    """`kernlog report` still writes the log (the bad profile named where its figures would
    be) but exits non-zero with one line, so the gap is never silent; nothing else is written."""
    corrupt, fragment = CASES[case]
    corrupt(repo)
    before = snapshot(repo)
    r = run(repo, "report")
    assert one_bad_line(r, fragment).startswith("kernlog: left out of KERNEL_LOG.md: ")
    after = snapshot(repo)
    after.pop("KERNEL_LOG.md")
    before.pop("KERNEL_LOG.md")
    section = after["reports/softmax.md"].decode()  # the kernel page, from the profiles kept
    charts = [k for k in after if "_roofline_" in k or "_arc_" in k]  # drawn from the profiles the log kept
    written = {k for k in after if k.startswith("reports/")}  # each kernel's page and these charts
    assert charts and all(after[k] for k in charts) and all(k.endswith(".md") or k in charts for k in written)
    assert {k: v for k, v in after.items() if k not in written} == {
        k: v for k, v in before.items() if not k.startswith("reports/")}
    assert "| torch_compile (reference) |" in section and "### v0_naive\n" in section
    assert "| torch (reference) |" not in section
    assert "**Left out, failing verification**" in section and f"`{FIX}`" in section and fragment in section
    one_bad_line(run(repo, "report", "--check"), fragment)  # what was written does not pass


def report_line(result, short, what):
    """Exactly one line on stderr, naming the damaged report of softmax/torch, what is wrong
    with it, and the `git checkout` of that file; (the line, the file)."""
    assert "Traceback" not in result.output and isinstance(result.exception, (SystemExit, type(None))), result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    rep = lines[0].split(f"{short}: ", 1)[1].split(",", 1)[0].split(" ", 1)[0]
    assert rep.startswith("profiles/nvidia-h100-80gb-hbm3/softmax/8192x4096.fp32.") and rep.endswith(".ncu-rep")
    assert f"{short}: {rep}{f' {what}' if what else ''}, named by softmax/torch " in lines[0], lines[0]
    assert lines[0].endswith(f"; on a CPU, restore it: `git checkout -- {rep}`"), lines[0]
    assert "; re-profile on a GPU with `kernlog profile softmax --rev torch --shape 8192x4096 --dtype fp32" in lines[0]
    return lines[0], rep


@pytest.mark.parametrize("case", REPORT_CASES)
def test_a_bad_report_is_named_by_report_check_and_never_stops_show_diff_list_or_report(repo, case):
    corrupt, short, what = REPORT_CASES[case]
    corrupt(repo)
    before = snapshot(repo)
    glanced = short != "ncu report replaced"  # by its size
    for args in (["show", "softmax/torch"], ["diff", "softmax/torch", "softmax/torch_compile"]):
        r = run(repo, *args)
        assert r.exit_code == 0 and "softmax/torch" in r.stdout, r.output
        if glanced:
            line, _ = report_line(r, short, what)
            assert line.startswith("kernlog: passed over: ") and "read from the JSON all the same" in line
        else:
            assert r.stderr == ""
    r = run(repo, "list")
    assert r.exit_code == 0 and "UNREADABLE" not in r.stdout
    if glanced:
        report_line(r, short, what)
    r = run(repo, "report", "--check")
    assert r.exit_code == 2 and "up to date" in r.stdout  # the log reads the JSONs: only the report is wrong
    line, rep = report_line(r, short, what)
    assert line.startswith(f"kernlog: {short}: {rep}") and (repo / rep).exists() == (case != "missing report")
    assert snapshot(repo) == before
    r = run(repo, "report")  # the log and its pages are what they were: they read the JSONs alone
    assert r.exit_code == 0 and r.stderr == "" and snapshot(repo) == before


def test_one_line_per_bad_file_and_the_good_ones_still_listed(repo):
    put(repo, make_record("torch", kernel="softmax", shape=(4096, 1024)))
    truncate(repo)
    other = repo / "profiles/nvidia-h100-80gb-hbm3/softmax/v0_naive.8192x4096.fp32.json"
    other.write_text("")
    truncated = "ncu report truncated or replaced: profiles/nvidia-h100-80gb-hbm3/softmax/8192x4096.fp32."
    for args, want in ((["list"], ["v0_naive", truncated]), (["report"], ["v0_naive"]),
                       (["report", "--check"], [truncated, "v0_naive"])):
        r = run(repo, *args)
        assert r.exit_code == 2 and "Traceback" not in r.output
        lines = r.stderr.splitlines()
        assert len(lines) == len(want), r.stderr
        for line, fragment in zip(lines, want, strict=True):
            assert ("v0_naive.8192x4096.fp32.json" in line) if fragment == "v0_naive" else (fragment in line), line
    listed = run(repo, "list").stdout
    assert "nvidia-h100-80gb-hbm3: 4096x1024 fp32, 8192x4096 fp32" in listed and "UNREADABLE" in listed
    page = (repo / "reports" / "softmax.md").read_text()
    assert "| torch_compile (reference) |" in page and "### v0_naive\n" not in page


def test_a_bad_file_of_one_revision_does_not_block_show_of_another(repo):
    truncate(repo)
    r = run(repo, "show", "softmax/torch_compile")
    assert r.exit_code == 0 and "softmax/torch_compile" in r.output


def test_profiles_from_before_report_hashes_are_listed_with_a_note_not_an_error(repo):
    for path in (repo / "profiles").rglob("*.json"):
        rec = json.loads(path.read_text())
        del rec["ncu"]["report_sha256"]
        old = path.with_suffix(".ncu-rep")  # and its report under the profile's own name, as then
        shutil.copy(path.parent / rec["ncu"]["report"], old)
        rec["ncu"]["report"] = old.name
        path.write_text(json.dumps(rec))
    r = run(repo, "list")
    assert r.exit_code == 0 and r.stderr == ""
    assert "note: 3 profile(s) predate report hashes: their .ncu-rep is checked by size only" in r.stdout
    assert run(repo, "report", "--check").exit_code == 0
    assert run(repo, "show", "softmax/torch").exit_code == 0


def test_a_killed_forced_save_leaves_a_pair_every_command_reads(repo, tmp_path):
    """The pair write (tests/test_store.py kills it at every step) seen through the CLI: at
    each step the store holds the old pair or the new one, and list, show and report agree."""
    log = (repo / "KERNEL_LOG.md").read_text()
    seen = set()
    for k in range(1, 40):
        root = fresh(tmp_path / f"k{k}")
        for p in [*repo.glob("profiles/**/*"), *repo.glob("reports/*")]:  # the plots the log links too
            if p.is_file():
                (root / p.relative_to(repo)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(p, root / p.relative_to(repo))
        (root / "KERNEL_LOG.md").write_text(log)
        new = tmp_path / f"new{k}.ncu-rep"
        shutil.copy(SECTIONS_REP, new)
        record = make_record("torch", median_ms=0.5)  # before the fork: ncu_report's threads do not fork
        pid = os.fork()
        if pid == 0:
            try:
                calls = [0]
                real = os.replace

                def dying(*a, **kw):
                    calls[0] += 1
                    if calls[0] == k:
                        os._exit(9)
                    return real(*a, **kw)

                os.replace = dying
                store.save_profile(root, record, new, force=True)
                os._exit(0)
            finally:
                os._exit(1)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        assert code in (0, 9)
        r = run(root, "list")
        assert r.exit_code == 0 and r.stderr == "", r.output
        shown = run(root, "show", "softmax/torch", "--format", "json")
        assert shown.exit_code == 0, shown.output
        is_new = json.loads(shown.stdout)["metrics"]["wall_ms"] > 0.4
        seen.add(is_new)
        check = run(root, "report", "--check")  # the log was rendered from the old pair
        assert (check.exit_code, "out of date" in check.output) == ((2, True) if is_new else (0, False))
        if code == 0:
            break
    assert seen == {False, True}


def test_prune_removes_at_reports_and_their_profiles_still_load(tmp_path):
    root = scratch_repo(tmp_path)
    now = put(root, make_record("torch"))
    old = make_record("torch_compile")
    old["git"] = {"commit": "c" * 40, "dirty": False}
    tmp = put(root, old)  # stored, then moved under at/ as --at does
    at = tmp.parent / "at" / ("c" * 12)
    at.mkdir(parents=True)
    rep = tmp.parent / json.loads(tmp.read_text())["ncu"]["report"]
    (at / rep.name).write_bytes(rep.read_bytes())
    tmp.rename(at / tmp.name)
    result = CliRunner().invoke(main, ["--root", str(root), "prune", "--dry-run"])
    assert result.exit_code == 0 and (at / rep.name).exists() and "would free" in result.output
    result = CliRunner().invoke(main, ["--root", str(root), "prune"])
    assert result.exit_code == 0, result.output
    assert not list(at.glob("*.ncu-rep")) and store.load_profile(root, now).ncu.pruned is None
    rec = store.load_profile(root, at / tmp.name)  # its report gone on purpose: still loads
    assert "--at " + "c" * 40 in rec.ncu.pruned["again"] and rec.metrics["wall_ms"] > 0
    data = rec.to_dict()
    del data["ncu"]["pruned"]
    (at / tmp.name).write_text(json.dumps(data))
    lost = store.load_profile(root, at / tmp.name)  # without the mark the report is lost: said, still read
    assert lost.report_problem.startswith(f"ncu report missing: {(at / rep.name).relative_to(root)}")


def test_prune_removes_reports_no_profile_names_and_keeps_named_ones(tmp_path):
    root = scratch_repo(tmp_path)
    now = put(root, make_record("torch"))
    named = now.parent / json.loads(now.read_text())["ncu"]["report"]
    orphan = now.parent / "8x8.fp32.0123456789abcdef.ncu-rep"  # a replaced save's report
    orphan.write_bytes(b"x" * 1000)
    other = now.parent / "notes.ncu-rep"  # not a kernlog report name: never touched
    other.write_bytes(b"y")
    result = CliRunner().invoke(main, ["--root", str(root), "prune", "--dry-run"])
    assert result.exit_code == 0 and orphan.exists() and "8x8.fp32.0123456789abcdef" in result.output
    bad = now.parent / "broken.json"  # a JSON that cannot be read may name any report: none goes
    bad.write_text("{")
    CliRunner().invoke(main, ["--root", str(root), "prune"])
    assert orphan.exists()
    bad.unlink()
    result = CliRunner().invoke(main, ["--root", str(root), "prune"])
    assert result.exit_code == 0, result.output
    assert not orphan.exists() and named.exists() and other.exists()
    assert store.load_profile(root, now).metrics["wall_ms"] > 0
    # a named report stored compressed is named by its plain name: it stays
    from kernlog.store.reports import compress_reports

    compress_reports(root)
    xz = named.with_name(named.name + ".xz")
    assert xz.exists() and not named.exists()
    CliRunner().invoke(main, ["--root", str(root), "prune"])
    assert xz.exists() and store.load_profile(root, now).metrics["wall_ms"] > 0


@pytest.mark.parametrize("damage", ["truncate the report", "break the JSON"])
def test_the_cpu_remedy_is_a_command_that_restores_the_committed_files(tmp_path, damage):
    """Besides the GPU's re-profile, a bad profile's error gives the `git checkout` that brings the
    committed pair back on a CPU; run as printed, it does."""
    import re
    import shlex

    from .helpers import git, git_repo

    root = git_repo(tmp_path / "repo")
    path = put(root, make_record("torch"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "profile")
    report = path.with_name(json.loads(path.read_text())["ncu"]["report"])
    if damage == "truncate the report":  # the profile loads; `report --check` names the report
        report.write_bytes(report.read_bytes()[:100])
        (message,) = integrity.check_stored(root)
        command = re.search(r"restore it: `(git checkout -- [^`]+)`", message).group(1)
        assert shlex.split(command)[3:] == [str(report.relative_to(root))]
    else:
        path.write_text("{")
        with pytest.raises(store.ProfileError) as err:
            store.load_profile(root, path)
        message = str(err.value)
        assert "re-profile on a GPU with `kernlog profile softmax --rev torch" in message
        command = re.search(r"on a CPU, restore the committed files: `(git checkout -- [^`]+)`", message).group(1)
        assert shlex.split(command)[3:] == [str(path.relative_to(root))]
    git(root, *shlex.split(command)[1:])
    assert store.load_profile(root, path).report_problem is None and integrity.check_stored(root) == []
