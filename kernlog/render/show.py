"""`kernlog show`: one stored profile, every value with its unit."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from kernlog import units
from kernlog.errors import KernlogError
from kernlog.judge import hotlines
from kernlog.judge.bands import bands_for
from kernlog.judge.gate_marks import fails_gate
from kernlog.judge.plausible import achieved_gbps, impossible
from kernlog.judge.verdicts import stale, throttled
from kernlog.metrics import metric, ncu_filter, time_shares
from kernlog.registry import load_kernel
from kernlog.render.diff import gpu_choice_line
from kernlog.spec import format_shape
from kernlog.store import gates
from kernlog.store.record import Profile


def is_stale(root: Path, prof: Profile) -> bool:
    """As `kernlog list` marks it: the revision's source today hashes otherwise than the profile's
    (a kernel or revision no longer declared, or an imported report, is never stale)."""
    try:
        rev = load_kernel(root, prof.kernel).revision(prof.revision)
    except (KernlogError, KeyError):
        return False
    return stale(prof.source_sha256, {rev.name: rev.sha256()}, rev.name)


def gate_failure(root: Path, prof: Profile) -> str | None:
    """As `kernlog list` marks it: the first failing case where the latest gate of the profile's
    revision on its GPU failed on the source the profile measured (kernlog.judge.gate_marks)."""
    return fails_gate(prof.source_sha256, prof.revision, gates.load(root, prof.gpu.slug, prof.kernel))


def commit_phrase(git: dict, imported: bool) -> str:
    """Where in the repository's history a profile was taken, as show's second line says it; a profile that
    git could not place (taken outside a repository or before its first commit) says so, with the fix."""
    commit = git.get("commit")
    if commit in (None, "unknown"):
        return "at no known commit" if imported else (
            "at no commit git could name (outside a repository, or before its first commit): commit, then "
            "profile again to tie its figures to one")
    return f"at commit {commit}" + {True: " (dirty)", "unknown": " (whether the tree was dirty: unknown)"}.get(
        git.get("dirty"), "")


def render(root: Path, prof: Profile, fmt: str = "text") -> str:
    flags = impossible(prof, bands_for(root, prof, prof)("dram_gbps").rel)
    if fmt == "json":  # the record as stored, with what the text marks: stale, fails_gate (its case or null)
        return json.dumps(dict({k: v for k, v in prof.to_dict().items() if k != "_path"}, flags=flags,
                               stale=is_stale(root, prof), fails_gate=gate_failure(root, prof)),
                          indent=1, sort_keys=True)
    t = prof.timing
    git = prof.git
    old = is_stale(root, prof)
    failing = gate_failure(root, prof)
    lines = [f"{prof.kernel}/{prof.revision}  {format_shape(tuple(prof.shape))} {prof.dtype}"
             + (" STALE" if old else "") + (" FAILS GATE" if failing else "")
             + f"  on {prof.gpu.name}  ({prof.path or '?'})",
             f"captured {prof.captured_at or 'unknown'} " + commit_phrase(git, bool(prof.imported)),
             f"change: {prof.change}"]
    choice = gpu_choice_line(prof.gpu_choice)
    if choice:
        lines.insert(1, choice)
    if failing:
        lines.insert(1, f"FAILS GATE: the source this profile measured fails kernlog's correctness gate on "
                        f"{prof.gpu.slug} now ({failing}); its figures stand, timed all the same. Re-check with "
                        f"`kernlog check {prof.kernel} --rev {prof.revision}` on that GPU")
    if old:
        lines.insert(1, f"STALE: measured on an older source of {prof.revision}; re-take it with `kernlog profile "
                        f"{prof.kernel} --rev {prof.revision} --shape {format_shape(tuple(prof.shape))} "
                        f"--dtype {prof.dtype} --force` on a GPU")
    imp = prof.imported
    if imp:
        lines.insert(2, f"imported from {imp.get('file')} (sha256 {str(imp.get('sha256'))[:16]}...), not captured "
                        "by kernlog: the source it ran is unknown")
    if prof.predicts:
        lines.append(f"predicts: {prof.predicts}")
    if prof.config:
        lines.append(f"config picked: {prof.config}")
    lo, hi, unit = units.pair("ms", t.p05_ms, t.p95_ms)
    med = units.quantity("ms", t.median_ms)
    gbps = achieved_gbps(prof)
    what = (f"time: {med}, ncu's duration of the profiled launch (no wall-time samples)"
            if t.source == "ncu duration" else f"wall time: median {med} (p05 {lo}, p95 {hi} {unit}; "
            f"{t.n} samples)")
    lines.append(what + (f"; {units.quantity('GB/s', gbps)} achieved" if gbps else ""))
    clocks = t.clocks
    if clocks.get("sm_mhz"):
        top = f" (its highest {clocks['sm_max_mhz']:.0f})" if clocks.get("sm_max_mhz") else ""
        lines.append(f"clocks while timed: SM {clocks['sm_mhz']['median']:.0f} MHz{top}, memory "
                     f"{(clocks.get('mem_mhz') or {}).get('median', float('nan')):.0f} MHz")
        slow = throttled(clocks)
        if slow:
            lines.append(slow[0].upper() + slow[1:])
    for key, value in prof.metrics.items():
        if key == "wall_ms" and t.source == "ncu duration":
            continue  # the time line above says what it is
        m = metric(key)
        lines.append(f"  {m.label:<38} {units.quantity(m.unit, value):>18}")
    facts = prof.facts
    counts = Counter(k["name"] for k in facts.get("kernels", []))
    only = ncu_filter(prof)
    lines.append(f"  occupancy limiter: {facts.get('occupancy_limiter') or 'not collected'}; "
                 + (f"ncu profiled only the kernels matching {only}: " if only else "kernels: ")
                 + ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items()))
    shares = time_shares(prof)
    if shares:
        kt = prof.kernel_times
        lines.append(f"where the time goes ({kt['launches']} kernels, {units.quantity('ms', kt['total_us'] / 1e3)} "
                     "of GPU time; a CUPTI trace of one warm launch):")
        lines += [f"  {k['share']:5.1f}%  {k['count']:>4}x  {units.quantity('ms', k['us'] / 1e3):>10}  {k['name']}"
                  for k in shares]
    lines += hot_lines(prof)
    for f in prof.findings:
        est = f" (est. speedup {f['speedup_pct']:.0f}%)" if f.get("speedup_pct") else ""
        lines.append(f"- {f['title']}{est}: {f['message']}")
    lines += [f"IMPOSSIBLE: {f}" for f in flags]
    return "\n".join(lines)


def hot_lines(prof: Profile, top: int = 5) -> list[str]:
    """The profile's most sampled source lines, each with the stall that dominates it."""
    hot = prof.hotspots
    if not hot:
        why = ("its report holds no PC samples (SourceCounters)" if "hotspots" in prof.extra
               else "profiled before kernlog extracted them; re-profile")
        return [f"source-line hot spots: not collected ({why})"]
    out = [f"source-line hot spots of {hot['kernel']} ({hot['samples']} warp samples; share of them, "
           "and the stall that leads on the line):"]
    for row in hotlines.lines_table(hot, top):
        stall = f"{row['stall']} {row['stall_share']:.0%}" if row["stall"] else "issuing"
        out.append(f"  {row['share']:>4.0%}  {row['where']:<40} {stall:<24} {row['text']}")
    return out
