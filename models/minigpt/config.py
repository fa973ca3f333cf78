"""The model's shape and its weights, as a dict of float64 arrays named like the torch port's
state_dict ("h.0.attn.w_qkv"), so either model loads the other's weights by name."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Config:
    vocab_size: int
    context: int  # the longest sequence; position embeddings has this many rows
    n_layer: int
    n_head: int
    width: int  # the residual stream's C; the MLP is 4C wide
    dropout: float = 0.0  # the NumPy reference supports 0 only; the torch port passes it to ops.dropout

    def __post_init__(self):
        if self.width % self.n_head:
            raise ValueError(f"width {self.width} is not a multiple of n_head {self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout {self.dropout} is not in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.width // self.n_head


# The finite-difference and equivalence tests' size: small enough for a few hundred forwards a second.
TINY = Config(vocab_size=11, context=8, n_layer=2, n_head=2, width=16)


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in a fixed order. Weights multiply on the right: x @ W,
    W of shape (in, out). The output head is wte itself (tied): logits = x @ wte.T."""
    C, V = cfg.width, cfg.vocab_size
    shapes = {"wte": (V, C), "wpe": (cfg.context, C)}
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        shapes.update({
            h + "ln1.w": (C,), h + "ln1.b": (C,),
            h + "attn.w_qkv": (C, 3 * C), h + "attn.b_qkv": (3 * C,),
            h + "attn.w_proj": (C, C), h + "attn.b_proj": (C,),
            h + "ln2.w": (C,), h + "ln2.b": (C,),
            h + "mlp.w_fc": (C, 4 * C), h + "mlp.b_fc": (4 * C,),
            h + "mlp.w_proj": (4 * C, C), h + "mlp.b_proj": (C,),
        })
    shapes.update({"ln_f.w": (C,), "ln_f.b": (C,)})
    return shapes


def init_params(cfg: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2's initialisation: weights N(0, 0.02), the two projections into the residual stream
    scaled by 1/sqrt(2 n_layer), biases 0, LayerNorm weights 1."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith(("ln1.w", "ln2.w", "ln_f.w")):
            params[name] = np.ones(shape)
        elif leaf.startswith("b"):
            params[name] = np.zeros(shape)
        else:
            std = 0.02 / np.sqrt(2 * cfg.n_layer) if leaf == "w_proj" else 0.02
            params[name] = std * rng.standard_normal(shape)
    return params
