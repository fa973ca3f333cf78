"""Where a program's GPU time goes, kernel by kernel, from a CUPTI trace (torch.profiler).

`take_trace` (GPU only) runs a zero-argument callable once warm, then once under the
profiler with input shapes and the nn.Module hierarchy recorded, and exports the Chrome-trace
JSON. `parse_chrome_trace` (pure) reads that JSON into one KernelRow per kernel launch:

- a "kernel" event (GPU side) links to its launch ("cuda_runtime" cudaLaunchKernel, or
  "cuda_driver" cuLaunchKernel for Triton's) by args.correlation;
- the launch lies, in time and on the same thread, inside the "cpu_op" events (aten::...)
  that issued it and the "python_function" events named "nn.Module: <Class>_<n>" of the
  modules that called them. The innermost op is the one that launched it (aten::addmm, not
  the aten::linear around it); its recorded "Input Dims" and "Input type" describe the call.

Format as torch 2.13 writes it (checked on a CPU trace of nn.Sequential): ts and dur in
microseconds, floats; cpu_op args "Input Dims" [[3, 8], [16, 8], [16]] and "Input type"
["float", "float", "float"], "Scalar" and "" for non-tensors.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kernlog.errors import KernlogError, NoGpu

MODULE_PREFIX = "nn.Module: "
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


@dataclass(frozen=True)
class KernelRow:
    """One kernel launch: its GPU time and what launched it ("" where nothing did)."""
    name: str
    us: float
    start_us: float  # GPU start, for launch order
    op: str = ""  # the innermost aten op around the launch
    top_op: str = ""  # the outermost one (aten::linear around aten::addmm)
    call: int = -1  # which op call (index among the trace's cpu_op events): kernels of one call share it
    inputs: tuple = ()  # the op's recorded inputs: ((dims...), type name) each
    concrete: tuple[str, ...] = ()  # its "Concrete Inputs": scalars and lists as text ("[2, 2]"), "" for tensors
    module: str = ""  # the innermost nn.Module, e.g. "Linear_0"
    modules: tuple[str, ...] = ()  # outermost first
    grid: tuple[int, ...] = ()  # the launch's grid and block, as CUPTI records them (() where it does not)
    block: tuple[int, ...] = ()


def _module_name(event: dict) -> str | None:
    name = event.get("name", "")
    return name[len(MODULE_PREFIX):] if event.get("cat") == "python_function" and name.startswith(
        MODULE_PREFIX) else None


def _inputs(args: dict) -> tuple:
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    return tuple((tuple(d) if isinstance(d, list) else (), t) for d, t in zip(dims, types, strict=False))


def _enclosing(events: list[dict], launches: list[dict], key=lambda e: e["args"]["correlation"]) -> dict:
    """For each launch (by `key`: its correlation), the intervals of `events` that contain it,
    outermost first. One thread's intervals nest, so a sweep with a stack finds them."""
    marks = [(e["ts"], 0, -e.get("dur", 0.0), i, e) for i, e in enumerate(events)]
    marks += [(e["ts"], 1, 0.0, i, e) for i, e in enumerate(launches)]
    marks.sort(key=lambda m: m[:4])
    stack: list[dict] = []
    out: dict[int, list[dict]] = {}
    for ts, is_launch, _, _, e in marks:
        end = ts + e.get("dur", 0.0)
        while stack and stack[-1]["ts"] + stack[-1].get("dur", 0.0) < end:
            stack.pop()
        if is_launch:
            out[key(e)] = list(stack)
        else:
            stack.append(e)
    return out


def _complete(trace: dict | list) -> list[dict]:
    """The trace's complete events ("ph": "X", with a timestamp)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise KernlogError("the trace has no traceEvents list: not a torch.profiler Chrome trace")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]


def parse_chrome_trace(trace: dict | list) -> list[KernelRow]:
    """Every kernel of a torch.profiler Chrome trace, in GPU launch order, with its op and module."""
    complete = _complete(trace)
    kernels = [e for e in complete if e.get("cat") == "kernel"]
    threads: dict[tuple, dict[str, list]] = defaultdict(lambda: {"spans": [], "launches": []})
    for e in complete:
        key = (e.get("pid"), e.get("tid"))
        if e.get("cat") == "cpu_op" or _module_name(e) is not None:
            threads[key]["spans"].append(e)
        elif e.get("cat") in LAUNCH_CATS and "correlation" in (e.get("args") or {}):
            threads[key]["launches"].append(e)
    ops = sorted((e for e in complete if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    call_of = {id(e): i for i, e in enumerate(ops)}
    around: dict[int, list[dict]] = {}
    for t in threads.values():
        around.update(_enclosing(t["spans"], t["launches"]))
    rows = []
    for k in sorted(kernels, key=lambda e: e["ts"]):
        spans = around.get((k.get("args") or {}).get("correlation"), [])
        cpu = [s for s in spans if s.get("cat") == "cpu_op"]
        mods = tuple(m for m in map(_module_name, spans) if m is not None)
        inner = cpu[-1] if cpu else None
        rows.append(KernelRow(
            name=k["name"], us=float(k.get("dur", 0.0)), start_us=float(k["ts"]),
            op=inner["name"] if inner else "", top_op=cpu[0]["name"] if cpu else "",
            call=call_of[id(inner)] if inner else -1, inputs=_inputs(inner.get("args") or {}) if inner else (),
            concrete=tuple(str(c) for c in (inner.get("args") or {}).get("Concrete Inputs") or ()) if inner else (),
            module=mods[-1] if mods else "", modules=mods, grid=_dims((k.get("args") or {}).get("grid")),
            block=_dims((k.get("args") or {}).get("block"))))
    return rows


def _dims(value) -> tuple[int, ...]:
    """A CUPTI grid or block ([x, y, z]) as a tuple of ints; () where absent or not one."""
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return tuple(value)
    return ()


def slim(trace: dict) -> dict:
    """The trace with only what parse_chrome_trace reads (kernels, launches, ops, module spans)
    and its metadata: with_stack's other Python frames are most of a model's trace, and the
    stored trace is kept beside its triage in profiles/."""
    def kept(e) -> bool:
        cat = e.get("cat") if isinstance(e, dict) else None
        return cat in ("kernel", "cpu_op", "gpu_memcpy", "gpu_memset", *LAUNCH_CATS) or cat is None or (
            cat == "python_function" and _module_name(e) is not None)
    events = trace.get("traceEvents", [])
    return dict(trace, traceEvents=[e for e in events if kept(e)])


def group_times(rows: list[KernelRow], by: str) -> list[dict]:
    """GPU time per kernel name ("kernel"), launching op ("op") or module ("module"): {name,
    count, us}, longest first; launches with no op or module count under "(none)"."""
    us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        key = {"kernel": r.name, "op": r.op, "module": r.module}[by] or "(none)"
        us[key] += r.us
        count[key] += 1
    return [{"name": k, "count": count[k], "us": round(us[k], 3)} for k in sorted(us, key=lambda k: (-us[k], k))]


def take_trace(fn, path: Path) -> dict:
    """GPU only: call `fn` once warm, then once under torch.profiler (CPU and CUDA activity,
    shapes, stacks and modules recorded); the Chrome trace written to `path` and returned."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise NoGpu("no CUDA GPU visible: a fresh triage traces the program on a GPU")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=True, with_modules=True) as prof:
        fn()
        torch.cuda.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())


# The call's timeline: GPU activity, and the host calls that make the GPU wait. A
# synchronization blocks the host until the GPU drains; `cudaMemcpy` (not Async) blocks the same way.
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2")
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "copy"}
ISSUE_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync",
               "cudaMemsetAsync", "cudaLaunchCooperativeKernel", "cudaGraphLaunch")


@dataclass(frozen=True)
class Activity:
    """One interval on the GPU (a kernel, a copy or a memset) and what issued it."""
    kind: str  # 'kernel' or 'copy'
    name: str
    start_us: float
    end_us: float
    op: str = ""  # the outermost aten op around its launch ("" where none)
    module: str = ""  # the innermost nn.Module


@dataclass(frozen=True)
class HostSync:
    """A host call that waits on the GPU, inside the traced call."""
    name: str  # cudaStreamSynchronize, ...
    start_us: float
    end_us: float
    op: str = ""  # the innermost aten op around it (aten::_local_scalar_dense for .item())
    top_op: str = ""  # the outermost (aten::item)
    module: str = ""


@dataclass(frozen=True)
class Timeline:
    """One traced call: from its first host event to its last GPU activity."""
    start_us: float
    end_us: float
    activities: tuple[Activity, ...]  # by start
    syncs: tuple[HostSync, ...]  # by start; the tracer's own closing synchronize left out
    launches: int


def _around(spans: list[dict]) -> tuple[str, str, str]:
    """(innermost op, outermost op, innermost module) of the spans around an event."""
    cpu = [s["name"] for s in spans if s.get("cat") == "cpu_op"]
    mods = [m for m in map(_module_name, spans) if m is not None]
    return (cpu[-1] if cpu else "", cpu[0] if cpu else "", mods[-1] if mods else "")


def parse_timeline(trace: dict | list) -> Timeline:
    """The traced call's timeline: every GPU activity with the op and module that issued it, and
    the host synchronizations inside the call. The tracer closes its call with a synchronize
    outside any op (take_trace), and the profiler may add one: a synchronize outside every op
    after the call's last launch is theirs, not the program's (a program's own one there costs
    nothing: nothing waits behind it)."""
    complete = _complete(trace)
    threads: dict[tuple, dict[str, list]] = defaultdict(lambda: {"spans": [], "calls": []})
    for e in complete:
        key = (e.get("pid"), e.get("tid"))
        if e.get("cat") == "cpu_op" or _module_name(e) is not None:
            threads[key]["spans"].append(e)
        elif e.get("cat") in LAUNCH_CATS:
            threads[key]["calls"].append(e)
    around: dict[int, tuple[str, str, str]] = {}  # id(runtime call) -> its ops and module
    by_corr: dict[int, dict] = {}
    for t in threads.values():
        enclosing = _enclosing(t["spans"], t["calls"], key=id)
        for call in t["calls"]:
            around[id(call)] = _around(enclosing.get(id(call), []))
            corr = (call.get("args") or {}).get("correlation")
            if corr is not None:
                by_corr[corr] = call
    acts = []
    for e in complete:
        kind = GPU_CATS.get(e.get("cat"))
        if kind is None:
            continue
        call = by_corr.get((e.get("args") or {}).get("correlation"))
        inner, outer, mod = around.get(id(call), ("", "", "")) if call is not None else ("", "", "")
        acts.append(Activity(kind, e.get("name", ""), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)),
                             outer, mod))
    acts.sort(key=lambda a: (a.start_us, a.end_us))
    calls = [c for t in threads.values() for c in t["calls"]]
    syncs = sorted((c for c in calls if c.get("name") in SYNC_CALLS), key=lambda c: c["ts"])
    issued = [c["ts"] for c in calls if c.get("name") not in SYNC_CALLS and c.get("name") in ISSUE_CALLS]
    last_issue = max(issued, default=float("-inf"))
    # the tracer's (and the profiler's) synchronizes: outside every op, after the last launch
    syncs = [c for c in syncs if around[id(c)][0] or c["ts"] < last_issue]
    ops = [e for t in threads.values() for e in t["spans"] if e.get("cat") == "cpu_op"]
    firsts = [e["ts"] for e in ops] + [c["ts"] for c in calls] + [a.start_us for a in acts]
    if not acts:
        raise KernlogError("the trace holds no GPU activity: nothing ran on the GPU in the traced call")
    start = float(min(firsts))
    end = max(a.end_us for a in acts)
    launches = sum(1 for e in complete if e.get("cat") == "kernel")
    return Timeline(start, end, tuple(acts), tuple(
        HostSync(c["name"], float(c["ts"]), float(c["ts"]) + float(c.get("dur", 0.0)), around[id(c)][0],
                 around[id(c)][1], around[id(c)][2]) for c in syncs if float(c["ts"]) < end), launches)
