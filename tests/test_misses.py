"""`kernlog misses`: the sweeps' missed bars, each with whether ncu profiles of both sides exist
at its point, and one profile command per point that lacks them."""
import json

import pytest
from click.testing import CliRunner

from kernlog.capture import bench
from kernlog.commands.main import main
from kernlog.registry import load_kernel
from kernlog.render import misses

from .helpers import GPU, make_record, put, scratch_repo

COMMON = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0, "run": "r1"}


def _row(rev, shape, value):
    return dict({"kernel": "softmax", "revision": rev, "shape": shape, "dtype": "fp32", "metric": "gbps",
                 "value": value}, **COMMON)


def _repo(tmp_path):
    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    bench._write(root, GPU, kernel, [
        _row("v8_split", "8x128256", 900.0), _row("torch", "8x128256", 1000.0), _row("copy", "8x128256", 1000.0),
        # met: within the band
        _row("v8_split", "4x1048576", 995.0), _row("torch", "4x1048576", 1000.0), _row("copy", "4x1048576", 1000.0),
        # a 2.5 GB tensor: the counterpart at 50% of copy misses the copy bar, its speed bar is met
        _row("triton", "4096x151936", 1500.0), _row("torch", "4096x151936", 1000.0),
        _row("copy", "4096x151936", 3000.0), _row("v10_meet", "4096x151936", 2900.0)])
    put(root, make_record("v8_split", shape=(8, 128256)))
    return root, kernel


def test_each_miss_names_its_figure_and_which_side_lacks_ncu_evidence(tmp_path):
    root, kernel = _repo(tmp_path)
    found, bad = misses.find(root, [kernel])
    assert bad == []
    got = {(m.shape, m.revision, m.against): (round(m.value, 3), m.need, m.profiled) for m in found}
    assert got == {("8x128256", "v8_split", "torch"): (0.9, 1.0, {"v8_split": "current", "torch": "none"}),
                   ("4096x151936", "triton", "copy"): (0.5, 0.9, {"triton": "none"})}
    assert misses.profile_commands(found) == [
        "kernlog profile softmax --rev torch --shape 8x128256 --dtype fp32",
        "kernlog profile softmax --rev triton --shape 4096x151936 --dtype fp32"]


def test_a_stale_profile_is_no_evidence_and_its_command_forces(tmp_path):
    root, kernel = _repo(tmp_path)
    rec = make_record("torch", shape=(8, 128256))
    rec["source_sha256"] = "0" * 64  # an older source of the revision
    put(root, rec)
    (m,) = [m for m in misses.find(root, [kernel])[0] if m.shape == "8x128256"]
    assert m.profiled == {"v8_split": "current", "torch": "stale"}
    assert "kernlog profile softmax --rev torch --shape 8x128256 --dtype fp32 --force" in misses.profile_commands([m])


def test_the_command_lists_the_misses_and_the_profile_commands(tmp_path):
    root, _ = _repo(tmp_path)
    r = CliRunner().invoke(main, ["--root", str(root), "misses", "softmax"])
    assert r.exit_code == 0, r.output
    assert "softmax fp32 8x128256 on NVIDIA H100 80GB HBM3: v8_split 0.90x torch (bar 1.00x); ncu: v8_split current, " \
           "torch none" in r.output
    assert "triton 50.0% of copy (bar 90%)" in r.output
    assert "2 missed bar(s); 2 point(s) without current ncu profiles of both sides:" in r.output
    r = CliRunner().invoke(main, ["--root", str(root), "misses", "softmax", "--format", "json"])
    assert {m["against"] for m in json.loads(r.output)} == {"torch", "copy"}


def _misses(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), "misses", *args])


@pytest.mark.parametrize("args, what", [((), "KERNEL"), (("softmax",), "softmax"),
                                        (("softmax", "--format", "json"), "softmax")])
def test_no_sweep_is_nothing_judged_and_exit_2_not_no_missed_bars(tmp_path, args, what):
    """Nothing judged is never a pass: no sweep of the kernels asked is one line on stderr, exit 2."""
    r = _misses(scratch_repo(tmp_path), *args)
    assert r.exit_code == 2 and r.stdout == "" and "no missed bars" not in r.output
    assert r.stderr.strip().splitlines() == [
        f"kernlog: no sweeps: nothing judged (run kernlog bench {what} --family all on a GPU machine; "
        "or pass --allow-empty to let it pass)"]


def test_allow_empty_lets_no_sweep_pass_and_says_so(tmp_path):
    root = scratch_repo(tmp_path)
    r = _misses(root, "softmax", "--allow-empty")
    assert r.exit_code == 0 and r.stderr == ""
    assert r.stdout.strip() == "no sweeps: nothing judged (run kernlog bench softmax --family all on a GPU machine)"
    r = _misses(root, "softmax", "--allow-empty", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout) == []
    assert r.stderr.strip() == ("kernlog: note: no sweeps: nothing judged "
                                "(run kernlog bench softmax --family all on a GPU machine)")


def test_a_kernel_asked_without_sweeps_is_nothing_judged_beside_one_with_them(tmp_path):
    """layernorm has no sweep though softmax has: `misses layernorm` judged nothing; `misses` judged softmax's."""
    root, _ = _repo(tmp_path)
    r = _misses(root, "layernorm")
    assert r.exit_code == 2 and "no sweeps: nothing judged (run kernlog bench layernorm" in r.stderr
    r = _misses(root)
    assert r.exit_code == 0 and "2 missed bar(s)" in r.stdout


def test_a_sweep_that_judges_no_bar_is_nothing_judged(tmp_path):
    """Only a step and the copy at a small tensor (`kernlog bench --rev` of one step): no reference to
    judge it against, no copy bar under 64 MB, so no bar has a verdict, which is no pass either."""
    root = scratch_repo(tmp_path)
    bench._write(root, GPU, load_kernel(root, "softmax"), [_row("v8_split", "8x4096", 900.0),
                                                           _row("copy", "8x4096", 1000.0)])
    r = _misses(root, "softmax")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "kernlog: no bar judged: the sweeps time no step or counterpart beside a reference, nor a tensor of 64 MB "
        "or more beside the copy (run kernlog bench softmax --family all on a GPU machine; "
        "or pass --allow-empty to let it pass)"]


def test_sweeps_that_judge_bars_and_miss_none_keep_no_missed_bars_and_exit_0(tmp_path):
    root = scratch_repo(tmp_path)
    bench._write(root, GPU, load_kernel(root, "softmax"), [
        _row("v8_split", "4x1048576", 995.0), _row("torch", "4x1048576", 1000.0), _row("copy", "4x1048576", 1000.0)])
    found = misses.judge(root, [load_kernel(root, "softmax")])
    assert found.misses == [] and found.sweeps == 1 and found.bars >= 1
    r = _misses(root, "softmax")
    assert r.exit_code == 0 and r.stdout.strip() == "no missed bars in the sweeps" and r.stderr == ""


def test_an_unknown_kernel_is_one_line_and_a_non_zero_exit(tmp_path):
    r = CliRunner().invoke(main, ["--root", str(scratch_repo(tmp_path)), "misses", "nope"])
    assert r.exit_code != 0 and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_one_command_a_point_each_revision_once_none_where_both_sides_are_profiled(tmp_path):
    """Two bars missed at one point name its revision once; a point whose sides are both profiled
    needs no command; a reference timed in another run is flagged [runs apart]."""
    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    bench._write(root, GPU, kernel, [
        _row("triton", "4096x151936", 1500.0), _row("torch", "4096x151936", 2000.0),
        _row("copy", "4096x151936", 3000.0),  # triton misses both bars here
        _row("v8_split", "8x128256", 900.0), _row("copy", "8x128256", 1000.0),
        dict(_row("torch", "8x128256", 1000.0), run="r2")])  # profiled on both sides, timed apart
    put(root, make_record("v8_split", shape=(8, 128256)))
    put(root, make_record("torch", shape=(8, 128256)))
    found, bad = misses.find(root, [kernel])
    assert bad == []
    assert sorted((m.shape, m.against, m.apart) for m in found) == [
        ("4096x151936", "copy", False), ("4096x151936", "torch", False), ("8x128256", "torch", True)]
    assert misses.profile_commands(found) == [
        "kernlog profile softmax --rev triton --rev torch --shape 4096x151936 --dtype fp32"]
    assert "v8_split 0.90x torch (bar 1.00x) [runs apart]; ncu: v8_split current, torch current" in misses.text(found)


def test_an_unreadable_profile_is_named_and_the_exit_is_non_zero(tmp_path):
    """A profile that fails verification is no evidence: the miss at its point lists that side as
    unprofiled, and the command names the file on stderr and exits non-zero, never silently."""
    root, _ = _repo(tmp_path)
    path = next((root / "profiles").rglob("v8_split.8x128256.fp32.json"))
    path.write_text("{not json")
    r = CliRunner().invoke(main, ["--root", str(root), "misses", "softmax"])
    assert r.exit_code != 0
    assert "ncu: v8_split none, torch none" in r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("kernlog: left out: ") and "v8_split.8x128256.fp32.json" in line


def test_a_reference_that_fails_the_gate_there_is_named_so_and_gets_no_command(tmp_path):
    """torch fails kernlog's gate at an odd matmul shape (‡ in the log): `kernlog profile` would
    refuse it, so a command for it would only fail; the miss says why that side has no profile."""
    from kernlog.spec import FAILS_GATE

    root, kernel = _repo(tmp_path)
    bench._write(root, GPU, kernel, [_row("torch", "8x128256", 1000.0),  # timed all the same, in the same run
                                     dict(_row("torch", "8x128256", 1.0), metric=FAILS_GATE, note="off by 3e-2")])
    (m,) = [m for m in misses.find(root, [kernel])[0] if m.shape == "8x128256"]
    assert m.profiled == {"v8_split": "current", "torch": misses.GATE_FAILED}
    assert misses.profile_commands([m]) == []
    assert "ncu: v8_split current, torch fails the gate" in misses.text([m])
