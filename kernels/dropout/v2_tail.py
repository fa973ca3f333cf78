"""v2_tail: v1's kernel with the length split into a body that is a multiple of 16 and a tail.

Change: each program masks its block against n_body = n - n % 16 instead of n, and the last
program also writes the <= 15 elements past n_body, drawing their uniforms from the counters
v1 gives them (element e: counter e // 4, word e % 4), so for one seed v2 drops exactly the
elements v1 drops. Triton specializes an integer divisible by 16, so the body's mask is
constant over 16 elements and its accesses vectorize whatever n is (as gelu's v2_tail).
Evidence (H100, kernlog bench dropout --family odd): v1 at 6291457 bf16 elements ran
1047 GB/s, 56% of the same run's copy, against 100% at 6291456.
Predicts: odd lengths at the speed of their even neighbours (>= 90% of copy at 6291457, both
dtypes); even lengths unchanged (an empty tail).
"""
import triton
import triton.language as tl

from .v1_rand4x import CONFIGS, CPU_CONFIG

TAIL = tl.constexpr(16)  # the body's multiple, and the most elements the last program writes past it


@triton.jit
def _drop(x_ptr, out_ptr, offs, mask, r, p, scale):
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, tl.where(r >= p, x * scale, 0.0).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _uniforms(seed, first, N: tl.constexpr):
    """The uniforms of elements first..first+N (first % 4 == 0): v1's counter assignment."""
    r0, r1, r2, r3 = tl.rand4x(seed, first // 4 + tl.arange(0, N // 4))
    return tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (N,))


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def dropout_kernel(x_ptr, out_ptr, n_body, n, p, scale, seed, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    start = pid * BLOCK
    offs = start + tl.arange(0, BLOCK)
    # n_body % 16 == 0: the mask is constant over 16 lanes, so the accesses vectorize
    _drop(x_ptr, out_ptr, offs, offs < n_body, _uniforms(seed, start, BLOCK), p, scale)
    if pid == tl.num_programs(0) - 1:
        t = n_body + tl.arange(0, TAIL)
        _drop(x_ptr, out_ptr, t, t < n, _uniforms(seed, n_body, TAIL), p, scale)


def dropout(x, p, seed, out):
    assert x.is_contiguous() and out.is_contiguous() and 0.0 <= p <= 1.0
    n = out.numel()
    assert n < 2**31, "int32 offsets"
    n_body = n - n % TAIL.value
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    grid = lambda meta: (max(1, triton.cdiv(n_body, meta["BLOCK"])),)  # noqa: E731 (a program for the tail alone)
    if out.is_cuda:
        dropout_kernel[grid](x, out, n_body, n, p, scale, seed)
    else:
        dropout_kernel.fn[grid](x, out, n_body, n, p, scale, seed, **CPU_CONFIG)
    return out
