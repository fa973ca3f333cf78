"""Where and with what a profile was captured: GPU, driver, toolchain, repository state, and
the revision's identity (the hash of every file it executes)."""
from __future__ import annotations

import datetime
import hashlib
import inspect
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from . import __version__
from .errors import KernlogError
from .spec import _defining_file

TOOL = Path(__file__).resolve().parent
# The tool's own files that run in every revision of a kind: NVRTC's options (cuda.py) shape
# every CUDA C binary. frameworks.py, the references' wrapper, is not among them: a framework
# reference is identified by its function's code alone.
KIND_FILES = {"cuda": (TOOL / "cuda.py",)}
CUDA_SUFFIXES = (".cu", ".cuh", ".h")
LADDER_FILE = "__init__.py"  # an operator's folder declares its ladder there
UNKNOWN = "unknown"
COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def executed_files(rev) -> tuple[Path, ...]:
    """Every file `rev` runs, in the order its hash reads them: its declared sources; each file
    a CUDA source #includes, followed (kernlog.cuda.includes); the module that defines its
    loader (kernels/softmax/cuda_launch.py for the CUDA C softmax ladder, the operator's
    __init__.py for most others) unless it is kernlog's own; and KIND_FILES."""
    from . import cuda

    files = [Path(p).resolve() for p in rev.sources]
    for path in list(files):
        if path.suffix in CUDA_SUFFIXES:
            files += cuda.includes(path)
    loader = _defining_file(rev.load)
    if loader is not None and TOOL not in loader.parents:
        files.append(loader)
    files += KIND_FILES.get(rev.kind, ())
    return tuple(dict.fromkeys(files))


def source_sha256(rev) -> str:
    """The revision's identity, over the name and bytes of each of executed_files(rev). An
    operator's __init__.py counts only with the code of the function of the revision written
    in it (`code`, else `load`): adding a rung or a shape there marks nothing stale."""
    h = hashlib.sha256()
    for path in executed_files(rev):
        body = next((inspect.getsource(fn).encode() + _bound(fn) for fn in (rev.code, rev.load)
                     if fn is not None and path.name == LADDER_FILE and _defining_file(fn) == path), None)
        h.update(path.name.encode() + b"\0" + (path.read_bytes() if body is None else body))
    return h.hexdigest()


PLAIN = (str, int, float, bool, bytes, type(None))


def _bound(fn) -> bytes:
    """The plain values a loader closes over: vector_add's v0-v2 share one loader function and
    differ only in the file name and flags it was made with."""
    cells = getattr(fn, "__closure__", None) or ()
    names = fn.__code__.co_freevars if hasattr(fn, "__code__") else ()
    vals = []
    for name, cell in zip(names, cells, strict=False):
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(v, PLAIN) or (isinstance(v, tuple) and all(isinstance(x, PLAIN) for x in v)):
            vals.append(f"{name}={v!r}")
    return ("\0" + ";".join(vals)).encode() if vals else b""


def _run(cmd, cwd=None) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _git(args: list[str], root: Path) -> str | None:
    """git's output in `root`; None where git is missing or fails (no repository there)."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path) -> dict:
    """The commit profiled and whether the tracked files differed from it. A copy of the tree
    without git history (a lent GPU machine gets one) names its commit through KERNLOG_COMMIT.
    What git cannot tell is "unknown", never guessed: no commit without git or KERNLOG_COMMIT,
    and no dirty state unless git's HEAD is the commit named."""
    named = (os.environ.get("KERNLOG_COMMIT") or "").strip().lower() or None
    if named is not None and not COMMIT_RE.fullmatch(named):
        raise KernlogError(f"KERNLOG_COMMIT={named!r} is not a commit: give the full 40-hex id (git rev-parse HEAD)")
    head = _git(["rev-parse", "--verify", "HEAD"], root)
    commit = named or head
    if commit is None:
        return {"commit": UNKNOWN, "dirty": UNKNOWN}
    status = _git(["status", "--porcelain", "--untracked-files=no"], root) if head == commit else None
    return {"commit": commit, "dirty": UNKNOWN if status is None else bool(status)}


def ncu_version(ncu: str) -> str:
    m = re.search(r"Version\s+(\S+)", _run([ncu, "--version"]))
    return m.group(1) if m else "unknown"


def gpu_info() -> dict:
    import torch

    from .cuda import device_caps
    from .store import gpu_slug

    caps = device_caps()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    uuid = str(getattr(props, "uuid", "") or "")
    return {"name": caps.name, "slug": gpu_slug(caps.name), "sm_count": caps.sm_count,
            "memory_gib": round(props.total_memory / 2 ** 30, 1), "capability": "{}.{}".format(*caps.capability),
            "smem_per_block_optin": caps.smem_per_block_optin, "cluster_launch": caps.cluster_launch,
            "driver": driver[0] if driver else "unknown", "cuda": torch.version.cuda,
            # which of the host's GPUs ran it (profiles made side by side on several: kernlog.spread)
            "uuid": (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else None,
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def versions(ncu: str | None = None) -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "kernlog": __version__}
    for name in ("triton", "cupy"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    from .frameworks import liger_version

    out["liger_kernel"] = liger_version()
    if ncu:
        out["ncu"] = ncu_version(ncu)
    return out


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def find_ncu() -> str | None:
    return shutil.which("ncu") or next((str(p) for p in sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"))), None)
