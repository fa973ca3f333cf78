"""A revision loaded for the gate, or one line saying why this machine cannot run it as set up
(errors.CannotRun): its import fails (the user's own package not on the path), or it is a Triton
kernel with neither a GPU nor Triton's interpreter. Either way nothing is known of its answers, so
it is not a gate failure, and `kernlog check` goes on to the other revisions."""
from __future__ import annotations

import os
from pathlib import Path

from kernlog import config
from kernlog.errors import CannotRun, KernlogError, OperatorError
from kernlog.spec import Kernel, Revision


def runnable(kernel: Kernel, rev: Revision, device: str) -> None:
    """Raise CannotRun where `rev` is a Triton kernel and would run on the CPU (no GPU, or `device`
    cpu) without Triton's interpreter: it would fail every case ("0 active drivers") and look
    wrong. Told before it is loaded: triton reads TRITON_INTERPRET when it makes a kernel, so it
    must be set before the command starts. Under the interpreter, kernlog.triton_interpreter's shim is applied
    first, so a kernel looping over a runtime scalar runs as it compiles (Triton 3.6's interpreter with
    NumPy >= 2.3 refuses it otherwise), whether or not the team's launcher applies it."""
    if rev.kind != "triton":
        return
    if os.environ.get("TRITON_INTERPRET") == "1":
        try:
            from kernlog import triton_interpreter

            triton_interpreter.apply()
        except (ImportError, AttributeError):  # no triton here, or one whose interpreter needs no shim
            pass
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
    except SyntaxError as exc:  # a revision's module that does not compile: its line, and the others still checked
        where = f"{_shown(Path(exc.filename))}:{exc.lineno}" if exc.filename and Path(exc.filename).is_file() \
            else source_of(rev)
        raise CannotRun(f"{kernel.name}/{rev.name}: {where}: syntax error: {exc.msg}; "
                        f"`python -m py_compile {where.split(':')[0]}` shows it") from None


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
    own = getattr(rev.load, "__module__", "") or ""
    if missing and exc.name and own and exc.name.split(".")[0] == own.split(".")[0]:  # the user's package: a typo
        where = own_line(exc)
        return (f"{kernel.name}/{rev.name}: no module {exc.name}" + (f", imported at {where}" if where else "") +
                f": {exc.name.replace('.', '/')}.py is no file of this repository (a typo in the import, a file not "
                "written yet, or an extension not built: pip install -e .)")
    library = LIBRARIES.get((exc.name or "").split(".")[0]) if missing else None
    hint = (f"; a library this environment lacks: {library}" if library
            else "; install your package (pip install -e .) or put it on PYTHONPATH" if missing else "")
    return f"{kernel.name}/{rev.name}: cannot import {exc.name or 'a module'} ({source_of(rev)}: {gist(exc)}){hint}"


def source_of(rev: Revision) -> str:
    """The revision's first source as its repository names it (relative to the root kernlog finds
    above it), else the file its load() is written in."""
    code = getattr(rev.load, "__code__", None)
    return _shown(Path(rev.sources[0]) if rev.sources else Path(code.co_filename if code else "?"))


def gist(exc: Exception) -> str:
    """First and last lines of an error (a compiler error puts its cause on the last line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1][:300]}"


def own_line(exc: BaseException) -> str:
    """file:line of the innermost frame of `exc`'s traceback in the user's code (not kernlog's, not an installed
    package's, not code made at run time: registry.users_frames), as its repository names it; "" where there is
    none."""
    from kernlog.registry import users_frames

    mine = users_frames(exc)
    return f"{_shown(Path(mine[-1].filename))}:{mine[-1].lineno}" if mine else ""


def _shown(p: Path) -> str:
    """A file as its repository names it (relative to the root kernlog finds above it), else as given."""
    try:
        return Path(os.path.relpath(p.resolve(), config.find_root(p.parent))).as_posix()
    except (KernlogError, OSError, ValueError):
        return str(p)


def operators_own(kernel: Kernel, what: str, shape, dtype: str, fn, *args):
    """fn(*args), the operator's own `what` (make_inputs, make_output) at a shape: where it raises, OperatorError's
    one line with its place (no revision's fault, said once for all). kernlog's own errors (a GPU feature
    missing, an import) and ImportError keep their own handling."""
    try:
        return fn(*args)
    except (KernlogError, ImportError):
        raise
    except Exception as exc:  # noqa: BLE001 -- any other error of the operator's code
        raise operator_error(kernel, what, shape, dtype, exc) from None


def blamed(kernel: Kernel, inputs, out, shape, dtype: str, exc: Exception) -> Exception:
    """What judging a revision's answer raised: the operator's OperatorError where its reference raises on the
    operator's own output buffer too, else `exc` as it is, the revision's (an answer of the wrong type or device
    that the reference cannot read)."""
    try:
        kernel.reference(inputs, out)
    except Exception as again:  # noqa: BLE001
        return operator_error(kernel, "reference", shape, dtype, again)
    return exc


def operator_error(kernel: Kernel, what: str, shape, dtype: str, exc: BaseException) -> OperatorError:
    """The one line of the operator's own `what` (make_inputs, make_output, reference) raising at a shape."""
    where = own_line(exc)
    return OperatorError(f"{where + ': ' if where else ''}{kernel.name}'s {what} raised {type(exc).__name__}: "
                         f"{gist(exc)} (shape {tuple(shape)!r}, {dtype}): the operator's code, not a revision's; "
                         "fix it, then run the same check again")
