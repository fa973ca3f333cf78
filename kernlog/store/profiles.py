"""profiles/: where captured profiles live, and how they are written (atomically) and read.

Layout: profiles/<gpu>/<kernel>/<revision>.<shape>.<dtype>.json, one per captured revision,
each naming its ncu report beside it: <shape>.<dtype>.<hash>.ncu-rep, which may hold several
revisions of one `kernlog profile` run (one NVTX range each; profiles from before reports were
shared name <revision>.<shape>.<dtype>.ncu-rep); profiles/<gpu>/ceilings.json (measured copy bandwidth and matmul rate);
profiles/<gpu>/<kernel>/bench.csv (the timing sweep, long format).

Integrity. A profile's JSON records the size and sha256 of its report (ncu.report_bytes,
ncu.report_sha256), and every reader goes through load_profile, which checks the JSON's
fields and the report against them. Profiles saved before the hash was recorded carry the
size alone: they load, their report checked by size only (a same-size replacement passes),
until re-profiled; `kernlog list` counts them.

The pair is replaced as one: the JSON is the commit record and names its report, so a
killed save leaves the old pair or the new one (save_profiles says how).
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.spec import NAME_RE, ROLES, Shape, format_shape, parse_shape

SCHEMA = 1


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
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a profile is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(obj) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def staged_name(stem_: str, sha256: str) -> str:
    """The hidden name, of its hash, under which an earlier kernlog staged a profile's report
    before its JSON was committed; a profile a killed save left naming it still loads."""
    return f".{stem_}.{sha256[:16]}.ncu-rep"


def report_name(shape: Shape, dtype: str, sha256: str) -> str:
    """The name of a stored ncu report: its shape, dtype and hash. One report may hold several
    revisions (one NVTX range each, ncu.nvtx_range in their JSONs); the name changes with the
    content, so a new report never overwrites one a profile still names."""
    _safe(dtype)
    return f"{format_shape(shape)}.{dtype}.{sha256[:16]}.ncu-rep"


_REPORT_RE = re.compile(r"[0-9x]+\.[a-z0-9_]+\.[0-9a-f]{16}\.ncu-rep")


_DIGESTS: dict = {}  # (path, size, mtime_ns, inode) -> digest: a report shared by many profiles is read once


def file_digest(path: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file; read once per process while its size, mtime and
    inode stay the same (a file changed in the last seconds is read each time: the mtime's
    granularity could hide a second change)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = _digest(path)
    if time.time() - st.st_mtime > 2:
        _DIGESTS[key] = digest
    return digest


def _digest(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _copy_atomic(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _move_in(report_tmp: Path, dst: Path) -> None:
    """`report_tmp` at `dst`, on disk, atomically (copied where ncu wrote it on another file system)."""
    with open(report_tmp, "rb") as f:
        os.fsync(f.fileno())  # on disk before any JSON names it
    try:
        os.replace(report_tmp, dst)
        os.chmod(dst, 0o644)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        _copy_atomic(report_tmp, dst)
        report_tmp.unlink()


def _named_reports(folder: Path) -> tuple[set[str], set[str]]:
    """(reports the folder's JSONs name, stems of JSONs that cannot be read)."""
    named, unread = set(), set()
    for j in folder.glob("*.json"):
        try:
            named.add(json.loads(j.read_text())["ncu"]["report"])
        except (OSError, ValueError, KeyError, TypeError):
            unread.add(j.name[:-len(".json")])
    return named, unread


def _tidy(folder: Path, stems: list[str]) -> None:
    """Remove what saves leave behind that no JSON in `folder` names: temporary files, the
    reports of the replaced profiles (`stems`: their usual and staged names) and hashed
    reports no profile names any more (a killed save's, or one every revision in it was
    re-profiled out of). While a JSON there cannot be read, no report is removed: it may
    name any of them."""
    named, unread = _named_reports(folder)
    for p in folder.iterdir():
        if not p.is_file() or p.name in named:
            continue
        if p.name.startswith(".") and p.name.endswith(".tmp"):
            p.unlink(missing_ok=True)
        elif not unread and (_REPORT_RE.fullmatch(p.name) or any(
                p.name == f"{s}.ncu-rep" or (p.name.startswith(f".{s}.") and p.name.endswith(".ncu-rep"))
                for s in stems)):
            p.unlink(missing_ok=True)


def save_profiles(root: Path, records: list[dict], report_tmp: Path, force: bool) -> list[Path]:
    """Write profiles that share one ncu report (moved in from `report_tmp`): one JSON per
    record, each naming the report. The records share GPU, kernel, shape and dtype. Refuses
    to replace an existing profile unless `force`.

    Each JSON is the commit record of its profile: it names its report and records its size
    and sha256, and a reader sees each profile's old pair or its new one, whenever the
    process dies:
      1. the report is moved in under report_name(), a name of its hash no JSON uses yet;
      2. each JSON is written (atomically) naming it: that profile's new pair is committed;
      3. the reports no JSON names any more (the replaced ones) and temporary files are
         removed; a killed save's leftovers go with the next save into the folder."""
    if not records:
        raise ValueError("save_profiles: no records")
    first = records[0]
    key = (first["gpu"]["slug"], first["kernel"], tuple(first["shape"]), first["dtype"])
    paths = []
    for rec in records:
        if (rec["gpu"]["slug"], rec["kernel"], tuple(rec["shape"]), rec["dtype"]) != key:
            raise ValueError("save_profiles: records of one report share GPU, kernel, shape and dtype")
        paths.append(profile_paths(root, key[0], key[1], rec["revision"], key[2], key[3])[0])
    folder = paths[0].parent
    with folder_lock(folder):  # another process may save into this folder (kernlog.run.fanout)
        for json_path in paths:
            if json_path.exists() and not force:
                raise KernlogError(f"{json_path.relative_to(root)} exists; pass --force to replace it")
        size, sha = file_digest(report_tmp)
        name = report_name(key[2], key[3], sha)
        stems = [p.name[:-len(".json")] for p in paths]
        try:
            _move_in(report_tmp, folder / name)
            for rec, json_path in zip(records, paths, strict=True):
                ncu = dict(rec["ncu"], report=name, report_bytes=size, report_sha256=sha)
                write_atomic(json_path, dump_json(dict(rec, ncu=ncu)))
            _tidy(folder, stems)
        except BaseException:
            _tidy(folder, stems)  # once more: what the failed step left (the tidy's own included)
            raise
    return paths


@contextlib.contextmanager
def folder_lock(folder: Path):
    """`folder` (made if missing) to this process alone while the block runs: saves from
    processes profiling side by side take turns (an advisory lock on the folder itself)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def save_profile(root: Path, record: dict, report_tmp: Path, force: bool) -> Path:
    """save_profiles of one record: a profile and its own report."""
    return save_profiles(root, [record], report_tmp, force)[0]


class ProfileError(KernlogError):
    """A stored profile that cannot be trusted, in one line: the file, what is wrong, the fix.

    `path` is the profile's JSON relative to the root; `short` a few words for listings;
    `ident` (gpu, kernel, revision, shape, dtype) as the path spells them, or None where the
    path is not a profile's."""

    def __init__(self, message: str, path: str, short: str, ident: tuple | None):
        super().__init__(message)
        self.path, self.short, self.ident = path, short, ident


def path_ident(path: Path) -> tuple | None:
    """(gpu, kernel, revision, shape, dtype) as a path .../profiles/<gpu>/<kernel>/<rev>.<shape>.<dtype>.json
    spells them, or None where it is not such a path."""
    parts = path.parts[-4:]
    names = path.name[:-len(".json")].split(".") if path.name.endswith(".json") else []
    if len(parts) != 4 or parts[0] != "profiles" or len(names) != 3:
        return None
    rev, shape, dtype = names
    try:
        shape_t = parse_shape(shape)
        _safe(parts[1], parts[2], rev, dtype)
    except (ValueError, KernlogError):
        return None
    return parts[1], parts[2], rev, shape_t, dtype


def _fix(ident: tuple | None, inside: bool) -> str:
    if ident is not None:
        _, kernel, rev, shape, dtype = ident
        return (f"re-profile with `kernlog profile {kernel} --rev {rev} --shape {format_shape(shape)} "
                f"--dtype {dtype} --force` (or restore both files from git)")
    where = "`profiles/<gpu>/<kernel>/<revision>.<shape>.<dtype>.json`"
    if inside:
        return f"remove it: profiles/ holds only what `kernlog profile` writes, as {where}"
    return f"point at a profile where `kernlog profile` wrote it ({where})"


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_TYPES = {"str": str, "int": int, "list": list, "dict": dict, "null": type(None)}  # and "num": int or float

# What readers of a profile (show, diff, list, the log) rely on: dotted field -> accepted
# types. Other fields are provenance for people and may come and go. A null source hash and
# ceilings: an imported report (kernlog.capture.importer) ran no source kernlog knows, measured no ceiling.
FIELDS = {
    "kernel": "str", "revision": "str", "kind": "str", "role": "str", "change": "str", "predicts": "str|null",
    "shape": "list", "dtype": "str", "source_sha256": "str|null", "bytes_moved": "int", "flops": "num|null",
    "gpu": "dict", "gpu.slug": "str", "gpu.name": "str",
    "metrics": "dict", "metrics.wall_ms": "num",
    "facts": "dict", "facts.kernels": "list", "facts.main_kernel": "str|null", "facts.occupancy_limiter": "str|null",
    "findings": "list",
    "timing": "dict", "timing.samples_ms": "list", "timing.median_ms": "num", "timing.p05_ms": "num",
    "timing.p95_ms": "num", "timing.n": "int",
    "ncu": "dict", "ncu.report": "str", "ncu.report_bytes": "int", "ncu.clock_control": "str",
    "ceilings": "dict", "ceilings.copy_gbps": "num|null", "ceilings.matmul_bf16_tflops": "num|null",
    "versions": "dict", "versions.ncu": "str", "versions.torch": "str", "versions.triton": "str|null",
    "git": "dict", "git.commit": "str|null",
}


def _type_ok(value, kinds: str) -> bool:
    return any(_is_num(value) if kind == "num" else type(value) is _TYPES[kind] for kind in kinds.split("|"))


def _what(value) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _problems(rec: dict) -> Iterator[tuple[str, str]]:
    """(short, problem) for each way `rec` breaks what readers rely on; the first is reported."""
    for name, kinds in FIELDS.items():
        head, _, leaf = name.rpartition(".")
        parent = rec[head] if head else rec  # parents come first in FIELDS, already checked
        if leaf not in parent:
            yield "field missing", f"lacks the field {name}"
            return
        if not _type_ok(parent[leaf], kinds):
            yield "field of wrong type", f"has {name} {_what(parent[leaf])}, expected {kinds.replace('|', ' or ')}"
            return
    if rec["role"] not in ROLES:
        yield "field of wrong value", f"has role {rec['role']!r}, expected one of {', '.join(ROLES)}"
    shape = rec["shape"]
    if not shape or not all(type(n) is int and n > 0 for n in shape):
        yield "bad shape", f"has shape {shape!r}, expected a list of positive integers"
    samples = rec["timing"]["samples_ms"]
    if not samples:
        yield "no timing samples", "has no timing samples (timing.samples_ms is empty)"
    bad = next((v for v in samples if not (_is_num(v) and math.isfinite(v) and v > 0)), None) if samples else None
    if bad is not None:
        yield "bad timing sample", f"has a timing sample of {bad!r} ms, expected positive finite numbers"
    for key, v in rec["metrics"].items():
        if v is not None and not (_is_num(v) and math.isfinite(v)):
            yield "bad metric", f"has metrics.{key} = {v!r}, expected a finite number or null"
    for name in ("metrics.wall_ms", "timing.median_ms", "timing.p05_ms", "timing.p95_ms", "ceilings.copy_gbps",
                 "ceilings.matmul_bf16_tflops"):
        head, leaf = name.split(".")
        v = rec[head][leaf]
        if not (v is None and head == "ceilings") and not (math.isfinite(v) and v > 0):
            yield "bad number", f"has {name} = {v!r}, expected a positive finite number"
    for i, f in enumerate(rec["findings"]):
        if not (isinstance(f, dict) and all(isinstance(f.get(k), str) for k in ("rule", "title", "message"))
                and (f.get("speedup_pct") is None or _is_num(f["speedup_pct"]))):
            yield "bad finding", f"has findings[{i}] without rule, title and message strings"
    for i, k in enumerate(rec["facts"]["kernels"]):
        if not (isinstance(k, dict) and isinstance(k.get("name"), str)):
            yield "bad kernel fact", f"has facts.kernels[{i}] without a name"
    sha = rec["ncu"].get("report_sha256")
    if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        yield "field of wrong type", f"has ncu.report_sha256 {sha!r}, expected 64 hex digits"


def record_problem(rec: dict) -> str | None:
    """The first way a profile record breaks what readers rely on (FIELDS, samples, metrics),
    as words after the file's name, or None."""
    return next((problem for _, problem in _problems(rec)), None)


def load_profile(root: Path, json_path: Path) -> dict:
    """A stored profile, verified, with "_path" (its JSON, relative to `root`) added.

    Checks that the JSON parses, has this schema, every field in FIELDS with its type,
    positive finite timing samples and finite metrics, that it sits at the path its kernel,
    revision, shape, dtype and GPU spell, and that the report it names sits beside it (under
    the usual name, or the staged name of its hash) with the recorded size and, where one is
    recorded, sha256. Raises ProfileError, one line naming the file and the fix."""
    json_path = Path(json_path)
    rel = Path(os.path.relpath(json_path, root))
    inside = not rel.parts or rel.parts[0] != ".."
    rel = rel if inside else json_path
    ident = path_ident(Path(os.path.abspath(json_path)))
    fix = _fix(ident, inside)

    def fail(short: str, message: str):
        return ProfileError(f"{message}; {fix}", str(rel), short, ident)

    try:
        rec = json.loads(json_path.read_text())
    except OSError as exc:
        raise fail("unreadable", f"cannot read profile {rel}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise fail("invalid JSON", f"cannot read profile {rel}: not valid JSON ({exc})") from None
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        raise fail("not a profile", f"{rel} is not a kernlog profile (schema {SCHEMA})")
    for short, problem in _problems(rec):
        raise fail(short, f"{rel} {problem}")
    said = (rec["gpu"]["slug"], rec["kernel"], rec["revision"], tuple(rec["shape"]), rec["dtype"])
    # Outside a profiles/<gpu>/<kernel>/ folder (a copied pair) only the file name is checked.
    if rel.name != f"{said[2]}.{format_shape(said[3])}.{said[4]}.json" or ident not in (None, said):
        raise fail("misplaced", f"{rel} holds {said[1]}/{said[2]} {format_shape(said[3])} {said[4]} on {said[0]}, "
                   "not what its path says")
    stem_ = rel.name[:-len(".json")]
    ncu = rec["ncu"]
    sha = ncu.get("report_sha256")
    names = {f"{stem_}.ncu-rep"} | ({staged_name(stem_, sha), report_name(said[3], said[4], sha)} if sha else set())
    if ncu["report"] not in names:
        expected = report_name(said[3], said[4], sha) if sha else f"{stem_}.ncu-rep"
        raise fail("report misnamed", f"{rel} names its report {ncu['report']!r}, expected {expected}")
    rep = json_path.parent / ncu["report"]
    rep_rel = rel.with_name(ncu["report"])
    if not rep.is_file() and isinstance(ncu.get("pruned"), dict):  # removed by `kernlog prune`, on purpose
        rec["_path"] = str(rel)
        return rec
    if not rep.is_file():
        raise fail("ncu report missing", f"{rep_rel}, the ncu report {rel} names, is missing")
    size = rep.stat().st_size
    if size != ncu["report_bytes"]:
        raise fail("ncu report truncated or replaced",
                   f"{rep_rel}, the ncu report {rel} names, is {size} bytes, the profile recorded "
                   f"{ncu['report_bytes']}: the report is truncated or replaced")
    if sha and file_digest(rep)[1] != sha:
        raise fail("ncu report replaced",
                   f"{rep_rel}, the ncu report {rel} names, does not have the sha256 {rel.name} "
                   "recorded: the report was replaced "
                   "(not the one this profile was extracted from)")
    rec["_path"] = str(rel)
    return rec


def report_hashed(rec: dict) -> bool:
    """Whether the profile recorded its report's sha256 (else its report is checked by size
    only: profiles saved before kernlog recorded the hash)."""
    return bool(rec["ncu"].get("report_sha256"))


def report_path(root: Path, rec: dict) -> Path:
    """The .ncu-rep of a profile from load_profile."""
    return (root / rec["_path"]).parent / rec["ncu"]["report"]


def iter_profiles(root: Path, kernel: str | None = None, bad: str = "raise") -> Iterator[dict | ProfileError]:
    """Every stored profile (of `kernel`), verified by load_profile, in path order. A bad file
    raises its ProfileError (bad="raise"), or is yielded as one in its place (bad="yield") so
    that one bad file hides none of the others."""
    if bad not in ("raise", "yield"):
        raise ValueError(f"bad={bad!r}: 'raise' or 'yield'")
    base = root / "profiles"
    pattern = f"*/{kernel}/*.json" if kernel else "*/*/*.json"
    for path in sorted(p for p in base.glob(pattern) if not p.name.startswith(".")):
        try:
            yield load_profile(root, path)
        except ProfileError as err:
            if bad == "raise":
                raise
            yield err


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
    import csv

    out: dict = {}
    for path in sorted((root / "profiles").glob(f"*/{kernel}/bench.csv")):
        try:  # the csv module, not read_bench's pandas: `kernlog list` stays under a second
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            missing = [c for c in BENCH_COLUMNS if not rows or c not in rows[0]]
            if missing:
                raise ValueError(f"missing {', '.join(missing)}" if rows else "no rows")
            for row in rows:
                parse_shape(row["shape"])
        except (OSError, ValueError, UnicodeDecodeError, csv.Error) as e:
            raise KernlogError(f"{path.relative_to(root)}: not a kernlog bench file ({e})") from None
        first = rows[0]["metric"]
        for row in rows:
            if row["metric"] == first:
                out.setdefault((path.parent.parent.name, row["revision"]), []).append(row.get("source_sha256") or None)
    return out


def prune_reports(root: Path, kernel: str | None = None, dry_run: bool = False) -> tuple[list[Path], int]:
    """Remove the .ncu-rep of every --at entry (profiles/<gpu>/<kernel>/at/<commit>/), each JSON
    naming one rewritten first with ncu.pruned (when, and how to make the report again); the
    JSONs keep the report's name, size and sha256, and every metric, sample and hot spot, so
    history, diff and the log read them as before. Today's profiles keep their reports.
    (reports removed, bytes freed)."""
    removed, freed = [], 0
    pattern = f"*/{kernel}/at/*" if kernel else "*/*/at/*"
    for folder in sorted(p for p in (root / "profiles").glob(pattern) if p.is_dir()):
        with folder_lock(folder):
            for rep in sorted(folder.glob("*.ncu-rep")):
                size = rep.stat().st_size
                if not dry_run:
                    for j in sorted(folder.glob("*.json")):
                        rec = json.loads(j.read_text())
                        if rec.get("ncu", {}).get("report") != rep.name:
                            continue
                        commit = (rec.get("git") or {}).get("commit") or folder.name
                        rec["ncu"]["pruned"] = {
                            "on": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
                            "again": f"kernlog profile {rec['kernel']} --at {commit} --rev {rec['revision']} "
                                     f"--shape {format_shape(tuple(rec['shape']))} --dtype {rec['dtype']} --force"}
                        write_atomic(j, dump_json(rec))
                    rep.unlink()
                removed.append(rep)
                freed += size
    return removed, freed
