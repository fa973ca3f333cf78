"""Inverted dropout in training mode over a contiguous 1-D tensor, fp32 and bf16.

Inputs are (x, p, seed). Which elements drop is random, so the gate cannot compare with
F.dropout elementwise: the reference is the exact result given the mask the revision drew,
where(out != 0, x / (1 - p), 0) in float64 (x has no zeros, so a zero in the output means
"dropped"), and `extra_check` asks that the kept fraction be within 6 sigma of 1 - p.
The torch references draw from torch's generator and ignore the seed.
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
P = {"p10": 0.1, "p50": 0.5}  # case -> dropout probability


def make_inputs(shape, dtype, gen, device, case="p10"):
    (n,) = shape
    x = torch.randn(n, generator=gen, device=gen.device).to(torch_dtype(dtype))
    x[x == 0] = 1.0
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=gen.device))
    return (x.to(device), P[case], seed)


def make_output(inputs):
    return torch.empty_like(inputs[0])


def reference(inputs, out):
    x, p, _ = inputs
    x = x.detach().to(torch.float64)
    if p >= 1.0:
        return torch.zeros_like(x)
    kept = out.detach().to(x.device) != 0
    return torch.where(kept, x / (1.0 - p), torch.zeros_like(x))


def kept_fraction_problem(inputs, out):
    """'' if the fraction of nonzero outputs is within 6 sigma (+1 element) of 1 - p."""
    _, p, _ = inputs
    n = out.numel()
    kept = (out != 0).sum().item() / n
    allowed = 6.0 * math.sqrt(p * (1.0 - p) / n) + 1.0 / n
    if abs(kept - (1.0 - p)) > allowed:
        return f"kept fraction {kept:.4f}, expected {1.0 - p:.4f} +- {allowed:.4f}"
    return ""


def bytes_moved(shape, dtype):
    return 2 * shape[0] * DTYPE_BYTES[dtype]


def _load_v0():
    from .v0_rand import dropout

    return lambda inputs, out: dropout(*inputs, out)


def _load_v1():
    from .v1_rand4x import dropout

    return lambda inputs, out: dropout(*inputs, out)


def _load_v2():
    from .v2_tail import dropout

    return lambda inputs, out: dropout(*inputs, out)


REVISIONS = (
    Revision("v0_rand", "triton", (HERE / "v0_rand.py",), _load_v0,
             "keep = tl.rand(seed, offset) >= p, one Philox call per element; no mask tensor",
             "2 DRAM streams but Philox per element may be issue-bound: ~85% of copy bw fp32, less in bf16"),
    Revision("v1_rand4x", "triton", (HERE / "v1_rand4x.py",), _load_v1,
             "tl.rand4x: one Philox call gives the uniforms of 4 elements",
             "RNG instructions per element /4: DRAM-bound, >= 90% of copy bw fp32 and bf16"),
    Revision("v2_tail", "triton", (HERE / "v2_tail.py", HERE / "v1_rand4x.py"), _load_v2,
             "v1's kernel masked against a body divisible by 16 (vectorized whatever the length), the last program "
             "writing the <= 15 elements past it with v1's uniforms: the same elements dropped as v1 for one seed",
             "odd lengths as fast as even ones: >= 90% of copy at 6291457 (v1 bf16: 56%); even lengths unchanged"),
    *references(lambda x, p: F.dropout(x, p, training=True), HERE / "__init__.py",
               "F.dropout(training=True), eager: fused Philox kernel that also writes the mask",
               "torch.compile of F.dropout (Inductor's generated Triton with its own RNG)", args=2),
)

# Issue 20's shape families, in elements; `check`: small versions the gate checks everywhere
# (bench gates every member at full size on the GPU).
FAMILIES = (
    Family("training", "dropout on a training batch: the residual stream of GPT-2 small (2048 tokens x 768), "
           "its MLP activation (2048 x 3072), and the attention probabilities of 8 x 12 heads x 1024^2",
           ((1572864,), (6291456,), (100663296,))),
    Family("decode", "a decode step: one to 64 tokens' worth, too few elements to fill the GPU",
           ((768,), (4096,), (64 * 4096,)),
           check=((768,),)),
    Family("odd", "lengths no vector width divides (a tail in every kernel): a prime near a million, "
           "and GPT-2's 2048 x 3072 plus one",
           ((1000003,), (6291457,)),
           check=((1009,), (12289,))),
)
REFERENCE_NOTES = ("Liger-Kernel: no dropout operator",)

KERNEL = Kernel(
    flops_per_element=2,  # for the roofline: the keep test and the scale
    name="dropout",
    revisions=REVISIONS,
    families=FAMILIES,
    reference_notes=REFERENCE_NOTES,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    check_shapes=((1,), (7,), (33,), (1029,), (4099,), (65539,)),
    bench_shapes=tuple((1 << k,) for k in range(16, 29, 2)),
    profile_shape=(1 << 25,),
    cases=("p10", "p50"),
    sweep_axis=0,
    extra_check=kept_fraction_problem,
    doc=__doc__,
)
