"""Where a ladder's profiles and its GPU's sweep measured one point apart: the same revision,
source hash, shape, dtype and GPU, timed by `kernlog profile` (its timing pass) and by
`kernlog bench`, with medians further apart than noise. The page prints each under the arc
table, with both figures and the band, instead of showing two figures silently.

The band is the one the sweep's bars judge by: the GPU's calibrated wall-time band
(kernlog.judge.bands), widened to the point's run-to-run spread where `kernlog bench --repeat`
measured a wider one. Absolute medians are compared: the profile's wall time comes from
kernlog's own timing pass (not ncu's clock-locked replay), and on the committed H100 data the
two agree to a median ratio of 1.00 with no systematic offset, so a ratio against a reference
would only add the reference's noise. An imported profile (ncu's duration stands for its time)
is not compared. A disagreement is a measurement fact, not a broken log: a visible note, never
a `report --check` failure.
"""
from __future__ import annotations

from pathlib import Path

from kernlog.judge.bands import bands_of
from kernlog.judge.verdicts import LAUNCH_BOUND_US, Band, launch_bound
from kernlog.render.arc import sweep_of


def of_ladders(root: Path, ladders: list[dict], sweeps: list[dict]) -> None:
    """Sets each ladder's "disagree": its points where profile and sweep disagree beyond noise
    (the sweep of the ladder's GPU, as kernlog.render.sweeps read it: its "medians")."""
    for lad in ladders:
        sw = sweep_of(sweeps, lad["gpu"]["name"])
        points = sw["medians"] if sw else {}
        lad["disagree"] = disagreements(lad, points, bands_of(root, lad["gpu"]["slug"])("wall_ms")) if points else []


def disagreements(lad: dict, points: dict, band: Band) -> list[dict]:
    """The ladder's revisions whose profiled median wall time and swept median at the same
    point, measured on the same source, lie further apart than `band` (widened to the point's
    measured spread): revision, both times in us, how far apart and the band, relative;
    "launch_bound": the launch-bound threshold in us where either time is under it, else None."""
    out = []
    for row in lad["rows"]:
        rec = row["rec"]
        rev = rec.revision
        point = points.get((rev, lad["shape"], lad["dtype"]))
        sha = rec.source_sha256
        if point is None or rec.imported or not sha or point[1] != sha:
            continue
        swept, _, spread = point
        profiled = rec.metrics["wall_ms"]
        wide = Band(max(band.rel, spread), band.abs, band.source)
        if wide.holds(profiled, swept):
            continue
        out.append({"revision": rev, "profile_us": profiled * 1e3, "sweep_us": swept * 1e3,
                    "apart": abs(profiled - swept) / max(profiled, swept), "band": wide.rel,
                    "launch_bound": LAUNCH_BOUND_US if launch_bound(min(profiled, swept) * 1e3) else None})
    return out
