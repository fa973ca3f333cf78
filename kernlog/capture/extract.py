"""A profile record from what a revision's ncu pass measured (the actions of its NVTX range),
its timing samples and its declaration."""
from __future__ import annotations

import math
from pathlib import Path

from kernlog import timing
from kernlog.capture import hotspots
from kernlog.capture import ncu as ncurep
from kernlog.errors import KernlogError
from kernlog.run.target import RANGE_PREFIX
from kernlog.spec import Revision


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
