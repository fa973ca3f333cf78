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
from pathlib import Path

from kernlog import units
from kernlog.errors import KernlogError
from kernlog.judge.bands import bands_for
from kernlog.judge.plausible import achieved_gbps
from kernlog.judge.verdicts import ALPHA, timing_verdict
from kernlog.spec import format_shape
from kernlog.store import gitrefs
from kernlog.store import profiles as store
from kernlog.store.keys import FAILED
from kernlog.store.lookup import Side, resolve_one


def entries(root: Path, side: Side) -> tuple[dict, list[dict]]:
    """(today's profile, every committed version of it oldest first, and the work tree's where
    it differs from HEAD's). The side picks the profile as `diff` does."""
    now = resolve_one(root, Side(side.kernel, side.revision, side.shape, side.dtype, side.gpu, side.path))
    path = now["_path"]
    recs = []
    for commit, _date in gitrefs.log(root, path):
        try:
            recs.append(gitrefs.load_at(root, commit, path))
        except KernlogError as exc:  # a commit whose files do not load is listed, not fatal
            recs.append({"_commit": commit, "_path": f"{commit[:10]}:{path}", "_error": str(exc)})
    head = recs[-1] if recs else None
    fields = ("timing", "source_sha256", "captured_at")
    if head is None or "_error" in head or any(head.get(f) != now.get(f) for f in fields):
        recs.append(dict(now, _commit=None))
    folder = (root / path).parent
    for entry in sorted(folder.glob(f"at/*/{Path(path).name}")):  # `kernlog profile --at`'s
        try:
            recs.append(dict(store.load_profile(root, entry), _commit=None, _at=entry.parent.name))
        except store.ProfileError as exc:
            recs.append({"_commit": None, "_at": entry.parent.name, "_path": str(entry.relative_to(root)),
                         "_error": str(exc)})
    for failed in sorted(folder.glob(f"at/*/{FAILED}")):
        if not (failed.parent / Path(path).name).exists():
            try:
                why = (json.loads(failed.read_text()).get("output") or ["?"])[-1]
            except (OSError, ValueError, AttributeError):
                why = "its failed.json is unreadable"
            recs.append({"_commit": None, "_at": failed.parent.name, "_path": str(failed.relative_to(root)),
                         "_error": f"not profiled at this commit: {why}"})
    for r in recs:
        r["_when"] = _when(root, r)
    return now, sorted(recs, key=lambda r: r["_when"])


def _when(root: Path, rec: dict) -> str:
    """Where an entry sits in the timeline: the date of the commit it profiled where git knows
    it (an --at entry profiles an old commit today), else when it was captured."""
    commit = rec.get("_at") or ((rec.get("git") or {}).get("commit") if "_error" not in rec else rec.get("_commit"))
    return (gitrefs.commit_date(root, commit) if isinstance(commit, str) else None) or rec.get("captured_at") or ""


def timeline(root: Path, side: Side) -> dict:
    now, recs = entries(root, side)
    rows, prev = [], None
    for rec in recs:
        row = {"stored_in": rec["_commit"], "at": rec.get("_at"), "path": rec["_path"], "when": rec["_when"]}
        if "_error" in rec:
            rows.append(dict(row, error=rec["_error"]))
            continue
        git = rec.get("git") or {}
        row.update(captured_at=rec.get("captured_at"), profiled_at=git.get("commit"), dirty=git.get("dirty"),
                   source_sha256=rec["source_sha256"], median_ms=rec["timing"]["median_ms"],
                   gbps=achieved_gbps(rec), n=len(rec["timing"]["samples_ms"]),
                   driver=(rec.get("gpu") or {}).get("driver"), verdict=None, step=False)
        if prev is not None:
            band = bands_for(root, prev, rec)("wall_ms")
            v = timing_verdict(prev["timing"]["samples_ms"], rec["timing"]["samples_ms"], band)
            source = prev["source_sha256"] != rec["source_sha256"]
            row.update(verdict=v.verdict, ratio=v.ratio, p_value=v.p_value, band=v.band,
                       step=v.step, source_changed=source,
                       driver_changed=prev.get("gpu", {}).get("driver") != rec.get("gpu", {}).get("driver"))
        rows.append(row)
        prev = rec
    return {"kernel": now["kernel"], "revision": now["revision"], "shape": now["shape"], "dtype": now["dtype"],
            "gpu": now["gpu"]["slug"], "path": now["_path"], "entries": rows}


def timelines(root: Path, side: Side) -> list[dict]:
    """timeline() of the side; where it names no GPU and its profile exists on several (one
    shape and dtype each), one timeline per GPU, in slug order: a history is per GPU."""
    from dataclasses import replace

    from kernlog.store.lookup import _prefer_declared, candidates

    if side.gpu is None and side.path is None and side.ref is None:
        recs = _prefer_declared(root, candidates(root, side))
        gpus = sorted({r["gpu"]["slug"] for r in recs})
        if len(gpus) > 1 and len(recs) == len(gpus):
            return [timeline(root, replace(side, gpu=g)) for g in gpus]
    return [timeline(root, side)]


STEP_RULE = (f"(a STEP is a move beyond the noise band that the rank test also calls significant, p < {ALPHA}; "
             "a ratio inside the band is 'same' however small its p)")


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _short(commit: str | None) -> str:
    return commit[:8] if commit else "worktree"


def _stored(row: dict) -> str:
    return f"at/{row['at'][:6]}" if row.get("at") else _short(row["stored_in"])


def render(t: dict, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(t, indent=1, sort_keys=True)
    out = [f"{t['kernel']}/{t['revision']}  {format_shape(tuple(t['shape']))} {t['dtype']}  on {t['gpu']}  "
           f"({_count(len(t['entries']), 'entry', 'entries')} of {t['path']})",
           f"{'stored in':<9} {'captured':<16} {'profiled at':<11} {'source':<10} {'median':>10} {'GB/s':>7}  "
           "vs previous"]
    steps = []
    for r in t["entries"]:
        if "error" in r:
            out.append(f"{_stored(r):<9} {r['error']}")
            continue
        vs = ""
        if r["verdict"]:
            vs = f"{r['verdict']} {r['ratio']:.3f}x (p={r['p_value']:.2g}, band +-{100 * r['band']:.1f}%)"
            vs += "; source changed" if r["source_changed"] else ""
            vs += "; driver changed" if r["driver_changed"] else ""
        gbps = f"{r['gbps']:.0f}" if r["gbps"] else "-"
        prof = _short(r["profiled_at"]) + ("*" if r["dirty"] is True else "")
        out.append(f"{_stored(r):<9} {str(r['captured_at'])[:16]:<16} {prof:<11} "
                   f"{str(r['source_sha256'])[:10]:<10} {units.quantity('ms', r['median_ms']):>10} {gbps:>7}  "
                   + ("STEP " if r["step"] else "") + vs)
        if r["step"]:
            cause = "its source changed" if r["source_changed"] else "same source: the tool, driver or machine"
            steps.append(f"step: {r['verdict']} by {abs(1 - r['ratio']):.1%} in {_stored(r)} "
                         f"(profiled at {_short(r['profiled_at'])}; {cause})")
    out += steps or ["no step: every entry within the noise of the one before"]
    if any(r.get("verdict") for r in t["entries"]):
        out.append(STEP_RULE)
    out.append("(* profiled from a dirty tree)" if any(r.get("dirty") is True for r in t["entries"]) else "")
    return "\n".join(line for line in out if line)
