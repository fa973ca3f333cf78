"""Where and with what a profile was captured: GPU, driver, toolchain, repository state, and
the revision's identity (the hash of every file it executes)."""
from __future__ import annotations

import datetime
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from kernlog import __version__
from kernlog.errors import KernlogError
from kernlog.identity import gpu_slug
from kernlog.store import gitrefs

UNKNOWN = "unknown"
COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def _run(cmd, cwd=None) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _git(args: list[str], root: Path) -> str | None:
    """git's output in `root`; None where git is missing or fails (no repository there)."""
    return gitrefs.git_or_none(root, *args)


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

    from kernlog.cuda import device_caps

    caps = device_caps()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    uuid = str(getattr(props, "uuid", "") or "")
    return {"name": caps.name, "slug": gpu_slug(caps.name), "sm_count": caps.sm_count,
            "memory_gib": round(props.total_memory / 2 ** 30, 1), "capability": "{}.{}".format(*caps.capability),
            "smem_per_block_optin": caps.smem_per_block_optin, "cluster_launch": caps.cluster_launch,
            "driver": driver[0] if driver else "unknown", "cuda": torch.version.cuda,
            # which of the host's GPUs ran it (profiles made side by side on several: kernlog.run.fanout)
            "uuid": (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else None,
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def quick_gpu_slug() -> str | None:
    """The slug of the GPU this process would run on, from nvidia-smi: no torch, no CUDA context.
    None where that cannot be told here, and the caller asks torch: no nvidia-smi or no GPU,
    CUDA_VISIBLE_DEVICES hiding them all or naming an index past them, a MIG slice (nvidia-smi
    names its parent GPU, torch the slice) or a GPU with MIG on. On a host of several models, a
    GPU named by its UUID is asked for alone; one named by its index (or none named: CUDA's
    device 0) is told only in CUDA_DEVICE_ORDER=PCI_BUS_ID, the order nvidia-smi lists them in
    (CUDA's default puts the fastest first)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = None if visible is None else visible.split(",")[0].strip()
    if first is not None and (not first or first.startswith(("-", "MIG-"))):
        return None
    by_id = first is not None and not first.isdigit()
    try:
        done = subprocess.run(["nvidia-smi", *(["-i", first] if by_id else []), "--query-gpu=name,mig.mode.current",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[f.strip() for f in line.rsplit(",", 1)] for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not rows or any(len(r) != 2 or r[1] == "Enabled" for r in rows):
        return None
    names = [r[0] for r in rows]
    index = 0 if first is None or by_id else int(first)
    if index >= len(names):
        return None
    if len(set(names)) == 1:
        return gpu_slug(names[index])
    return gpu_slug(names[index]) if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" else None


def versions(ncu: str | None = None) -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "kernlog": __version__}
    for name in ("triton", "cupy"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    from kernlog.frameworks import liger_version

    out["liger_kernel"] = liger_version()
    if ncu:
        out["ncu"] = ncu_version(ncu)
    return out


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def find_ncu() -> str | None:
    return shutil.which("ncu") or next((str(p) for p in sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"))), None)
