"""A kernel's dispatch table written to disk (<kernels>/<op>/dispatch.json, kernlog.library's
table_path and load_table; written by `kernlog dispatch`, never by hand), and the sweep it is
made from: bench.csv's points as kernlog.judge.dispatch reads them. The table sits beside the
operator, not under profiles/: the library reads it wherever the kernels go, profiles or not."""
from __future__ import annotations

from pathlib import Path

from kernlog import config
from kernlog.spec import COPY, FAILS_GATE
from kernlog.store.benchfile import read_bench
from kernlog.store.files import dump_json, write_atomic
from kernlog.store.keys import bench_csv, glob_kernel_files


def save(path: Path, table: dict) -> Path:
    write_atomic(path, dump_json(table))
    return path


def text(table: dict) -> str:
    """The table as its file holds it (save's bytes, as text)."""
    return dump_json(table).decode()


def swept_gpus(root: Path, kernel: str) -> list[str]:
    """The GPUs (slugs) that keep a bench.csv of `kernel`."""
    return [p.parent.parent.name for p in glob_kernel_files(root, "bench.csv", kernel=kernel)]


def sweep_points(root: Path, gpu: str, kernel: str) -> tuple[list[dict], dict] | None:
    """(the timed points of the kernel's bench.csv on `gpu`, what the table names as its
    source: the GPU, the file and its runs, each with its commit and revisions); None where the
    GPU keeps no sweep of it."""
    path = bench_csv(root, gpu, kernel)
    if not path.exists():
        return None
    df = read_bench(root, path)
    marked = df[df["metric"] == FAILS_GATE]
    notes = marked["note"] if "note" in marked else [""] * len(marked)
    failing = {(r, s, d): (n if isinstance(n, str) and n else "failed at full size")
               for r, s, d, n in zip(marked["revision"], marked["shape"], marked["dtype"], notes, strict=True)}
    spreads = df[df["metric"] == "run_spread"]
    spread = {(r, s, d): float(v) for r, s, d, v in zip(spreads["revision"], spreads["shape"], spreads["dtype"],
                                                       spreads["value"], strict=True)}
    timed = df[df["metric"] == "median_ms"]
    picks = timed["note"] if "note" in timed else [""] * len(timed)
    points, runs = [], {}
    for rev, shape, dtype, ms, sha, run, commit, note in zip(timed["revision"], timed["shape"], timed["dtype"],
                                                             timed["value"], timed["source_sha256"], timed["run"],
                                                             timed["commit"], picks, strict=True):
        points.append({"revision": rev, "shape": shape, "dtype": dtype, "median_ms": float(ms), "sha256": sha,
                       "spread": spread.get((rev, shape, dtype), 0.0),
                       "fails_gate": failing.get((rev, shape, dtype), ""),
                       "note": note if isinstance(note, str) else ""})
        revs = runs.setdefault((run if isinstance(run, str) else "", commit if isinstance(commit, str) else ""), set())
        if rev != COPY:  # the copy column is timed in every run
            revs.add(rev)
    source = {"gpu": str(df["gpu"].iloc[0]), "gpu_slug": gpu, "bench_csv": config.layout(root).rel(path),
              "runs": [{"run": run or None, "commit": commit or None, "revisions": sorted(revs)}
                       for (run, commit), revs in sorted(runs.items())]}
    return points, source
