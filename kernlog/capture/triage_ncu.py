"""triage's ncu pass: one ncu process over every picked kernel of TARGET's profiled call,
matched by the function names ncu gives them, each kernel's figures read from the report's
action at the position of its first launch among the matched launches."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kernlog.capture import ncu
from kernlog.capture.ncurun import NothingProfiled
from kernlog.errors import KernlogError

NCU_TIMEOUT_S = 600.0

_REGEX_SPECIAL = re.compile(r"([.^$|?*+()\[\]{}\\])")
# ncu profiles only between cudaProfilerStart and cudaProfilerStop, around the profiled call: a
# process-wide window (an NVTX push/pop range is one thread's, and autograd launches a backward's
# kernels from its own thread)
WINDOW = ["--profile-from-start", "off"]
TRIAGE_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy")  # what ncu_figures reads, no more
TRIAGE_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")  # ncu_figures' DRAM bytes: no other extra
# Launches one triage's ncu pass profiles at most. Every launch of a matched function up to the last
# one needed is profiled (about 0.3 s each on the H100 with the sections above): a GPT-2 small
# training step needed 865, a bf16 forward 231, and both ran past their time; resnet50's 262 took
# most of its 131 s.
MAX_LAUNCHES = 250


def _strip_group(text: str, open_: str, close: str) -> str:
    """`text` without its trailing balanced `open_ ... close` group, if it ends with one."""
    if not text.endswith(close):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {close: 1, open_: -1}.get(text[i], 0)
        if depth == 0:
            return text[:i]
    return text


def function_name(kernel_name: str) -> str:
    """The kernel's function name as ncu's `--kernel-name-base function` spells it, from the
    CUPTI trace's demangled name: no return type, parameters, template arguments or scope.
    (ncu's demangled names differ from CUPTI's: `<unnamed>` for `(anonymous namespace)`,
    `(int)4` for `4`, template parameters for the argument types, so whole names never match.)"""
    name = _strip_group(kernel_name.strip(), "(", ")").strip()
    name = _strip_group(name, "<", ">").strip()
    name = name.rsplit("::", 1)[-1]
    return name.rsplit(" ", 1)[-1]


@dataclass(frozen=True)
class NcuPlan:
    """One ncu run over the picked kernels of one call: the function names it matches (sorted),
    how many matched launches it profiles, each profiled kernel's position among them (its
    first launch in the call), the picked kernels left out to keep within the launch budget,
    with why, and the (blocks, threads a block) the trace recorded for each kernel's first launch,
    which the action at its position must show."""
    functions: tuple[str, ...]
    launch_count: int
    positions: dict[str, int]
    left_out: dict[str, str] = field(default_factory=dict)
    geometry: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def regex(self) -> str:
        """The functions matched whole: ^(f1|f2|...)$, each escaped."""
        return "^(" + "|".join(_REGEX_SPECIAL.sub(r"\\\1", f) for f in self.functions) + ")$"


def _plan(order: list[str], picked: list[str]) -> NcuPlan:
    functions = tuple(sorted({function_name(k) for k in picked}))
    matched = [n for n in order if function_name(n) in functions]
    missing = [k for k in picked if k not in matched]
    if missing:
        raise KernlogError(f"{missing[0][:80]} is not launched in the call's launch order")
    positions = {k: matched.index(k) for k in picked}
    return NcuPlan(functions, max(positions.values()) + 1, positions)


def plan_ncu(order: list[str], picked: list[str], us: dict[str, float] | None = None,
             budget: int = MAX_LAUNCHES, geometry: dict[str, tuple[int, int]] | None = None) -> NcuPlan:
    """The ncu run profiling each of `picked` once, from one call's launch order `order`
    (kernel names by GPU start): every launch of a picked kernel's function (any instantiation)
    matches, so a kernel's position is its first launch's index among those; ncu stops after
    the last position needed. Over `budget` launches, picked kernels are left out one at a time,
    each time the one whose leaving saves the most launches per microsecond of GPU time it
    holds (`us`, by kernel), until the run fits; a left-out kernel is placed without ncu evidence.
    `geometry`: each kernel's first launch's (blocks, threads a block), checked against the report."""
    if not picked:
        raise KernlogError("no kernel picked: nothing for ncu to profile")
    us = us or {}
    keep = list(picked)
    plan = _plan(order, keep)
    while plan.launch_count > budget and len(keep) > 1:
        def gain(k: str) -> float:
            saved = plan.launch_count - _plan(order, [x for x in keep if x != k]).launch_count
            return saved / max(us.get(k, 0.0), 1e-6)
        keep.remove(max(keep, key=gain))
        plan = _plan(order, keep)
    why = (f"not profiled: ncu would have profiled over {budget} launches (every launch of a picked function up to "
           "the last one needed); the kernels that saved the most launches per microsecond of GPU time were left out")
    return NcuPlan(plan.functions, plan.launch_count, plan.positions, {k: why for k in picked if k not in keep},
                   {k: g for k, g in (geometry or {}).items() if k in plan.positions})


def ncu_command(ncu: str, plan: NcuPlan, report: Path, root: Path, target: str,
                sections: tuple[str, ...] = TRIAGE_SECTIONS) -> list[str]:
    """One ncu process profiling the first `plan.launch_count` launches of the plan's functions
    (matched whole) in the call of TARGET that runs between cudaProfilerStart and Stop (after
    warm calls outside)."""
    cmd = [ncu, "--target-processes", "all", *WINDOW,
           "--kernel-name-base", "function", "--kernel-name", f"regex:{plan.regex}",
           "--launch-count", str(plan.launch_count),
           "--clock-control", "none", "--cache-control", "all", "--import-source", "no", "--export", str(report)]
    for s in sections:
        cmd += ["--section", s]
    return cmd + ["--metrics", ",".join(TRIAGE_METRICS),
                  sys.executable, "-m", "kernlog.capture.triage", "--launch", str(root), target]


def ncu_figures(values: dict, facts: dict) -> dict:
    """The evidence kept per profiled kernel, from ncu.summarize's (values, facts)."""
    dram = values.get("dram_mb")
    return {"dram_bytes": dram * 1e6 if dram else None, "dram_pct": values.get("dram_pct"),
            "compute_pct": values.get("compute_pct"), "duration_us": values.get("duration_us"),
            "occupancy_pct": values.get("achieved_occupancy_pct"), "occupancy_limiter": facts.get("occupancy_limiter")}


def nothing_profiled(plan: NcuPlan) -> dict:
    """Every picked kernel's error where ncu matched no launch inside the window."""
    said = (f"ncu profiled nothing: no launch of {', '.join(plan.functions)} inside the profiled call "
            "(between cudaProfilerStart and Stop)")
    return {k: {"error": said} for k in plan.positions} | {k: {"error": why} for k, why in plan.left_out.items()}


def figures_by_kernel(actions: list, plan: NcuPlan) -> dict:
    """Each picked kernel's ncu_figures from the action at its position (the report's actions
    in launch order); an error for a kernel whose position holds no action or another function."""
    out = {}
    for kernel, i in plan.positions.items():
        want = function_name(kernel)
        if i >= len(actions):
            out[kernel] = {"error": f"expected {want} at matched launch {i}, but ncu profiled only "
                                    f"{len(actions)} launches"}
        elif actions[i].name() != want:
            out[kernel] = {"error": f"expected {want} at matched launch {i}, found {actions[i].name()}"}
        elif _other_geometry(actions[i], plan.geometry.get(kernel)):
            out[kernel] = {"error": f"expected {want} at matched launch {i} with {_said(plan.geometry[kernel])}, "
                                    f"found {_said(_geometry(actions[i]))}: the profiled call launched in "
                                    "another order than the traced one"}
        else:
            out[kernel] = ncu_figures(*ncu.summarize([actions[i]]))
    return out | {k: {"error": why} for k, why in plan.left_out.items()}


def _geometry(action) -> tuple[int | None, int | None]:
    blocks, threads = (ncu.metric_value(action, n) for n in ("launch__grid_size", "launch__block_size"))
    return (None if blocks is None else int(blocks), None if threads is None else int(threads))


def _other_geometry(action, expected: tuple[int, int] | None) -> bool:
    """The action's launch differs from the trace's (blocks, threads); unknown on either side: no."""
    if expected is None:
        return False
    return any(got is not None and got != want for got, want in zip(_geometry(action), expected, strict=True))


def _said(geometry) -> str:
    blocks, threads = geometry
    return f"{blocks} blocks of {threads} threads"


def run_ncu(cmd: list[str], report: Path, plan: NcuPlan) -> dict:
    """GPU only: run the one ncu command and read its report: figures (or an error) by kernel name."""
    from kernlog.capture.profiler import run_ncu as run

    try:
        run(cmd, NCU_TIMEOUT_S)
    except NothingProfiled:
        return nothing_profiled(plan)
    return read_figures(report, plan)


def read_figures(report: Path, plan: NcuPlan) -> dict:
    """figures_by_kernel of a report ncu wrote."""
    return figures_by_kernel(ncu.read_report(report), plan)
