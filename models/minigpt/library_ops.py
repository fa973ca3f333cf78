"""The switch of issue 21, point 3: an `Ops` whose four functions launch kernlog's library.

    model.ops = library_ops()            # softmax, LayerNorm, GeLU, dropout through the library

Each op reshapes to what the kernels take (contiguous rows for softmax and LayerNorm, a flat
tensor for GeLU and dropout), launches the revision's launcher into a fresh output, and
reshapes back. Forward only: a model on these ops is for inference (logits, greedy
generation). The kernels take fp32 and bf16, so the model runs in one of those
(`MiniGPT(cfg, dtype=torch.float32)`), on the GPU, or on the CPU under TRITON_INTERPRET=1
for the Triton revisions (the tests do).

The default revisions are the library's fastest that run everywhere Triton does: softmax
`triton` (tied with the CUDA C v4-v7 at 8192x4096 fp32, fastest on long bf16 rows),
LayerNorm `v1_looped`, GeLU `v1_fused`, dropout `v1_rand4x`; `revisions` picks others
(softmax `v7_bf16_packed` on a GPU).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .torch_model import Ops

BEST = {"softmax": "triton", "layernorm": "v1_looped", "gelu": "v1_fused", "dropout": "v1_rand4x"}


def _launchers(root: Path | None, revisions: dict | None) -> dict:
    from kernlog.registry import find_root, load_kernel

    root = root or find_root(Path(__file__).resolve().parent)
    chosen = {**BEST, **(revisions or {})}
    return {kernel: load_kernel(root, kernel).revision(rev).load() for kernel, rev in chosen.items()}


def library_ops(root: Path | None = None, revisions: dict | None = None) -> Ops:
    launch = _launchers(root, revisions)

    def rows_op(kernel, x, *extra):
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(rows)
        launch[kernel]((rows, *extra), out)
        return out.reshape(x.shape)

    def flat_op(kernel, x, *extra):
        flat = x.reshape(-1).contiguous()
        out = torch.empty_like(flat)
        launch[kernel]((flat, *extra), out)
        return out.reshape(x.shape)

    def softmax(x, dim):
        if dim not in (-1, x.ndim - 1):
            raise ValueError(f"the library's softmax runs over the last dimension, not {dim}")
        return rows_op("softmax", x)

    def layer_norm(x, w, b, eps):
        return rows_op("layernorm", x, w, b, eps)

    def gelu(x):
        return flat_op("gelu", x, "tanh")

    def dropout(x, p, training):
        if not training or p == 0:
            return x
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        return flat_op("dropout", x, p, seed)

    return Ops(softmax=softmax, layer_norm=layer_norm, gelu=gelu, dropout=dropout)
