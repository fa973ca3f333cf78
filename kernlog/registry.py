"""Finds the repository and loads its operator folders (`kernels/<op>/__init__.py`)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.spec import NAME_RE, Kernel


def find_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` that holds a kernels/ package."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "kernels" / "__init__.py").is_file():
            return d
    raise KernlogError(f"no kernels/ folder at or above {here}: run kernlog inside a kernlog repository")


def kernel_names(root: Path) -> list[str]:
    return sorted(p.parent.name for p in (root / "kernels").glob("*/__init__.py")
                  if NAME_RE.match(p.parent.name) and p.parent.name != "common")


def load_kernel(root: Path, name: str) -> Kernel:
    if name not in kernel_names(root):
        raise KernlogError(f"unknown kernel {name!r}; known: {', '.join(kernel_names(root))}")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(f"kernels.{name}")
    except ValueError as e:  # a Kernel(...) or Revision(...) that spec rejects
        raise KernlogError(f"kernels/{name}/__init__.py: {e}") from None
    kernel = getattr(module, "KERNEL", None)
    if not isinstance(kernel, Kernel):
        raise KernlogError(f"kernels/{name}/__init__.py defines no KERNEL = Kernel(...)")
    return kernel


# The project's config picker, where it has one (kernels/common/tuning.py: launchers ask it for a
# config per shape and it times the candidates); kernlog.run.picker records, pins and, in gates,
# untimes its picks. Named here, beside kernels/<op>/, as this is the module that knows the
# project's layout: kernlog's stages below never name a module of the project.
PICKER = "kernels.common.tuning"


def picker(load: bool = False):
    """The project's picker module (PICKER): the one a revision imported, None before that; with
    `load`, imported now where no revision has yet, None where the project has none."""
    if not load:
        return sys.modules.get(PICKER)
    try:
        return importlib.import_module(PICKER)
    except ImportError:
        return None


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
