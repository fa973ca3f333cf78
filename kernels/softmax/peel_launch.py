"""v9_peeled's launcher: cuda_launch's, with one more bit in the key. A row that is not
16-byte aligned can still take 16-byte accesses after a peeled head when the output row sits at
the same offset from a boundary as the input row (`coaligned`: every row of a contiguous tensor,
whatever its length); the peeled layouts join v8's candidates there, and only there.

A file of its own, so the rungs before v9 (which hash cuda_launch.py) are not marked stale by it;
it registers v9's plan in cuda_launch.PLANS and NEEDS for the tests that walk every rung.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernels.common import tuning

from . import cuda_launch as cl

# (threads, cluster) per dtype and the elements a thread holds: bf16 v7's packed layouts (64),
# fp32 v5/v6's register rows (ELEMS = 32)
PEELED_CONFIGS = {"bf16": (cl.PACKED_CONFIGS, cl.PACKED_ELEMS),
                  "fp32": (((256, 1), (512, 1), (1024, 1), (256, 2), (512, 2), (256, 4), (512, 4), (256, 8),
                            (512, 8)), cl.ELEMS)}


def plan_v9(rows, cols, dtype, aligned):
    """v8's plan; for unaligned rows of > 1024 columns, the peeled layouts as candidates too
    (the launcher drops them where the output row is not at the input row's offset)."""
    out = cl.plan_v8(rows, cols, dtype, aligned)
    if not aligned and cols > 32 * cl.WARP_ELEMS[-1]:
        configs, per_thread = PEELED_CONFIGS[dtype]
        out = list(out) + [cl.Launch(f"softmax_{dtype}_peeled_t{t}_c{c}", rows * c, t, t * c * per_thread)
                           for t, c in configs if t * c * per_thread >= cols]
    return out


V9_NAMES = cl.V8_NAMES + tuple(f"softmax_{dt}_peeled_t{t}_c{c}" for dt, (configs, _) in PEELED_CONFIGS.items()
                               for t, c in configs)
cl.PLANS["v9_peeled"] = (plan_v9, V9_NAMES)
cl.NEEDS["v9_peeled"] = ("clusters",)


def coaligned(x, out) -> bool:
    """Whether every row of x and of out starts at the same offset from a 16-byte boundary."""
    return ((x.data_ptr() - out.data_ptr()) % 16 == 0
            and (x.stride(0) - x.shape[1]) * x.element_size() % 16 == 0)


def loader(source: Path) -> Callable[[], Callable]:
    """Revision.load for v9_peeled.cu: cuda_launch.loader's checks and workspace, planned by
    plan_v9 under the key (rows, cols, dtype, aligned, coaligned)."""

    def load():
        import numpy
        import torch

        from kernlog import cuda

        dtypes = {torch.float32: "fp32", torch.bfloat16: "bf16"}
        kernels, workspace = {}, [None]

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
            key = ("v9_peeled", rows, cols, dtypes[x.dtype], aligned, aligned or coaligned(x, out))
            if not kernels:
                cuda.require(x.device, cl.NEEDS["v9_peeled"])
                kernels.update(cuda.load_module(source, V9_NAMES))

            def run(step):
                ws = workspace[0]
                if ws is None or ws.numel() < 2 * step.grid or ws.device != x.device:
                    ws = workspace[0] = torch.empty(2 * step.grid, dtype=torch.float32, device=x.device)
                args = (cuda.ptr(x), cuda.ptr(out), numpy.int32(rows), numpy.int32(cols), numpy.int64(x.stride(0)),
                        cuda.ptr(ws))
                cuda.launch(kernels[step.kernel], (step.grid, 1, 1), (step.block, 1, 1), args)
                if step.then:
                    cuda.launch(kernels[step.then], (step.grid, 1, 1), (step.block, 1, 1), args)

            steps = None
            if key not in tuning.PICKED:
                steps = plan_v9(*key[1:5])
                if isinstance(steps, list) and not key[5]:
                    steps = [s for s in steps if "_peeled_" not in s.kernel]
            if steps is None or isinstance(steps, list):
                steps = tuning.pick(key, steps, run, x.device)
            run(steps)
            return out

        return launch

    return load
