"""Row-wise softmax over the last dimension, fp32 and bf16 (fp32 accumulation).

The ladder: naive CUDA C to a tuned kernel that beats F.softmax, then the Triton
counterpart and the framework references. Inputs may have a row stride larger than
the row; the output is contiguous.
"""
from __future__ import annotations

from pathlib import Path

import torch

from kernlog.spec import DTYPE_BYTES, Kernel, Revision, torch_dtype

HERE = Path(__file__).resolve().parent


def make_inputs(shape, dtype, gen, device, case="random"):
    rows, cols = shape
    pad = 3 if case == "strided" else 0
    x = torch.randn((rows, cols + pad), generator=gen, device=gen.device, dtype=torch.float32)
    if case == "large":
        x = x * 1e4  # exp overflows in fp32 without the max subtraction
    else:
        x = x * 3
    if case == "neg_inf":
        x[torch.rand(x.shape, generator=gen, device=gen.device) < 0.2] = float("-inf")
        x[0] = float("-inf")  # a whole row of -inf: F.softmax gives NaN
    if case == "nan":
        x[torch.rand(x.shape, generator=gen, device=gen.device) < 0.01] = float("nan")
    x = x.to(device=device, dtype=torch_dtype(dtype))
    return (x[:, :cols],)


def make_output(inputs):
    (x,) = inputs
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def reference(inputs, out=None):
    (x,) = inputs
    return torch.softmax(x.detach().to("cpu", torch.float64), dim=-1)


def bytes_moved(shape, dtype):
    rows, cols = shape
    return 2 * rows * cols * DTYPE_BYTES[dtype]


def _load_torch():
    return lambda inputs, out: torch.softmax(inputs[0], dim=-1)


def _load_torch_compile():
    fn = torch.compile(lambda x: torch.softmax(x, dim=-1), dynamic=False)
    return lambda inputs, out: fn(inputs[0])


REFERENCES = (
    Revision("torch", "torch", (HERE / "__init__.py",), _load_torch,
             "F.softmax, eager: PyTorch's own kernel", role="reference"),
    Revision("torch_compile", "torch", (HERE / "__init__.py",), _load_torch_compile,
             "torch.compile of F.softmax (Inductor's generated Triton)", role="reference"),
)

KERNEL = Kernel(
    name="softmax",
    revisions=REFERENCES,  # the CUDA C ladder and the Triton counterpart go first
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    check_shapes=((1, 1), (3, 1), (7, 33), (257, 64), (5, 1000), (17, 4097), (4, 12345), (2, 131073)),
    bench_shapes=((4096, 1024), (32768, 256), (8192, 4096), (4096, 8192), (4096, 32000),
                  (2048, 32768), (16384, 16384), (1024, 131072)),
    profile_shape=(8192, 4096),
    cases=("random", "large", "neg_inf", "nan", "strided"),
    doc=__doc__,
)
