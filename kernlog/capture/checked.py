"""`kernlog check` with its outcomes kept, and the outcomes of the gates `kernlog profile` and
`kernlog bench` run before timing: each revision's latest on this GPU (kernlog.store.gates),
which mark its stored profiles of the same source when it fails."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kernlog.capture import provenance
from kernlog.run import gate, ladder
from kernlog.spec import Kernel, Revision
from kernlog.store import gates


def gpu_of(device: str) -> str | None:
    """The slug of the GPU a gate on `device` runs on; None on the CPU, whose outcomes speak for
    no GPU's profiles (Triton's interpreter runs there, CUDA C revisions are skipped)."""
    if device != "cuda":
        return None
    from kernlog.cuda import device_caps
    from kernlog.identity import gpu_slug

    return gpu_slug(device_caps().name)


def note(root: Path, gpu: str, kernel: Kernel, verdicts: list[tuple[Revision, str | None]], by: str,
         commit: str | None = None) -> None:
    """Keep `verdicts` ((revision, None where it passed, else the gate's line of its first
    failing case)) as each revision's latest outcome on `gpu`, with the source hash it checked."""
    if not verdicts:
        return
    commit = commit or provenance.git_state(root)["commit"]
    gates.record(root, gpu, kernel.name, {
        rev.name: gates.outcome(rev.sha256(), None if line is None else gates.case_line(line, rev.name), commit, by)
        for rev, line in verdicts})


def note_verdict(root: Path, kernel: Kernel, rev: Revision, common: dict, outcome: tuple) -> None:
    """A gate verdict of `kernlog profile` (gate.verdict's ("ok", ...) or ("failed", line)) kept
    for the GPU and commit of the profiles it would store (`common`); "unsupported" is none."""
    if outcome[0] in ("ok", "failed"):
        note(root, common["gpu"]["slug"], kernel, [(rev, outcome[1] if outcome[0] == "failed" else None)],
             "profile", common["git"]["commit"])


def check(root: Path, kernel: Kernel, revs: list[Revision], device: str | None = None,
          dtypes: list[str] | None = None, gpu: str | None = None, seed: int | None = None) -> Iterator[str]:
    """ladder.check_all's lines, each revision's outcome kept for `gpu` (default: the GPU `device`
    is; on the CPU none is kept). A failure is kept whatever dtypes were checked; a pass only
    where every declared dtype was (a pass in fp32 alone says nothing of bf16). A known-wrong
    revision's outcome is kept as it was: rejected, it fails the gate, as it must."""
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = gpu or gpu_of(device)
    whole = not dtypes or set(kernel.dtypes) <= set(dtypes)
    commit = provenance.git_state(root)["commit"] if gpu else None

    def done(rev: Revision, results: list) -> None:
        bad = gate.first_failure(results)
        if gpu is not None and (bad is not None or whole):
            note(root, gpu, kernel, [(rev, None if bad is None else bad.line())], "check", commit)

    yield from ladder.check_all(kernel, revs, device, dtypes or None, done, seed)
