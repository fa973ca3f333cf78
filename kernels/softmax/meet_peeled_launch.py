"""v11_meet_peeled's launcher: v10's plan, plus the peeled meeting layouts (v11_meet_peeled.cu)
as candidates for rows of more than MEET_FROM columns that split into 2..MEET_CAP chunks: bf16's
(exponentials held packed) on every row whose output sits at the input's offset, aligned or not;
fp32's on the rows that are not aligned (an aligned one has v10's meeting, the same chunk).

The plan splits a row of n = cols // VW vectors (the most a row's offset leaves for its body) into
ceil(n / PER) chunks of PER vectors; the kernel deals the head and tail scalars to chunk 0 and to
the chunk of the last body vector, so every offset's row fits. The slots are v10's (meet_launch).

A file of its own, so v10 (which hashes meet_launch.py) is not marked stale by it. Its loader is
meet_launch.loader's, with v11's plan, kernels and key.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernels.common import tuning

from . import cuda_launch as cl
from . import meet_launch as ml
from . import peel_launch

# (kernel name pattern, elements a thread holds, threads) per dtype
PEELED_MEETS = {"bf16": ("softmax_bf16_meet_peeled_t{t}", cl.PACKED_ELEMS, (128, 256, 512)),
                "fp32": ("softmax_fp32_meet_peeled_t{t}", cl.ELEMS, (256, 512, 1024))}


def _peeled_meets(rows, cols, dtype, aligned):
    if cols <= ml.MEET_FROM or (aligned and dtype == "fp32"):
        return []
    pattern, per_thread, threads = PEELED_MEETS[dtype]
    vw = cl.vector_width(dtype)
    out = []
    for t in threads:
        per = t * per_thread // vw  # vectors a chunk
        split = -(-(cols // vw) // per)
        if 2 <= split <= ml.MEET_CAP:
            out.append(cl.Launch(pattern.format(t=t), rows * split, t, split * per * vw + vw - 1))
    return out


def plan_v11(rows, cols, dtype, aligned):
    """v10's plan, with the peeled meeting layouts as candidates beside it (the launcher drops
    them where the output row is not at the input row's offset)."""
    out = ml.plan_v10(rows, cols, dtype, aligned)
    meets = _peeled_meets(rows, cols, dtype, aligned)
    if not meets:
        return out
    return (out if isinstance(out, list) else [out]) + meets


V11_NAMES = ml.V10_NAMES + tuple(pattern.format(t=t) for pattern, _, threads in PEELED_MEETS.values()
                                 for t in threads)
cl.PLANS["v11_meet_peeled"] = (plan_v11, V11_NAMES)
cl.NEEDS["v11_meet_peeled"] = ("clusters",)


def loader(source: Path, polls: int = ml.GPU_POLLS) -> Callable[[], Callable]:
    """Revision.load for v11_meet_peeled.cu: v10's checks, workspace and slots, planned by plan_v11
    under the key (rows, cols, dtype, aligned, coaligned)."""

    def load():
        import numpy
        import torch

        from kernlog import cuda

        dtypes = {torch.float32: "fp32", torch.bfloat16: "bf16"}
        kernels, workspace, slots = {}, [None], {}

        def launch(inputs, out):
            (x,) = inputs
            if x.dim() != 2 or x.dtype not in dtypes or out.shape != x.shape or out.dtype != x.dtype:
                raise ValueError(f"softmax wants a 2-D fp32/bf16 x and a like-shaped out, got "
                                 f"{tuple(x.shape)} {x.dtype} -> {tuple(out.shape)} {out.dtype}")
            if not out.is_contiguous():
                raise ValueError("softmax writes a contiguous output")
            if x.stride(1) != 1:
                x = x.contiguous()
            rows, cols = x.shape
            if rows == 0 or cols == 0:
                return out
            aligned = cl.is_aligned(x, out)
            key = ("v11_meet_peeled", rows, cols, dtypes[x.dtype], aligned,
                   aligned or peel_launch.coaligned(x, out))
            if not kernels:
                cuda.require(x.device, cl.NEEDS["v11_meet_peeled"])
                kernels.update(cuda.load_module(source, V11_NAMES))

            def run(step):
                ws = workspace[0]
                if ws is None or ws.numel() < 2 * step.grid or ws.device != x.device:
                    ws = workspace[0] = torch.empty(2 * step.grid, dtype=torch.float32, device=x.device)
                args = (cuda.ptr(x), cuda.ptr(out), numpy.int32(rows), numpy.int32(cols), numpy.int64(x.stride(0)),
                        cuda.ptr(ws))
                if "_meet_" in step.kernel:
                    sl = slots.get(x.device)
                    if sl is None or sl.numel() < rows * ml.MEET_CAP:
                        sl = slots[x.device] = torch.zeros(rows * ml.MEET_CAP, dtype=torch.int64, device=x.device)
                    args += (cuda.ptr(sl), numpy.int32(polls))
                cuda.launch(kernels[step.kernel], (step.grid, 1, 1), (step.block, 1, 1), args)
                if step.then:
                    cuda.launch(kernels[step.then], (step.grid, 1, 1), (step.block, 1, 1), args)

            steps = None
            if key not in tuning.PICKED:
                steps = plan_v11(*key[1:5])
                if isinstance(steps, list) and not key[5]:
                    steps = [s for s in steps if "_peeled_" not in s.kernel]
            if steps is None or isinstance(steps, list):
                steps = tuning.pick(key, steps, run, x.device)
            run(steps)
            return out

        return launch

    return load
