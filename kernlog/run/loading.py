"""A revision loaded for the gate, or one line saying why this machine cannot run it as set up
(errors.CannotRun): its import fails (the user's own package not on the path), or it is a Triton
kernel with neither a GPU nor Triton's interpreter. Either way nothing is known of its answers, so
it is not a gate failure, and `kernlog check` goes on to the other revisions."""
from __future__ import annotations

import os
from pathlib import Path

from kernlog import config
from kernlog.errors import CannotRun, KernlogError
from kernlog.spec import Kernel, Revision


def runnable(kernel: Kernel, rev: Revision, device: str) -> None:
    """Raise CannotRun where `rev` is a Triton kernel and would run on the CPU (no GPU, or `device`
    cpu) without Triton's interpreter: it would fail every case ("0 active drivers") and look
    wrong. Told before it is loaded: triton reads TRITON_INTERPRET when it makes a kernel, so it
    must be set before the command starts."""
    if rev.kind != "triton" or os.environ.get("TRITON_INTERPRET") == "1":
        return
    import torch

    gpu = torch.cuda.is_available()
    if device == "cuda" and gpu:
        return
    why = "this machine has no GPU" if not gpu else "--device cpu runs it only under Triton's interpreter"
    raise CannotRun(f"{kernel.name}/{rev.name} is a Triton kernel and {why}: "
                    f"run TRITON_INTERPRET=1 kernlog check {kernel.name} --device cpu")


def load(kernel: Kernel, rev: Revision, for_gate: bool = False):
    """rev.load() (rev.load_for_gate() where `for_gate` and it has one). An import that fails
    (a revision importing the user's own package, not on the path) is CannotRun, in one line
    naming the revision, its file and the module missing, not a traceback."""
    try:
        return ((for_gate and rev.load_for_gate) or rev.load)()
    except ImportError as exc:
        raise CannotRun(import_problem(kernel, rev, exc)) from None


# the libraries kernels import that are not the user's own, each with the command that installs it (torch's
# CPU build where there is no GPU: plain pip pulls the CUDA one, gigabytes of it; docs/your-repository.md)
LIBRARIES = {"torch": "pip install torch --index-url https://download.pytorch.org/whl/cpu (a GPU machine: its CUDA "
                      "build)",
             "triton": "pip install triton", "cupy": "pip install cupy-cuda12x", "numpy": "pip install numpy",
             "liger_kernel": "pip install liger-kernel"}


def import_problem(kernel: Kernel, rev: Revision, exc: ImportError) -> str:
    """The one line of a revision whose import failed; where a module is missing, how to provide it: a library
    kernels use by its install command, anything else as the user's own package."""
    missing = isinstance(exc, ModuleNotFoundError)
    library = LIBRARIES.get((exc.name or "").split(".")[0]) if missing else None
    hint = (f"; a library this environment lacks: {library}" if library
            else "; install your package (pip install -e .) or put it on PYTHONPATH" if missing else "")
    return f"{kernel.name}/{rev.name}: cannot import {exc.name or 'a module'} ({source_of(rev)}: {gist(exc)}){hint}"


def source_of(rev: Revision) -> str:
    """The revision's first source as its repository names it (relative to the root kernlog finds
    above it), else the file its load() is written in."""
    code = getattr(rev.load, "__code__", None)
    path = Path(rev.sources[0]) if rev.sources else Path(code.co_filename if code else "?")
    try:
        return Path(os.path.relpath(path.resolve(), config.find_root(path.parent))).as_posix()
    except (KernlogError, OSError, ValueError):
        return str(path)


def gist(exc: Exception) -> str:
    """First and last lines of an error (a compiler error puts its cause on the last line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1][:300]}"
