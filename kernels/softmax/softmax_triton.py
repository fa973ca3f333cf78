"""Triton softmax, every row read once and written once up to SPLIT_CAP * 32768 columns.

- Rows of <= SHORT columns: `_rows_kernel`, ROWS whole rows per program held in registers.
- Longer rows: `_split_kernel`, each row cut into SPLIT = cdiv(cols, BLOCK) chunks, a program
  per chunk holding it in registers. Each chunk publishes its (max, sum) as one 64-bit word
  in the row's slots of a global workspace, and polls the row's slots until all are there:
  the software form of the CUDA ladder's thread-block clusters. SPLIT = 1 is the classic
  one-program-per-row kernel. Rows of more than SPLIT_MIN columns also try chunks of
  4096-16384 (longer than MAX_FUSED, only those). For rows of 16385-32768 columns,
  `_pipe_kernel` competes too: persistent programs that software-pipeline whole rows through
  shared memory (on the H100, bf16 4096x32000 went from 2.69 to 2.80 TB/s).
- Every path picks its config per shape by kernels.common.tuning (candidates timed
  interleaved, cold L2); Triton's autotuner objects only hold the configs and pruning.
- Rows too long for SPLIT_CAP chunks: `_online_kernel`, an online (max, sum) loop, then a
  second loop that writes (read twice, written once).

Waiting on other programs is safe only if a row's programs are all resident at once.
Programs take their (row, chunk) from a ticket counter in the order they start, so every
program a waiting one needs started no later than the newest resident one, and at most
SPLIT_CAP of them are needed: far fewer than the H100 holds. A row of one chunk waits for
nothing and takes no ticket (on the H100 the ticket, an atomic on one address per program,
cost one-program-per-row shapes up to a third of their bandwidth).

The meeting has no memory fence. A slot is one word written by one atomic, so a poll sees it
empty (0) or whole. The slots come in two banks, one per launch parity, which the ticket
counter keeps in its high half (the last ticket taker flips it and zeroes the low half): each
launch publishes in its bank and empties the other, which the next launch, ordered after it
on the stream, uses. Nothing is kept on the host, so a launch replayed from a CUDA graph
alternates banks too. Two launches must not run concurrently on different streams.
The first version met through a per-row arrival counter with release and acquire atomics,
(max, sum) stored as two floats: on the H100 those fences held bf16 1024x131072 at 2.28
TB/s. A version without fences whose row's last reader emptied the slots (one more atomic,
its result awaited by every program) ran 2.62; this one ran 2.80 (chunks of 4096, 4 warps).

Under TRITON_INTERPRET on CPU tensors, programs run one after another and cannot wait for
each other, so `_split_kernel` runs in two launches instead (PHASE 0 publishes the pairs, PHASE 1
reads them); the GPU runs both in one launch (PHASE 2). No tuning there: fixed configs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import tuning

SHORT = 1024  # rows up to this many columns: several rows per program
MAX_FUSED = 32768  # rows up to this many columns: one program per row
SPLIT_CAP = 32  # most chunks of one row that wait for each other
MAX_SPLIT = tl.constexpr(SPLIT_CAP)
NEG_MAX = tl.constexpr(-3.4028234663852886e38)  # finite max identity: never exp(-inf - -inf) = NaN
LOW32 = tl.constexpr(0xFFFFFFFF)


@triton.jit
def _rows_kernel(x_ptr, y_ptr, rows, cols, x_stride, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    r = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    mask = (r < rows) & (offs < cols)
    x = tl.load(x_ptr + r * x_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)[:, None]  # a row of -inf: m = -inf, exp(NaN) = NaN, as F.softmax gives
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=1)[:, None]  # a NaN input makes the sum, so the whole row, NaN
    tl.store(y_ptr + r * cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pair(m, s):
    """(max, sum) as one 64-bit word, the max's bits high. Never 0, the empty slot: a max of
    +0.0 (bits 0) means an element exp(0) = 1 in the sum, so the sum's bits are not 0."""
    return (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64) & LOW32)


@triton.jit
def _split_kernel(x_ptr, y_ptr, slots_ptr, cnt_ptr, rows, cols, x_stride, bank_words, BLOCK: tl.constexpr,
                  PHASE: tl.constexpr):
    split = tl.cdiv(cols, BLOCK)
    total = rows * split
    t = tl.program_id(0)
    parity = 0
    if PHASE == 2 and split > 1:  # ticket = start order; the launch's parity in the counter's high half
        ticket = tl.atomic_add(cnt_ptr, 1, sem="relaxed")
        t = (ticket & LOW32).to(tl.int32)
        parity = ((ticket >> 32) & 1).to(tl.int32)
        if t == total - 1:  # the last ticket: low half back to 0, parity flipped
            tl.atomic_add(cnt_ptr, tl.full([], 1 << 32, tl.int64) - total.to(tl.int64), sem="relaxed")
    row = t // split
    k = t % split
    offs = k * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row.to(tl.int64) * x_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.maximum(tl.max(x, axis=0), NEG_MAX)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    if split > 1:
        slots = slots_ptr + parity * bank_words + row * MAX_SPLIT
        kk = tl.arange(0, MAX_SPLIT)
        live = kk < split
        if PHASE != 1:
            tl.atomic_xchg(slots + k, _pair(m, s), sem="relaxed")
        if PHASE == 2:
            # Empty this program's share of the other bank, which the next launch uses, then
            # poll the row's slots until none is empty.
            other = slots_ptr + (1 - parity) * bank_words
            share = tl.cdiv(bank_words, total)
            end = tl.minimum((t + 1) * share, bank_words)
            for c in range(t * share, end, MAX_SPLIT):
                tl.store(other + c + kk, tl.zeros([MAX_SPLIT], tl.int64), mask=c + kk < end)
            v = tl.zeros([MAX_SPLIT], tl.int64)
            missing = 1
            while missing > 0:
                v = tl.atomic_add(slots + kk, tl.zeros([MAX_SPLIT], tl.int64), mask=live, sem="relaxed")
                missing = tl.max(tl.where(live & (v == 0), 1, 0), axis=0)
        else:
            v = tl.load(slots + kk, mask=live, other=0)
        pm = tl.where(live, (v >> 32).to(tl.int32).to(tl.float32, bitcast=True), NEG_MAX)
        ps = tl.where(live, (v & LOW32).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
        m_row = tl.max(pm, axis=0)
        e = e * tl.exp(m - m_row)
        s = tl.sum(ps * tl.exp(pm - m_row), axis=0)
    if PHASE != 0:
        # A row of -inf: s = 0 and e = 0, so 0 * inf = NaN as F.softmax gives; a NaN input
        # makes s NaN for the whole row.
        y = e * (1.0 / s)
        tl.store(y_ptr + row.to(tl.int64) * cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pipe_kernel(x_ptr, y_ptr, rows, cols, x_stride, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """One row per iteration of a persistent program; with STAGES > 1 Triton's pipeliner
    copies the next rows into shared memory (cp.async) while this one is reduced."""
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    for row in tl.range(tl.program_id(0), rows, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r * x_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=0)  # as in _rows_kernel: a row of -inf or a NaN gives NaN, as F.softmax does
        e = tl.exp(x - m)
        y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(y_ptr + r * cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _online_kernel(x_ptr, y_ptr, cols, x_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * x_stride
    m = tl.full([BLOCK], NEG_MAX, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    m_row = tl.max(m, axis=0)
    inv = 1.0 / tl.sum(s * tl.exp(m - m_row), axis=0)  # a row of -inf: 1/0, then 0 * inf = NaN
    for start in range(0, cols, BLOCK):
        mask = start + offs < cols
        x = tl.load(x_row + start + offs, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m_row) * inv
        tl.store(y_ptr + row * cols + start + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _per_thread(block_elems, warps):
    return block_elems // (32 * warps)


# The H100's measured best lie inside these spaces (every config timed alone, cold L2): rows
# of 256-1024 at 2-16 rows and 1-4 warps per program (1.9-2.2 TB/s fp32; 1 row or 8 warps
# were up to 30% slower). Split rows, met without fences: chunks of 4096 at 4 warps or 8192 at
# 8 on the sweep's rows of 32000-131072; 16 warps at those chunks ran 1.8-1.9 TB/s in bf16.
_rows_tuned = triton.autotune(
    configs=[triton.Config({"ROWS": r}, num_warps=w) for r in (2, 4, 8, 16) for w in (1, 2, 4)],
    key=["cols"],
    prune_configs_by={"early_config_prune": lambda cs, _, **kw: [
        c for c in cs if 4 <= _per_thread(c.kwargs["ROWS"] * kw["BLOCK"], c.num_warps) <= 64] or cs[:1]},
)(_rows_kernel)
_SPLIT_BLOCKS = (2048, 4096, 8192, 16384, 32768)
_SPLIT_WARPS = (4, 8, 16, 32)
SPLIT_MIN = 4096  # longer rows also try chunks; the smallest chunk (4096) is a whole row up to here
CHUNKS = (4096, 8192, 16384)


def _split_configs(configs, args, **kwargs):
    """Rows of <= MAX_FUSED columns: one chunk (one program per row). Rows of more than
    SPLIT_MIN columns: chunks of CHUNKS columns at 16-64 elements a thread, 2 to SPLIT_CAP of
    them a row (beside the one chunk up to MAX_FUSED)."""
    cols = args["cols"]
    kept = [c for c in configs if c.kwargs["BLOCK"] in CHUNKS and _per_thread(c.kwargs["BLOCK"], c.num_warps) >= 16
            and 2 <= triton.cdiv(cols, c.kwargs["BLOCK"]) <= SPLIT_CAP] if cols > SPLIT_MIN else []
    if cols <= MAX_FUSED:
        kept = [c for c in configs if c.kwargs["BLOCK"] == triton.next_power_of_2(cols)] + kept
    return kept or configs[-1:]


_split_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in _SPLIT_BLOCKS for w in _SPLIT_WARPS
             if 8 <= _per_thread(b, w) <= 64],
    key=["cols"],
    prune_configs_by={"early_config_prune": _split_configs},
)(_split_kernel)
_online_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (2048, 4096, 8192) for w in (4, 8, 16)],
    key=["cols"],
)(_online_kernel)

PIPE_MIN = 16384  # pipelined candidates only for longer rows: at 4096-16384 columns they lost on the H100
PIPE_SMEM = 192 * 1024  # of the H100's 227 KiB per block: STAGES - 1 rows in flight in shared memory


def pipe_configs(cols, elem_bytes):
    """`_pipe_kernel` candidates (kind, programs per SM, launch kwargs) for rows of `cols`."""
    block = triton.next_power_of_2(cols)
    if not PIPE_MIN < cols <= MAX_FUSED:
        return []
    return [("pipe", per_sm, {"BLOCK": block, "STAGES": stages, "num_warps": 16})
            for stages, per_sm in ((3, 2), (3, 4), (4, 2)) if (stages - 1) * block * elem_bytes <= PIPE_SMEM]


# device -> (slots, counter): two banks of SPLIT_CAP slots a row, emptied by the launch before
# the one that uses them; the ticket counter (int64) is back to 0 in its low half after each
# launch. Grown on demand; a launch empties the whole other bank, 256 bytes a row, so a
# workspace four times larger than the launch's rows (and over SHRINK_ROWS) is made anew.
_WORKSPACE: dict = {}
SHRINK_ROWS = 4096


def _workspace(rows, device):
    slots, cnt = _WORKSPACE.get(device, (None, None))
    have = 0 if slots is None else slots.numel() // (2 * SPLIT_CAP)
    if have < rows or (have > 4 * rows and have > SHRINK_ROWS):
        slots = torch.zeros(2 * rows * SPLIT_CAP, dtype=torch.int64, device=device)
        cnt = torch.zeros(1, dtype=torch.int64, device=device)
        _WORKSPACE[device] = (slots, cnt)
    return slots, cnt


def softmax(x, out, short: int = SHORT, split_block: int | None = None, interpreter_block: int = 1024):
    """Softmax of the rows of 2-D `x` (fp32 or bf16, unit column stride) into contiguous `out`.
    `split_block` fixes the chunk of the split path (the interpreter's default: 1024)."""
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return out
    if x.stride(1) != 1:
        x = x.contiguous()
    on_gpu = x.is_cuda
    if not on_gpu:
        from kernels.common import triton_interpreter

        triton_interpreter.apply()
    if cols <= short:
        block = triton.next_power_of_2(cols)
        if on_gpu:
            tuning.launch_tuned(_rows_tuned, lambda meta: (triton.cdiv(rows, meta["ROWS"]),),
                                (x, out, rows, cols, x.stride(0)), (rows, cols, x.dtype), x.device, BLOCK=block)
        else:
            _rows_kernel[(triton.cdiv(rows, 2),)](x, out, rows, cols, x.stride(0), BLOCK=block, ROWS=2)
        return out
    block = split_block or (None if on_gpu else interpreter_block)
    if triton.cdiv(cols, block or _SPLIT_BLOCKS[-1]) > SPLIT_CAP:
        if on_gpu:
            tuning.launch_tuned(_online_tuned, lambda meta: (rows,), (x, out, cols, x.stride(0)), (rows, cols, x.dtype),
                                x.device)
        else:
            _online_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=interpreter_block, num_warps=4)
        return out
    slots, cnt = _workspace(rows, x.device)
    if block is None:
        args = (x, out, slots, cnt, rows, cols, x.stride(0), slots.numel() // 2)

        def candidates():  # built on the first launch of a shape only
            split = [("split", 0, c.all_kwargs()) for c in _split_configs(_split_tuned.configs, {"cols": cols})]
            return split + pipe_configs(cols, x.element_size())

        def run(candidate):
            kind, per_sm, kw = candidate
            if kind == "split":
                _split_kernel[(rows * triton.cdiv(cols, kw["BLOCK"]),)](*args, PHASE=2, **kw)
            else:
                _pipe_kernel[(min(rows, per_sm * tuning.sm_count(x.device)),)](x, out, rows, cols, x.stride(0), **kw)

        tuning.launch_fastest(("softmax_triton", rows, cols, x.dtype), candidates, run, x.device)
        return out
    for phase in ((2,) if on_gpu else (0, 1)):
        _split_kernel[(rows * triton.cdiv(cols, block),)](x, out, slots, cnt, rows, cols, x.stride(0),
                                                          slots.numel() // 2, BLOCK=block, PHASE=phase, num_warps=4)
    return out


def load():
    return lambda inputs, out: softmax(inputs[0], out)
