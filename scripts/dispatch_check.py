"""Is the dispatched op at least as fast as the best single revision at every sweep point? (GPU only)

    python3 scripts/dispatch_check.py OUT_DIR [--op NAME ...] [--shape SHAPE ...] [--dtype D]
                                      [--budget S] [--repeat N] [--own]

For each operator with a dispatch table (kernels/<op>/dispatch.json; with --own, this GPU's own
table, dispatch.<gpu>.json, where the operator has one) and each point of the sweep it was made
from (bench.csv: every shape and dtype, those the table has no class of included), the entry
point (kernels.library.dispatched) and every revision that qualified for the table are checked
against the operator's float64 reference at full size (kernlog's gate, as `kernlog bench` checks
each point), then timed side by side in one run: kernlog.timing (CUDA events, L2 flushed
before each launch), `--repeat` runs interleaved, each in an order rotated by one.

OUT_DIR/dispatch_check.csv (dispatch_check_<op>.csv with --op: one run per operator can share
OUT_DIR), long format, rewritten after every point (a run cut short keeps what it measured):
one row per (kernel, shape, dtype, name) where name is "dispatched" or a revision, with its
check, median/p05/p95 ms and run-to-run spread. The dispatched row adds the revision it ran and
how it was picked (its class, the nearest class, the fallback), the fastest revision there and
the dispatched time over it (vs_fastest), the table's best single revision over the whole sweep
(its fallback) and the time over that (vs_best_overall), and `holds`: vs_fastest within the
noise (the larger of 2% and the two rows' run spreads). A line per point is printed, and a count
per operator at the end.
"""
from __future__ import annotations

import argparse
import csv
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DISPATCHED = "dispatched"
NOISE = 0.02  # a gap under 2% is a tie (kernlog's default wall-time band)
FIELDS = ("kernel", "shape", "dtype", "name", "check", "median_ms", "p05_ms", "p95_ms", "run_spread", "picked",
          "how", "fastest", "vs_fastest", "best_overall", "vs_best_overall", "holds", "gpu", "commit")


def points_of(table: dict, kernel: str, shapes: list[str], dtype: str | None) -> list[tuple[str, str]]:
    """(shape, dtype) of every point of the sweep the table was made from, smallest first."""
    from kernlog.spec import parse_shape
    from kernlog.store.dispatch import sweep_points

    got = sweep_points(ROOT, table["source"]["gpu_slug"], kernel)
    pts = {(p["shape"], p["dtype"]) for p in got[0]} if got else \
        {(s, c["dtype"]) for c in table["classes"] for s in c["points"]}
    pts = {(s, d) for s, d in pts if (not shapes or s in shapes) and (dtype is None or d == dtype)}
    return sorted(pts, key=lambda sd: (sd[1], parse_shape(sd[0])))


def check_point(name, table, timer, shape_text, dtype, budget, repeat, launchers, stamp) -> list[dict]:
    """The rows of one point: every qualifying revision and the dispatched entry point, checked,
    then timed side by side."""
    import torch

    from kernels import library
    from kernlog.capture.bench import attempt, combine, interleaved
    from kernlog.spec import parse_shape

    op = library.dispatched(name)
    kernel = op.kernel
    shape = parse_shape(shape_text)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = kernel.make_inputs(shape, dtype, gen, "cuda", kernel.cases[0])
    out = kernel.make_output(inputs)
    from kernlog.library import device_gpu

    got = op.pick(shape, dtype, "cuda", device_gpu(torch.cuda.current_device()) if op.gpu_tables else None)
    rows, timed = {}, {}
    candidates = [(rev_name, launchers[rev_name]) for rev_name in table["revisions"]]
    for label, rev_name, launch in [(DISPATCHED, got.revision, op), *[(n, n, f) for n, f in candidates]]:
        verdict, why = attempt(kernel, kernel.revision(rev_name), launch, inputs, shape, dtype)
        rows[label] = dict(stamp, kernel=name, shape=shape_text, dtype=dtype, name=label,
                           check=verdict if not why else f"{verdict}: {why}")
        if verdict == "ok":
            timed[label] = functools.partial(launch, inputs, out)
    runs = interleaved(timed, repeat, lambda fn: timer.samples(fn, budget_s=budget / repeat))
    for label in timed:
        s = combine(runs[label])
        rows[label].update(median_ms=s["median_ms"], p05_ms=s["p05_ms"], p95_ms=s["p95_ms"],
                           run_spread=s["run_spread"])
    disp = rows[DISPATCHED]
    disp.update(picked=got.revision, how=got.how)
    singles = {n: r["median_ms"] for n, r in rows.items() if n != DISPATCHED and "median_ms" in r}
    if "median_ms" in disp and singles:
        fastest = min(singles, key=singles.get)
        best = next((n for n in table["fallback"].get(dtype) or table["fallback"]["any"] if n in singles), None)
        band = max(NOISE, disp["run_spread"], rows[fastest]["run_spread"])
        disp.update(fastest=fastest, vs_fastest=disp["median_ms"] / singles[fastest],
                    best_overall=best, vs_best_overall=disp["median_ms"] / singles[best] if best else None,
                    holds=disp["median_ms"] / singles[fastest] <= 1 + band)
    else:
        disp.update(holds=False)
    del inputs, out
    torch.cuda.empty_cache()
    return list(rows.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--op", action="append", default=[], help="an operator (default: every one with a table)")
    parser.add_argument("--shape", action="append", default=[], help="only these sweep shapes (e.g. 4096x8192)")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per revision and point")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs per point")
    parser.add_argument("--own", action="store_true",
                        help="the points and revisions of this GPU's own table (dispatch.<gpu>.json) instead")
    args = parser.parse_args(argv)

    from kernels import library
    from kernlog import timing
    from kernlog.capture import provenance
    from kernlog.capture.profiler import require_gpu
    from kernlog.run.loading import load

    require_gpu()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / (f"dispatch_check_{'_'.join(args.op)}.csv" if args.op else "dispatch_check.csv")
    stamp = {"gpu": provenance.gpu_info()["name"], "commit": provenance.git_state(ROOT)["commit"]}
    timer = timing.Timer()
    ops = args.op or [n for n in library.OPS if (ROOT / "kernels" / n / "dispatch.json").exists()]
    rows: list[dict] = []
    failed: dict = {}
    here = provenance.gpu_info()["slug"]
    if args.own:  # only the operators with a table of this GPU's own sweep
        ops = [n for n in ops if here in library.dispatched(n).gpu_tables]
    for name in ops:
        op = library.dispatched(name)
        table = op.gpu_tables[here] if args.own else op.table
        launchers = {n: load(op.kernel, op.kernel.revision(n)) for n in table["revisions"]}
        pts = points_of(table, name, args.shape, args.dtype)
        print(f"{name}: {len(pts)} points, {len(launchers)} qualifying revisions + the dispatched entry point",
              flush=True)
        for shape, dtype in pts:
            got = check_point(name, table, timer, shape, dtype, args.budget, args.repeat, launchers, stamp)
            rows += got
            d = got[0]
            vs = f"{d['vs_fastest']:.3f}x of {d['fastest']}" if d.get("vs_fastest") else "not timed"
            print(f"  {shape:>18} {dtype} {d['picked']:<18} ({d['how']}) {d['check']:<4} {vs}"
                  f"{'' if d['holds'] else '  <-- slower'}", flush=True)
            if not d["holds"]:
                failed.setdefault(name, []).append(f"{shape} {dtype}")
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                w.writeheader()
                w.writerows(rows)
    for name in ops:
        bad = failed.get(name, [])
        print(f"{name}: dispatched at least as fast as the fastest revision (within noise) at every point"
              if not bad else f"{name}: slower than the fastest revision at {len(bad)}: {', '.join(bad)}")
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
