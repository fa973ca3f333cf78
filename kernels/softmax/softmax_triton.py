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

The meeting has no fence and no counter. A slot word holds the chunk's max (high half), its
sum, and in the sum's sign bit (a sum is never negative) the epoch of the launch that wrote
it. Every launch leaves all SPLIT_CAP slots of each row it splits in one epoch (program 0 of
a row marks the slots past the row's chunks), so a program reads the epoch its own slot
holds and takes the other one, and all programs of a row agree; a poll tells this launch's
words from the last one's, and nothing has to be emptied. The state is on the device, so a
launch replayed from a CUDA graph flips epochs too. Two launches must not run concurrently
on different streams.

A program's (row, chunk) is its program id, so a row's chunks have consecutive ids. The GPU
starts programs in id order, so a row's chunks run together and the wait is short; CUDA does
not promise that order, so a program that has polled `polls` times without finding every chunk
computes the row's (max, sum) itself from x (a second read of the row) and goes on: the
kernel finishes whatever order its programs run in.

On the H100 at bf16 1024x131072, the first version met through a per-row arrival counter
with release and acquire fences (2.28 TB/s). The next had two banks of slots, each emptied
by the launch after, and a ticket: one atomic on one address per program, whose result gave
the bank and the program's chunk (2.80). Its result gated every program's loads: at bf16
2048x32768 that version ran 2.70 against this one's 2.83 (chunks of 4096, 4 warps, timed in
one run).

Under TRITON_INTERPRET on CPU tensors, programs run one after another and cannot wait for
each other: polled once (`polls` = 1), every chunk but a row's last takes the fallback, and the
last meets the others' words, so one launch runs both paths. No tuning there: fixed configs.
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
SUM_BITS = tl.constexpr(0x7FFFFFFF)  # a slot's low half: the sum's bits but the sign
EPOCH = tl.constexpr(1 << 31)  # ... whose place holds the launch's epoch
GPU_POLLS = 4096  # polls of the row's slots before a program computes the row's (max, sum) itself


@triton.jit
def _row_stats(x_row, cols, TILE: tl.constexpr):
    """The max of the row at `x_row` and the sum of exp(x - max), read TILE columns at a time
    (an online loop: every lane keeps its own max and rescales its sum when the max grows)."""
    lane = tl.arange(0, TILE)
    m = tl.full([TILE], NEG_MAX, tl.float32)
    s = tl.zeros([TILE], tl.float32)
    for start in range(0, cols, TILE):
        x = tl.load(x_row + start + lane, mask=start + lane < cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    m_row = tl.max(m, axis=0)
    return m_row, tl.sum(s * tl.exp(m - m_row), axis=0)


@triton.jit
def _rows_kernel(x_ptr, y_ptr, rows, cols_q, x_stride_q, BLOCK: tl.constexpr, ROWS: tl.constexpr, Q: tl.constexpr):
    """ROWS whole rows a program. The row length and x's row stride come divided by Q (as the
    norms' v2 does): the products are known multiples of Q, so rows start Q-aligned and the
    loads and stores move Q elements at once (16 bytes at Q = 16 / element size)."""
    cols = cols_q * Q
    x_stride = x_stride_q * Q
    first = tl.program_id(0).to(tl.int64) * ROWS  # 64-bit once a program; offsets inside the tile are 32-bit
    i = tl.arange(0, ROWS)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    mask = (first + i < rows) & (offs < cols)
    x = tl.load(x_ptr + first * x_stride + (i * x_stride + offs), mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)[:, None]  # a row of -inf: m = -inf, exp(NaN) = NaN, as F.softmax gives
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=1)[:, None]  # a NaN input makes the sum, so the whole row, NaN
    tl.store(y_ptr + first * cols + (i * cols + offs), y.to(y_ptr.dtype.element_ty), mask=mask)


def row_quantum(cols: int, x_stride: int, elem_bytes: int) -> int:
    """The largest power of two up to 16 bytes of elements dividing the row length and stride."""
    q = 16 // elem_bytes
    while q > 1 and (cols % q or x_stride % q):
        q //= 2
    return q


@triton.jit
def _split_kernel(x_ptr, y_ptr, slots_ptr, cols, x_stride, polls, BLOCK: tl.constexpr, SUB: tl.constexpr):
    split = tl.cdiv(cols, BLOCK)
    t = tl.program_id(0)
    row = t // split
    k = t % split
    offs = k * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    x_row = x_ptr + row.to(tl.int64) * x_stride
    x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
    slots = slots_ptr + row.to(tl.int64) * MAX_SPLIT
    epoch = tl.zeros([], tl.int64)
    if split > 1:  # this launch's epoch: the other one than the last launch left in every slot of the row
        epoch = (tl.load(slots + k, volatile=True) & EPOCH) ^ EPOCH
    # The chunk's max and sum are reduced across warps, through a barrier: every thread has read
    # the epoch before any publishes the new one in the same slot.
    m = tl.maximum(tl.max(x, axis=0), NEG_MAX)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    if split > 1:
        # The slots as a [SUB] vector, one lane a thread (SUB = 32 * num_warps): "all there" is
        # reduced across warps, so the program decides as one whether to fall back. Over
        # [MAX_SPLIT], every warp would hold its own copy of the slots and decide alone, and
        # the fallback's reductions would then meet only some of the warps at a barrier.
        tl.static_assert(SUB >= MAX_SPLIT)
        lane = tl.arange(0, SUB)
        live = lane < split
        word = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64)
                                                                     & SUM_BITS)
        tl.atomic_xchg(slots + k, word | epoch, sem="relaxed")
        v = tl.zeros([SUB], tl.int64)
        missing = 1
        while (missing > 0) & (polls > 0):
            v = tl.load(slots + lane, mask=live, other=0, volatile=True)
            missing = tl.max(tl.where(live & ((v & EPOCH) != epoch), 1, 0), axis=0)
            polls -= 1
        pm = tl.where(live, (v >> 32).to(tl.int32).to(tl.float32, bitcast=True), NEG_MAX)
        ps = tl.where(live, (v & SUM_BITS).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
        m_row = tl.max(pm, axis=0)
        s = tl.sum(ps * tl.exp(pm - m_row), axis=0)
        if missing > 0:  # not every chunk is there: the row's (max, sum) from x, SUB columns at a time
            m_row, s = _row_stats(x_row, cols, SUB)
        e = e * tl.exp(m - m_row)
        if k == 0:  # the slots past this row's chunks take the epoch too, for a later launch with more
            tl.store(slots + lane, tl.zeros([SUB], tl.int64) + epoch, mask=(lane >= split) & (lane < MAX_SPLIT))
    # A row of -inf: s = 0 and e = 0, so 0 * inf = NaN as F.softmax gives; a NaN input makes s
    # NaN for the whole row (its sign bit cleared in the slot, it stays NaN).
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
    m_row, s = _row_stats(x_row, cols, BLOCK)
    inv = 1.0 / s  # a row of -inf: 1/0, then 0 * inf = NaN
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
# Up to 256 rows a program: with 16 at most, rows of 8 columns left one warp of 128 elements a
# program (ncu, H100, 1048576x8 bf16: 65536 blocks of 32 threads, 13% achieved occupancy of a
# theoretical 50%, 0.37x torch.compile).
_rows_tuned = triton.autotune(
    configs=[triton.Config({"ROWS": r}, num_warps=w) for r in (2, 4, 8, 16, 32, 64, 128, 256) for w in (1, 2, 4)],
    key=["cols_q"],
    prune_configs_by={"early_config_prune": lambda cs, _, **kw: [
        c for c in cs if 4 <= _per_thread(c.kwargs["ROWS"] * kw["BLOCK"], c.num_warps) <= 64] or cs[:1]},
)(_rows_kernel)
_SPLIT_BLOCKS = (2048, 4096, 8192, 16384, 32768)
_SPLIT_WARPS = (4, 8, 16, 32)
# Longer rows also try chunks. At 8192 columns on the H100, chunks of 4096 lost to one program
# per row in both dtypes (bf16 2.50-2.63 TB/s against 2.68-2.71, fp32 2.83-2.84 against 2.86),
# and, kept as candidates, were sometimes picked: the sweep then ran bf16 4096x8192 at 2.62.
SPLIT_MIN = 8192
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
    configs=[triton.Config({"BLOCK": b, "SUB": 32 * w}, num_warps=w) for b in _SPLIT_BLOCKS for w in _SPLIT_WARPS
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
PIPE_HEADROOM = 35 * 1024  # what Triton's own scratch took beside them there (227 - 192 KiB)


def pipe_smem(device) -> int:
    """Shared memory per block the pipelined rows may take on `device`: its opt-in limit less
    the headroom measured on the H100 (192 KiB there)."""
    from kernlog.cuda import device_caps

    return device_caps(device).smem_per_block_optin - PIPE_HEADROOM


def pipe_configs(cols, elem_bytes, smem: int = PIPE_SMEM):
    """`_pipe_kernel` candidates (kind, programs per SM, launch kwargs) for rows of `cols`, with
    `smem` bytes of shared memory per block for the rows in flight."""
    block = triton.next_power_of_2(cols)
    if not PIPE_MIN < cols <= MAX_FUSED:
        return []
    return [("pipe", per_sm, {"BLOCK": block, "STAGES": stages, "num_warps": 16})
            for stages, per_sm in ((3, 2), (3, 4), (4, 2)) if (stages - 1) * block * elem_bytes <= smem]


# device -> slots: SPLIT_CAP words a row, all of a row in the epoch of the last launch that
# split it (zeros: epoch 0). Grown on demand; nothing to empty, so never shrunk.
_WORKSPACE: dict = {}


def _workspace(rows, device):
    slots = _WORKSPACE.get(device)
    if slots is None or slots.numel() < rows * SPLIT_CAP:
        slots = _WORKSPACE[device] = torch.zeros(rows * SPLIT_CAP, dtype=torch.int64, device=device)
    return slots


def launch_split(x, out, polls, **config):
    """`_split_kernel` on 2-D `x` in one config (BLOCK, SUB, num_warps, ...): a program per
    BLOCK columns of every row."""
    rows, cols = x.shape
    _split_kernel[(rows * triton.cdiv(cols, config["BLOCK"]),)](x, out, _workspace(rows, x.device), cols, x.stride(0),
                                                                 polls, **config)


def softmax(x, out, short: int = SHORT, split_block: int | None = None, interpreter_block: int = 1024,
            polls: int | None = None):
    """Softmax of the rows of 2-D `x` (fp32 or bf16, unit column stride) into contiguous `out`.
    `split_block` fixes the chunk of the split path (the interpreter's default: 1024); `polls`
    its polls before the fallback (GPU_POLLS; 1 under the interpreter, 0 to force the fallback)."""
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
        if x.stride(0) * 256 >= 2**31:  # 32-bit offsets inside a tile of up to 256 rows
            x = x.contiguous()
        block = triton.next_power_of_2(cols)
        q = row_quantum(cols, x.stride(0), x.element_size())
        args = (x, out, rows, cols // q, x.stride(0) // q)
        if on_gpu:
            tuning.launch_tuned(_rows_tuned, lambda meta: (triton.cdiv(rows, meta["ROWS"]),), args,
                                (rows, cols, x.dtype, q), x.device, BLOCK=block, Q=q)
        else:
            _rows_kernel[(triton.cdiv(rows, 2),)](*args, BLOCK=block, ROWS=2, Q=q)
        return out
    block = split_block or (None if on_gpu else interpreter_block)
    if triton.cdiv(cols, block or _SPLIT_BLOCKS[-1]) > SPLIT_CAP:
        if on_gpu:
            tuning.launch_tuned(_online_tuned, lambda meta: (rows,), (x, out, cols, x.stride(0)), (rows, cols, x.dtype),
                                x.device)
        else:
            _online_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=interpreter_block, num_warps=4)
        return out
    polls = (GPU_POLLS if on_gpu else 1) if polls is None else polls
    if block is None:
        def candidates():  # built on the first launch of a shape only
            split = [("split", 0, c.all_kwargs()) for c in _split_configs(_split_tuned.configs, {"cols": cols})]
            return split + pipe_configs(cols, x.element_size(), pipe_smem(x.device))

        def run(candidate):
            kind, per_sm, kw = candidate
            if kind == "split":
                launch_split(x, out, polls, **kw)
            else:
                _pipe_kernel[(min(rows, per_sm * tuning.sm_count(x.device)),)](x, out, rows, cols, x.stride(0), **kw)

        tuning.launch_fastest(("softmax_triton", rows, cols, x.dtype), candidates, run, x.device)
        return out
    # SUB: one lane a thread of the 4 warps on the GPU; under the interpreter, where every chunk
    # but a row's last takes the fallback, wider tiles (its CPU gate ran 298 s at 128, 103 at 1024).
    launch_split(x, out, polls, BLOCK=block, SUB=128 if on_gpu else 1024, num_warps=4)
    return out


def load():
    return lambda inputs, out: softmax(inputs[0], out)
