"""GeLU, elementwise over a contiguous 1-D tensor, fp32 and bf16, in both of F.gelu's forms.

The approximation is part of the inputs, (x, approximate) with approximate as in F.gelu:
the gate's case "tanh" draws approximate="tanh", the case "erf" draws approximate="none".
Every revision implements both, so one ladder covers the two forms and the reference is
F.gelu(x, approximate=...) in float64. The timing pass runs whichever case it is given.
"""
from __future__ import annotations

import math
from pathlib import Path

from kernels.common import LazyModule
from kernlog.frameworks import references
from kernlog.spec import DTYPE_BYTES, Family, Kernel, Revision, torch_dtype

torch = LazyModule("torch", globals())
F = LazyModule("torch.nn.functional", globals())
HERE = Path(__file__).resolve().parent
APPROXIMATE = {"tanh": "tanh", "erf": "none"}  # case -> F.gelu's `approximate`


def make_inputs(shape, dtype, gen, device, case="tanh"):
    (n,) = shape
    x = 3.0 * torch.randn(n, generator=gen, device=gen.device)  # spans both tails of the curve
    return (x.to(device=device, dtype=torch_dtype(dtype)), APPROXIMATE[case])


def make_output(inputs):
    return torch.empty_like(inputs[0])


def reference(inputs, out=None):
    x, approximate = inputs
    return F.gelu(x.detach().to(torch.float64), approximate=approximate)


def bytes_moved(shape, dtype):
    return 2 * shape[0] * DTYPE_BYTES[dtype]


def gelu_unfused(x, approximate, out):
    """The textbook formula as separate tensor ops, each one a kernel and a trip to DRAM."""
    if approximate == "tanh":
        inner = x * x * x * 0.044715 + x
        t = torch.tanh(inner * math.sqrt(2.0 / math.pi))
    else:
        t = torch.erf(x * math.sqrt(0.5))
    return torch.mul(x * 0.5, t + 1.0, out=out)


def _load_v0():
    return lambda inputs, out: gelu_unfused(*inputs, out)


def _load_v1():
    from .v1_fused import gelu

    return lambda inputs, out: gelu(*inputs, out)


def _load_v2():
    from .v2_tail import gelu

    return lambda inputs, out: gelu(*inputs, out)


REVISIONS = (
    Revision("v0_unfused", "torch", (HERE / "__init__.py",), _load_v0,
             "0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715x^3))) (or the erf form) as separate torch ops",
             "~8-9 kernels, ~20 tensor-sized DRAM streams: ~10% of copy bw counted on 2 streams"),
    Revision("v1_fused", "triton", (HERE / "v1_fused.py",), _load_v1,
             "one fused Triton kernel, fp32 math, tanh form as x*sigmoid(2u); BLOCK/warps autotuned",
             "~8-10x faster than v0; >= 90% of copy bw for both forms"),
    Revision("v2_tail", "triton", (HERE / "v2_tail.py", HERE / "v1_fused.py"), _load_v2,
             "v1's kernel masked against a body that is a multiple of 16 (vectorized whatever the length), the last "
             "program writing the <= 15 elements past it",
             "odd lengths as fast as even ones: >= F.gelu and >= 90% of copy at 6291457 (v1 bf16 975 GB/s, F.gelu "
             "1864); even lengths unchanged"),
    *references(lambda x, approximate: F.gelu(x, approximate=approximate), HERE / "__init__.py",
               "F.gelu, eager: PyTorch's fused elementwise kernel",
               "torch.compile of F.gelu (Inductor's generated Triton)"),
)

# Issue 20's shape families, in elements; `check`: small versions the gate checks everywhere
# (bench gates every member at full size on the GPU).
FAMILIES = (
    Family("mlp", "the MLP's hidden activation over a training batch: GPT-2 small (2048 tokens x 3072), "
           "BERT-large (4096 x 4096), GPT-J (4096 x 16384)",
           ((6291456,), (16777216,), (67108864,))),
    Family("decode", "a decode step: one to 64 tokens' worth, too few elements to fill the GPU",
           ((3072,), (16384,), (64 * 16384,)),
           check=((3072,),)),
    Family("odd", "lengths no vector width divides (a tail in every kernel): a prime near a million, "
           "and GPT-2's 2048 x 3072 plus one",
           ((1000003,), (6291457,)),
           check=((1009,), (12289,))),
)
# Liger-Kernel has no GeLU alone: its GeGLU (LigerGELUMulFunction) computes gelu_tanh(a) * b, a
# different operator with twice the reads, so it is not this kernel's reference.
REFERENCE_NOTES = ("Liger-Kernel: no standalone GeLU (its GeGLU computes gelu(a) * b, another operator)",)

KERNEL = Kernel(
    flops_per_element=9,  # for the roofline: the tanh form: cube, two multiply-adds, tanh, add, two multiplies
    name="gelu",
    revisions=REVISIONS,
    families=FAMILIES,
    reference_notes=REFERENCE_NOTES,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    # No single-element shapes: one x deep in the negative tail makes the relative error of
    # 1 + tanh(u) ~ 1e-4 (fp32) for any implementation of the textbook form, F.gelu's included.
    check_shapes=((33,), (1029,), (4099,), (65539,)),
    bench_shapes=tuple((1 << k,) for k in range(16, 29, 2)),
    profile_shape=(1 << 25,),
    cases=("tanh", "erf"),
    sweep_axis=0,
    # The tanh and erf forms differ by ~1e-4 relative L2 on these inputs, exactly the default
    # fp32 tolerance; fp32 revisions land near 1e-7, so 2e-5 tells the forms apart.
    tolerance={"fp32": 2e-5},
    doc=__doc__,
)
