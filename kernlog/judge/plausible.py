"""Impossible numbers: a bandwidth past the GPU's ceilings is a measurement bug, not a win.

The measured ceiling is the same GPU's device-to-device copy (profiles/<gpu>/ceilings.json,
recorded in every profile); the spec ceiling is the datasheet's DRAM bandwidth, which no
kernel exceeds at all.
"""
from __future__ import annotations

from kernlog.store.record import Profile

# Datasheet DRAM bandwidth, GB/s, by the name torch reports.
SPEC_DRAM_GBPS = {
    "NVIDIA H100 80GB HBM3": 3350.0,
    "NVIDIA H100 PCIe": 2000.0,
    "NVIDIA H100 NVL": 3900.0,
    "NVIDIA H200": 4800.0,
    "NVIDIA A100-SXM4-80GB": 2039.0,
    "NVIDIA A100-SXM4-40GB": 1555.0,
    "NVIDIA A100 80GB PCIe": 1935.0,
    "NVIDIA L4": 300.0,
    "NVIDIA L40S": 864.0,
}


def spec_dram_gbps(gpu_name: str) -> float | None:
    if gpu_name in SPEC_DRAM_GBPS:
        return SPEC_DRAM_GBPS[gpu_name]
    for name, v in SPEC_DRAM_GBPS.items():  # "NVIDIA H200 NVL", "NVIDIA H200 141GB" ...
        if gpu_name.startswith(name):
            return v
    return None


def achieved_gbps(prof: Profile) -> float | None:
    """Bytes the operator must move (each input read once, output written once) over the
    median wall time."""
    ms = prof.metrics.get("wall_ms")
    moved = prof.bytes_moved
    if not ms or not moved:
        return None
    return moved / ms / 1e6


def impossible(prof: Profile, rel_band: float) -> list[str]:
    """One line per figure of `prof` that no correct measurement can give: an achieved or ncu
    DRAM bandwidth over the measured copy by more than `rel_band`, or over the spec peak."""
    out = []
    copy = prof.ceilings.get("copy_gbps")
    spec = spec_dram_gbps(prof.gpu.name)
    what = f"{prof.kernel}/{prof.revision}"
    # An imported profile's time is ncu's duration, which leaves out what an event-timed copy
    # pays: only the spec peak bounds it (an imported Triton softmax reached 106% of the copy).
    ncu_timed = prof.timing.source == "ncu duration"
    figures = (("achieved bandwidth (bytes moved / wall time)", achieved_gbps(prof)),
               ("ncu DRAM throughput", prof.metrics.get("dram_gbps")))
    for name, v in figures:
        if v is None:
            continue
        if spec is not None and v > spec:
            out.append(f"{what}: {name} {v:.0f} GB/s exceeds the GPU's spec peak {spec:.0f} GB/s: "
                       "a measurement bug, not a win")
        elif copy and v > copy * (1 + rel_band) and not ncu_timed:
            out.append(f"{what}: {name} {v:.0f} GB/s exceeds the measured copy ceiling {copy:.0f} GB/s "
                       f"by more than the {100 * rel_band:.1f}% band: check the timing and bytes_moved")
    return out
