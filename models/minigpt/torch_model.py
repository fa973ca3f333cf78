"""MiniGPT as a torch nn.Module: numpy_model's forward, op for op, with autograd for the backward.

Parameters keep the NumPy layout and names (x @ W with W of shape (in, out); state_dict keys
"wte", "h.0.attn.w_qkv", ...), so `load_numpy` copies the reference's weights by name and the
two models compute the same matrix products. At float64 on the CPU the logits, loss and every
gradient agree with the NumPy model to ~1e-15 relative (compare.py measures it).

The seam for kernlog's kernels (issue 21, point 3): the model calls softmax (attention),
LayerNorm, GeLU and dropout only through its `ops`, an `Ops` of four plain functions that
default to torch's. A GPU session builds an `Ops` whose functions launch the library's best
revisions and passes it as `MiniGPT(cfg, ops=...)` or assigns `model.ops`, without touching
the model code. The signatures an adapter must keep:

    softmax(x, dim)              x (B, H, T, T) attention scores, masked with -inf above the
                                 diagonal (every row keeps its diagonal, so no row is all -inf);
                                 dim is always -1
    layer_norm(x, w, b, eps)     over the last dimension, x (B, T, C), w and b (C,)
    gelu(x)                      the tanh form, elementwise, any shape
    dropout(x, p, training)      inverted dropout; the identity when p == 0 or not training

kernlog's kernels take contiguous 2-D rows (softmax, LayerNorm) or 1-D tensors (GeLU,
dropout) and are forward-only, so an adapter reshapes (x.reshape(-1, x.shape[-1]) then back)
and a kernel-backed model is for inference (logits, greedy generation) unless the adapter
also supplies a backward through torch.autograd.Function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import Config, param_shapes
from .numpy_model import LN_EPS


def _softmax(x, dim):
    return torch.softmax(x, dim=dim)


def _layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _gelu(x):
    return F.gelu(x, approximate="tanh")


def _dropout(x, p, training):
    return F.dropout(x, p, training)


@dataclass(frozen=True)
class Ops:
    """The four ops the model routes through; the defaults are torch's (see the module docstring)."""

    softmax: Callable = _softmax
    layer_norm: Callable = _layer_norm
    gelu: Callable = _gelu
    dropout: Callable = _dropout
    # attention(q, k, v, scale) -> causal attention's output in one call (a fused kernel such as
    # F.scaled_dot_product_attention); None: scores, mask, softmax, dropout and @ v as above.
    attention: Callable | None = None


TORCH_OPS = Ops()


def _param(shape, dtype):
    return nn.Parameter(torch.zeros(shape, dtype=dtype))


class LayerNorm(nn.Module):
    def __init__(self, C, dtype):
        super().__init__()
        self.w, self.b = _param(C, dtype), _param(C, dtype)

    def forward(self, x, ops):
        return ops.layer_norm(x, self.w, self.b, LN_EPS)


class Attention(nn.Module):
    def __init__(self, cfg: Config, dtype):
        super().__init__()
        C = cfg.width
        self.n_head, self.p = cfg.n_head, cfg.dropout
        self.w_qkv, self.b_qkv = _param((C, 3 * C), dtype), _param(3 * C, dtype)
        self.w_proj, self.b_proj = _param((C, C), dtype), _param(C, dtype)
        self.register_buffer("causal", torch.tril(torch.ones(cfg.context, cfg.context, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x, ops):
        B, T, C = x.shape
        D = C // self.n_head
        qkv = x @ self.w_qkv + self.b_qkv
        q, k, v = (t.reshape(B, T, self.n_head, D).transpose(1, 2) for t in qkv.split(C, dim=-1))
        if ops.attention is not None:
            y = ops.attention(q, k, v, 1.0 / math.sqrt(D)).transpose(1, 2).reshape(B, T, C)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = ops.softmax(scores.masked_fill(~self.causal[:T, :T], float("-inf")), -1)
            att = ops.dropout(att, self.p, self.training)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return ops.dropout(y @ self.w_proj + self.b_proj, self.p, self.training)


class MLP(nn.Module):
    def __init__(self, cfg: Config, dtype):
        super().__init__()
        C = cfg.width
        self.p = cfg.dropout
        self.w_fc, self.b_fc = _param((C, 4 * C), dtype), _param(4 * C, dtype)
        self.w_proj, self.b_proj = _param((4 * C, C), dtype), _param(C, dtype)

    def forward(self, x, ops):
        h = ops.gelu(x @ self.w_fc + self.b_fc)
        return ops.dropout(h @ self.w_proj + self.b_proj, self.p, self.training)


class Block(nn.Module):
    def __init__(self, cfg: Config, dtype):
        super().__init__()
        self.ln1, self.attn = LayerNorm(cfg.width, dtype), Attention(cfg, dtype)
        self.ln2, self.mlp = LayerNorm(cfg.width, dtype), MLP(cfg, dtype)

    def forward(self, x, ops):
        x = x + self.attn(self.ln1(x, ops), ops)
        return x + self.mlp(self.ln2(x, ops), ops)


class MiniGPT(nn.Module):
    def __init__(self, cfg: Config, ops: Ops = TORCH_OPS, dtype=torch.float64):
        super().__init__()
        self.cfg, self.ops = cfg, ops
        self.wte = _param((cfg.vocab_size, cfg.width), dtype)
        self.wpe = _param((cfg.context, cfg.width), dtype)
        self.h = nn.ModuleList(Block(cfg, dtype) for _ in range(cfg.n_layer))
        self.ln_f = LayerNorm(cfg.width, dtype)

    def forward(self, idx):
        """Logits (B, T, V) for token ids idx (B, T)."""
        T = idx.shape[1]
        if T > self.cfg.context:
            raise ValueError(f"{T} tokens exceed the context of {self.cfg.context}")
        x = self.ops.dropout(self.wte[idx] + self.wpe[:T], self.cfg.dropout, self.training)
        for block in self.h:
            x = block(x, self.ops)
        return self.ln_f(x, self.ops) @ self.wte.T  # the head tied to the token embedding

    def loss(self, idx, targets):
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), logits

    def load_numpy(self, params: dict[str, np.ndarray]):
        """Copies the NumPy model's weights in, by name; every parameter must be given."""
        expected = param_shapes(self.cfg)
        if set(params) != set(expected):
            raise KeyError(f"weights differ by name: {sorted(set(params) ^ set(expected))}")
        dtype = self.wte.dtype
        self.load_state_dict({k: torch.tensor(v, dtype=dtype) for k, v in params.items()})
        return self

    @torch.no_grad()
    def generate(self, idx, n_tokens: int):
        """Greedy decoding: n_tokens more ids after idx (B, T), each the argmax of the last logits."""
        for _ in range(n_tokens):
            logits = self(idx[:, -self.cfg.context:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx
