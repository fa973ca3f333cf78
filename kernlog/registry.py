"""Finds the repository and loads its operator folders (`<kernels>/<op>/__init__.py`, the folder
[tool.kernlog] names: kernlog.config)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from kernlog import config
from kernlog.errors import KernlogError
from kernlog.spec import NAME_RE, Kernel


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
    kernel = getattr(module, "KERNEL", None)
    if not isinstance(kernel, Kernel):
        raise KernlogError(f"{init} defines no KERNEL = Kernel(...)")
    return kernel


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
