"""triage's ncu pass: one ncu process over every picked kernel of TARGET's profiled call,
matched by the function names ncu gives them, each kernel's figures read from the report's
action at the position of its first launch among the matched launches."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
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
# Launches one triage's ncu pass profiles at most. Every matched launch between the first and the
# last one needed is profiled (about 0.3 s each on the H100 with the sections above): before the
# budget, a GPT-2 small training step's pass needed 865 launches and a bf16 forward's 231, and both
# ran past their time.
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
    """One ncu run over the picked kernels of one call. ncu matches every launch of the plan's
    functions (sorted), skips the first `skip` of those and profiles the next `launch_count`;
    `expected` is what the trace says those launches are (function, blocks, threads a block: None
    where the trace did not record it), `positions` each profiled kernel's first launch among
    them, `left_out` the picked kernels left out to keep within the launch budget, with why."""
    functions: tuple[str, ...]
    skip: int
    launch_count: int
    positions: dict[str, int]
    expected: tuple[tuple[str, int | None, int | None], ...] = ()
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def regex(self) -> str:
        """The functions matched whole: ^(f1|f2|...)$, each escaped."""
        return "^(" + "|".join(_REGEX_SPECIAL.sub(r"\\\1", f) for f in self.functions) + ")$"


class _Launches:
    """One call's launch order, each launch's function name worked out once (a training step
    launches a thousand kernels, and the budget search plans many subsets of the picked ones)."""

    def __init__(self, order: list[str], sizes: list | None):
        names = {n: function_name(n) for n in set(order)}
        self.functions = [names[n] for n in order]
        self.sizes = list(sizes) if sizes is not None else [None] * len(order)
        self.first: dict[str, int] = {}
        for i, n in enumerate(order):
            self.first.setdefault(n, i)
        self.name_of = names

    def plan(self, picked: list[str]) -> NcuPlan:
        missing = [k for k in picked if k not in self.first]
        if missing:
            raise KernlogError(f"{missing[0][:80]} is not launched in the call's launch order")
        functions = tuple(sorted({self.name_of[k] for k in picked}))
        wanted = set(functions)
        matched = [i for i, f in enumerate(self.functions) if f in wanted]
        at = {i: j for j, i in enumerate(matched)}
        absolute = {k: at[self.first[k]] for k in picked}
        skip = min(absolute.values())
        count = max(absolute.values()) - skip + 1
        expected = tuple((self.functions[i], *(self.sizes[i] or (None, None))) for i in matched[skip:skip + count])
        return NcuPlan(functions, skip, count, {k: p - skip for k, p in absolute.items()}, expected)


def plan_ncu(order: list[str], picked: list[str], us: dict[str, float] | None = None,
             budget: int = MAX_LAUNCHES, sizes: list | None = None) -> NcuPlan:
    """The ncu run profiling each of `picked` once, from one call's launch order `order`
    (kernel names by GPU start; `sizes`, beside it, each launch's (blocks, threads a block) or
    None): every launch of a picked kernel's function (any instantiation) matches; ncu skips the
    matched launches before the first one needed and stops after the last. Over `budget`
    launches, picked kernels are left out one at a time, each time the one whose leaving saves
    the most launches per microsecond of GPU time it holds (`us`, by kernel), until the run fits
    or one kernel is left; then the left-out ones that fit again are taken back, most GPU time
    first. A left-out kernel is placed without ncu evidence."""
    if not picked:
        raise KernlogError("no kernel picked: nothing for ncu to profile")
    us = us or {}
    launches = _Launches(order, sizes)
    keep = list(picked)
    plan = launches.plan(keep)
    while plan.launch_count > budget and len(keep) > 1:
        def gain(k: str) -> float:
            saved = plan.launch_count - launches.plan([x for x in keep if x != k]).launch_count
            return saved / max(us.get(k, 0.0), 1e-6)
        keep.remove(max(keep, key=gain))
        plan = launches.plan(keep)
    for k in sorted((k for k in picked if k not in keep), key=lambda k: -us.get(k, 0.0)):
        if launches.plan([*keep, k]).launch_count <= budget:
            keep.append(k)
    why = (f"not profiled: ncu would have profiled over {budget} launches (every launch of a picked function between "
           "the first and the last one needed); the kernels that saved the most launches per microsecond of GPU time "
           "were left out")
    return replace(launches.plan([k for k in picked if k in keep]), left_out={k: why for k in picked if k not in keep})


def ncu_command(ncu: str, plan: NcuPlan, report: Path, root: Path, target: str,
                sections: tuple[str, ...] = TRIAGE_SECTIONS) -> list[str]:
    """One ncu process profiling `plan.launch_count` launches of the plan's functions (matched
    whole), after skipping `plan.skip` of them, in the call of TARGET that runs between
    cudaProfilerStart and Stop (after warm calls outside)."""
    cmd = [ncu, "--target-processes", "all", *WINDOW,
           "--kernel-name-base", "function", "--kernel-name", f"regex:{plan.regex}",
           *(["--launch-skip", str(plan.skip)] if plan.skip else []), "--launch-count", str(plan.launch_count),
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
    in launch order). The actions are first checked against the launches the trace expects
    (function, and blocks and threads where both sides know them): from the first one that
    differs, a launch was added, lost or reordered in the profiled call, every later position may
    hold another launch, and each kernel there gets an error instead of another kernel's figures."""
    departs, said = len(actions), ""
    for j, (action, (function, blocks, threads)) in enumerate(zip(actions, plan.expected, strict=False)):
        got = _geometry(action)
        if action.name() != function or _differs(got, (blocks, threads)):
            departs = j
            said = (f"the profiled call departs from the traced one at profiled launch {j}: expected {function}"
                    f"{_sized((blocks, threads))}, found {action.name()}{_sized(got)}")
            break
    out = {}
    for kernel, i in plan.positions.items():
        if i >= departs and said:
            out[kernel] = {"error": said}
        elif i >= len(actions):
            out[kernel] = {"error": f"expected {function_name(kernel)} at profiled launch {i}, but ncu profiled only "
                                    f"{len(actions)} launches"}
        else:
            out[kernel] = ncu_figures(*ncu.summarize([actions[i]]))
    return out | {k: {"error": why} for k, why in plan.left_out.items()}


def _geometry(action) -> tuple[int | None, int | None]:
    blocks, threads = (ncu.metric_value(action, n) for n in ("launch__grid_size", "launch__block_size"))
    return (None if blocks is None else int(blocks), None if threads is None else int(threads))


def _differs(got: tuple, want: tuple) -> bool:
    """Two (blocks, threads) differ where both sides know a figure."""
    return any(g is not None and w is not None and g != w for g, w in zip(got, want, strict=True))


def _sized(geometry: tuple) -> str:
    blocks, threads = geometry
    return "" if blocks is None or threads is None else f" ({blocks} blocks of {threads} threads)"


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
