"""The metric catalog, defined once, and the views of a stored record it gives.

Each metric knows its ncu source, unit, how several kernels of one revision combine, and
its good direction (so diff can say better or worse). A metric a report lacks is "not
collected" (None), never zero. Reading a report is kernlog.capture.ncu's.
"""
from __future__ import annotations

from dataclasses import dataclass

# Sections named explicitly (not a --set) so metrics stay comparable across ncu versions.
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis",
            "MemoryWorkloadAnalysis_Tables", "ComputeWorkloadAnalysis", "SchedulerStats",
            "SourceCounters")
# Collected beside the sections: the sections show these only as ratios or not at all.
EXTRA_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum",
                 "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                 "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                 "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
                 "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
                 "sass__inst_executed_register_spilling", "smsp__inst_executed.sum")

STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
# Not stalls: 'selected' is the issuing warp itself, 'not_selected' a ready warp passed over.
NOT_STALLS = ("selected", "not_selected")


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    better: str | None  # "lower", "higher", or None where no direction is good in itself
    ncu: tuple[str, ...] = ()  # ncu metrics summed into this one (across names and kernels)
    scale: float = 1.0
    combine: str = "main"  # "sum" over a revision's kernels, or taken from its "main" (longest) one
    # What the value is, for noise bands and units: time, amount (work done: bytes,
    # instructions), rate (amount per time), util (% of a peak), stall (cycles per issued
    # instruction), config (a launch parameter), ratio (hit rates and the like).
    kind: str = "amount"
    # A direction holds only while this amount stays the same: a rate is no better for moving
    # more bytes, a stall per instruction no worse when far fewer instructions issue.
    given: str | None = None


CATALOG: tuple[Metric, ...] = (
    Metric("wall_ms", "wall time (median, no ncu)", "ms", "lower", kind="time"),
    Metric("duration_us", "ncu duration", "us", "lower", ("gpu__time_duration.sum",), 1e-3, "sum", kind="time"),
    Metric("dram_mb", "DRAM bytes read+written", "MB", "lower",
           ("dram__bytes_read.sum", "dram__bytes_write.sum"), 1e-6, "sum"),
    Metric("dram_gbps", "DRAM throughput", "GB/s", "higher", ("dram__bytes.sum.per_second",), 1e-9,
           kind="rate", given="dram_mb"),
    Metric("dram_pct", "DRAM throughput, % of peak", "%", "higher",
           ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",), kind="util", given="dram_mb"),
    Metric("memory_pct", "memory throughput, % of peak", "%", None,
           ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",), kind="util"),
    Metric("compute_pct", "compute (SM) throughput, % of peak", "%", None,
           ("sm__throughput.avg.pct_of_peak_sustained_elapsed",), kind="util"),
    Metric("achieved_occupancy_pct", "achieved occupancy", "%", None,
           ("sm__warps_active.avg.pct_of_peak_sustained_active",), kind="util"),
    Metric("theoretical_occupancy_pct", "theoretical occupancy", "%", None,
           ("sm__maximum_warps_per_active_cycle_pct",), kind="config"),
    Metric("issue_active_pct", "issue slots busy", "%", "higher",
           ("smsp__issue_active.avg.pct_of_peak_sustained_active",), kind="util", given="instructions"),
    Metric("instructions", "warp instructions executed", "M inst", "lower", ("smsp__inst_executed.sum",), 1e-6, "sum"),
    Metric("registers_per_thread", "registers per thread", "regs/thread", None, ("launch__registers_per_thread",),
           kind="config"),
    Metric("smem_per_block", "shared memory per block", "B", None,
           ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"), kind="config"),
    Metric("block_size", "block size", "threads", None, ("launch__block_size",), kind="config"),
    Metric("grid_size", "grid size", "blocks", None, ("launch__grid_size",), kind="config"),
    Metric("ld_sectors_per_request", "global-load sectors per request", "sectors/req", None, kind="ratio"),
    Metric("ld_sectors", "global-load sectors (L1)", "M sectors", "lower",
           ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",), 1e-6, "sum"),
    Metric("l1_hit_pct", "L1 hit rate", "%", None, ("l1tex__t_sector_hit_rate.pct",), kind="ratio"),
    Metric("l2_hit_pct", "L2 hit rate", "%", None, ("lts__t_sector_hit_rate.pct",), kind="ratio"),
    Metric("spill_insts", "register-spill instructions", "inst", "lower",
           ("sass__inst_executed_register_spilling",), 1.0, "sum"),
    Metric("local_sectors", "local-memory sectors", "sectors", "lower",
           ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"),
           1.0, "sum"),
)
BY_KEY = {m.key: m for m in CATALOG}
KINDS = ("time", "amount", "rate", "util", "stall", "config", "ratio")
OCCUPANCY_LIMITS = ("registers", "shared_mem", "warps", "blocks", "barriers")


def stall_metric(reason: str) -> Metric:
    return Metric(f"stall_{reason}", f"stall: {reason.replace('_', ' ')}", "cycles/inst", "lower",
                  kind="stall", given="instructions")


def metric(key: str) -> Metric:
    if key in BY_KEY:
        return BY_KEY[key]
    if key.startswith("stall_"):
        return stall_metric(key[len("stall_"):])
    return Metric(key, key, "", None, kind="ratio")


def ranked_stalls(values: dict) -> list[tuple[str, float]]:
    """(reason, cycles per issued instruction) of the stalls in a profile's metrics, the largest first."""
    return sorted(((k[len("stall_"):], v) for k, v in values.items() if k.startswith("stall_") and v),
                  key=lambda kv: (kv[1], kv[0]), reverse=True)


def ncu_filter(prof) -> str | None:
    """The regex of kernel names the profile's ncu pass (a kernlog.store.record.Profile) was
    limited to (Kernel.ncu_kernels), or None."""
    cmd = prof.ncu.command or []
    i = cmd.index("--kernel-name") if "--kernel-name" in cmd else -1
    return cmd[i + 1].removeprefix("regex:") if 0 <= i < len(cmd) - 1 else None


def time_shares(prof, n: int = 8) -> list[dict]:
    """The launch's kernels by GPU time from its CUPTI trace (a Profile's kernel_times), the
    longest `n` and the rest as one row: name (shortened), launches, microseconds, share of the total."""
    kt = prof.kernel_times or {}
    total = kt.get("total_us") or 0.0
    rows = list(kt.get("kernels") or [])
    if not total or not rows:
        return []
    head, tail = rows[:n], rows[n:]
    if tail:
        head.append({"name": f"{len(tail)} more rows", "count": sum(r["count"] for r in tail),
                     "us": sum(r["us"] for r in tail)})
    return [{"name": _short(r["name"]), "count": r["count"], "us": r["us"], "share": 100.0 * r["us"] / total}
            for r in head]


def _short(name: str, width: int = 70) -> str:
    name = name.removeprefix("void ")
    return name if len(name) <= width else name[:width - 1] + "…"
