"""The log's missed bars as a list to act on: every sweep point where the ladder's best step or
its counterpart falls short of a bar (report's ✗), with the figure, the bar, whether the two
points were timed in one run, and whether ncu profiles of both sides exist at that point (the
evidence of why), with the `kernlog profile` command that takes the missing ones."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kernlog.judge.verdicts import COPY_BAR, COPY_BAR_BYTES
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


@dataclass(frozen=True)
class Found:
    """What `kernlog misses` judged: the misses, the profiles that failed verification, and how
    much was judged at all (sweeps of the kernels asked, and bars with a verdict in them)."""
    misses: list[Miss]
    bad: list  # store.ProfileError
    sweeps: int  # bench.csv files of the kernels asked, one a GPU
    bars: int  # bar cells judged, met or missed (a step or counterpart against a reference, or the copy)


def find(root: Path, kernels: list) -> tuple[list[Miss], list]:
    """Every missed bar of `kernels`' sweeps, in the log's order, and the profiles that failed
    verification (store.ProfileError): an unreadable profile is no evidence, and is named."""
    found = judge(root, kernels)
    return found.misses, found.bad


def judge(root: Path, kernels: list) -> Found:
    """find's misses and unreadable profiles, with how many sweeps and judged bars there are."""
    sections = collect(root, kernels, histories=False)
    sweeps = [sw for section in sections for sw in section["sweeps"]]
    bars = sum(b[met] is not None for sw in sweeps for row in sw["rows"] for b in row["bars"]
               for met in ("ref_met", "copy_met"))
    return Found(_misses(sections), unreadable(sections), len(sweeps), bars)


def nothing_judged(found: Found, kernels: list, allow_empty: bool = False) -> str | None:
    """The line saying `kernlog misses` judged nothing, where it did (None where some bar was
    judged): no sweep of the kernels asked, or sweeps none of whose points judges a bar (no step
    or counterpart beside a reference, no tensor of COPY_BAR_BYTES or more beside the copy).
    Nothing judged is never "no missed bars". Without `allow_empty` the line names the flag."""
    what = kernels[0].name if len(kernels) == 1 else "KERNEL"
    todo = f"run kernlog bench {what} --family all on a GPU machine" + (
        "" if allow_empty else "; or pass --allow-empty to let it pass")
    if not found.sweeps:
        return f"no sweeps: nothing judged ({todo})"
    if not found.bars:
        return (f"no bar judged: the sweeps time no step or counterpart beside a reference, nor a tensor of "
                f"{COPY_BAR_BYTES / 1e6:.0f} MB or more beside the copy ({todo})")
    return None


def _misses(sections: list[dict]) -> list[Miss]:
    out = []
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
    return out


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
