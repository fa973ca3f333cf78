"""`kernlog bench`: the timing sweep over a kernel's bench shapes, every revision side by
side in one run, merged long-format into profiles/<gpu>/<kernel>/bench.csv (each row stamped
with its run, so the log can say when a table comes from several)."""
from __future__ import annotations

import functools
import io
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from kernlog import timing
from kernlog.capture import costs, gate_runs, gated, provenance
from kernlog.capture.profiler import GATE_TIMEOUT_S, ceilings, require_gpu
from kernlog.capture.timed import loads_by_name
from kernlog.errors import CannotRun, GateFailure, OperatorError, Unsupported
from kernlog.judge.verdicts import throttled
from kernlog.run import gate, gatekey, ladder, picker
from kernlog.run.clocks import Clocks
from kernlog.spec import COPY, FAILS_GATE, REFUSED, RUN_SPREAD, SM_MHZ, Kernel, Revision, Shape, format_shape
from kernlog.store import profiles as store

KEY = ["kernel", "revision", "shape", "dtype"]
DEVICE = "cuda"  # the tests run the sweep on the CPU
# spec.COPY is the sweep's column for the roofline at each point's size: a device-to-device
# copy moving the kernel's fewest bytes (half read, half written), timed in the same run. A
# 1 GiB copy sets the log's ceiling; at 64 MB a copy is already a few percent under it.


def attempt(kernel: Kernel, rev: Revision, launch, inputs, shape: Shape, dtype: str) -> tuple[str, str]:
    """One launch at a sweep point, judged by the gate at full size against the float64
    reference (on the GPU): ("ok", ""), ("wrong", the problem), or ("refused", why) where the
    revision declines the shape (spec.Revision.refuses: Liger past 65536 columns) or raises
    Unsupported. A launch that raises otherwise is wrong, the references' included."""
    why = rev.refusal(shape)
    if why:
        return REFUSED, why
    out = kernel.make_output(inputs)
    gate.poison(out)
    try:
        result = gate._launch(launch, inputs, out)
    except Unsupported as exc:
        return REFUSED, str(exc)
    except Exception as exc:
        return "wrong", f"raised {type(exc).__name__}: {gate._gist(exc)}"
    problem = gate._judge(kernel, rev, inputs, out, result, gate.tolerance(kernel, dtype))[1]
    return ("wrong", problem) if problem else ("ok", "")


def _write(root: Path, gpu: dict, kernel: Kernel, rows: list[dict]) -> Path:
    """Merge this run's rows into bench.csv, replacing the (revision, shape, dtype) points it
    re-measured and keeping the rest."""
    import pandas as pd

    path = store.kernel_dir(root, gpu["slug"], kernel.name) / "bench.csv"
    new = pd.DataFrame(rows)
    if path.exists() and len(new):
        old = pd.read_csv(path, dtype={"shape": str})
        keys = set(map(tuple, new[KEY].astype(str).values))
        old = old[[tuple(k) not in keys for k in old[KEY].astype(str).values]]
        new = pd.concat([old, new], ignore_index=True)
    if len(new):
        buf = io.StringIO()
        new.sort_values(KEY + ["metric"], kind="stable").to_csv(buf, index=False, float_format="%.6g")
        store.write_atomic(path, buf.getvalue().encode())
    return path


def interleaved(fns: dict, repeat: int, sample: Callable) -> dict:
    """name -> [samples of each run]: `repeat` runs over every fn, each run in an order rotated
    by one from the last, so no revision always follows the same neighbour (a tie is judged on
    the median of at least three interleaved runs)."""
    names = list(fns)
    runs: dict = {name: [] for name in names}
    for i in range(repeat):
        for name in names[i % len(names):] + names[:i % len(names)] if names else []:
            runs[name].append(sample(fns[name]))
    return runs


def clocked(timer, budget_s: float, sm_of: dict, fn) -> list[float]:
    """timer.samples(fn), the SM clocks its Clocks read meanwhile added to sm_of[fn]."""
    before = len(timer.clocks.sm) if timer.clocks is not None else 0
    got = timer.samples(fn, budget_s=budget_s)
    if timer.clocks is not None:
        sm_of.setdefault(fn, []).extend(timer.clocks.sm[before:])
    return got


def combine(runs: list[list[float]]) -> dict:
    """One point's timing from its runs: timing.summary of every sample, but the median of the
    runs' medians, and run_spread, (max - min) / median of those (0 for one run): the measured
    run-to-run spread, under which a gap is a tie."""
    meds = [statistics.median(r) for r in runs]
    mid = statistics.median(meds)
    return dict(timing.summary([x for r in runs for x in r]), median_ms=mid, runs=len(runs),
                run_spread=(max(meds) - min(meds)) / mid if mid else 0.0)


def bench(root: Path, kernel: Kernel, revs: list[Revision], shapes: list[Shape], dtypes: list[str],
          budget_s: float = 0.5, progress: Callable[[str], None] = print, repeat: int = 1,
          regate: bool = False, workers: int | None = None) -> Path:
    require_gpu()
    import torch

    gpu = provenance.gpu_info()
    timer = timing.Timer()
    ceil = ceilings(root, gpu["slug"], timer, force=False)
    timer.clocks = Clocks()  # after the ceilings: their copies are no point's
    vers = provenance.versions()
    git = provenance.git_state(root)
    run = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # tells this run's points from a merged file's
    common = {"gpu": gpu, "versions": vers}
    # a pass kept under the key this gate would run with (same source, check plan, GPU, libraries),
    # by `profile`, `check` or an earlier bench: taken, not gated again (--regate: gate anyway)
    reused = {} if regate else gate_runs.reused(root, kernel, revs, common, progress)
    launchers, failed, verdicts, unrun, passed = {}, [], [], [], []  # passed: known-wrong ones the gate let by
    keyed: dict[str, dict] = {}  # the key, seconds and check of each pass this run gated
    # the gates left, side by side in processes of their own as `kernlog profile` runs them (a
    # cold gate is mostly compiling, spread over the host's cores); one by one in this process
    # where one core is all the host gives a gate, or the GPU admits one process at a time
    apart = [r for r in revs if r.name not in reused and loads_by_name(kernel, r)]
    workers = gated.workers(workers, apart, progress)
    ran = gated.side_by_side(root, kernel, apart, workers, progress, None, costs.gate_seconds(
        root, gpu["slug"], kernel, apart), device=DEVICE, timeout=GATE_TIMEOUT_S) if workers > 1 and apart else {}
    for rev in revs:
        g0 = time.perf_counter()
        try:
            if rev.name in reused:
                launchers[rev.name] = gate.load(kernel, rev)
                progress(f"{rev.name}: {reused[rev.name][3]}")
                continue
            if rev.name in ran:  # gated in its own process: its verdict as the gate there gave it
                outcome, detail, seconds = ran[rev.name]
                if outcome == "unsupported":
                    raise Unsupported(detail)
                if outcome == "cannot_run":
                    raise CannotRun(detail)
                if outcome == "operator":  # the operator's own code raised: no revision's verdict, said once
                    raise OperatorError(detail)
                launchers[rev.name] = gate.load(kernel, rev)
            else:
                progress(f"{rev.name}: correctness gate at the check shapes")  # tens of seconds where Triton compiles
                launchers[rev.name] = gate.load(kernel, rev)
                # torch.compile: the gate's shapes through its shape-generic graph, not a graph each
                gate_launch = gate.load(kernel, rev, for_gate=True) if rev.load_for_gate else launchers[rev.name]
                # every declared dtype and case, whichever the sweep times: a revision wrong in one is refused whole
                results = gate.check_revision(kernel, rev, DEVICE, dtypes=list(kernel.dtypes), launch=gate_launch)
                outcome, detail = gate.summary(results)
                seconds = time.perf_counter() - g0
            bad, check = (None, detail) if outcome == "ok" else (detail, None)
        except Unsupported as exc:  # not installed, or the GPU lacks a feature: left out, not failed
            progress(f"{rev.name}: skipped: {exc}")
            launchers.pop(rev.name, None)
            continue
        except CannotRun as exc:  # its import fails here: not run, so not judged; the others go on
            progress(f"{rev.name}: not gated: {exc}")
            launchers.pop(rev.name, None)
            unrun.append(rev.name)
            continue
        verdicts.append((rev, bad))
        if rev.known_wrong:  # gated only to prove the gate rejects it: never timed or swept
            launchers.pop(rev.name)
            ok, said = ladder.known_wrong(rev, bad)
            progress(f"{rev.name}: {said}; never timed or swept")
            if not ok:
                passed.append(rev.name)
            else:  # its rejection kept with its key: `kernlog profile` need not gate it again (todo.py)
                keyed[rev.name] = {"key": gatekey.key(kernel, rev, gpu, vers), "seconds": seconds}
        elif bad is not None:
            progress(f"{rev.name}: FAILED the gate, left out of the sweep: {bad}")
            failed.append(rev.name)
        else:
            keyed[rev.name] = {"key": gatekey.key(kernel, rev, gpu, vers), "seconds": seconds, "check": check}
            progress(f"{rev.name}: gate passed in {seconds:.1f} s" + (" (its own process)" if rev.name in ran else ""))
    gate_runs.note(root, gpu["slug"], kernel, verdicts, "bench", git["commit"], keyed)  # marks its profiles
    rows, wrong = [], []
    shas = {r.name: r.sha256() for r in revs if r.name in launchers}  # once per revision: each reads its files

    def stamp(name, sha, shape, dtype):
        return {"kernel": kernel.name, "revision": name, "shape": format_shape(shape), "dtype": dtype,
                "gpu": gpu["name"], "torch": vers["torch"], "triton": vers["triton"],
                "liger_kernel": vers.get("liger_kernel"), "commit": git["commit"], "run": run,
                "source_sha256": sha, "copy_gbps": ceil["copy_gbps"], "matmul_tflops": ceil["matmul_bf16_tflops"]}

    def point(name, sha, shape, dtype, s, picked="", sm=()):
        nbytes, flops = kernel.bytes_moved(shape, dtype), kernel.flops(shape)
        values = {"median_ms": s["median_ms"], "p05_ms": s["p05_ms"], "p95_ms": s["p95_ms"],
                  "gbps": nbytes / s["median_ms"] / 1e6}
        if s["runs"] > 1:
            values[RUN_SPREAD] = s["run_spread"]
        if flops:
            values["tflops"] = flops / s["median_ms"] / 1e9
        if sm:  # the SM clock while its launches ran (NVML, sampled each batch): a ratio at clocks apart is partly
            values[SM_MHZ] = statistics.median(sm)  # the clock
        for metric, value in values.items():
            rows.append(dict(stamp(name, sha, shape, dtype), metric=metric, value=value, samples=s["n"],
                             **({"note": picked} if picked and metric == "median_ms" else {})))
        progress(f"{kernel.name} {format_shape(shape):>13} {dtype} {name:<16} "
                 f"{s['median_ms'] * 1e3:9.1f} us {values['gbps']:8.0f} GB/s"
                 + (f" {values['tflops']:6.0f} TFLOP/s" if flops else ""))
        slow = throttled({"sm_mhz": {"median": values[SM_MHZ]}, "sm_max_mhz": timer.clocks.sm_max}) if sm else ""
        if slow:
            progress(f"  {name}: {slow}")

    for shape in shapes:
        for dtype in dtypes:
            gen = torch.Generator(device=DEVICE).manual_seed(0)
            inputs = kernel.make_inputs(shape, dtype, gen, DEVICE, kernel.cases[0])
            out = kernel.make_output(inputs)  # every timed launch writes here (each was gated on its own)
            timed: dict = {}  # name -> (source hash, the launch to time), in the kernel's order
            picks: dict = {}  # name -> the configs its launcher picked at this point (kernlog.run.picker), as text
            for rev in revs:
                if rev.name in failed or rev.name not in launchers:
                    continue
                launch = launchers[rev.name]
                picker.forget_used()
                verdict, why = attempt(kernel, rev, launch, inputs, shape, dtype)
                picks[rev.name] = "; ".join(f"picked {k}: {v}" for k, v in sorted(picker.used_config().items()))
                if verdict == REFUSED:
                    progress(f"{kernel.name} {format_shape(shape):>13} {dtype} {rev.name:<16} refused: {why}")
                    rows.append(dict(stamp(rev.name, shas[rev.name], shape, dtype), metric=REFUSED,
                                     value=float("nan"), samples=0, note=why))
                    continue
                if verdict == "wrong" and rev.role != "reference":
                    progress(f"{rev.name} {format_shape(shape)} {dtype}: FAILED the gate at full size, "
                             f"not timed: {why}")
                    wrong.append(f"{rev.name} at {format_shape(shape)} {dtype}")
                    continue
                if verdict == "wrong":  # the user's baseline, less accurate here: timed, and marked
                    progress(f"{rev.name} {format_shape(shape)} {dtype}: fails the gate at full size (a reference: "
                             f"timed all the same, marked in the log): {why}")
                    rows.append(dict(stamp(rev.name, shas[rev.name], shape, dtype), metric=FAILS_GATE,
                                     value=float("nan"), samples=0, note=why))
                timed[rev.name] = (shas[rev.name], functools.partial(launch, inputs, out))
            if kernel.ceiling == "copy":
                src, dst = copy_buffers(kernel.bytes_moved(shape, dtype))
                timed[COPY] = (None, lambda: dst.copy_(src))  # noqa: B023 (called in this iteration)
            sm_of: dict = {}  # name -> the SM clocks read while its batches ran
            runs = interleaved({name: fn for name, (_, fn) in timed.items()}, repeat,
                               functools.partial(clocked, timer, budget_s / repeat, sm_of))
            for name, (sha, _) in timed.items():
                point(name, sha, shape, dtype, combine(runs[name]), picks.get(name, ""), sm_of.get(timed[name][1], ()))
            timed.clear()
            del inputs, out
            src = dst = None
            torch.cuda.empty_cache()
            path = _write(root, gpu, kernel, rows)  # after every point: a cut-off sweep keeps what it measured
    path = _write(root, gpu, kernel, rows)
    kept = f"(the lines above say why; what passed is in {path.relative_to(root)})"
    said = [f"failed the correctness gate: {', '.join(failed + wrong)}"] if failed or wrong else []
    said += [f"{kernel.name}/{n} {ladder.WRONG_PASSED}" for n in passed]
    if said:  # a wrong answer found (or a bug the gate no longer sees) outranks what could not run
        raise GateFailure("; ".join(said + ([f"not gated: {', '.join(unrun)}"] if unrun else [])) + f" {kept}")
    if unrun:
        raise CannotRun(f"not gated, so not swept: {', '.join(unrun)} {kept}")
    return path


def copy_buffers(nbytes: int):
    """A random source of nbytes / 2 and a destination of the same size, on the GPU: copying
    one into the other moves `nbytes`, as many as the kernel's fewest."""
    import torch

    n = max(1, nbytes // 8)  # fp32 elements in each half
    return torch.randn(n, device=DEVICE), torch.empty(n, device=DEVICE)
