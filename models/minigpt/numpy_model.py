"""The reference MiniGPT: NumPy float64 forward and its hand-written backward.

GPT-2's shape: token + position embeddings; n_layer pre-LayerNorm blocks, each
x += attn(ln1(x)) and x += mlp(ln2(x)), the attention causal and multi-head with a softmax,
the MLP C -> 4C -> C with GeLU in its tanh form (GPT-2's, F.gelu(approximate="tanh")); a final
LayerNorm; the output head tied to the token embedding; mean cross-entropy over all tokens.

Shapes: B batch, T tokens (T <= context), C width, H heads, D = C / H, V vocabulary.
Each op is a forward that returns what its backward needs, and a backward beside it; the
model's backward walks the blocks in reverse. No dropout: the reference needs dropout == 0.
"""
from __future__ import annotations

import math

import numpy as np

from .config import Config

LN_EPS = 1e-5  # F.layer_norm's default
GELU_C = math.sqrt(2.0 / math.pi)


# ---- ops and their backwards ----

def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + LN_EPS)  # biased variance, as torch
    xhat = xc * rstd
    return xhat * w + b, (xhat, rstd, w)


def layer_norm_backward(dy, cache):
    """dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w."""
    xhat, rstd, w = cache
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    C = dy.shape[-1]
    return dx, (dy * xhat).reshape(-1, C).sum(0), dy.reshape(-1, C).sum(0)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def softmax_backward(dp, p):
    """The softmax's Jacobian diag(p) - p p^T applied to dp, row by row."""
    return p * (dp - (dp * p).sum(-1, keepdims=True))


def gelu(x):
    t = np.tanh(GELU_C * (x + 0.044715 * x * x * x))
    return 0.5 * x * (1.0 + t), t


def gelu_backward(dy, x, t):
    du_dx = GELU_C * (1.0 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)


def linear(x, w, b):
    return x @ w + b


def linear_backward(dy, x, w):
    """dx, dw, db for y = x @ w + b, x of shape (..., in)."""
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return dy @ w.T, x2.T @ dy2, dy2.sum(0)


def embedding_backward(dtable, idx, dx):
    """Adds each token's gradient into its row of dtable; a token seen twice adds twice
    (np.add.at, where dtable[idx] += dx would keep only one of them)."""
    np.add.at(dtable, idx, dx)


def cross_entropy(logits, targets):
    """Mean over tokens of -log softmax(logits)[target]; and dloss/dlogits."""
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    V = logits.shape[-1]
    flat_logp, flat_t = logp.reshape(-1, V), targets.reshape(-1)
    n = flat_t.size
    loss = -flat_logp[np.arange(n), flat_t].mean()
    dlogits = np.exp(flat_logp)
    dlogits[np.arange(n), flat_t] -= 1.0
    return loss, (dlogits / n).reshape(logits.shape)


# ---- attention and the block ----

def attention(x, p, pre, n_head):
    B, T, C = x.shape
    D = C // n_head
    qkv = linear(x, p[pre + "w_qkv"], p[pre + "b_qkv"])
    q, k, v = (t.reshape(B, T, n_head, D).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
    scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(D))
    causal = np.tril(np.ones((T, T), dtype=bool))
    att = softmax(np.where(causal, scores, -np.inf))  # exp(-inf) = 0: no weight on later tokens
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    out = linear(y, p[pre + "w_proj"], p[pre + "b_proj"])
    return out, (x, q, k, v, att, y)


def attention_backward(dout, cache, p, pre, grads):
    x, q, k, v, att, y = cache
    B, H, T, D = q.shape
    dy, grads[pre + "w_proj"], grads[pre + "b_proj"] = linear_backward(dout, y, p[pre + "w_proj"])
    dy = dy.reshape(B, T, H, D).transpose(0, 2, 1, 3)
    datt = dy @ v.transpose(0, 1, 3, 2)
    dv = att.transpose(0, 1, 3, 2) @ dy
    dscores = softmax_backward(datt, att) * (1.0 / math.sqrt(D))  # masked entries: att = 0, so 0
    dq = dscores @ k
    dk = dscores.transpose(0, 1, 3, 2) @ q
    dqkv = np.concatenate([t.transpose(0, 2, 1, 3).reshape(B, T, H * D) for t in (dq, dk, dv)], axis=-1)
    dx, grads[pre + "w_qkv"], grads[pre + "b_qkv"] = linear_backward(dqkv, x, p[pre + "w_qkv"])
    return dx


def block(x, p, i, n_head):
    h = f"h.{i}."
    a, ln1 = layer_norm(x, p[h + "ln1.w"], p[h + "ln1.b"])
    attn_out, attn = attention(a, p, h + "attn.", n_head)
    x = x + attn_out
    m, ln2 = layer_norm(x, p[h + "ln2.w"], p[h + "ln2.b"])
    pre_act = linear(m, p[h + "mlp.w_fc"], p[h + "mlp.b_fc"])
    act, t = gelu(pre_act)
    x = x + linear(act, p[h + "mlp.w_proj"], p[h + "mlp.b_proj"])
    return x, (ln1, attn, ln2, m, pre_act, t, act)


def block_backward(dx, cache, p, i, grads):
    """dx is the gradient of the block's output; the residual adds it to each branch's input."""
    h = f"h.{i}."
    ln1, attn, ln2, m, pre_act, t, act = cache
    dact, grads[h + "mlp.w_proj"], grads[h + "mlp.b_proj"] = linear_backward(dx, act, p[h + "mlp.w_proj"])
    dpre = gelu_backward(dact, pre_act, t)
    dm, grads[h + "mlp.w_fc"], grads[h + "mlp.b_fc"] = linear_backward(dpre, m, p[h + "mlp.w_fc"])
    dln2, grads[h + "ln2.w"], grads[h + "ln2.b"] = layer_norm_backward(dm, ln2)
    dx = dx + dln2
    da = attention_backward(dx, attn, p, h + "attn.", grads)
    dln1, grads[h + "ln1.w"], grads[h + "ln1.b"] = layer_norm_backward(da, ln1)
    return dx + dln1


# ---- the model ----

def forward(params, idx, cfg: Config):
    """Logits (B, T, V) for token ids idx (B, T), and the cache that backward needs."""
    if cfg.dropout != 0.0:
        raise ValueError("the NumPy reference has no dropout: use a Config with dropout=0")
    B, T = idx.shape
    if T > cfg.context:
        raise ValueError(f"{T} tokens exceed the context of {cfg.context}")
    x = params["wte"][idx] + params["wpe"][:T]
    blocks = []
    for i in range(cfg.n_layer):
        x, cache = block(x, params, i, cfg.n_head)
        blocks.append(cache)
    xf, ln_f = layer_norm(x, params["ln_f.w"], params["ln_f.b"])
    logits = xf @ params["wte"].T
    return logits, (idx, blocks, ln_f, xf)


def backward(params, cache, dlogits, cfg: Config):
    """The gradient of every parameter, given dloss/dlogits; same names and shapes as params."""
    idx, blocks, ln_f, xf = cache
    grads = {}
    C = cfg.width
    dxf = dlogits @ params["wte"]
    dwte = dlogits.reshape(-1, cfg.vocab_size).T @ xf.reshape(-1, C)  # the tied head's share
    dx, grads["ln_f.w"], grads["ln_f.b"] = layer_norm_backward(dxf, ln_f)
    for i in reversed(range(cfg.n_layer)):
        dx = block_backward(dx, blocks[i], params, i, grads)
    embedding_backward(dwte, idx, dx)
    grads["wte"] = dwte
    grads["wpe"] = np.zeros_like(params["wpe"])
    grads["wpe"][: idx.shape[1]] = dx.sum(0)
    return grads


def loss_and_grads(params, idx, targets, cfg: Config):
    logits, cache = forward(params, idx, cfg)
    loss, dlogits = cross_entropy(logits, targets)
    return loss, backward(params, cache, dlogits, cfg)


def loss_only(params, idx, targets, cfg: Config) -> float:
    return cross_entropy(forward(params, idx, cfg)[0], targets)[0]
