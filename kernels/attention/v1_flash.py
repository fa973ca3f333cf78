"""v1_flash: causal attention forward in one kernel, the T x T scores never leaving the chip.

Change: one program per (query block, batch x head). The query block stays in registers while
the program walks the key/value blocks up to its diagonal, keeping a running row max m and sum
l in fp32 and rescaling its fp32 accumulator whenever m grows (online softmax), so the
probabilities are never written. Blocks wholly above the diagonal are never loaded; the causal
mask is applied only to the blocks that cross it (a branch per key block). The softmax runs in
base 2 with log2(e) folded into the scale, so each score costs one multiply and one exp2.
Both products are tl.dot with fp32 accumulation; fp32 inputs ask for IEEE products (Triton's
default for fp32 is TF32, ~1e-3 off, past the gate's 1e-4). The output is written once, in the
input dtype. q, k, v, o are read through their strides (the head dim contiguous), so MiniGPT's
transposed views need no copy.
Query blocks are launched heaviest first (the last block of a sequence reads every key block):
the short programs fill the tail of the launch instead of the long ones.
Predicts: at (1, 12, 1024, 64) bf16 >= 2x v0_library (no T x T scores through DRAM, no
separate softmax launch) and >= 0.5x F.scaled_dot_product_attention (FlashAttention-2).
"""
import math

import triton
import triton.language as tl

from kernels.common import triton_interpreter

HEAD_DIMS = (16, 32, 64, 128)
LOG2E = math.log2(math.e)
# (BLOCK_M, BLOCK_N, num_warps, num_stages) per head dim and dtype on the GPU: a 128-row query
# block gives each warp 16-32 rows for the tensor cores; D = 128 and fp32 halve the key block
# (or the stages) to stay within shared memory and registers.
GPU_CONFIGS = {
    ("bf16", 16): (128, 64, 4, 3), ("bf16", 32): (128, 64, 4, 3),
    ("bf16", 64): (128, 64, 4, 3), ("bf16", 128): (128, 64, 8, 3),
    ("fp32", 16): (64, 64, 4, 2), ("fp32", 32): (64, 64, 4, 2),
    ("fp32", 64): (64, 32, 4, 2), ("fp32", 128): (64, 32, 8, 2),
}
# The interpreter runs each program in NumPy, one after another: small blocks make the odd
# check shapes cross several key blocks and a diagonal that is not the first block.
CPU_CONFIG = (16, 16, 1, 1)


def refusal(shape) -> str:
    """Why a shape (B, H, T, D) is declined, "" where it runs: tl.arange over the head dim
    needs a power of two, and the tiles are sized for 16-128."""
    d = shape[-1]
    return "" if d in HEAD_DIMS else f"head dim {d} not one of {', '.join(map(str, HEAD_DIMS))}"


@triton.jit
def _attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, T, H, qk_scale,
                     sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, so_b, so_h, so_t,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     PRECISION: tl.constexpr, STORE_LSE: tl.constexpr):
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_base = q_ptr + b.to(tl.int64) * sq_b + h.to(tl.int64) * sq_h
    k_base = k_ptr + b.to(tl.int64) * sk_b + h.to(tl.int64) * sk_h
    v_base = v_ptr + b.to(tl.int64) * sv_b + h.to(tl.int64) * sv_h
    o_base = o_ptr + b.to(tl.int64) * so_b + h.to(tl.int64) * so_h

    q = tl.load(q_base + rows[:, None] * sq_t + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)

    # keys past the block's last row are masked for every row in it: the loop stops there
    hi = tl.minimum((start_m + 1) * BLOCK_M, T)
    first_masked = start_m * BLOCK_M  # key blocks ending at or before the block's first row see no mask
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(k_base + cols[None, :] * sk_t + offs_d[:, None], mask=cols[None, :] < T, other=0.0)
        s = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
        if start_n + BLOCK_N > first_masked:
            s = tl.where(rows[:, None] >= cols[None, :], s, float("-inf"))
        # Every row keeps key 0 (the first block is never wholly masked for it), so m_new is
        # finite from the first block on and exp2(m_i - m_new) never sees -inf - -inf.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * sv_t + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new

    o = acc / l_i[:, None]
    tl.store(o_base + rows[:, None] * so_t + offs_d[None, :], o.to(o_ptr.dtype.element_ty), mask=rows[:, None] < T)
    if STORE_LSE:  # each row's log-sum-exp of its scaled scores, natural log: what a backward needs
        tl.store(lse_ptr + bh.to(tl.int64) * T + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=rows < T)


def check_args(q, k, v, out):
    """The contract: (B, H, T, D) tensors of one shape and dtype, the head dim contiguous and
    one the tiles take (ValueError naming the shape otherwise)."""
    if not (q.shape == k.shape == v.shape == out.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v, out must be (B, H, T, D) of one shape, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}, {tuple(out.shape)}")
    why = refusal(tuple(q.shape))
    if why:
        raise ValueError(f"attention: {why}")


def launch(kernel, q, k, v, scale, out, config, lse=None):
    """kernel[grid](...) over (B, H, T, D) tensors with config (BLOCK_M, BLOCK_N, warps, stages);
    `lse`, a contiguous fp32 (B, H, T), also gets each row's log-sum-exp."""
    B, H, T, D = q.shape
    block_m, block_n, warps, stages = config
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    precision = "ieee" if q.dtype.itemsize == 4 else "tf32"  # bf16: exact products either way
    grid = (triton.cdiv(T, block_m), B * H)
    kernel[grid](q, k, v, out, out if lse is None else lse, T, H, scale * LOG2E,
                 *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
                 D=D, BLOCK_M=block_m, BLOCK_N=block_n, PRECISION=precision, STORE_LSE=lse is not None,
                 num_warps=warps, num_stages=stages)
    return out


def cpu_inputs(q, k, v):
    """The interpreter holds bf16 as uint16 and its tl.dot would multiply the bit patterns:
    fp32 copies are exact and give the same fp32-accumulated products."""
    triton_interpreter.apply()  # the loop up to a runtime bound
    return q.float(), k.float(), v.float()


def attention(q, k, v, scale, out, config=None, lse=None):
    """softmax(q k^T * scale, causal) v into out; `config` (BLOCK_M, BLOCK_N, warps, stages)
    overrides the table (the tests use it to place the diagonal); `lse`, where given, a
    contiguous fp32 (B, H, T) for the rows' log-sum-exp (a training step's backward)."""
    check_args(q, k, v, out)
    if not out.is_cuda:
        q, k, v = cpu_inputs(q, k, v)
        config = config or CPU_CONFIG
    dtype = "fp32" if q.dtype.itemsize == 4 else "bf16"
    return launch(_attn_fwd_kernel, q, k, v, scale, out, config or GPU_CONFIGS[(dtype, q.shape[-1])], lse)
