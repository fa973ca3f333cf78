"""LayerNorm forward over the last dimension, with weight and bias, fp32 and bf16.

Inputs are (x, weight, bias, eps); statistics in fp32. The "shifted" case puts the mean at
300 with unit spread, where a one-pass E[x^2] - mean^2 variance loses ~1% in fp32.
"""
from __future__ import annotations

from pathlib import Path

from kernels.common import TUNING_SOURCE, LazyModule
from kernels.common.norm_families import FAMILIES
from kernlog.frameworks import liger, references
from kernlog.spec import DTYPE_BYTES, Kernel, Revision, torch_dtype

torch = LazyModule("torch", globals())
F = LazyModule("torch.nn.functional", globals())
liger_layer_norm = LazyModule("liger_kernel.ops.layer_norm", globals(), optional=True)
HERE = Path(__file__).resolve().parent
COMMON = HERE.parent / "common"
EPS = 1e-5


def make_inputs(shape, dtype, gen, device, case="random"):
    rows, cols = shape
    x = torch.randn((rows, cols), generator=gen, device=gen.device)
    # A one-column row normalizes to exactly b, and any rounding of its mean is multiplied
    # by 1/sqrt(eps) ~ 316: shifted by 300 it tests nothing but that rounding (torch's own CPU
    # bf16 kernel missed by 6e-2 about one run in six). Shift only rows with a spread.
    if case == "shifted" and cols > 1:
        # Unit spread in every row first: a row of 5 draws could spread 0.1, and 300 +- 0.1 in
        # fp32 (2^-24 of 300 is 1.8e-4 of 0.1) failed the 1e-4 L2 tolerance in ~14 of 20000
        # draws with torch itself on the CPU: a flaky test, not a wrong kernel.
        x = (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True) + 300.0
    w = 1.0 + 0.5 * torch.randn(cols, generator=gen, device=gen.device)
    b = 0.5 * torch.randn(cols, generator=gen, device=gen.device)
    x, w, b = (t.to(device=device, dtype=torch_dtype(dtype)) for t in (x, w, b))
    return (x, w, b, EPS)


def make_output(inputs):
    return torch.empty_like(inputs[0])


def reference(inputs, out=None):
    x, w, b = (t.detach().to(torch.float64) for t in inputs[:3])
    return F.layer_norm(x, (x.shape[-1],), w, b, inputs[3])


def bytes_moved(shape, dtype):
    rows, cols = shape
    return (2 * rows * cols + 2 * cols) * DTYPE_BYTES[dtype]


def _load_v0():
    from .v0_triton import layernorm

    return lambda inputs, out: layernorm(*inputs, out)


def _load_v1():
    from .v1_looped import layernorm

    return lambda inputs, out: layernorm(*inputs, out)


def _load_v2():
    from .v2_aligned import layernorm

    return lambda inputs, out: layernorm(*inputs, out)


def _load_v3():
    from .v3_early import layernorm

    return lambda inputs, out: layernorm(*inputs, out)


REVISIONS = (
    Revision("v0_triton", "triton", (HERE / "v0_triton.py", COMMON / "rownorm.py", TUNING_SOURCE), _load_v0,
             "whole rows in registers, fp32 two-step statistics, one read of x and one write of y; "
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
             "16384x1000 >= torch.compile in bf16 and fp32 (v1 bf16: 0.84x); "
             "every other member as v1"),
    Revision("v3_early", "triton", (HERE / "v3_early.py", COMMON / "rownorm_aligned.py", COMMON / "rownorm.py",
                                    TUNING_SOURCE), _load_v3,
             "v2, its whole-row kernel loading w and b with x, before the statistics (where a thread holds at "
             "most 16 of each), and one row at 32 warps among the whole-row candidates",
             "the decode family >= the best reference in bf16, and in fp32 at 1x4096 and 32x5120 (one DRAM round "
             "trip less); 1024x32768 fp32 >= 0.95x torch.compile; every other member as v2"),
    *references(lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps), HERE / "__init__.py",
               "F.layer_norm, eager: PyTorch's own kernel",
               "torch.compile of F.layer_norm (Inductor's generated Triton)"),
    *liger(lambda x, w, b, eps: liger_layer_norm.LigerLayerNormFunction.apply(x, w, b, eps), HERE / "__init__.py",
           "Liger-Kernel's LayerNorm (Triton: one program per row, the row in one block up to 65536 columns; "
           "it also writes each row's mean and rstd for its backward)"),
)

KERNEL = Kernel(
    flops_per_element=8,  # for the roofline: two sums, subtract, square, normalize, scale and shift
    name="layernorm",
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
    cases=("random", "shifted"),
    doc=__doc__,
)
