"""What each revision's share of `kernlog profile` costs, in seconds, so that work is dealt out by
cost, not by count (kernlog.run.fanout.deal, kernlog.run.parts.jobs): its gate from the
outcomes file (the seconds its last gate took; none where a pass is reused), its ncu pass from
its stored profile (the ncu process's seconds over the revisions it held), and its timing pass
from the timing budget. What was never measured on this GPU is estimated (parts.estimate, NCU_S).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernlog.run import parts
from kernlog.run.fanout import gate_workers
from kernlog.spec import Kernel, Revision, Shape
from kernlog.store import gates
from kernlog.store import profiles as store

# An ncu pass per revision never profiled here: the softmax ladder's ncu process took 56 s
# for its 13 revisions on the H100.
NCU_S = 4.5
# A timing pass's seconds besides its budget: loading, the L2 flushes, the recheck after it.
TIMING_S = 1.0


def gate_seconds(root: Path, gpu: str, kernel: Kernel, revs: list[Revision]) -> dict[str, float]:
    """{revision: its last gate's seconds on `gpu`}, as the outcomes file keeps them; an estimate
    (parts.estimate) where none is kept."""
    stored = gates.load(root, gpu, kernel.name)
    out = {}
    for rev in revs:
        seconds = (stored.get(rev.name) or {}).get("seconds")
        out[rev.name] = float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else parts.estimate(rev)
    return out


def ncu_seconds(root: Path, gpu: str, kernel: Kernel, rev: Revision, shape: Shape, dtype: str) -> float:
    """The ncu pass of `rev` at (shape, dtype) on `gpu`: its stored profile's ncu process seconds
    over the revisions that process held (of any source: the kernel's cost hardly moves with an
    edit); NCU_S where none is stored or it does not say."""
    path, _ = store.profile_paths(root, gpu, kernel.name, rev.name, shape, dtype)
    if not path.exists():
        return NCU_S
    try:
        ncu = store.load_profile(root, path).ncu.rest
    except (store.ProfileError, OSError, ValueError):
        return NCU_S
    seconds, held = ncu.get("process_seconds"), ncu.get("process_revisions") or [rev.name]
    return float(seconds) / len(held) if isinstance(seconds, (int, float)) and seconds > 0 else NCU_S


@dataclass(frozen=True)
class Cost:
    """A revision's share of `kernlog profile`: its gate (side by side with the others') and what
    comes after it one revision at a time (its timing pass and its ncu pass)."""
    gate: float
    after: float

    @property
    def total(self) -> float:
        return self.gate + self.after


def seconds(root: Path, gpu: str, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str,
            timing_budget_s: float, reused: set[str] = frozenset()) -> dict[str, Cost]:
    """{revision: its Cost: the seconds of its gate (none where `reused` names it), then of its
    timing and ncu passes}. A known-wrong revision is gated alone, never timed or profiled."""
    gate = gate_seconds(root, gpu, kernel, revs)
    return {rev.name: Cost(0.0 if rev.name in reused else gate[rev.name],
                           0.0 if rev.known_wrong else
                           timing_budget_s + TIMING_S + ncu_seconds(root, gpu, kernel, rev, shape, dtype))
            for rev in revs}


def span(kernel: Kernel, revs: list[Revision], cost: dict[str, Cost]) -> float:
    """How long one `kernlog profile` process takes over `revs`: their gates side by side
    (gate_workers processes, a long gate in parts as kernlog.run.parts cuts it), which end no
    sooner than the longest part, nor than their sum shared out; then each revision's timing
    and ncu passes, one after another (the ncu process warms each up as its gate passes)."""
    gates = {r.name: cost[r.name].gate for r in revs if cost[r.name].gate > 0}
    workers = gate_workers(len(gates) * parts.MAX_PARTS)
    longest = max((s for _, _, s in parts.jobs(kernel, [r for r in revs if r.name in gates], workers, gates)),
                  default=0.0)
    return max(longest, sum(gates.values()) / max(1, workers)) + sum(cost[r.name].after for r in revs)
