"""`kernlog report`: write the log and its plots from the stored profiles, or check that they are
up to date (the CI's question), with render.report's pieces and render.prose's checks. The log,
the pages and the plots go where `[tool.kernlog]` says (log, reports; kernlog.render.paths), and
every message names them so."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernlog import snapshot
from kernlog.errors import KernlogError
from kernlog.registry import kernel_names, load_kernel
from kernlog.render import limits, prose
from kernlog.render import paths as where
from kernlog.render import report as rpt
from kernlog.store import gitrefs
from kernlog.store.integrity import check_stored
from kernlog.store.profiles import write_atomic


def publish(root: Path, check_only: bool, echo: Callable[..., None], redraw: bool = False) -> int:
    """Render the log; with `check_only`, raise KernlogError where the committed log or a plot
    it links differs from that (plots by the digest of their data: nothing is drawn), else
    write both (a plot only where its data changed, or every one with `redraw`). What it says
    goes to echo(line) (stdout) and echo(line, err=True) (stderr). The exit status: 0, or the
    first unreadable profile's exit code (the log names each where its figures would be), or 2
    where `check_only` finds a stored report file missing or not the one its profiles recorded
    (kernlog.store.integrity.check_stored: a line each). The repository is held still meanwhile
    (kernlog.snapshot): only the log, its pages and its plots are written."""
    with snapshot.held():
        return _publish(root, check_only, echo, redraw)


def _publish(root: Path, check_only: bool, echo: Callable[..., None], redraw: bool) -> int:
    if gitrefs.git_or_none(root, "rev-parse", "--is-shallow-repository") == "true":
        raise KernlogError(f"{root} is a shallow clone: the log's history plots read every commit that stored a "
                           "profile, and this one would drop them: `git fetch --unshallow` (in CI, check out with "
                           "fetch-depth: 0)")
    damaged = check_stored(root) if check_only else []  # each stored report file against its recorded sha256
    for line in damaged:
        echo(f"kernlog: {line}", err=True)
    paths = where.of(root)
    log = paths.log
    kernels = [load_kernel(root, n) for n in kernel_names(root)]
    sections = rpt.collect(root, kernels)
    bad = rpt.unreadable(sections)
    text = rpt.render(root, kernels, sections)
    path = root / log
    if check_only:
        if not bad and (not path.exists() or path.read_text() != text):
            raise KernlogError(f"{log} is out of date: run `kernlog report` and commit the result")
        prose.check(text)
        kept = kept_pages(root, sections)
        if kept:
            raise KernlogError(kept[0])
        problems = [] if bad else rpt.out_of_date(root, sections)
        if problems:
            raise KernlogError(f"the log's pages and plots disagree with {paths.profiles}/ ({'; '.join(problems)}): "
                               "run `kernlog report` and commit the result")
        limits.check(root)  # the pages' own rules: sizes, paragraphs, tables, ceilings, § marks
        if not bad:
            echo(f"{log} and its plots are up to date")
    else:
        # Written even with bad files: the log names each where its figures would be, and the
        # exit is non-zero, so the gap is never silent.
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode())
        plots = rpt.plot_all(root, sections, redraw)
        for n, fig in prose.unsourced(text):
            echo(f"warning: {log} line {n}: the figure {fig!r} comes from no profile "
                 "(`report --check` fails on it)", err=True)
        # a root found above (or away from) the working directory is named: the walk up may find another repository
        at = "" if root.resolve() == Path.cwd().resolve() else f" (in {root.resolve()})"
        echo(f"wrote {log}" + (f" and drew {len(plots)} plot(s) in {paths.reports}/" if plots else "") + at)
        for line in kept_pages(root, sections):
            echo(f"warning: {line}", err=True)
    for line in rpt.stale_figures(sections):
        echo(f"warning: {line} (marked stale in the log)", err=True)
    for line in rpt.gate_failures(sections):
        echo(f"warning: {line} (marked ‡ in the log)", err=True)
    for err in bad:
        echo(f"kernlog: {'' if check_only else f'left out of {log}: '}{err}", err=True)
    return bad[0].exit_code if bad else KernlogError.exit_code if damaged else 0


def kept_pages(root: Path, sections: list[dict]) -> list[str]:
    """A line for each page of an operator gone that `report` keeps for the prose the team wrote
    on it (report.orphan_pages), with what to do: report cannot."""
    return [f"{rel} is {rpt.orphan_what(root, rel)} and holds prose of its own, which "
            f"`kernlog report` keeps: move that prose, then `git rm {rel}`"
            for rel, gone in rpt.orphan_pages(root, sections) if not gone]
