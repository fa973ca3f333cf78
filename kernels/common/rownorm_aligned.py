"""LayerNorm's and RMSNorm's v2: v0's whole-row kernel (one for both) told that the row length
and the row strides are multiples of Q elements, so its loads and stores vectorize on rows
like 1000 that are no multiple of 16.

Triton specializes an integer argument divisible by 16 and nothing coarser: at 1000 columns
(and a row stride of 1000) the PTX for sm_90 moves bf16 two bytes at a time (ld.global.b16),
against 16-byte vectors at 1024 (tests/test_triton_compiles.py). Here the launcher passes
n_cols / Q and the strides / Q, and the kernel multiplies by the constexpr Q: the products are
known multiples of Q, the column mask is constant over Q lanes, and each row starts on a
Q-element boundary.
"""
import triton
import triton.language as tl

from kernels.common.rownorm import ROW_CONFIGS, prune_rows

QUANTUM = 8  # elements: 16 bytes of bf16, 32 of fp32


def quantum(n_cols: int, *strides: int) -> int:
    """QUANTUM where the row length and every row stride are multiples of it, else 1 (v0's case)."""
    return QUANTUM if all(v % QUANTUM == 0 for v in (n_cols, *strides)) else 1


@triton.autotune(configs=ROW_CONFIGS, key=["n_q", "Q"], prune_configs_by={"early_config_prune": prune_rows})
@triton.jit
def rows_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, n_q, stride_xq, stride_oq, eps,
                Q: tl.constexpr, RMS: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """ROWS whole rows per program in registers, fp32 statistics, one read of x and one write
    of y (RMS: no mean and no bias, b_ptr unused)."""
    n_cols = n_q * Q  # multiples of Q, as the compiler now knows
    stride_x = stride_xq * Q
    stride_out = stride_oq * Q
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    rows = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rows * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_mask).to(tl.float32)
    if RMS:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        y = x * rstd[:, None] * w[None, :]
    else:
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        y = xc * rstd[:, None] * w[None, :] + tl.load(b_ptr + cols, mask=col_mask).to(tl.float32)[None, :]
    tl.store(out_ptr + rows * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def rows_args(x, weight, bias, eps, out) -> tuple:
    """rows_kernel's arguments for rownorm.launch (bias None: RMSNorm)."""
    n_rows, n_cols = x.shape
    q = quantum(n_cols, x.stride(0), out.stride(0))
    rms = bias is None
    return (x, weight, weight if rms else bias, out, n_rows, n_cols // q, x.stride(0) // q, out.stride(0) // q, eps,
            q, rms)
