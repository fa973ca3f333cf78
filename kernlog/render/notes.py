"""The author's notes on a kernel's steps, kept beside the revisions they explain:
`<kernels>/<kernel>/notes.md`, rendered into the kernel's page by `kernlog report`.

    ## story        the page's story in the author's words, under its first screen
    ## next         what the author would try next, beside the generated "Next" line
    ## v2_warp_shuffle
                    the why of that step and what it showed, under the step's section

A section is a `## ` heading and the text up to the next one; text before the first heading
(a comment saying what the file is) is not rendered. A heading that names no revision of the
ladder is an error naming the file and the revisions it has. Figures are written as the
prose's markers (kernlog.render.prose: filled from the profiles, checked by `report --check`)
or inside a dated history region. `<kernels>/<kernel>/history.md`, where it exists, is the
kernel's history page: what was only true then, linked from the page and never rendered into it.

Pure reads of the kernel folder: no profile, no GPU.
"""
from __future__ import annotations

import re
from pathlib import Path

from kernlog.config import layout
from kernlog.errors import KernlogError

NOTES = "notes.md"
HISTORY = "history.md"
SPECIAL = ("story", "next")
_HEADING = re.compile(r"^## +(?P<name>\S+) *$", re.M)


def folder(root: Path, kernel: str) -> Path:
    return layout(root).kernels / kernel


def parse(text: str, revisions: list[str], where: str) -> dict[str, str]:
    """Section name -> its text (stripped) of a notes file; `where` names the file in errors."""
    heads = list(_HEADING.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(heads):
        name = m.group("name")
        if name not in SPECIAL and name not in revisions:
            line = text.count("\n", 0, m.start()) + 1
            raise KernlogError(f"{where} line {line}: `## {name}` names no revision of the ladder "
                               f"({', '.join(revisions)}) nor a section of its own ({', '.join(SPECIAL)})")
        if name in out:
            raise KernlogError(f"{where}: `## {name}` appears twice; keep one section per revision")
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[m.end():end].strip()
        if body:
            out[name] = body
    return out


def of_kernel(root: Path, kernel) -> dict[str, str]:
    """The notes of `kernel` (a kernlog.spec.Kernel); {} where its folder has none."""
    path = folder(root, kernel.name) / NOTES
    if not path.is_file():
        return {}
    return parse(path.read_text(), [r.name for r in kernel.revisions], layout(root).rel(path))


_DATED = re.compile(r"<!--history (?P<when>\S+)(?: (?P<commit>\S+))?-->")


def dated(text: str) -> str:
    """`text` with each history region's date (and commit) shown where it opens: on the page
    the region's markers are invisible, and a figure of then must read as one."""
    return _DATED.sub(lambda m: m.group(0) + f"*[{m.group('when')}" + (f", {m.group('commit')}" if m.group("commit")
                                                                     else "") + "]* ", text)


def history_page(root: Path, kernel: str) -> str | None:
    """The kernel's history page as the repository names it, None where it has none."""
    path = folder(root, kernel) / HISTORY
    return layout(root).rel(path) if path.is_file() else None
