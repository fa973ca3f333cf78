"""Finds the repository and loads its operator folders (`<kernels>/<op>/__init__.py`, the folder
[tool.kernlog] names: kernlog.config)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from kernlog import config
from kernlog.errors import KernlogError
from kernlog.spec import DTYPE_BYTES, NAME_RE, Kernel


def find_root(start: Path | None = None) -> Path:
    """The repository's root: kernlog.config.find_root."""
    return config.find_root(start)


def kernel_names(root: Path) -> list[str]:
    """The operator folders of the repository's kernels folder ([tool.kernlog] kernels)."""
    return config.layout(root).operators()


def load_kernel(root: Path, name: str) -> Kernel:
    lay = config.layout(root)
    names = lay.operators()
    if name not in names:
        config.require_kernels(lay)
        known = ", ".join(names) if names else f"none yet in {lay.rel(lay.kernels)}/"
        raise KernlogError(f"unknown kernel {name!r}; known: {known}")
    init = f"{lay.rel(lay.kernels)}/{name}/__init__.py"
    try:
        module = lay.import_operator(name)
    except ValueError as e:  # a Kernel(...) or Revision(...) that spec rejects
        raise KernlogError(f"{init}: {e}") from None
    except ImportError as e:
        raise KernlogError(f"{init}: cannot import {e.name or 'a module'} ({e})") from None
    except SyntaxError as e:
        where = f"{lay.rel(Path(e.filename)) if e.filename else init}:{e.lineno}"
        raise KernlogError(f"{where}: syntax error: {e.msg}; `python -m py_compile {where.split(':')[0]}` "
                           "shows it") from None
    except Exception as e:  # noqa: BLE001 -- any other error in the operator's own code: its line, not a traceback
        raise KernlogError(f"{_where(e, lay.kernels / name, init, lay)}: {type(e).__name__}: {e}") from None
    kernel = getattr(module, "KERNEL", None)
    if not isinstance(kernel, Kernel):
        raise KernlogError(f"{init} defines no KERNEL = Kernel(...)")
    why = declared_wrongly(kernel, name)
    if why:
        raise KernlogError(f"{init}: {why}")
    return kernel


def _where(exc: BaseException, folder: Path, init: str, lay) -> str:
    """file:line of the innermost frame of `exc`'s traceback inside the operator's folder (`init`
    where none is)."""
    import traceback

    inside = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve().is_relative_to(
        folder.resolve())]
    return f"{lay.rel(Path(inside[-1].filename))}:{inside[-1].lineno}" if inside else init


def _shape_ok(shape) -> bool:
    return isinstance(shape, tuple) and bool(shape) and all(isinstance(d, int) and d > 0 for d in shape)


def declared_wrongly(kernel: Kernel, folder: str) -> str:
    """What in a Kernel(...) a run would trip over later, in one line with the fix; "" where
    nothing: its name is its folder's, its shapes tuples of positive ints, its dtypes known ones."""
    if kernel.name != folder:
        return f"Kernel(name={kernel.name!r}) in the folder {folder!r}: the name is the folder's (name={folder!r})"
    for field in ("check_shapes", "bench_shapes"):
        shapes = getattr(kernel, field)
        bad = [s for s in shapes if not _shape_ok(s)] if isinstance(shapes, tuple) and shapes else [shapes]
        if bad:
            return f"{field}={shapes!r}: a tuple of shapes, each a tuple of positive ints: {field}=((1024, 4096),)"
    if not _shape_ok(kernel.profile_shape):
        return f"profile_shape={kernel.profile_shape!r}: a tuple of positive ints, e.g. profile_shape=(8192, 4096)"
    unknown = [d for d in kernel.dtypes if d not in DTYPE_BYTES]
    if unknown or not kernel.dtypes:
        return f"dtypes={kernel.dtypes!r}: {unknown[0] + ' is not ' if unknown else ''}one of {', '.join(DTYPE_BYTES)}"
    return ""


def picker(load: bool = False):
    """The config picker the revisions imported: a repository's own copy of it (a module named
    `*.tuning` that records its picks as kernlog.tuning does: USED, used_config, _PINS; an older
    commit's kernels, profiled with --at, carry one), else kernlog.tuning (PICKER); None before a
    revision imported one. With `load`, kernlog.tuning is imported where none is."""
    own = [m for name, m in list(sys.modules.items())
           if name.endswith(".tuning") and not name.startswith("kernlog.") and m is not None
           and all(hasattr(m, a) for a in ("USED", "used_config", "_PINS"))]
    if own:
        return own[0]
    if not load:
        return sys.modules.get(PICKER)
    try:
        return importlib.import_module(PICKER)
    except ImportError:
        return None


# kernlog's config picker: launchers ask it for a config per shape and it times the candidates;
# kernlog.run.picker records, pins and, in gates, untimes its picks.
PICKER = "kernlog.tuning"


def split_rev(text: str) -> tuple[str, str]:
    """'softmax/v0_naive' -> ('softmax', 'v0_naive'); both parts must be plain names, so a
    revision can never name a path outside profiles/."""
    kernel, sep, rev = text.partition("/")
    if not sep or not NAME_RE.match(kernel) or not NAME_RE.match(rev):
        raise KernlogError(f"bad revision {text!r}: expected KERNEL/REVISION, e.g. softmax/v0_naive")
    return kernel, rev


def resolve(root: Path, text: str):
    kernel_name, rev_name = split_rev(text)
    kernel = load_kernel(root, kernel_name)
    try:
        return kernel, kernel.revision(rev_name)
    except KeyError:
        names = ", ".join(r.name for r in kernel.revisions)
        raise KernlogError(f"unknown revision {rev_name!r} of {kernel_name}; known: {names}") from None
