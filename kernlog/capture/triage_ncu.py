"""triage's ncu pass: one launch of one kernel of TARGET's profiled call, matched by the
function name ncu gives it, and the figures kept from its report."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from kernlog import metrics
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


def skip_before(names: list[str], kernel_name: str) -> int:
    """Launches of `kernel_name`'s function (any instantiation) before its first own launch in
    one call's launch order `names`: what ncu skips inside the range to reach it."""
    fn = function_name(kernel_name)
    first = names.index(kernel_name)
    return sum(1 for n in names[:first] if function_name(n) == fn)


def ncu_command(ncu: str, kernel_name: str, skip: int, report: Path, root: Path, target: str,
                sections: tuple[str, ...] = TRIAGE_SECTIONS) -> list[str]:
    """One ncu process profiling one launch of `kernel_name` in the call of TARGET that runs
    between cudaProfilerStart and Stop (after warm calls outside): its function name matched whole,
    the `skip` launches of the same function before it in the call skipped."""
    whole = "^" + _REGEX_SPECIAL.sub(r"\\\1", function_name(kernel_name)) + "$"
    cmd = [ncu, "--target-processes", "all", *WINDOW,
           "--kernel-name-base", "function", "--kernel-name", f"regex:{whole}",
           "--launch-skip", str(skip), "--launch-count", "1",
           "--clock-control", "none", "--cache-control", "all", "--import-source", "no", "--export", str(report)]
    for s in sections:
        cmd += ["--section", s]
    return cmd + ["--metrics", ",".join(metrics.EXTRA_METRICS),
                  sys.executable, "-m", "kernlog.capture.triage", "--launch", str(root), target]


def ncu_figures(values: dict, facts: dict) -> dict:
    """The evidence kept per profiled kernel, from ncu.summarize's (values, facts)."""
    dram = values.get("dram_mb")
    return {"dram_bytes": dram * 1e6 if dram else None, "dram_pct": values.get("dram_pct"),
            "compute_pct": values.get("compute_pct"), "duration_us": values.get("duration_us"),
            "occupancy_pct": values.get("achieved_occupancy_pct"), "occupancy_limiter": facts.get("occupancy_limiter")}


def run_ncu(cmd: list[str], report: Path) -> dict:
    """GPU only: run one ncu command and read its report into ncu_figures."""
    from kernlog.capture.profiler import run_ncu as run

    try:
        run(cmd, NCU_TIMEOUT_S)
    except NothingProfiled:
        name = cmd[cmd.index("--kernel-name") + 1].removeprefix("regex:")
        skip = cmd[cmd.index("--launch-skip") + 1]
        raise KernlogError(f"ncu found no launch of {name} after skipping {skip} inside the profiled call "
                           "(between cudaProfilerStart and Stop)") from None
    return read_figures(report)


def read_figures(report: Path) -> dict:
    """ncu_figures of a stored report (its main kernel's)."""
    return ncu_figures(*ncu.summarize(ncu.read_report(report)))
