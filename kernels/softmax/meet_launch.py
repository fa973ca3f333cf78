"""v10_meet's launcher: v9's plan and key, plus the meeting layouts (v10_meet.cu) as candidates
for 16-byte rows of more than MEET_FROM columns that split into 2..MEET_CAP chunks, and the
slots they meet in: MEET_CAP int64 words a row, per device, zeros at first (epoch 0), grown on
demand and never emptied (every launch leaves a row's slots in one epoch; the kernel reads it).

A file of its own, so v4-v9 (which hash cuda_launch.py and peel_launch.py) are not marked stale.
`loader(source, polls)`: polls before a block computes its row's (max, sum) itself; 0 forces
that path everywhere (the tests check it agrees bitwise with the meeting).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernels.common import tuning

from . import cuda_launch as cl
from . import peel_launch

MEET_CAP = 32  # v10_meet.cu's slots a row
MEET_THREADS = (256, 512, 1024)
MEET_FROM = 16384  # shorter rows fit one block of v6's layouts; no split can win there
GPU_POLLS = 4096  # ~1 us each: a row's chunks waiting for a late one fall back after a few ms


# (kernel name pattern, elements a thread holds, dtypes): the widened layouts, and bf16's packed ones
MEET_LAYOUTS = (("softmax_{dt}_meet_t{t}", cl.ELEMS, cl.DTYPES),
                ("softmax_{dt}_meet_packed_t{t}", cl.PACKED_ELEMS, ("bf16",)))


def _meets(rows, cols, dtype, aligned):
    if not aligned or cols <= MEET_FROM:
        return []
    out = []
    for pattern, per_thread, dtypes in MEET_LAYOUTS:
        for t in MEET_THREADS if dtype in dtypes else ():
            split = -(-cols // (t * per_thread))  # 16-byte rows: whole vectors, so whole elements count
            if 2 <= split <= MEET_CAP:
                out.append(cl.Launch(pattern.format(dt=dtype, t=t), rows * split, t, t * split * per_thread))
    return out


def plan_v10(rows, cols, dtype, aligned):
    """v9's plan, with the meeting layouts as candidates beside it."""
    out = peel_launch.plan_v9(rows, cols, dtype, aligned)
    meets = _meets(rows, cols, dtype, aligned)
    if not meets:
        return out
    return (out if isinstance(out, list) else [out]) + meets


V10_NAMES = peel_launch.V9_NAMES + tuple(pattern.format(dt=dt, t=t) for pattern, _, dtypes in MEET_LAYOUTS
                                         for dt in dtypes for t in MEET_THREADS)
cl.PLANS["v10_meet"] = (plan_v10, V10_NAMES)
cl.NEEDS["v10_meet"] = ("clusters",)


def loader(source: Path, polls: int = GPU_POLLS) -> Callable[[], Callable]:
    """Revision.load for v10_meet.cu: v9's checks, workspace and key, planned by plan_v10."""

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
            key = ("v10_meet", rows, cols, dtypes[x.dtype], aligned, aligned or peel_launch.coaligned(x, out))
            if not kernels:
                cuda.require(x.device, cl.NEEDS["v10_meet"])
                kernels.update(cuda.load_module(source, V10_NAMES))

            def run(step):
                ws = workspace[0]
                if ws is None or ws.numel() < 2 * step.grid or ws.device != x.device:
                    ws = workspace[0] = torch.empty(2 * step.grid, dtype=torch.float32, device=x.device)
                args = (cuda.ptr(x), cuda.ptr(out), numpy.int32(rows), numpy.int32(cols), numpy.int64(x.stride(0)),
                        cuda.ptr(ws))
                if "_meet_" in step.kernel:
                    sl = slots.get(x.device)
                    if sl is None or sl.numel() < rows * MEET_CAP:
                        sl = slots[x.device] = torch.zeros(rows * MEET_CAP, dtype=torch.int64, device=x.device)
                    args += (cuda.ptr(sl), numpy.int32(polls))
                cuda.launch(kernels[step.kernel], (step.grid, 1, 1), (step.block, 1, 1), args)
                if step.then:
                    cuda.launch(kernels[step.then], (step.grid, 1, 1), (step.block, 1, 1), args)

            steps = None
            if key not in tuning.PICKED:
                steps = plan_v10(*key[1:5])
                if isinstance(steps, list) and not key[5]:
                    steps = [s for s in steps if "_peeled_" not in s.kernel]
            if steps is None or isinstance(steps, list):
                steps = tuning.pick(key, steps, run, x.device)
            run(steps)
            return out

        return launch

    return load
