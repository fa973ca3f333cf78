"""v3_fma: v2_tuned with the scale applied inside the exponent, and 64-row query blocks first.

Change: v2 multiplied every score by the scale, then subtracted the running max before exp2:
two passes over the BLOCK_M x BLOCK_N tile in fp32. Here the row max is taken of the raw
products and scaled once per row, and each score enters exp2 as one fused multiply-add,
s * scale - m. On the diagonal the causal mask is added (0 or -1e6) to the scaled scores
instead of selected, and the key blocks past T, loaded as zeros, fall under the same mask (a
key past T is past every row before T). The accumulator is rescaled before the P V product,
which then accumulates into it.
The layout is picked per (B, H, T, D, dtype) as v2's, among candidates led by 64-row query
blocks at 4 warps: an exploration on the H200 timed 64 x 64 at 4 warps fastest of the layouts
tried with this loop at every family member but one. At head dim 128 the picker also times v2's
loop at v2's layouts: two H200 family sweeps found this loop 2-7% behind v2's at 4096-16384
tokens there, whatever its layout, so there the loop itself is picked by measurement.
Predicts: >= v2_tuned at (1, 12, 1024, 64) bf16 (the loop's elementwise work cut by about a
fifth), and no family member slower than v2_tuned beyond noise.
"""
import triton
import triton.language as tl

from kernels.common import tuning

from . import v1_flash, v2_tuned

# (BLOCK_M, BLOCK_N, warps, stages), BLOCK_M a multiple of BLOCK_N
CANDIDATES = {
    "bf16": [(64, 64, 4, 3), (128, 64, 4, 3), (64, 32, 4, 3), (64, 64, 4, 2)],
    "fp32": [(64, 32, 4, 2), (64, 64, 4, 2), (32, 32, 4, 3), (128, 32, 8, 2)],
}
CANDIDATES_D128 = {"bf16": [(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 2), (64, 32, 4, 3)],
                   "fp32": [(64, 32, 8, 2), (32, 32, 4, 2), (64, 16, 4, 2)]}
FMA, SPLIT = "fma", "split"  # this file's loop, v2's
# The interpreter: a diagonal of two key blocks, so the masked loop runs more than once.
CPU_CONFIG = (32, 16, 1, 1)
MASKED = tl.constexpr(-1.0e6)  # added to a masked score: exp2 of it, less any row max, is 0


@triton.jit
def _key_blocks(acc, m_i, l_i, q, k_base, v_base, rows, offs_n, offs_d, lo, hi, T, qk_scale, sk_t, sv_t,
                BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DIAGONAL: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if DIAGONAL:
            kt = tl.load(k_base + cols[None, :] * sk_t + offs_d[:, None], mask=cols[None, :] < T, other=0.0)
        else:
            kt = tl.load(k_base + cols[None, :] * sk_t + offs_d[:, None])
        qk = tl.dot(q, kt, input_precision=PRECISION)
        if DIAGONAL:
            qk = qk * qk_scale + tl.where(rows[:, None] >= cols[None, :], 0.0, MASKED)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.exp2(qk - m_new[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if DIAGONAL:
            v = tl.load(v_base + cols[:, None] * sv_t + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
        else:
            v = tl.load(v_base + cols[:, None] * sv_t + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attn_fwd_fma_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, T, H, qk_scale,
                         sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, so_b, so_h, so_t,
                         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         PRECISION: tl.constexpr, STORE_LSE: tl.constexpr):
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest programs first, as v1
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

    diagonal = start_m * BLOCK_M
    acc, m_i, l_i = _key_blocks(acc, m_i, l_i, q, k_base, v_base, rows, offs_n, offs_d, 0, diagonal, T,
                                qk_scale, sk_t, sv_t, BLOCK_N, PRECISION, False)
    acc, m_i, l_i = _key_blocks(acc, m_i, l_i, q, k_base, v_base, rows, offs_n, offs_d, diagonal,
                                tl.minimum(diagonal + BLOCK_M, T), T, qk_scale, sk_t, sv_t, BLOCK_N, PRECISION, True)

    o = acc / l_i[:, None]
    tl.store(o_base + rows[:, None] * so_t + offs_d[None, :], o.to(o_ptr.dtype.element_ty), mask=rows[:, None] < T)
    if STORE_LSE:
        tl.store(lse_ptr + bh.to(tl.int64) * T + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=rows < T)


def candidates(dtype: str, head_dim: int) -> list:
    """(loop, layout) pairs: this loop at each layout, and at head dim 128 v2's loop at each of v2's."""
    if head_dim != 128:
        return [(FMA, c) for c in CANDIDATES[dtype]]
    return [(FMA, c) for c in CANDIDATES_D128[dtype]] + [(SPLIT, c) for c in v2_tuned.candidates(dtype, 128)]


KERNELS = {FMA: _attn_fwd_fma_kernel, SPLIT: v2_tuned._attn_fwd_split_kernel}


def attention(q, k, v, scale, out, config=None, lse=None):
    """v1_flash.attention's contract; `config` skips the pick (BLOCK_M a multiple of BLOCK_N)."""
    v1_flash.check_args(q, k, v, out)
    if config is not None and config[0] % config[1]:
        raise ValueError(f"BLOCK_M {config[0]} is no multiple of BLOCK_N {config[1]}")
    if not out.is_cuda:
        q, k, v = v1_flash.cpu_inputs(q, k, v)
        config = config or CPU_CONFIG
    if config is not None:
        return v1_flash.launch(_attn_fwd_fma_kernel, q, k, v, scale, out, config, lse)
    B, H, T, D = q.shape
    dtype = "fp32" if q.dtype.itemsize == 4 else "bf16"

    def run(pair):
        loop, layout = pair
        v1_flash.launch(KERNELS[loop], q, k, v, scale, out, layout, lse)

    tuning.launch_fastest((_attn_fwd_fma_kernel, B, H, T, D, q.dtype), candidates(dtype, D), run, q.device)
    return out
