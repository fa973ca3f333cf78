"""The noise bands of a comparison, from the calibrations stored for its GPU: each one's runs
summed up by verdicts.band_of_runs, as this version groups them (a calibration whose runs
cannot be read so is left out, as an unreadable file is)."""
from __future__ import annotations

from pathlib import Path

from kernlog.judge.verdicts import Bands, band_of_runs
from kernlog.store.calibrations import load_calibrations
from kernlog.store.record import Profile


def _summed(cals: list[dict]) -> list[dict]:
    out = []
    for c in cals:
        try:
            out.append(dict(c, spread=band_of_runs(c["runs"])))
        except (ValueError, TypeError, AttributeError, KeyError):
            continue
    return out


def bands_of(root: Path, gpu: str) -> Bands:
    """The bands of every comparison on one GPU, from its calibrations."""
    return Bands(_summed(load_calibrations(root, gpu)), gpu)


def bands_for(root: Path, a: Profile, b: Profile) -> Bands:
    """The bands for comparing profiles a and b. Across two GPUs the wider of the two
    calibrations is not known: defaults apply."""
    ga, gb = a.gpu.slug, b.gpu.slug
    if ga != gb:
        return Bands([], None)
    return bands_of(root, ga)
