"""wrong_no_delta (known wrong): v0_fused with its preprocess never launched, delta left zero.

The bug: ds = p * dp, where the softmax's Jacobian gives ds = p * (dp - delta), delta =
rowsum(do * o) = sum_j p_ij dp_ij. Dropping it adds p_ij delta_i to every ds_ij: dq_i is off by
delta_i o_k,i (the rows' p-weighted mean of the keys, times the scale) and dk by the same from the
key side, while dv, which needs no ds, stays right. Kept so the gate keeps proving it sees a
backward that is right in a third of its output and plausible in magnitude in the rest.
"""
import torch

from kernels.attention_backward import v0_fused


def attention_backward(q, k, v, do, scale, out):
    v0_fused.check_args(q, k, v, do, out)
    q, k, v, do = (t if t.stride(-1) == 1 else t.contiguous() for t in v0_fused.on_device(q, k, v, do, out))
    _, lse = v0_fused.forward(q, k, v, scale, out)
    delta = torch.zeros_like(lse)  # the bug: rowsum(do * o) never computed
    return v0_fused.backward(q, k, v, do, scale, lse, delta, out)
