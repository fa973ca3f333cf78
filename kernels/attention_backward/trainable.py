"""Causal attention that trains: v2_split's forward (attention's v5_persistent, keeping each
row's log-sum-exp) and its backward from it (v2_split's kernels, each one's loop form and layout
picked per shape), as one torch.autograd.Function.

    from kernels.attention_backward.trainable import attention
    o = attention(q, k, v)           # (B, H, T, D), bf16 or fp32, differentiable in q, k and v
    o.sum().backward()

Unlike the ladder's revisions, which run the forward again to time forward + backward as one
launch, the backward here takes the forward's o and log-sum-exp as autograd saved them, as a
training step runs it (models.triage_examples.minigpt_train_fused_attention: MiniGPT's step
with kernlog's attention forward and backward, for `kernlog triage --verify`). Under CUDA
autocast the inputs are cast to bf16, as F.scaled_dot_product_attention's are.
On the CPU (tests) the kernels run in Triton's interpreter, on fp32 copies as v0_fused's do: the
forward v5_persistent's CPU path (v3_fma's loop), the backward v2_split's split loops in v0_fused's
fixed interpreter layouts.
"""
from __future__ import annotations

import torch

from kernels.attention_backward import v0_fused, v2_split


class _Attention(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)  # under autocast, as SDPA's
    def forward(ctx, q, k, v, scale):
        # the gradients' shape and device, holding no memory: what check_args and the kernels' device
        # choice read (the gradients themselves are allocated by backward, if it runs)
        like = q.new_empty(()).expand(*q.shape[:3], 3 * q.shape[-1])
        v0_fused.check_args(q, k, v, q, like)
        qd, kd, vd, _ = (t if t.stride(-1) == 1 else t.contiguous() for t in v0_fused.on_device(q, k, v, q, like))
        o, lse = v2_split.forward(qd, kd, vd, scale)
        ctx.save_for_backward(qd, kd, vd, o, lse)  # as the kernels take them (fp32 copies on the CPU)
        ctx.scale, ctx.dtype = scale, q.dtype
        return o.to(q.dtype)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        out = torch.empty((*q.shape[:3], 3 * q.shape[-1]), dtype=ctx.dtype, device=q.device)
        do = (do.float() if not out.is_cuda else do.to(q.dtype)).contiguous()
        v2_split.backward(q, k, v, do, ctx.scale, o, lse, out)
        D = q.shape[-1]
        return out[..., :D], out[..., D:2 * D], out[..., 2 * D:], None


def attention(q, k, v, scale: float | None = None):
    """softmax(q k^T * scale, causal) v, differentiable in q, k and v; `scale` 1/sqrt(head_dim)
    where None."""
    return _Attention.apply(q, k, v, q.shape[-1] ** -0.5 if scale is None else scale)
