"""v0_fused: causal attention's backward in Triton, FlashAttention-2 style, the T x T never in DRAM.

Change: the forward is attention's v1_flash kernel, asked for each row's log-sum-exp
(STORE_LSE), with o kept in fp32. Then three kernels: a preprocess, delta = rowsum(do * o) per
row in fp32; one over key blocks for dk and dv, and one over query blocks for dq. Each recomputes
the probabilities from the saved log-sum-exp, p = exp2(q k^T scale log2(e) - lse log2(e)), so
no probability is stored. The key-block program keeps k, v and its fp32 dk, dv in registers and
walks the query blocks from its diagonal down: dv += p^T do, dp = do v^T, ds = p (dp - delta),
dk += ds^T q. The query-block program keeps q, do and its fp32 dq and walks the key blocks up to
its diagonal: dq += ds k. dk and dq take the scale once, at the end. Only blocks that cross the
diagonal are masked (a branch per block); rows past T read lse = +inf, so their p is 0. No
atomics: dq has a kernel of its own, so a launch repeats bit for bit. bf16 inputs go into the
products as bf16 (p and ds rounded to bf16 for them), fp32 accumulates; fp32 inputs ask for IEEE
products, as v1_flash does (TF32 is ~1e-3 off). The three gradients are written, in the input
dtype, into one (B, H, T, 3 D) output, dq | dk | dv along the last dimension.
Predicts: at (1, 12, 1024, 64) bf16 >= 0.5x SDPA's forward + backward (FlashAttention-2's);
the 0.8x bar on the longer sequences needs tuned blocks (the table below is a first guess).
"""
import torch
import triton
import triton.language as tl

from kernels.attention import v1_flash

HEAD_DIMS = v1_flash.HEAD_DIMS
# Per (dtype, head dim) on the GPU: ((BLOCK_M, BLOCK_N, warps, stages) of the dk/dv kernel, the
# same of the dq kernel). The program's resident side is the wide one (the key block for dk/dv:
# k, v, dk, dv stay in registers; the query block for dq), the streamed side narrow and
# pipelined, as in Triton's fused-attention tutorial (32 x 128 and 128 x 32 at D = 64). D = 128
# and fp32 halve the resident block or double the warps to keep the two fp32 accumulators in
# registers. Untuned: no GPU has run them yet.
GPU_CONFIGS = {
    ("bf16", 16): ((32, 128, 4, 4), (128, 32, 4, 4)), ("bf16", 32): ((32, 128, 4, 4), (128, 32, 4, 4)),
    ("bf16", 64): ((32, 128, 4, 5), (128, 32, 4, 5)), ("bf16", 128): ((32, 64, 8, 3), (64, 32, 8, 3)),
    ("fp32", 16): ((32, 64, 4, 2), (64, 32, 4, 2)), ("fp32", 32): ((32, 64, 4, 2), (64, 32, 4, 2)),
    ("fp32", 64): ((32, 64, 4, 2), (64, 32, 4, 2)), ("fp32", 128): ((16, 64, 8, 2), (64, 16, 8, 2)),
}
PRE_BLOCK = 64  # rows per program of the preprocess on the GPU
# The interpreter runs each program in NumPy, one after another: blocks of 16 and 32 make the odd
# check shapes cross several blocks, a key block span two query blocks (and the reverse), and
# the diagonal fall inside a block; the forward runs v1_flash's CPU_CONFIG.
CPU_CONFIG = ((16, 32, 1, 1), (32, 16, 1, 1))
CPU_PRE_BLOCK = 16


@triton.jit
def _bwd_preprocess(o_ptr, do_ptr, delta_ptr, T, H, so_b, so_h, so_t, sd_b, sd_h, sd_t,
                    D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    inside = rows[:, None] < T
    o = tl.load(o_ptr + b.to(tl.int64) * so_b + h.to(tl.int64) * so_h + rows[:, None] * so_t + offs_d[None, :],
                mask=inside, other=0.0)
    do = tl.load(do_ptr + b.to(tl.int64) * sd_b + h.to(tl.int64) * sd_h + rows[:, None] * sd_t + offs_d[None, :],
                 mask=inside, other=0.0)
    tl.store(delta_ptr + bh.to(tl.int64) * T + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=rows < T)


@triton.jit
def _bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, T, H, qk_scale, scale,
                     sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, sd_b, sd_h, sd_t, sg_b, sg_h, sg_t,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N  # key block 0 reads every query block: the longest go first
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q_base = q_ptr + b.to(tl.int64) * sq_b + h.to(tl.int64) * sq_h
    do_base = do_ptr + b.to(tl.int64) * sd_b + h.to(tl.int64) * sd_h
    row_base = bh.to(tl.int64) * T
    k = tl.load(k_ptr + b.to(tl.int64) * sk_b + h.to(tl.int64) * sk_h + cols[:, None] * sk_t + offs_d[None, :],
                mask=cols[:, None] < T, other=0.0)
    v = tl.load(v_ptr + b.to(tl.int64) * sv_b + h.to(tl.int64) * sv_h + cols[:, None] * sv_t + offs_d[None, :],
                mask=cols[:, None] < T, other=0.0)
    dk = tl.zeros((BLOCK_N, D), tl.float32)
    dv = tl.zeros((BLOCK_N, D), tl.float32)

    # queries before the block's first key see none of it: start at the query block holding that key
    lo = (start_n // BLOCK_M) * BLOCK_M
    for start_m in range(lo, T, BLOCK_M):
        rows = start_m + offs_m
        qt = tl.load(q_base + rows[None, :] * sq_t + offs_d[:, None], mask=rows[None, :] < T, other=0.0)
        # rows past T: lse +inf, so p = exp2(s - inf) = 0 and they add nothing
        lse = tl.load(lse_ptr + row_base + rows, mask=rows < T, other=float("inf")) * 1.4426950408889634
        pt = tl.exp2(tl.dot(k, qt, input_precision=PRECISION) * qk_scale - lse[None, :])
        if start_m < start_n + BLOCK_N:  # some key of the block follows some query: the diagonal
            pt = tl.where(cols[:, None] <= rows[None, :], pt, 0.0)
        do = tl.load(do_base + rows[:, None] * sd_t + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=PRECISION)
        delta = tl.load(delta_ptr + row_base + rows, mask=rows < T, other=0.0)
        dpt = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, input_precision=PRECISION)

    dk = dk * scale
    offs = b.to(tl.int64) * sg_b + h.to(tl.int64) * sg_h + cols[:, None] * sg_t + offs_d[None, :]
    tl.store(dk_ptr + offs, dk.to(dk_ptr.dtype.element_ty), mask=cols[:, None] < T)
    tl.store(dv_ptr + offs, dv.to(dv_ptr.dtype.element_ty), mask=cols[:, None] < T)


@triton.jit
def _bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, T, H, qk_scale, scale,
                   sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, sd_b, sd_h, sd_t, sg_b, sg_h, sg_t,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M  # the last query block reads most: first
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    k_base = k_ptr + b.to(tl.int64) * sk_b + h.to(tl.int64) * sk_h
    v_base = v_ptr + b.to(tl.int64) * sv_b + h.to(tl.int64) * sv_h
    row_base = bh.to(tl.int64) * T
    inside = rows[:, None] < T
    q = tl.load(q_ptr + b.to(tl.int64) * sq_b + h.to(tl.int64) * sq_h + rows[:, None] * sq_t + offs_d[None, :],
                mask=inside, other=0.0)
    do = tl.load(do_ptr + b.to(tl.int64) * sd_b + h.to(tl.int64) * sd_h + rows[:, None] * sd_t + offs_d[None, :],
                 mask=inside, other=0.0)
    lse = tl.load(lse_ptr + row_base + rows, mask=rows < T, other=float("inf")) * 1.4426950408889634
    delta = tl.load(delta_ptr + row_base + rows, mask=rows < T, other=0.0)
    dq = tl.zeros((BLOCK_M, D), tl.float32)

    # keys past the block's last row are masked for every row in it: the loop stops there
    hi = tl.minimum(start_m + BLOCK_M, T)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * sk_t + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
        vt = tl.load(v_base + cols[None, :] * sv_t + offs_d[:, None], mask=cols[None, :] < T, other=0.0)
        p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale - lse[:, None])
        if start_n + BLOCK_N > start_m:  # the diagonal
            p = tl.where(rows[:, None] >= cols[None, :], p, 0.0)
        dp = tl.dot(do, vt, input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)

    dq = dq * scale
    offs = b.to(tl.int64) * sg_b + h.to(tl.int64) * sg_h + rows[:, None] * sg_t + offs_d[None, :]
    tl.store(dq_ptr + offs, dq.to(dq_ptr.dtype.element_ty), mask=inside)


def refusal(shape) -> str:
    """Why a shape (B, H, T, D) is declined, "" where it runs (v1_flash's head dims)."""
    return v1_flash.refusal(shape)


def check_args(q, k, v, do, out):
    """(B, H, T, D) q, k, v, do of one shape and dtype, out (B, H, T, 3 D); ValueError otherwise."""
    if not (q.shape == k.shape == v.shape == do.shape) or q.dim() != 4:
        raise ValueError(f"q, k, v, do must be (B, H, T, D) of one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}, {tuple(do.shape)}")
    B, H, T, D = q.shape
    if tuple(out.shape) != (B, H, T, 3 * D):
        raise ValueError(f"out must be (B, H, T, 3 D) = {(B, H, T, 3 * D)}, got {tuple(out.shape)}")
    why = refusal(tuple(q.shape))
    if why:
        raise ValueError(f"attention_backward: {why}")


def on_device(q, k, v, do, out):
    """The inputs as the kernels take them: on the CPU fp32 copies (the interpreter would multiply
    bf16's bit patterns; fp32 copies are exact), the interpreter's loop shim applied."""
    if out.is_cuda:
        return q, k, v, do
    q, k, v = v1_flash.cpu_inputs(q, k, v)
    return q, k, v, do.float()


def forward(q, k, v, scale, out):
    """v1_flash's forward: o in fp32 and each row's natural-log lse, fp32 (B, H, T)."""
    o = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    config = v1_flash.CPU_CONFIG if not out.is_cuda else v1_flash.GPU_CONFIGS[(dtype_name(q), q.shape[-1])]
    v1_flash.launch(v1_flash._attn_fwd_kernel, q, k, v, scale, o, config, lse)
    return o, lse


def preprocess(o, do, out):
    """delta = rowsum(do * o), fp32 (B, H, T)."""
    B, H, T, D = o.shape
    block = PRE_BLOCK if out.is_cuda else CPU_PRE_BLOCK
    delta = torch.empty((B, H, T), dtype=torch.float32, device=o.device)
    _bwd_preprocess[(triton.cdiv(T, block), B * H)](o, do, delta, T, H, *o.stride()[:3], *do.stride()[:3],
                                                     D=D, BLOCK_M=block, num_warps=4 if out.is_cuda else 1)
    return delta


def backward(q, k, v, do, scale, lse, delta, out, config=None):
    """dq, dk, dv into out[..., :D], [D:2D], [2D:] from the forward's lse and the rows' delta;
    `config` ((BLOCK_M, BLOCK_N, warps, stages) of the dk/dv kernel, the same of dq) overrides."""
    B, H, T, D = q.shape
    config = config or (GPU_CONFIGS[(dtype_name(q), D)] if out.is_cuda else CPU_CONFIG)
    dq, dk, dv = out[..., :D], out[..., D:2 * D], out[..., 2 * D:]
    precision = "ieee" if q.dtype.itemsize == 4 else "tf32"  # bf16: exact products either way
    common = (T, H, scale * v1_flash.LOG2E, scale, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
              *do.stride()[:3], *out.stride()[:3])
    (bm, bn, warps, stages), (bm2, bn2, warps2, stages2) = config
    _bwd_dkdv_kernel[(triton.cdiv(T, bn), B * H)](q, k, v, do, lse, delta, dk, dv, *common, D=D, BLOCK_M=bm,
                                                  BLOCK_N=bn, PRECISION=precision, num_warps=warps,
                                                  num_stages=stages)
    _bwd_dq_kernel[(triton.cdiv(T, bm2), B * H)](q, k, v, do, lse, delta, dq, *common, D=D, BLOCK_M=bm2,
                                                 BLOCK_N=bn2, PRECISION=precision, num_warps=warps2,
                                                 num_stages=stages2)
    return out


def dtype_name(t) -> str:
    return "fp32" if t.dtype.itemsize == 4 else "bf16"


def attention_backward(q, k, v, do, scale, out, config=None):
    """The forward (o, lse) and then dq, dk, dv of o = softmax(q k^T scale, causal) v for the
    output gradient do, into out (B, H, T, 3 D) as dq | dk | dv; `config` as `backward`'s."""
    check_args(q, k, v, do, out)
    q, k, v, do = (t if t.stride(-1) == 1 else t.contiguous() for t in on_device(q, k, v, do, out))
    o, lse = forward(q, k, v, scale, out)
    return backward(q, k, v, do, scale, lse, preprocess(o, do, out), out, config)
