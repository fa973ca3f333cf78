"""Where a profile sits on the roofline, and the bottleneck that placement argues.

Arithmetic intensity is the kernel's operations over its MINIMUM bytes (each input read once,
the output written once: `bytes_moved`), so DRAM traffic beyond the minimum lowers % of roofline
instead of moving the point to a roof it does not earn; the excess (measured DRAM bytes over the
minimum) is its own figure, "excess". Operations: the kernel's FLOP model (`Kernel.flops`, e.g. 2MNK for
matmul), else `Kernel.flops_per_element` times the output's elements (a model of the
arithmetic per element: exp, max, sum, scale for softmax), else unknown. The ceilings: the
copy bandwidth measured on the GPU (profiles/<gpu>/ceilings.json), and for compute the
cuBLAS bf16 matmul rate measured there (tensor cores) or, for a kernel on the CUDA cores,
the spec sheet's fp32 peak (SPEC_FP32_TFLOPS; unknown GPU: no compute ceiling).

Attainable = min(compute peak, intensity x bandwidth); % of roofline = achieved over
attainable. Without an operation count the bandwidth roof alone applies: the useful bytes
(each input read once, the output written once) per second over the copy bandwidth. The
label: the side of the ridge the kernel sits on; "-bound" only at >= BOUND of that roof,
else latency-bound, with what holds it (occupancy, the leading stall).
"""
from __future__ import annotations

import math

from kernlog.metrics import ranked_stalls
from kernlog.store.record import Profile

BOUND = 0.6  # of the roof it sits under: below this, the roof is not what limits it
# Dense fp32 (CUDA cores, no tensor cores), TFLOP/s, from NVIDIA's spec sheets (SXM parts).
SPEC_FP32_TFLOPS = {"NVIDIA H100 80GB HBM3": 66.9, "NVIDIA H200": 66.9}


def numel(shape) -> int:
    return math.prod(shape[:2]) if len(shape) == 3 else math.prod(shape)  # matmul MxNxK: the MxN output


def operations(prof: Profile, kernel=None) -> tuple[float | None, str]:
    """(FLOPs of the profiled launch, where the count comes from)."""
    if prof.flops:
        return float(prof.flops), "the kernel's FLOP model"
    per = getattr(kernel, "flops_per_element", 0) if kernel is not None else 0
    if per:
        return per * numel(prof.shape), f"{per:g} FLOP per output element (the kernel's model)"
    return None, "no FLOP model"


def place(prof: Profile, kernel=None) -> dict:
    """The profile's roofline placement: intensity, ceilings, attainable and achieved rates,
    % of roofline, the side of the ridge, and the bottleneck label."""
    m = prof.metrics
    seconds = m["wall_ms"] * 1e-3
    bw = prof.ceilings.get("copy_gbps")
    dram = m.get("dram_mb")
    dram_bytes = dram * 1e6 if dram else None
    flops, source = operations(prof, kernel)
    tensor = getattr(kernel, "ceiling", prof.ceiling) == "matmul"
    peak = (prof.ceilings.get("matmul_bf16_tflops") if tensor
            else SPEC_FP32_TFLOPS.get(prof.gpu.name))
    peak_name = "cuBLAS bf16 matmul (measured)" if tensor else "fp32 CUDA-core peak (spec)"
    out = {"flops": flops, "flops_source": source, "dram_bytes": dram_bytes, "bandwidth_gbps": bw,
           "peak_tflops": peak, "peak_name": peak_name, "intensity": None, "ridge": None,
           "attainable": None, "achieved": None, "unit": None, "pct_of_roof": None, "side": None,
           "excess": None}
    if not bw:
        out["label"] = "not placed: no copy bandwidth measured on this GPU"
        return out
    out["excess"] = dram_bytes / prof.bytes_moved if dram_bytes and prof.bytes_moved else None
    if flops and prof.bytes_moved:
        ai = flops / prof.bytes_moved
        roof = bw * 1e9 * ai / 1e12  # TFLOP/s the bandwidth allows at this intensity
        attainable = min(peak, roof) if peak else roof
        achieved = flops / seconds / 1e12
        ridge = peak * 1e12 / (bw * 1e9) if peak else None
        side = "compute" if ridge is not None and ai >= ridge else "memory"
        out.update(intensity=ai, ridge=ridge, attainable=attainable, achieved=achieved, unit="TFLOP/s",
                   side=side, pct_of_roof=achieved / attainable)
    else:
        achieved = prof.bytes_moved / seconds / 1e9
        out.update(attainable=bw, achieved=achieved, unit="GB/s", side="memory", pct_of_roof=achieved / bw)
    out["label"] = label(out, m, prof)
    return out


def label(p: dict, m: dict, prof: Profile) -> str:
    pct = p["pct_of_roof"]
    roof = "bandwidth roof" if p["side"] == "memory" else f"{p['peak_name']} roof"
    extra = ""
    if p["dram_bytes"] and p["dram_bytes"] > 1.15 * prof.bytes_moved:
        extra = f"; DRAM traffic {p['dram_bytes'] / prof.bytes_moved:.1f}x the minimum"
    if pct >= BOUND:
        unit = f"DRAM {m['dram_pct']:.0f}% of peak" if p["side"] == "memory" and m.get("dram_pct") is not None else (
            f"SM {m['compute_pct']:.0f}% of peak" if m.get("compute_pct") is not None else "")
        return f"{p['side']}-bound: {pct:.0%} of the {roof}" + (f" ({unit})" if unit else "") + extra
    stalls = ranked_stalls(m)
    held = []
    if m.get("achieved_occupancy_pct") is not None:
        held.append(f"occupancy {m['achieved_occupancy_pct']:.0f}%")
    if stalls:
        held.append(f"top stall {stalls[0][0].replace('_', ' ')} ({stalls[0][1]:.1f} cycles/inst)")
    return f"latency-bound: {pct:.0%} of the {roof} it sits under" + (f"; {', '.join(held)}" if held else "") + extra
