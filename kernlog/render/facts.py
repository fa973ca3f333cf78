"""The facts each section of the log shows, gathered from profiles/ and judged: a ladder per
(GPU, shape, dtype) of profiles, each step's verdict against noise and its largest moves, the
ladder's arc, the same revisions across GPUs, histories across commits, and the sweeps
(kernlog.render.sweeps). Every verdict, band and staleness comes from kernlog.judge.verdicts.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kernlog import snapshot
from kernlog.config import layout
from kernlog.errors import KernlogError
from kernlog.judge import hotlines, predictions, roofline
from kernlog.judge.bands import bands_of
from kernlog.judge.diff import metric_rows
from kernlog.judge.gate_marks import fails_gate
from kernlog.judge.history import timeline
from kernlog.judge.plausible import impossible
from kernlog.judge.verdicts import HOT_MIN_SAMPLES, Bands, rate, same_kernel, stale, timing_verdict
from kernlog.metrics import CATALOG, ncu_filter, ranked_stalls, time_shares
from kernlog.render import agree, arc, excerpts
from kernlog.render import paths as where
from kernlog.render.steps import best as best_row
from kernlog.render.steps import profiled_elsewhere, tied_with
from kernlog.render.sweeps import sweep
from kernlog.spec import format_shape
from kernlog.store import gates
from kernlog.store import profiles as store
from kernlog.store.keys import ProfileKey
from kernlog.store.record import Profile

TOP_DELTAS = 5


def top_stalls(m: dict, n: int = 3) -> list[tuple[str, float]]:
    return [(name.replace("_", " "), v) for name, v in ranked_stalls(m)[:n]]


def largest_deltas(a: dict, b: dict, n: int = TOP_DELTAS, bands=None) -> list[dict]:
    """The metrics diff judges better or worse (outside their noise band, in a direction that
    holds), the largest relative moves first; wall time is the verdict's, not listed here."""
    rows = [r for r in metric_rows(a, b, bands) if r.judgement in ("better", "worse") and r.metric != "wall_ms"]
    out = [{"label": r.label, "unit": r.unit, "a": r.a, "b": r.b,
            "pct": 100.0 * (r.ratio - 1) if r.ratio is not None else float("inf"), "judgement": r.judgement,
            "weight": _weight(r, a, b)} for r in rows]
    out.sort(key=lambda r: (-r["weight"], r["label"]))
    return out[:n]


def _weight(row, a: dict, b: dict) -> float:
    """How much a move matters to time. A stall: the warp-cycles it gained or lost (cycles per
    instruction times instructions) as a share of all the stalled cycles before, so a tiny
    stall that tripled ranks low. Any other metric: its relative change, capped at 10x."""
    if row.metric.startswith("stall_") and a.get("instructions") and b.get("instructions"):
        total = sum(v for _, v in ranked_stalls(a)) * a["instructions"]
        moved = (b.get(row.metric) or 0) * b["instructions"] - (a.get(row.metric) or 0) * a["instructions"]
        return abs(moved) / total if total else 0.0
    return min(abs(row.ratio - 1), 10.0) if row.ratio is not None else 10.0


def across_gpus(ladders: list[dict]) -> list[dict]:
    """For each (shape, dtype) profiled on two or more GPUs: the revisions side by side, each
    GPU's time and % of its own copy bandwidth, and the speed ratio against the first GPU."""
    by_point: dict = {}
    for lad in ladders:
        by_point.setdefault((lad["shape"], lad["dtype"]), []).append(lad)
    out = []
    for (shape, dtype), lads in by_point.items():
        if len(lads) < 2:
            continue
        lads = sorted(lads, key=lambda lad: lad["gpu"]["slug"])
        revs = [row["rec"].revision for row in lads[0]["rows"]]
        rows = []
        for rev in revs:
            cells = [next((row for row in lad["rows"] if row["rec"].revision == rev), None) for lad in lads]
            if any(c is None for c in cells):
                continue
            base = cells[0]["rec"].metrics["wall_ms"]
            rows.append({"revision": rev, "cells": [{"us": c["rate"]["us"], "pct_copy": c["rate"]["pct_copy"],
                                                     "gbps": c["rate"]["gbps"], "stale": c["stale"],
                                                     "speed": base / c["rec"].metrics["wall_ms"]} for c in cells]})
        out.append({"shape": shape, "dtype": dtype, "gpus": [lad["gpu"] for lad in lads],
                    "copy_gbps": [lad["ceilings"]["copy_gbps"] for lad in lads], "rows": rows})
    return out


HOT_LINES = 3  # source lines per revision in the log


def hot_lines(prof: Profile) -> list[dict]:
    """A profile's most sampled source lines, as the log lists them under the revision: at most
    HOT_LINES, each holding HOT_MIN_SAMPLES warp samples or more."""
    hot = prof.hotspots
    if not hot:
        return []
    return [h for h in hotlines.lines_table(hot, HOT_LINES) if h["share"] * hot["samples"] >= HOT_MIN_SAMPLES]


def ladder(records: list[Profile], order: list[str], current: dict | None = None, bands=None, kernel=None,
           claims: dict | None = None, outcomes: dict | None = None) -> dict:
    """One (gpu, shape, dtype) group of profiles as the log shows it; `current` (revision ->
    source hash) marks the profiles taken on an older source; `bands` (kernlog.judge.verdicts.Bands
    of the GPU) judge each step against noise; `outcomes` (the gate's on the GPU, kernlog.store.gates)
    mark the profiles whose source fails the gate now ("fails_gate": its first failing case)."""
    current = current or {}
    bands = bands or Bands([], None)
    rank = {name: i for i, name in enumerate(order)}
    recs = sorted(records, key=lambda r: rank.get(r.revision, len(rank)))
    steps = [r for r in recs if r.role == "step"]
    refs = [r for r in recs if r.role == "reference"]
    ref = refs[0] if refs else None
    rows, prev, prev_cp, rows_of = [], None, None, {}
    for r in recs:
        roof = roofline.place(r, kernel)
        label = roof["label"]
        only = ncu_filter(r)
        if only:  # ncu saw some of the launch's kernels: no roofline or bottleneck of the whole from them
            roof = dict(roof, intensity=None, pct_of_roof=None)
            label = (f"not judged: ncu profiled {len(r.facts['kernels'])} of its kernels (names matching "
                     f"`{only}`)")
        row = {"rec": r, "rate": rate(r), "roof": roof, "bottleneck": label, "shares": time_shares(r),
               "stale": stale(r.source_sha256, current, r.revision),
               "fails_gate": fails_gate(r.source_sha256, r.revision, outcomes),
               "stalls": top_stalls(r.metrics), "advice": [f for f in r.findings if f.get("speedup_pct")][:3],
               "impossible": impossible(r, bands("dram_gbps").rel), "hot": hot_lines(r)}
        wall = r.metrics["wall_ms"]
        row["vs_ref"] = 100.0 * ref.metrics["wall_ms"] / wall if ref else None
        row["vs_naive"] = steps[0].metrics["wall_ms"] / wall if steps else None
        # a step against the one before; a counterpart against the counterpart before it, the
        # first against the last step
        base = prev if r.role == "step" else ((prev_cp or (steps[-1] if steps else None)) if r.role == "counterpart"
                                              else None)
        if r.role == "step" and prev is not None and same_kernel(prev, r):
            # the same compiled kernel and launch as the step before: no change to claim
            row.update(same_as=rows_of[prev.revision].get("same_as") or prev.revision)
        elif base is not None and base is not r:
            v = timing_verdict(base.timing.samples_ms, r.timing.samples_ms, bands("wall_ms"))
            speedup = base.metrics["wall_ms"] / wall
            row.update(base=base.revision, speedup=speedup, verdict=v.verdict,
                       deltas=largest_deltas(base.metrics, r.metrics, bands=bands))
        if r.role == "step":
            prev = r
        elif r.role == "counterpart":
            prev_cp = r
        rows.append(row)
        rows_of[r.revision] = row
    by_rev = {row["rec"].revision: row for row in rows}
    arc = _arc(rows, by_rev, bands("wall_ms"), steps[0].revision if steps else None)
    for row in rows:  # each prediction judged against this ladder's measurements
        entry = (claims or {}).get(row["rec"].revision, {})
        row["judged"] = predictions.judge(entry.get("claims"), row, by_rev, row["rec"].dtype, bands("wall_ms").rel)
        row["unchecked"] = entry.get("unchecked")
        row["predicts_text"] = entry.get("text")  # the log's wording where the revision's quotes a stale figure
    return {"rows": rows, "ref": ref.revision if ref else None, "tuned": steps[-1].revision if steps else None,
            "arc": arc, "wall_band": bands("wall_ms").rel}


def _arc(rows: list[dict], by_rev: dict, band, naive: str | None) -> dict | None:
    """The ladder's arc for the front page: the first step (`naive`), the fastest revision and
    every one tied with it (judged the same within noise; an inconclusive one is not), and the
    speed of the fastest against each reference. A revision whose source fails the gate now is
    never the fastest."""
    mine = [r for r in rows if r["rec"].role != "reference" and not r["fails_gate"]]
    if not mine:
        return None
    best = min(mine, key=lambda r: r["rec"].metrics["wall_ms"])
    ties = [r["rec"].revision for r in mine if r is not best and timing_verdict(
        best["rec"].timing.samples_ms, r["rec"].timing.samples_ms, band).verdict == "same"]
    wall = best["rec"].metrics["wall_ms"]
    refs = {name: by_rev[name]["rec"].metrics["wall_ms"] / wall for name in ("torch", "torch_compile")
            if name in by_rev}
    return {"best": best, "ties": ties, "naive": naive, "vs_naive": best["vs_naive"], "refs": refs}


def _view(prof: Profile, ceilings: dict) -> Profile:
    """A verified profile as the templates read it: a catalog metric it lacks is "not collected";
    its GPU's ceilings the ones stored once for that GPU (profiles/<gpu>/ceilings.json), not the
    copy its record took when it was captured, so every figure over a ceiling quotes one value."""
    stored = {k: v for k, v in ceilings.items() if k in ("copy_gbps", "matmul_bf16_tflops") and v is not None}
    return replace(prof, metrics={**{m.key: None for m in CATALOG}, **prof.metrics},
                   ceilings={**prof.ceilings, **stored})


def _histories(root: Path, kernel: str, lad: dict, paths: where.Paths) -> dict | None:
    """The ladder's revisions across the commits that stored or profiled them (kernlog
    history): revision -> [(when, median ms, a step?)], and the plot's path; None where no
    revision has two entries."""
    out = {}
    for row in lad["rows"]:
        prof = row["rec"]
        side = ProfileKey(kernel, prof.revision, tuple(prof.shape), prof.dtype, prof.gpu.slug)
        try:
            entries = timeline(root, side)["entries"]
        except KernlogError:
            continue
        points = [(e["when"][:19], e["median_ms"], e["step"]) for e in entries if "error" not in e and e["when"]]
        if len(points) > 1:
            out[prof.revision] = points
    if not out:
        return None
    return {"revisions": out,
            "plot": paths.under_reports(f"{kernel}_history_{lad['gpu']['slug']}_{lad['shape']}_{lad['dtype']}.svg")}


def not_profiled(kernel) -> dict:
    """The section of a kernel nothing is stored for yet: no ladder, sweep or figure; the log names
    it "not profiled yet" and its page lists its revisions."""
    return {"kernel": kernel, "order": [r.name for r in kernel.revisions], "ladders": [], "arcs": [], "across": [],
            "sweeps": [], "front": {"sweep": None, "point": None, "shape": format_shape(kernel.profile_shape),
                                    "dtype": kernel.profile_dtype},
            "revisions": {r.name: r for r in kernel.revisions}, "unreadable": [], "profiled": False}


@snapshot.held()  # it only reads: each revision hashed once, the operators listed once
def collect(root: Path, kernels: list, histories: bool = True, unprofiled: bool = False) -> list[dict]:
    """One section per kernel. A profile that fails verification is left out of its ladder and
    listed in the section's "unreadable" (store.ProfileError, one line naming the file and
    the fix), so one bad file hides no other. A kernel nothing is stored for has a section only
    with `unprofiled` (not_profiled: the log's, a page saying so)."""
    sections = []
    paths = where.of(root)
    primary = layout(root).primary_gpu  # its sweep goes on a kernel's page; each other GPU's on a page of its own
    loaded = list(store.iter_profiles(root, bad="yield"))
    ceilings: dict = {}
    for r in loaded:
        if not isinstance(r, store.ProfileError) and r.gpu.slug not in ceilings:
            ceilings[r.gpu.slug] = store.load_ceilings(root, r.gpu.slug)
    all_recs = [_view(r, ceilings[r.gpu.slug]) for r in loaded if not isinstance(r, store.ProfileError)]
    bad = [e for e in loaded if isinstance(e, store.ProfileError)]
    for kernel in kernels:
        order = [r.name for r in kernel.revisions]
        current = {r.name: r.sha256() for r in kernel.revisions}
        declared = {r.name: r for r in kernel.revisions}  # its words now: a reworded change re-profiles nothing
        recs = [replace(r, change=declared[r.revision].change, predicts=declared[r.revision].predicts)
                if r.revision in declared else r for r in all_recs if r.kernel == kernel.name]
        # read before anything is stored too, so a typo in it shows on the CPU: the revisions its ladders show,
        # declared and stored (an imported one, a retired rung's profiles)
        claims = predictions.load(root, kernel.name, [*order, *sorted({r.revision for r in recs} - set(order))])
        groups: dict[tuple, list] = {}
        for r in recs:
            groups.setdefault((r.gpu.slug, format_shape(tuple(r.shape)), r.dtype), []).append(r)
        gpus = sorted({g for g, _, _ in groups} | {p.parent.parent.name for p in
                                                   store.glob_kernel_files(root, "bench.csv", kernel=kernel.name)},
                      key=lambda g: (g != primary, g))
        mine_bad = [e for e in bad if Path(e.path).parts[-2] == kernel.name]
        if not gpus and not mine_bad:
            # A kernel nothing was stored for yet (registered, never profiled or swept) has no
            # figure to show: the log names it "not profiled yet" (unprofiled), the rest skip it.
            if unprofiled:
                sections.append(not_profiled(kernel))
            continue
        roles = {r.name: r.role for r in kernel.revisions}
        outcomes = {g: gates.load(root, g, kernel.name) for g in gpus}  # the gate's latest there
        sweeps = []
        for g in gpus:  # one plot per kernel and GPU, beside its page: the first GPU's unsuffixed
            sw = sweep(root, g, kernel.name, order, current, kernel.families, roles, kernel.speed_bar, outcomes[g])
            if sw:
                sw["plot"] = paths.under_reports(f"{kernel.name}_sweep{'_' + g if sweeps else ''}.svg")
                # the first GPU's sweep on the kernel's page, each other's on a page of its own
                sw["page"] = paths.under_reports(f"{kernel.name}_sweep_{g}.md") if sweeps else None
                sweeps.append(sw)
        ladders = [dict(ladder(v, order, current, bands_of(root, k[0]), kernel, claims, outcomes[k[0]]),
                        gpu=v[0].gpu.to_dict(), shape=k[1], dtype=k[2], ceilings=v[0].ceilings)
                   for k, v in sorted(groups.items(), key=lambda kv: (
                       (kv[0][1], kv[0][2]) != (format_shape(kernel.profile_shape), kernel.profile_dtype), kv[0]))]
        for i, lad in enumerate(ladders):  # the first: the kernel's profile shape and dtype, first GPU
            lad["history"] = _histories(root, kernel.name, lad, paths) if histories and i == 0 else None
            lad["excerpts"] = excerpts.of_ladder(lad, kernel) if i == 0 else {}  # its steps' source diffs
        for lad in ladders:
            placed = any(row["roof"]["intensity"] is not None for row in lad["rows"])
            lad["roofline"] = (paths.under_reports(
                f"{kernel.name}_roofline_{lad['gpu']['slug']}_{lad['shape']}_{lad['dtype']}.svg") if placed else None)
        matmul = kernel.ceiling == "matmul"
        for lad in ladders:
            sw = arc.sweep_of(sweeps, lad["gpu"]["name"])
            lad["arc_rows"] = arc.arc_rows(lad, sw, matmul)
            lad["arc_plot"] = paths.under_reports(
                f"{kernel.name}_arc_{lad['gpu']['slug']}_{lad['shape']}_{lad['dtype']}.svg")
        agree.of_ladders(root, ladders, sweeps)  # profile vs sweep beyond noise: a note under the arc
        main = ladders[0] if ladders else None
        pay = arc.payoff(ladders)
        steps = [r.name for r in kernel.revisions if r.role == "step"]
        main_sw = arc.sweep_of(sweeps, main["gpu"]["name"]) if main else (sweeps[0] if sweeps else None)
        # the profile dtype where a step was swept in it, else the next declared that was: every GPU's line alike
        dtypes = (kernel.profile_dtype, *[d for d in kernel.dtypes if d != kernel.profile_dtype])
        dtype = arc.swept_dtype(main_sw, dtypes, steps)
        shape = arc.front_shape(main_sw, format_shape(kernel.profile_shape), dtype)
        chosen = best_row(main) if main else None  # the page's best step, named on the front page too
        chosen = chosen["rec"].revision if chosen else None
        later = {n for n, _ in profiled_elsewhere(ladders, kernel, main)} if main else set()  # the second arc's
        tied = tuple(tied_with(main, chosen)) if chosen else ()  # or a step within noise of it, the sweep's best
        front = {"sweep": main_sw, "point": arc.point(main_sw, shape, dtype, steps[0] if steps else None, chosen,
                                                      tied),
                 "shape": shape, "dtype": dtype, "best": chosen, "tied": tied,
                 "elsewhere": arc.elsewhere(sweeps, main_sw, format_shape(kernel.profile_shape), dtypes, steps)}
        sections.append({"kernel": kernel, "order": order, "ladders": ladders, "front": front,
                         "arcs": [lad for lad in (main, pay, arc.beyond(ladders, later, best_row)) if lad is not None],
                         "across": across_gpus(ladders),
                         "sweeps": sweeps,
                         "revisions": {r.name: r for r in kernel.revisions},
                         "unreadable": mine_bad, "profiled": True})
    return sections


def unreadable(sections: list[dict]) -> list[store.ProfileError]:
    """The profiles the sections leave out because they failed verification."""
    return [e for s in sections for e in s["unreadable"]]


def stale_figures(sections: list[dict]) -> list[str]:
    """One line per kernel whose log shows a figure measured on an older source of its revision."""
    lines = []
    for s in sections:
        profiles = sorted({f"{row['rec'].revision} ({lad['shape']} {lad['dtype']} on {lad['gpu']['name']})"
                           for lad in s["ladders"] for row in lad["rows"] if row["stale"]})
        swept = sorted({f"{r} (on {sw['gpu']})" for sw in s["sweeps"] for r in sw["stale"]})
        if profiles or swept:
            what = ([f"profiles of {', '.join(profiles)}"] if profiles else []) + \
                ([f"sweep points of {', '.join(swept)}"] if swept else [])
            lines.append(f"{s['kernel'].name}: {'; '.join(what)} were measured on an older source")
    return lines


def gate_failures(sections: list[dict]) -> list[str]:
    """One line per kernel whose log shows a profile of a source that fails the gate now (‡)."""
    lines = []
    for s in sections:
        profiles = sorted({f"{row['rec'].revision} ({lad['shape']} {lad['dtype']} on {lad['gpu']['name']}: "
                           f"{row['fails_gate']})" for lad in s["ladders"] for row in lad["rows"] if row["fails_gate"]})
        swept = sorted({f"{r} (on {sw['gpu']}: {why})" for sw in s["sweeps"] for r, why in sw["fails_now"]})
        if profiles or swept:
            what = ([f"profiles of {', '.join(profiles)}"] if profiles else []) + \
                ([f"sweep points of {', '.join(swept)}"] if swept else [])
            lines.append(f"{s['kernel'].name}: {'; '.join(what)} measured a source that fails kernlog's correctness "
                         f"gate now (`kernlog check {s['kernel'].name} --rev REV` re-checks)")
    return lines
