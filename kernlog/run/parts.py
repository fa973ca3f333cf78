"""A ladder's gates as jobs for processes side by side, longest first, a revision's gate split
into parts where it alone would be the floor.

On the H100 the softmax ladder's gates are mostly compiling, and two of them ran longest, side
by side with the others: the Triton counterpart's (84 s: a compile per gate shape and dtype)
and the torch.compile reference's (75 s: a graph per dtype, stride and size-1 rows or
columns). Given `workers` processes, the gates end no sooner than the longest one, however
many workers wait.
A part (gate.Part) is some of a revision's dtypes and shapes, every case of each: every
(shape, dtype, case) of the whole is in exactly one part, its inputs drawn from one seed as the
whole gate draws them (the shape's place in the gate's shapes seeds it), so the parts together
prove what the whole proves, and `merge` says it as the whole would, failure first.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from kernlog.errors import KernlogError
from kernlog.run.gate import Part
from kernlog.spec import Kernel, Revision

# What a part costs besides its checks: a process (Python, torch, Triton, a CUDA context) and
# the compiles it shares with the other parts. On an H200 host (16 cores), the softmax Triton
# counterpart's gate took 25.6 s in one process, 12.2 s in 8 parts side by side, 84.6 s of
# process time: 7.4 s a part. A part is worth its process only where it saves more than that.
PROCESS_S = 8.0
MAX_PARTS = 8
# Seconds of a gate never run on this GPU, by kind (kernlog.capture.costs reads the measured
# ones from the outcomes file), from empty caches, alone on that H200 host: the Triton
# counterpart's 26 s, torch.compile's 18 s, NVRTC once per revision for CUDA C.
ESTIMATE_S = {"triton": 30.0, "compiled": 20.0, "cuda": 8.0, "torch": 4.0}
# A CUDA C gate is mostly NVRTC compiling its source and what it includes: on a 4-GPU H200 host,
# 8 side by side from empty caches, the softmax rungs took 7.8-11 s for 6-10 KB of source and
# includes, 14.5-25 s for 16-51 KB (v10_meet): about 6 s and 0.35 s a KB.
CUDA_S, CUDA_S_PER_KB = 6.0, 0.35


def estimate(rev: Revision) -> float:
    """A guess at `rev`'s gate seconds on a GPU where it never ran (ESTIMATE_S; for CUDA C, by
    the size of what NVRTC compiles)."""
    if rev.kind == "cuda" and not compiled(rev):
        from kernlog.cuda import includes

        try:
            size = sum(f.stat().st_size for s in rev.sources if s.suffix in (".cu", ".cuh")
                       for f in (s, *includes(s)))
        except (OSError, KernlogError):
            return ESTIMATE_S["cuda"]
        return round(CUDA_S + CUDA_S_PER_KB * size / 1024, 1) if size else ESTIMATE_S["cuda"]
    return ESTIMATE_S["compiled" if compiled(rev) else rev.kind]


def compiled(rev: Revision) -> bool:
    """Whether `rev` is gated through torch.compile (Revision.load_for_gate), which is never split:
    each part starts Inductor and compiles its first graph static again (the softmax reference
    took 17.7 s whole, 24.9 s in 2 parts, 44 s of process time, on that H200 host)."""
    return rev.load_for_gate is not None


def split(kernel: Kernel, rev: Revision, n: int) -> list[Part]:
    """`rev`'s gate in at most `n` parts: a dtype each first (each compiles its own graphs and
    kernels), then each dtype's shapes dealt out in turn to as many parts as are left (long and
    short shapes mixed). One part, the whole, where n <= 1. Each part starts its untimed picks
    at its own turn."""
    shapes = tuple(i for i, s in enumerate(kernel.gate_shapes_of(rev)) if not rev.refusal(s))
    dtypes = tuple(kernel.dtypes)
    if n <= 1 or not shapes:
        return [Part(dtypes, shapes)]
    if n < len(dtypes):
        groups = [(dtypes[j::n], shapes) for j in range(n)]
    else:
        per = min(n // len(dtypes), len(shapes))
        groups = [((d,), shapes[j::per]) for d in dtypes for j in range(per)]
    return [Part(d, s, turn) for turn, (d, s) in enumerate(groups)]


def pieces(costs: dict[str, float], workers: int, most: dict[str, int] | None = None) -> dict[str, int]:
    """How many parts each gate (`costs`: {revision: seconds}) runs in, so that none is longer
    than the gates' fair share of `workers` processes: a gate over that share is cut into as
    many parts as it holds shares, where each part still saves more than a process costs
    (PROCESS_S), at most MAX_PARTS (and `most`[revision], the parts its plan holds)."""
    if workers <= 1 or not costs:
        return {name: 1 for name in costs}
    share = max(sum(costs.values()) / workers, PROCESS_S)
    out = {}
    for name, cost in costs.items():
        n = min(math.ceil(cost / share), MAX_PARTS, (most or {}).get(name, MAX_PARTS), workers)
        while n > 1 and cost - (cost / n + PROCESS_S) < PROCESS_S:
            n -= 1
        out[name] = max(1, n)
    return out


def jobs(kernel: Kernel, revs: Sequence[Revision], workers: int,
         costs: dict[str, float]) -> list[tuple[Revision, Part | None, float]]:
    """(revision, its part or None for the whole gate, its seconds) of every gate to run, the
    longest first (longest-processing-time-first: a pool of `workers` that takes them in this
    order ends within 4/3 of the best order). `costs`: {revision: seconds}, estimate() where
    missing."""
    seconds = {r.name: costs.get(r.name) or estimate(r) for r in revs}
    most = {r.name: 1 if compiled(r) else len(split(kernel, r, MAX_PARTS)) for r in revs}
    n = pieces(seconds, workers, most)
    out = []
    for rev in revs:
        parts = split(kernel, rev, n[rev.name]) if n[rev.name] > 1 else [None]
        out += [(rev, part, seconds[rev.name] / len(parts)) for part in parts]
    return sorted(out, key=lambda job: -job[2])


def merge(verdicts: list[tuple]) -> tuple:
    """The (outcome, detail, seconds) of a revision's parts, in `split`'s order, as its whole
    gate's: the first part's failure where one failed (a wrong answer is the finding, whatever
    else could not run); else the first that could not run here ("cannot_run") or needs what
    this GPU lacks ("unsupported"); else ok, with every part's cases and the worst error. The
    seconds are about what the whole would take in one process, the gate's cost however it is
    split next time: the parts' sum, less a process (PROCESS_S) for each part past the first
    (on a 2-GPU H200 host the Triton counterpart's 4 parts summed 80 s)."""
    seconds = round(max(sum(v[2] for v in verdicts) - PROCESS_S * (len(verdicts) - 1),
                        max((v[2] for v in verdicts), default=0.0)), 2)
    for word in ("failed", "cannot_run", "unsupported"):
        hit = next((v for v in verdicts if v[0] == word), None)
        if hit is not None:
            return (word, hit[1], seconds)
    return ("ok", {"cases": sum(v[1]["cases"] for v in verdicts),
                   "worst_rel_error": max(v[1]["worst_rel_error"] for v in verdicts)}, seconds)
