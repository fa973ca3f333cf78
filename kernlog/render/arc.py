"""The judged facts the front page and each ladder's arc show, one function per figure, so the
front page, the arc tables and the sweeps can never say two things about one point:

- `point(sw, shape, dtype)`: a sweep point's best step, the best reference, the x against it and
  the % of copy, all from the sweep row's bars (kernlog.render.sweeps, the same cells the sweep
  table prints);
- `arc_rows(lad, sweeps)`: the ladder's arc table (one row per revision), % of copy from the
  same-size copy of the sweep at that point, never from the 2 GiB ceilings.json copy;
- `contradictions(sections)`: where two renderings of one fact disagree (`report --check`).
"""
from __future__ import annotations

import math

from kernlog.judge.verdicts import launch_bound, of_copy, same_kernel
from kernlog.render.sweeps import bar_cell
from kernlog.spec import COPY


def sweep_of(sweeps: list[dict], gpu_name: str) -> dict | None:
    return next((sw for sw in sweeps if sw["gpu"] == gpu_name), None)


def sweep_row(sw: dict | None, shape: str, dtype: str) -> dict | None:
    if sw is None:
        return None
    return next((r for r in sw["rows"] if r["shape"] == shape and r["dtype"] == dtype), None)


def front_shape(sw: dict | None, shape: str, dtype: str) -> str:
    """The sweep's point for the front page: the profile shape, else the swept shape of the
    dtype nearest it in elements (a 1-D op's profile size may not be swept)."""
    rows = [r for r in (sw or {}).get("rows", []) if r["dtype"] == dtype and r["bars"] and r["bars"][0]["name"]]
    if not rows or any(r["shape"] == shape for r in rows):  # a point where no step ran is no front point
        return shape
    n = 1
    for part in shape.split("x"):
        n *= int(part)
    return min(rows, key=lambda r: (abs(math.log(r["elems"] / n)), -r["elems"]))["shape"]


def point(sw: dict | None, shape: str, dtype: str, first_step: str | None, best: str | None = None,
          tied: tuple[str, ...] = ()) -> dict | None:
    """The front page's figures at one sweep point: the first step's and the best step's rates,
    the best reference and the best step's speed against it, its % of the same run's copy.
    `best`: the kernel page's best step (kernlog.render.steps.best), named here too where the
    point has it (one best per kernel), unless the point's fastest step is one the page's profile
    finds within noise of it (`tied`) and ran at least as fast here on as current a source: the
    point's own best then, the figures its sweep table prints; else the point's fastest step, and
    `unswept` names the page's best where the point lacks it (a rung profiled since the sweep ran),
    so the line never passes an older step off as the page's best."""
    row = sweep_row(sw, shape, dtype)
    if row is None or not row["bars"] or row["bars"][0]["name"] is None:
        return None
    bar = row["bars"][0]
    vals = row["values"]
    mine = bool(best and best != bar["name"] and vals.get(best) is not None and best not in row.get("fails_now", {}))
    if mine and bar["name"] in tied:
        mine = vals[bar["name"]] < vals[best] or (bar["name"] in row["stale"] and best not in row["stale"])
    if mine:
        refs = [bar["best_ref"]] if bar["best_ref"] else []
        bar = bar_cell(row, best, refs, sw["band"], bar["need"])
    naive = vals.get(first_step) if first_step else None
    runs = row.get("runs", {})
    return {"shape": shape, "dtype": dtype, "best": bar["name"], "rate": vals[bar["name"]],
            "naive": first_step, "naive_rate": naive,  # a first step the sweep lacks is named, unrated
            "vs_naive": vals[bar["name"]] / naive if naive else None,
            "apart_naive": bool(naive) and runs.get(first_step) not in (None, runs.get(bar["name"])),
            "apart_ref": bar["apart_ref"], "apart_copy": bar["apart_copy"],
            "best_ref": bar["best_ref"], "vs_ref": bar["vs_ref"], "ref_met": bar["ref_met"],
            "pct_copy": None if bar["of_copy"] is None else 100.0 * bar["of_copy"],
            "pct_matmul": 100.0 * vals[bar["name"]] / sw["ceiling"] if sw["unit"] == "TFLOP/s" else None,
            "stale": bar["name"] in row["stale"], "unit": sw["unit"], "gpu": sw["gpu"],
            "unswept": best if best and best != bar["name"] and vals.get(best) is None else None}


def swept_dtype(sw: dict | None, dtypes, steps) -> str:
    """The first of `dtypes` that `sw` swept a step in (the front page's dtype on that GPU); the first
    of `dtypes` where it swept none."""
    swept = {r["dtype"] for r in (sw or {}).get("rows", []) if any(r["values"].get(s) is not None for s in steps)}
    return next((d for d in dtypes if d in swept), dtypes[0])


def elsewhere(sweeps: list[dict], main_sw: dict | None, shape: str, dtypes, steps) -> list[dict]:
    """The front page's point on each GPU that swept the kernel besides `main_sw` (the headline
    ladder's GPU; None where that GPU swept nothing), in the first of `dtypes` it swept a step in, at the swept
    shape nearest the profile shape there: its sweep's own best step (no page headline names one on
    that GPU), so the line says what that GPU's sweep table says."""
    out = []
    for sw in sweeps:
        if sw is main_sw:
            continue
        dtype = swept_dtype(sw, dtypes, steps)
        p = point(sw, front_shape(sw, shape, dtype), dtype, steps[0] if steps else None)
        if p is not None:
            out.append(p)
    return out


def arc_rows(lad: dict, sw: dict | None, matmul: bool) -> list[dict]:
    """One row per revision of the ladder, in ladder order: what the arc table prints."""
    srow = sweep_row(sw, lad["shape"], lad["dtype"])
    copy = srow["values"].get(COPY) if srow else None
    refs = [r for r in lad["rows"] if r["rec"].role == "reference" and not r.get("fails_gate")]  # never best: ‡
    best_ref = min(refs, key=lambda r: r["rec"].metrics["wall_ms"]) if refs else None
    out = []
    for row in lad["rows"]:
        prof, rt = row["rec"], row["rate"]
        lb = launch_bound(rt["us"])
        pct = rt.get("pct_matmul") if matmul else of_copy(rt["gbps"], copy)
        out.append({
            "revision": prof.revision, "role": prof.role, "imported": prof.imported is not None,
            "change": " ".join((prof.change or "").split()),
            "us": rt["us"], "rate": rt.get("tflops") if matmul else rt["gbps"], "launch_bound": lb,
            "pct": None if lb else pct, "pct_apart": not matmul and pct is not None and not lb,
            "roof": None if lb or row["roof"]["pct_of_roof"] is None
            else 100.0 * row["roof"]["pct_of_roof"], "excess": row["roof"].get("excess"),
            "verdict": ("same kernel as " + row["same_as"]) if row.get("same_as") else row.get("verdict"),
            "speedup": None if row.get("same_as") else row.get("speedup"), "base": row.get("base"),
            "vs_ref": (best_ref["rec"].metrics["wall_ms"] / prof.metrics["wall_ms"]) if best_ref else None,
            "best_ref": best_ref["rec"].revision if best_ref else None, "stale": row["stale"],
            "fails_gate": row.get("fails_gate")})
    return out


def payoff(lads: list[dict]) -> dict | None:
    """Where the later steps pay off: the first other ladder on the same GPU whose fastest
    revision is a later step than the profile shape's fastest (None where none is)."""
    if not lads or not lads[0]["arc"]:
        return None
    first = lads[0]
    order = [r["rec"].revision for r in first["rows"]]
    best = first["arc"]["best"]["rec"].revision
    for lad in lads[1:]:
        a = lad["arc"]
        steps = [r for r in lad["rows"] if r["rec"].role == "step"]
        if not a or len(steps) < 2 or lad["gpu"]["slug"] != first["gpu"]["slug"]:
            continue
        b = a["best"]["rec"].revision
        if b != best and a["best"]["rec"].role == "step" and (b not in order or order.index(b) > order.index(best)):
            return lad
    return None


def beyond(lads: list[dict], later: set[str], best_of) -> dict | None:
    """Where the ladder went past the headline on another GPU: a ladder on a GPU other than the headline
    ladder's (`lads[0]`) whose best step (`best_of`, the page's rule) is one of `later`, the steps past
    the headline's best that its GPU never profiled (kernlog.render.steps.profiled_elsewhere, as the
    Next line names them), at the headline's shape and dtype where there is one; None where none is."""
    if not lads:
        return None
    first = lads[0]
    past = [lad for lad in lads[1:] if lad["gpu"]["slug"] != first["gpu"]["slug"] and (row := best_of(lad)) is not None
            and row["rec"].revision in later]
    same = [lad for lad in past if (lad["shape"], lad["dtype"]) == (first["shape"], first["dtype"])]
    return (same or past or [None])[0]  # the headline's own shape where that GPU profiled it


def contradictions(sections: list[dict]) -> list[str]:
    """Each place two figures of the log describe one point differently: the front page's
    point and its sweep row's bars, a step claiming a change over the compiled kernel and launch
    of the step before (recomputed from the profiles, not from the row's own flag)."""
    out = []
    for s in sections:
        front = s.get("front") or {}
        # each front line against its sweep, recomputed: the headline GPU's (its page's best, or a tie of it),
        # then each other GPU's (that sweep's own best)
        lines = [(front["point"], front["sweep"], front.get("best"), front.get("tied", ()), "")] if front.get(
            "point") else []
        lines += [(q, next((w for w in s.get("sweeps") or [] if w["gpu"] == q["gpu"]), None), None, (),
                   f" on {q['gpu']}") for q in front.get("elsewhere") or []]
        for p, sw, best, tied, on in lines:
            again = point(sw, p["shape"], p["dtype"], p["naive"], best, tied)
            for key in ("best", "best_ref", "vs_ref", "pct_copy"):
                if again is None or again[key] != p[key]:
                    out.append(f"{s['kernel'].name}: the front page's {key} at {p['shape']} {p['dtype']}{on} "
                               f"({p[key]}) is not the sweep's ({None if again is None else again[key]})")
        for lad in s["ladders"]:
            prev = None
            for row in lad["rows"]:
                prof = row["rec"]
                if prof.role != "step":
                    continue
                if prev is not None and same_kernel(prev, prof) and (row.get("verdict") or row.get("deltas")):
                    out.append(f"{s['kernel'].name} {lad['shape']} {lad['dtype']}: {prof.revision} claims a "
                               f"change ({row.get('verdict')}) over {prev.revision}, the same compiled kernel "
                               "and launch")
                prev = prof
    return out
