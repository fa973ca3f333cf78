"""Triton softmax: one program per row. A row that fits (<= MAX_FUSED elements) is held in
registers, read once and written once; a longer row loops over column blocks with an
online (max, sum) per lane, then a second loop writes (read twice, written once).

Autotuned over num_warps (and the column block of the long-row loop) on a GPU; under
TRITON_INTERPRET on CPU tensors the autotuner has no GPU to time on, so a fixed config runs.
"""
from __future__ import annotations

import triton
import triton.language as tl

MAX_FUSED = 32768  # longest row held in one program: 64 fp32 per thread at 16 warps
NEG_MAX = tl.constexpr(-3.4028234663852886e38)  # finite running-max identity: never exp(-inf - -inf) = NaN


@triton.jit
def _fused_kernel(x_ptr, y_ptr, cols, x_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)  # a row of -inf: m = -inf, exp(NaN) = NaN, as F.softmax gives
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=0)  # a NaN input makes the sum, so the whole row, NaN
    tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


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


def _prune_fused(configs, named_args, **kwargs):
    # More than 64 elements per thread spills; fewer than 4 leaves loads too narrow.
    block = kwargs["BLOCK"]
    kept = [c for c in configs if 4 <= block // (32 * c.num_warps) <= 64]
    return kept or configs[:1]


_fused_tuned = triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16, 32)],
    key=["BLOCK"], prune_configs_by={"early_config_prune": _prune_fused},
)(_fused_kernel)
_online_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (2048, 4096, 8192) for w in (4, 8, 16)],
    key=["cols"],
)(_online_kernel)


def softmax(x, out, max_fused: int = MAX_FUSED, interpreter_block: int = 1024):
    """Softmax of the rows of 2-D `x` (fp32 or bf16, unit column stride) into contiguous `out`."""
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return out
    if x.stride(1) != 1:
        x = x.contiguous()
    block = triton.next_power_of_2(cols)
    on_gpu = x.is_cuda
    if block <= max_fused:
        kernel = _fused_tuned if on_gpu else _fused_kernel
        kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=block, **({} if on_gpu else {"num_warps": 4}))
    elif on_gpu:
        _online_tuned[(rows,)](x, out, cols, x.stride(0))
    else:
        from kernels.common import triton_interpreter

        triton_interpreter.apply()
        _online_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=interpreter_block, num_warps=4)
    return out


def load():
    return lambda inputs, out: softmax(inputs[0], out)
