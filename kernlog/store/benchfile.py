"""bench.csv: the timing sweep of a kernel on a GPU, long format (kernlog.capture.bench writes it)."""
from __future__ import annotations

import os
from pathlib import Path

from kernlog import memo, spec
from kernlog.errors import KernlogError
from kernlog.spec import parse_shape
from kernlog.store.keys import glob_kernel_files

BENCH_COLUMNS = ("revision", "shape", "dtype", "metric", "value", "gpu", "copy_gbps", "matmul_tflops")


def read_bench(root: Path, path: Path):
    """A bench.csv as a DataFrame, its columns and shapes checked. source_sha256, commit and
    run are None where a row has none (files from before they were recorded; a row without a
    hash is not judged stale)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype={"shape": str, "source_sha256": str})
        missing = [c for c in BENCH_COLUMNS if c not in df]
        if missing or df.empty:
            raise ValueError(f"missing {', '.join(missing)}" if missing else "no rows")
        for shape in df["shape"].unique():
            parse_shape(shape)
        df["value"] = pd.to_numeric(df["value"])
    except (ValueError, TypeError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise KernlogError(f"{path.relative_to(root)}: not a kernlog bench file ({e})") from None
    for col in ("source_sha256", "commit", "run"):  # None where a row lacks one (older files)
        vals = df[col] if col in df else pd.Series([None] * len(df), index=df.index)
        df[col] = [v if isinstance(v, str) and v else None for v in vals]
    return df


def bench_hashes(root: Path, kernel: str) -> dict:
    """(gpu slug, revision) -> the source hash (None if not recorded) of each point of the
    kernel's bench.csv files. While kernlog.snapshot.held(), each file's points are kept on
    disk (kernlog.memo) until it changes."""
    out: dict = {}
    for path in glob_kernel_files(root, "bench.csv", kernel=kernel):
        points = memo.kept("bench_hashes", (Path(__file__), Path(spec.__file__)), os.path.abspath(path),
                           lambda path=path: (_points(root, path), [path]))
        for gpu, rev, sha in points:
            out.setdefault((gpu, rev), []).append(sha)
    return out


def _points(root: Path, path: Path) -> list[list]:
    """[gpu slug, revision, source hash or None] of each point of one bench.csv, checked."""
    import csv

    try:  # the csv module, not read_bench's pandas: `kernlog list` is run after every edit
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            rows = list(reader)
        missing = [c for c in BENCH_COLUMNS if not rows or c not in header]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}" if rows else "no rows")
        width = len(header)
        short = next((i for i, row in enumerate(rows, 2) if len(row) != width), None)
        if short is not None:
            raise ValueError(f"line {short} has {len(rows[short - 2])} fields, the header {width}")
        col = {name: header.index(name) for name in ("revision", "shape", "metric")}
        for shape in {row[col["shape"]] for row in rows}:
            parse_shape(shape)
    except (OSError, ValueError, UnicodeDecodeError, csv.Error) as e:
        raise KernlogError(f"{path.relative_to(root)}: not a kernlog bench file ({e})") from None
    sha = header.index("source_sha256") if "source_sha256" in header else None
    first = rows[0][col["metric"]]
    gpu = path.parent.parent.name
    return [[gpu, row[col["revision"]], (row[sha] if sha is not None else "") or None]
            for row in rows if row[col["metric"]] == first]
