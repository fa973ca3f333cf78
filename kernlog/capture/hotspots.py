"""Source-line hot spots: where a kernel's warps were sampled, per source line, with the
stall that dominates each line.

ncu's SourceCounters section samples the warps' program counters (smsp__pcsamp_*: one count
per PC and per stall reason). Each PC is mapped to its file and line through the line info
the revision was built with (CUDA C: NVRTC's -lineinfo, kernlog.cuda; Triton: always), and
the counts are summed per line. Extracted at capture, from the main kernel of a revision's
NVTX range, with each line's text read as it was then: a profile keeps its hot spots after
the source moves on.
"""
from __future__ import annotations

from pathlib import Path

from kernlog import config
from kernlog.capture.ncu import main_action
from kernlog.metrics import NOT_STALLS

SAMPLES = "smsp__pcsamp_sample_count"
STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
KEEP = 12  # lines stored per profile (show prints fewer; diff matches lines across both sides)
CUDA_MAIN = ".cubin.cu"  # NVRTC names the compiled text <hash>.cubin.cu: the revision's own .cu


def _per_pc(metric) -> dict[int, int]:
    ids = metric.correlation_ids()
    return {ids.as_uint64(i): metric.as_uint64(i) for i in range(ids.num_instances())}


def _display(path: str, root: Path, main_source: Path | None) -> tuple[str, Path | None]:
    """(the name shown for `path` as line info spells it, the file to read its lines from)."""
    if path.endswith(CUDA_MAIN) and main_source is not None:
        path = str(main_source)
    p = Path(path)
    try:
        return str(p.resolve().relative_to(root.resolve())), p
    except ValueError:
        pass
    parts = p.parts
    lay = config.layout(root)
    # captured from another checkout of the repository: from its kernels folder on (as
    # [tool.kernlog] names it), or from kernlog's own package
    for anchor in (Path(lay.rel(lay.kernels)).parts, ("kernlog",)):
        at = next((i for i in range(len(parts) - len(anchor) + 1) if parts[i:i + len(anchor)] == anchor), None)
        if at is not None:
            rel = Path(*parts[at:])
            return str(rel), root / rel
    if "site-packages" in parts:
        return str(Path(*parts[parts.index("site-packages") + 1:])), p
    return path, p


def _line_text(path: Path | None, line: int, cache: dict) -> str | None:
    if path is None or line <= 0:
        return None
    if path not in cache:
        try:
            cache[path] = path.read_text(errors="replace").splitlines()
        except OSError:
            cache[path] = None
    lines = cache[path]
    return lines[line - 1].strip() if lines and line <= len(lines) else None


def extract(action, root: Path, main_source: Path | None = None) -> dict | None:
    """The hot spots of one profiled kernel (an ncu_report action), or None where the report
    holds no PC samples (the SourceCounters section not collected)."""
    samples_metric = action.metric_by_name(SAMPLES)
    if samples_metric is None or not samples_metric.has_correlation_ids():
        return None
    samples = _per_pc(samples_metric)
    reasons = {}
    for name in action.metric_names():
        if name.startswith(STALL_PREFIX) and not name.endswith("_not_issued"):
            reason = name[len(STALL_PREFIX):]
            metric = action.metric_by_name(name)
            if metric is not None and metric.has_correlation_ids():
                reasons[reason] = _per_pc(metric)
    lines: dict[tuple[str | None, int], dict] = {}
    texts: dict = {}
    shown_as: dict[str, tuple[str, Path | None]] = {}  # a file's _display, once: the PCs share a few files
    base = min(samples, default=0)
    for pc, n in samples.items():
        info = action.source_info(pc)
        if info is not None:
            name = info.file_name()
            if name not in shown_as:
                shown_as[name] = _display(name, root, main_source)
            shown, path = shown_as[name]
            line = info.line()
        else:  # no line info (a library's kernel): each instruction its own row, by offset
            shown, path, line = None, None, pc - base
        entry = lines.setdefault((shown, line), {"file": shown, "line": line, "samples": 0,
                                                 "stalls": {}, "_pc": (0, None), "_path": path})
        entry["samples"] += n
        for reason, counts in reasons.items():
            if counts.get(pc):
                entry["stalls"][reason] = entry["stalls"].get(reason, 0) + counts[pc]
        if n > entry["_pc"][0]:
            entry["_pc"] = (n, pc)
    total = sum(samples.values())
    if not total:
        return None
    top = sorted(lines.values(), key=lambda e: (-e["samples"], e["file"] or "", e["line"] or 0))[:KEEP]
    out = []
    for e in top:
        stalls = {r: c for r, c in e["stalls"].items() if r not in NOT_STALLS}
        lead = max(stalls, key=lambda r: (stalls[r], r)) if stalls else None
        sass = action.sass_by_pc(e["_pc"][1]) if e["_pc"][1] is not None else None
        out.append({"file": e["file"], "line": e["line"], "samples": e["samples"],
                    "share": round(e["samples"] / total, 4),
                    "stall": lead, "stall_share": round(stalls[lead] / e["samples"], 4) if lead else None,
                    "stalls": dict(sorted(e["stalls"].items(), key=lambda kv: -kv[1])[:4]),
                    "text": _line_text(e["_path"], e["line"], texts) if e["file"] else None,
                    "sass": " ".join(sass.split()) if sass else None})
    return {"kernel": action.name(), "samples": total, "lines": out}


def of_revision(actions, root: Path, sources=()) -> dict | None:
    """The hot spots of a revision's main kernel; `sources` are the revision's files (its first
    .cu is the text NVRTC compiled)."""
    if not actions:
        return None
    cu = next((Path(s) for s in sources if str(s).endswith(".cu")), None)
    return extract(main_action(actions), root, cu)
