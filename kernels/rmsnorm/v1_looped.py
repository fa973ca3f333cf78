"""v1_looped: RMSNorm forward, v0's whole rows or kernels.common.rownorm's looped kernel,
whichever is faster for the shape, and rows of any length.

Change: a second kernel walks each row in chunks of 1024-4096: a pass for the sum of
squares whose loads keep the row in cache (evict_last), then a pass that reads it back from
there (evict_first) and writes y. Fewer registers per row than v0's, so more rows in flight
per SM; rows longer than v0's 32768 columns work. Candidates of both kernels are timed per
shape (kernels.common.tuning) and the fastest runs.
Evidence: at 8192x4096 fp32, v0 (2.83 TB/s) stayed 2% under torch.compile (2.88), whose
Inductor kernel is such a loop: two reads of x, the second from cache, with these hints.
Predicts: fp32 >= torch.compile at 8192x4096 (the loop ran 2.88 ad hoc on the H100, level
with compile); bf16 keeps v0's kernel (the loop ran 2.68 against v0's 2.70).
"""
from kernels.common import rownorm

from .v0_triton import rmsnorm_kernel


def rmsnorm(x, weight, eps, out):
    n_rows, n_cols = x.shape
    rows_args = (x, weight, out, n_rows, n_cols, x.stride(0), out.stride(0), eps)
    return rownorm.launch(rmsnorm_kernel, rows_args, x, weight, None, eps, out)
