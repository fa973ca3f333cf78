"""v3_ordered: v2_split's backward kernels with their programs ordered longest first across groups
of heads, the group size picked per shape, and delta computed in the dq kernel.

Change: in v0-v2 a program's grid position is (block, head): every block of head 0 launches before
any of head 1, the longest first within each head. The causal loop's longest program reads every
block of its head (at 1x8x16384x128, a quarter of an SM's share of the dq kernel's work), so the
last head's longest programs start when most of the work is done and run on after it. Here the
grid is one axis over groups of GROUP heads: within a group, block 0 of every head, then block 1,
and so on (GROUP = 1 is v2's order; GROUP = B H orders the whole grid longest first). A group
spans more heads' K, V (dq) or Q, dO (dk/dv) at once in L2, so the picker times each kernel's
loop forms and layouts (v2's candidates) at group sizes 1, 4 and B H and keeps the fastest per
shape. The dq kernel launches first and computes delta = rowsum(do * o) for its own query block
(its do is loaded already; o is one more tile), storing it for the dk/dv kernel: the preprocess
launch and its second read of do go. The forward is v2_split's (attention's v5_persistent).
Predicts: >= 1.04x v2_split at (1, 16, 8192, 128) bf16, and no slower than v2_split at
(1, 12, 1024, 64) bf16 beyond noise.
"""
import torch
import triton
import triton.language as tl

from kernels.attention import v1_flash
from kernels.common import tuning

from . import v0_fused as v0
from . import v2_split as v2
from .v1_tuned import CANDIDATES, fitting

SPLIT, WHOLE = v2.SPLIT, v2.WHOLE
GROUPS = (1, 4, None)  # heads per group the picker times; None: all B H heads in one group
CPU_GROUP = 2  # the interpreter's: with 3 heads, a last group smaller than the others


@triton.jit
def _program(BH, nblocks, GROUP):
    """(block, head) of this program: heads in groups of GROUP, block i of every head in a group
    before block i + 1; the last group may hold fewer heads."""
    pid = tl.program_id(0)
    per = GROUP * nblocks
    group = pid // per
    r = pid - group * per
    heads = tl.minimum(GROUP, BH - group * GROUP)
    return r // heads, group * GROUP + r % heads


@triton.jit
def _dkdv_whole(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d, lo, start_n, T,
                sq_t, sd_t, qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    """v0_fused's loop: the query blocks [lo, T) of one key block, the mask on those crossing the diagonal."""
    for start_m in range(lo, T, BLOCK_M):
        rows = start_m + offs_m
        qt = tl.load(q_base + rows[None, :] * sq_t + offs_d[:, None], mask=rows[None, :] < T, other=0.0)
        lse = tl.load(lse_ptr + row_base + rows, mask=rows < T, other=float("inf")) * 1.4426950408889634
        pt = tl.exp2(tl.dot(k, qt, input_precision=PRECISION) * qk_scale - lse[None, :])
        if start_m < start_n + BLOCK_N:
            pt = tl.where(cols[:, None] <= rows[None, :], pt, 0.0)
        do = tl.load(do_base + rows[:, None] * sd_t + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=PRECISION)
        delta = tl.load(delta_ptr + row_base + rows, mask=rows < T, other=0.0)
        dpt = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, input_precision=PRECISION)
    return dk, dv


@triton.jit(do_not_specialize=["GROUP"])  # one compile for every group size
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, T, H, BH, GROUP, qk_scale, scale,
                 sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, sd_b, sd_h, sd_t, sg_b, sg_h, sg_t,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_LOOP: tl.constexpr,
                 PRECISION: tl.constexpr):
    block, bh = _program(BH, tl.cdiv(T, BLOCK_N), GROUP)
    start_n = block * BLOCK_N  # key block 0 reads every query block
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
    lo = (start_n // BLOCK_M) * BLOCK_M
    if SPLIT_LOOP:
        mid = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, T)
        dk, dv = v2._dkdv_blocks(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d,
                                 lo, mid, T, sq_t, sd_t, qk_scale, BLOCK_M, True, PRECISION)
        dk, dv = v2._dkdv_blocks(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d,
                                 mid, T, T, sq_t, sd_t, qk_scale, BLOCK_M, False, PRECISION)
    else:
        dk, dv = _dkdv_whole(k, v, dk, dv, q_base, do_base, lse_ptr, delta_ptr, row_base, cols, offs_m, offs_d, lo,
                             start_n, T, sq_t, sd_t, qk_scale, BLOCK_M, BLOCK_N, PRECISION)
    dk = dk * scale
    offs = b.to(tl.int64) * sg_b + h.to(tl.int64) * sg_h + cols[:, None] * sg_t + offs_d[None, :]
    tl.store(dk_ptr + offs, dk.to(dk_ptr.dtype.element_ty), mask=cols[:, None] < T)
    tl.store(dv_ptr + offs, dv.to(dv_ptr.dtype.element_ty), mask=cols[:, None] < T)


@triton.jit
def _dq_whole(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, start_m, T, sk_t, sv_t, qk_scale,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    """v0_fused's loop: the key blocks up to one query block's last row, the mask on those crossing the diagonal."""
    hi = tl.minimum(start_m + BLOCK_M, T)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * sk_t + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
        vt = tl.load(v_base + cols[None, :] * sv_t + offs_d[:, None], mask=cols[None, :] < T, other=0.0)
        p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale - lse[:, None])
        if start_n + BLOCK_N > start_m:
            p = tl.where(rows[:, None] >= cols[None, :], p, 0.0)
        dp = tl.dot(do, vt, input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    return dq


@triton.jit(do_not_specialize=["GROUP"])
def _dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, o_ptr, lse_ptr, delta_ptr, dq_ptr, T, H, BH, GROUP, qk_scale, scale,
               sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, sd_b, sd_h, sd_t, so_b, so_h, so_t,
               sg_b, sg_h, sg_t, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               SPLIT_LOOP: tl.constexpr, PRECISION: tl.constexpr):
    nm = tl.cdiv(T, BLOCK_M)
    block, bh = _program(BH, nm, GROUP)
    start_m = (nm - 1 - block) * BLOCK_M  # the last query block reads every key block
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
    o = tl.load(o_ptr + b.to(tl.int64) * so_b + h.to(tl.int64) * so_h + rows[:, None] * so_t + offs_d[None, :],
                mask=inside, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # v0's preprocess, for this block's rows
    tl.store(delta_ptr + row_base + rows, delta, mask=rows < T)  # for the dk/dv kernel, launched after
    lse = tl.load(lse_ptr + row_base + rows, mask=rows < T, other=float("inf")) * 1.4426950408889634
    dq = tl.zeros((BLOCK_M, D), tl.float32)
    if SPLIT_LOOP:
        mid = (start_m // BLOCK_N) * BLOCK_N
        hi = tl.minimum(start_m + BLOCK_M, T)
        dq = v2._dq_blocks(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, 0, mid, T, sk_t, sv_t,
                           qk_scale, BLOCK_N, False, PRECISION)
        dq = v2._dq_blocks(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, mid, hi, T, sk_t, sv_t,
                           qk_scale, BLOCK_N, True, PRECISION)
    else:
        dq = _dq_whole(q, do, dq, lse, delta, k_base, v_base, rows, offs_n, offs_d, start_m, T, sk_t, sv_t, qk_scale,
                       BLOCK_M, BLOCK_N, PRECISION)
    dq = dq * scale
    offs = b.to(tl.int64) * sg_b + h.to(tl.int64) * sg_h + rows[:, None] * sg_t + offs_d[None, :]
    tl.store(dq_ptr + offs, dq.to(dq_ptr.dtype.element_ty), mask=inside)


def _launches(q, k, v, do, o, scale, lse, delta, out):
    """(dq's launch, dk/dv's launch), each taking (form, group, (BLOCK_M, BLOCK_N, warps, stages)); dq's
    writes delta, so it runs first. A group of None is every head."""
    B, H, T, D = q.shape
    BH = B * H
    dq, dk, dv = out[..., :D], out[..., D:2 * D], out[..., 2 * D:]
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3])
    precision = "ieee" if q.dtype.itemsize == 4 else "tf32"  # as v0_fused: bf16's products are exact either way

    def dq_(c):
        form, group, (bm, bn, warps, stages) = c
        _dq_kernel[(triton.cdiv(T, bm) * BH,)](
            q, k, v, do, o, lse, delta, dq, T, H, BH, group or BH, scale * v1_flash.LOG2E, scale, *strides,
            *o.stride()[:3], *out.stride()[:3], D=D, BLOCK_M=bm, BLOCK_N=bn, SPLIT_LOOP=form == SPLIT,
            PRECISION=precision, num_warps=warps, num_stages=stages)

    def dkdv(c):
        form, group, (bm, bn, warps, stages) = c
        _dkdv_kernel[(triton.cdiv(T, bn) * BH,)](
            q, k, v, do, lse, delta, dk, dv, T, H, BH, group or BH, scale * v1_flash.LOG2E, scale, *strides,
            *out.stride()[:3], D=D, BLOCK_M=bm, BLOCK_N=bn, SPLIT_LOOP=form == SPLIT, PRECISION=precision,
            num_warps=warps, num_stages=stages)
    return dq_, dkdv


def candidates(layouts) -> list:
    """v2_split's candidates (each layout in the split loop, then in the whole one) at each group size."""
    return [(form, group, c) for group in GROUPS for form, c in v2.candidates(layouts)]


def attention_backward(q, k, v, do, scale, out):
    """v0_fused.attention_backward's contract: dq | dk | dv into out (B, H, T, 3 D)."""
    v0.check_args(q, k, v, do, out)
    q, k, v, do = (t if t.stride(-1) == 1 else t.contiguous() for t in v0.on_device(q, k, v, do, out))
    o, lse = v2.forward(q, k, v, scale)
    return backward(q, k, v, do, scale, o, lse, out)


def backward(q, k, v, do, scale, o, lse, out):
    """dq | dk | dv into out from the forward's o and lse: the dq kernel (writing delta), then the
    dk/dv kernel, each one's group size, loop form and layout picked per shape on the GPU; on the CPU
    the split loops in v0_fused's interpreter layouts, in groups of CPU_GROUP heads."""
    delta = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    dq, dkdv = _launches(q, k, v, do, o, scale, lse, delta, out)
    if not out.is_cuda:
        cpu_dkdv, cpu_dq = v0.CPU_CONFIG
        dq((SPLIT, CPU_GROUP, cpu_dq))
        dkdv((SPLIT, CPU_GROUP, cpu_dkdv))
        return out
    B, H, T, D = q.shape
    key = (B, H, T, D, q.dtype)
    dkdv_layouts, dq_layouts = CANDIDATES[v0.dtype_name(q)]
    tuning.launch_fastest(("attention_backward_v3_dq", *key),
                          lambda: fitting(dq, candidates(dq_layouts), q.device), dq, q.device)
    tuning.launch_fastest(("attention_backward_v3_dkdv", *key),
                          lambda: fitting(dkdv, candidates(dkdv_layouts), q.device), dkdv, q.device)
    return out
