"""Finds the repository and loads its operator folders (`<kernels>/<op>/__init__.py`, the folder
[tool.kernlog] names: kernlog.config)."""
from __future__ import annotations

import importlib
import operator
import sys
from pathlib import Path

from kernlog import config
from kernlog.errors import KernlogError, said
from kernlog.spec import DTYPE_BYTES, NAME_RE, Kernel


def find_root(start: Path | None = None) -> Path:
    """The repository's root: kernlog.config.find_root."""
    return config.find_root(start)


def kernel_names(root: Path) -> list[str]:
    """The operator folders of the repository's kernels folder ([tool.kernlog] kernels); one line where that
    folder is missing (a renamed folder or a typo in [tool.kernlog] is not an empty repository: `report`
    would drop every page)."""
    lay = config.layout(root)
    config.require_kernels(lay)
    return lay.operators()


def load_kernel(root: Path, name: str) -> Kernel:
    lay = config.layout(root)
    names = lay.operators()
    if name not in names:
        config.require_kernels(lay)
        known = ", ".join(names) if names else f"none yet in {lay.rel(lay.kernels)}/"
        folder = lay.kernels / name
        init = folder / "__init__.py"
        why = ("" if not folder.is_dir() else
               f" ({lay.rel(folder)}/ has no __init__.py: an operator's folder declares KERNEL = Kernel(...) there)"
               if not init.is_file() else
               f" ({lay.rel(init)} binds no KERNEL = Kernel(...) at its top level)")
        raise KernlogError(f"unknown kernel {name!r}{why}; known: {known}")
    init = f"{lay.rel(lay.kernels)}/{name}/__init__.py"
    try:
        module = lay.import_operator(name)
    except ImportError as e:
        raise KernlogError(f"{init}: cannot import {e.name or 'a module'} ({e})") from None
    except SyntaxError as e:
        where = f"{lay.rel(Path(e.filename)) if e.filename else init}:{e.lineno}"
        raise KernlogError(f"{where}: syntax error: {e.msg}; `python -m py_compile {where.split(':')[0]}` "
                           "shows it") from None
    except KernlogError:
        raise  # kernlog's own one line, its exit status kept (NoGpu's 4)
    except Exception as e:  # noqa: BLE001 -- any other error in the operator's code: its line, not a traceback
        where, inner = _where(e, lay, init)
        if isinstance(e, ValueError) and inner.startswith("spec.py:"):  # a Kernel(...) or Revision(...) spec rejects
            raise KernlogError(f"{where}: {e}") from None
        raise KernlogError(f"{where}: {said(e)}" + (f" (raised in kernlog/{inner})" if inner else "")) from None
    kernel = getattr(module, "KERNEL", None)
    if not isinstance(kernel, Kernel):
        raise KernlogError(f"{init} defines no KERNEL = Kernel(...)")
    why = declared_wrongly(kernel, name) or sources_missing(kernel, lay)
    if why:
        raise KernlogError(f"{init}: {why}")
    return kernel


def _where(exc: BaseException, lay, init: str) -> tuple[str, str]:
    """(file:line of the innermost frame of `exc`'s traceback in the repository's own code, not
    kernlog's nor an installed package's: the operator's line, or a helper module's it imports,
    `init` where none is; where the innermost frame of all is kernlog's, its place in kernlog, else "")."""
    import traceback

    pkg = Path(__file__).resolve().parent
    frames = traceback.extract_tb(exc.__traceback__)
    mine = users_frames(exc, lay.root)
    where = f"{lay.rel(Path(mine[-1].filename))}:{mine[-1].lineno}" if mine else init
    last = Path(frames[-1].filename).resolve() if frames else None
    inner = f"{last.relative_to(pkg).as_posix()}:{frames[-1].lineno}" if last and last.is_relative_to(pkg) else ""
    return where, inner


def users_frames(exc: BaseException, root: Path | None = None) -> list:
    """The frames of `exc`'s traceback in the user's own code, outermost first: files that exist and are not
    kernlog's, the standard library's or an installed package's, nor code made at run time (a dataclass's
    __init__, "<string>"); under `root` where given."""
    import sysconfig
    import traceback

    pkg = Path(__file__).resolve().parent
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()

    def own(f) -> bool:
        if not Path(f.filename).is_file():  # "<string>", code made at run time, is no file
            return False
        p = Path(f.filename).resolve()
        return (not p.is_relative_to(pkg) and not p.is_relative_to(stdlib) and (root is None or p.is_relative_to(
            root.resolve())) and "site-packages" not in p.parts and "dist-packages" not in p.parts)
    return [f for f in traceback.extract_tb(exc.__traceback__) if own(f)]


def _dim(d) -> bool:
    try:
        return not isinstance(d, bool) and operator.index(d) > 0
    except TypeError:
        return False


def _shape_ok(shape) -> bool:
    """A shape: a tuple (or list) of positive ints (numpy's too)."""
    return isinstance(shape, (tuple, list)) and bool(shape) and all(_dim(d) for d in shape)


def declared_wrongly(kernel: Kernel, folder: str) -> str:
    """What in a Kernel(...) a run would trip over later, in one line with the fix; "" where
    nothing: its name is its folder's, its shapes tuples of positive ints (at least one to check),
    its dtypes known ones."""
    if kernel.name != folder:
        return f"Kernel(name={kernel.name!r}) in the folder {folder!r}: the name is the folder's (name={folder!r})"
    for field in ("check_shapes", "bench_shapes"):
        shapes = getattr(kernel, field)
        if not isinstance(shapes, (tuple, list)) or not all(_shape_ok(s) for s in shapes):
            return f"{field}={shapes!r}: a tuple of shapes, each a tuple of positive ints: {field}=((1024, 4096),)"
    if not kernel.check_shapes:
        return "check_shapes=(): the gate needs at least one shape to check, e.g. check_shapes=((7, 33),)"
    if not _shape_ok(kernel.profile_shape):
        return f"profile_shape={kernel.profile_shape!r}: a tuple of positive ints, e.g. profile_shape=(8192, 4096)"
    for rev in kernel.revisions:
        shapes = rev.check_shapes
        if not isinstance(shapes, (tuple, list)) or not all(_shape_ok(s) for s in shapes):
            return (f"Revision({rev.name!r}, check_shapes={shapes!r}): a tuple of shapes, each a tuple of positive "
                    f"ints: check_shapes=({tuple(kernel.check_shapes[0])!r},)")
        wrong = [s for s in shapes if len(s) != len(kernel.profile_shape)]
        if wrong:
            return (f"Revision({rev.name!r}, check_shapes=...): {tuple(wrong[0])!r} has {len(wrong[0])} dimensions, "
                    f"the kernel's shapes {len(kernel.profile_shape)} "
                    f"(as profile_shape={tuple(kernel.profile_shape)!r})")
    rank = len(kernel.profile_shape)
    for field in ("check_shapes", "bench_shapes"):
        other = next((tuple(s) for s in getattr(kernel, field) if len(s) != rank), None)
        if other is not None:
            return (f"the kernel's shapes differ in rank: profile_shape={tuple(kernel.profile_shape)!r} has {rank} "
                    f"dimensions, {field}' {other!r} {len(other)}; a kernel's shapes share one rank")
    unknown = [d for d in kernel.dtypes if d not in DTYPE_BYTES]
    if unknown or not kernel.dtypes:
        return f"dtypes={kernel.dtypes!r}: {unknown[0] + ' is not ' if unknown else ''}one of {', '.join(DTYPE_BYTES)}"
    return ""


def sources_missing(kernel: Kernel, lay) -> str:
    """A revision's source that is no file (a renamed or misspelt path hashes nothing, and stale never shows),
    in one line; "" where every source is a file."""
    for rev in kernel.revisions:
        for src in rev.sources:
            if not Path(src).is_file():
                if not Path(src).is_absolute():  # read from the working directory, wherever kernlog runs
                    return (f"Revision({rev.name!r}) names the source {src}, a relative path: write it from the "
                            f"operator's folder, HERE / {Path(src).name!r} (HERE = Path(__file__).resolve().parent)")
                return (f"Revision({rev.name!r}) names the source {lay.rel(Path(src).resolve())}, which is no file: "
                        "its sources are the files its kernel is built from")
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
        raise KernlogError(f"bad revision {text!r}: expected KERNEL/REVISION, e.g. add_relu/v1_fused (`kernlog list` "
                           "names them)")
    return kernel, rev


def resolve(root: Path, text: str):
    kernel_name, rev_name = split_rev(text)
    kernel = load_kernel(root, kernel_name)
    try:
        return kernel, kernel.revision(rev_name)
    except KeyError:
        names = ", ".join(r.name for r in kernel.revisions)
        raise KernlogError(f"unknown revision {rev_name!r} of {kernel_name}; known: {names}") from None
