"""Profiling safety: ncu's command line, its failures, atomic writes, no partial profiles."""
import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernlog.capture import ncurun, options, profiler, timed
from kernlog.errors import KernlogError, NoGpu
from kernlog.registry import load_kernel
from kernlog.run import fanout, parts, picker
from kernlog.store import gates, reports
from kernlog.store import profiles as store

from .helpers import CEILINGS, FULL_REP, GPU, ROOT, make_record, put, scratch_repo, stored_files


def fake_ncu(tmp_path, script):
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_ncu_command_is_an_argument_list_with_ncu_option_names(tmp_path):
    cmd = profiler.ncu_command("/usr/bin/ncu", profiler.Options(clock_control="base"), tmp_path / "r.ncu-rep",
                               tmp_path, "softmax", (8, 16), "fp32", "v0_naive")
    assert isinstance(cmd, list) and cmd[0] == "/usr/bin/ncu"
    assert cmd[cmd.index("--clock-control") + 1] == "base"
    assert cmd[cmd.index("--cache-control") + 1] == "all"
    assert cmd[cmd.index("--nvtx-include") + 1] == "kl.v0_naive/"
    # the start/end range too: kernels another thread launches (autograd's backward) are in it alone
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--nvtx-include"] == ["kl.v0_naive/", "kl.v0_naive"]
    assert cmd.count("--section") == len(profiler.metrics.SECTIONS) and "--set" not in cmd
    assert cmd[-6:] == ["kernlog.run.target", str(tmp_path), "softmax", "8x16", "fp32", "v0_naive"]
    assert sys.executable in cmd


def test_counter_permission_error_is_named(tmp_path):
    ncu = fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"; exit 1\n')
    with pytest.raises(NoGpu, match="performance counters"):
        profiler.run_ncu([ncu], 10)


def test_ncu_failure_and_empty_capture(tmp_path):
    with pytest.raises(KernlogError, match="exited with 3: boom"):
        profiler.run_ncu([fake_ncu(tmp_path, "echo boom >&2; exit 3\n")], 10)
    with pytest.raises(KernlogError, match="profiled no kernel"):
        profiler.run_ncu([fake_ncu(tmp_path, 'echo "==WARNING== No kernels were profiled."\n')], 10)


def test_the_pins_reach_the_ncu_process_in_its_environment(tmp_path):
    """The ncu pass runs the configs the timing pass picked only if the process sees PIN_ENV."""
    ncu = fake_ncu(tmp_path, f'[ "${profiler.PIN_ENV}" = /pins.json ] || {{ echo "no pins" >&2; exit 4; }}\n')
    profiler.run_ncu([ncu], 10, env={profiler.PIN_ENV: "/pins.json"})
    with pytest.raises(KernlogError, match="exited with 4: no pins"):
        profiler.run_ncu([ncu], 10)


def test_no_ncu_on_path(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(profiler.provenance, "find_ncu", lambda: None)
    with pytest.raises(NoGpu, match="ncu"):
        profiler.require_gpu()


def test_save_refuses_to_overwrite_without_force(tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("torch")
    rep = tmp_path / "a.ncu-rep"
    rep.write_bytes(b"report-1")
    path = store.save_profile(root, dict(rec), rep, force=False)
    rep.write_bytes(b"report-2")
    with pytest.raises(KernlogError, match="--force"):
        store.save_profile(root, dict(rec), rep, force=False)
    assert store.report_path(root, store.load_profile(root, path)).read_bytes() == b"report-1"
    store.save_profile(root, dict(rec), rep, force=True)
    assert store.report_path(root, store.load_profile(root, path)).read_bytes() == b"report-2"


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x.json"
    target.write_text("old")

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        store.write_atomic(target, b"new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.json"]


@pytest.mark.parametrize("name", ["../x", "a/b", "", "UPPER", ".hidden"])
def test_path_components_cannot_escape(name):
    with pytest.raises(KernlogError):
        store.stem(name, (1, 2), "fp32")


class FakeTimer:
    def samples(self, fn, **kw):
        fn()
        return [0.1, 0.11, 0.1]


def _cpu_profiler(monkeypatch, run_ncu, ncu="ncu"):
    monkeypatch.setattr(profiler.gated, "gate_workers", lambda n, cpus=None: 1)  # gates here, on any host
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    monkeypatch.setattr(profiler, "require_gpu", lambda: ncu)
    monkeypatch.setattr(profiler.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(profiler.provenance, "quick_gpu_slug", lambda: None)  # not this host's nvidia-smi
    monkeypatch.setattr(profiler.timing, "Timer", FakeTimer)
    monkeypatch.setattr(profiler, "ceilings", lambda *a: {"copy_gbps": 3000.0, "matmul_bf16_tflops": 700.0})
    monkeypatch.setattr(profiler, "run_ncu", run_ncu)


def _softmax(root):
    """softmax with its gate cut to two small shapes (every dtype and case kept): these tests follow
    `profile`'s stages around the gate -- refused, interrupted, re-checked, pinned -- not the gate's
    coverage, which test_gate_all_kernels checks; softmax's whole gate (27 shapes x 2 dtypes x 5
    cases) took 20-30 s of CPU in each of them."""
    return dataclasses.replace(load_kernel(root, "softmax"), check_shapes=((4, 64), (7, 33)), families=())


def _cpu_bench(monkeypatch):
    """kernlog.capture.bench on this CPU as if on GPU (helpers.GPU): fake timer, fixed ceilings."""
    from kernlog.capture import bench

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "require_gpu", lambda: "ncu")
    monkeypatch.setattr(bench.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(bench.provenance, "versions", lambda *a: {"torch": "2.11", "triton": "3.6"})
    monkeypatch.setattr(bench.timing, "Timer", FakeTimer)
    monkeypatch.setattr(bench, "ceilings", lambda *a, **k: dict(CEILINGS))
    monkeypatch.setattr(bench.gated, "gate_workers", lambda n, cpus=None: 1)  # gates here, on any host


def test_interrupted_profile_leaves_nothing_partial(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)

    def interrupted(cmd, timeout, env=None):
        report = cmd[cmd.index("--export") + 1]
        open(report, "wb").write(b"half a report")
        raise KeyboardInterrupt

    _cpu_profiler(monkeypatch, interrupted)
    kernel = _softmax(root)
    with pytest.raises(KeyboardInterrupt):
        profiler.profile(root, kernel, [kernel.revision("torch")], profiler.Options(shape=(4, 64)), lambda s: None)
    assert stored_files(root) == []  # the gate's outcome aside, kept as it passed before the cut
    assert gates.load(root, GPU["slug"], "softmax")["torch"]["passed"] is True


def test_a_current_profile_is_skipped_and_a_stale_one_profiled_again_without_a_flag(tmp_path, monkeypatch):
    """The edit loop as typed: after an edit, plain `kernlog profile` re-profiles the revision whose
    source changed (git keeps the committed profile to diff against); one at its source hash is skipped."""
    root = scratch_repo(tmp_path)
    calls = _fake_profile(monkeypatch)
    kernel = load_kernel(root, "softmax")
    put(root, make_record("torch"))
    path = put(root, dict(make_record("v5_tuned"), source_sha256="0" * 64))
    said = []
    written = profiler.profile(root, kernel, [kernel.revision("torch"), kernel.revision("v5_tuned")],
                               profiler.Options(), said.append)
    assert [c[0] for c in calls] == [("v5_tuned",)] and written == [path]
    assert any("skip softmax/torch: profiled on" in s and "at this source hash" in s for s in said)
    assert any("softmax/v5_tuned: source changed since" in s and "kernlog diff HEAD:softmax/v5_tuned" in s
               for s in said), said
    assert json.loads(path.read_text())["source_sha256"] != "0" * 64


def _no_gpu_touched():
    raise AssertionError("torch and CUDA were started for a ladder with nothing to profile")


def test_an_unchanged_ladder_ends_before_torch_or_the_gpu_is_started(tmp_path, monkeypatch):
    """The re-run of an unchanged ladder decides from nvidia-smi's GPU name alone: every revision
    current or lacking what it needs (Liger-Kernel missing) is skipped, one line says nothing is
    left, and neither CUDA nor the gate is started."""
    from kernlog import frameworks

    root = scratch_repo(tmp_path)
    _fake_profile(monkeypatch)
    monkeypatch.setattr(profiler, "require_gpu", _no_gpu_touched)
    monkeypatch.setattr(profiler.provenance, "gpu_info", _no_gpu_touched)
    monkeypatch.setattr(frameworks, "liger_version", lambda: None)
    kernel = load_kernel(root, "softmax")
    ladder = [r for r in kernel.revisions if not r.known_wrong]
    assert [r.name for r in ladder].count("liger") == 1 and len(ladder) > 2
    for r in ladder:
        if r.name != "liger":
            put(root, make_record(r.name))
    said = []
    assert profiler.profile(root, kernel, list(kernel.revisions), profiler.Options(), said.append) == []
    assert all(any(s.startswith(f"skip softmax/{r.name}: profiled on") for s in said) for r in ladder
               if r.name != "liger"), said
    assert "skip softmax/liger: Liger-Kernel is not installed: " + frameworks.LIGER_INSTALL in said, said
    assert frameworks.LIGER_INSTALL.startswith("python3 -m pip install liger-kernel")
    assert said[-1].startswith("softmax: nothing to profile") and "(liger)" in said[-1]


def test_an_unchanged_ladder_on_several_gpus_ends_as_on_one(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)
    _fake_profile(monkeypatch)
    monkeypatch.setattr(profiler, "require_gpu", _no_gpu_touched)
    monkeypatch.setattr(profiler.fanout, "visible_gpus", lambda: ["0", "1"])
    monkeypatch.setattr(profiler.fanout, "profile_on_gpus", lambda *a, **k: _no_gpu_touched())
    kernel = load_kernel(root, "softmax")
    put(root, make_record("torch"))
    put(root, make_record("v5_tuned"))
    said = []
    assert profiler.profile_on_gpus(root, kernel, [kernel.revision("torch"), kernel.revision("v5_tuned")],
                                    profiler.Options(), 2, said.append) == []
    assert said[-1].startswith("softmax: nothing to profile"), said


def test_a_revision_asked_for_alone_that_lacks_what_it_needs_is_refused(tmp_path, monkeypatch):
    from kernlog import frameworks
    from kernlog.errors import Unsupported

    root = scratch_repo(tmp_path)
    _fake_profile(monkeypatch)
    monkeypatch.setattr(profiler, "require_gpu", _no_gpu_touched)
    monkeypatch.setattr(frameworks, "liger_version", lambda: None)
    kernel = load_kernel(root, "softmax")
    with pytest.raises(Unsupported, match="cannot run liger: nothing was profiled"):
        profiler.profile(root, kernel, [kernel.revision("liger")], profiler.Options(), lambda s: None)
    put(root, make_record("torch"))  # named beside a current one, it is still what was asked for
    with pytest.raises(Unsupported, match="cannot run liger: nothing was profiled"):
        profiler.profile(root, kernel, [kernel.revision("torch"), kernel.revision("liger")], profiler.Options(),
                         lambda s: None)
    monkeypatch.setattr(frameworks, "liger_version", lambda: "0.8.5")  # installed, it lacks nothing
    assert kernel.revision("liger").lacks() == ""


def test_the_gpu_torch_names_decides_where_nvidia_smi_named_another(tmp_path, monkeypatch):
    """nvidia-smi's name is a shortcut: where torch's differs, the skips are decided again by it."""
    root = scratch_repo(tmp_path)
    calls = _fake_profile(monkeypatch)
    monkeypatch.setattr(profiler.provenance, "quick_gpu_slug", lambda: "some-other-gpu")
    kernel = load_kernel(root, "softmax")
    put(root, make_record("torch"))  # current on GPU["slug"], missing on some-other-gpu
    said = []
    assert profiler.profile(root, kernel, [kernel.revision("torch")], profiler.Options(), said.append) == []
    assert calls == [] and said[-1].startswith(f"softmax: nothing to profile: every revision has a profile of "
                                               f"its source on {GPU['slug']}")
    assert not any("some-other-gpu" in s for s in said), said  # the decision said is the one that held


def _ncu_beside_the_gates(tmp_path, monkeypatch):
    """profile() on the CPU with an ncu that runs its target (ncu_running_the_target), which must
    have started beside the gates: an ncu process started after them fails the test."""
    _cpu_profiler(monkeypatch, lambda *a, **k: pytest.fail("an ncu process started after the gates"),
                  ncu=ncu_running_the_target(tmp_path))
    real = profiler.build_record  # FULL_REP's kernels sit in the range "kl"
    monkeypatch.setattr(profiler, "build_record",
                        lambda actions, rev, samples, **kw: real(actions, rev, samples, range_name="kl", **kw))


def test_one_gate_runs_in_its_own_process_beside_the_ncu_process(tmp_path, monkeypatch, own_kernels_package,
                                                                 toy_picker):
    """The edit loop's one changed revision: its gate in a process of its own, so the ncu process
    starts and warms up beside it, not after it."""
    root = _toy_repo(tmp_path)
    _ncu_beside_the_gates(tmp_path, monkeypatch)
    kernel = load_kernel(root, "toy")
    said = []
    written = profiler.profile(root, kernel, [kernel.revision("right")], profiler.Options(gate_workers=2),
                               said.append)
    assert "correctness gates of 1 revisions, 1 processes at a time" in said, said
    assert any(re.search(r"toy/right .*: gate passed in \d+\.\d s \(its own process\)$", s) for s in said), said
    assert any("started while the gates ran" in s for s in said), said
    recs = [store.load_profile(root, p) for p in written if p.suffix == ".json"]
    assert [r.revision for r in recs] == ["right"] and recs[0].ncu.rest["process_started_during_gates"]


def test_revision_failing_the_gate_is_not_profiled(tmp_path, monkeypatch):
    from kernlog.errors import GateFailure
    from kernlog.spec import Revision

    root = scratch_repo(tmp_path)
    calls = []
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: calls.append(cmd))
    kernel = _softmax(root)
    wrong = Revision("no_max", "torch", kernel.revisions[0].sources,
                     lambda: (lambda inputs, out: inputs[0].float().exp().div(inputs[0].float().exp().sum(-1, True))
                              .to(inputs[0].dtype)), "softmax without the max subtraction")
    with pytest.raises(GateFailure, match="no_max"):
        profiler.profile(root, kernel, [wrong], profiler.Options(shape=(4, 64)), lambda s: None)
    assert calls == [] and stored_files(root) == []
    assert gates.load(root, GPU["slug"], "softmax")["no_max"]["passed"] is False  # the failure is kept


class _Stop(Exception):
    pass


def test_a_revision_that_goes_wrong_during_the_timing_pass_is_not_profiled(tmp_path, monkeypatch):
    """Right for the gate's launches, wrong from the tenth on (a workspace never reset, say):
    the output is checked again after the timing pass, and nothing is stored."""
    import dataclasses

    import torch

    root = scratch_repo(tmp_path)
    calls = []

    timed = [0]

    class ManyLaunches(FakeTimer):
        def samples(self, fn, **kw):
            for _ in range(20):
                timed[0] += 1
                fn()
            return [0.1] * 20

    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: calls.append(cmd))
    monkeypatch.setattr(profiler.timing, "Timer", ManyLaunches)
    kernel = _softmax(root)
    def load():
        def launch(inputs, out):
            out.copy_(torch.softmax(inputs[0].float(), -1).to(out.dtype))
            if timed[0] > 10:  # the eleventh timed launch on
                out[-1].mul_(2.0)
            return out
        return launch

    rev = dataclasses.replace(kernel.revision("triton"), name="drifts", load=load)
    said = []
    from kernlog.errors import GateFailure

    with pytest.raises(GateFailure, match="drifts"):
        profiler.profile(root, kernel, [rev], profiler.Options(shape=(4, 64)), said.append)
    assert any("FAILED the gate after the timing pass" in s for s in said), said
    # each stage says how long it took (where a slow `kernlog profile` spends its time)
    assert any(re.search(r"drifts .*: gate passed in \d+\.\d s$", s) for s in said), said
    assert not any("timed in" in s for s in said), said  # its timing pass ended in a failure
    assert calls == [] and stored_files(root) == []


def test_the_ncu_pass_is_pinned_to_the_timing_pass_pick(tmp_path, monkeypatch):
    from kernels.common import tuning

    root = scratch_repo(tmp_path)
    seen = {}

    def run_ncu(cmd, timeout, env=None):
        seen.update(json.loads(open(env[profiler.PIN_ENV]).read()))
        raise _Stop

    _cpu_profiler(monkeypatch, run_ncu)
    monkeypatch.setattr(tuning, "used_config", lambda: {"softmax_triton|4|64": "(3, 2)"})
    kernel = _softmax(root)
    with pytest.raises(_Stop):
        profiler.profile(root, kernel, [kernel.revision("torch")], profiler.Options(shape=(4, 64)), lambda s: None)
    assert seen == {"softmax_triton|4|64": "(3, 2)"}


def test_a_revision_the_gpu_cannot_run_is_skipped_with_one_line(tmp_path, monkeypatch):
    import dataclasses

    from kernlog.errors import Unsupported

    root = scratch_repo(tmp_path)
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: None)
    kernel = load_kernel(root, "softmax")

    def needs_clusters():
        raise Unsupported("needs thread-block clusters (compute capability 9.0), this GPU is 8.0")

    rev = dataclasses.replace(kernel.revision("torch"), load=needs_clusters)
    said = []
    with pytest.raises(Unsupported, match="cannot run torch"):
        profiler.profile(root, kernel, [rev], profiler.Options(shape=(4, 64)), said.append)
    assert [s for s in said if "skipped: needs thread-block clusters" in s]
    assert list((root / "profiles").iterdir()) == []


@pytest.mark.ncu
def test_profile_end_to_end_on_gpu(tmp_path):
    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    opts = profiler.Options(shape=(256, 1024), sections=("SpeedOfLight", "LaunchStats"))
    written = profiler.profile(root, kernel, [kernel.revision("torch")], opts, lambda s: None)
    assert len(written) == 1
    rec = store.load_profile(root, written[0])
    assert rec.metrics["duration_us"] > 0 and rec.timing.n >= 20
    # stored compressed (kernlog.store.xz), and whole: its recorded size and sha256 check out
    assert store.compressed(store.report_path(root, rec)).stat().st_size > 1000
    assert reports.verify_report(root, rec) is None
    assert profiler.profile(root, kernel, [kernel.revision("torch")], opts, lambda s: None) == []


def _timed(name, config=None):
    kernel = load_kernel(ROOT, "softmax")
    return profiler.Timed(kernel.revision(name), name, [0.1] * 20, {}, config or {}, {"cases": 1,
                                                                                       "worst_rel_error": 0.0}, 0.0)


def test_revisions_share_an_ncu_process_unless_their_picks_disagree_on_a_key():
    a, b = _timed("v5_tuned", {"k5": "(1,)"}), _timed("v6_autotuned", {"k6": "(2,)"})
    c = _timed("triton", {"k5": "(3,)"})
    assert [[t.rev.name for t in g] for g in profiler.batches([a, b, c])] == [["v5_tuned", "v6_autotuned"], ["triton"]]
    same = _timed("torch", {"k5": "(1,)"})
    assert [len(g) for g in profiler.batches([a, same, b])] == [3]


def _fake_profile(monkeypatch, fail=lambda names: False):
    """profile() on the CPU: the gate and timing pass faked, ncu faked by copying a real report,
    each revision's record a real one (the report's range "kl")."""
    calls = []

    def run_ncu(cmd, timeout, env=None):
        at = cmd.index("kernlog.run.target")
        assert cmd[at + 2:at + 5] == ["softmax", "8192x4096", "fp32"]
        names = tuple(cmd[at + 5:])
        calls.append((names, json.loads(open(env[profiler.PIN_ENV]).read())))
        if fail(names):
            raise KernlogError(f"ncu exited with 1: {names}")
        shutil.copyfile(FULL_REP, cmd[cmd.index("--export") + 1])

    monkeypatch.setattr(profiler.gated, "gate_workers", lambda n, cpus=None: 1)
    monkeypatch.setattr(profiler, "require_gpu", lambda: "ncu")
    monkeypatch.setattr(profiler.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(profiler.provenance, "quick_gpu_slug", lambda: GPU["slug"])
    monkeypatch.setattr(profiler.provenance, "versions", lambda ncu: {"ncu": "2025.3.1", "torch": "2.11.0",
                                                                       "triton": "3.6.0"})
    monkeypatch.setattr(profiler.timing, "Timer", lambda: None)
    monkeypatch.setattr(profiler, "ceilings", lambda *a: CEILINGS)
    monkeypatch.setattr(profiler, "_gate_and_time",
                        lambda kernel, rev, *a: _timed(rev.name, {f"{rev.name}|key": "(1,)"}))
    monkeypatch.setattr(profiler, "run_ncu", run_ncu)
    def build_record(actions, rev, samples, **kw):
        rec = make_record(rev.name)
        return {k: v for k, v in rec.items() if k not in ("captured_at", "check", "config")}

    monkeypatch.setattr(profiler, "build_record", build_record)
    return calls


def test_one_ncu_process_profiles_the_whole_ladder_into_one_shared_report(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)
    calls = _fake_profile(monkeypatch)
    kernel = load_kernel(root, "softmax")
    revs = [kernel.revision(n) for n in ("v0_naive", "v5_tuned", "torch")]
    written = profiler.profile(root, kernel, revs, profiler.Options(), lambda s: None)
    assert calls == [(("v0_naive", "v5_tuned", "torch"),
                      {"v0_naive|key": "(1,)", "v5_tuned|key": "(1,)", "torch|key": "(1,)"})]
    recs = [store.load_profile(root, p) for p in written]
    assert [r.revision for r in recs] == ["v0_naive", "v5_tuned", "torch"]
    assert len({r.ncu.report for r in recs}) == 1 and recs[0].ncu.rest["process_revisions"] == [
        "v0_naive", "v5_tuned", "torch"]
    assert recs[1].config == {"v5_tuned|key": "(1,)"}  # each its own pick, not the merged pins
    # one report, stored compressed: the JSONs name its .ncu-rep with the plain report's size and sha256
    assert [p.name for p in written[0].parent.glob("*.ncu-rep*")] == [recs[0].ncu.report + ".xz"]
    assert reports.verify_report(root, recs[0]) is None
    command = recs[0].ncu.command  # how to run ncu again, without this run's scratch path
    assert command[0] == "ncu" and "--nvtx-include" in command and "--export" not in command
    assert not any(".kernlog-" in c for c in command)


def test_a_profile_records_only_the_picks_of_its_own_timing_pass(tmp_path, monkeypatch):
    """A pick launched before the timing pass (the gate's, another revision's) is not this
    revision's config; each stage's line names its revision."""
    from kernels.common import tuning

    root = scratch_repo(tmp_path)

    def run_ncu(cmd, timeout, env=None):
        at = cmd.index("kernlog.run.target")
        assert cmd[at + 1:at + 4] == [str(root), "softmax", "4x64"]
        shutil.copyfile(FULL_REP, cmd[cmd.index("--export") + 1])

    _cpu_profiler(monkeypatch, run_ncu)
    monkeypatch.setattr(profiler, "build_record", lambda actions, rev, samples, **kw: {
        k: v for k, v in make_record(rev.name).items() if k not in ("captured_at", "check", "config")})
    monkeypatch.setitem(tuning.PICKED, ("stale", 1), "(9,)")
    monkeypatch.setitem(tuning.USED, ("stale", 1), None)
    kernel = _softmax(root)
    said = []
    (path,) = profiler.profile(root, kernel, [kernel.revision("torch")], profiler.Options(shape=(4, 64)), said.append)
    rec = store.load_profile(root, path)
    assert rec.config == {} and rec.captured_at >= "2026"
    assert any(s.startswith("[1/1] softmax/torch 4x64 fp32: done (") for s in said), said
    assert re.fullmatch(r"softmax: 1 profile\(s\) written in \d+ s", said[-1]), said


def test_a_failed_shared_ncu_process_is_retried_one_revision_at_a_time(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)
    calls = _fake_profile(monkeypatch, fail=lambda names: "v5_tuned" in names)
    kernel = load_kernel(root, "softmax")
    revs = [kernel.revision(n) for n in ("v0_naive", "v5_tuned", "torch")]
    with pytest.raises(KernlogError, match="the ncu pass failed for v5_tuned"):
        profiler.profile(root, kernel, revs, profiler.Options(), lambda s: None)
    assert [c[0] for c in calls] == [("v0_naive", "v5_tuned", "torch"), ("v0_naive",), ("v5_tuned",), ("torch",)]
    folder = root / "profiles" / GPU["slug"] / "softmax"
    assert sorted(p.name for p in folder.glob("*.json")) == ["torch.8192x4096.fp32.json",
                                                             "v0_naive.8192x4096.fp32.json"]
    assert len(list(folder.glob("*.ncu-rep.xz"))) == 1  # the same report bytes twice: one hashed name


def test_kernel_times_sum_every_op_and_fold_the_rest_into_other(monkeypatch):
    import torch

    x = torch.randn(128, 128)
    monkeypatch.setattr(timed, "KERNEL_TIMES_KEPT", 2)
    got = profiler.kernel_times(lambda i, o: torch.softmax(i @ i, -1) + torch.relu(i) * 2, x, None)
    names = [k["name"] for k in got["kernels"]]
    assert len(names) == 3 and names[-1].startswith("other (") and "aten::mm" in names
    assert got["kernels"][0]["us"] >= got["kernels"][1]["us"]
    assert abs(sum(k["us"] for k in got["kernels"]) - got["total_us"]) < 0.05
    assert got["launches"] == sum(k["count"] for k in got["kernels"])


def test_a_picker_of_an_older_commit_without_recorded_picks_is_left_alone(monkeypatch):
    """An older commit's kernels import their own copy of the picker (kernels/common/tuning.py
    before it moved into kernlog): it stands for kernlog.tuning once it records its picks as
    kernlog.tuning does, and not before."""
    import sys
    import types

    old = types.ModuleType("kernels.common.tuning")  # an older tuning.py: picks, records none
    monkeypatch.setitem(sys.modules, "kernels.common.tuning", old)
    assert picker.module() is not old
    old.USED = {"k": None}  # half the protocol is none of it
    assert picker.module() is not old
    old.USED, old.used_config, old._PINS = {"k": None}, lambda: {"k": "v"}, []
    assert picker.module() is old and picker.used_config() == {"k": "v"}
    picker.forget_used()
    assert old.USED == {}


def test_a_kernel_filter_reaches_ncu_as_a_regex_on_demangled_names(tmp_path):
    opts = profiler.Options(kernel_filter="(?i).*softmax.*")
    cmd = profiler.ncu_command("/usr/bin/ncu", opts, tmp_path / "r.ncu-rep", tmp_path, "minigpt", (1, 64, 8, 97),
                               "fp32", ["torch"])
    i = cmd.index("--kernel-name")
    assert cmd[i + 1] == "regex:(?i).*softmax.*" and cmd[cmd.index("--kernel-name-base") + 1] == "demangled"
    assert i < cmd.index(profiler.sys.executable)  # an ncu option, before the target process
    assert "--kernel-name" not in profiler.ncu_command("/usr/bin/ncu", profiler.Options(), tmp_path / "r.ncu-rep",
                                                       tmp_path, "softmax", (8, 8), "fp32", ["torch"])


def test_a_killed_profile_s_scratch_folder_is_removed_by_the_next_but_a_live_one_s_stays(tmp_path):
    root = scratch_repo(tmp_path)
    (root / "profiles").mkdir(exist_ok=True)
    dead, live = root / "profiles" / ".kernlog-999999999-ab", root / "profiles" / f".kernlog-{os.getpid()}-cd"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "report.ncu-rep").write_bytes(b"half")
    assert ncurun.clear_abandoned_staging(root) == [dead]
    assert not dead.exists() and (live / "report.ncu-rep").exists()


TOY = '''
import os
import sys
from pathlib import Path

import torch

from kernlog import tuning
from kernlog.spec import Kernel, Revision

SRC = (Path(__file__),)
LAUNCHED = []  # the revisions launched in this process, in order
if os.environ.get("TOY_MAIN_PID") not in (None, str(os.getpid())):
    # kernlog's picker "times" a pick here: the second candidate in every process but the
    # test's own, which the test gives the last (toy_picker), so a pin is seen to cross processes
    tuning.fastest = lambda run, candidates, device: candidates[1]


def _double(wrong_row=None, exit_code=None, name="", hang=False, wrong_in=None):
    def load():
        def launch(inputs, out):
            LAUNCHED.append((name, tuple(out.shape)))
            if os.environ.get("TOY_LOG"):  # launches of every process, by pid
                with open(os.environ["TOY_LOG"], "a") as log:
                    log.write(f"{os.getpid()} {name}\\n")
            if hang:
                import time
                time.sleep(60)  # a launch that never returns (a spin-wait on a flag nobody sets, say)
            if exit_code is not None:
                os._exit(exit_code)  # a revision that takes its process down (a CUDA fault, say)
            out.copy_(inputs[0] * 2)
            if wrong_row is not None and out.shape[0] > wrong_row:
                out[wrong_row] += 1.0
            if wrong_in is not None and out.dtype == wrong_in:
                out[0] *= 1.05  # one row 5% high, in this dtype alone
            return out
        return launch
    return load


def _picky():
    def launch(inputs, out):
        x = inputs[0]
        if "--after" in sys.argv and ("picky", tuple(out.shape)) not in LAUNCHED:  # the ncu warm-up takes a while
            import time
            time.sleep(float(os.environ.get("TOY_WARMUP_S", "4")))
        LAUNCHED.append(("picky", tuple(out.shape)))
        pick = tuning.pick(("picky", *x.shape), ["a", "b", "c"], lambda c: None, x.device)
        if os.environ.get("TOY_LOG"):
            with open(os.environ["TOY_LOG"], "a") as log:
                log.write(f"{os.getpid()} picky:{pick}\\n")
        out.copy_(x * 2)
        return out
    return launch


KERNEL = Kernel(
    "toy",
    (Revision("right", "torch", SRC, _double(name="right"), "x * 2"),
     Revision("one_bad_row", "torch", SRC, _double(wrong_row=2, name="one_bad_row"), "x * 2, but row 2 is off by one"),
     Revision("crashes", "torch", SRC, _double(exit_code=3), "exits mid-launch"),
     Revision("declines", "torch", SRC, _double(), "x * 2 on few rows", refuses=lambda s: "too big" * (s[0] > 4)),
     Revision("ref", "torch", SRC, _double(name="ref"), "the framework's x * 2", role="reference"),
     Revision("hangs", "torch", SRC, _double(hang=True), "never returns", refuses=lambda s: "not 7x33" * (s[0] > 4)),
     Revision("picky", "torch", SRC, _picky, "x * 2 in one of three configs, picked per shape"),
     Revision("bf16_wrong", "torch", SRC, _double(name="bf16_wrong", wrong_in=torch.bfloat16),
              "x * 2, one row 5% high in bf16 alone")),
    make_inputs=lambda shape, dtype, gen, device, case: (
        torch.randn(*shape, generator=gen, device=device).to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]),),
    make_output=lambda inputs: torch.empty_like(inputs[0]),
    reference=lambda inputs, out=None: inputs[0].double() * 2,
    bytes_moved=lambda shape, dtype: 8 * shape[0] * shape[1],
    check_shapes=((3, 5), (7, 33)), bench_shapes=((7, 33),), profile_shape=(7, 33), dtypes=("fp32", "bf16"),
)
'''


@pytest.fixture
def toy_picker(monkeypatch):
    """kernlog's picker, fresh, its "timed" pick the last candidate in the test's own process
    (the toy's other processes take the second: TOY)."""
    from kernlog import tuning

    monkeypatch.setenv("TOY_MAIN_PID", str(os.getpid()))
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[-1])
    for name, empty in (("PICKED", {}), ("USED", {}), ("_PINS", [])):
        monkeypatch.setattr(tuning, name, empty)
    return tuning


def _toy_repo(tmp_path):
    (tmp_path / "kernels" / "toy").mkdir(parents=True)
    (tmp_path / "kernels" / "__init__.py").write_text("")
    (tmp_path / "kernels" / "toy" / "__init__.py").write_text(TOY)
    (tmp_path / "profiles").mkdir()
    return tmp_path


def test_gates_in_their_own_processes_say_right_wrong_and_crashed_apart(tmp_path, monkeypatch, own_kernels_package,
                                                                        toy_picker):
    """`kernlog profile` gates a ladder's revisions in processes of their own, several at once
    (compiling is most of a cold profile): a wrong revision and one that takes its process down
    fail there with their reason, and each verdict comes back under its own revision's name."""
    root = _toy_repo(tmp_path)
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    kernel = load_kernel(root, "toy")
    said = []
    got = profiler.parallel_gates(root, kernel, [kernel.revision(n) for n in ("right", "one_bad_row", "crashes")],
                                  2, said.append)
    assert got["right"][0] == "ok" and got["right"][1]["cases"] == 4 and got["right"][2] >= 0
    assert got["one_bad_row"][0] == "failed" and got["one_bad_row"][1].startswith("one_bad_row 3x5 fp32 random: FAIL")
    assert got["crashes"][0] == "failed" and "exited with 3" in got["crashes"][1]
    assert said[0] == "correctness gates of 3 revisions, 2 processes at a time"
    assert re.fullmatch(r"correctness gates done in \d+\.\d s", said[-1])


def ncu_running_the_target(tmp_path):
    """An "ncu" that runs its target on the CPU, then writes FULL_REP where --export says, and
    what it saw (the target's pid, its GO file and whether it said it was ready) to seen.json."""
    path = tmp_path / "ncu"
    path.write_text(f"""#!{sys.executable}
import json, shutil, subprocess, sys
args = sys.argv[1:]
target = args[args.index({sys.executable!r}):]
proc = subprocess.Popen(target)
proc.wait()
seen = {{"pid": proc.pid, "returncode": proc.returncode}}
if "--after" in target:
    go = target[target.index("--after") + 1]
    seen["go"] = json.load(open(go))
    seen["ready"] = __import__("os").path.exists(go[:-len(".json")] + ".ready")
json.dump(seen, open({str(tmp_path / "seen.json")!r}, "w"))
shutil.copyfile({str(FULL_REP)!r}, args[args.index("--export") + 1])
sys.exit(proc.returncode)
""")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_profile_gates_apart_then_times_only_what_passed(tmp_path, monkeypatch, own_kernels_package, toy_picker):
    from kernlog.errors import GateFailure

    root = _toy_repo(tmp_path)
    calls = []
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: calls.append(cmd), ncu=ncu_running_the_target(tmp_path))
    kernel = load_kernel(root, "toy")
    timed = []
    real_time = profiler._time
    monkeypatch.setattr(profiler, "_time",
                        lambda k, rev, *a, **kw: timed.append(rev.name) or real_time(k, rev, *a, **kw))
    monkeypatch.setattr(profiler, "_ncu_pass", lambda root, kernel, batch, *a: calls.append(batch) or [])
    said = []
    with pytest.raises(GateFailure, match="one_bad_row"):
        profiler.profile(root, kernel, [r for r in kernel.revisions if r.name not in ("picky", "bf16_wrong")],
                         profiler.Options(gate_workers=2), said.append)
    assert timed == ["right", "ref"]  # the wrong, the crashed and the declining revision never reach a timing pass
    assert [[t.rev.name for t in batch] for batch in calls] == [["right", "ref"]]
    assert any(re.search(r"toy/right .*: gate passed in \d+\.\d s \(its own process\)$", s) for s in said), said
    assert any("toy/declines" in s and "skipped: too big" in s for s in said), said
    assert "correctness gates of 4 revisions, 2 processes at a time" in said  # the declining one is not gated
    # in this process, while the gates ran, the reference alone was launched (compiled) at the
    # profile shape; the code under test ran here only after its gate passed
    launched = sys.modules["kernels.toy"].LAUNCHED
    assert launched[0] == ("ref", (7, 33)) and launched.index(("right", (7, 33))) > 0


def test_the_ncu_process_warms_up_while_the_gates_run_then_profiles_only_what_passed(
        tmp_path, monkeypatch, own_kernels_package, toy_picker):
    from kernlog.errors import GateFailure

    root = _toy_repo(tmp_path)
    log = tmp_path / "launches.txt"
    monkeypatch.setenv("TOY_LOG", str(log))
    _ncu_beside_the_gates(tmp_path, monkeypatch)
    kernel = load_kernel(root, "toy")
    said = []
    with pytest.raises(GateFailure, match="one_bad_row"):
        profiler.profile(root, kernel, [kernel.revision(n) for n in ("right", "one_bad_row", "ref")],
                         profiler.Options(gate_workers=2), said.append)
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["returncode"] == 0 and seen["ready"]
    assert seen["go"] == {"revisions": ["right", "ref"], "pins": {}}  # one_bad_row failed its gate
    target = [ln.split()[1] for ln in log.read_text().splitlines() if ln.split()[0] == str(seen["pid"])]
    # while the gates ran, each that passed once, as its gate passed (warmed up; one_bad_row, failed,
    # never); once told, those that passed, warm-up and the profiled launch
    assert sorted(target[:2]) == ["ref", "right"] and target[2:] == ["right"] * 4 + ["ref"] * 4
    recs = [store.load_profile(root, p) for p in stored_files(root) if p.suffix == ".json"]
    assert sorted(r.revision for r in recs) == ["ref", "right"]
    assert all(r.ncu.rest["process_started_during_gates"] for r in recs)
    assert all(r.ncu.rest["warm_seconds"] >= 0 for r in recs)  # its warm-up, kept for the next deal
    assert any(re.match(r"the ncu process warmed 2 revision\(s\) up in \d+\.\d s \(its start ", s) for s in said), said
    assert any(re.match(r"ncu pass of 2: first profiled launch \d+\.\d s after it was told, the last \d+\.\d s "
                        r"later, the report \d+\.\d s after that$", s) for s in said), said
    assert not list((root / "profiles").glob(".kernlog-*"))  # its scratch folder is gone
    assert any("started while the gates ran" in s for s in said), said


def test_the_ncu_process_takes_the_timing_pass_picks_and_the_timing_waits_for_its_warm_up(
        tmp_path, monkeypatch, own_kernels_package, toy_picker):
    """The warm-up picks untimed (the first candidate) and forgets it; told the timing pass's pick
    (the "timed" last one), the target launches that one, also where it had read no pins before.
    No timing pass starts before the target said it was ready."""
    root = _toy_repo(tmp_path)
    log = tmp_path / "launches.txt"
    monkeypatch.setenv("TOY_LOG", str(log))
    _cpu_profiler(monkeypatch, lambda *a, **k: pytest.fail("an ncu process started after the gates"),
                  ncu=ncu_running_the_target(tmp_path))
    real = profiler.build_record
    monkeypatch.setattr(profiler, "build_record",
                        lambda actions, rev, samples, **kw: real(actions, rev, samples, range_name="kl", **kw))
    ready_at_timing = []
    real_time = profiler._time
    monkeypatch.setattr(profiler, "_time", lambda *a, **kw: ready_at_timing.append(
        bool(list((root / "profiles").glob(".kernlog-*/go.ready")))) or real_time(*a, **kw))
    kernel = load_kernel(root, "toy")
    written = profiler.profile(root, kernel, [kernel.revision("right"), kernel.revision("picky")],
                               profiler.Options(gate_workers=2), lambda s: None)
    assert ready_at_timing == [True, True]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["go"] == {"revisions": ["right", "picky"], "pins": {"'picky'|7|33": "'c'"}}
    picks = [ln.split()[1] for ln in log.read_text().splitlines()
             if ln.split()[0] == str(seen["pid"]) and ln.split()[1].startswith("picky:")]
    # warm-up untimed (the first), then the timing pass's pick ("c"), which only the pins give there ("b")
    assert picks == ["picky:a"] + ["picky:c"] * 4
    rec = store.load_profile(root, next(p for p in written if p.name.startswith("picky.")))
    assert rec.config == {"'picky'|7|33": "'c'"}


def test_an_ncu_process_still_warming_up_after_the_gates_is_stopped_and_started_again_later(
        tmp_path, monkeypatch, own_kernels_package, toy_picker):
    root = _toy_repo(tmp_path)
    later = []
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: later.append(cmd), ncu=ncu_running_the_target(tmp_path))
    monkeypatch.setattr(profiler, "READY_WAIT_S", 0.2)
    # the target's warm-up of picky outlasts the gates however slow the machine (it is stopped, not awaited)
    monkeypatch.setenv("TOY_WARMUP_S", "120")
    started = []
    real_start = profiler.start_ncu
    monkeypatch.setattr(profiler, "start_ncu", lambda *a: started.append(real_start(*a)) or started[-1])
    monkeypatch.setattr(profiler, "_ncu_pass", lambda *a: later.append(a[-1]) or [])  # its last argument: run
    kernel = load_kernel(root, "toy")
    said = []
    profiler.profile(root, kernel, [kernel.revision("right"), kernel.revision("picky")],
                     profiler.Options(gate_workers=2), said.append)
    assert "the ncu process was not ready 0 s after the gates: started again later" in said
    (early,) = started
    assert early.proc.returncode is not None and not early.tmpdir.exists()
    assert later == [None]  # the ncu pass gets no process started early: it starts its own


def test_a_stopped_ncu_process_takes_its_whole_group_and_gets_a_sigterm_first(tmp_path):
    """ncu is sent SIGTERM first (it puts the clocks back on its way out), and what it started
    goes too, also a process that outlived it."""
    pids = tmp_path / "pids"
    ncu = tmp_path / "ncu"
    ncu.write_text(f"""#!{sys.executable}
import signal, subprocess, sys, time
child = subprocess.Popen([{sys.executable!r}, "-c",
                          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
open({str(pids)!r}, "w").write(str(child.pid))
def bye(*a):
    open({str(tmp_path / "cleaned")!r}, "w").write("yes")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
time.sleep(60)
""")
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    tmpdir = tmp_path / "scratch"
    tmpdir.mkdir()
    proc = subprocess.Popen([str(ncu)], start_new_session=True)
    for _ in range(200):
        if pids.exists() and pids.read_text():
            break
        time.sleep(0.05)
    run = profiler.NcuRun(["a"], tmpdir, [str(ncu)], proc)
    run.close()
    assert (tmp_path / "cleaned").read_text() == "yes" and not tmpdir.exists()
    status = Path(f"/proc/{int(pids.read_text())}/status")  # it ignores SIGTERM: the SIGKILL ended it
    for _ in range(100):
        if not status.exists() or "State:\tZ" in status.read_text():  # gone, or dead and not yet reaped
            break
        time.sleep(0.05)
    else:
        pytest.fail("the process ncu started outlived it")


def test_an_ncu_process_nobody_tells_what_to_profile_is_stopped_with_its_folder(
        tmp_path, monkeypatch, own_kernels_package, toy_picker):
    """Every revision fails its gate: the waiting ncu process and its scratch folder go."""
    from kernlog.errors import GateFailure

    root = _toy_repo(tmp_path)
    _cpu_profiler(monkeypatch, lambda *a, **k: None, ncu=ncu_running_the_target(tmp_path))
    kernel = load_kernel(root, "toy")
    started = []
    real_start = profiler.start_ncu
    monkeypatch.setattr(profiler, "start_ncu", lambda *a: started.append(real_start(*a)) or started[-1])
    with pytest.raises(GateFailure):
        profiler.profile(root, kernel, [kernel.revision(n) for n in ("one_bad_row", "crashes")],
                         profiler.Options(gate_workers=2), lambda s: None)
    (run,) = started
    assert run.proc.returncode is not None and not run.tmpdir.exists()


def test_the_target_stops_waiting_when_the_profiling_process_is_gone(tmp_path):
    from kernlog.run import target

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    with pytest.raises(SystemExit) as exc:
        target.wait_for_go(tmp_path / "go.json", int(gone))
    assert exc.value.code == 3
    with pytest.raises(SystemExit):
        target.wait_for_go(tmp_path / "go.json", os.getpid(), limit_s=0.2)  # nobody writes it
    (tmp_path / "go.json").write_text('{"revisions": ["a"], "pins": {}}')
    assert target.wait_for_go(tmp_path / "go.json", os.getpid())["revisions"] == ["a"]


def test_warming_the_references_leaves_the_code_under_test_alone_and_a_failure_to_the_timing_pass(
        tmp_path, monkeypatch, own_kernels_package, toy_picker):
    import dataclasses

    root = _toy_repo(tmp_path)
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    kernel = load_kernel(root, "toy")
    broken = dataclasses.replace(kernel.revision("ref"), name="broken_ref", load=lambda: 1 / 0)
    declined = dataclasses.replace(kernel.revision("ref"), name="declined_ref", refuses=lambda s: "no")
    profiler.warm_references(kernel, [broken, *kernel.revisions, declined], (7, 33), "fp32", "cpu")
    assert sys.modules["kernels.toy"].LAUNCHED == [("ref", (7, 33))]


@pytest.mark.parametrize("revisions, cpus, want", [(13, 16, 8), (13, 2, 1), (3, 16, 3), (1, 16, 1), (5, 1, 1)])
def test_gate_workers_take_half_the_cores_at_most_eight(revisions, cpus, want):
    assert fanout.gate_workers(revisions, cpus) == want


def test_profile_on_two_gpus_hands_each_process_the_shape_dtype_and_what_is_left_to_do(tmp_path, monkeypatch):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", shape=(4, 64)))  # profiled already: not handed out
    monkeypatch.setattr(fanout, "visible_gpus", lambda: ["0", "1"])
    monkeypatch.setattr(profiler, "require_gpu", lambda: "ncu")
    monkeypatch.setattr(profiler.provenance, "gpu_info", lambda: GPU)
    handed = []
    monkeypatch.setattr(fanout, "profile_on_gpus", lambda root, name, todo, args, gpus, progress, cost, span:
                        handed.append((name, [r.name for r in todo], args, gpus, span(todo))) or [])
    kernel = load_kernel(root, "softmax")
    revs = [kernel.revision(n) for n in ("v0_naive", "torch", "triton")]
    profiler.profile_on_gpus(root, kernel, revs, profiler.Options(shape=(4, 64), dtype="fp32"), 2, lambda s: None)
    profiler.profile_on_gpus(root, kernel, revs, profiler.Options(shape=(4, 64), gate_workers=1), 2, lambda s: None)
    (name, todo, args, gpus, span), (_, _, one_by_one, _, _) = handed
    assert name == "softmax" and todo == ["v0_naive", "triton"] and gpus == ["0", "1"]
    assert span > parts.ESTIMATE_S["triton"] / parts.MAX_PARTS  # the costs of what is dealt (costs.span)
    assert args[args.index("--shape") + 1] == "4x64" and args[args.index("--dtype") + 1] == "fp32"
    assert "--gate-workers" not in args and one_by_one[one_by_one.index("--gate-workers") + 1] == "1"


def test_a_gate_that_never_returns_fails_in_its_time_limit_naming_it(tmp_path, monkeypatch, own_kernels_package,
                                                                     toy_picker):
    root = _toy_repo(tmp_path)
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    monkeypatch.setattr(profiler, "GATE_TIMEOUT_S", 3.0)  # the gates beside it go on: the ncu warm-up test
    kernel = load_kernel(root, "toy")
    t0 = time.perf_counter()
    got = profiler.parallel_gates(root, kernel, [kernel.revision("hangs")], 2, lambda s: None)
    assert got["hangs"][:2] == ("failed", "its gate did not finish in 3 s")
    assert 3.0 <= got["hangs"][2] < 10.0 and time.perf_counter() - t0 < 10.0  # killed at its limit, not waited out


@pytest.mark.parametrize("smi, visible, want", [
    ("0, GPU-a, Default, H100\n1, GPU-b, Exclusive_Process, H100\n", None, "Exclusive_Process"),
    ("0, GPU-a, Default, H100\n1, GPU-b, Exclusive_Process, H100\n", "0", ""),
    ("0, GPU-a, Default, H100\n1, GPU-b, Exclusive_Process, H100\n", "GPU-b", "Exclusive_Process"),
    ("0, GPU-a, Prohibited, H100\n", "0", "Prohibited"),
    ("0, GPU-a, Default, H100\n", None, ""),
])
def test_a_gpu_that_admits_one_process_is_found(monkeypatch, smi, visible, want):
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, smi, ""))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert fanout.exclusive_compute_mode() == want


def test_on_an_exclusive_gpu_the_gates_run_here_one_by_one(tmp_path, monkeypatch, own_kernels_package, toy_picker):
    """Gate processes beside this one could not create a context: every revision would fail."""
    root = _toy_repo(tmp_path)
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: None)
    monkeypatch.setattr(profiler.gated, "exclusive_compute_mode", lambda: "Exclusive_Process")
    monkeypatch.setattr(profiler, "parallel_gates", lambda *a, **k: pytest.fail("gated in other processes"))
    monkeypatch.setattr(profiler, "_ncu_pass", lambda *a: [])
    kernel = load_kernel(root, "toy")
    said = []
    profiler.profile(root, kernel, [kernel.revision("right"), kernel.revision("ref")],
                     profiler.Options(gate_workers=2), said.append)
    assert "the GPU's compute mode is Exclusive_Process: the gates run one by one in this process" in said
    assert any(re.search(r"toy/right .*: gate passed in \d+\.\d s$", s) for s in said), said



def test_the_gpus_ceilings_are_measured_once_and_the_profile_says_so(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(profiler.timing, "measure_ceilings", lambda timer: measured.append(1) or dict(CEILINGS))
    said = []
    got = profiler.ceilings(tmp_path, "gpu-x", None, False, said.append)
    assert got["copy_gbps"] == 3000.0 and "captured_at" in got
    assert re.fullmatch(r"this GPU's ceilings measured in \d+\.\d s: profiles/gpu-x/ceilings\.json", said[0])
    assert profiler.ceilings(tmp_path, "gpu-x", None, False, said.append)["copy_gbps"] == 3000.0
    assert measured == [1] and len(said) == 1  # stored: read back, not measured again
    profiler.ceilings(tmp_path, "gpu-x", None, True, said.append)  # --force measures again
    assert measured == [1, 1] and len(said) == 2


class _Unnamed:  # a tuning key part without a name: key_text spells it by its address
    pass


def test_a_pick_its_pins_do_not_name_as_they_are_is_a_stray(monkeypatch, tmp_path):
    from kernels.common import tuning

    def kern():
        pass

    named, unnamed = (kern, 4096), (_Unnamed(), 4096)
    monkeypatch.setattr(tuning, "PICKED", {named: "c1", unnamed: "c2"})
    monkeypatch.setattr(tuning, "USED", {named: None, unnamed: None})
    n, u = tuning.key_text(named), tuning.key_text(unnamed)
    assert n == "kern|4096" and "0x" in u
    elsewhere = re.sub(r"0x[0-9a-f]+", "0x7f0000000000", u)  # the key as the timing process spelled it
    assert elsewhere != u
    assert picker.strays(None) == {}  # told no pins: nothing to compare
    assert picker.strays({n: "'c1'"}) == {u: "'c2'"}
    assert picker.strays({n: "'c1'", u: "'c2'"}) == {}
    assert picker.strays({n: "'c1'", elsewhere: "'c2'"}) == {}  # tuned here, and to the pick it was pinned to
    assert picker.strays({n: "'c1'", elsewhere: "'c9'"}) == {u: "'c2'"}  # tuned here to another config
    assert picker.strays({n: "'c3'", u: "'c2'"}) == {n: "'c1'"}  # pinned to another pick
    monkeypatch.delenv(picker.PIN_ENV, raising=False)
    assert picker.pins() is None
    (tmp_path / "pins.json").write_text(json.dumps({n: "'c1'"}))
    monkeypatch.setenv(picker.PIN_ENV, str(tmp_path / "pins.json"))
    assert picker.pins() == {n: "'c1'"}


def _one_picking_kernel(monkeypatch, key, candidates):
    """A kernel of one revision whose launch picks among `candidates` under tuning key `key`,
    with the picker's state emptied: what a target process meets."""
    import types

    from kernels.common import tuning
    from kernlog import registry

    launch = lambda inputs, out: tuning.launch_fastest(key, candidates, lambda c: None, "cpu")  # noqa: E731
    rev = types.SimpleNamespace(load=lambda: launch)
    kernel = types.SimpleNamespace(make_inputs=lambda *a: (), make_output=lambda inputs: None, cases=("random",),
                                   revision=lambda name: rev)
    monkeypatch.setattr(registry, "load_kernel", lambda root, name: kernel)
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "USED", {})
    monkeypatch.setattr(tuning, "_PINS", [])


def test_the_target_stops_before_profiling_a_config_its_timing_pass_did_not_pin(monkeypatch, tmp_path, capsys):
    """A launcher whose tuning key holds an object named by its address (seen: LayerNorm v3's
    autotune over a heuristics object) tunes on its own in the ncu process, which then profiles
    another config than the one timed: the target says so and exits before the NVTX range."""
    from kernels.common import tuning
    from kernlog.run import target

    key = (_Unnamed(), 8)
    _one_picking_kernel(monkeypatch, key, ["only"])
    (tmp_path / "pins.json").write_text(json.dumps({"<_Unnamed object>|8": "'only'"}))  # another key
    monkeypatch.setenv(picker.PIN_ENV, str(tmp_path / "pins.json"))
    with pytest.raises(SystemExit) as exc:
        target.profile_revisions(str(tmp_path), "k", "8", "fp32", ["v3"])
    assert exc.value.code == 4
    said = capsys.readouterr().err
    assert said.startswith(target.TARGET_SAYS + "v3 picked configs its timing pass did not pin")
    with pytest.raises(KernlogError, match="v3 picked configs its timing pass did not pin"):
        ncurun.ncu_outcome(4, said + "==PROF== Disconnected from process 123\n")
    # pinned under the same text, it runs
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "_PINS", [])
    (tmp_path / "pins.json").write_text(json.dumps({tuning.key_text(key): "'only'"}))
    target.profile_revisions(str(tmp_path), "k", "8", "fp32", ["v3"])


def _parsed(argv):
    """`kernlog profile softmax ARGV` as the CLI parses it: the Options its values make."""
    from kernlog.commands.profile import profile as command

    ctx = command.make_context("profile", ["softmax", *argv])
    return profiler.Options.from_cli(**{f.field: ctx.params[f.field] for f in options.FLAGS})


@pytest.mark.parametrize("opts", [
    profiler.Options(),
    profiler.Options(shape=(4, 64), dtype="bf16", force=True, clock_control="base", cache_control="none",
                     sections=("SpeedOfLight", "LaunchStats"), gate_workers=3),
    profiler.Options(shape=(2, 3, 5), gate_workers=1),
])
def test_options_go_to_argv_and_back_through_the_cli_unchanged(opts):
    assert _parsed(opts.to_argv()) == opts


def test_to_argv_writes_the_flags_in_profiles_words_and_order():
    opts = profiler.Options(shape=(4, 64), dtype="fp32", force=True, sections=("A", "B"), gate_workers=2,
                            timing_budget_s=9.0, kernel_filter="x")  # no flag sets the last two
    assert opts.to_argv() == ["--shape", "4x64", "--dtype", "fp32", "--force", "--clock-control", "none",
                              "--cache-control", "all", "--section", "A", "--section", "B", "--gate-workers", "2"]
    assert profiler.Options().to_argv() == ["--clock-control", "none", "--cache-control", "all"]


def test_from_cli_takes_the_kernels_sections_only_without_a_section_flag():
    assert profiler.Options.from_cli(("K1",), sections=()).sections == ("K1",)
    assert profiler.Options.from_cli(("K1",), sections=("S",)).sections == ("S",)
    assert profiler.Options.from_cli(sections=()).sections == profiler.metrics.SECTIONS
    with pytest.raises(TypeError, match="not a profile option: revs"):
        profiler.Options.from_cli(revs=("torch",))


def test_every_flag_is_an_option_of_the_profile_command_and_a_field_of_options():
    from kernlog.commands.profile import profile as command

    fields = {f.name for f in dataclasses.fields(profiler.Options)}
    names = {p.name: p.opts for p in command.params}
    for flag in options.FLAGS:
        assert flag.field in fields and names[flag.field] == [flag.name]


def test_the_gate_covers_every_declared_dtype_whichever_is_profiled(tmp_path, monkeypatch, own_kernels_package,
                                                                   toy_picker):
    """A revision wrong in bf16 alone is refused by `kernlog profile` of fp32, with one line naming
    the failing case; it is never timed and nothing of it is stored."""
    from kernlog.errors import GateFailure

    root = _toy_repo(tmp_path)
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    kernel = load_kernel(root, "toy")
    got = profiler.parallel_gates(root, kernel, [kernel.revision("bf16_wrong"), kernel.revision("right")], 2,
                                  lambda s: None)
    assert got["right"][0] == "ok" and got["right"][1]["cases"] == 4  # 2 shapes x fp32 and bf16
    assert got["bf16_wrong"][0] == "failed" and " bf16 random: FAIL" in got["bf16_wrong"][1]
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: None, ncu=ncu_running_the_target(tmp_path))
    timed = []
    real_time = profiler._time
    monkeypatch.setattr(profiler, "_time",
                        lambda k, rev, *a, **kw: timed.append(rev.name) or real_time(k, rev, *a, **kw))
    monkeypatch.setattr(profiler, "_ncu_pass", lambda root, kernel, batch, *a: [])
    said = []
    with pytest.raises(GateFailure, match="bf16_wrong"):
        profiler.profile(root, kernel, [kernel.revision("right"), kernel.revision("bf16_wrong")],
                         profiler.Options(dtype="fp32"), said.append)
    assert timed == ["right"]
    assert any("toy/bf16_wrong" in s and "bf16 random: FAIL" in s for s in said), said
    assert not [p for p in (root / "profiles").rglob("bf16_wrong*")]
    # each gate's outcome kept for this GPU: the failure marks any stored profile of that source
    kept = gates.load(root, GPU["slug"], "toy")
    assert kept["bf16_wrong"]["passed"] is False and " bf16 random: " in kept["bf16_wrong"]["failure"]
    assert kept["right"]["passed"] is True and {e["by"] for e in kept.values()} == {"profile"}


def test_the_target_takes_a_pin_whose_key_differs_only_by_an_objects_address(monkeypatch, tmp_path):
    """The timing pass's key text for an autotune object over a heuristics object names that
    object's address in its process; the ncu process's object has another address. The pin is
    taken all the same (seen: matmul_relu v0_tiled tuned again under ncu, picked another config,
    and the whole ladder's ncu pass fell back to a process per revision)."""
    from kernels.common import tuning
    from kernlog.run import target

    key = (_Unnamed(), 8)
    _one_picking_kernel(monkeypatch, key, ["a", "b"])
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[0])  # measuring picks "a"
    elsewhere = picker.ADDRESS.sub(" at 0xdeadbeef", tuning.key_text(key))
    assert elsewhere != tuning.key_text(key)
    (tmp_path / "pins.json").write_text(json.dumps({elsewhere: "'b'"}))
    monkeypatch.setenv(picker.PIN_ENV, str(tmp_path / "pins.json"))
    target.profile_revisions(str(tmp_path), "k", "8", "fp32", ["v0"])
    assert tuning.PICKED[key] == "b"


def test_address_free_pins_drop_keys_that_clash():
    pins = picker.AddressFreePins({"<T object at 0x1>|8": "'a'", "<T object at 0x2>|8": "'b'",
                                   "<U object at 0x3>|8": "'c'", "<U object at 0x4>|8": "'c'", "f|8": "'d'"})
    assert pins.get("<T object at 0x9>|8") is None  # two picks under one plain key: measured, not guessed
    assert pins.get("<U object at 0x9>|8") == "'c'" and "<U object at 0x5>|8" in pins
    assert pins["f|8"] == "'d'" and pins.get("g|8", "none") == "none"


def test_a_pick_under_clashing_pins_is_a_stray_whichever_it_equals(monkeypatch):
    """Two pins whose keys differ only by an address, with different picks: the picker measures
    (it cannot tell which was meant), and whatever it picks is a stray, also where it equals one."""
    from kernels.common import tuning

    key = (_Unnamed(), 8)
    monkeypatch.setattr(tuning, "PICKED", {key: "b"})
    monkeypatch.setattr(tuning, "USED", {key: None})
    here = tuning.key_text(key)
    a, b = (picker.ADDRESS.sub(f" at 0x{n}", here) for n in ("1", "2"))
    assert picker.strays({a: "'a'", b: "'b'"}) == {here: "'b'"}
    assert picker.strays({a: "'b'"}) == {}


def test_the_ncu_target_warms_each_revision_up_as_its_gate_passes_and_never_one_that_failed(tmp_path):
    import os

    from kernlog.run import target

    go = tmp_path / "go.json"
    said = go.with_suffix(target.GATED_SUFFIX)
    order = target.as_gated(said, go, os.getpid(), ["a", "b", "c"])
    said.write_text(json.dumps({"passed": ["b"], "failed": []}))
    assert next(order) == "b"  # in the order the gates pass, not the ladder's
    said.write_text(json.dumps({"passed": ["b", "a"], "failed": ["c"]}))
    assert list(order) == ["a"]  # c failed: never loaded under ncu; then every one is named
    said.write_text(json.dumps({"passed": [], "failed": ["ref"]}))
    assert next(target.as_gated(said, go, os.getpid(), ["a", "ref"], first=("ref",))) == "ref"  # at once
    said.unlink()
    waiting = target.as_gated(said, go, os.getpid(), ["a"])
    go.write_text("{}")  # told to profile before a gate said anything: no warm-up
    assert list(waiting) == []
