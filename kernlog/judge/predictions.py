"""Predictions judged: each revision's prediction as claims a profile can check, and the verdict.

A kernel's claims live in kernels/<op>/predictions.toml (data, outside every revision's
source hash), one table per revision, each claim one measured quantity and a bound:

    [v1_block_smem]
    claims = [
      {what = "ld_sectors_per_request", at_most = 4.5},        # a metric of this profile
      {what = "speedup", at_least = 10},                      # over the previous step, wall time
      {what = "speed_vs:torch", at_least = 1.0},               # over another revision of the ladder
      {what = "leading_stall", is = "barrier"},
      {what = "ratio_vs_previous:stall_barrier", at_most = 0.3, dtype = "fp32"},
    ]
    unchecked = "what the profile cannot show (other shapes: the sweep)"

Quantities: any metric of the profile; pct_copy, tbps, tflops, pct_matmul, pct_roof;
speedup (previous step's wall time over this one's); speed_vs:REV; ratio_vs_previous:METRIC;
leading_stall. A speed claim (speedup, speed_vs) meets its bound within the timing noise
band: a tie is a tie; where its two profiles were timed at SM clocks further apart than that
band, the claim says so (part of the ratio is the clock). `dtype` limits a claim to ladders of
that dtype, `shape` ("8192x4096", or a list) to ladders of that shape (a prediction about one
member of a family). A ladder's verdict per revision: met (every claim that applies holds),
missed (none does), partly (some do), or not checkable (no claim applies there).
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from kernlog import config
from kernlog.errors import KernlogError
from kernlog.judge.verdicts import apart, at_least, at_most
from kernlog.metrics import ranked_stalls
from kernlog.spec import format_shape

SPEED = ("speedup", "speed_vs:")


DERIVED = ("pct_copy", "tbps", "tflops", "pct_matmul", "pct_roof")


def unknown_quantity(what: str, revisions) -> str:
    """Why `what` names nothing a claim can be judged by ("" where it does): a quantity kernlog does not
    measure (a typo such as speedupp), or speed_vs: a revision the kernel does not declare."""
    from kernlog.metrics import BY_KEY

    if what.startswith("speed_vs:"):
        other = what.split(":", 1)[1]
        return "" if other in revisions else f"speed_vs:{other} names no revision ({', '.join(revisions)})"
    if what.startswith("ratio_vs_previous:"):  # of two profiles' metrics: a metric's name, nothing derived
        key = what.split(":", 1)[1]
        if key in BY_KEY or key.startswith("stall_"):
            return ""
    elif what in ("speedup", "leading_stall", *DERIVED) or what in BY_KEY or what.startswith("stall_"):
        return ""
    return (f"{what!r} is no quantity kernlog measures: speedup, speed_vs:REV, leading_stall, "
            f"{', '.join(DERIVED)}, ratio_vs_previous:METRIC or a metric `kernlog show` lists")


def load(root: Path, kernel: str, revisions=None) -> dict[str, dict]:
    """The claims of `kernel`'s predictions.toml by revision; with `revisions` (the kernel's), a table or a claim
    that names none of them, or a quantity kernlog does not measure, is one line."""
    path = config.layout(root).kernels / kernel / "predictions.toml"
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KernlogError(f"{path.relative_to(root)}: not valid TOML ({exc})") from None
    for rev, entry in data.items():
        for c in entry.get("claims", []):
            if "what" not in c or not ({"at_least", "at_most", "is"} & set(c)):
                raise KernlogError(f"{path.relative_to(root)}: a claim of {rev} needs `what` and a bound "
                                   "(at_least, at_most or is)")
            why = unknown_quantity(c["what"], revisions) if revisions is not None else ""
            if why:
                raise KernlogError(f"{path.relative_to(root)}: [{rev}]: {why}")
        if revisions is not None and rev not in revisions:
            raise KernlogError(f"{path.relative_to(root)}: [{rev}] names no revision of {kernel} "
                               f"({', '.join(revisions)})")
    return data


def value(what: str, row: dict, rows: dict):
    """The measured quantity `what` names, for `row` of a ladder whose rows by revision are `rows`."""
    m = row["rec"].metrics
    if what == "speedup":
        return row.get("speedup")
    if what.startswith("speed_vs:"):
        other = rows.get(what.split(":", 1)[1])
        return other["rec"].metrics["wall_ms"] / m["wall_ms"] if other else None
    if what.startswith("ratio_vs_previous:"):
        base = rows.get(row.get("base"))
        key = what.split(":", 1)[1]
        a, b = (base["rec"].metrics.get(key) if base else None), m.get(key)
        return b / a if a and b is not None else None
    if what == "leading_stall":
        stalls = ranked_stalls(m)
        return stalls[0][0] if stalls else None
    rate = row["rate"]
    derived = {"pct_copy": rate.get("pct_copy"), "tbps": rate["gbps"] / 1e3, "tflops": rate.get("tflops"),
               "pct_matmul": rate.get("pct_matmul"),
               "pct_roof": 100 * row["roof"]["pct_of_roof"] if row.get("roof", {}).get("pct_of_roof") else None}
    return derived[what] if what in derived else m.get(what)


def sm_mhz(row: dict):
    """The median SM clock while the row's profile was timed, None where not recorded."""
    clocks = getattr(getattr(row["rec"], "timing", None), "clocks", None) or {}
    return (clocks.get("sm_mhz") or {}).get("median")


def clock_gap(row: dict, other: dict | None, band: float) -> tuple[float, float] | None:
    """(row's SM clock, other's) where the two profiles were timed at clocks further apart than
    `band`: a ratio of their times is then partly the clock, not the code. None otherwise (a
    clock unrecorded, no other row)."""
    here, there = sm_mhz(row), (sm_mhz(other) if other else None)
    return (here, there) if here and there and apart(here, there, band) else None


def clocks_apart(what: str, row: dict, rows: dict, band: float) -> tuple | None:
    """(this row's SM clock, the compared row's, the compared revision) where a speed claim
    compares two profiles timed at clocks apart (clock_gap); None otherwise (not a speed claim)."""
    name = row.get("base") if what == "speedup" else what.split(":", 1)[1] if what.startswith("speed_vs:") else None
    gap = clock_gap(row, rows.get(name), band) if name else None
    return (*gap, name) if gap else None


def unmeasured(what: str, row: dict, rows: dict) -> str:
    """Why `value` has nothing for `what` at `row`: the profile a comparison needs is missing
    from this ladder (another GPU or shape), or the profile lacks the quantity."""
    if what == "speedup" or what.startswith("ratio_vs_previous:"):
        if row.get("same_as"):
            return f"it runs {row['same_as']}'s compiled kernel here"
        base = row.get("base")
        if base is None:
            return "no earlier step profiled here"
        if base not in rows:
            return f"no profile of {base} here"
    if what.startswith("speed_vs:"):
        return f"no profile of {what.split(':', 1)[1]} here"
    return f"the profile has no {what.split(':', 1)[-1]}"


def _text(c: dict) -> str:
    if "is" in c:
        bound = f"is {c['is']}"
    elif c.get("at_least") is not None and c.get("at_least") == c.get("at_most"):  # no change: equal within noise
        bound = f"= {c['at_least']:g} within noise"
    else:
        bound = " and ".join(f"{'>=' if k == 'at_least' else '<='} {c[k]:g}" for k in ("at_least", "at_most") if k in c)
    return f"{c['what']} {bound}"


def _at(shapes, row: dict) -> bool:
    """Whether a claim limited to `shapes` (one "8192x4096" or a list; None: every shape) applies to `row`."""
    if shapes is None:
        return True
    return format_shape(tuple(row["rec"].shape)) in ([shapes] if isinstance(shapes, str) else shapes)


def judge(claims: list[dict], row: dict, rows: dict, dtype: str, time_band: float) -> dict | None:
    """{"verdict", "claims": [{"text", "value", "ok"}]} of the claims that apply to `row`, or
    None where there are no claims for it at all."""
    if not claims:
        return None
    out = []
    for c in claims:
        if c.get("dtype", dtype) != dtype or not _at(c.get("shape"), row):
            continue
        v = value(c["what"], row, rows)
        if v is None:
            out.append({"text": _text(c), "value": None, "ok": None, "tie": False,
                        "why": unmeasured(c["what"], row, rows)})
            continue
        slack = time_band if c["what"].startswith(SPEED) else 0.0
        ok = (v == c["is"]) if "is" in c else (
            ("at_least" not in c or at_least(v, c["at_least"], slack))
            and ("at_most" not in c or at_most(v, c["at_most"], slack)))
        tie = bool(ok) and slack > 0 and (v < c.get("at_least", v) or v > c.get("at_most", v))
        out.append({"text": _text(c), "value": v, "ok": bool(ok), "tie": tie,
                    "clocks": clocks_apart(c["what"], row, rows, time_band) if slack else None})
    return {"verdict": verdict([c["ok"] for c in out]), "claims": out}


def verdict(oks: list[bool | None]) -> str:
    """A prediction's verdict from its claims' outcomes (None: not measured)."""
    judged = [ok for ok in oks if ok is not None]
    return ("not checkable here" if not judged else "met" if all(judged) else "missed" if not any(judged)
            else "partly")
