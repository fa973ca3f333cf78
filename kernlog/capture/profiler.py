"""`kernlog profile`: gate -> timing pass -> ncu pass -> extraction -> profiles/, per revision."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kernlog import metrics, timing
from kernlog.capture import costs, gate_runs, gated, provenance
from kernlog.capture import ncu as ncurep
from kernlog.capture.extract import build_record
from kernlog.capture.ncurun import NcuRun, _staging, ncu_command, run_ncu  # run_ncu: where callers find it
from kernlog.capture.options import Options
from kernlog.capture.timed import Timed, batches, kernel_times, loads_by_name, warm_references
from kernlog.capture.todo import decide
from kernlog.errors import CannotRun, GateFailure, KernlogError, NoGpu, OperatorError, Unsupported
from kernlog.judge.verdicts import throttled
from kernlog.run import fanout, gate, ladder, picker
from kernlog.run.clocks import Clocks
from kernlog.spec import Kernel, Revision, Shape, format_shape
from kernlog.store import profiles as store
from kernlog.store.keys import ceilings_json

DEVICE = "cuda"


def require_gpu() -> str:
    try:
        import torch
    except ImportError:
        raise NoGpu("torch is not installed: profiling needs torch with CUDA") from None
    if not torch.cuda.is_available():
        raise NoGpu("no CUDA GPU visible: this command runs on a GPU machine "
                    "(check --device cpu, diff, show, list and report work here)")
    ncu = provenance.find_ncu()
    if ncu is None:
        raise NoGpu("ncu (Nsight Compute) not found on PATH")
    return ncu


PIN_ENV = picker.PIN_ENV


GATE_TIMEOUT_S = 900.0


def parallel_gates(root: Path, kernel: Kernel, revs: list[Revision], workers: int,
                   progress, meanwhile: Callable[[], None] | None = None,
                   gate_s: dict[str, float] | None = None,
                   judged: Callable[[str, tuple], None] | None = None) -> dict[str, tuple]:
    """The correctness gates of `revs`, each in a process of its own (or in parts, side by side),
    `workers` at a time, the longest first: {name: (outcome, detail, seconds)} (gated.side_by_side).
    The GPU is shared while they run; the timing passes come after, one at a time, in this
    process, which checks each output again after its timing pass."""
    return gated.side_by_side(root, kernel, revs, workers, progress, meanwhile, gate_s, device=DEVICE,
                              timeout=GATE_TIMEOUT_S, judged=judged)


def _time(kernel: Kernel, rev: Revision, shape: Shape, dtype: str, opts: Options, timer, tag: str,
          progress, check: dict) -> Timed | None:
    """Timing pass of one revision that passed the gate, in this process; None if its output
    fails the gate after the timing pass."""
    import torch

    t0 = time.perf_counter()
    progress(f"{tag}: timing pass")
    launch = rev.load()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    inputs = kernel.make_inputs(shape, dtype, gen, DEVICE, kernel.cases[0])
    out = kernel.make_output(inputs)
    gate.poison(out)  # an element no timed launch writes shows in the recheck below
    picker.forget_used()
    timer.clocks = Clocks()
    samples = timer.samples(functools.partial(launch, inputs, out), budget_s=opts.timing_budget_s)
    config = picker.used_config()
    traced = kernel_times(launch, inputs, out) if kernel.trace_kernels else None
    after = gate.recheck(kernel, rev, launch, inputs, out, dtype, shape)  # as the many timed launches left it
    if not after.ok:
        progress(f"{tag}: FAILED the gate after the timing pass, not profiled: {after.line()}")
        return None
    del inputs, out
    torch.cuda.empty_cache()
    progress(f"{tag}: timed in {time.perf_counter() - t0:.1f} s ({len(samples)} samples)")
    clocks = timer.clocks.summary()
    slow = throttled(clocks)
    if slow:
        progress(f"{tag}: {slow}")
    return Timed(rev, tag, samples, clocks, config, check, t0, traced)


REJECTED = "rejected"  # _gate_and_time's word for a known-wrong revision the gate rejected, as it must


def _gate_and_time(kernel: Kernel, rev: Revision, shape: Shape, dtype: str, opts: Options, timer, tag: str,
                   progress, verdict: tuple | None = None, noted=None) -> Timed | str | None:
    """Gate and timing pass of one revision; None if it failed the gate, before or after the
    timing pass. A shape the revision declines (Revision.refuses) is Unsupported: skipped; one
    this machine cannot run as set up (its import fails) is CannotRun. A known-wrong revision
    (role="wrong") is gated only to prove the gate rejects it, never timed: REJECTED where it
    is, None (a failure) where it passes. `verdict`: its gate's (outcome, detail, seconds), run
    already by parallel_gates, or a stored pass taken for it (gate_runs.reused: a fourth item, the
    line that says so); `noted` hears a gate run, (outcome, detail) and its seconds
    (gate_runs.note_verdict keeps them)."""
    why = rev.refusal(shape)
    if why:
        raise Unsupported(why)
    if verdict is None:
        progress(f"{tag}: correctness gate")
        g0 = time.perf_counter()
        outcome = gate.verdict(kernel, rev, DEVICE)
        seconds, where = time.perf_counter() - g0, ""
    else:
        outcome, seconds, where = verdict[:2], verdict[2], " (its own process)"
        if outcome[0] == "unsupported":
            raise Unsupported(outcome[1])
        if outcome[0] == "cannot_run":  # its import failed in its gate's process (kernlog.run.loading)
            raise CannotRun(outcome[1])
        if outcome[0] == "operator":  # the operator's make_inputs, make_output or reference raised: not kept
            raise OperatorError(outcome[1])
    taken = verdict[3] if verdict is not None and len(verdict) > 3 else None
    if noted is not None and taken is None:  # a reused pass stays as it was kept
        noted(outcome, seconds)
    if rev.known_wrong:
        ok, said = ladder.known_wrong(rev, outcome[1] if outcome[0] == "failed" else None)
        progress(f"{tag}: {said}; never timed or profiled")
        return REJECTED if ok else None
    if outcome[0] == "failed":
        progress(f"{tag}: FAILED the gate, not profiled: {outcome[1]}")
        return None
    progress(f"{tag}: {taken}" if taken else f"{tag}: gate passed in {seconds:.1f} s{where}")
    return _time(kernel, rev, shape, dtype, opts, timer, tag, progress, outcome[1])


def start_ncu(root: Path, kernel: Kernel, names: list[str], shape: Shape, dtype: str, opts: Options,
              ncu: str) -> NcuRun:
    """An ncu process over `names`, started before their gates end, in a scratch folder under
    profiles/: it warms them all up, then waits to be told which to profile (NcuRun)."""
    tmpdir = _staging(root)
    try:
        cmd = ncu_command(ncu, opts, tmpdir / "report.ncu-rep", root, kernel.name, shape, dtype, names,
                          after=(tmpdir / "go.json", os.getpid()))
        proc = None
        with open(tmpdir / "ncu.log", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return NcuRun(names, tmpdir, cmd, proc)
    except BaseException:
        if proc is not None:
            NcuRun(names, tmpdir, cmd, proc).stop()
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise


def _ncu_pass(root: Path, kernel: Kernel, batch: list[Timed], shape: Shape, dtype: str, opts: Options, ncu: str,
              common: dict, progress, run: NcuRun | None = None) -> list[Path]:
    """One ncu process over the revisions of `batch` (one NVTX range each), their profiles
    saved as one report and a JSON each: `run`, started while the gates ran, or a new one."""
    config = {k: v for t in batch for k, v in t.config.items()}
    names = [t.rev.name for t in batch]
    progress(f"ncu pass: {', '.join(names)} in one process ({len(opts.sections)} sections"
             + (", started while the gates ran)" if run is not None else ")")
             + (f", pinned to {config}" if config else ""))
    tmpdir = _staging(root) if run is None else run.tmpdir
    try:
        if run is None:
            report = tmpdir / "report.ncu-rep"
            cmd = ncu_command(ncu, opts, report, root, kernel.name, shape, dtype, names)
            pins = tmpdir / "pinned.json"
            pins.write_text(json.dumps(config))
            t_ncu = time.perf_counter()
            run_ncu(cmd, opts.ncu_timeout_s, env={PIN_ENV: str(pins)})
            ncu_s = time.perf_counter() - t_ncu
        else:
            report, cmd = run.report, run.cmd
            run.tell(names, config)
            ncu_s = run.finish(opts.ncu_timeout_s)
            if said := run.clock(time.time()):
                progress(f"ncu pass of {len(names)}: {said}")
        actions = ncurep.read_report(report)
        warm = run.warmup() if run is not None else {}
        records = []
        for t in batch:
            record = dict(common, **build_record(actions, t.rev, t.samples, clocks=t.clocks, root=root),
                          captured_at=provenance.now(), config=t.config, check=t.check)
            if t.kernel_times is not None:
                record["kernel_times"] = t.kernel_times
            record["ncu"].update(command=["ncu"] + [c for c in cmd[1:cmd.index(sys.executable)]
                                                    if c not in ("--export", str(report))],
                                 sections=list(opts.sections), extra_metrics=list(metrics.EXTRA_METRICS),
                                 clock_control=opts.clock_control, cache_control=opts.cache_control,
                                 process_seconds=round(ncu_s, 1), process_revisions=names,
                                 **({"warm_seconds": warm[t.rev.name]} if t.rev.name in warm else {}),
                                 process_started_during_gates=run is not None)
            records.append(record)
        del actions
        paths = store.save_profiles(root, records, report, True, compress=True)  # missing or stale: todo_revisions
    finally:
        if run is not None:
            run.stop()
        shutil.rmtree(tmpdir, ignore_errors=True)
    for t, record in zip(batch, records, strict=True):  # the records as built (dicts), now saved
        progress(f"{t.tag}: done ({record['ncu']['replay_passes']} passes; ncu process {ncu_s:.0f} s "
                 f"for {len(batch)} revision(s))")
    return paths


def ceilings(root: Path, gpu: str, timer, force: bool, progress: Callable[[str], None] = lambda s: None) -> dict:
    """The GPU's copy bandwidth and matmul rate (profiles/<gpu>/ceilings.json), measured where
    there are none yet or with --force."""
    path = ceilings_json(root, gpu)
    if path.exists() and not force:
        return store.load_ceilings(root, gpu)
    t0 = time.perf_counter()
    data = timing.measure_ceilings(timer)
    data["captured_at"] = provenance.now()
    store.write_atomic(path, store.dump_json(data))
    progress(f"this GPU's ceilings measured in {time.perf_counter() - t0:.1f} s: {path.relative_to(root)}")
    return data


def launch_floor(root: Path, gpu: str, timer) -> dict:
    """The GPU's per-launch floor (ceilings.json's `launch_floor`), measured and added to the
    file where it is not there yet; the file's other ceilings kept as they were."""
    data = store.load_ceilings(root, gpu)
    if data.get("launch_floor"):
        return data["launch_floor"]
    floor = dict(timing.measure_launch_floor(timer), captured_at=provenance.now())
    data = dict(store.load_ceilings(root, gpu), launch_floor=floor)
    store.write_atomic(ceilings_json(root, gpu), store.dump_json(data))
    return floor


def _shape_dtype(kernel: Kernel, opts: Options) -> tuple[Shape, str]:
    return opts.shape or kernel.profile_shape, kernel.dtype_or_default(opts.dtype)


def profile_on_gpus(root: Path, kernel: Kernel, revs: list[Revision], opts: Options, gpus: int | None = None,
                    progress: Callable[[str], None] = print) -> list[Path]:
    """profile(), the revisions to do dealt out to `gpus` of the host's GPUs (those of the
    first's model), a process per GPU (kernlog.run.fanout); one GPU (the default): in this process.
    From empty caches on a 4-GPU H200 host, two GPUs took the softmax ladder 61-69 s, one 73-77 s
    (docs/profiling.md): not the default, which leaves the host's other GPUs to others."""
    devices = fanout.visible_gpus()[:gpus] if gpus and gpus > 1 else []
    if len(devices) < 2 or len(revs) < 2:
        return profile(root, kernel, revs, opts, progress)
    shape, dtype = _shape_dtype(kernel, opts)
    decided = decide(root, kernel, revs, shape, dtype, opts, require_gpu, progress)
    if decided is None:
        return []
    todo, gpu, _ = decided
    if len(todo) < 2:
        return profile(root, kernel, todo, opts, progress) if todo else []
    common = {"gpu": gpu, "versions": provenance.versions()}
    reused = set() if opts.regate else set(gate_runs.reused(root, kernel, todo, common))
    cost = costs.seconds(root, gpu["slug"], kernel, todo, shape, dtype, opts.timing_budget_s, reused)
    args = dataclasses.replace(opts, shape=shape, dtype=dtype).to_argv()
    return fanout.profile_on_gpus(root, kernel.name, todo, args, devices, progress,
                                  cost={name: c.total for name, c in cost.items()},
                                  span=lambda group: costs.span(kernel, group, cost))


def profile(root: Path, kernel: Kernel, revs: list[Revision], opts: Options,
            progress: Callable[[str], None] = print) -> list[Path]:
    started = time.perf_counter()
    for name, value in gated.ONE_COMPILE_PROCESS.items():  # this process, its ncu process and their children
        os.environ.setdefault(name, value)
    shape, dtype = _shape_dtype(kernel, opts)
    if kernel.ncu_kernels and not opts.kernel_filter:
        opts = dataclasses.replace(opts, kernel_filter=kernel.ncu_kernels)
    decided = decide(root, kernel, revs, shape, dtype, opts, require_gpu, progress)
    if decided is None:
        return []
    todo, gpu, ncu = decided
    timer = timing.Timer()
    ceil = ceilings(root, gpu["slug"], timer, opts.force, progress)
    common = {"schema": store.SCHEMA, "kernel": kernel.name, "shape": list(shape), "dtype": dtype,
              "gpu": gpu, "versions": provenance.versions(ncu), "git": provenance.git_state(root),
              "bytes_moved": kernel.bytes_moved(shape, dtype), "flops": kernel.flops(shape),
              "ceiling": kernel.ceiling, "ceilings": ceil}
    reused = {} if opts.regate else gate_runs.reused(root, kernel, todo, common, progress)  # passed, nothing changed
    apart = [r for r in todo if r.name not in reused and loads_by_name(kernel, r) and not r.refusal(shape)]
    gate_s = costs.gate_seconds(root, gpu["slug"], kernel, apart)
    # One gate runs in a process of its own too, so the ncu process starts beside it (the edit loop)
    workers = gated.workers(opts.gate_workers, apart, progress)
    verdicts, early = dict(reused), None
    try:
        if workers > 1 and apart:
            to_gate = {r.name for r in apart} | set(reused)
            names = [r.name for r in todo if r.name in to_gate and not r.known_wrong]  # known-wrong: never profiled
            early = start_ncu(root, kernel, names, shape, dtype, opts, ncu) if names else None
            judged = None
            if early is not None:  # it warms each up as its gate passes, a reused pass at once
                for name in reused:
                    early.judged(name, True)
                judged = lambda name, v: early.judged(name, v[0] == "ok") if name in early.names else None  # noqa: E731
            verdicts.update(parallel_gates(root, kernel, apart, workers, progress, gate_s=gate_s, judged=judged,
                                           meanwhile=lambda: warm_references(kernel, todo, shape, dtype, DEVICE)))
            t0 = time.perf_counter()
            if early is not None and not early.ready(READY_WAIT_S):  # still warming up: it would share the GPU
                progress(f"the ncu process was not ready {READY_WAIT_S:.0f} s after the gates: started again later")
                early.close()
                early = None
            elif early is not None:
                waited = time.perf_counter() - t0
                progress(warm_line(early.warmup()) + (f"; waited {waited:.1f} s for it after the gates"
                                                      if waited >= 1.0 else ""))
        written = _time_and_ncu(root, kernel, todo, shape, dtype, opts, ncu, timer, common, verdicts, early,
                                progress)
        progress(f"{kernel.name}: {len(written)} profile(s) written in {time.perf_counter() - started:.0f} s")
        return written
    finally:
        if early is not None:
            early.close()


def warm_line(warm: dict[str, float]) -> str:
    """The ncu process's warm-up in words: its start, then its slowest revisions."""
    slow = sorted(((s, n) for n, s in warm.items() if n), reverse=True)[:3]
    return (f"the ncu process warmed {len(warm) - ('' in warm)} revision(s) up in {sum(warm.values()):.1f} s "
            f"(its start {warm.get('', 0.0):.1f} s" + "".join(f", {n} {s:.1f} s" for s, n in slow) + ")"
            if warm else "the ncu process is warm")


# How long the timing passes wait, after the gates, for the ncu process started with them to
# finish its warm-up (it loads and launches each revision once under ncu, as its gate passes).
READY_WAIT_S = 60.0


def _time_and_ncu(root: Path, kernel: Kernel, todo: list[Revision], shape: Shape, dtype: str, opts: Options,
                  ncu: str, timer, common: dict, verdicts: dict, early: NcuRun | None,
                  progress) -> list[Path]:
    """The timing passes of `todo` (their gates' `verdicts` given, or run here), then the ncu
    passes of those that passed: the first in `early` where it holds them all."""
    timed, failed, skipped, unrun, passed = [], [], [], [], []  # passed: known-wrong revisions the gate let by
    for i, rev in enumerate(todo, 1):
        tag = f"[{i}/{len(todo)}] {kernel.name}/{rev.name} {format_shape(shape)} {dtype}"
        try:
            t = _gate_and_time(kernel, rev, shape, dtype, opts, timer, tag, progress, verdicts.get(rev.name),
                               functools.partial(gate_runs.note_verdict, root, kernel, rev, common))
        except Unsupported as exc:
            progress(f"{tag}: skipped: {exc}")
            skipped.append(rev.name)
            continue
        except CannotRun as exc:  # its import fails here: not gated, the others go on
            progress(f"{tag}: not gated: {exc}")
            unrun.append(rev.name)
            continue
        if t is None:
            (passed if rev.known_wrong else failed).append(rev.name)
        elif t is not REJECTED:
            timed.append(t)
    written, ncu_failed = [], []
    for batch in batches(timed):
        run = None
        if early is not None and early.proc.poll() is None and {t.rev.name for t in batch} <= set(early.names):
            run, early = early, None
        elif early is not None:  # it does not hold this batch: free the GPU memory it keeps
            early.close()
            early = None
        try:
            written += _ncu_pass(root, kernel, batch, shape, dtype, opts, ncu, common, progress, run)
        except KernlogError as exc:
            if len(batch) == 1 or isinstance(exc, NoGpu):
                raise
            # One revision may take the shared process down: each again in its own, so the
            # others are still profiled and the culprit is named.
            progress(f"ncu pass of {len(batch)} revisions failed ({exc}); each again in its own process")
            for t in batch:
                try:
                    written += _ncu_pass(root, kernel, [t], shape, dtype, opts, ncu, common, progress)
                except KernlogError as one:
                    progress(f"{t.tag}: ncu pass FAILED, not profiled: {one}")
                    ncu_failed.append(t.rev.name)
    if ncu_failed:
        raise KernlogError(f"the ncu pass failed for {', '.join(ncu_failed)}: not profiled (the lines above say why)")
    if skipped and not written and not failed:
        raise Unsupported(f"this GPU cannot run {', '.join(skipped)}: nothing was profiled")
    said = [f"{len(failed)} revision(s) failed the correctness gate and were not profiled: "
            + ", ".join(failed)] if failed else []
    if said or passed:  # a wrong answer found (or a bug the gate no longer sees) outranks what could not run
        raise GateFailure("; ".join(said + [f"{kernel.name}/{n} {ladder.WRONG_PASSED}" for n in passed]
                                    + ([f"not gated: {', '.join(unrun)}"] if unrun else [])))
    if unrun:
        raise CannotRun(f"not gated, so not profiled: {', '.join(unrun)} (the lines above say why)")
    return written
