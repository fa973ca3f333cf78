"""A stored triage as a short table (the terminal) and as a Markdown section (triage.md in the
reports folder)."""
from __future__ import annotations

from pathlib import Path

from kernlog.render import paths as where
from kernlog.store.triages import TriageError, TriageRecord, all_stored, load_triage

TOP = 5


def _us(v: float) -> str:
    return f"{v / 1e3:.2f} ms" if v >= 1e4 else f"{v:.1f} us"


def _evidence(c: dict) -> str:
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


def table(rec: TriageRecord, top: int = TOP) -> str:
    """The headline, the top ops by GPU time, then the top candidates with their speedups."""
    lines = [headline(rec), "", "GPU time by op:"]
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
    out = [f"### Triage: {rec.target}", "", headline(rec) + ".", "",
           "| # | candidate | saves | predicted speedup | evidence |", "| --- | --- | --- | --- | --- |"]
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

`kernlog triage TARGET` traces a PyTorch program on a GPU, profiles under ncu the kernels that cover
most of its GPU time, places each on its roofline at its minimum bytes and FLOPs, and ranks what a
new kernel could save: an op's time above its roof, or a chain of kernels passing a tensor through
DRAM (memory-bound ones, perhaps between the matmuls that write and read it) that one fused kernel
would keep on chip. Each candidate's speedup is the whole
program's (Amdahl on the measured time per call); the savings of two candidates overlap and do not add.
[Front page]({front})."""


def page_block(root: Path) -> str | None:
    """The triage page's generated block: every stored triage's section, a record that cannot be
    read named in one line; None where no triage is stored."""
    paths = all_stored(root)
    if not paths:
        return None
    parts = [PAGE_INTRO.format(front=where.of(root).front)]
    for path in paths:
        try:
            parts.append(markdown(load_triage(path)).rstrip())
        except TriageError as e:
            parts.append(f"**Left out:** {e}")
    return "\n\n".join(parts) + "\n"
