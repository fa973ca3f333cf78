"""`kernlog report`: KERNEL_LOG.md from profiles/ alone (no GPU), deterministic.

Only the blocks between `<!-- kernlog:begin NAME -->` and `<!-- kernlog:end NAME -->`
are generated; prose outside them is kept as written.
"""
from __future__ import annotations

import re
from pathlib import Path

import jinja2

from kernlog.capture import hotspots
from kernlog.errors import KernlogError
from kernlog.judge import predictions, roofline
from kernlog.judge.diff import metric_rows, timing_verdict
from kernlog.judge.noise import Bands, load_calibrations
from kernlog.judge.plausible import impossible
from kernlog.metrics import CATALOG, ncu_filter, ranked_stalls, time_shares
from kernlog.render import prose
from kernlog.spec import (
    COPY,
    DTYPE_BYTES,
    EVERY_REFERENCE,
    FAILS_GATE,
    REFUSED,
    RUN_SPREAD,
    SpeedBar,
    format_shape,
    parse_shape,
)
from kernlog.store import profiles as store

LOG = "KERNEL_LOG.md"
BLOCK = re.compile(r"<!-- kernlog:begin (?P<name>[a-z0-9_]+) -->\n.*?<!-- kernlog:end (?P=name) -->\n?", re.DOTALL)
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


def rate(rec: dict) -> dict:
    ms = rec["metrics"]["wall_ms"]
    gbps = rec["bytes_moved"] / ms / 1e6
    copy, matmul = rec["ceilings"]["copy_gbps"], rec["ceilings"]["matmul_bf16_tflops"]  # null: not measured
    out = {"us": ms * 1e3, "gbps": gbps, "pct_copy": 100.0 * gbps / copy if copy else None}
    if rec.get("flops"):
        out["tflops"] = rec["flops"] / ms / 1e9
        out["pct_matmul"] = 100.0 * out["tflops"] / matmul if matmul else None
    return out


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
        revs = [row["rec"]["revision"] for row in lads[0]["rows"]]
        rows = []
        for rev in revs:
            cells = [next((row for row in lad["rows"] if row["rec"]["revision"] == rev), None) for lad in lads]
            if any(c is None for c in cells):
                continue
            base = cells[0]["rec"]["metrics"]["wall_ms"]
            rows.append({"revision": rev, "cells": [{"us": c["rate"]["us"], "pct_copy": c["rate"]["pct_copy"],
                                                     "gbps": c["rate"]["gbps"],
                                                     "speed": base / c["rec"]["metrics"]["wall_ms"]} for c in cells]})
        out.append({"shape": shape, "dtype": dtype, "gpus": [lad["gpu"] for lad in lads],
                    "copy_gbps": [lad["ceilings"]["copy_gbps"] for lad in lads], "rows": rows})
    return out


def stale(source_sha256, current: dict, revision: str) -> bool:
    """A figure measured on a source of `revision` other than today's (`current`: revision ->
    source hash). A revision no longer in the kernel, or a record without a hash, is not
    judged."""
    return revision in current and isinstance(source_sha256, str) and source_sha256 != current[revision]


HOT_LINES = 3  # source lines per revision in the log


def hot_lines(rec: dict) -> list[dict]:
    """A profile's most sampled source lines, as the log lists them under the revision."""
    return hotspots.lines_table(rec["hotspots"], HOT_LINES) if rec.get("hotspots") else []


def ladder(records: list[dict], order: list[str], current: dict | None = None, bands=None, kernel=None,
           claims: dict | None = None) -> dict:
    """One (gpu, shape, dtype) group of profiles as the log shows it; `current` (revision ->
    source hash) marks the profiles taken on an older source; `bands` (kernlog.judge.noise.Bands of
    the GPU) judge each step against noise."""
    current = current or {}
    bands = bands or Bands([], None)
    rank = {name: i for i, name in enumerate(order)}
    recs = sorted(records, key=lambda r: rank.get(r["revision"], len(rank)))
    steps = [r for r in recs if r["role"] == "step"]
    refs = [r for r in recs if r["role"] == "reference"]
    ref = refs[0] if refs else None
    rows, prev = [], None
    for r in recs:
        roof = roofline.place(r, kernel)
        label = roof["label"]
        only = ncu_filter(r)
        if only:  # ncu saw some of the launch's kernels: no roofline or bottleneck of the whole from them
            roof = dict(roof, intensity=None, pct_of_roof=None)
            label = (f"not judged: ncu profiled {len(r['facts']['kernels'])} of its kernels (names matching "
                     f"`{only}`); where the time goes is below")
        row = {"rec": r, "rate": rate(r), "roof": roof, "bottleneck": label, "shares": time_shares(r),
               "stale": stale(r.get("source_sha256"), current, r["revision"]),
               "stalls": top_stalls(r["metrics"]), "advice": [f for f in r["findings"] if f.get("speedup_pct")][:3],
               "impossible": impossible(r, bands("dram_gbps").rel), "hot": hot_lines(r)}
        wall = r["metrics"]["wall_ms"]
        row["vs_ref"] = 100.0 * ref["metrics"]["wall_ms"] / wall if ref else None
        row["vs_naive"] = steps[0]["metrics"]["wall_ms"] / wall if steps else None
        base = prev if r["role"] == "step" else (steps[-1] if steps and r["role"] == "counterpart" else None)
        if base is not None and base is not r:
            v = timing_verdict(base["timing"]["samples_ms"], r["timing"]["samples_ms"], bands("wall_ms"))
            speedup = base["metrics"]["wall_ms"] / wall
            row.update(base=base["revision"], speedup=speedup, verdict=v.verdict,
                       deltas=largest_deltas(base["metrics"], r["metrics"], bands=bands))
        if r["role"] == "step":
            prev = r
        rows.append(row)
    by_rev = {row["rec"]["revision"]: row for row in rows}
    arc = _arc(rows, by_rev, bands("wall_ms"), steps[0]["revision"] if steps else None)
    for row in rows:  # each prediction judged against this ladder's measurements
        entry = (claims or {}).get(row["rec"]["revision"], {})
        row["judged"] = predictions.judge(entry.get("claims"), row, by_rev, row["rec"]["dtype"], bands("wall_ms").rel)
        row["unchecked"] = entry.get("unchecked")
    return {"rows": rows, "ref": ref["revision"] if ref else None, "tuned": steps[-1]["revision"] if steps else None,
            "arc": arc}


def _arc(rows: list[dict], by_rev: dict, band, naive: str | None) -> dict | None:
    """The ladder's arc for the front page: the first step (`naive`), the fastest revision and
    every one tied with it (not faster or slower beyond noise), and the speed of the fastest
    against each reference."""
    mine = [r for r in rows if r["rec"]["role"] != "reference"]
    if not mine:
        return None
    best = min(mine, key=lambda r: r["rec"]["metrics"]["wall_ms"])
    ties = [r["rec"]["revision"] for r in mine if r is not best and timing_verdict(
        best["rec"]["timing"]["samples_ms"], r["rec"]["timing"]["samples_ms"], band).verdict != "slower"]
    wall = best["rec"]["metrics"]["wall_ms"]
    refs = {name: by_rev[name]["rec"]["metrics"]["wall_ms"] / wall for name in ("torch", "torch_compile")
            if name in by_rev}
    return {"best": best, "ties": ties, "naive": naive, "vs_naive": best["vs_naive"], "refs": refs}


def _groups(rows: list[dict], families) -> list[dict]:
    """The sweep's rows as one table per shape family (Kernel.families; a family with no member
    measured yet is named, with no table), the rows of no family last; without families, one
    table."""
    out, placed = [], set()
    for fam in families:
        members = [format_shape(sh) for sh in fam.shapes]
        mine = [r for r in rows if r["shape"] in members]
        out.append({"name": fam.name, "family": True, "why": fam.why, "rows": mine,
                    "missing": [m for m in members if m not in {r["shape"] for r in mine}]})
        placed |= {id(r) for r in mine}
    rest = [r for r in rows if id(r) not in placed]
    if rest or not out:
        out.append({"name": "other bench shapes" if out else None, "family": False, "why": "", "rows": rest,
                    "missing": []})
    return out


# Issue 20's bars, shown beside each sweep row for the ladder's best step and for its
# counterpart (the Triton softmax) each: the speed against the best reference there (a gap
# inside the GPU's calibrated wall-time band is a tie), and the share of the same run's copy
# where the tensor holds 64 MB or more (at least 90% of it).
COPY_BAR, COPY_BAR_BYTES = 0.90, 64e6


def _bar(row: dict, name: str | None, refs: list, band: float, need: float = 1.0) -> dict:
    """One bar cell pair; "apart_ref" / "apart_copy": the ratio's two points were timed in
    different runs (`kernlog bench --rev` merges a run into bench.csv), so it carries the
    run-to-run drift that a side-by-side run cancels."""
    vals, spread, runs = row["values"], row.get("spread", {}), row.get("runs", {})
    v = vals.get(name) if name else None
    theirs = {r: vals[r] for r in refs if vals.get(r) is not None}
    best_ref = max(theirs, key=theirs.get) if theirs else None
    vs_ref = v / theirs[best_ref] if v is not None and theirs else None
    if theirs:  # wider where `bench --repeat` measured a wider run-to-run spread at this point
        band = max(band, spread.get(name) or 0.0, spread.get(best_ref) or 0.0)
    of_copy = v / vals[COPY] if v is not None and vals.get(COPY) else None
    big = row["elems"] * DTYPE_BYTES.get(row["dtype"], 4) >= COPY_BAR_BYTES

    def apart(other):
        return other is not None and runs.get(name) is not None and runs.get(other) not in (None, runs[name])

    return {"name": name, "vs_ref": vs_ref, "need": need,
            "ref_met": None if vs_ref is None else vs_ref >= need * (1 - band),
            "of_copy": of_copy, "copy_met": None if of_copy is None or not big else of_copy >= COPY_BAR,
            "best_ref": best_ref, "apart_ref": vs_ref is not None and apart(best_ref),
            "apart_copy": of_copy is not None and apart(COPY)}


def _bars(row: dict, roles: dict, band: float, bar: SpeedBar = EVERY_REFERENCE) -> list[dict]:
    """[best step, counterpart (where the kernel has one)]: each one's speed against the
    fastest of the bar's references ("ref_met": at least the bar's ratio for the shape, less
    `band`) and share of the copy column ("copy_met", where that bar applies); None where not
    measured."""
    vals = row["values"]
    refs = [r for r in vals if roles.get(r) == "reference" and (not bar.against or r in bar.against)]
    need = bar.ratio(parse_shape(row["shape"]))
    steps = {r: v for r, v in vals.items() if v is not None and roles.get(r) == "step"}
    out = [_bar(row, max(steps, key=steps.get) if steps else None, refs, band, need)]
    counterparts = [r for r in vals if roles.get(r) == "counterpart"]
    if counterparts:
        out.append(_bar(row, counterparts[0], refs, band, need))
    return out


def _sweep(root: Path, gpu: str, kernel: str, order: list[str], current: dict | None = None,
           families=(), roles: dict | None = None, bar: SpeedBar = EVERY_REFERENCE) -> dict | None:
    """The bench.csv of `kernel` on `gpu` as a table; a point measured on an older source of its
    revision than `current` holds is listed in the row's "stale". "runs" lists the runs the
    points come from (`kernlog bench --rev` merges a run into the file), each with its commit
    and revisions."""
    current = current or {}
    path = store.kernel_dir(root, gpu, kernel) / "bench.csv"
    if not path.exists():
        return None
    import pandas as pd

    df = store.read_bench(root, path)
    rank = {name: i for i, name in enumerate(order)}
    rank[COPY] = len(order) + 1  # after every revision, listed (0..) or no longer listed (len(order))

    def by_rank(name):
        return rank.get(name, len(order))

    revs = sorted(df["revision"].unique(), key=by_rank)
    metric_name = "tflops" if (df["metric"] == "tflops").any() else "gbps"
    points = df[df["metric"] == metric_name]
    wide = points.pivot_table(index=["dtype", "shape"], columns="revision", values="value", aggfunc="first")
    ceiling = float(df["matmul_tflops" if metric_name == "tflops" else "copy_gbps"].iloc[0])
    old = {(d, sh, rev) for d, sh, rev, sha in zip(points["dtype"], points["shape"], points["revision"],
                                                   points["source_sha256"], strict=True)
           if stale(sha, current, rev)}
    # A run is bench's run stamp or, for rows without one, their commit (two runs at one commit
    # then look like one).
    by_run: dict = {}
    run_of: dict = {}  # (dtype, shape, revision) -> the run its point comes from
    for run, commit, rev, d, sh in zip(points["run"], points["commit"], points["revision"], points["dtype"],
                                       points["shape"], strict=True):
        by_run.setdefault(run or commit, (commit, set()))[1].add(rev)
        run_of[(d, sh, rev)] = run or commit
    runs = sorted(({"commit": (commit or "not recorded")[:10], "revisions": sorted(timed, key=by_rank)}
                   for commit, timed in by_run.values()), key=lambda r: by_rank(r["revisions"][0]))
    refused, failing = _noted(df, REFUSED), _noted(df, FAILS_GATE)
    spreads = df[df["metric"] == RUN_SPREAD]
    spread = {(d, sh, r): v for d, sh, r, v in zip(spreads["dtype"], spreads["shape"], spreads["revision"],
                                                  spreads["value"], strict=True)}
    rows = []
    for (dtype, shape), vals in wide.iterrows():
        rows.append({"dtype": dtype, "shape": shape, "elems": _numel(shape),
                     "values": {r: (None if pd.isna(vals.get(r)) else float(vals.get(r))) for r in revs},
                     "stale": {r for r in revs if (dtype, shape, r) in old},
                     "refused": refused.get((dtype, shape), {}), "fails_gate": failing.get((dtype, shape), {}),
                     "spread": {r: spread[(dtype, shape, r)] for r in revs if (dtype, shape, r) in spread},
                     "runs": {r: run_of[(dtype, shape, r)] for r in revs if (dtype, shape, r) in run_of}})
    rows.sort(key=lambda r: (r["dtype"], r["elems"], r["shape"]))
    band = Bands(load_calibrations(root, gpu), gpu)("wall_ms").rel
    roles = roles or {}
    for row in rows:
        row["bars"] = _bars(row, roles, band, bar)
    return {"revisions": revs, "rows": rows,
            "groups": _groups(rows, families), "metric": metric_name, "ceiling": ceiling,
            "stale": sorted({r for row in rows for r in row["stale"]}, key=by_rank),
            "has_copy": COPY in revs, "runs": runs,
            "refusals": sorted({(r, why) for row in rows for r, why in row["refused"].items()},
                               key=lambda rw: (by_rank(rw[0]), rw[1])),
            "gate_failures": [(r, row["shape"], row["dtype"], why) for row in rows
                              for r, why in sorted(row["fails_gate"].items(), key=lambda rw: by_rank(rw[0]))],
            "unit": "TFLOP/s" if metric_name == "tflops" else "GB/s", "csv": str(path.relative_to(root)),
            "band": band, "bar_label": bar.label, "has_refs": any(roles.get(r) == "reference" for r in revs),
            "bar_labels": ["best step", "counterpart"][:max((len(r["bars"]) for r in rows), default=1)],
            "missed": [r for r in rows if any(b["ref_met"] is False or b["copy_met"] is False for b in r["bars"])],
            "apart": _apart(rows, by_rank),
            "gpu": str(df["gpu"].iloc[0])}


def _apart(rows: list[dict], by_rank) -> dict | None:
    """Where a bar's ratio compares figures of different runs: how many points, and the one
    `kernlog bench` run that times them side by side (every revision timed there, its shapes and
    dtypes; every run times the copy)."""
    points = [row for row in rows if any(b["apart_ref"] or b["apart_copy"] for b in row["bars"])]
    if not points:
        return None
    # every revision timed at those points, not only the two of each marked ratio: a run of those
    # alone would leave the others' ratios there across runs (the best step may change with it)
    revs = {r for row in points for r, v in row["values"].items() if v is not None and r != COPY}
    dtypes = sorted({r["dtype"] for r in points})
    return {"points": len(points), "revisions": sorted(revs, key=by_rank),
            "shapes": sorted({r["shape"] for r in points}, key=lambda sh: (_numel(sh), sh)),
            "dtypes": dtypes if len(dtypes) == 1 else []}


def _noted(df, metric: str) -> dict:
    """(dtype, shape) -> {revision: the note} of bench.csv's rows of `metric` (spec.REFUSED,
    spec.FAILS_GATE)."""
    rows = df[df["metric"] == metric]
    notes = rows["note"] if "note" in rows else [""] * len(rows)
    out: dict = {}
    for d, sh, rev, note in zip(rows["dtype"], rows["shape"], rows["revision"], notes, strict=True):
        out.setdefault((d, sh), {})[rev] = note if isinstance(note, str) and note else "not recorded"
    return out


def _numel(shape: str) -> int:
    n = 1
    for part in shape.split("x"):
        n *= int(part)
    return n


def _view(rec: dict) -> dict:
    """A verified profile as the templates read it: a catalog metric it lacks is "not collected"."""
    return dict(rec, metrics={**{m.key: None for m in CATALOG}, **rec["metrics"]})


def _histories(root: Path, kernel: str, lad: dict) -> dict | None:
    """The ladder's revisions across the commits that stored or profiled them (kernlog
    history): revision -> [(when, median ms, a step?)], and the plot's path; None where no
    revision has two entries."""
    from kernlog.judge.history import timeline
    from kernlog.store.lookup import Side

    out = {}
    for row in lad["rows"]:
        rec = row["rec"]
        side = Side(kernel, rec["revision"], tuple(rec["shape"]), rec["dtype"], rec["gpu"]["slug"])
        try:
            entries = timeline(root, side)["entries"]
        except KernlogError:
            continue
        points = [(e["when"][:19], e["median_ms"], e["step"]) for e in entries if "error" not in e and e["when"]]
        if len(points) > 1:
            out[rec["revision"]] = points
    if not out:
        return None
    return {"revisions": out,
            "plot": f"reports/{kernel}_history_{lad['gpu']['slug']}_{lad['shape']}_{lad['dtype']}.svg"}


def collect(root: Path, kernels: list, histories: bool = True) -> list[dict]:
    """One section per kernel. A profile that fails verification is left out of its ladder and
    listed in the section's "unreadable" (store.ProfileError, one line naming the file and
    the fix), so one bad file hides no other."""
    sections = []
    loaded = list(store.iter_profiles(root, bad="yield"))
    all_recs = [_view(r) for r in loaded if not isinstance(r, store.ProfileError)]
    bad = [e for e in loaded if isinstance(e, store.ProfileError)]
    for kernel in kernels:
        order = [r.name for r in kernel.revisions]
        current = {r.name: r.sha256() for r in kernel.revisions}
        recs = [r for r in all_recs if r["kernel"] == kernel.name]
        groups: dict[tuple, list] = {}
        for r in recs:
            groups.setdefault((r["gpu"]["slug"], format_shape(tuple(r["shape"])), r["dtype"]), []).append(r)
        gpus = sorted({g for g, _, _ in groups} | {p.parent.parent.name for p in
                                                   (root / "profiles").glob(f"*/{kernel.name}/bench.csv")})
        roles = {r.name: r.role for r in kernel.revisions}
        sweeps = [s for s in (_sweep(root, g, kernel.name, order, current, kernel.families, roles,
                                                kernel.speed_bar) for g in gpus) if s]
        claims = predictions.load(root, kernel.name)
        ladders = [dict(ladder(v, order, current, Bands(load_calibrations(root, k[0]), k[0]), kernel, claims),
                        gpu=v[0]["gpu"], shape=k[1], dtype=k[2], ceilings=v[0]["ceilings"])
                   for k, v in sorted(groups.items(), key=lambda kv: (
                       (kv[0][1], kv[0][2]) != (format_shape(kernel.profile_shape), kernel.dtypes[0]), kv[0]))]
        for i, lad in enumerate(ladders):  # the first: the kernel's profile shape and first dtype, first GPU
            lad["history"] = _histories(root, kernel.name, lad) if histories and i == 0 else None
        for lad in ladders:
            placed = any(row["roof"]["intensity"] is not None for row in lad["rows"])
            lad["roofline"] = (f"reports/{kernel.name}_roofline_{lad['gpu']['slug']}_{lad['shape']}_{lad['dtype']}.svg"
                               if placed else None)
        sections.append({"kernel": kernel, "order": order, "ladders": ladders,
                         "across": across_gpus(ladders),
                         "sweeps": sweeps,
                         "revisions": {r.name: r for r in kernel.revisions},
                         "unreadable": [e for e in bad if Path(e.path).parts[-2] == kernel.name]})
    return sections


def unreadable(sections: list[dict]) -> list[store.ProfileError]:
    """The profiles the sections leave out because they failed verification."""
    return [e for s in sections for e in s["unreadable"]]


def stale_figures(sections: list[dict]) -> list[str]:
    """One line per kernel whose log shows a figure measured on an older source of its revision."""
    lines = []
    for s in sections:
        profiles = sorted({f"{row['rec']['revision']} ({lad['shape']} {lad['dtype']} on {lad['gpu']['name']})"
                           for lad in s["ladders"] for row in lad["rows"] if row["stale"]})
        swept = sorted({f"{r} (on {sw['gpu']})" for sw in s["sweeps"] for r in sw["stale"]})
        if profiles or swept:
            what = ([f"profiles of {', '.join(profiles)}"] if profiles else []) + \
                ([f"sweep points of {', '.join(swept)}"] if swept else [])
            lines.append(f"{s['kernel'].name}: {'; '.join(what)} were measured on an older source")
    return lines


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("kernlog.render", "templates"), trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["f"] = lambda v, spec=".1f": "–" if v is None else format(v, spec)
    return env


def render_blocks(sections: list[dict]) -> dict[str, str]:
    env = _env()
    blocks = {"summary": env.get_template("summary.md.j2").render(sections=sections, stale=stale_figures(sections))}
    tpl = env.get_template("kernel.md.j2")
    for s in sections:
        blocks[s["kernel"].name] = tpl.render(s=s, copy_bar=COPY_BAR)
    return blocks


def splice(text: str, blocks: dict[str, str]) -> str:
    """Replace each generated block in `text`; append the ones it lacks, in order."""
    seen = set()

    def sub(m):
        name = m.group("name")
        seen.add(name)
        if name not in blocks:
            return m.group(0)
        return f"<!-- kernlog:begin {name} -->\n{blocks[name].rstrip()}\n<!-- kernlog:end {name} -->\n"

    text = BLOCK.sub(sub, text)
    for name, body in blocks.items():
        if name not in seen:
            block = f"<!-- kernlog:begin {name} -->\n{body.rstrip()}\n<!-- kernlog:end {name} -->\n"
            text = text.rstrip("\n") + "\n\n" + block
    return text


HEADER = """# KERNEL_LOG

The worklog of this repository's kernels, step by step from naive to tuned. Everything
between `kernlog:begin` / `kernlog:end` markers is generated by `kernlog report` from
`profiles/` (re-rendering replaces only those blocks); the prose around them is written by hand.
"""


def render(root: Path, kernels: list, sections: list[dict] | None = None) -> str:
    """KERNEL_LOG.md as it should read; pass `sections` (from collect) to reuse them."""
    path = root / LOG
    text = path.read_text() if path.exists() else HEADER
    return prose.fill(root, splice(text, render_blocks(collect(root, kernels) if sections is None else sections)))


def _pyplot():
    """matplotlib's pyplot, headless, its SVG ids salted so a re-render writes the same bytes."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "kernlog"
    import matplotlib.pyplot as plt

    return plt


# Each SVG carries a digest of the data it was drawn from (its <dc:description>), so `report
# --check` can tell a stale plot from a current one without drawing. PLOT_VERSION is part of the
# digest: bump it when a plot's drawing changes, and every committed plot reads as out of date.
PLOT_VERSION = 1
_DIGEST = re.compile(r"kernlog-data ([0-9a-f]{64})")


def plot_digest(data) -> str:
    """sha256 of a plot's data (JSON, keys sorted; anything else by its repr) and PLOT_VERSION."""
    import hashlib
    import json

    blob = json.dumps([PLOT_VERSION, data], sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _save(plt, fig, path: Path, digest: str) -> None:
    path.parent.mkdir(exist_ok=True)
    fig.tight_layout()
    # no date: the same data, the same file
    fig.savefig(path, metadata={"Date": None, "Description": f"kernlog-data {digest}"})
    plt.close(fig)


def _sweep_lines(ax, sw: dict, xs, rows: list[dict]) -> None:
    """A line per revision of the sweep through (x, its value) of each row it was measured at
    (colour, marker and line style all vary: no two of 12+ series alike), and the ceiling."""
    for i, rev in enumerate(sw["revisions"]):
        pts = sorted((x, r["values"][rev]) for x, r in zip(xs, rows, strict=True) if r["values"][rev] is not None)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                    linestyle=("-", "--", "-.", ":")[i // 10 % 4], color=f"C{i % 10}", label=rev)
    ax.axhline(sw["ceiling"], color="grey", linestyle="--", label="ceiling")


def _plot_families(plt, s: dict, sw: dict):
    """A kernel with shape families: a panel per family and dtype, its members side by side (a
    line through 1x50257, 64x50257 and 4096x50257 at one row length would say nothing)."""
    dtypes = sorted({r["dtype"] for r in sw["rows"]})
    groups = [g for g in sw["groups"] if g["rows"]]
    fig, axes = plt.subplots(len(groups), len(dtypes), figsize=(6 * len(dtypes), 3.8 * len(groups)), squeeze=False)
    for axrow, g in zip(axes, groups, strict=True):
        for ax, dtype in zip(axrow, dtypes, strict=True):
            rows = [r for r in g["rows"] if r["dtype"] == dtype]
            _sweep_lines(ax, sw, range(len(rows)), rows)
            ax.set_xticks(range(len(rows)), [r["shape"] for r in rows], rotation=20, fontsize=7)
            ax.set_ylabel(sw["unit"])
            ax.set_title(f"{s['kernel'].name} {g['name'] or 'bench shapes'} {dtype} ({sw['gpu']})", fontsize=9)
    axes[0][-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _plot_sizes(plt, s: dict, sw: dict):
    """A kernel without shape families: a panel per dtype, throughput against size (log 2)."""
    dtypes = sorted({r["dtype"] for r in sw["rows"]})
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes, strict=False):
        rows = [r for r in sw["rows"] if r["dtype"] == dtype]
        _sweep_lines(ax, sw, [_x(r["shape"], s["kernel"].sweep_axis) for r in rows], rows)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("row length" if s["kernel"].sweep_axis == -1 and "x" in rows[0]["shape"] else "size")
        ax.set_ylabel(sw["unit"])
        ax.set_title(f"{s['kernel'].name} {dtype} ({sw['gpu']})")
        ax.legend(fontsize=7)
    return fig


def _sweep_figures(sections: list[dict]):
    """(path under the root, the data drawn, draw(plt) -> figure) of each sweep plot: one SVG per
    kernel and GPU, throughput against size, a line per revision (with shape families: a panel
    per family)."""
    for s in sections:
        for sw in s["sweeps"]:
            families = any(g["family"] and g["rows"] for g in sw["groups"])
            data = {"kernel": s["kernel"].name, "axis": s["kernel"].sweep_axis, "gpu": sw["gpu"], "unit": sw["unit"],
                    "ceiling": sw["ceiling"], "revisions": list(sw["revisions"]),
                    "rows": [[r["dtype"], r["shape"], r["values"]] for r in sw["rows"]],
                    "groups": [[g["name"], bool(g["family"]), [[r["dtype"], r["shape"]] for r in g["rows"]]]
                               for g in sw["groups"]] if families else None}
            draw = _plot_families if families else _plot_sizes
            yield f"reports/{s['kernel'].name}_sweep.svg", data, lambda plt, s=s, sw=sw, draw=draw: draw(plt, s, sw)


def _draw(root: Path, figures) -> list[Path]:
    plt = _pyplot()
    written = []
    for rel, data, draw in figures:
        _save(plt, draw(plt), root / rel, plot_digest(data))
        written.append(root / rel)
    return written


def plot_sweeps(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _sweep_figures(sections))


MARKERS = "osD^vP*Xh<>p"


def _roofline(plt, s: dict, lad: dict, rows: list[dict]):
    """Each revision a point (achieved TFLOP/s at its FLOP per DRAM byte), the ladder's steps
    joined by arrows in ladder order, references hollow, under the measured bandwidth slope and
    the compute ceiling."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["roof"]["intensity"] for r in rows]
    bw, peak = rows[0]["roof"]["bandwidth_gbps"], rows[0]["roof"]["peak_tflops"]
    lo, hi = min(xs) / 4, max(max(xs) * 4, (peak * 1e3 / bw * 2) if peak else 0)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof = [min(x * bw / 1e3, peak) if peak else x * bw / 1e3 for x in grid]
    ax.plot(grid, roof, color="black", linewidth=1.5,
            label=f"roof: copy {bw:.0f} GB/s" + (f", {rows[0]['roof']['peak_name']} {peak:.0f} TFLOP/s"
                                                 if peak else ""))
    steps = []
    for i, r in enumerate(rows):
        rec, pt = r["rec"], (r["roof"]["intensity"], r["roof"]["achieved"])
        ref = rec["role"] == "reference"
        ax.plot(*pt, linestyle="none", marker=MARKERS[i % len(MARKERS)], markersize=8, color=f"C{i % 10}",
                markerfacecolor="none" if ref else f"C{i % 10}",
                label=f"{rec['revision']} ({100 * r['roof']['pct_of_roof']:.0f}% of roof)")
        if rec["role"] == "step":
            steps.append(pt)
    for a, b in zip(steps, steps[1:], strict=False):
        ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "->", "color": "grey", "lw": 0.8})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOP per DRAM byte (measured bytes)")
    ax.set_ylabel("TFLOP/s achieved (wall time)")
    ax.set_title(f"{s['kernel'].name} {lad['shape']} {lad['dtype']} on {lad['gpu']['name']}")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def _roofline_figures(sections: list[dict]):
    """One roofline per ladder whose revisions have an intensity (see _roofline)."""
    for s in sections:
        for lad in s["ladders"]:
            if not lad["roofline"]:
                continue
            rows = [r for r in lad["rows"] if r["roof"]["intensity"] is not None]
            data = {"title": [s["kernel"].name, lad["shape"], lad["dtype"], lad["gpu"]["name"]],
                    "roof": [rows[0]["roof"][k] for k in ("bandwidth_gbps", "peak_tflops", "peak_name")],
                    "points": [[r["rec"]["revision"], r["rec"]["role"], r["roof"]["intensity"], r["roof"]["achieved"],
                                r["roof"]["pct_of_roof"]] for r in rows]}
            yield lad["roofline"], data, lambda plt, s=s, lad=lad, rows=rows: _roofline(plt, s, lad, rows)


def plot_rooflines(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _roofline_figures(sections))


def _history(plt, s: dict, lad: dict, hist: dict):
    """Each revision's median time at the kernel's profile shape across the commits that stored
    or profiled it (kernlog history), steps circled."""
    import datetime

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (rev, points) in enumerate(hist["revisions"].items()):
        xs = [datetime.datetime.fromisoformat(w) for w, _, _ in points]
        ys = [ms * 1e3 for _, ms, _ in points]
        ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], color=f"C{i % 10}", label=rev, linewidth=1)
        for x, y, (_, _, step) in zip(xs, ys, points, strict=True):
            if step:
                ax.plot(x, y, marker="o", markersize=13, markerfacecolor="none", color="red")
    ax.set_yscale("log")
    ax.set_ylabel("median time (us, log)")
    ax.set_xlabel("date of the commit profiled")
    ax.set_title(f"{s['kernel'].name} {lad['shape']} {lad['dtype']} on {lad['gpu']['name']}: history "
                 "(red rings: steps beyond noise)")
    ax.legend(fontsize=7, loc="upper right")
    fig.autofmt_xdate()
    return fig


def _history_figures(sections: list[dict]):
    """One history plot per kernel, at its first ladder (see _history)."""
    for s in sections:
        hist = s["ladders"][0].get("history") if s["ladders"] else None
        if not hist:
            continue
        lad = s["ladders"][0]
        data = {"title": [s["kernel"].name, lad["shape"], lad["dtype"], lad["gpu"]["name"]],
                "revisions": hist["revisions"]}
        yield hist["plot"], data, lambda plt, s=s, lad=lad, hist=hist: _history(plt, s, lad, hist)


def plot_histories(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _history_figures(sections))


def _figures(sections: list[dict]):
    yield from _sweep_figures(sections)
    yield from _roofline_figures(sections)
    yield from _history_figures(sections)


def stale_plots(root: Path, sections: list[dict]) -> list[str]:
    """Each plot the log links that is missing, or whose digest is not that of the data
    profiles/ and git hold now (drawn from other data, or by an older PLOT_VERSION)."""
    out = []
    for rel, data, _ in _figures(sections):
        path = root / rel
        if not path.exists():
            out.append(f"{rel} is missing")
            continue
        found = _DIGEST.search(path.read_text(errors="replace"))
        if found is None or found.group(1) != plot_digest(data):
            out.append(f"{rel} was drawn from other data than profiles/ holds"
                       if found else f"{rel} carries no data digest")
    return out


def plot_all(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _figures(sections))


def _x(shape: str, axis: int) -> int:
    return int(shape.split("x")[axis])
