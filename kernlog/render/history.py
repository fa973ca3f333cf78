"""`kernlog history` as a person reads it: the timeline of kernlog.judge.history (a dict), an
entry a line with its verdict against the one before, or JSON."""
from __future__ import annotations

import json

from kernlog import units
from kernlog.judge.history import STEP_RULE
from kernlog.spec import format_shape


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
