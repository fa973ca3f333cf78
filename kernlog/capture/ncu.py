"""Reading an `.ncu-rep` with ncu_report: the actions (profiled kernel launches) a report
holds, grouped by kernlog's NVTX ranges, summed into the metric catalogue's values
(kernlog.metrics), with ncu's own findings. A metric a report lacks is "not collected"
(None), never zero."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from kernlog.capture.provenance import find_ncu
from kernlog.errors import KernlogError
from kernlog.metrics import CATALOG, NOT_STALLS, OCCUPANCY_LIMITS, STALL_PREFIX, STALL_SUFFIX


def _value(action, name):
    m = action.metric_by_name(name)
    if m is None:
        return None
    v = m.value()
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def metric_value(action, name: str) -> float | None:
    """One metric of one action (a profiled launch): its number, or None where not collected."""
    return _value(action, name)


def _sum(actions, names):
    total = None
    for action in actions:
        for name in names:
            v = _value(action, name)
            if v is not None:
                total = (total or 0.0) + v
    return total


def _stalls(action) -> dict[str, float]:
    out = {}
    for name in action.metric_names():
        if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX):
            reason = name[len(STALL_PREFIX):-len(STALL_SUFFIX)]
            v = _value(action, name)
            if reason not in NOT_STALLS and v is not None:
                out[reason] = v
    return out


def occupancy_limiter(action) -> str | None:
    limits = {k: _value(action, f"launch__occupancy_limit_{k}") for k in OCCUPANCY_LIMITS}
    limits = {k: v for k, v in limits.items() if v is not None}
    return min(limits, key=limits.get) if limits else None


def main_action(actions):
    """The kernel that ran longest of a revision's launches: the one its facts describe."""
    durations = [_value(a, "gpu__time_duration.sum") or 0.0 for a in actions]
    return actions[durations.index(max(durations))]


def summarize(actions) -> tuple[dict[str, float | None], dict]:
    """(metrics, facts) for the kernels one revision launched. `facts` holds strings: the
    main kernel's name and its occupancy limiter."""
    if not actions:
        raise KernlogError("the report holds no profiled kernel for this revision")
    main = main_action(actions)
    values: dict[str, float | None] = {}
    for m in CATALOG:
        if not m.ncu:
            continue
        v = _sum(actions, m.ncu) if m.combine == "sum" else _sum([main], m.ncu)
        values[m.key] = None if v is None else v * m.scale
    sectors = _value(main, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    requests = _value(main, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    values["ld_sectors_per_request"] = sectors / requests if sectors is not None and requests else None
    for reason, v in sorted(_stalls(main).items()):
        values[f"stall_{reason}"] = v
    facts = {"main_kernel": main.name(), "occupancy_limiter": occupancy_limiter(main),
             "kernels": [{"name": a.name(), "duration_us": (_value(a, "gpu__time_duration.sum") or 0.0) * 1e-3}
                         for a in actions]}
    return values, facts


def _plain(message: str) -> str:
    """ncu's rule text without its GUI link markup ('@section:Id:Title@' -> 'Title')."""
    text = re.sub(r"@\w+:[^:@]*:([^@]*)@", r"\1", str(message))
    return " ".join(text.split())


def findings(actions) -> list[dict]:
    """ncu's rule results with a title or an estimated speedup (its advice), deduplicated."""
    out, seen = [], set()
    for action in actions:
        for rule in action.rule_results_as_dicts():
            msg = rule.get("rule_message") or {}
            est = rule.get("speedup_estimation") or {}
            text = _plain(msg.get("message", ""))
            if not text or msg.get("type") == 3:  # type 3: ncu notes a metric it could not find
                continue
            key = (rule.get("rule_identifier"), msg.get("title"), text)
            if key in seen:
                continue
            seen.add(key)
            out.append({"rule": rule.get("rule_identifier", ""), "section": rule.get("section_identifier", ""),
                        "title": msg.get("title") or rule.get("name", ""), "message": text,
                        "speedup_pct": round(est["speedup"], 1) if "speedup" in est else None})
    return out


def nvtx_ranges(action) -> list[str]:
    """The NVTX ranges open at `action`'s launch: its thread's push/pop ranges, outermost first,
    then the process's start/end ranges not among them (a kernel another thread launched inside
    kernlog's range, such as autograd's backward, is in the latter only: kernlog.run.target)."""
    stack, spans = _ranges(action)
    return stack + [s for s in spans if s not in stack]


def _ranges(action) -> tuple[list[str], list[str]]:
    """(push/pop ranges outermost first, start/end ranges) open at `action`'s launch."""
    state = action.nvtx_state()
    if state is None:
        return [], []
    stack, spans = [], []
    for dom in state.domains():
        info = state.domain_by_id(dom)
        stack.extend(info.push_pop_ranges())
        spans.extend(info.start_end_ranges())
    return stack, spans


def _ncu_report():
    """PyPI's ncu-report where installed, else the module that ships with Nsight Compute
    (on the GPU machine it sits in <ncu install>/extras/python, outside any venv)."""
    try:
        import ncu_report
    except ImportError:
        ncu = find_ncu()
        extras = [Path(ncu).resolve().parent / "extras" / "python"] if ncu else []
        extras += sorted(Path("/opt/nvidia/nsight-compute").glob("*/extras/python"))
        for d in extras:
            if (d / "ncu_report.py").exists():
                sys.path.append(str(d))
                break
        try:
            import ncu_report
        except ImportError:
            raise KernlogError("cannot read .ncu-rep files: install the ncu-report package "
                               "(pip install ncu-report)") from None
    return ncu_report


def read_report(path) -> list:
    """Every action (profiled kernel launch) in the report, in order."""
    ncu_report = _ncu_report()
    if not Path(path).is_file():
        raise KernlogError(f"ncu report {path} is missing")
    try:
        ctx = ncu_report.load_report(str(path))
        actions = [ctx.range_by_idx(r).action_by_idx(i)
                   for r in range(ctx.num_ranges()) for i in range(ctx.range_by_idx(r).num_actions())]
    except Exception as exc:  # the library raises bare exceptions for unreadable files
        raise KernlogError(f"cannot read ncu report {path}: {exc}") from None
    if not actions:  # ncu_report loads a corrupt file as an empty report rather than failing
        raise KernlogError(f"ncu report {path} is empty or corrupt: it holds no profiled kernel")
    return actions


def group_by_range(actions, prefix: str) -> dict[str, list]:
    """Actions grouped by the innermost NVTX range whose name starts with `prefix` (push/pop ranges
    first, then start/end ones: nvtx_ranges), keyed by the full range name."""
    groups: dict[str, list] = {}
    for action in actions:
        stack, spans = _ranges(action)
        for name in [*reversed(stack), *reversed(spans)]:
            if name.startswith(prefix):
                groups.setdefault(name, []).append(action)
                break
    return groups


def replay_passes(actions) -> int | None:
    passes = [_value(a, "profiler__replayer_passes") for a in actions]
    passes = [p for p in passes if p is not None]
    return int(max(passes)) if passes else None
