"""Noise calibrations on disk: `kernlog noise` stores one per revision in
profiles/<gpu>/<kernel>/noise/<rev>.<shape>.<dtype>.json; the bands they give are judged in
kernlog.judge.verdicts (Bands, band_of_runs)."""
from __future__ import annotations

import json
from pathlib import Path

from kernlog.judge.verdicts import Bands, band_of_runs
from kernlog.store.keys import glob_kernel_files, noise_dir

SCHEMA = 1
__all__ = ["SCHEMA", "noise_dir", "load_calibrations", "bands_of", "bands_for"]


def load_calibrations(root: Path, gpu: str) -> list[dict]:
    """Every calibration stored for a GPU; an unreadable one is skipped."""
    out = []
    for path in glob_kernel_files(root, "noise/*.json", gpu=gpu):
        try:
            data = json.loads(path.read_text())
            if data.get("schema") != SCHEMA or not isinstance(data.get("runs"), list):
                continue
            data["spread"] = band_of_runs(data["runs"])  # from the raw runs, as this version groups them
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        data["_path"] = str(path.relative_to(root))
        out.append(data)
    return out


def bands_of(root: Path, gpu: str) -> Bands:
    """The bands of every comparison on one GPU, from its calibrations."""
    return Bands(load_calibrations(root, gpu), gpu)


def bands_for(root: Path, a: dict, b: dict) -> Bands:
    """The bands for comparing profile records a and b. Across two GPUs the wider of the two
    calibrations is not known: defaults apply."""
    ga, gb = a["gpu"]["slug"], b["gpu"]["slug"]
    if ga != gb:
        return Bands([], None)
    return bands_of(root, ga)
