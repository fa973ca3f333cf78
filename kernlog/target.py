"""The process that ncu profiles. It warms each revision up outside any NVTX range (module
load, NVRTC compile and Triton autotuning stay out of the report), then launches it once
inside a push/pop range named RANGE_PREFIX + revision, which ncu's --nvtx-include selects.

Run as: python -m kernlog.target ROOT KERNEL SHAPE DTYPE REV [REV ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

RANGE_PREFIX = "kl."
WARMUP = 3


def main(argv: list[str]) -> int:
    import torch

    from .registry import load_kernel
    from .spec import parse_shape

    root, kernel_name, shape, dtype, *revs = argv
    kernel = load_kernel(Path(root), kernel_name)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = kernel.make_inputs(parse_shape(shape), dtype, gen, "cuda", kernel.cases[0])
    out = kernel.make_output(inputs)
    for name in revs:
        launch = kernel.revision(name).load()
        for _ in range(WARMUP):
            launch(inputs, out)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE_PREFIX + name)
        launch(inputs, out)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
