"""Where a call's wall time goes outside its kernels, and what a host-side fix would buy: pure,
no I/O, no torch.

`split` accounts the traced call (kernlog.capture.trace.Timeline) exactly: the GPU busy in
kernels, busy in copies, and idle, each idle stretch either after a host synchronization (the
GPU drained while the host waited, then waited for the host to issue again) or a launch gap
(host work and launch latency before the next activity), attributed to the op and module that
issued the activity after it, or to the synchronizing op. The parts sum to the traced call.

The traced call runs under the profiler, which slows the host (shapes and stacks recorded), so
its gaps are longer than the program's. The timed call (no profiler) gives the wall time; the
GPU's busy time is the trace's (CUPTI times kernels on the GPU, unslowed); the idle time is
their difference, shared among the causes in the traced call's proportions.

`candidates`: host fixes, each predicted on the wall time (Amdahl, like the kernel candidates):
- a synchronization inside the call (`.item()`, a blocking copy, `torch.cuda.synchronize`):
  removing it saves the idle stretch after it;
- a call with no synchronization captured in a CUDA graph: each launch then costs at least the
  GPU's per-launch floor in a graph (measured: kernlog.timing.measure_launch_floor), so the call
  takes the busy time plus, per kernel shorter than the floor, what it lacks of it.
A host candidate is named only where it buys more than the noise band.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

SYNC_SLACK_US = 5.0  # a sync returns a few microseconds after the GPU drains
GAPS_KEPT = 6  # idle stretches named per triage, longest total first


@dataclass
class Split:
    wall_us: float  # the timed call (no profiler): the record's total_us
    busy_us: float  # the GPU busy in the traced call (kernels and copies)
    idle_us: float  # wall - busy (at least 0): the GPU waiting on the host in the timed call
    traced_us: float  # the traced call, first host event to last GPU activity (profiler on)
    kernel_us: float  # traced: the GPU busy in kernels
    copy_us: float  # traced: the GPU busy in copies and memsets and in no kernel
    launch_gap_us: float  # traced: the GPU idle before a launch (host work, launch latency)
    sync_gap_us: float  # traced: the GPU idle after a host synchronization
    launches: int
    syncs: int  # synchronizations inside the call
    gaps: list[dict] = field(default_factory=list)  # cause, op, module, count, traced_us, us (scaled to the timed call)
    # copies and memsets by the op and module that issued them: op, module, count, us
    copies: list[dict] = field(default_factory=list)

    @property
    def scale(self) -> float:
        """Timed idle over traced idle: how a traced gap converts to the timed call."""
        traced_idle = self.launch_gap_us + self.sync_gap_us
        return self.idle_us / traced_idle if traced_idle > 0 else 0.0


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def split(timeline, wall_us: float) -> Split:
    """The traced call accounted (kernels + copies + launch gaps + sync gaps = traced_us), and
    the timed call's idle time (wall - busy) shared among the gaps' causes."""
    acts = sorted(timeline.activities, key=lambda a: (a.start_us, a.end_us))
    kernel_us = _union([(a.start_us, a.end_us) for a in acts if a.kind == "kernel"])
    busy = _union([(a.start_us, a.end_us) for a in acts])
    stretches: dict[tuple, dict] = defaultdict(lambda: {"count": 0, "traced_us": 0.0})
    launch_gap = sync_gap = 0.0
    end = timeline.start_us
    for a in acts:
        if a.start_us > end:
            gap = a.start_us - end
            sync = next((s for s in timeline.syncs if end - SYNC_SLACK_US <= s.end_us <= a.start_us), None)
            if sync is not None:
                key = ("sync", sync.top_op or sync.name, sync.module)
                sync_gap += gap
            else:
                key = ("launch", a.op, a.module)
                launch_gap += gap
            stretches[key]["count"] += 1
            stretches[key]["traced_us"] += gap
        end = max(end, a.end_us)
    out = Split(wall_us=wall_us, busy_us=busy, idle_us=max(0.0, wall_us - busy),
                traced_us=timeline.end_us - timeline.start_us, kernel_us=kernel_us, copy_us=busy - kernel_us,
                launch_gap_us=launch_gap, sync_gap_us=sync_gap,
                launches=timeline.launches, syncs=len(timeline.syncs))
    copies: dict[tuple, dict] = defaultdict(lambda: {"count": 0, "us": 0.0})
    for a in acts:
        if a.kind == "copy":
            copies[(a.op, a.module)]["count"] += 1
            copies[(a.op, a.module)]["us"] += a.end_us - a.start_us
    out.copies = [{"op": op, "module": mod, "count": v["count"], "us": round(v["us"], 3)} for (op, mod), v in
                  sorted(copies.items(), key=lambda kv: (-kv[1]["us"], kv[0]))[:GAPS_KEPT]]
    ranked = sorted(stretches.items(), key=lambda kv: (-kv[1]["traced_us"], kv[0]))
    out.gaps = [{"cause": c, "op": op, "module": mod, "count": v["count"], "traced_us": round(v["traced_us"], 3),
                 "us": round(v["traced_us"] * out.scale, 3)} for (c, op, mod), v in ranked[:GAPS_KEPT]]
    return out


def graph_us(timeline, floor_us: float) -> float:
    """The call's predicted time captured in a CUDA graph: the GPU busy time, each kernel shorter
    than the per-launch floor raised to it (serial launches: a graph issues them back to back)."""
    acts = timeline.activities
    return _union([(a.start_us, a.end_us) for a in acts]) + sum(
        max(0.0, floor_us - (a.end_us - a.start_us)) for a in acts if a.kind == "kernel")


@dataclass
class HostFix:
    kind: str  # 'graph' or 'sync'
    title: str
    saved_us: float
    evidence: dict


def beyond(saved_us: float, wall_us: float, band: float) -> bool:
    """Whether saving `saved_us` of `wall_us` speeds the call up by more than the noise band."""
    return wall_us > 0 and saved_us > 0 and wall_us / max(wall_us - saved_us, 1e-9) > 1 + band


def candidates(timeline, s: Split, floor_us: float | None, band: float) -> list[HostFix]:
    """The host fixes that buy more than `band` of the wall time: each synchronization site's
    idle stretch; where the call has none, capturing it in a CUDA graph (needs the floor)."""
    out = []
    for g in s.gaps:
        if g["cause"] == "sync" and beyond(g["us"], s.wall_us, band):
            where = f" in {g['module']}" if g["module"] else ""
            out.append(HostFix("sync", f"remove the host sync at {g['op']}{where} ({g['count']} calls)", g["us"],
                               {"gap": g, "idle_us": s.idle_us}))
    if not s.syncs and floor_us:
        predicted = graph_us(timeline, floor_us)
        saved = s.wall_us - predicted
        if beyond(saved, s.wall_us, band):
            out.append(HostFix("graph", f"capture the call in a CUDA graph ({s.launches} launches)", saved,
                               {"predicted_us": predicted, "floor_us": floor_us, "busy_us": s.busy_us,
                                "idle_us": s.idle_us, "launches": s.launches}))
    return out
