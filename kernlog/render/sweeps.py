"""The log's sweep tables: a kernel's bench.csv on one GPU as rows of throughput per shape and
dtype, grouped by shape family, and each row's bars (the best step and the counterpart against
the best reference and the copy), judged by kernlog.judge.verdicts."""
from __future__ import annotations

from pathlib import Path

from kernlog.judge.bands import bands_of
from kernlog.judge.gate_marks import fails_gate
from kernlog.judge.verdicts import COPY_BAR, COPY_BAR_BYTES, at_least, stale
from kernlog.judge.verdicts import apart as clocks_apart
from kernlog.spec import (
    COPY,
    DTYPE_BYTES,
    EVERY_REFERENCE,
    FAILS_GATE,
    REFUSED,
    RUN_SPREAD,
    SM_MHZ,
    SpeedBar,
    format_shape,
    parse_shape,
)
from kernlog.store import profiles as store
from kernlog.store.keys import bench_csv


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
# where the tensor holds COPY_BAR_BYTES or more (at least COPY_BAR of it; kernlog.judge.verdicts).


def others_line(rows: list[dict], missed: list[dict]) -> str:
    """The sentence under a sweep's family tables for its bench points outside every family:
    how many, and which of them miss a bar, each named by shape and dtype."""
    name = lambda r: f"{r['shape']} {r['dtype']}"  # noqa: E731
    miss = [name(r) for r in rows if r in missed]
    if len(rows) == 1:
        return f"The other bench point, {name(rows[0])}, is in the CSV{'; it misses a bar' if miss else ''}."
    if not miss:
        return f"The {len(rows)} other bench points are in the CSV."
    return f"The {len(rows)} other bench points are in the CSV; of them, {', '.join(miss)} " \
           f"{'misses' if len(miss) == 1 else 'miss'} a bar."


def bar_cell(row: dict, name: str | None, refs: list, band: float, need: float = 1.0) -> dict:
    """One bar cell pair; "apart_ref" / "apart_copy": the ratio's two points were timed in
    different runs (`kernlog bench --rev` merges a run into bench.csv), so it carries the
    run-to-run drift that a side-by-side run cancels."""
    vals, spread, runs = row["values"], row.get("spread", {}), row.get("runs", {})
    v = vals.get(name) if name else None
    theirs = {r: vals[r] for r in refs if vals.get(r) is not None and r not in row.get("fails_now", {})}
    best_ref = max(theirs, key=theirs.get) if theirs else None
    vs_ref = v / theirs[best_ref] if v is not None and theirs else None
    sm = row.get("sm", {})  # the SM clocks the two were timed at (bench.csv's sm_mhz, where it has them)
    clocks = (sm.get(name), sm.get(best_ref)) if vs_ref is not None else (None, None)
    clocks = clocks if all(clocks) and clocks_apart(*clocks, band) else None
    if theirs:  # wider where `bench --repeat` measured a wider run-to-run spread at this point
        band = max(band, spread.get(name) or 0.0, spread.get(best_ref) or 0.0)
    of_copy = v / vals[COPY] if v is not None and vals.get(COPY) else None
    big = row["elems"] * DTYPE_BYTES.get(row["dtype"], 4) >= COPY_BAR_BYTES

    def apart(other):
        return other is not None and runs.get(name) is not None and runs.get(other) not in (None, runs[name])

    return {"name": name, "vs_ref": vs_ref, "need": need,
            "ref_met": None if vs_ref is None else at_least(vs_ref, need, band),
            "of_copy": of_copy, "copy_met": None if of_copy is None or not big else at_least(of_copy, COPY_BAR),
            "best_ref": best_ref, "apart_ref": vs_ref is not None and apart(best_ref), "clocks_ref": clocks,
            "apart_copy": of_copy is not None and apart(COPY)}


def _bars(row: dict, roles: dict, band: float, bar: SpeedBar = EVERY_REFERENCE) -> list[dict]:
    """[best step, best counterpart (where the kernel has one)]: each one's speed against the
    fastest of the bar's references ("ref_met": at least the bar's ratio for the shape, less
    `band`) and share of the copy column ("copy_met", where that bar applies); None where not
    measured. The best of a role is its fastest revision measured there whose source passes
    the gate now (a ‡ one never is)."""
    vals = row["values"]
    refs = [r for r in vals if roles.get(r) == "reference" and (not bar.against or r in bar.against)]
    need = bar.ratio(parse_shape(row["shape"]))

    def best(role):
        of = {r: v for r, v in vals.items() if v is not None and roles.get(r) == role
              and r not in row.get("fails_now", {})}
        return max(of, key=of.get) if of else None

    step = best("step")
    out = [dict(bar_cell(row, step, refs, band, need), ties=_ties(row, step, roles, band))]
    if any(roles.get(r) == "counterpart" for r in vals):
        out.append(dict(bar_cell(row, best("counterpart") or next(r for r in vals if roles.get(r) == "counterpart"),
                                 refs, band, need), ties=[]))
    return out


def band_pct(band: float) -> str:
    """The band as the legend prints it, in percent to a tenth, a whole number without its ".0":
    0.035 -> "3.5", 0.02 -> "2" (rounded to a whole, 3.5% read as 4% and a 0.916x cell marked
    short of a 0.95x bar looked like a tie)."""
    return f"{band * 100:.1f}".removesuffix(".0")


def _ties(row: dict, best: str | None, roles: dict, band: float) -> list[str]:
    """The other steps within the noise of the best one at this point (the band, or either one's
    run-to-run spread there where wider), fastest first: the best step's lead over them is no lead.
    A tie as a bar cell judges one (verdicts.at_least). Only steps timed in the best one's run
    count: a figure merged from another run (`kernlog bench --rev`) carries that run's drift, and
    a tie is judged side by side."""
    vals, spread, runs = row["values"], row.get("spread", {}), row.get("runs", {})
    if best is None:
        return []
    near = [(v, r) for r, v in vals.items() if r != best and v is not None and roles.get(r) == "step"
            and r not in row.get("fails_now", {}) and runs.get(r) == runs.get(best)
            and at_least(v / vals[best], 1.0, max(band, spread.get(r) or 0.0, spread.get(best) or 0.0))]
    return [r for _, r in sorted(near, reverse=True)]


def sweep(root: Path, gpu: str, kernel: str, order: list[str], current: dict | None = None,
           families=(), roles: dict | None = None, bar: SpeedBar = EVERY_REFERENCE,
           outcomes: dict | None = None) -> dict | None:
    """The bench.csv of `kernel` on `gpu` as a table; a point measured on an older source of its
    revision than `current` holds is listed in the row's "stale", one of a source failing the
    gate now (`outcomes`, kernlog.store.gates) in its "fails_now". "runs" lists the runs the
    points come from (`kernlog bench --rev` merges a run into the file), each with its commit
    and revisions."""
    current = current or {}
    path = bench_csv(root, gpu, kernel)
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
    # The GPU's one stored ceiling (profiles/<gpu>/ceilings.json), the value every page quotes;
    # bench.csv's own column (what the run measured then) only where none is stored.
    stored = store.load_ceilings(root, gpu).get("matmul_bf16_tflops" if metric_name == "tflops" else "copy_gbps")
    ceiling = float(stored if stored is not None else
                    df["matmul_tflops" if metric_name == "tflops" else "copy_gbps"].iloc[0])
    old = {(d, sh, rev) for d, sh, rev, sha in zip(points["dtype"], points["shape"], points["revision"],
                                                   points["source_sha256"], strict=True)
           if stale(sha, current, rev)}
    now = {(d, sh, rev): why for d, sh, rev, sha in zip(points["dtype"], points["shape"], points["revision"],
                                                       points["source_sha256"], strict=True)
           if (why := fails_gate(sha, rev, outcomes))}
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
    clocked = df[df["metric"] == SM_MHZ]
    sm = {(d, sh, r): v for d, sh, r, v in zip(clocked["dtype"], clocked["shape"], clocked["revision"],
                                              clocked["value"], strict=True)}
    spreads = df[df["metric"] == RUN_SPREAD]
    spread = {(d, sh, r): v for d, sh, r, v in zip(spreads["dtype"], spreads["shape"], spreads["revision"],
                                                  spreads["value"], strict=True)}
    medians = df[df["metric"] == "median_ms"]  # (revision, shape, dtype) -> (median ms, source hash, spread)
    medians = {(r, sh, d): (v, sha, spread.get((d, sh, r)) or 0.0)
               for r, sh, d, v, sha in zip(medians["revision"], medians["shape"], medians["dtype"],
                                           medians["value"], medians["source_sha256"], strict=True)}
    rows = []
    for (dtype, shape), vals in wide.iterrows():
        rows.append({"dtype": dtype, "shape": shape, "elems": _numel(shape),
                     "values": {r: (None if pd.isna(vals.get(r)) else float(vals.get(r))) for r in revs},
                     "stale": {r for r in revs if (dtype, shape, r) in old},
                     "fails_now": {r: now[(dtype, shape, r)] for r in revs if (dtype, shape, r) in now},
                     "refused": refused.get((dtype, shape), {}), "fails_gate": failing.get((dtype, shape), {}),
                     "spread": {r: spread[(dtype, shape, r)] for r in revs if (dtype, shape, r) in spread},
                     "sm": {r: sm[(dtype, shape, r)] for r in revs if (dtype, shape, r) in sm},
                     "runs": {r: run_of[(dtype, shape, r)] for r in revs if (dtype, shape, r) in run_of}})
    rows.sort(key=lambda r: (r["dtype"], r["elems"], r["shape"]))
    band = bands_of(root, gpu)("wall_ms").rel
    roles = roles or {}
    for row in rows:
        row["bars"] = _bars(row, roles, band, bar)
    stale_at: dict = {}  # revision -> the points ("dtype shape") where its figure is of an older source
    for row in rows:
        for r in row["stale"]:
            stale_at.setdefault(r, []).append(f"{row['dtype']} {row['shape']}")
    groups = _groups(rows, families)
    missed = [r for r in rows if any(b["ref_met"] is False or b["copy_met"] is False for b in r["bars"])]
    other = next((g for g in groups if not g["family"] and g["name"] and g["rows"]), None)  # outside every family
    return {"revisions": revs, "rows": rows,
            "groups": groups, "metric": metric_name, "ceiling": ceiling,
            "stale": sorted(stale_at, key=by_rank),
            "stale_at": stale_at,
            "fails_now": sorted({(r, why) for row in rows for r, why in row["fails_now"].items()},
                                key=lambda rw: (by_rank(rw[0]), rw[1])),
            "has_copy": COPY in revs, "runs": runs,
            "refusals": sorted({(r, why) for row in rows for r, why in row["refused"].items()},
                               key=lambda rw: (by_rank(rw[0]), rw[1])),
            "gate_failures": _gate_failures(rows, by_rank),
            "unit": "TFLOP/s" if metric_name == "tflops" else "GB/s", "csv": str(path.relative_to(root)),
            "band": band, "band_pct": band_pct(band), "bar_label": bar.label,
            "has_refs": any(roles.get(r) == "reference" for r in revs),
            "bar_labels": ["best step", "counterpart"][:max((len(r["bars"]) for r in rows), default=1)],
            "missed": missed, "others_group": other, "others": others_line(other["rows"], missed) if other else None,
            "apart": _apart(rows, by_rank), "medians": medians,
            "clocked": [(r["dtype"], r["shape"], *b["clocks_ref"]) for r in rows for b in r["bars"][:1]
                        if b["clocks_ref"]],
            "gpu": str(df["gpu"].iloc[0])}


def _gate_failures(rows: list[dict], by_rank) -> list[tuple[str, str, str, str]]:
    """(revisions, shape, dtype, why) per point and reason a reference fails the gate at full size:
    references failing alike at one point (eager and compiled torch: the same cuBLAS call) share a line."""
    alike: dict[tuple, list[str]] = {}
    for row in rows:
        for r, why in sorted(row["fails_gate"].items(), key=lambda rw: by_rank(rw[0])):
            alike.setdefault((row["shape"], row["dtype"], why), []).append(r)
    return [(" and ".join(revs), shape, dtype, why) for (shape, dtype, why), revs in alike.items()]


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
