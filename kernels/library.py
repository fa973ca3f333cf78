"""This repository's library: one entry point per operator, each running the revision that the
operator's dispatch table (kernels/<op>/dispatch.json, made by `kernlog dispatch OP` from the
committed sweep) picks for the call's shape class and dtype; docs/dispatch.md says how.

    from kernels import library
    y = library.softmax(x)                      # over the last dimension
    y = library.layer_norm(x, w, b, 1e-5)

Forward only, fp32 and bf16. On the GPU every qualifying revision may be picked; on the CPU
(tests, under TRITON_INTERPRET=1) a CUDA C pick is passed over for the next Triton one.
`dispatched(name)` is an operator's entry point in the launcher protocol (inputs as its
make_inputs builds them, `out` optional), for timing it beside the revisions
(scripts/dispatch_check.py).
"""
from __future__ import annotations

import functools
from pathlib import Path

from kernlog.library import Dispatched, first_shape

ROOT = Path(__file__).resolve().parent.parent
OPS = ("softmax", "layernorm", "rmsnorm", "gelu", "dropout", "matmul_relu", "attention")


def _matmul_shape(inputs):
    a, b = inputs[:2]
    return a.shape[0], b.shape[1], a.shape[1]  # (M, N, K), the matmul's shape convention


SHAPE_OF = {"matmul_relu": _matmul_shape}  # the others: the first input's shape


@functools.cache
def dispatched(name: str) -> Dispatched:
    return Dispatched.open(ROOT, name, SHAPE_OF.get(name, first_shape))


def _rows(x):
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def softmax(x):
    """softmax over the last dimension."""
    return dispatched("softmax")((_rows(x),)).reshape(x.shape)


def layer_norm(x, w, b, eps: float = 1e-5):
    """LayerNorm over the last dimension, weight `w` and bias `b`."""
    return dispatched("layernorm")((_rows(x).contiguous(), w, b, eps)).reshape(x.shape)


def rms_norm(x, w, eps: float = 1e-6):
    """RMSNorm over the last dimension, weight `w`."""
    return dispatched("rmsnorm")((_rows(x).contiguous(), w, eps)).reshape(x.shape)


def gelu(x, approximate: str = "tanh"):
    """GeLU elementwise, F.gelu's `approximate` ("tanh" or "none")."""
    return dispatched("gelu")((x.reshape(-1).contiguous(), approximate)).reshape(x.shape)


def dropout(x, p: float, seed: int):
    """Inverted dropout: each element zeroed with probability p, the rest scaled by 1 / (1 - p)."""
    return dispatched("dropout")((x.reshape(-1).contiguous(), p, seed)).reshape(x.shape)


def matmul_relu(a, b):
    """relu(a @ b), a of M x K, b of K x N."""
    return dispatched("matmul_relu")((a, b))


def attention(q, k, v, scale: float | None = None):
    """Causal attention of q, k, v of (batch, heads, tokens, head_dim); `scale` 1/sqrt(head_dim)
    where None."""
    return dispatched("attention")((q, k, v, q.shape[-1] ** -0.5 if scale is None else scale))
