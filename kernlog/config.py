"""Where a repository keeps what kernlog reads and writes: `[tool.kernlog]` in its pyproject.toml.

The one place that knows a layout. Every other module asks `layout(root)` for a folder
instead of naming one, so this repository and a user's run on the same path:

    [tool.kernlog]
    kernels = "kernels"          # the folder of operator folders (any name, anywhere under the root)
    profiles = "profiles"        # what `kernlog profile` and `bench` store, a folder per GPU
    reports = "reports"          # a page per kernel and its plots
    log = "KERNEL_LOG.md"        # the front page
    primary_gpu = "nvidia-h100-80gb-hbm3"   # optional: the GPU a side means where it names none

Every key is optional; the values above are the defaults. The root is the nearest folder at or
above the working directory whose pyproject.toml has a `[tool.kernlog]` table, or else that
holds a `kernels/` folder (a repository that never configured kernlog).
"""
from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kernlog import snapshot
from kernlog.errors import KernlogError
from kernlog.spec import NAME_RE  # an operator's folder is named as a revision is

PYPROJECT = "pyproject.toml"
DEFAULTS = {"kernels": "kernels", "profiles": "profiles", "reports": "reports", "log": "KERNEL_LOG.md"}
KEYS = (*DEFAULTS, "primary_gpu")
# An operator folder's __init__.py binds KERNEL at its top level; a folder whose __init__.py does
# not (shared helpers, a `common/`) is not an operator and is never imported as one.
DECLARES_KERNEL = re.compile(r"^KERNEL\s*(?::[^=\n]*)?=", re.MULTILINE)
START = "run `kernlog init` there to start (or pass --root DIR)"


@dataclass(frozen=True)
class Layout:
    """A repository's folders, absolute, as its `[tool.kernlog]` names them."""
    root: Path
    kernels: Path
    profiles: Path
    reports: Path
    log: Path
    primary_gpu: str | None = None
    configured: bool = False  # the pyproject.toml has a [tool.kernlog] table

    def rel(self, path: Path) -> str:
        """`path` as the repository names it (posix, relative to the root)."""
        return Path(os.path.relpath(path, self.root)).as_posix()

    def package(self) -> tuple[Path, str]:
        """(the sys.path entry, the dotted name) the kernels folder is imported under: the
        folders above it that are packages too (a `src/mypkg/ops` with `src/mypkg/__init__.py`
        is `mypkg.ops`, src on the path), so a revision's own `import mypkg...` and kernlog's
        import of the operator load one module, not two."""
        parts = [self.kernels.name]
        entry = self.kernels.parent
        while (entry / "__init__.py").is_file() and entry != self.root and entry.parent != entry:
            parts.insert(0, entry.name)
            entry = entry.parent
        return entry, ".".join(parts)

    def operators(self) -> list[str]:
        """The operator folders: a plain name (no leading `_` or `.`), an __init__.py that binds
        KERNEL. Helpers beside them are left alone. Read once while kernlog.snapshot.held()."""
        return list(snapshot.once(("operators", self.kernels), self._operators))

    def _operators(self) -> list[str]:
        if not self.kernels.is_dir():
            return []
        names = []
        for init in self.kernels.glob("*/__init__.py"):
            name = init.parent.name
            if NAME_RE.match(name) and DECLARES_KERNEL.search(_text(init)):
                names.append(name)
        return sorted(names)

    def import_operator(self, name: str):
        """The operator folder `name` as a module, its import root (and the repository root) on
        sys.path."""
        entry, dotted = self.package()
        for path in (str(self.root), str(entry)):
            if path not in sys.path:
                sys.path.insert(0, path)
        return importlib.import_module(f"{dotted}.{name}")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def table(root: Path) -> dict | None:
    """The `[tool.kernlog]` table of root's pyproject.toml, None where there is none."""
    path = Path(root) / PYPROJECT
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise KernlogError(f"{path}: not valid TOML ({e})") from None
    section = data.get("tool", {}).get("kernlog")
    return section if isinstance(section, dict) else None


@functools.lru_cache(maxsize=64)
def _layout(root: Path, stamp: float) -> Layout:
    section = table(root)
    settings = dict(DEFAULTS)
    if section is not None:
        unknown = sorted(set(section) - set(KEYS))
        if unknown:
            raise KernlogError(f"{root / PYPROJECT}: unknown [tool.kernlog] key {unknown[0]!r}; "
                               f"known: {', '.join(KEYS)}")
        for key in DEFAULTS:
            value = section.get(key, DEFAULTS[key])
            if not isinstance(value, str) or not value.strip():
                raise KernlogError(f"{root / PYPROJECT}: [tool.kernlog] {key} must be a path (a string), "
                                   f"got {value!r}")
            settings[key] = value
    folders = {}
    for key, value in settings.items():
        path = Path(os.path.normpath(root / value))  # a linked folder (a scratch repository) stays where it is linked
        if path != root and root not in path.parents:
            raise KernlogError(f"{root / PYPROJECT}: [tool.kernlog] {key} = {value!r} is outside the repository")
        folders[key] = path
    primary = section.get("primary_gpu") if section else None
    return Layout(root=root, primary_gpu=primary if isinstance(primary, str) and primary else None,
                  configured=section is not None, **folders)


def layout(root: Path) -> Layout:
    """The layout of the repository at `root` (read again when its pyproject.toml changes; once
    while kernlog.snapshot.held())."""
    return snapshot.once(("layout", os.fspath(root)), lambda: _layout_now(root))


def _layout_now(root: Path) -> Layout:
    root = Path(root).resolve()
    try:
        stamp = (root / PYPROJECT).stat().st_mtime_ns
    except OSError:
        stamp = 0
    return _layout(root, stamp)


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: the working directory; --root) whose
    pyproject.toml has [tool.kernlog], or else that holds a kernels/ package."""
    here = (start or Path.cwd()).resolve()
    if not here.is_dir():
        raise KernlogError(f"--root {here}: no such folder")
    for d in (here, *here.parents):
        if table(d) is not None or (d / DEFAULTS["kernels"] / "__init__.py").is_file():
            return d
    raise KernlogError(f"no [tool.kernlog] in a pyproject.toml and no kernels/ folder at or above {here}: "
                       f"{START}")


def require_kernels(lay: Layout) -> None:
    """Fail in one line where the configured kernels folder is missing."""
    if not lay.kernels.is_dir():
        rel = lay.rel(lay.kernels)
        raise KernlogError(f"no {rel}/ folder in {lay.root} ([tool.kernlog] kernels = {rel!r}): "
                           f"`kernlog init --kernels-dir {rel}` makes one with an example operator")
