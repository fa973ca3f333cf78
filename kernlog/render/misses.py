"""The log's missed bars as a list to act on: every sweep point where the ladder's best step or
its counterpart falls short of a bar (report's ✗), with the figure, the bar, whether the two
points were timed in one run, and whether ncu profiles of both sides exist at that point (the
evidence of why), with the `kernlog profile` command that takes the missing ones."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kernlog.judge.verdicts import COPY_BAR
from kernlog.render.facts import collect, unreadable
from kernlog.spec import COPY

GATE_FAILED = "fails the gate"  # a side the sweep records failing kernlog's gate there (‡): never profiled


@dataclass(frozen=True)
class Miss:
    kernel: str
    gpu: str
    dtype: str
    shape: str
    revision: str  # the best step or the counterpart
    against: str  # the best reference there, or "copy"
    value: float  # its speed over the reference's, or its share of copy
    need: float
    apart: bool  # the two figures come from different bench runs
    profiled: dict  # revision -> "current", "stale", "none" or GATE_FAILED: an ncu profile at this point

    def unprofiled(self) -> list[str]:
        """The sides `kernlog profile` could still take here (one that fails the gate it refuses)."""
        return [r for r, state in self.profiled.items() if state not in ("current", GATE_FAILED)]


def profile_commands(misses: list[Miss]) -> list[str]:
    """One `kernlog profile` a point (kernel, shape, dtype) where a side of a miss has no current
    ncu profile: every such revision there (--force where one is stale)."""
    points: dict = {}
    for m in misses:
        revs, force = points.setdefault((m.kernel, m.shape, m.dtype), ([], [False]))
        for r in m.unprofiled():
            if r not in revs:
                revs.append(r)
            force[0] = force[0] or m.profiled[r] == "stale"
    return [f"kernlog profile {k} {' '.join(f'--rev {r}' for r in revs)} --shape {shape} --dtype {dtype}"
            + (" --force" if force[0] else "")
            for (k, shape, dtype), (revs, force) in points.items() if revs]


def find(root: Path, kernels: list) -> tuple[list[Miss], list]:
    """Every missed bar of `kernels`' sweeps, in the log's order, and the profiles that failed
    verification (store.ProfileError): an unreadable profile is no evidence, and is named."""
    out = []
    sections = collect(root, kernels, histories=False)
    for section in sections:
        name = section["kernel"].name
        profiled: dict = {}  # (gpu name, shape, dtype) -> {revision: "current" | "stale"}
        for lad in section["ladders"]:
            point = profiled.setdefault((lad["gpu"]["name"], lad["shape"], lad["dtype"]), {})
            for row in lad["rows"]:
                point[row["rec"].revision] = "stale" if row["stale"] else "current"
        for sw in section["sweeps"]:
            for row in sw["missed"]:
                have = profiled.get((sw["gpu"], row["shape"], row["dtype"]), {})
                for b in row["bars"]:
                    short = []
                    if b["ref_met"] is False:
                        short.append((b["best_ref"], b["vs_ref"], b["need"], b["apart_ref"]))
                    if b["copy_met"] is False:
                        short.append((COPY, b["of_copy"], COPY_BAR, b["apart_copy"]))
                    for against, value, need, apart in short:
                        sides = [b["name"]] + ([against] if against != COPY else [])
                        state = {r: have.get(r, GATE_FAILED if r in row["fails_gate"] else "none") for r in sides}
                        out.append(Miss(name, sw["gpu"], row["dtype"], row["shape"], b["name"], against, value, need,
                                        apart, state))
    return out, unreadable(sections)


def text(misses: list[Miss]) -> str:
    """One line a miss, then the profile commands for those without current ncu evidence."""
    if not misses:
        return "no missed bars in the sweeps"
    lines = []
    for m in misses:
        figure = (f"{100 * m.value:.1f}% of copy (bar {100 * m.need:.0f}%)" if m.against == COPY
                  else f"{m.value:.2f}x {m.against} (bar {m.need:.2f}x)")
        evidence = ", ".join(f"{r} {state}" for r, state in m.profiled.items())
        lines.append(f"{m.kernel} {m.dtype} {m.shape} on {m.gpu}: {m.revision} {figure}"
                     f"{' [runs apart]' if m.apart else ''}; ncu: {evidence}")
    todo = profile_commands(misses)
    lines.append(f"{len(misses)} missed bar(s); {len(todo)} point(s) without current ncu profiles of both sides"
                 + (":" if todo else ""))
    lines += [f"  {c}" for c in todo]
    return "\n".join(lines)


def as_json(misses: list[Miss]) -> list[dict]:
    return [asdict(m) for m in misses]
