"""`kernlog import`: an ncu report kernlog did not capture (plain `ncu -o`, another machine)
-> profiles/, extracted as `kernlog profile` extracts its own.

What only a capture knows is marked, never invented: the revision's source hash is unknown
(null: list and the log judge nothing stale), no wall time was taken (the one timing sample
is ncu's duration of the profiled launch, `timing.source` says so, and diff gives no
verdict on one sample), and the copy ceiling is the GPU's measured one where
profiles/<gpu>/ceilings.json exists, else null ("not measured"). The profile carries
`imported`: the source file's name, size and sha256.
"""
from __future__ import annotations

import datetime
import shlex
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

from kernlog.capture import hotspots, provenance
from kernlog.capture import ncu as ncurep
from kernlog.errors import KernlogError
from kernlog.identity import gpu_slug
from kernlog.registry import kernel_names, load_kernel
from kernlog.spec import NAME_RE, format_shape, parse_shape
from kernlog.store import profiles as store
from kernlog.store.keys import staging_dir

MAGIC = b"NVR\0"
TIMING_SOURCE = "ncu duration"
NOT_MEASURED = {"copy_gbps": None, "matmul_bf16_tflops": None,
                "method": "not measured: an imported report, and no profiles/<gpu>/ceilings.json for its GPU"}


def _varint(b: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i


def _fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as ints, length-delimited as bytes."""
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        wire = key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire in (1, 5):
            v, i = b[i:i + (8 if wire == 1 else 4)], i + (8 if wire == 1 else 4)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        out.append((key >> 3, v))
    return out


def session(path: Path) -> dict:
    """What the report's block headers record of its session: "started" (unix seconds),
    "tools" (name -> version: "Nsight Compute Target", "CUDA Version"), "command" (ncu's
    command line). The file is "NVR\\0", a length-prefixed file header, then blocks of a
    length-prefixed header and a payload of the size the header's field 5 gives; session
    details are the header's field 3. Read from ncu 2025.3.1's reports (no schema ships with
    the PyPI reader); what cannot be read is left out. They record no driver version."""
    out: dict = {"tools": {}}
    try:
        with open(path, "rb") as f:
            if f.read(4) != MAGIC:
                return out
            (n,) = struct.unpack("<I", f.read(4))
            f.seek(n, 1)
            while len(head := f.read(4)) == 4:
                (n,) = struct.unpack("<I", head)
                header = _fields(f.read(n))
                for num, value in header:
                    if num == 3 and isinstance(value, bytes):
                        for k, v in _fields(value):
                            if k == 2 and isinstance(v, int):
                                out.setdefault("started", v)
                            elif k == 8 and isinstance(v, bytes):
                                pair = dict(_fields(v))
                                out["tools"][pair.get(1, b"").decode()] = pair.get(2, b"").decode()
                            elif k == 11 and isinstance(v, bytes):
                                out.setdefault("command", v.decode())
                f.seek(next((v for k, v in header if k == 5 and isinstance(v, int)), 0), 1)
    except (OSError, ValueError, IndexError, struct.error, UnicodeDecodeError):
        pass  # provenance is best effort: the metrics come from ncu_report
    return out


def _option(argv: list[str], name: str) -> list[str]:
    """Every value given to ncu's option `name` (as `--name V` or `--name=V`)."""
    vals = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]
    return vals + [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]


def _ncu_settings(command: str | None) -> dict:
    if not command:
        return {"command": None, "clock_control": provenance.UNKNOWN, "cache_control": provenance.UNKNOWN,
                "sections": None, "set": None}
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = command.split()
    argv = ["ncu"] + argv[1:]  # the install path says nothing about the measurement
    # ncu's defaults where the command does not set them: --clock-control base, --cache-control all.
    return {"command": argv, "clock_control": (_option(argv, "--clock-control") or ["base"])[-1],
            "cache_control": (_option(argv, "--cache-control") or ["all"])[-1],
            "sections": _option(argv, "--section"), "set": (_option(argv, "--set") or [None])[-1]}


def _attr(action, name: str):
    m = action.metric_by_name(name)
    return None if m is None else m.value()


def _gpu(action, cuda: str | None) -> dict:
    name = _attr(action, "device__attribute_display_name")
    if not isinstance(name, str) or not name.strip():
        raise KernlogError("the report does not name its GPU (no device__attribute_display_name): "
                           "cannot tell which profiles/<gpu>/ it belongs in")
    major, minor = (_attr(action, f"device__attribute_compute_capability_{p}") for p in ("major", "minor"))
    cluster = _attr(action, "device__attribute_cluster_launch")
    return {"name": name, "slug": gpu_slug(name),
            "sm_count": _attr(action, "device__attribute_multiprocessor_count"),
            "capability": f"{major}.{minor}" if major is not None and minor is not None else provenance.UNKNOWN,
            "smem_per_block_optin": _attr(action, "device__attribute_max_shared_memory_per_block_optin"),
            "cluster_launch": None if cluster is None else bool(cluster),
            "driver": provenance.UNKNOWN, "cuda": cuda or provenance.UNKNOWN}


def _select(actions: list, range_name: str | None, progress) -> list:
    if range_name is not None:
        picked = ncurep.group_by_range(actions, range_name).get(range_name, [])
        if not picked:
            found = sorted({r for a in actions for r in ncurep.nvtx_ranges(a)})
            raise KernlogError(f"no kernel of the report ran inside an NVTX range {range_name!r}; its ranges: "
                               + (", ".join(found) if found else "none (captured without --nvtx)"))
        return picked
    if len(actions) > 1:
        progress(f"note: the report holds {len(actions)} kernel launches and no --range was given: all are "
                 "taken as the revision's kernels (durations, DRAM bytes and instructions summed, the other "
                 "metrics from the longest)")
    return actions


def _names(root: Path, kernel_name: str, rev_name: str):
    for what, name in (("kernel", kernel_name), ("revision", rev_name)):
        if not NAME_RE.match(name):
            raise KernlogError(f"bad {what} name {name!r}: lowercase letters, digits and _, "
                               "starting with a letter or digit")
    known = kernel_names(root)
    if kernel_name not in known:
        raise KernlogError(f"no kernel {kernel_name!r}; kernels: {', '.join(known)}")
    return load_kernel(root, kernel_name)


def _kernel_shape_dtype(root: Path, kernel_name: str, rev_name: str, shape: str | None, dtype: str | None):
    kernel = _names(root, kernel_name, rev_name)
    try:
        shp = parse_shape(shape) if shape else kernel.profile_shape
    except ValueError as exc:
        raise KernlogError(str(exc)) from None
    if len(shp) != len(kernel.profile_shape):
        raise KernlogError(f"{kernel.name} shapes have {len(kernel.profile_shape)} dimension(s), "
                           f"e.g. {format_shape(kernel.profile_shape)}; got {format_shape(shp)}")
    return kernel, shp, kernel.dtype_or_default(dtype)


def build_record(root: Path, report: Path, kernel, rev_name: str, shape, dtype: str, actions: list) -> dict:
    """The profile of `actions` (kernels of `report`) as kernel/rev_name at shape and dtype."""
    values, facts = ncurep.summarize(actions)
    if not values.get("duration_us"):
        raise KernlogError(f"{report} lacks gpu__time_duration.sum (ncu's SpeedOfLight section): "
                           "an imported profile is timed by it")
    sess = session(report)
    gpu = _gpu(actions[0], sess["tools"].get("CUDA Version"))
    size, sha = store.file_digest(report)
    ms = values["duration_us"] * 1e-3
    values["wall_ms"] = ms
    rev = next((r for r in kernel.revisions if r.name == rev_name), None)
    started = sess.get("started")
    ceilings = store.load_ceilings(root, gpu["slug"])
    return {
        "schema": store.SCHEMA, "kernel": kernel.name, "revision": rev_name,
        "kind": rev.kind if rev else provenance.UNKNOWN, "role": rev.role if rev else "reference",
        "change": rev.change if rev else f"not a revision of the ladder: imported from {report.name}",
        "predicts": rev.predicts if rev else None,
        "source_sha256": None, "shape": list(shape), "dtype": dtype, "gpu": gpu,
        "versions": {"ncu": (sess["tools"].get("Nsight Compute Target") or provenance.UNKNOWN).split()[0],
                     "torch": provenance.UNKNOWN, "triton": None},
        "git": {"commit": None, "dirty": provenance.UNKNOWN},
        "captured_at": (datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat()
                        if started else provenance.UNKNOWN),
        "bytes_moved": kernel.bytes_moved(shape, dtype), "flops": kernel.flops(shape), "ceiling": kernel.ceiling,
        "ceilings": ceilings if ceilings.get("copy_gbps") else NOT_MEASURED,
        "metrics": values, "facts": facts, "findings": ncurep.findings(actions),
        "hotspots": hotspots.of_revision(actions, root),
        "timing": {"samples_ms": [ms], "median_ms": ms, "p05_ms": ms, "p95_ms": ms, "n": 1,
                   "source": TIMING_SOURCE, "clocks": None},
        "ncu": dict(_ncu_settings(sess.get("command")), replay_passes=ncurep.replay_passes(actions)),
        "imported": {"file": report.name, "bytes": size, "sha256": sha, "imported_at": provenance.now(),
                     "kernels": len(actions)},
    }


def import_report(root: Path, report: Path, kernel_name: str, rev_name: str, shape: str | None = None,
                  dtype: str | None = None, range_name: str | None = None, force: bool = False,
                  progress: Callable[[str], None] = print) -> Path:
    """Store `report` as the profile of kernel_name/rev_name at `shape` (text, e.g. 8192x4096)
    and `dtype` (default: the kernel's profile shape and dtype), from the kernels inside
    the NVTX range `range_name` (default: every kernel); returns its JSON path. Raises
    KernlogError, having written nothing, for bad names, a file that is not an ncu report or
    holds no kernel, or an existing profile without `force`."""
    kernel, shp, dtype = _kernel_shape_dtype(root, kernel_name, rev_name, shape, dtype)
    report = Path(report)
    if not report.is_file():
        raise KernlogError(f"no such file: {report}")
    with open(report, "rb") as f:
        if f.read(4) != MAGIC:
            raise KernlogError(f"{report} is not an ncu report (an .ncu-rep file begins with 'NVR')")
    actions = _select(ncurep.read_report(report), range_name, progress)
    record = build_record(root, report, kernel, rev_name, shp, dtype, actions)
    record["imported"]["range"] = range_name
    json_path, _ = store.profile_paths(root, record["gpu"]["slug"], kernel.name, rev_name, shp, dtype)
    if json_path.exists() and not force:
        raise KernlogError(f"{json_path.relative_to(root)} exists; pass --force to replace it")
    staging_dir(root).mkdir(exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=".kernlog-import-", dir=staging_dir(root)))
    try:
        tmp = tmpdir / "report.ncu-rep"
        shutil.copyfile(report, tmp)  # save_profile moves its report in; the user's file stays
        return store.save_profile(root, record, tmp, force, compress=True)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
