"""RMSNorm forward over the last dimension, with weight, fp32 and bf16.

Inputs are (x, weight, eps); the mean of squares in fp32. The "large" case scales x by 1e3
(squares near 1e6 per element, sums near 1e10 at the longest rows) to catch a kernel that
accumulates in the input dtype.
"""
from __future__ import annotations

from pathlib import Path

from kernels.common import TUNING_SOURCE, LazyModule
from kernels.common.norm_families import FAMILIES
from kernlog.frameworks import liger, references
from kernlog.spec import DTYPE_BYTES, Kernel, Revision, torch_dtype

torch = LazyModule("torch", globals())
F = LazyModule("torch.nn.functional", globals())
liger_rms_norm = LazyModule("liger_kernel.ops.rms_norm", globals(), optional=True)
HERE = Path(__file__).resolve().parent
COMMON = HERE.parent / "common"
EPS = 1e-6


def make_inputs(shape, dtype, gen, device, case="random"):
    rows, cols = shape
    x = torch.randn((rows, cols), generator=gen, device=gen.device)
    if case == "large":
        x = x * 1e3
    w = 1.0 + 0.5 * torch.randn(cols, generator=gen, device=gen.device)
    x, w = (t.to(device=device, dtype=torch_dtype(dtype)) for t in (x, w))
    return (x, w, EPS)


def make_output(inputs):
    return torch.empty_like(inputs[0])


def reference(inputs, out=None):
    x, w = (t.detach().to(torch.float64) for t in inputs[:2])
    return F.rms_norm(x, (x.shape[-1],), w, inputs[2])


def bytes_moved(shape, dtype):
    rows, cols = shape
    return (2 * rows * cols + cols) * DTYPE_BYTES[dtype]


def _load_v0():
    from .v0_triton import rmsnorm

    return lambda inputs, out: rmsnorm(*inputs, out)


def _load_v1():
    from .v1_looped import rmsnorm

    return lambda inputs, out: rmsnorm(*inputs, out)


def _load_v2():
    from .v2_aligned import rmsnorm

    return lambda inputs, out: rmsnorm(*inputs, out)


def _load_v3():
    from .v3_wide import rmsnorm

    return lambda inputs, out: rmsnorm(*inputs, out)


REVISIONS = (
    Revision("v0_triton", "triton", (HERE / "v0_triton.py", COMMON / "rownorm.py", TUNING_SOURCE), _load_v0,
             "whole rows in registers, fp32 sum of squares, one read of x and one write of y; "
             "rows per program and warps autotuned on the row length",
             "~90% of copy bw at 8192x4096 (fp32 and bf16); >= eager and torch.compile"),
    Revision("v1_looped", "triton", (HERE / "v1_looped.py", HERE / "v0_triton.py", COMMON / "rownorm.py",
                                          TUNING_SOURCE), _load_v1,
             "adds a looped kernel (chunks of 1024-4096, the row read back from cache, evict hints) as candidates "
             "beside v0's whole rows, picked per shape; rows of any length",
             "fp32 >= torch.compile at 8192x4096; bf16 as v0"),
    Revision("v2_aligned", "triton", (HERE / "v2_aligned.py", COMMON / "rownorm_aligned.py", COMMON / "rownorm.py",
                                      TUNING_SOURCE), _load_v2,
             "v1's choice between whole rows and the loop, its whole-row kernel told that the row length and "
             "strides are multiples of 8 (sizes passed divided by 8): rows like 1000 vectorize",
             "16384x1000 >= torch.compile in bf16 and fp32 (v1 bf16: 0.90x); "
             "every other member as v1"),
    Revision("v3_wide", "triton", (HERE / "v3_wide.py", COMMON / "rownorm_aligned.py", COMMON / "rownorm.py",
                                   TUNING_SOURCE), _load_v3,
             "v2, with one row at 32 warps (1024 threads) among its whole-row candidates: long rows at twice "
             "the occupancy",
             "1024x32768 >= torch.compile in bf16 and fp32 (v2 0.96x); every other member as v2"),
    *references(lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps), HERE / "__init__.py",
               "F.rms_norm, eager: PyTorch's own kernel",
               "torch.compile of F.rms_norm (Inductor's generated Triton)"),
    *liger(lambda x, w, eps: liger_rms_norm.LigerRMSNormFunction.apply(x, w, eps), HERE / "__init__.py",
           "Liger-Kernel's RMSNorm, Llama casting (Triton: one program per row, or 16 rows per program for "
           "rows <= 256 columns in batches >= 32768; it also writes each row's rstd for its backward)"),
)

KERNEL = Kernel(
    flops_per_element=5,  # for the roofline: square, sum, scale by the rsqrt, weight
    name="rmsnorm",
    revisions=REVISIONS,
    families=FAMILIES,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    check_shapes=((1, 1), (3, 5), (7, 33), (5, 1000), (9, 257), (2, 4097)),
    bench_shapes=((32768, 256), (16384, 1024), (8192, 2048), (8192, 4096), (4096, 8192),
                  (2048, 16384), (1024, 32768)),
    profile_shape=(8192, 4096),
    cases=("random", "large"),
    doc=__doc__,
)
