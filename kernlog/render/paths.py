"""Where the log, its kernel pages and their plots live, as a repository names them (posix,
relative to its root: `[tool.kernlog]` log, reports and profiles, read by kernlog.config), and
the relative links between them, so a log at docs/KERNEL_LOG.md links docs/perf/softmax.md as
`perf/softmax.md` and the page links back as `../KERNEL_LOG.md`. A page's plots sit beside it.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from kernlog import config


@dataclass(frozen=True)
class Paths:
    log: str = config.DEFAULTS["log"]
    reports: str = config.DEFAULTS["reports"]
    profiles: str = config.DEFAULTS["profiles"]

    def under_reports(self, name: str) -> str:
        """`name` in the reports folder, as the repository names it."""
        return name if self.reports == "." else f"{self.reports}/{name}"

    def page(self, kernel: str) -> str:
        return self.under_reports(f"{kernel}.md")

    @property
    def triage(self) -> str:
        return self.under_reports("triage.md")

    @staticmethod
    def link(target: str, source: str) -> str:
        """`target` as a Markdown link written in the file `source` (both named from the root)."""
        return posixpath.relpath(target, posixpath.dirname(source) or ".")

    @staticmethod
    def resolve(target: str, source: str) -> str:
        """A relative link `target` written in `source`, named from the root: link's inverse."""
        return posixpath.normpath(posixpath.join(posixpath.dirname(source), target))

    def from_log(self, target: str) -> str:
        return self.link(target, self.log)

    @property
    def front(self) -> str:
        """The front page, linked from a page in the reports folder."""
        return self.link(self.log, self.under_reports("page.md"))


def of(root: Path | None) -> Paths:
    """The paths of the repository at `root` (its `[tool.kernlog]`); the defaults where None."""
    if root is None:
        return Paths()
    lay = config.layout(root)
    return Paths(log=lay.rel(lay.log), reports=lay.rel(lay.reports), profiles=lay.rel(lay.profiles))


def published(root: Path) -> dict[str, str]:
    """The log, every Markdown file it links (relative links), and the reports folder's pages those
    pages link (a kernel's sweep on another GPU), as the repository names them -> text."""
    paths = of(root)
    text = (root / paths.log).read_text() if (root / paths.log).exists() else ""
    out = {paths.log: text} if text else {}

    def linked(page: str) -> list[str]:
        rels = (Paths.resolve(t, page) for t in re.findall(r"\]\(([^)\s#]+\.md)(?:#[^)]*)?\)", out[page])
                if "://" not in t)
        return [rel for rel in dict.fromkeys(rels) if rel not in out and (root / rel).is_file()]

    for rel in linked(paths.log) if text else []:
        out[rel] = (root / rel).read_text()
    reports = posixpath.normpath(paths.reports)  # "." where the pages sit at the root
    for page in [rel for rel in out if rel != paths.log]:
        for rel in linked(page):
            if posixpath.normpath(posixpath.dirname(rel) or ".") == reports:
                out[rel] = (root / rel).read_text()
    return out
