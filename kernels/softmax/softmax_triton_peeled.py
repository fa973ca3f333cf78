"""The Triton softmax with v9's peel: rows that do not start on a 16-byte boundary (an odd
length such as GPT-2's 50257 columns puts every other row off it) keep 16-byte loads and
stores for their body.

Triton vectorizes a load only where it can prove the addresses and the mask come in runs of
16 bytes. `triton`'s split kernel addresses row r at x + r * x_stride: with an odd stride
nothing is provable, and every element moves alone (2 bytes in bf16). Here each row is
addressed from the 16-byte boundary at or below its start, a window position j standing for
x[(r * x_stride // Q) * Q + j] (Q: 16 bytes of elements), so the row lies at [a, a + cols)
with a = r * x_stride % Q. The body [lo, hi), its bounds rounded to Q inwards, is loaded with
a mask Triton knows is constant over each Q; the head [a, lo) and tail [hi, a + cols), under
Q elements each, are loaded as scalars by the chunk holding them. Output rows are addressed
the same way, so the launcher takes this path only where x and out rows have the same
offset from the boundary (x_stride = cols mod Q: any contiguous x).

Rows otherwise take `triton`'s kernels unchanged (softmax_triton.py): rows already on the
boundary, rows of at most SHORT columns (its several-rows kernel divides the stride by what
it can), and rows past SPLIT_CAP chunks. The chunks of a row meet through the same workspace
and protocol as softmax_triton.py's docstring says; a row has cdiv(cols + Q - 1, BLOCK)
chunks, the last of which may hold nothing of a row whose offset is small.

The meeting is a warp's: each warp polls the row's live slots itself (a tensor of MAX_SPLIT =
32, one lane a slot, each warp holding a copy), so the poll's reductions stay in the warp with no
barrier between warps. Spread over the program's threads, as triton's split kernel has them,
the meeting crossed warps at 15 `bar.sync` (each poll 3, the pairs' reduction after it 6, the
fallback's row read 6), 20 in the program with the chunk's own max and sum; compiled for sm_90a
at 4096 bf16 columns and 4 warps it has those 5 alone. Warps may then decide apart to fall back,
so the fallback reads the row a warp at a time too (TILE = 32 columns on the GPU), with no
barrier either: each warp that falls back reads the whole row, and scales its share of the chunk
by the row's statistics as it computed them, which differ from the met ones only in rounding.

A bf16 chunk keeps the issue slots as busy as the memory (at 4096x50257 on the H200 both were
70% busy in its profile before this), so each element costs as few instructions as its result allows: its exponential
one ex2.approx.ftz after a subtract and a multiply (tl.exp2, not tl.exp), its output one multiply
by a factor that folds the row's rescale and 1 / sum, and a chunk wholly inside the row's body
loads and stores without a mask.
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.common import tuning

from . import softmax_triton as base
from .softmax_triton import EPOCH, MAX_SPLIT, NEG_MAX, SUM_BITS, _row_stats

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _peeled_kernel(x_ptr, y_ptr, slots_ptr, cols, x_stride, polls, BLOCK: tl.constexpr, TILE: tl.constexpr,
                   Q: tl.constexpr):
    tl.static_assert(MAX_SPLIT == 32)  # a slot a lane: each warp polls the row's slots itself
    split = tl.cdiv(cols + Q - 1, BLOCK)
    t = tl.program_id(0)
    row = t // split
    k = t % split
    start = row.to(tl.int64) * x_stride
    a = start % Q  # the row's offset from the boundary below it; the same in y (the launcher's check)
    x_base = x_ptr + (start // Q) * Q
    y_base = y_ptr + (row.to(tl.int64) * cols // Q) * Q
    lo = (a + Q - 1) // Q * Q  # products with Q: Triton sees the bounds as multiples of Q
    hi = (a + cols) // Q * Q
    j = k * BLOCK + tl.arange(0, BLOCK)
    inside = (k * BLOCK >= lo) & (k * BLOCK + BLOCK <= hi)  # the whole chunk in the body: no mask
    if inside:
        x = tl.load(x_base + j).to(tl.float32)
    else:
        x = tl.load(x_base + j, mask=(j >= lo) & (j < hi), other=float("-inf")).to(tl.float32)
    # The edges: lanes [0, Q) the head, held by chunk 0; lanes [Q, 2Q) the tail, by its chunk.
    lane = tl.arange(0, 2 * Q)
    head = lane < Q
    ej = tl.where(head, lane, hi + lane - Q)
    edge = tl.where(head, (ej >= a) & (ej < lo) & (k == 0), (ej < a + cols) & (k == hi // BLOCK))
    xe = tl.load(x_base + ej, mask=edge, other=float("-inf")).to(tl.float32)
    slots = slots_ptr + row.to(tl.int64) * MAX_SPLIT
    epoch = tl.zeros([], tl.int64)
    if split > 1:  # as softmax_triton._split_kernel: the other epoch than the last launch left
        epoch = (tl.load(slots + k, volatile=True) & EPOCH) ^ EPOCH
    m = tl.maximum(tl.maximum(tl.max(x, axis=0), tl.max(xe, axis=0)), NEG_MAX)
    # tl.exp2 is one ex2.approx.ftz; tl.exp's ex2.approx keeps denormal results, and ptxas wraps it in
    # a range fix (an FSETP and two FMULs). (x - m) * LOG2E, not an FMA of x * LOG2E and m * LOG2E: m
    # is NEG_MAX in a chunk of nothing but -inf, and NEG_MAX * LOG2E overflows (-inf - -inf: NaN).
    e = tl.exp2((x - m) * LOG2E)
    ee = tl.exp2((xe - m) * LOG2E)
    s = tl.sum(e, axis=0) + tl.sum(ee, axis=0)
    scale = 1.0 / s
    if split > 1:  # the meeting, as softmax_triton._split_kernel's, a warp at a time (the docstring)
        sub = tl.arange(0, MAX_SPLIT)  # a warp's lanes: each warp polls every slot itself
        live = sub < split
        word = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64)
                                                                     & SUM_BITS)
        tl.atomic_xchg(slots + k, word | epoch, sem="relaxed")
        v = tl.zeros([MAX_SPLIT], tl.int64)
        missing = 1
        while (missing > 0) & (polls > 0):
            v = tl.load(slots + sub, mask=live, other=0, volatile=True)
            missing = tl.max(tl.where(live & ((v & EPOCH) != epoch), 1, 0), axis=0)
            polls -= 1
        pm = tl.where(live, (v >> 32).to(tl.int32).to(tl.float32, bitcast=True), NEG_MAX)
        ps = tl.where(live, (v & SUM_BITS).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
        m_row = tl.max(pm, axis=0)
        s_row = tl.sum(ps * tl.exp(pm - m_row), axis=0)
        if missing > 0:  # this warp's alone: TILE columns a step, a warp's lanes on the GPU
            m_row, s_row = _row_stats(x_ptr + start, cols, TILE)
        scale = tl.exp(m - m_row) / s_row  # the chunk's exponentials to the row's, and 1 / sum: one factor
        if k == 0:
            tl.store(slots + sub, tl.zeros([MAX_SPLIT], tl.int64) + epoch, mask=sub >= split)
    out = (e * scale).to(y_ptr.dtype.element_ty)
    if inside:
        tl.store(y_base + j, out)
    else:
        tl.store(y_base + j, out, mask=(j >= lo) & (j < hi))
    tl.store(y_base + ej, (ee * scale).to(y_ptr.dtype.element_ty), mask=edge)


def peels(x, out, block: int | None = None) -> bool:
    """Whether this path takes 2-D `x` (unit column stride) into contiguous `out`: rows too long
    for several a program, off the 16-byte boundary, with x's and out's rows equally far off it,
    and in at most SPLIT_CAP chunks of `block` columns (None: the longest block tried)."""
    rows, cols = x.shape
    q = 16 // x.element_size()
    return bool(cols > base.SHORT and (cols % q or x.stride(0) % q) and (x.stride(0) - cols) % q == 0
                and triton.cdiv(cols + q - 1, block or base._SPLIT_BLOCKS[-1]) <= base.SPLIT_CAP)


# Chunks of 2048-16384 columns at 8-64 elements a thread: softmax_triton's split tries 4096-16384 at
# 16-64; on the H200 at bf16 4096x50257 its pick (4096 at 4 warps, 32 a thread) held 62 registers,
# a 50% occupancy, and moved 3.15 TB/s of a 4.19 copy; chunks of 2048 at 8 warps hold 32 (ptxas).
CHUNKS = (2048, 4096, 8192, 16384)


# The fallback's read on the GPU: a warp's lanes, so that a warp falls back alone, with no barrier
# (the docstring); the interpreter has no warps, and runs a wide tile faster.
GPU_TILE = 32


def constants(q: int, gpu: bool) -> dict:
    """The kernel's constexprs besides the config: Q elements in 16 bytes, and the fallback's TILE."""
    return {"Q": q, "TILE": GPU_TILE if gpu else 1024}


def configs(cols: int, q: int) -> list[dict]:
    """Launch kwargs to time for rows of `cols` columns, over the row's span (cols + Q - 1): one
    chunk a row up to MAX_FUSED columns (softmax_triton's rule), and for rows of more than
    SPLIT_MIN, chunks of CHUNKS columns at 8-64 elements a thread, 2 to SPLIT_CAP a row."""
    span = cols + q - 1
    out = []
    for b in base._SPLIT_BLOCKS:
        for w in base._SPLIT_WARPS:
            per = base._per_thread(b, w)
            one = cols <= base.MAX_FUSED and b == triton.next_power_of_2(span) and 8 <= per <= 64
            chunks = cols > base.SPLIT_MIN and b in CHUNKS and 8 <= per <= 64 and 2 <= triton.cdiv(span, b) \
                <= base.SPLIT_CAP
            if one or chunks:
                out.append({"BLOCK": b, "num_warps": w})
    return out


def launch(x, out, polls, **config):
    rows, cols = x.shape
    q = 16 // x.element_size()
    grid = (rows * triton.cdiv(cols + q - 1, config["BLOCK"]),)
    _peeled_kernel[grid](x, out, base._workspace(rows, x.device), cols, x.stride(0), polls,
                         **constants(q, x.is_cuda), **config)


def softmax(x, out, block: int | None = None, polls: int | None = None):
    """Softmax of the rows of 2-D `x` into contiguous `out`, as softmax_triton.softmax; rows
    `peels` takes are timed over `configs` on the GPU, or run in chunks of `block` (under the
    interpreter 1024, with `polls` 1: every chunk but a row's last takes the fallback)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if not x.is_cuda:
        block = block or 1024
    if not (x.numel() and peels(x, out, block)):
        return base.softmax(x, out)
    if not x.is_cuda:
        from kernels.common import triton_interpreter

        triton_interpreter.apply()
    polls = (base.GPU_POLLS if x.is_cuda else 1) if polls is None else polls
    if block is None and x.is_cuda:
        rows, cols = x.shape
        tuning.launch_fastest(("softmax_triton_peeled", rows, cols, x.dtype),
                              lambda: configs(cols, 16 // x.element_size()), lambda kw: launch(x, out, polls, **kw),
                              x.device)
        return out
    launch(x, out, polls, BLOCK=block, num_warps=4)
    return out


def load():
    return lambda inputs, out: softmax(inputs[0], out)
