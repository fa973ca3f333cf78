"""Where a program's time could go, judged from its kernel rows (kernlog.capture.trace): pure,
no I/O, no torch.

- `cover`: the fewest kernels (by name) whose GPU time reaches COVER of the total: what ncu profiles.
- `place_groups`: each op call signature (op, input shapes and types) on its roofline at its
  MINIMUM bytes and FLOPs (kernlog.judge.opcost), or at ncu's measured DRAM bytes where no
  rule knows the op (flagged: measured, not minimum); its time above the roof is
  measured - max(bytes / bandwidth, FLOPs / compute peak), summed over its calls.
- `fusion_chains`: runs of consecutive calls where one's output (its element count and type) is
  the next one's input, memory-bound inside, perhaps opened and closed by a compute-bound call
  (a matmul writing the tensor, one reading it: attention's scores): fusing them saves the
  intermediates' bytes written and read again, over the bandwidth (never more than the run's
  measured time less the fused run's roof, FLOPs included).
- `rank`: both kinds of candidate by time saved, each with Amdahl's whole-program speedup.
  Candidates may overlap (a fusion and the roofline gap of an op inside it): their savings do
  not add up.
- `verdict`: a measured speedup against a predicted one, with a noise band.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from kernlog.judge.opcost import Cost, flops_peak_tflops, minimum_cost, nbytes

COVER = 0.90  # of the GPU time: the kernels ncu profiles
BAND = 0.035  # the noise band of a verify: the H100's 90th-percentile run-to-run spread (GPU.md), 2-3.5%


@dataclass(frozen=True)
class Peaks:
    bandwidth_gbps: float  # the GPU's measured copy bandwidth (profiles/<gpu>/ceilings.json)
    tensor_tflops: float | None = None  # measured cuBLAS bf16 matmul rate
    fp32_tflops: float | None = None  # spec sheet's CUDA-core fp32 peak
    launch_us: float | None = None  # the least a kernel launch costs in a CUDA graph (ceilings.json)


def cover(rows, share: float = COVER) -> list[str]:
    """The fewest kernel names, longest total first, whose GPU time reaches `share` of all."""
    us: dict[str, float] = defaultdict(float)
    for r in rows:
        us[r.name] += r.us
    total = sum(us.values())
    picked, got = [], 0.0
    for name in sorted(us, key=lambda n: (-us[n], n)):
        if total <= 0 or got >= share * total:
            break
        picked.append(name)
        got += us[name]
    return picked


def roof_us(nbytes_: float, flops: float | None, peaks: Peaks, type_name: str | None) -> tuple[float, str]:
    """(the least time the roofline allows, in us; the side it sits on: 'memory' or 'compute')."""
    mem = nbytes_ / (peaks.bandwidth_gbps * 1e3)
    peak = flops_peak_tflops(type_name, peaks.tensor_tflops, peaks.fp32_tflops)
    comp = flops / (peak * 1e6) if flops and peak else 0.0
    return (comp, "compute") if comp > mem else (mem, "memory")


def above_roof(measured_us: float, roof: float) -> float:
    return max(0.0, measured_us - roof)


@dataclass
class Group:
    """One op call signature, over all its calls."""
    key: str
    op: str
    inputs: list
    calls: int
    kernels: list[str]
    modules: list[str]
    measured_us: float
    bytes_per_call: float | None = None
    flops_per_call: float | None = None
    basis: str = "unknown"  # 'minimum' (opcost's rule), 'measured' (ncu DRAM bytes), 'unknown'
    model: str = ""
    roof_us: float | None = None
    side: str | None = None
    above_us: float | None = None
    ncu: dict = field(default_factory=dict)  # kernel name -> its ncu figures


def _signature(r) -> str:
    if not r.op:
        return f"kernel {r.name}"
    shapes = ", ".join("x".join(map(str, d)) or "scalar" for d, t in r.inputs if t not in ("Scalar", ""))
    return f"{r.op}({shapes})"


def _calls(rows) -> list[list]:
    """The rows grouped by op call (kernels without an op: one call each), in launch order."""
    calls: dict = {}
    for i, r in enumerate(sorted(rows, key=lambda r: r.start_us)):
        calls.setdefault(r.call if r.call >= 0 else ("k", i), []).append(r)
    return list(calls.values())


def place_groups(rows, peaks: Peaks, ncu: dict | None = None) -> list[Group]:
    """Every op call signature placed on its roofline, most time above it first (unplaced last).
    `ncu`: kernel name -> {"dram_bytes": per launch, ...} for the kernels profiled."""
    ncu = ncu or {}
    groups: dict[str, Group] = {}
    costs: dict[str, Cost | None] = {}
    for call in _calls(rows):
        r = call[0]
        key = _signature(r)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(key, r.op, [list(x) for x in r.inputs], 0, [], [], 0.0)
            costs[key] = minimum_cost(r.op, r.inputs, r.concrete) if r.op else None
        g.calls += 1
        g.measured_us += sum(k.us for k in call)
        for k in call:
            if k.name not in g.kernels:
                g.kernels.append(k.name)
        mod = r.module.rsplit("_", 1)[0] if r.module else ""
        if mod and mod not in g.modules:
            g.modules.append(mod)
    for key, g in groups.items():
        cost = costs[key]
        g.ncu = {k: ncu[k] for k in g.kernels if k in ncu}
        if cost is not None:
            g.bytes_per_call, g.flops_per_call, g.basis, g.model = cost.bytes, cost.flops, "minimum", cost.model
            type_name = cost.out_type
        elif g.kernels and all(ncu.get(k, {}).get("dram_bytes") for k in g.kernels):
            launches = sum(1 for r in rows if _signature(r) == key)
            per_call = sum(ncu[r.name]["dram_bytes"] for r in rows if _signature(r) == key) / g.calls
            g.bytes_per_call, g.basis = per_call, "measured"
            g.model = f"ncu's measured DRAM bytes ({launches} launches), not a minimum"
            type_name = None
        else:
            continue
        per, g.side = roof_us(g.bytes_per_call, g.flops_per_call, peaks, type_name)
        g.roof_us = per * g.calls
        g.above_us = above_roof(g.measured_us, g.roof_us)
    return sorted(groups.values(), key=lambda g: (g.above_us is None, -(g.above_us or 0.0), g.key))


@dataclass
class Chain:
    """Consecutive calls passing a tensor through DRAM, over all its repeats: memory-bound calls,
    perhaps opened by the compute-bound call that writes the tensor and closed by the one that
    reads it last (attention's scores: bmm -> scale -> mask -> softmax -> bmm)."""
    ops: list[str]
    keys: list[str]
    repeats: int
    intermediate_bytes: float  # per repeat: each intermediate once
    measured_us: float
    saved_us: float


def _reads(r, cost: Cost | None) -> bool:
    """Call `r` reads `cost`'s output, as far as a trace without tensor identities tells: an input
    of its element count, last dimension and type (a view folding or splitting the leading
    dimensions moves no byte). Two unrelated tensors of one shape, back to back, look the same."""
    if cost is None or not cost.out_dims:
        return False
    n, last = math.prod(cost.out_dims), cost.out_dims[-1]
    return any(d and math.prod(d) == n and d[-1] == last and t == cost.out_type for d, t in r.inputs)


def _runs(info) -> list[list]:
    """The runs of `info` ((row, cost, us, side) per call) a fusion could merge: each call reads
    the previous one's output; memory-bound calls inside, a compute-bound call only first or
    last (it closes the run and may open the next); one call no rule knows the cost of (the
    mask attention builds beside its scores) is passed over, its time not counted."""
    runs, current, passed = [], [], False

    def close():  # two matmuls alone are no fusion of this kind, whatever their roofs
        if len(current) >= 2 and any(cost.flops is None for _, cost, *_ in current):
            runs.append(list(current))

    for item in info:
        r, cost, _, side = item
        if current and side is not None and _reads(r, current[-1][1]):
            passed = False
            current.append(item)
            if side == "compute":
                close()
                current = [item]
            continue
        if current and cost is None and not passed:
            passed = True
            continue
        close()
        current, passed = ([item] if side is not None else []), False
    close()
    return runs


def _call_info(rows, peaks: Peaks) -> list[tuple]:
    """(first row, its minimum cost or None, the call's GPU time, its roofline side or None) per op call."""
    info = []
    for call in _calls(rows):
        r = call[0]
        cost = minimum_cost(r.op, r.inputs, r.concrete) if r.op else None
        side = None if cost is None else roof_us(cost.bytes, cost.flops, peaks, cost.out_type)[1]
        info.append((r, cost, sum(k.us for k in call), side))
    return info


def _fused(calls: list, peaks: Peaks) -> tuple[float, float, float]:
    """(intermediate bytes, measured us, us saved) of `calls` fused into one kernel: each
    intermediate written and read again, over the bandwidth, never more than the calls' measured
    time less the fused kernel's roof (its other bytes and all its FLOPs)."""
    inter = sum(nbytes(c.out_dims, c.out_type) for _, c, _, _ in calls[:-1])
    measured = sum(us for _, _, us, _ in calls)
    fused_bytes = sum(c.bytes for _, c, _, _ in calls) - 2 * inter
    flops = sum(c.flops or 0 for _, c, _, _ in calls)
    fused_roof, _ = roof_us(max(fused_bytes, 0.0), flops or None, peaks, calls[0][1].out_type)
    return inter, measured, max(0.0, min(2 * inter / (peaks.bandwidth_gbps * 1e3), measured - fused_roof))


def fusion_chains(rows, peaks: Peaks) -> list[Chain]:
    """The runs (`_runs`) and the time fusing each would save: its intermediates written and
    read again, over the bandwidth, never more than the run's measured time less the fused
    run's roof (its other bytes and all its FLOPs). Repeats of one run (same signatures) are
    summed; most saved first."""
    info = _call_info(rows, peaks)
    chains: dict[tuple, Chain] = {}
    for run in _runs(info):
        keys = tuple(_signature(r) for r, *_ in run)
        inter, measured, saved = _fused(run, peaks)
        ch = chains.get(keys)
        if ch is None:
            chains[keys] = Chain([r.op for r, *_ in run], list(keys), 1, inter, measured, saved)
        else:
            ch.repeats += 1
            ch.measured_us += measured
            ch.saved_us += saved
    return sorted(chains.values(), key=lambda c: (-c.saved_us, c.keys))


def _interior(run: list) -> list:
    """The calls of a run that are not matmuls: what Inductor fuses into one generated kernel (it
    leaves matmuls to cuBLAS by default, so a matmul opening or closing the run stays apart)."""
    return [item for item in run if item[1].flops is None]  # a matmul is the call the cost rules give FLOPs


def compile_saving(rows, peaks: Peaks) -> dict | None:
    """What torch.compile (Inductor, default mode) would save of the GPU time: per run of
    `_runs`, its memory-bound calls fused into one kernel (two or more of them), each saving its
    intermediates written and read again, over the bandwidth, never more than their measured time
    less their fused roof. Matmuls stay as they are. None where no such run exists."""
    info = _call_info(rows, peaks)
    saved = measured = 0.0
    runs = launches = 0
    for run in _runs(info):
        inner = _interior(run)
        if len(inner) < 2:
            continue
        _, us, run_saved = _fused(inner, peaks)
        saved += run_saved
        measured += us
        runs += 1
        launches += len(inner) - 1
    if not runs or saved <= 0:
        return None
    return {"saved_us": saved, "runs": runs, "measured_us": measured, "calls_fused_away": launches}


def amdahl(total_us: float, saved_us: float) -> float:
    """The whole program's speedup when `saved_us` of its `total_us` goes away."""
    if total_us <= 0 or not 0 <= saved_us < total_us:
        raise ValueError(f"a saving of {saved_us} us out of {total_us} us")
    return total_us / (total_us - saved_us)


@dataclass
class Candidate:
    kind: str  # 'roofline' (a group to its roof), 'fusion' (a chain fused), 'compile' (Inductor's fusions),
    # 'graph' or 'sync' (hostside)
    title: str
    saved_us: float
    speedup: float
    evidence: dict


def rank(groups: list[Group], chains: list[Chain], total_us: float, top: int | None = None,
         host: tuple = ()) -> list[Candidate]:
    """Candidates by time saved (ties by title), each with its Amdahl speedup on `total_us`, the
    call's wall time: kernel ones (a group to its roof, a chain fused) beside the host fixes
    (kernlog.judge.hostside), so a host-bound call's kernel wins read at their worth."""
    out = [Candidate(h.kind, h.title, h.saved_us, 0.0, h.evidence) for h in host]
    for g in groups:
        if g.above_us and g.above_us > 0:
            out.append(Candidate("roofline", f"{g.key} to its {g.side} roof ({g.calls} calls)", g.above_us, 0.0,
                                 {"group": asdict(g)}))
    for c in chains:
        if c.saved_us > 0:
            out.append(Candidate("fusion", f"fuse {' -> '.join(c.ops)} ({c.repeats}x)", c.saved_us, 0.0,
                                 {"chain": asdict(c)}))
    out.sort(key=lambda c: (-c.saved_us, c.title))
    for c in out:
        c.speedup = amdahl(total_us, min(c.saved_us, 0.999 * total_us))
    return out[:top] if top else out


@dataclass(frozen=True)
class Verdict:
    outcome: str  # 'met', 'partly', 'missed'
    measured: float
    predicted: float
    band: float
    basis: str

    def line(self) -> str:
        return (f"{self.outcome}: measured {self.measured:.3f}x against {self.predicted:.3f}x predicted "
                f"(noise band {self.band:.1%}; {self.basis})")


def verdict(predicted: float, measured: float, band: float = BAND, basis: str = "") -> Verdict:
    """met: at least the prediction less the band; missed: no faster than 1 + band (noise);
    partly: between."""
    if measured >= predicted * (1 - band):
        outcome = "met"
    elif measured <= 1 + band:
        outcome = "missed"
    else:
        outcome = "partly"
    return Verdict(outcome, measured, predicted, band, basis)


def interleaved_speedup(base_ms: list[float], new_ms: list[float], band: float = BAND) -> tuple[float, float]:
    """(speedup, band) from samples taken in turn, baseline then new: the median of the pairs'
    ratios; the band widened to the ratios' half inter-quartile spread where that is wider."""
    if not base_ms or len(base_ms) != len(new_ms) or min(new_ms) <= 0:
        raise ValueError("interleaved samples come in pairs of positive times")
    ratios = [b / n for b, n in zip(base_ms, new_ms, strict=True)]
    mid = statistics.median(ratios)
    if len(ratios) >= 4:
        q = statistics.quantiles(ratios, n=4)
        band = max(band, (q[2] - q[0]) / 2 / mid)
    return mid, band


def stored_speedup(stored_total_us: float, new_ms: list[float]) -> float:
    """The speedup against the stored triage's total: its time over the new samples' median."""
    return stored_total_us / (statistics.median(new_ms) * 1e3)
