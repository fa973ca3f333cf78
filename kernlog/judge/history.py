"""`kernlog history KERNEL/REV`: a revision's profiles across the commits that stored them.

Each commit that changed the profile's JSON is an entry (and the work tree's, where it
differs from HEAD's): when it was captured, the commit profiled, the source hash, the median
time and the bandwidth, and the verdict against the entry before it, the Mann-Whitney test
and noise band of `kernlog diff`. A verdict of faster or slower is a step; the note says
whether the source changed there (the revision's code) or not (the tool, the GPU's driver,
the machine).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.judge.bands import bands_for
from kernlog.judge.plausible import achieved_gbps
from kernlog.judge.verdicts import ALPHA, timing_verdict
from kernlog.store import gitrefs
from kernlog.store import profiles as store
from kernlog.store.keys import FAILED, ProfileKey
from kernlog.store.lookup import resolve_one
from kernlog.store.record import Profile


@dataclass
class Entry:
    """One entry of a revision's history: the profile a commit, the work tree or an at/<commit>/
    folder stored (`prof`), or why it does not load (`error`)."""
    stored_in: str | None  # the commit it was read from; None: the work tree's (an at/ entry's too)
    path: str
    prof: Profile | None = None
    error: str | None = None
    at: str | None = None  # the at/<commit:12>/ folder of a `kernlog profile --at` entry
    when: str = ""


def entries(root: Path, side: ProfileKey) -> tuple[Profile, list[Entry]]:
    """(today's profile, every committed version of it oldest first, and the work tree's where
    it differs from HEAD's). The side picks the profile as `diff` does."""
    now = resolve_one(root, side.with_(ref=None))
    path = now.path
    out = []
    commits = [commit for commit, _date in gitrefs.log(root, path)]
    bodies = gitrefs.blobs(root, commits, path)  # one git process for them all
    for commit in commits:
        try:
            prof = gitrefs.load_at(root, commit, path, body=bodies.get(commit))
            last = out[-1].prof if out else None
            if last is not None and (last.timing, last.source_sha256, last.captured_at) == (
                    prof.timing, prof.source_sha256, prof.captured_at):
                continue  # the same measurement, its JSON only re-written (a hash recorded): one entry
            out.append(Entry(commit, prof.path, prof))
        except KernlogError as exc:  # a commit whose files do not load is listed, not fatal
            out.append(Entry(commit, f"{commit[:10]}:{path}", error=str(exc)))
    head = out[-1].prof if out else None
    if head is None or (head.timing, head.source_sha256, head.captured_at) != (
            now.timing, now.source_sha256, now.captured_at):
        out.append(Entry(None, now.path, now))
    folder = (root / path).parent
    for entry in sorted(folder.glob(f"at/*/{Path(path).name}")):  # `kernlog profile --at`'s
        try:
            prof = store.load_profile(root, entry)
            out.append(Entry(None, prof.path, prof, at=entry.parent.name))
        except store.ProfileError as exc:
            out.append(Entry(None, str(entry.relative_to(root)), error=str(exc), at=entry.parent.name))
    for failed in sorted(folder.glob(f"at/*/{FAILED}")):
        if not (failed.parent / Path(path).name).exists():
            try:
                why = (json.loads(failed.read_text()).get("output") or ["?"])[-1]
            except (OSError, ValueError, AttributeError):
                why = "its failed.json is unreadable"
            out.append(Entry(None, str(failed.relative_to(root)), error=f"not profiled at this commit: {why}",
                             at=failed.parent.name))
    for e in out:
        e.when = _when(root, e)
    return now, sorted(out, key=lambda e: e.when)


def _when(root: Path, e: Entry) -> str:
    """Where an entry sits in the timeline: the date of the commit it profiled where git knows
    it (an --at entry profiles an old commit today), else when it was captured."""
    commit = e.at or (e.prof.git.get("commit") if e.prof is not None else e.stored_in)
    return (gitrefs.commit_date(root, commit) if isinstance(commit, str) else None) or (
        e.prof is not None and e.prof.captured_at) or ""


def timeline(root: Path, side: ProfileKey) -> dict:
    now, found = entries(root, side)
    rows, prev = [], None
    for e in found:
        row = {"stored_in": e.stored_in, "at": e.at, "path": e.path, "when": e.when}
        if e.prof is None:
            rows.append(dict(row, error=e.error))
            continue
        prof = e.prof
        git = prof.git
        row.update(captured_at=prof.captured_at, profiled_at=git.get("commit"), dirty=git.get("dirty"),
                   source_sha256=prof.source_sha256, median_ms=prof.timing.median_ms,
                   gbps=achieved_gbps(prof), n=len(prof.timing.samples_ms),
                   driver=prof.gpu.driver, verdict=None, step=False)
        if prev is not None:
            band = bands_for(root, prev, prof)("wall_ms")
            v = timing_verdict(prev.timing.samples_ms, prof.timing.samples_ms, band)
            source = prev.source_sha256 != prof.source_sha256
            row.update(verdict=v.verdict, ratio=v.ratio, p_value=v.p_value, band=v.band,
                       step=v.step, source_changed=source,
                       driver_changed=prev.gpu.driver != prof.gpu.driver)
        rows.append(row)
        prev = prof
    return {"kernel": now.kernel, "revision": now.revision, "shape": list(now.shape), "dtype": now.dtype,
            "gpu": now.gpu.slug, "path": now.path, "entries": rows}


def timelines(root: Path, side: ProfileKey) -> list[dict]:
    """timeline() of the side; where it names no GPU and its profile exists on several (one
    shape and dtype each), one timeline per GPU, in slug order: a history is per GPU."""
    from dataclasses import replace

    from kernlog.store.lookup import _prefer_declared, candidates

    if side.gpu is None and side.path is None and side.ref is None:
        recs = _prefer_declared(root, candidates(root, side))
        gpus = sorted({r.gpu.slug for r in recs})
        if len(gpus) > 1 and len(recs) == len(gpus):
            return [timeline(root, replace(side, gpu=g)) for g in gpus]
    return [timeline(root, side)]


STEP_RULE = (f"(a STEP is a move beyond the noise band that the rank test also calls significant, p < {ALPHA}; "
             "a ratio inside the band is 'same' however small its p)")
