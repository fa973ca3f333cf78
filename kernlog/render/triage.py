"""A stored triage as a short table (the terminal) and as a Markdown section (triage.md in the
reports folder)."""
from __future__ import annotations

from pathlib import Path

from kernlog.judge.hostside import Split
from kernlog.render import paths as where
from kernlog.store.triages import GPU_CLOCK, TriageError, TriageRecord, all_stored, load_triage

TOP = 5


def _us(v: float) -> str:
    return f"{v / 1e3:.2f} ms" if v >= 1e4 else f"{v:.1f} us"


def _evidence(c: dict) -> str:
    ev = c["evidence"]
    if c["kind"] == "graph":
        return (f"predicted {_us(ev['predicted_us'])} per call in a graph: {_us(ev['busy_us'])} busy, each of "
                f"{ev['launches']} launches at least {ev['floor_us']:.2f} us (this GPU's floor); {_us(ev['idle_us'])} "
                "idle now")
    if c["kind"] == "compile":
        return (f"{_us(ev['measured_us'])} of non-matmul calls in {ev['runs']} runs, their intermediates kept on "
                "chip; GPU time only: the host time compiled code saves is not predicted")
    if c["kind"] == "sync":
        g = ev["gap"]
        return (f"the GPU idle {_us(g['us'])} per call after it ({_us(g['traced_us'])} in the traced call, "
                f"profiler on)")
    if c["kind"] == "fusion":
        ch = c["evidence"]["chain"]
        return f"{ch['intermediate_bytes'] / 1e6:.1f} MB through DRAM per repeat; measured {_us(ch['measured_us'])}"
    g = c["evidence"]["group"]
    parts = [f"measured {_us(g['measured_us'])}, roof {_us(g['roof_us'])}"]
    parts.append("bytes measured by ncu, not a minimum" if g["basis"] == "measured" else "at minimum bytes/FLOPs")
    for fig in g.get("ncu", {}).values():
        if fig.get("dram_pct") is not None:
            parts.append(f"ncu DRAM {fig['dram_pct']:.0f}%, SM {fig.get('compute_pct') or 0:.0f}%")
            break
    if g.get("modules"):
        parts.append("in " + ", ".join(g["modules"][:3]))
    return "; ".join(parts)


def headline(rec: TriageRecord) -> str:
    covered = sum(k["us"] for k in rec.by_kernel if k["name"] in rec.picked)
    share = covered / rec.gpu_us if rec.gpu_us else 0.0
    return (f"triage of {rec.target} on {rec.gpu['name']} ({rec.captured_at}): {_us(rec.total_us)} per call, "
            f"{_us(rec.gpu_us)} of it in {rec.launches} kernel launches; {len(rec.picked)} kernel(s) cover "
            f"{share:.0%} of the GPU time")


def _where(g: dict) -> str:
    op = g["op"] or "the call's start"
    return f"{g['module']} ({op})" if g["module"] else op


def split_line(rec: TriageRecord) -> str:
    """Of the call's wall time: the GPU busy, and idle (by cause); '' for a record without a split."""
    sp = rec.time_split
    if not sp:
        return ""
    wall = sp["wall_us"]
    idle = f"{_us(sp['idle_us'])} ({sp['idle_us'] / wall:.0%}) with it idle" if wall else "none idle"
    causes = []
    scale = Split(**sp).scale
    if sp["launch_gap_us"]:
        causes.append(f"{_us(sp['launch_gap_us'] * scale)} in launch gaps (host work, launch latency)")
    if sp["sync_gap_us"]:
        causes.append(f"{_us(sp['sync_gap_us'] * scale)} after {sp['syncs']} host sync(s)")
    line = (f"Of {_us(wall)} per call, {_us(sp['busy_us'])} with the GPU busy ({_us(sp['kernel_us'])} in kernels"
            + (f", {_us(sp['copy_us'])} in copies" if sp["copy_us"] >= 0.05 else "") + f"), {idle}"
            + (": " + ", ".join(causes) if causes and sp["idle_us"] else "") + ".")
    longest = [g for g in sp.get("gaps", []) if g["us"] >= 0.05][:3]
    if longest and sp["idle_us"]:
        line += " Longest idle before: " + "; ".join(
            f"{_where(g)} {_us(g['us'])} ({g['count']}x)" if g["cause"] == "launch"
            else f"the sync at {_where(g)} {_us(g['us'])} ({g['count']}x)" for g in longest) + "."
    copies = [c for c in sp.get("copies", []) if c["us"] >= 0.05][:2]
    if copies:
        line += " Copies: " + "; ".join(f"{_where(c)} {_us(c['us'])} ({c['count']}x)" for c in copies) + "."
    if rec.timing == GPU_CLOCK:
        line += f" Timed on the GPU's clock: the host's time not counted (`kernlog triage {rec.target}` retakes it)."
    return line


def table(rec: TriageRecord, top: int = TOP) -> str:
    """The headline, the call's time split, the top ops by GPU time, then the top candidates with
    their speedups."""
    lines = [headline(rec)]
    if rec.time_split:
        lines += ["", split_line(rec)]
    lines += ["", "GPU time by op:"]
    for row in rec.by_op[:top]:
        lines.append(f"  {row['us'] / rec.gpu_us:6.1%}  {_us(row['us']):>10}  {row['count']:5d}x  {row['name']}")
    if not rec.candidates:
        lines += ["", "no candidate: every placed op sits at its roof and no chain passes a tensor through DRAM"]
        return "\n".join(lines)
    lines += ["", f"{'#':>2}  {'saves':>10}  {'speedup':>7}  candidate (savings overlap: do not add them)"]
    for i, c in enumerate(rec.candidates[:top], 1):
        lines.append(f"{i:2d}  {_us(c['saved_us']):>10}  {c['speedup']:6.3f}x  {c['title']}")
        lines.append(f"{'':26}{_evidence(c)}")
    return "\n".join(lines)


def markdown(rec: TriageRecord, top: int = TOP) -> str:
    """The log's section: headline and a table of the top candidates."""
    out = [f"### Triage: {rec.target}", "", headline(rec) + "."]
    if rec.time_split:
        out += ["", split_line(rec)]
    out += ["", "| # | candidate | saves | predicted speedup | evidence |", "| --- | --- | --- | --- | --- |"]
    for i, c in enumerate(rec.candidates[:top], 1):
        title = c["title"].replace("|", "\\|")
        out.append(f"| {i} | {title} | {_us(c['saved_us'])} | {c['speedup']:.3f}x | "
                   f"{_evidence(c).replace('|', '/')} |")
    if rec.verified:
        out += ["", "Verified (`kernlog triage TARGET --verify`): the program with the kernel built, timed again.",
                "", "| with | candidate | predicted | measured | verdict | basis |",
                "| --- | --- | --- | --- | --- | --- |"]
        for v in rec.verified:
            out.append(f"| {v['target']} | {v['candidate']} | {v['predicted']:.3f}x | {v['measured']:.3f}x | "
                       f"{v['outcome']} (band {v['band']:.1%}) | {v['basis'].replace('|', '/')} |")
    return "\n".join(out) + "\n"


PAGE_INTRO = """# Triage: which kernel to write next

`kernlog triage TARGET` times a PyTorch program's call, traces one call on a GPU, profiles under ncu
the kernels that cover most of its GPU time, and ranks what could be saved: an op's time above its
roofline, a chain of kernels passing a tensor through DRAM that one fused kernel would keep on chip,
and the host's share of the call.

The host's share is the time the GPU sits idle: between launches (capturing the call in a CUDA
graph would save it, predicted from this GPU's measured per-launch floor) and after host
synchronizations inside the call (`.item()`, a blocking copy). torch.compile is ranked too, on the
GPU time its fusions save. Each candidate's speedup is the whole call's (Amdahl on its wall time);
the savings of two candidates overlap and do not add.
[Front page]({front})."""


def summary(records: list[TriageRecord]) -> str:
    """One row per stored triage: where its call's time goes and its first candidate."""
    rows = ["| program | GPU | per call | GPU busy | GPU idle | first candidate | predicted | verified |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rec in records:
        sp, top = rec.time_split, (rec.candidates[0] if rec.candidates else None)
        idle = (f"{sp['idle_us'] / sp['wall_us']:.0%}" + ("*" if rec.timing == GPU_CLOCK else "")) if sp else "–"
        checked = [v for v in rec.verified if top and v.get("candidate") == 1]
        rows.append(" | ".join([
            f"| {rec.target}", rec.gpu["name"], _us(rec.total_us), _us(sp["busy_us"]) if sp else "–", idle,
            (top["title"].replace("|", "/") if top else "none"), f"{top['speedup']:.3f}x" if top else "–",
            (f"{checked[-1]['measured']:.3f}x, {checked[-1]['outcome']}" if checked else "–") + " |"]))
    note = ("\n\n\\* timed on the GPU's clock, before triage timed the wall: the host's time is not counted, "
            "the idle share is launch latency only." if any(r.timing == GPU_CLOCK for r in records) else "")
    return "\n".join(rows) + note


def page_block(root: Path) -> str | None:
    """The triage page's generated block: every stored triage's section, a record that cannot be
    read named in one line; None where no triage is stored."""
    paths = all_stored(root)
    if not paths:
        return None
    parts = [PAGE_INTRO.format(front=where.of(root).front)]
    records, sections = [], []
    for path in paths:
        try:
            records.append(load_triage(path))
            sections.append(markdown(records[-1]).rstrip())
        except TriageError as e:
            sections.append(f"**Left out:** {e}")
    if records:
        parts.append(summary(records))
    parts += sections
    return "\n\n".join(parts) + "\n"
