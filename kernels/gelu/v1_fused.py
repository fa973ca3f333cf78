"""v1_fused: GeLU in one Triton kernel: read x once, compute in fp32, write y once.

Change: the eight separate elementwise passes of v0 become one; the tanh form uses
0.5 * (1 + tanh(u)) == sigmoid(2u), i.e. y = x / (1 + exp(-2u)) (one exp, no cancellation
near tanh(u) = -1); the erf form calls tl.math.erf. BLOCK and num_warps autotuned on n.
Predicts: DRAM traffic drops from ~20 to 2 tensor-sized streams: ~8-10x faster than v0
and >= 90% of copy bandwidth for both forms (the erf form has the heavier math, still far
from ALU-bound at 2-4 bytes per element... check its issue-slot utilization first).
"""
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in
           ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (16384, 16))]
# The autotuner benchmarks through the GPU driver, which the CPU interpreter lacks.
CPU_CONFIG = {"BLOCK": 1024}
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
SQRT_HALF = tl.constexpr(0.7071067811865476)


@triton.autotune(configs=CONFIGS, key=["n", "TANH"])
@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, TANH: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    if TANH:
        u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp(-2.0 * u))
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * SQRT_HALF))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def gelu(x, approximate, out):
    assert x.is_contiguous() and out.is_contiguous()
    n = out.numel()
    assert n < 2**31, "int32 offsets"
    tanh = {"tanh": True, "none": False}[approximate]
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    if out.is_cuda:
        gelu_kernel[grid](x, out, n, TANH=tanh)
    else:
        gelu_kernel.fn[grid](x, out, n, TANH=tanh, **CPU_CONFIG)
    return out
