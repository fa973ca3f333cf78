"""A revision's identity: the hash of every file it executes, and a GPU's name as a path part.

Below kernlog.spec (a Revision's sha256 is this hash) and above nothing of kernlog's but
kernlog.cuda, whose #include walk says which headers a CUDA source runs, and the read-only
commands' memos (kernlog.snapshot, kernlog.memo).
"""
from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path

from kernlog import cuda, memo, snapshot

TOOL = Path(__file__).resolve().parent
# The tool's own files that run in every revision of a kind: NVRTC's options (cuda.py) shape
# every CUDA C binary. frameworks.py, the references' wrapper, is not among them: a framework
# reference is identified by its function's code alone.
KIND_FILES = {"cuda": (TOOL / "cuda.py",)}
CUDA_SUFFIXES = (".cu", ".cuh", ".h")
LADDER_FILE = "__init__.py"  # an operator's folder declares its ladder there


def executed_files(rev) -> tuple[Path, ...]:
    """Every file `rev` runs, in the order its hash reads them: its declared sources; each file
    a CUDA source #includes, followed (kernlog.cuda.includes); the module that defines its
    loader (kernels/softmax/cuda_launch.py for the CUDA C softmax ladder, the operator's
    __init__.py for most others) unless it is kernlog's own; and KIND_FILES."""
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
    in it (`code`, else `load`): adding a rung or a shape there marks nothing stale. Read once
    per revision while kernlog.snapshot.held() (the revision kept with it: its id stays its own),
    and there kept on disk (kernlog.memo) while none of the files it read changed."""
    kept, digest = snapshot.once(("source_sha256", id(rev)), lambda: (rev, _remembered(rev)))
    return digest if kept is rev else _source_sha256(rev)


def _remembered(rev) -> str:
    """_source_sha256(rev) from kernlog.memo's table: keyed by what the hash reads besides the
    bytes of files (the declared sources, the kind, where each function is written and the
    values it closes over), and kept while every file it read, and each folder an #include or
    a source is looked up in, keeps its stamp."""
    where = [f"{fn.__code__.co_filename}:{fn.__qualname__}:{fn.__code__.co_firstlineno}" + _bound(fn).decode()
             if hasattr(fn, "__code__") else repr(fn) for fn in (rev.code, rev.load)]
    key = "|".join([rev.kind, *(str(Path(p).resolve()) for p in rev.sources), *where])

    def compute():
        files = executed_files(rev)
        folders = {p.parent for p in files} | {d for p in files if p.suffix in CUDA_SUFFIXES
                                               for d in cuda.include_dirs(p)}
        return _source_sha256(rev, files), [*files, *sorted(folders)]

    return memo.kept("source_sha256", (Path(__file__), Path(cuda.__file__)), key, compute)


def _source_sha256(rev, files: tuple[Path, ...] | None = None) -> str:
    """The hash over `files` (default: executed_files(rev), walked here)."""
    h = hashlib.sha256()
    for path in executed_files(rev) if files is None else files:
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


def _defining_file(fn) -> Path | None:
    try:
        return Path(inspect.getsourcefile(fn)).resolve()
    except (TypeError, OSError):
        return None


def gpu_slug(name: str) -> str:
    """A GPU's name as profiles/ spells it: NVIDIA H100 80GB HBM3 -> nvidia-h100-80gb-hbm3."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
