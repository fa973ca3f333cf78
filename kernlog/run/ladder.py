"""`kernlog check` over a ladder: each revision's gate in a line as it ends.

Three things besides ok and FAIL. A known-wrong revision (spec role="wrong", kept to document its
`bug`) passes by being rejected, and fails by passing: its bug is fixed, or the gate no longer
sees it. A revision this machine cannot run as set up (errors.CannotRun: its import fails, a
Triton kernel with neither a GPU nor the interpreter) is said in one line of its own and the
others are still checked. And a failing case names its seed, with the command that draws its
inputs again.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from kernlog import hints
from kernlog.errors import CannotRun, GateFailure, Unsupported
from kernlog.run import gate
from kernlog.spec import Kernel, Revision

WRONG_PASSED = ("is known wrong (role='wrong') but passed the gate: its bug is fixed (drop role='wrong') "
                "or the gate lost its teeth")


class Unchecked(str):
    """A line of check_all about a revision it could not run here (CannotRun's message, which
    names the revision): the command says it as it says an error, on stderr, and goes on."""


def known_wrong(rev: Revision, failure: str | None) -> tuple[bool, str]:
    """(whether the gate did what it must, in words) for a known-wrong revision whose gate ended in
    `failure` (its first failing case; None where it passed). Rejected is a pass: the gate still
    sees the bug the revision is kept to show."""
    if failure is None:
        return False, f"PASSED the gate, but it is known wrong: {rev.bug}"
    return True, f"rejected, as expected: {rev.bug}"


def ended(kernel: Kernel, failed: list[str], wrong_passed: list[str], unchecked: dict[str, str]) -> None:
    """Raise what a gate over several revisions ended in, in one line: GateFailure (exit 3) where
    one failed the gate or a known-wrong one passed it, the more serious (a wrong answer found is
    a finding whatever else could not run); else CannotRun (exit 2) where one could not run here
    (`unchecked`: {revision: its line}, each said already as it came)."""
    said = [f"failed the correctness gate: {', '.join(failed)}"] if failed else []
    said += [f"{kernel.name}/{name} {WRONG_PASSED}" for name in wrong_passed]
    if said:
        if unchecked:
            said.append(f"not checked: {', '.join(unchecked)} (said above)")
        raise GateFailure("; ".join(said))
    if unchecked:
        raise CannotRun("; ".join(unchecked.values()))


def skipped_on_cpu(rev: Revision) -> bool:
    """CUDA C, and torch.compile (a "torch" revision whose name says compile, as frameworks.references
    names it): Inductor's CPU code needs a C++ toolchain and minutes. A Triton or torch revision
    of any other name is gated on the CPU."""
    return rev.kind == "cuda" or (rev.kind == "torch" and "compile" in rev.name)


def check_all(kernel: Kernel, revs: list[Revision], device: str | None = None,
              dtypes: list[str] | None = None, done=None, seed: int | None = None) -> Iterator[str]:
    """`kernlog check`: the gate of each revision, a line each as it ends (ok or FAIL, its cases
    and worst error, the first failure and how to draw its inputs again; a known-wrong one
    "rejected, as expected"); an Unchecked line for each that cannot run here. Raises after the
    last (`ended`). `device` None: cuda where a GPU is visible, else cpu, where CUDA C and
    torch.compile revisions are skipped. `seed`: one fresh seed for the whole ladder where None. `done(rev,
    results, seconds)`, where given, hears each revision checked (not one skipped) before its line."""
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    seed = gate.fresh_seed() if seed is None else seed  # one for the ladder: a failure's command repeats it
    failed, wrong_passed, unchecked = [], [], {}
    for rev in revs:
        if device == "cpu" and skipped_on_cpu(rev):
            yield f"{rev.name}: skipped on the CPU"
            continue
        t0 = time.perf_counter()
        try:
            results = gate.check_revision(kernel, rev, device, dtypes=dtypes or None, seed=seed)
        except Unsupported as exc:
            yield f"{rev.name}: skipped: {exc}"
            continue
        except CannotRun as exc:
            unchecked[rev.name] = str(exc)
            yield Unchecked(str(exc))
            continue
        if done is not None:
            done(rev, results, time.perf_counter() - t0)
        bad = gate.first_failure(results)
        worst = max((r.rel_error for r in results if r.has_error_figure()), default=0.0)
        counted = (f"({len(results)} cases, worst rel err {worst:.1e})" if bad is None or bad.has_error_figure()
                   else f"({len(results)} cases)")
        if rev.known_wrong:
            ok, said = known_wrong(rev, bad and bad.line())
            yield f"{rev.name}: {said} {counted}" + ("" if bad is None else f"\n  {bad.line()}")
            if not ok:
                wrong_passed.append(rev.name)
            continue
        yield f"{rev.name}: {'ok' if bad is None else 'FAIL'} {counted}" + ("" if bad is None else (
            f"\n  {bad.line()}\n  the same inputs again: {hints.check_command(kernel.name, rev, device, seed)}"))
        if bad is not None:
            failed.append(rev.name)
    ended(kernel, failed, wrong_passed, unchecked)
