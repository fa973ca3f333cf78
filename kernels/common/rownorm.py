"""What LayerNorm and RMSNorm share: the whole-row configs of their v0 kernels, and v1's
looped kernel (one kernel for both: RMS=True drops the mean and the bias) with the launcher
that picks, per shape, between v0's whole rows and the loop.
"""
import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning

MAX_COLS = 32768  # whole rows in registers: 64 fp32 per thread at 16 warps; longer rows would spill
ROW_CONFIGS = [triton.Config({"ROWS": r}, num_warps=w) for r in (1, 2, 4, 8) for w in (2, 4, 8, 16)]
# The CPU interpreter has no timer to pick with; ROWS=2 exercises the row mask at odd row counts.
CPU_ROW_CONFIG = {"ROWS": 2}
# (chunk, warps) of the looped kernel: on the H100 at 8192x4096 fp32 these ran 2.83-2.88 TB/s
# (LayerNorm) and 2.76-2.88 (RMSNorm) with the cache hints, smaller chunks or fewer warps
# 2.0-2.7 (every config timed alone, cold L2).
LOOP_CONFIGS = ((1024, 16), (2048, 8), (2048, 16), (4096, 8), (4096, 16))
CPU_LOOP_BLOCK = 8  # the smallest chunk: several chunks per row at the tests' small shapes


def prune_rows(configs, named_args, **kwargs):
    """Whole-row configs with 4-64 elements per thread (the fewest rows per warp for tiny rows)."""
    block = kwargs["BLOCK_N"]
    fit = [c for c in configs if 4 <= c.kwargs["ROWS"] * block // (32 * c.num_warps) <= 64]
    return fit or [max(configs, key=lambda c: c.kwargs["ROWS"] / c.num_warps)]


@triton.jit
def loop_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride_x, stride_out, eps,
                BLOCK: tl.constexpr, RMS: tl.constexpr):
    """One row per program in chunks of BLOCK: a pass for the statistics that keeps the row
    in cache (evict_last), a second that reads it back from there (evict_first) and writes.

    LayerNorm's variance comes from per-lane sums shifted by the lane's first element (the
    shifted-data algorithm), merged across lanes with Chan's formula: a mean far from zero
    (the tests' shifted rows: 300 +- 1) cancels no digits, with no third pass over x."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    offs = tl.arange(0, BLOCK)
    if RMS:
        shift = tl.zeros([BLOCK], tl.float32)
    else:
        shift = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    q = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        d = tl.where(mask, x - shift, 0.0)
        s += d
        q += d * d
    if RMS:
        mean = 0.0
        rstd = 1.0 / tl.sqrt(tl.sum(q, axis=0) / n_cols + eps)
    else:
        n_lane = tl.where(offs < n_cols, (n_cols - offs + BLOCK - 1) // BLOCK, 0).to(tl.float32)
        lane_mean = shift + s / tl.maximum(n_lane, 1.0)
        mean = tl.sum(n_lane * lane_mean, axis=0) / n_cols
        dev = lane_mean - mean
        m2 = tl.sum(q - s * s / tl.maximum(n_lane, 1.0) + n_lane * dev * dev, axis=0)
        rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)
    out_row = out_ptr + row * stride_out
    for start in tl.range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + start + offs, mask=mask, eviction_policy="evict_last").to(tl.float32)
        y = (x - mean) * rstd * w
        if not RMS:
            y += tl.load(b_ptr + start + offs, mask=mask, eviction_policy="evict_last").to(tl.float32)
        tl.store(out_row + start + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch(rows_kernel, rows_args, x, weight, bias, eps, out):
    """Normalize the rows of `x` into `out` (bias None: RMSNorm) with the fastest, per shape, of
    `rows_kernel` (a v0 kernel, whole rows; its autotune object holds the configs, `rows_args`
    its arguments) and `loop_kernel`. Rows longer than MAX_COLS: the loop alone."""
    n_rows, n_cols = x.shape
    assert x.stride(1) == 1 and out.stride(1) == 1
    rms = bias is None
    loop_args = (x, weight, weight if rms else bias, out, n_cols, x.stride(0), out.stride(0), eps)
    if not out.is_cuda:
        triton_interpreter.apply()  # the loop over a runtime row length
        # about four chunks a row: a chunk of 8 took the family rows of 12288 columns through
        # 1536 interpreted iterations (the CPU gate of v1 from 5 to 55 s)
        block = max(CPU_LOOP_BLOCK, triton.next_power_of_2(n_cols) // 4)
        loop_kernel[(n_rows,)](*loop_args, BLOCK=block, RMS=rms, num_warps=1)
        return out
    block = triton.next_power_of_2(n_cols)

    def candidates():  # built on the first launch of a shape only
        loops = [("loop", {"BLOCK": b, "num_warps": w}) for b, w in LOOP_CONFIGS if b <= block]
        if n_cols > MAX_COLS:
            return loops
        rows = rows_kernel.early_config_prune(rows_kernel.configs, {}, BLOCK_N=block)
        return [("rows", c.all_kwargs()) for c in rows] + loops

    def run(candidate):
        kind, kw = candidate
        if kind == "rows":
            rows_kernel.fn[(triton.cdiv(n_rows, kw["ROWS"]),)](*rows_args, BLOCK_N=block, **kw)
        else:
            loop_kernel[(n_rows,)](*loop_args, RMS=rms, **kw)

    tuning.launch_fastest((loop_kernel, rows_kernel, n_rows, n_cols, x.dtype), candidates, run, x.device)
    return out
