"""kernlog noise on the CPU, its processes faked: interleaved runs, the first run's picks pinned
for every later process, and one calibration per revision written with its runs."""
import json

import pytest

from kernlog.capture import noise_runs, profiler
from kernlog.errors import GateFailure
from kernlog.run import gate
from kernlog.store import calibrations

from .helpers import GPU, scratch_repo


def _fake(monkeypatch, picks):
    calls = []

    def timing_run(root, key, names, tmp, env):
        pinned = json.loads(open(env[profiler.PIN_ENV]).read()) if env else None
        calls.append(("time", key[0], tuple(names), pinned))
        i = len([c for c in calls if c[0] == "time"])
        return {n: {"samples_ms": [0.1 * (1 + 0.001 * i)] * 20, "clocks": {"sm_mhz": {"median": 1980.0}},
                    "config": {f"{n}|k": picks[(i - 1) % len(picks)]}} for n in names}

    def run_ncu(cmd, timeout, env=None):
        calls.append(("ncu", tuple(cmd[-2:]), json.loads(open(env[profiler.PIN_ENV]).read())))

    def build_record(report, rev, samples, range_name=None, clocks=None):
        return {"metrics": {"wall_ms": samples[0], "instructions": 10.0, "block_size": 128.0}}

    monkeypatch.setattr(profiler, "require_gpu", lambda: "ncu")
    monkeypatch.setattr(noise_runs.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(noise_runs, "_timing_run", timing_run)
    monkeypatch.setattr(profiler, "run_ncu", run_ncu)
    monkeypatch.setattr(profiler, "build_record", build_record)
    monkeypatch.setattr(gate, "check_revision", lambda *a, **k: [])  # CUDA inputs: no gate on the CPU
    return calls


def test_runs_interleave_and_later_runs_take_the_first_pick(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)
    calls = _fake(monkeypatch, ["(128,)", "(256,)"])  # a second pick would differ
    paths = noise_runs.calibrate(root, ["softmax/torch", "softmax/torch_compile"], (4, 64), None, 3,
                                    progress=lambda s: None)
    times = [c for c in calls if c[0] == "time"]
    assert [c[2] for c in times] == [("torch", "torch_compile")] * 3  # one process per run, both revisions
    assert times[0][3] is None  # the first run picks
    first = {"torch|k": "(128,)", "torch_compile|k": "(128,)"}
    assert all(c[3] == first for c in times[1:])  # later runs are pinned to it
    assert all(c[2] == first for c in calls if c[0] == "ncu")  # and so is every ncu pass
    assert [c[0] for c in calls] == ["time", "ncu"] * 3
    assert len(paths) == 2
    cal = json.loads(paths[0].read_text())
    assert cal["revision"] == "torch" and len(cal["runs"]) == 3 and cal["config"] == {"torch|k": "(128,)"}
    assert cal["spread"]["wall_ms"]["rel"] == pytest.approx(0.002 / 1.002, rel=1e-3)
    assert [c["revision"] for c in calibrations.load_calibrations(root, GPU["slug"])] == ["torch", "torch_compile"]


def test_a_revision_failing_the_gate_is_not_calibrated(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)
    calls = _fake(monkeypatch, ["(1,)"])
    bad = gate.CheckResult("torch", (4, 64), "fp32", "random", float("inf"), False, "error 1 over tolerance")
    monkeypatch.setattr(gate, "check_revision", lambda *a, **k: [bad])
    with pytest.raises(GateFailure, match="not calibrated"):
        noise_runs.calibrate(root, ["softmax/torch"], (4, 64), None, 3, progress=lambda s: None)
    assert calls == [] and not list((root / "profiles").rglob("*.json"))


def test_an_unknown_revision_names_the_choices(tmp_path, monkeypatch):
    from kernlog.errors import KernlogError

    root = scratch_repo(tmp_path)
    _fake(monkeypatch, ["(1,)"])
    with pytest.raises(KernlogError, match="no revision 'v9' in softmax; revisions: v0_naive"):
        noise_runs.calibrate(root, ["softmax/v9"], None, None, 3, progress=lambda s: None)


def test_without_a_gpu_calibration_says_so_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    import torch

    from kernlog.errors import NoGpu

    root = scratch_repo(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NoGpu, match="no CUDA GPU visible"):
        noise_runs.calibrate(root, ["softmax/torch"], (4, 64), None, 3, progress=lambda s: None)
    assert not list((root / "profiles").rglob("*"))
