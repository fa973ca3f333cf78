"""Where and with what a profile was captured: GPU, driver, toolchain and repository state."""
from __future__ import annotations

import datetime
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from . import __version__
from .store import gpu_slug


def _run(cmd, cwd=None) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_state(root: Path) -> dict:
    """The commit profiled. A copy of the tree without git history (a lent GPU machine gets
    one) names it through KERNLOG_COMMIT instead."""
    commit = os.environ.get("KERNLOG_COMMIT") or _run(["git", "rev-parse", "HEAD"], cwd=root)
    if not re.fullmatch(r"[0-9a-f]{40}", commit or ""):
        return {"commit": None, "dirty": None}
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root))
    return {"commit": commit, "dirty": dirty}


def ncu_version(ncu: str) -> str:
    m = re.search(r"Version\s+(\S+)", _run([ncu, "--version"]))
    return m.group(1) if m else "unknown"


def gpu_info() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    return {"name": props.name, "slug": gpu_slug(props.name), "sm_count": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2 ** 30, 1), "capability": f"{props.major}.{props.minor}",
            "driver": driver[0] if driver else "unknown", "cuda": torch.version.cuda}


def versions(ncu: str | None = None) -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "kernlog": __version__}
    for name in ("triton", "cupy"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    if ncu:
        out["ncu"] = ncu_version(ncu)
    return out


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def find_ncu() -> str | None:
    return shutil.which("ncu") or next((str(p) for p in sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"))), None)
