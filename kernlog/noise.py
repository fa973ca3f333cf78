"""Noise bands: how far a metric moves between two profiles of the same code on one GPU.

`kernlog noise` measures it (A/A: the same revisions timed and profiled several times,
interleaved, each time in fresh processes as `kernlog profile` would) and stores one
calibration per revision in profiles/<gpu>/<kernel>/noise/<rev>.<shape>.<dtype>.json.
`diff` judges a change as "same" while |b - a| <= rel * max(|a|, |b|) + abs.

Without a calibration for the GPU, DEFAULT_BANDS apply, per metric kind (see
kernlog.metrics): time and rates 3.5%, the 90th percentile of run-to-run spread measured
on the H100 (shared/GPU.md: 0.7% median, 2-3.5% p90 over 26 cells); amounts 1%; stalls
10% or 0.05 cycles per instruction; utilisations 3.5% or half a point; hit rates 2% or half
a point; launch configuration exactly.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from .metrics import metric

SCHEMA = 1
SAFETY = 1.5  # a band is 1.5x the widest spread seen: a later run may fall outside N runs' range
MIN_REL = {"time": 0.005, "rate": 0.005, "util": 0.005}  # a calibrated band is never narrower


@dataclass(frozen=True)
class Band:
    rel: float
    abs: float
    source: str  # "default (time)", "calibrated: nvidia-h100-80gb-hbm3, 3 revisions x 5 runs"

    def holds(self, a: float, b: float) -> bool:
        return abs(b - a) <= self.rel * max(abs(a), abs(b)) + self.abs + 1e-12

    def as_dict(self) -> dict:
        return {"rel": round(self.rel, 6), "abs": self.abs, "source": self.source}


DEFAULT_BANDS = {
    "time": (0.035, 0.0), "rate": (0.035, 0.0), "amount": (0.01, 0.0), "util": (0.035, 0.5),
    "stall": (0.10, 0.05), "ratio": (0.02, 0.5), "config": (0.0, 0.0),
}


def default_band(key: str) -> Band:
    kind = metric(key).kind
    rel, ab = DEFAULT_BANDS[kind]
    return Band(rel, ab, f"default ({kind})")


def spread(runs: list[dict]) -> dict[str, dict]:
    """Per metric over the runs' values: median, max - min, and (max - min) / |median|."""
    out = {}
    keys = sorted({k for r in runs for k in r})
    for key in keys:
        vals = [r.get(key) for r in runs]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        if len(vals) < 2:
            continue
        med = statistics.median(vals)
        width = max(vals) - min(vals)
        out[key] = {"median": med, "abs": width, "rel": width / abs(med) if med else (0.0 if width == 0 else None),
                    "n": len(vals)}
    return out


def noise_dir(root: Path, gpu: str, kernel: str) -> Path:
    from .store import kernel_dir

    return kernel_dir(root, gpu, kernel) / "noise"


def load_calibrations(root: Path, gpu: str) -> list[dict]:
    """Every calibration stored for a GPU; an unreadable one is skipped by name in `problems`."""
    out = []
    for path in sorted((root / "profiles").glob(f"{gpu}/*/noise/*.json")):
        try:
            data = json.loads(path.read_text())
            if data.get("schema") != SCHEMA or not isinstance(data.get("spread"), dict):
                continue
        except (OSError, ValueError):
            continue
        data["_path"] = str(path.relative_to(root))
        out.append(data)
    return out


class Bands:
    """The band of each metric for one comparison: calibrations of the GPU both sides ran
    on, those of the two revisions themselves first; defaults where none applies."""

    def __init__(self, calibrations: list[dict], gpu: str | None, own: set[tuple] = frozenset()):
        self.gpu = gpu
        mine = [c for c in calibrations if (c["kernel"], c["revision"], tuple(c["shape"]), c["dtype"]) in own]
        self.cals = mine or calibrations
        if not self.cals:
            self.what = None
        elif mine:
            self.what = "calibrated on these revisions: " + ", ".join(sorted(
                f"{c['kernel']}/{c['revision']} ({c['runs_n']} runs)" for c in mine))
        else:
            self.what = f"calibrated on {gpu}: {len(self.cals)} revisions"
        self._cache: dict[str, Band] = {}

    def __call__(self, key: str) -> Band:
        if key not in self._cache:
            self._cache[key] = self._band(key)
        return self._cache[key]

    def _band(self, key: str) -> Band:
        base = default_band(key)
        kind = metric(key).kind
        rels = []
        for c in self.cals:
            s = c["spread"].get(key)
            # A value near zero (a stall of 0.01 cycles) says nothing about relative spread.
            if s and s.get("rel") is not None and abs(s["median"]) > 10 * base.abs:
                rels.append(s["rel"])
        if not rels:
            return base
        rel = max(SAFETY * max(rels), MIN_REL.get(kind, 0.0))
        return Band(rel, base.abs, self.what)

    def describe(self) -> str:
        return self.what or "default bands (no noise calibration for this GPU; `kernlog noise` measures one)"


def bands_for(root: Path, a: dict, b: dict) -> Bands:
    """The bands for comparing profile records a and b. Across two GPUs the wider of the two
    calibrations is not known: defaults apply."""
    ga, gb = a["gpu"]["slug"], b["gpu"]["slug"]
    if ga != gb:
        return Bands([], None)
    own = {(r["kernel"], r["revision"], tuple(r["shape"]), r["dtype"]) for r in (a, b)}
    return Bands(load_calibrations(root, ga), ga, own)
