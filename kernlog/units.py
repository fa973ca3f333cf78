"""Readable units: both sides of a comparison in one unit, chosen from their size.

Stored values keep the catalog's unit (ms, us, MB, GB/s, M); only rendering rescales.
"""
from __future__ import annotations

import math

# Each family: (unit, factor to the family's base) from small to large; the base is the
# first unit whose factor is 1.
FAMILIES = (
    (("ns", 1e-3), ("us", 1.0), ("ms", 1e3), ("s", 1e6)),
    (("B", 1e-6), ("KB", 1e-3), ("MB", 1.0), ("GB", 1e3)),
    (("MB/s", 1e-3), ("GB/s", 1.0), ("TB/s", 1e3)),
    (("", 1e-6), ("K", 1e-3), ("M", 1.0), ("G", 1e3)),
)
COUNT = 3  # counts: the unit is a prefix and a noun, "M inst", "sectors"
# Catalog units spelled in a family's terms: (family index, factor of the catalog unit).
ALIASES = {"ns": (0, 1e-3), "us": (0, 1.0), "ms": (0, 1e3), "s": (0, 1e6),
           "B": (1, 1e-6), "KB": (1, 1e-3), "MB": (1, 1.0), "GB": (1, 1e3),
           "GB/s": (2, 1.0), "TB/s": (2, 1e3)}
PREFIX = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}
COUNTED = ("inst", "sectors")  # counts rescaled with a prefix; threads or blocks stay as they are


def common_unit(unit: str, *values: float | None) -> tuple[str, float]:
    """(display unit, multiplier from `unit`) that shows the largest of `values` with one to
    three digits before the point; units outside the families are kept."""
    noun = ""
    if unit in ALIASES:
        fam, factor = ALIASES[unit]
    else:
        prefix, _, noun = unit.rpartition(" ") if " " in unit else ("", "", unit)
        if prefix not in PREFIX or noun not in COUNTED:
            return unit, 1.0
        fam, factor = COUNT, PREFIX[prefix]
    finite = [abs(v) * factor for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return unit, 1.0
    top = max(finite)
    units = FAMILIES[fam]
    chosen = units[0]
    for name, f in units:
        if top >= f:
            chosen = (name, f)
    shown = f"{chosen[0]} {noun}".strip() if fam == COUNT else chosen[0]
    return shown, factor / chosen[1]


def number(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "not collected"
    if not math.isfinite(v):
        return str(v)
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.3e}"
    return f"{v:.{digits}g}"


def pair(unit: str, a: float | None, b: float | None) -> tuple[str, str, str]:
    """Both values in one readable unit: (a text, b text, unit)."""
    shown, mult = common_unit(unit, a, b)
    return number(None if a is None else a * mult), number(None if b is None else b * mult), shown


def quantity(unit: str, v: float | None) -> str:
    shown, mult = common_unit(unit, v)
    text = number(None if v is None else v * mult)
    return text if v is None or not shown else f"{text} {shown}"
