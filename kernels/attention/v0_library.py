"""v0_library: causal attention the naive way, through the library: the scores go through DRAM.

Change: scores = q k^T * scale as one batched torch.matmul (cuBLAS), masked_fill with -inf
above the diagonal, kernlog's own Triton softmax over the T x T rows, then torch.matmul with v
into the output. Each step is its own launch; the B x H x T x T scores are written by the
first product, read and written by the mask and the softmax, and read again by the second.
Predicts: at (1, 12, 1024, 64) bf16 well under F.scaled_dot_product_attention: the score
traffic (12 x 1024 x 1024 x 2 bytes, ~5 times over) outweighs the 4 x 1.5 MB of q, k, v, o.
"""
from __future__ import annotations

from pathlib import Path

import torch

_MASKS: dict = {}  # (T, device) -> the bool mask above the diagonal, built once


def _above_diagonal(T: int, device) -> torch.Tensor:
    key = (T, str(device))
    if key not in _MASKS:
        _MASKS[key] = torch.ones((T, T), dtype=torch.bool, device=device).triu(1)
    return _MASKS[key]


def load_softmax(root: Path | None = None):
    """The library's Triton softmax launcher (rows x columns, contiguous rows), as MiniGPT's
    library_ops loads it."""
    from kernlog.registry import find_root, load_kernel

    root = root or find_root(Path(__file__).resolve().parent)
    return load_kernel(root, "softmax").revision("triton").load()


def attention(q, k, v, scale, out, softmax):
    T = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    scores.masked_fill_(_above_diagonal(T, q.device), float("-inf"))
    rows = scores.reshape(-1, T)
    probs = torch.empty_like(rows)
    softmax((rows,), probs)
    return torch.matmul(probs.reshape(scores.shape), v, out=out)
