"""v3_wide: v2, with one row at 32 warps (1024 threads) among its whole-row candidates.

Change: v2's whole-row kernel (kernels.common.rownorm_aligned, unchanged) under a second
autotune object whose configs add ROWS=1 at 32 warps; the launcher still times every candidate
per shape and keeps the fastest.
Evidence (H100, ncu at 1024x32768 bf16, v2 against torch.compile, 0.96x): v2's whole row at 16
warps holds 64 elements a thread in 125 registers, one block an SM, 25% theoretical occupancy
(torch.compile: 1024 threads, 100%); half the sampled stalls wait on the load of x. ptxas for
sm_90 at 32768 columns and 32 warps: 62 registers, no spills in bf16 (64 and 48 bytes spilled
in fp32, as v2's 16 warps spill 48): two blocks' worth of warps an SM. LayerNorm's v3 took the
same config at 1024x32768 fp32 from 2121 to 2628 GB/s (0.80x to 0.99x torch.compile).
Predicts: 1024x32768 >= torch.compile in bf16 and fp32 (v2: 0.96x, v0: 0.98x); every other
member as v2 (the config is a candidate only where a thread holds 4-64 elements).
"""
import triton

from kernels.common import rownorm, rownorm_aligned
from kernels.common.rownorm import ROW_CONFIGS, prune_rows

CONFIGS = ROW_CONFIGS + [triton.Config({"ROWS": 1}, num_warps=32)]
rows_kernel = triton.autotune(configs=CONFIGS, key=["n_q", "Q"],
                              prune_configs_by={"early_config_prune": prune_rows})(rownorm_aligned.rows_kernel.fn)


def rmsnorm(x, weight, eps, out):
    return rownorm.launch(rows_kernel, rownorm_aligned.rows_args(x, weight, None, eps, out), x, weight, None, eps, out)
