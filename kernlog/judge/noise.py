"""Noise bands: how far a metric moves between two profiles of the same code on one GPU.

`kernlog noise` measures it (A/A: the same revisions timed and profiled several times,
interleaved, each time in fresh processes as `kernlog profile` would) and stores one
calibration per revision in profiles/<gpu>/<kernel>/noise/<rev>.<shape>.<dtype>.json.
`diff` judges a change as "same" while |b - a| <= rel * max(|a|, |b|) + abs.

From a calibration's runs: the runs are grouped by launch configuration (a launcher that
picks by timing may pick differently from run to run; a different config is a change, not
noise); within each group of two or more runs, sigma = range / d2(n) (the expected range of
n normal draws is d2(n) sigma); the band is 2.576 * sqrt(2) * the largest sigma: 99% of the
differences between two runs of one config fall inside it. For times, rates and
utilisations the band is never under FLOOR: every device call may land on another board,
which runs inside one call cannot see (on the H100, an A/A of softmax v0_naive across two
leases moved 1.4% where its four same-lease runs spanned 0.6%).

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

from kernlog.metrics import metric

SCHEMA = 1
Z99 = 2.576  # two-sided 99%
D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
FLOOR = {"time": 0.02, "rate": 0.02, "util": 0.02}  # a calibrated band is never narrower (see above)


def config_of(run: dict) -> tuple:
    """The launch configuration a run's metrics show (block, grid, registers, shared memory...)."""
    return tuple(sorted((k, v) for k, v in run.items() if metric(k).kind == "config"))


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
    """Per metric over the runs' values, within groups of one launch configuration: median,
    max - min, (max - min) / |median| and sigma / |median| (range / d2(n)), each the widest of
    the groups of two or more runs; `n` counts the runs those groups hold, `configs` the groups."""
    groups: dict = {}
    for r in runs:
        groups.setdefault(config_of(r), []).append(r)
    out: dict = {}
    for group in groups.values():
        for key in sorted({k for r in group for k in r}):
            vals = [r.get(key) for r in group]
            vals = [v for v in vals if v is not None and math.isfinite(v)]
            if len(vals) < 2:
                continue
            med = statistics.median(vals)
            width = max(vals) - min(vals)
            rel = width / abs(med) if med else (0.0 if width == 0 else None)
            sigma = None if rel is None else rel / D2.get(len(vals), 3.078)
            prev = out.get(key)
            if prev is None or (sigma or 0) > (prev["sigma_rel"] or 0):
                out[key] = {"median": med, "abs": width, "rel": rel, "sigma_rel": sigma, "n": len(vals),
                            "configs": len(groups)}
    return out


def noise_dir(root: Path, gpu: str, kernel: str) -> Path:
    from kernlog.store.profiles import kernel_dir

    return kernel_dir(root, gpu, kernel) / "noise"


def load_calibrations(root: Path, gpu: str) -> list[dict]:
    """Every calibration stored for a GPU; an unreadable one is skipped by name in `problems`."""
    out = []
    for path in sorted((root / "profiles").glob(f"{gpu}/*/noise/*.json")):
        try:
            data = json.loads(path.read_text())
            if data.get("schema") != SCHEMA or not isinstance(data.get("runs"), list):
                continue
            data["spread"] = spread(data["runs"])  # from the raw runs, as this version groups them
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        data["_path"] = str(path.relative_to(root))
        out.append(data)
    return out


class Bands:
    """The band of each metric for one comparison: the widest that any calibration of the GPU
    both sides ran on gives (a few runs of one revision estimate its spread loosely, so no
    revision's own calibration narrows the band); defaults where none applies."""

    def __init__(self, calibrations: list[dict], gpu: str | None):
        self.gpu = gpu
        self.cals = calibrations
        names = sorted(f"{c['kernel']}/{c['revision']}" for c in calibrations)
        self.what = f"calibrated on {gpu}: {', '.join(names)}" if calibrations else None
        self._cache: dict[str, Band] = {}

    def __call__(self, key: str) -> Band:
        if key not in self._cache:
            self._cache[key] = self._band(key)
        return self._cache[key]

    def _band(self, key: str) -> Band:
        base = default_band(key)
        kind = metric(key).kind
        sigmas = []
        for c in self.cals:
            s = c["spread"].get(key)
            # A value near zero (a stall of 0.01 cycles) says nothing about relative spread.
            if s and s.get("sigma_rel") is not None and abs(s["median"]) > 10 * base.abs:
                sigmas.append(s["sigma_rel"])
        if not sigmas:
            return base
        rel = max(Z99 * math.sqrt(2) * max(sigmas), FLOOR.get(kind, 0.0))
        return Band(rel, base.abs, self.what)

    def describe(self) -> str:
        return self.what or "default bands (no noise calibration for this GPU; `kernlog noise` measures one)"


def bands_for(root: Path, a: dict, b: dict) -> Bands:
    """The bands for comparing profile records a and b. Across two GPUs the wider of the two
    calibrations is not known: defaults apply."""
    ga, gb = a["gpu"]["slug"], b["gpu"]["slug"]
    if ga != gb:
        return Bands([], None)
    return Bands(load_calibrations(root, ga), ga)
