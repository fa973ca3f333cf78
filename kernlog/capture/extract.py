"""A profile record from what a revision's ncu pass measured (the actions of its NVTX range),
its timing samples and its declaration; and whether one is stored already."""
from __future__ import annotations

import math
from pathlib import Path

from kernlog import timing
from kernlog.capture import hotspots
from kernlog.capture import ncu as ncurep
from kernlog.errors import KernlogError, Unsupported
from kernlog.run.target import RANGE_PREFIX
from kernlog.spec import Kernel, Revision, Shape
from kernlog.store import profiles as store


def stored_state(root: Path, gpu: str, kernel: Kernel, rev: Revision, shape: Shape, dtype: str) -> str:
    """'missing', 'current' (same source hash) or 'stale'."""
    json_path, _ = store.profile_paths(root, gpu, kernel.name, rev.name, shape, dtype)
    if not json_path.exists():
        return "missing"
    try:
        prof = store.load_profile(root, json_path)
    except store.ProfileError:
        return "broken"
    if prof.imported and prof.source_sha256 is None:
        return "imported"
    return "current" if prof.source_sha256 == rev.sha256() else "stale"


def todo_revisions(root: Path, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, opts, gpu: str,
                   progress) -> list[Revision]:
    """The revisions `kernlog profile` profiles: those with no stored profile of their source on
    this GPU, a stale one included (the edit loop: edit, `profile`, `diff HEAD:K/R K/R` against
    the committed profile); all of them with --force (`opts.force`)."""
    todo, why = [], {"current": "at this source hash", "imported": "from an imported report",
                     "broken": "but its stored pair fails verification (`kernlog list` says why)"}
    for r in revs:
        name = f"{kernel.name}/{r.name}"
        state = "missing" if opts.force else stored_state(root, gpu, kernel, r, shape, dtype)
        if state == "stale":
            progress(f"{name}: source changed since its profile on {gpu}: profiled again (git keeps the old: "
                     f"kernlog diff HEAD:{name} {name})")
        if state in ("missing", "stale"):
            todo.append(r)
        else:
            progress(f"skip {name}: profiled on {gpu} {why[state]}; --force replaces it")
    return todo


def to_profile(root: Path, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, opts, gpu: str,
               progress) -> list[Revision]:
    """todo_revisions less what this machine cannot run (`runnable`), each decision in a line
    (none where `progress` is None: the same decisions said before, on a GPU named the same)."""
    say = progress or (lambda s: None)
    return runnable(kernel, revs, todo_revisions(root, kernel, revs, shape, dtype, opts, gpu, say), gpu, say)


def runnable(kernel: Kernel, revs: list[Revision], todo: list[Revision], gpu: str, progress) -> list[Revision]:
    """`todo` less the revisions this machine lacks something for (Revision.missing), each
    skipped in a line. Where none is left, a line says so; Unsupported where every revision
    asked for lacks something (`--rev liger` without Liger-Kernel)."""
    kept, lacking = [], []
    for r in todo:
        why = r.lacks()
        if why:
            progress(f"skip {kernel.name}/{r.name}: {why}")
            lacking.append(r.name)
        else:
            kept.append(r)
    if kept:
        return kept
    if lacking and len(lacking) == len(revs):
        raise Unsupported(f"this machine cannot run {', '.join(lacking)}: nothing was profiled")
    progress(f"{kernel.name}: nothing to profile: every revision has a profile of its source on {gpu}"
             + (f" or lacks what it needs ({', '.join(lacking)})" if lacking else "") + "; --force profiles again")
    return []


def build_record(report: Path | list, rev: Revision, samples: list[float], range_name: str | None = None,
                 clocks: dict | None = None, root: Path | None = None) -> dict:
    """The revision's part of a profile: metrics, findings and source-line hot spots from the
    kernels its ncu report (a path, or the report's actions) holds inside the NVTX range
    `range_name` (default: the one kernlog.run.target opens for it), and the timing pass's samples."""
    range_name = range_name or RANGE_PREFIX + rev.name
    actions = ncurep.read_report(report) if isinstance(report, Path) else report
    actions = ncurep.group_by_range(actions, range_name).get(range_name, [])
    values, facts = ncurep.summarize(actions)
    if not samples or not all(math.isfinite(x) and x > 0 for x in samples):
        raise KernlogError(f"{rev.name}: the timing pass gave no usable samples ({len(samples)}, non-finite, "
                           "zero or negative ones included); nothing was stored")
    summary = timing.summary(samples)
    values["wall_ms"] = summary["median_ms"]
    return {"revision": rev.name, "kind": rev.kind, "role": rev.role, "change": rev.change,
            "predicts": rev.predicts, "source_sha256": rev.sha256(), "metrics": values, "facts": facts,
            "findings": ncurep.findings(actions),
            "hotspots": hotspots.of_revision(actions, root or Path.cwd(), rev.sources),
            "timing": dict(summary, samples_ms=[round(x, 5) for x in samples],
                           l2_flush_bytes=timing.FLUSH_BYTES, warmup=3, clocks=clocks),
            "ncu": {"replay_passes": ncurep.replay_passes(actions), "nvtx_range": range_name}}
