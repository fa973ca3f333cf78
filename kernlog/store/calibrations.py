"""Noise calibrations on disk: `kernlog noise` stores one per revision in
profiles/<gpu>/<kernel>/noise/<rev>.<shape>.<dtype>.json. Read here as stored; the bands
they give are judged in kernlog.judge.bands (from their raw runs)."""
from __future__ import annotations

import json
from pathlib import Path

from kernlog.store.keys import glob_kernel_files, noise_dir

SCHEMA = 1
__all__ = ["SCHEMA", "noise_dir", "load_calibrations"]


def load_calibrations(root: Path, gpu: str) -> list[dict]:
    """Every calibration stored for a GPU; an unreadable one is skipped."""
    out = []
    for path in glob_kernel_files(root, "noise/*.json", gpu=gpu):
        try:
            data = json.loads(path.read_text())
            if data.get("schema") != SCHEMA or not isinstance(data.get("runs"), list):
                continue
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        data["_path"] = str(path.relative_to(root))
        out.append(data)
    return out
