"""`kernlog triage TARGET`: where a PyTorch program's GPU time goes and what fixing it would buy.

TARGET is a program, `module:function` (the function builds the model and inputs and
returns a zero-argument callable), or a kernlog kernel of many kernels, NAME[/REVISION][@SHAPE][.DTYPE]
(default: its `torch` revision at its profile shape and dtype).

On a GPU: time the callable, take a CUPTI trace of one warm call (kernlog.capture.trace),
profile the kernels covering 90% of the GPU time under ncu (one process for all of them, their
function names as the filter inside the profiled call, each kernel read from the report by the
position of its first launch; kernlog.capture.triage_ncu), judge (kernlog.judge.triage) and store
(kernlog.store.triages). Without one: the stored triages, or one line saying none is stored.
Every GPU step is injectable (`Steps`), so the flow is tested on the CPU with fakes.

`python -m kernlog.capture.triage --launch ROOT TARGET` is the process ncu runs: the callable
twice warm, then once between cudaProfilerStart and Stop (the call ncu profiles).
"""
from __future__ import annotations

import importlib
import math
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from kernlog.capture import provenance
from kernlog.capture.trace import group_times, parse_chrome_trace, parse_timeline, slim, take_trace
from kernlog.capture.triage_ncu import MAX_LAUNCHES, NcuPlan, ncu_command, plan_ncu, run_ncu
from kernlog.capture.walltime import WALL_METHOD, graphed, time_interleaved, time_samples  # noqa: F401
from kernlog.errors import KernlogError, NoGpu, said
from kernlog.judge import hostside
from kernlog.judge import triage as judge
from kernlog.registry import load_kernel
from kernlog.spec import format_shape, parse_shape
from kernlog.store import triages as store
from kernlog.store.profiles import load_ceilings

PROGRAM_RE = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):([A-Za-z_]\w*)$")
KERNEL_RE = re.compile(r"^([a-z0-9][a-z0-9_]*)(?:/([a-z0-9][a-z0-9_]*))?(?:@([0-9x]+))?(?:\.([a-z0-9]+))?$")
DEFAULT_REVISION = "torch"
TOP = 5  # candidates the table names


@dataclass(frozen=True)
class Target:
    text: str  # canonical: module:function, or kernel/revision@shape.dtype
    module: str = ""
    function: str = ""
    kernel: str = ""
    revision: str = ""
    shape: tuple[int, ...] = ()
    dtype: str = ""


def resolve_target(root: Path, text: str) -> Target:
    """TARGET parsed, a kernel's defaults filled in (its registry entry read: no torch)."""
    m = PROGRAM_RE.match(text)
    if m:
        return Target(text, module=m.group(1), function=m.group(2))
    m = KERNEL_RE.match(text)
    if not m:
        raise KernlogError(f"bad target {text!r}: expected module:function (e.g. models.triage_examples:resnet50) "
                           "or a kernel such as minigpt or minigpt/torch@2x128x128x512.fp32")
    name, rev, shape_text, dtype = m.groups()
    kernel = load_kernel(root, name)
    rev = rev or DEFAULT_REVISION
    try:
        kernel.revision(rev)
    except KeyError:
        raise KernlogError(f"unknown revision {rev!r} of {name}; known: "
                           f"{', '.join(r.name for r in kernel.revisions)}") from None
    try:
        shape = parse_shape(shape_text) if shape_text else tuple(kernel.profile_shape)
    except ValueError as exc:
        raise KernlogError(str(exc)) from None
    dtype = kernel.dtype_or_default(dtype)
    return Target(f"{name}/{rev}@{format_shape(shape)}.{dtype}", kernel=name, revision=rev, shape=shape, dtype=dtype)


def _factory(root: Path, target: Target) -> Callable:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(target.module)
    except ModuleNotFoundError as exc:
        raise KernlogError(f"cannot import {target.module}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 -- the program's own failure, said in one line
        raise KernlogError(f"importing {target.module} raised {said(exc)}") from None
    fn = getattr(module, target.function, None)
    if not callable(fn):
        raise KernlogError(f"{target.module} has no function {target.function!r}")
    return fn


def check_target(root: Path, target: Target) -> None:
    """Without a GPU: that the program's module imports and has its function (a kernel target
    was checked by resolve_target)."""
    if target.module:
        _factory(root, target)


def build_callable(root: Path, target: Target, device: str = "cuda") -> Callable[[], object]:
    """The zero-argument callable TARGET names: the program's function called, or the kernel
    revision's launcher bound to its inputs."""
    if target.module:
        try:
            fn = _factory(root, target)()
        except KernlogError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the program's own failure, said in one line
            raise KernlogError(f"{target.text} raised {said(exc)}") from None
        if not callable(fn):
            raise KernlogError(f"{target.text} returned {type(fn).__name__}, not a zero-argument callable")
        return fn
    import torch

    kernel = load_kernel(root, target.kernel)
    inputs = kernel.make_inputs(target.shape, target.dtype, torch.Generator(device=device).manual_seed(0), device,
                                kernel.cases[0])
    out = kernel.make_output(inputs)
    launch = kernel.revision(target.revision).load()
    return lambda: launch(inputs, out)


def guarded(fn: Callable[[], object], text: str) -> Callable[[], object]:
    """`fn`, its exceptions turned into one line naming the target."""
    def call():
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 -- the program's own failure, said in one line
            raise KernlogError(f"{text}: the callable raised {said(exc)}") from None
    return call


def gpu_visible() -> bool:
    """A CUDA GPU this process can use; torch is imported only where a driver is present."""
    if not (Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi")):
        return False
    import torch

    return torch.cuda.is_available()


def trace_in_tmp(fn) -> dict:
    """GPU only: take_trace into a scratch folder (the store writes the trace where it belongs)."""
    with tempfile.TemporaryDirectory(prefix="kernlog-trace-") as tmp:
        return take_trace(fn, Path(tmp) / "trace.json")


@dataclass
class Steps:
    """The GPU steps of a fresh triage, replaceable by fakes."""
    gpu: Callable[[], dict] = provenance.gpu_info
    peaks: Callable[[Path, dict], judge.Peaks] | None = None  # None: measured_peaks
    build: Callable[[Path, Target], Callable] = build_callable
    time: Callable[[Callable], list[float]] = time_samples
    trace: Callable[[Callable], dict] = trace_in_tmp
    ncu: Callable[[list[str], Path, NcuPlan], dict] | None = run_ncu  # figures by kernel name
    ncu_path: Callable[[], str | None] = provenance.find_ncu
    versions: Callable[[str | None], dict] = provenance.versions  # given ncu's path


def measured_peaks(root: Path, gpu: dict) -> judge.Peaks:
    """GPU only: the GPU's copy bandwidth and matmul rate (profiles/<gpu>/ceilings.json, measured
    where absent) and its fp32 spec peak."""
    from kernlog import timing
    from kernlog.capture.profiler import ceilings, launch_floor
    from kernlog.judge.roofline import SPEC_FP32_TFLOPS

    timer = timing.Timer()
    c = ceilings(root, gpu["slug"], timer, False)
    floor = launch_floor(root, gpu["slug"], timer)
    return judge.Peaks(c["copy_gbps"], c.get("matmul_bf16_tflops"), SPEC_FP32_TFLOPS.get(gpu["name"]),
                       floor["graph_us"])


def fresh_triage(root: Path, target: Target, steps: Steps, progress: Callable[[str], None] = print) -> Path:
    """Trace, pick, profile, judge and store one triage of TARGET: the stored record's path."""
    gpu = steps.gpu()
    fn = guarded(steps.build(root, target), target.text)
    peaks = (steps.peaks or measured_peaks)(root, gpu)
    progress(f"{target.text}: timing the callable")
    samples = steps.time(fn)
    progress(f"{target.text}: CUPTI trace of one warm call")
    trace = steps.trace(fn)
    rows = parse_chrome_trace(trace)
    if not rows:
        raise KernlogError(f"{target.text} launched no CUDA kernel: nothing to triage (are its model and inputs "
                           "on the GPU?)")
    gpu_us = sum(r.us for r in rows)
    picked = judge.cover(rows)
    by_kernel = group_times(rows, "kernel")
    figures: dict = {}
    commands = []
    ncu = steps.ncu_path() if steps.ncu is not None else None
    if ncu and picked:
        launched = sorted(rows, key=lambda r: r.start_us)
        sizes = [(math.prod(r.grid), math.prod(r.block)) if r.grid and r.block else None
                 for r in launched]  # beside the order: the report is checked against it
        plan = plan_ncu([r.name for r in launched], picked, {g["name"]: g["us"] for g in by_kernel}, sizes=sizes)
        progress(f"ncu: {len(plan.positions)} kernels of {len(plan.functions)} functions in one process, "
                 f"{plan.launch_count} launches profiled"
                 + (f"; {len(plan.left_out)} picked kernels left out (over {MAX_LAUNCHES} launches)"
                    if plan.left_out else ""))
        with tempfile.TemporaryDirectory(prefix="kernlog-triage-") as tmp:
            report = Path(tmp) / "triage.ncu-rep"
            cmd = ncu_command(ncu, plan, report, root, target.text)
            commands.append(cmd[:cmd.index(sys.executable)])
            try:
                figures = steps.ncu(cmd, report, plan)
            except NoGpu:
                raise
            except KernlogError as exc:  # the whole pass: no kernel has evidence, the trace's placing stands
                progress(f"ncu failed, no evidence for the picked kernels: {exc}")
                figures = {name: {"error": str(exc)} for name in picked}
            else:
                for name, fig in figures.items():
                    if "error" in fig:  # that kernel's evidence is missing, the rest stands
                        progress(f"ncu: no evidence for {name[:80]}: {fig['error']}")
    elif not ncu:
        progress("ncu not found: the kernels are placed at their minimum bytes only, without ncu evidence")
    total_us = max(statistics.median(samples) * 1e3 if samples else 0.0, gpu_us)
    record = store.TriageRecord(
        target=target.text, gpu={"name": gpu["name"], "slug": gpu["slug"]}, captured_at=provenance.now(),
        total_us=total_us, gpu_us=gpu_us, launches=len(rows), peaks=asdict(peaks),
        by_kernel=by_kernel, by_op=group_times(rows, "op"), by_module=group_times(rows, "module"),
        picked=picked, **judged(rows, peaks, figures, total_us, parse_timeline(trace)),
        ncu={"kernels": figures, "commands": commands},
        wall_samples_ms=[round(s, 5) for s in samples], versions=steps.versions(ncu), timing=WALL_METHOD)
    return store.save_triage(root, record, slim(trace))


def judged(rows, peaks: judge.Peaks, figures: dict, total_us: float, timeline) -> dict:
    """A triage record's judged part (the call's time split, groups, chains, candidates) from its
    kernel rows and timeline, the ncu figures by kernel name and the program's measured time per call."""
    groups = judge.place_groups(rows, peaks, figures)
    chains = judge.fusion_chains(rows, peaks)
    split = hostside.split(timeline, total_us)
    host = hostside.candidates(timeline, split, peaks.launch_us, judge.BAND)
    inductor = judge.compile_saving(rows, peaks)
    if inductor and hostside.beyond(inductor["saved_us"], total_us, judge.BAND):
        host.append(hostside.HostFix(
            "compile", f"torch.compile the call: Inductor fuses {inductor['runs']} runs of non-matmul ops "
            f"({inductor['calls_fused_away']} calls fewer)", inductor["saved_us"], inductor))
    return {"time_split": asdict(split), "groups": [asdict(g) for g in groups], "chains": [asdict(c) for c in chains],
            "candidates": [asdict(c) for c in judge.rank(groups, chains, total_us, host=tuple(host))]}


def rejudge(root: Path, text: str) -> list[store.TriageRecord]:
    """No GPU: each stored triage of TARGET ranked again by today's judge from what it stored
    (its trace, ncu figures, peaks and measured total), and written back; its verdicts kept."""
    target = resolve_target(root, text)
    paths = store.stored(root, target.text)
    if not paths:
        raise KernlogError(f"no triage of {target.text} is stored: run `kernlog triage {target.text}` on a GPU first")
    out = []
    for path in paths:
        rec = store.load_triage(path)
        if rec.peaks.get("launch_us") is None:  # taken before the floor was: the GPU's, where measured since
            rec.peaks["launch_us"] = (load_ceilings(root, rec.gpu["slug"]).get("launch_floor") or {}).get("graph_us")
        trace = store.load_trace(root, rec)
        rows = parse_chrome_trace(trace)
        for name, value in judged(rows, judge.Peaks(**rec.peaks), rec.ncu.get("kernels", {}), rec.total_us,
                                  parse_timeline(trace)).items():
            setattr(rec, name, value)
        store.save_triage(root, rec)
        out.append(store.load_triage(path))
    return out


def triage(root: Path, text: str, steps: Steps | None = None, gpu: bool | None = None,
           progress: Callable[[str], None] = print) -> list[store.TriageRecord]:
    """On a GPU, a fresh triage (stored, then returned); without one, the stored triages of
    TARGET, one per GPU; none stored: NoGpu, with the command to run on a GPU."""
    target = resolve_target(root, text)
    if gpu if gpu is not None else gpu_visible():
        return [store.load_triage(fresh_triage(root, target, steps or Steps(), progress))]
    paths = store.stored(root, target.text)
    if paths:
        return [store.load_triage(p) for p in paths]
    check_target(root, target)
    raise NoGpu(f"no triage of {target.text} is stored and no CUDA GPU is visible: run "
                f"`kernlog triage {target.text}` on a GPU machine")


def judge_verify(rec: store.TriageRecord, candidate: int, new_ms: list[float], base_ms: list[float] | None = None,
                 baseline: str = "") -> judge.Verdict:
    """The measured speedup against candidate `candidate` (1: the top one) of a stored triage:
    from interleaved pairs where the baseline was timed too, else against the stored total."""
    if not rec.candidates:
        raise KernlogError(f"the triage of {rec.target} names no candidate: nothing was predicted to verify")
    if not 1 <= candidate <= len(rec.candidates):
        raise KernlogError(f"candidate {candidate} of {len(rec.candidates)}: pick 1 to {len(rec.candidates)}")
    cand = rec.candidates[candidate - 1]
    if base_ms:
        speedup, band = judge.interleaved_speedup(base_ms, new_ms)
        basis = f"{len(new_ms)} interleaved pairs (wall time per call) against {baseline or rec.target}"
    else:
        speedup, band = judge.stored_speedup(rec.total_us, new_ms), judge.BAND
        basis = f"against the stored total, {rec.total_us:.1f} us per call ({rec.captured_at})"
    return judge.verdict(cand["speedup"], speedup, band, f"{cand['title']}; {basis}")


HOST_KINDS = ("graph", "sync", "compile")  # fixes that need no kernel written


def default_candidate(rec: store.TriageRecord, graph: bool) -> int:
    """The rank (1-based) a verify judges by default: with --graph the CUDA-graph candidate,
    else the first kernel candidate (a program changed by a kernel does not fix the host)."""
    for i, c in enumerate(rec.candidates, 1):
        if (c["kind"] == "graph") if graph else (c["kind"] not in HOST_KINDS):
            return i
    if graph:
        raise KernlogError(f"the triage of {rec.target} names no CUDA-graph candidate (a sync inside the call, or too "
                           f"little host time to buy): run `kernlog triage {rec.target}` to see its ranking")
    return 1


def verify(root: Path, text: str, baseline: str | None = None, candidate: int | None = None, gpu: bool | None = None,
           progress: Callable[[str], None] = print, graph: bool = False) -> judge.Verdict:
    """GPU only: re-measure TARGET and judge its speedup against the stored prediction (of
    BASELINE's triage where given, timing the two in turn); `graph`: TARGET captured in a CUDA
    graph against itself called eagerly, judged against the triage's graph candidate."""
    target = resolve_target(root, text)
    base = resolve_target(root, baseline) if baseline else target
    if graph and baseline:
        raise KernlogError("--graph times TARGET against itself captured in a CUDA graph: drop --baseline")
    if not (gpu if gpu is not None else gpu_visible()):
        flag = " --graph" if graph else ""
        raise NoGpu(f"--verify re-measures the program: run `kernlog triage {text} --verify{flag}` on a GPU machine")
    slug = provenance.gpu_info()["slug"]
    path = store.triage_path(root, slug, base.text)
    if not path.exists():
        raise KernlogError(f"no triage of {base.text} is stored for {slug}: run `kernlog triage {base.text}` first")
    rec = store.load_triage(path)
    candidate = candidate or default_candidate(rec, graph)
    fn = guarded(build_callable(root, target), target.text)
    if graph:
        progress(f"timing {target.text} called eagerly and replayed from a CUDA graph, in turn")
        base_ms, new_ms = time_interleaved(fn, graphed(fn, target.text))
        v = judge_verify(rec, candidate, new_ms, base_ms, f"{target.text} called eagerly")
        with_ = f"{target.text} in a CUDA graph"
    elif baseline:
        progress(f"timing {base.text} and {target.text} in turn")
        base_ms, new_ms = time_interleaved(guarded(build_callable(root, base), base.text), fn)
        v = judge_verify(rec, candidate, new_ms, base_ms, base.text)
        with_ = target.text
    else:
        progress(f"timing {target.text}")
        v = judge_verify(rec, candidate, time_samples(fn))
        with_ = target.text
    store.add_verdict(path, {"target": with_, "candidate": candidate,
                             "title": rec.candidates[candidate - 1]["title"], **asdict(v), "at": provenance.now()})
    return v


def _launch(root: str, text: str) -> None:
    import torch

    fn = build_callable(Path(root), resolve_target(Path(root), text))
    for _ in range(2):  # warm: a training step's first call may launch other kernels
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # the call ncu profiles in (--profile-from-start off), every thread's launches
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "--launch":
        sys.exit("usage: python -m kernlog.capture.triage --launch ROOT TARGET")
    try:
        _launch(sys.argv[2], sys.argv[3])
    except KernlogError as exc:
        print(f"kernlog: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
