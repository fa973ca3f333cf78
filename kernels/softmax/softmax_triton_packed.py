"""The Triton softmax whose long bf16 rows are held two elements a register across their meeting.

triton_met's kernel (triton_peeled's) holds a bf16 chunk as 32-bit floats, one element a register,
and LLVM holds even a bf16 tensor one element a 32-bit register. Its registers are what bounds a
row's bytes in flight: at chunks of 8192 on 4 warps (64 elements a thread) it takes 94 registers,
5 programs an SM, 80 KB of rows an SM in flight. fp32 with the same config has twice the bytes a
register, 160 KB, and runs at the copy; bf16 stopped at 85% of it (4096x50257 on the H200).

Here a chunk's body is loaded as 32-bit words of two bf16 each, and stays two a word:
- its max is taken two at a time (max.bf16x2; exact, the max is one of its inputs);
- its exponentials are computed a half-chunk at a time, summed in fp32 and packed back two a word
  (cvt.rn.bf16x2.f32), which is what the program holds across the meeting;
- at the store, each word is unpacked, multiplied by the row's factor and packed again.
The second half's exponentials wait on the first half's running sums (`+ acc * 0.0`, which no
compiler may fold: acc could be inf or NaN), so ptxas cannot compute all 64 of a thread's
exponentials before it sums them, which is where the unpacked chunk's registers went. The result:
62 registers at 8192 on 4 warps (ptxas), 8 programs an SM, 128 KB in flight.

The price is one rounding more: the exponential is rounded to bf16 before the product is, so an
output is within one bf16 ulp of the correctly rounded result, where triton_met's is within half
(the gate's bf16 tolerance is 2^-6, two to four ulps).

The row's head and tail (under 16 bytes each) and the meeting are triton_peeled's, as is the
layout condition (x's and out's rows equally far off the boundary). Rows this revision takes (bf16,
long, in at most SPLIT_CAP chunks) are timed over its configs and triton_met's candidates, the
fastest picked per shape, so none runs slower than triton_met chose, within the picker's noise;
every other row (fp32 among them) runs as triton_met.

Triton's interpreter runs no inline PTX: there (ASM False) the max and the pack are Triton
operations (the same max on finite inputs; the interpreter's own rounding in the pack).

The words are 4-byte loads: rows are taken only where x and out start on a 16-byte boundary (a
view such as logits[1:] of an odd row length does not, and a word there is a misaligned address).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernlog import tuning

from . import softmax_triton as base
from . import softmax_triton_met as met
from . import softmax_triton_peeled as peeled
from .softmax_triton import EPOCH, MAX_SPLIT, NEG_MAX, SUM_BITS, _row_stats

LOG2E = tl.constexpr(1.4426950408889634)
NEG_INF2 = tl.constexpr(-8323200)  # 0xff80ff80: a word of two bf16 -inf, the masked lanes' value


@triton.jit
def _max2(a, b, ASM: tl.constexpr):
    """Words of two bf16: the larger of each half."""
    if ASM:
        c = tl.inline_asm_elementwise("max.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1)
    else:
        lo = tl.where((a << 16).to(tl.float32, bitcast=True) >= (b << 16).to(tl.float32, bitcast=True), a, b)
        hi = tl.where((a & -65536).to(tl.float32, bitcast=True) >= (b & -65536).to(tl.float32, bitcast=True), a, b)
        c = (lo & 65535) | (hi & -65536)
    return c


@triton.jit
def _max2_asm(a, b):
    return _max2(a, b, True)


@triton.jit
def _max2_ops(a, b):
    return _max2(a, b, False)


@triton.jit
def _pack(lo, hi, ASM: tl.constexpr):
    """Two fp32 tensors rounded to bf16, two a word: lo in the low half (the lower address)."""
    if ASM:
        w = tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [lo, hi], dtype=tl.int32,
                                      is_pure=True, pack=1)
    else:
        w = (lo.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 65535) | \
            (hi.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) << 16)
    return w


@triton.jit
def _exps(w, m, acc, ASM: tl.constexpr):
    """A half-chunk's words: exp(x - m) of both halves, packed two a word, and acc plus their sums.
    Each exponential waits on acc (+ acc * 0.0), so a thread's halves take their turns."""
    lo = tl.exp2(((w << 16).to(tl.float32, bitcast=True) - m) * LOG2E + acc * 0.0)
    hi = tl.exp2(((w & -65536).to(tl.float32, bitcast=True) - m) * LOG2E + acc * 0.0)
    acc += lo + hi
    return _pack(lo, hi, ASM), acc


@triton.jit
def _scaled(w, scale, ASM: tl.constexpr):
    return _pack((w << 16).to(tl.float32, bitcast=True) * scale, (w & -65536).to(tl.float32, bitcast=True) * scale,
                 ASM)


@triton.jit
def _load(p, j, inside, lo, hi):
    """Words j of p, or where the chunk is not wholly inside the body, those of [lo, hi) and -inf pairs."""
    if inside:
        w = tl.load(p + j)
    else:
        w = tl.load(p + j, mask=(j >= lo) & (j < hi), other=NEG_INF2)
    return w


@triton.jit
def _store(p, j, w, inside, lo, hi):
    if inside:
        tl.store(p + j, w)
    else:
        tl.store(p + j, w, mask=(j >= lo) & (j < hi))


@triton.jit
def _packed_kernel(x_ptr, y_ptr, slots_ptr, cols, x_stride, polls, BLOCK: tl.constexpr, TILE: tl.constexpr,
                   Q: tl.constexpr, ASM: tl.constexpr):
    tl.static_assert(MAX_SPLIT == 32)  # a slot a lane: each warp polls the row's slots itself
    tl.static_assert(Q == 8)  # bf16: 8 elements, 4 words, in 16 bytes
    split = tl.cdiv(cols + Q - 1, BLOCK)
    t = tl.program_id(0)
    row = t // split
    k = t % split
    start = row.to(tl.int64) * x_stride
    a = start % Q  # the row's offset from the boundary below it; the same in y (the launcher's check)
    x_base = x_ptr + (start // Q) * Q
    y_base = y_ptr + (row.to(tl.int64) * cols // Q) * Q
    # the body [lo, hi) in words, from the same boundaries: products with Q // 2, which Triton sees
    xw = x_ptr.to(tl.pointer_type(tl.int32)) + (start // Q) * (Q // 2)
    yw = y_ptr.to(tl.pointer_type(tl.int32)) + (row.to(tl.int64) * cols // Q) * (Q // 2)
    lo = (a + Q - 1) // Q * Q
    hi = (a + cols) // Q * Q
    lo_w = (a + Q - 1) // Q * (Q // 2)
    hi_w = (a + cols) // Q * (Q // 2)
    HALF: tl.constexpr = BLOCK // 4  # words in half a chunk
    j0 = k * (BLOCK // 2) + tl.arange(0, HALF)
    j1 = k * (BLOCK // 2) + HALF + tl.arange(0, HALF)
    inside = (k * BLOCK >= lo) & (k * BLOCK + BLOCK <= hi)  # the whole chunk in the body: no mask
    w0 = _load(xw, j0, inside, lo_w, hi_w)
    w1 = _load(xw, j1, inside, lo_w, hi_w)
    # The edges, as triton_peeled's: lanes [0, Q) the head, held by chunk 0; lanes [Q, 2Q) the tail, by its chunk.
    lane = tl.arange(0, 2 * Q)
    head = lane < Q
    ej = tl.where(head, lane, hi + lane - Q)
    edge = tl.where(head, (ej >= a) & (ej < lo) & (k == 0), (ej < a + cols) & (k == hi // BLOCK))
    xe = tl.load(x_base + ej, mask=edge, other=float("-inf")).to(tl.float32)
    slots = slots_ptr + row.to(tl.int64) * MAX_SPLIT
    epoch = tl.zeros([], tl.int64)
    if split > 1:  # as softmax_triton._split_kernel: the other epoch than the last launch left
        epoch = (tl.load(slots + k, volatile=True) & EPOCH) ^ EPOCH
    if ASM:
        mw = _max2(tl.reduce(w0, 0, _max2_asm), tl.reduce(w1, 0, _max2_asm), ASM)
    else:
        mw = _max2(tl.reduce(w0, 0, _max2_ops), tl.reduce(w1, 0, _max2_ops), ASM)
    m = tl.maximum((mw << 16).to(tl.float32, bitcast=True), (mw & -65536).to(tl.float32, bitcast=True))
    m = tl.maximum(tl.maximum(m, tl.max(xe, axis=0)), NEG_MAX)  # (x - m): NEG_MAX, not -inf, in an empty chunk
    ee = tl.exp2((xe - m) * LOG2E)
    e0, acc = _exps(w0, m, tl.zeros([HALF], tl.float32), ASM)
    e1, acc = _exps(w1, m, acc, ASM)
    s = tl.sum(acc, axis=0) + tl.sum(ee, axis=0)
    scale = 1.0 / s
    if split > 1:  # the meeting, as triton_peeled's, a warp at a time
        sub = tl.arange(0, MAX_SPLIT)
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
    _store(yw, j0, _scaled(e0, scale, ASM), inside, lo_w, hi_w)
    _store(yw, j1, _scaled(e1, scale, ASM), inside, lo_w, hi_w)
    tl.store(y_base + ej, (ee * scale).to(y_ptr.dtype.element_ty), mask=edge)


# Chunks of 4096-16384 columns on 4 warps: 32-128 elements a thread. On the H200 at bf16 4096x50257 the
# 8192 (62 registers) ran fastest, 16384 (101 registers) within 6% of it, every 8-warp config slower.
BLOCKS = (4096, 8192, 16384)
WARPS = 4


def takes(x, out, block: int | None = None) -> bool:
    """Whether this revision's own path takes 2-D `x` (unit column stride) into contiguous `out`: bf16
    rows too long for several a program, x and out starting on the 16-byte boundary and their rows
    equally far off it, in at most SPLIT_CAP chunks of `block` columns (None: the longest block)."""
    rows, cols = x.shape
    return bool(x.dtype == out.dtype == torch.bfloat16 and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
                and cols > base.SHORT and (x.stride(0) - cols) % 8 == 0
                and triton.cdiv(cols + 7, block or BLOCKS[-1]) <= base.SPLIT_CAP)


def configs(cols: int) -> list[dict]:
    """Launch kwargs to time for bf16 rows of `cols` columns: every block of BLOCKS that cuts the
    row's span (cols + 7) into 2 to SPLIT_CAP chunks."""
    return [{"BLOCK": b, "num_warps": WARPS} for b in BLOCKS if 2 <= triton.cdiv(cols + 7, b) <= base.SPLIT_CAP]


def candidates(x) -> list[tuple[str, int, dict]]:
    """(kind, programs per SM, launch kwargs) to time for `x`'s rows: this kernel's configs ("packed"),
    then triton_met's candidates."""
    return [("packed", 0, c) for c in configs(x.shape[1])] + met.candidates(x)


def constants(gpu: bool) -> dict:
    """The kernel's constexprs besides the config: triton_peeled's (Q, TILE) and ASM, the inline PTX
    on the GPU."""
    return {**peeled.constants(8, gpu), "ASM": gpu}


def launch(x, out, polls, **config):
    rows, cols = x.shape
    grid = (rows * triton.cdiv(cols + 7, config["BLOCK"]),)
    _packed_kernel[grid](x, out, base._workspace(rows, x.device), cols, x.stride(0), polls,
                         **constants(x.is_cuda), **config)


def run(x, out, polls: int, candidate) -> None:
    kind, per_sm, kw = candidate
    if kind == "packed":
        launch(x, out, polls, **kw)
    else:
        met.run(x, out, polls, candidate)


def softmax(x, out, block: int | None = None, polls: int | None = None):
    """Softmax of the rows of 2-D `x` into contiguous `out`, as softmax_triton.softmax. Rows this
    revision takes are timed over `candidates` on the GPU, or run through its kernel in chunks of
    `block` (under the interpreter 1024, with `polls` 1: every chunk but a row's last takes the
    fallback); other rows as triton_met."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if not x.is_cuda:
        block = block or 1024
    if not (x.numel() and takes(x, out, block)):
        return met.softmax(x, out, block=block, polls=polls)
    if not x.is_cuda:
        from kernlog import triton_interpreter

        triton_interpreter.apply()
    polls = (base.GPU_POLLS if x.is_cuda else 1) if polls is None else polls
    if block is None and x.is_cuda:
        rows, cols = x.shape
        tuning.launch_fastest(("softmax_triton_packed", rows, cols, x.dtype), lambda: candidates(x),
                              lambda c: run(x, out, polls, c), x.device)
        return out
    launch(x, out, polls, BLOCK=block, num_warps=WARPS)
    return out


def load():
    return lambda inputs, out: softmax(inputs[0], out)
