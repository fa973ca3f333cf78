"""`kernlog check` with its outcomes kept, and the outcomes of the gates `kernlog profile` and
`kernlog bench` run before timing: each revision's latest on this GPU (kernlog.store.gates),
which mark its stored profiles of the same source when it fails. An outcome of `profile`,
`bench` or `check` keeps the key it was gated under (kernlog.run.gatekey), and `profile` and
`bench` take a pass under the key of the gate they would run (`reused`) instead of gating the
revision again."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from kernlog.capture import provenance
from kernlog.judge import gate_marks
from kernlog.run import gate, gatekey, ladder
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
         commit: str | None = None, extra: dict[str, dict] | None = None) -> None:
    """Keep `verdicts` ((revision, None where it passed, else the gate's line of its first
    failing case)) as each revision's latest outcome on `gpu`, with the source hash it checked;
    `extra`: {revision: gates.outcome's key, check and seconds} where known."""
    if not verdicts:
        return
    commit = commit or provenance.git_state(root)["commit"]
    gates.record(root, gpu, kernel.name, {
        rev.name: gates.outcome(rev.sha256(), None if line is None else gates.case_line(line, rev.name), commit, by,
                                **(extra or {}).get(rev.name, {}))
        for rev, line in verdicts})


def note_verdict(root: Path, kernel: Kernel, rev: Revision, common: dict, outcome: tuple,
                 seconds: float | None = None) -> None:
    """A gate verdict of `kernlog profile` (gate.verdict's ("ok", ...) or ("failed", line)) kept
    for the GPU and commit of the profiles it would store (`common`), with its key; "unsupported"
    is none."""
    if outcome[0] not in ("ok", "failed"):
        return
    ok = outcome[0] == "ok"
    extra = {"key": gatekey.key(kernel, rev, common["gpu"], common["versions"]), "seconds": seconds,
             "check": outcome[1] if ok else None}
    note(root, common["gpu"]["slug"], kernel, [(rev, None if ok else outcome[1])], "profile",
         common["git"]["commit"], {rev.name: extra})


def reused(root: Path, kernel: Kernel, revs: list[Revision], common: dict,
           progress: Callable[[str], None] = lambda s: None) -> dict[str, tuple]:
    """{name: (outcome, detail, seconds, line)} for each of `revs` whose stored outcome on this GPU
    passed under the key its gate would run with now (same source, check plan, GPU, libraries:
    `common` as `kernlog profile` builds it): its verdict as the gate gave it, 0 seconds, and the
    line that says so. A known-wrong revision is always gated (its outcome is a failure); one
    whose pass no longer matches is said with what changed."""
    stored = gates.load(root, common["gpu"]["slug"], kernel.name)
    out = {}
    for rev in revs:
        entry = stored.get(rev.name)
        if rev.known_wrong or not entry or entry.get("passed") is not True:
            continue
        key = gatekey.key(kernel, rev, common["gpu"], common["versions"])
        if gate_marks.reusable(entry, key):
            out[rev.name] = ("ok", entry["check"], 0.0, gate_marks.reused_line(entry))
        else:
            progress(f"{kernel.name}/{rev.name}: gated again, changed since its pass of "
                     f"{str(entry.get('checked_at'))[:10]}: {', '.join(gate_marks.changed(entry, key))}")
    return out


def check(root: Path, kernel: Kernel, revs: list[Revision], device: str | None = None,
          dtypes: list[str] | None = None, gpu: str | None = None, seed: int | None = None) -> Iterator[str]:
    """ladder.check_all's lines, each revision's outcome kept for `gpu` (default: the GPU `device`
    is; on the CPU none is kept). A failure is kept whatever dtypes were checked; a pass only
    where every declared dtype was (a pass in fp32 alone says nothing of bf16), with the key
    `kernlog profile` may take it under, on the GPU it ran on. A known-wrong revision's outcome
    is kept as it was: rejected, it fails the gate, as it must. `kernlog check` itself always
    gates: it is how a gate is run again."""
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = gpu or gpu_of(device)
    whole = not dtypes or set(kernel.dtypes) <= set(dtypes)
    commit = provenance.git_state(root)["commit"] if gpu else None
    here = (provenance.gpu_info(), provenance.versions()) if gpu and device == "cuda" else None

    def done(rev: Revision, results: list, seconds: float) -> None:
        bad = gate.first_failure(results)
        if gpu is None or (bad is None and not whole):
            return
        extra = {"seconds": seconds}
        if here is not None and whole:
            extra.update(key=gatekey.key(kernel, rev, *here), check=None if bad else gate.summary(results)[1])
        note(root, gpu, kernel, [(rev, None if bad is None else bad.line())], "check", commit, {rev.name: extra})

    yield from ladder.check_all(kernel, revs, device, dtypes or None, done, seed)
