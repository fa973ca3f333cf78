"""`kernlog list`: kernels, their revisions, and which are profiled (and stale) on which GPU; a
known-wrong revision (role "wrong") is named with its bug, never profiled."""
from __future__ import annotations

from pathlib import Path

from kernlog import snapshot
from kernlog.errors import KernlogError
from kernlog.judge.gate_marks import fails_gate, mark
from kernlog.judge.verdicts import stale
from kernlog.registry import kernel_names, load_kernel
from kernlog.spec import format_shape
from kernlog.store import gates, integrity
from kernlog.store.profiles import ProfileError, bench_hashes, load_profile
from kernlog.store.summaries import Summary, summaries


def _point(prof: Summary, current: dict, revision: str, outcomes: dict | None = None) -> str:
    return (f"{format_shape(prof.shape)} {prof.dtype}"
            + (" STALE" if stale(prof.source_sha256, current, revision) else "")
            + mark(fails_gate(prof.source_sha256, revision, outcomes))
            + (" (report under its staged name: a save was interrupted)" if prof.report.startswith(".")
               else ""))


def _by_gpu(recs: list, current: dict, revision: str, gates_of=lambda gpu: {}) -> list[str]:
    """One entry per GPU: its slug once, then the revision's profiles there (a bad file's
    entry, a str, already names its GPU); `gates_of(gpu)`: the gate outcomes stored there."""
    groups: dict[str, list[str]] = {}
    for r in recs:
        gpu, text = r.split(" ", 1) if isinstance(r, str) else (
            r.gpu, _point(r, current, revision, gates_of(r.gpu)))
        groups.setdefault(gpu, []).append(text)
    return [f"{gpu}: {', '.join(sorted(points))}" for gpu, points in sorted(groups.items())]


def listing(root: Path) -> tuple[str, list[KernlogError], list[str]]:
    """(the listing, the profiles that fail verification and the operators that do not load, a
    line per lost or damaged report file of the profiles listed: kernlog.store.integrity.notes_of).
    An operator that does not load is listed as such; a bad file is marked
    UNREADABLE where its name says which revision it is of; the caller names each with its
    fix. The repository is held still meanwhile (kernlog.snapshot)."""
    with snapshot.held():
        return _listing(root)


def _listing(root: Path) -> tuple[str, list[KernlogError], list[str]]:
    stored, lines, bad, unhashed, loaded = {}, [], [], 0, []
    for rec in summaries(root):
        if isinstance(rec, ProfileError):
            bad.append(rec)
            if rec.ident:
                gpu, kernel_name, rev_name, shape, dtype = rec.ident
                stored.setdefault((kernel_name, rev_name), []).append(
                    f"{gpu} {format_shape(shape)} {dtype} UNREADABLE ({rec.short})")
            continue
        unhashed += not rec.hashed
        if rec.damaged:  # its full record, for the line that names the damage and its fix
            loaded.append(load_profile(root, root / rec.path))
        stored.setdefault((rec.kernel, rec.revision), []).append(rec)
    for name in kernel_names(root):
        try:
            kernel = load_kernel(root, name)
        except KernlogError as exc:  # its folder's own mistake: named below, the others listed
            lines.append(f"{name}  CANNOT LOAD (below)")
            bad.append(exc)
            continue
        lines.append(f"{name}  (profile shape {format_shape(kernel.profile_shape)}, dtypes {', '.join(kernel.dtypes)})")
        swept = bench_hashes(root, name)
        current = {rev.name: rev.sha256() for rev in kernel.revisions}
        outcomes: dict[str, dict] = {}  # gpu -> the gate outcomes stored there for this kernel

        def gates_of(gpu: str, name=name, outcomes=outcomes) -> dict:
            if gpu not in outcomes:
                outcomes[gpu] = gates.load(root, gpu, name)
            return outcomes[gpu]

        for rev in kernel.revisions:
            recs = stored.get((name, rev.name), [])
            where = "; ".join(_by_gpu(recs, current, rev.name, gates_of))
            points = []
            for gpu, hashes in sorted((g, h) for (g, r), h in swept.items() if r == rev.name):
                old = sum(stale(h, current, rev.name) for h in hashes)
                points.append(f"{gpu} {len(hashes)} point{'s' * (len(hashes) != 1)}"
                              + (f" ({old} STALE)" if old else ""))
            if not where:  # a known-wrong revision is gated to prove the gate rejects it, never profiled
                where = f"never profiled (known wrong: {' '.join(rev.bug.split())})" if rev.known_wrong \
                    else "not profiled"
            lines.append(f"  {rev.name:<18} {rev.kind:<6} {rev.role:<11} {where}"
                         + (f"; swept: {', '.join(points)}" if points else ""))
    if unhashed:
        lines.append(f"note: {unhashed} profile(s) predate report hashes: their .ncu-rep is checked by size only "
                     "until re-profiled")
    return "\n".join(lines), bad, integrity.notes_of(root, loaded)
