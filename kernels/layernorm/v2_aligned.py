"""v2_aligned: v1's choice per shape between whole rows and the looped kernel, with the
whole-row kernel of kernels.common.rownorm_aligned: told that the row length and strides are
multiples of 8, it vectorizes rows like 1000 that are no multiple of 16.

Change: the whole-row candidates take rownorm_aligned.rows_kernel (v0's arithmetic, its sizes
passed divided by 8 and multiplied back by a constexpr); the looped candidates are v1's.
Evidence (H100, kernlog bench layernorm --family hidden): 16384x1000 bf16 ran 2011 GB/s, 0.84x
torch.compile (2395), while 16384x1024-class rows tie it; in the PTX for sm_90, v0's kernel at
1000 columns moves bf16 two bytes at a time, at 1024 sixteen.
Predicts: 16384x1000 in bf16 and fp32 >= torch.compile; every other member as v1 (lengths that
are multiples of 16 compile as before).
"""
from kernels.common import rownorm, rownorm_aligned


def layernorm(x, weight, bias, eps, out):
    return rownorm.launch(rownorm_aligned.rows_kernel, rownorm_aligned.rows_args(x, weight, bias, eps, out),
                          x, weight, bias, eps, out)
