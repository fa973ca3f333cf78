"""v2_split: v1_tuned with each backward kernel's causal loop split in two among its candidates,
after attention's v5_persistent forward.

Change: in v0's kernels every block of the loop asks whether it crosses the diagonal, and the
masked `tl.where` sits in the loop body Triton software-pipelines. The split kernels here run two
loops, as attention's v2_tuned forward does: the blocks off the diagonal with no mask at all, and
the few that cross it with the mask; one inner function, instantiated for each by a constexpr
flag. The dk/dv program takes its diagonal blocks first (they are the first query blocks it
reads); the dq program takes them last. Each kernel's picker times the split loop and v0's whole
one, each at v1_tuned's layouts, per shape: the split alone was slower than v1 at every family
member on the H200. The forward is attention's v5_persistent (its CUDA C kernels on Hopper in
bf16 at head dims 64 and 128, v3_fma's loop elsewhere, picked per shape), asked for the
log-sum-exp, with o kept in the input dtype: delta = rowsum(do * o) reads it as bf16, as
FlashAttention's backward does. On the CPU the split loops run (the interpreter's layouts).
Predicts: >= 1.05x v1_tuned at (1, 32, 4096, 128) bf16, and no slower than v1_tuned at
(1, 12, 1024, 64) bf16 beyond noise.
"""
import torch
import triton
import triton.language as tl

from kernels.attention import v1_flash, v5_persistent
from kernels.common import tuning

from . import v0_fused as v0
from .v1_tuned import CANDIDATES, fitting


@triton.jit
def _dkdv_blocks(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d, lo, hi, T,
                 sq_t, sd_t, qk_scale, BLOCK_M: tl.constexpr, MASK: tl.constexpr, PRECISION: tl.constexpr):
    """dk, dv += the query blocks [lo, hi) of one key block; MASK: the blocks cross the diagonal."""
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        qt = tl.load(q_base + rows[None, :] * sq_t + offs_d[:, None], mask=rows[None, :] < T, other=0.0)
        lse = tl.load(lse_ptr + row_base + rows, mask=rows < T, other=float("inf")) * 1.4426950408889634
        pt = tl.exp2(tl.dot(k, qt, input_precision=PRECISION) * qk_scale - lse[None, :])
        if MASK:
            pt = tl.where(cols[:, None] <= rows[None, :], pt, 0.0)
        do = tl.load(do_base + rows[:, None] * sd_t + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=PRECISION)
        delta = tl.load(delta_ptr + row_base + rows, mask=rows < T, other=0.0)
        dpt = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, T, H, qk_scale, scale,
                     sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, sd_b, sd_h, sd_t, sg_b, sg_h, sg_t,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
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
    # the query blocks holding one of the block's keys cross the diagonal; those after see every key
    lo = (start_n // BLOCK_M) * BLOCK_M
    mid = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, T)
    dk, dv = _dkdv_blocks(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d, lo,
                          mid, T, sq_t, sd_t, qk_scale, BLOCK_M, True, PRECISION)
    dk, dv = _dkdv_blocks(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d, mid,
                          T, T, sq_t, sd_t, qk_scale, BLOCK_M, False, PRECISION)
    dk = dk * scale
    offs = b.to(tl.int64) * sg_b + h.to(tl.int64) * sg_h + cols[:, None] * sg_t + offs_d[None, :]
    tl.store(dk_ptr + offs, dk.to(dk_ptr.dtype.element_ty), mask=cols[:, None] < T)
    tl.store(dv_ptr + offs, dv.to(dv_ptr.dtype.element_ty), mask=cols[:, None] < T)


@triton.jit
def _dq_blocks(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, lo, hi, T, sk_t, sv_t, qk_scale,
               BLOCK_N: tl.constexpr, MASK: tl.constexpr, PRECISION: tl.constexpr):
    """dq += the key blocks [lo, hi) of one query block; MASK: the blocks cross the diagonal (and
    may pass T; the blocks before it end at or before the query block's first row, inside T)."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASK:
            k = tl.load(k_base + cols[:, None] * sk_t + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
            vt = tl.load(v_base + cols[None, :] * sv_t + offs_d[:, None], mask=cols[None, :] < T, other=0.0)
        else:
            k = tl.load(k_base + cols[:, None] * sk_t + offs_d[None, :])
            vt = tl.load(v_base + cols[None, :] * sv_t + offs_d[:, None])
        p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale - lse[:, None])
        if MASK:
            p = tl.where(rows[:, None] >= cols[None, :], p, 0.0)
        dp = tl.dot(do, vt, input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    return dq


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
    # key blocks ending at or before the block's first row are seen by every row: no mask
    mid = (start_m // BLOCK_N) * BLOCK_N
    hi = tl.minimum(start_m + BLOCK_M, T)
    dq = _dq_blocks(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, 0, mid, T, sk_t, sv_t, qk_scale,
                    BLOCK_N, False, PRECISION)
    dq = _dq_blocks(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, mid, hi, T, sk_t, sv_t, qk_scale,
                    BLOCK_N, True, PRECISION)
    dq = dq * scale
    offs = b.to(tl.int64) * sg_b + h.to(tl.int64) * sg_h + rows[:, None] * sg_t + offs_d[None, :]
    tl.store(dq_ptr + offs, dq.to(dq_ptr.dtype.element_ty), mask=inside)


def forward(q, k, v, scale):
    """attention's v5_persistent forward (its picker's choice): o in the input dtype and each row's
    natural-log lse, fp32 (B, H, T)."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    v5_persistent.attention(q, k, v, scale, o, lse=lse)
    return o, lse


SPLIT, WHOLE = "split", "whole"  # the loop forms each kernel's picker times: this module's, v0_fused's


def _launches(q, k, v, do, scale, lse, delta, out):
    """(dk/dv's launch, dq's launch), each taking (form, (BLOCK_M, BLOCK_N, warps, stages))."""
    B, H, T, D = q.shape
    dq, dk, dv = out[..., :D], out[..., D:2 * D], out[..., 2 * D:]
    common = (T, H, scale * v1_flash.LOG2E, scale, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
              *do.stride()[:3], *out.stride()[:3])
    precision = "ieee" if q.dtype.itemsize == 4 else "tf32"  # as v0_fused: bf16's products are exact either way

    def dkdv(c):
        form, (bm, bn, warps, stages) = c
        kernel = _bwd_dkdv_kernel if form == SPLIT else v0._bwd_dkdv_kernel
        kernel[(triton.cdiv(T, bn), B * H)](q, k, v, do, lse, delta, dk, dv, *common, D=D, BLOCK_M=bm, BLOCK_N=bn,
                                            PRECISION=precision, num_warps=warps, num_stages=stages)

    def dq_(c):
        form, (bm, bn, warps, stages) = c
        kernel = _bwd_dq_kernel if form == SPLIT else v0._bwd_dq_kernel
        kernel[(triton.cdiv(T, bm), B * H)](q, k, v, do, lse, delta, dq, *common, D=D, BLOCK_M=bm, BLOCK_N=bn,
                                            PRECISION=precision, num_warps=warps, num_stages=stages)
    return dkdv, dq_


def candidates(layouts) -> list:
    """Each layout in the split loop, then in v0's whole one."""
    return [(SPLIT, c) for c in layouts] + [(WHOLE, c) for c in layouts]


def attention_backward(q, k, v, do, scale, out):
    """v0_fused.attention_backward's contract: dq | dk | dv into out (B, H, T, 3 D)."""
    v0.check_args(q, k, v, do, out)
    q, k, v, do = (t if t.stride(-1) == 1 else t.contiguous() for t in v0.on_device(q, k, v, do, out))
    o, lse = forward(q, k, v, scale)
    return backward(q, k, v, do, scale, o, lse, out)


def backward(q, k, v, do, scale, o, lse, out):
    """dq | dk | dv into out from the forward's o and lse (`forward`'s): delta, then the dk/dv and
    dq kernels, each one's loop form and layout picked per shape on the GPU, the split loops in
    v0_fused's interpreter layouts on the CPU. trainable.py's backward is this call."""
    delta = v0.preprocess(o, do, out)
    dkdv, dq = _launches(q, k, v, do, scale, lse, delta, out)
    if not out.is_cuda:
        cpu_dkdv, cpu_dq = v0.CPU_CONFIG
        dkdv((SPLIT, cpu_dkdv))
        dq((SPLIT, cpu_dq))
        return out
    B, H, T, D = q.shape
    key = (B, H, T, D, q.dtype)
    dkdv_layouts, dq_layouts = CANDIDATES[v0.dtype_name(q)]
    tuning.launch_fastest(("attention_backward_v2_dkdv", *key),
                          lambda: fitting(dkdv, candidates(dkdv_layouts), q.device), dkdv, q.device)
    tuning.launch_fastest(("attention_backward_v2_dq", *key),
                          lambda: fitting(dq, candidates(dq_layouts), q.device), dq, q.device)
    return out
