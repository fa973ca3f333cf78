"""profiles/: where captured profiles live, and how they are written (atomically) and read.

Layout: profiles/<gpu>/<kernel>/<revision>.<shape>.<dtype>.{json,ncu-rep}, one pair per
captured revision; profiles/<gpu>/ceilings.json (measured copy bandwidth and matmul rate);
profiles/<gpu>/<kernel>/bench.csv (the timing sweep, long format).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import KernlogError
from .spec import NAME_RE, Shape, format_shape, parse_shape

SCHEMA = 1


def gpu_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _safe(*parts: str) -> None:
    for p in parts:
        if not NAME_RE.match(p) and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", p):
            raise KernlogError(f"refusing path component {p!r}: it could escape profiles/")


def stem(revision: str, shape: Shape, dtype: str) -> str:
    _safe(revision, dtype)
    return f"{revision}.{format_shape(shape)}.{dtype}"


def kernel_dir(root: Path, gpu: str, kernel: str) -> Path:
    _safe(gpu, kernel)
    return root / "profiles" / gpu / kernel


def profile_paths(root: Path, gpu: str, kernel: str, revision: str, shape: Shape, dtype: str):
    base = kernel_dir(root, gpu, kernel) / stem(revision, shape, dtype)
    return base.with_name(base.name + ".json"), base.with_name(base.name + ".ncu-rep")


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a profile is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(obj) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def save_profile(root: Path, record: dict, report_tmp: Path, force: bool) -> Path:
    """Move the ncu report into place, then write its JSON (the JSON's presence marks a
    complete profile). Refuses to replace an existing profile unless `force`."""
    json_path, rep_path = profile_paths(root, record["gpu"]["slug"], record["kernel"], record["revision"],
                                        tuple(record["shape"]), record["dtype"])
    if json_path.exists() and not force:
        raise KernlogError(f"{json_path.relative_to(root)} exists; pass --force to replace it")
    rep_path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(report_tmp, rep_path)
    record["ncu"]["report"] = rep_path.name
    record["ncu"]["report_bytes"] = rep_path.stat().st_size
    write_atomic(json_path, dump_json(record))
    return json_path


def load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise KernlogError(f"cannot read profile {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise KernlogError(f"{path} is not a kernlog profile (schema {SCHEMA})")
    return data


def iter_profiles(root: Path, kernel: str | None = None) -> Iterator[dict]:
    base = root / "profiles"
    pattern = f"*/{kernel}/*.json" if kernel else "*/*/*.json"
    for path in sorted(base.glob(pattern)):
        record = load_json(path)
        record["_path"] = str(path.relative_to(root))
        yield record


def find_profile(root: Path, kernel: str, revision: str, shape: Shape | None = None,
                 dtype: str | None = None, gpu: str | None = None) -> dict:
    matches = [r for r in iter_profiles(root, kernel)
               if r["revision"] == revision and (shape is None or tuple(r["shape"]) == tuple(shape))
               and (dtype is None or r["dtype"] == dtype) and (gpu is None or r["gpu"]["slug"] == gpu)]
    if not matches:
        what = f"{kernel}/{revision}" + (f" {format_shape(shape)}" if shape else "") + (f" {dtype}" if dtype else "")
        raise KernlogError(f"no stored profile for {what}" + (f" on {gpu}" if gpu else "")
                           + "; run `kernlog profile` on a GPU machine, or see `kernlog list`")
    if len(matches) > 1:
        choices = ", ".join(sorted(f"{format_shape(tuple(r['shape']))} {r['dtype']} on {r['gpu']['slug']}"
                                   for r in matches))
        raise KernlogError(f"{kernel}/{revision} has {len(matches)} profiles ({choices}); "
                           "pick one with --shape, --dtype or --gpu")
    return matches[0]


def load_ceilings(root: Path, gpu: str) -> dict:
    path = root / "profiles" / gpu / "ceilings.json"
    return json.loads(path.read_text()) if path.exists() else {}


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
    kernel's bench.csv files."""
    out: dict = {}
    for path in sorted((root / "profiles").glob(f"*/{kernel}/bench.csv")):
        df = read_bench(root, path)
        df = df[df["metric"] == df["metric"].iloc[0]]
        for rev, sha in zip(df["revision"], df["source_sha256"], strict=True):
            out.setdefault((path.parent.parent.name, rev), []).append(sha)
    return out
