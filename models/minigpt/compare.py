"""The NumPy reference against the torch port at float64 on the CPU: logits, loss, every gradient.

    python -m models.minigpt.compare

Relative difference here is normwise: max |torch - numpy| / max |numpy| over the tensor (an
elementwise ratio is dominated by entries that cancel to ~1e-17).

Measured on TINY (numpy 2.4.6, torch 2.13.0+cpu): logits 7e-16, loss 1.4e-16, gradients at worst
1.3e-15 relative (h.0.attn.w_qkv), within the 1e-12 goal; no tensor is bitwise equal, nor can
be without sharing primitives. Op by op on the model's shapes: the products x @ W, (B, T, C)
by (C, out), and the weight gradients' x.T @ dy are bitwise equal; but np.exp and np.tanh
differ from torch's vectorised exp and tanh in the last place; a 16-long sum or mean differs
(NumPy's pairwise sum with 8 accumulators against torch's vectorised reduction), which moves
softmax, LayerNorm and cross-entropy; F.layer_norm takes mean and variance in one Welford-style
pass where the reference takes the mean and then the variance; and the batched products q @ k^T
and att @ v (NumPy's matmul loop against torch's bmm) sum in another order. Each is an ulp or
two; through two blocks and back they reach ~1e-15.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import numpy_model
from .config import TINY, Config
from .gradcheck import check_batch, check_params
from .torch_model import MiniGPT


@dataclass(frozen=True)
class Difference:
    name: str
    max_abs: float
    max_rel: float  # max_abs / max |numpy|
    bitwise: bool


def difference(name, ours, ref) -> Difference:
    ours, ref = np.asarray(ours), np.asarray(ref)
    diff = np.abs(ours - ref).max()
    scale = np.abs(ref).max()
    return Difference(name, float(diff), float(diff / scale) if scale else float(diff), bool(np.array_equal(ours, ref)))


def compare(cfg: Config = TINY, seed: int = 0) -> list[Difference]:
    """Rows for "logits", "loss", then each parameter's gradient, on check_params' weights."""
    params = check_params(cfg, seed)
    idx, targets = check_batch(cfg, seed=seed)
    logits, cache = numpy_model.forward(params, idx, cfg)
    loss, dlogits = numpy_model.cross_entropy(logits, targets)
    grads = numpy_model.backward(params, cache, dlogits, cfg)

    model = MiniGPT(cfg).load_numpy(params)
    t_loss, t_logits = model.loss(torch.from_numpy(idx), torch.from_numpy(targets))
    t_loss.backward()
    rows = [difference("logits", t_logits.detach().numpy(), logits), difference("loss", t_loss.item(), loss)]
    named = dict(model.named_parameters())
    rows += [difference(name, named[name].grad.numpy(), grads[name]) for name in params]
    return rows


def main():
    rows = compare()
    print(f"{TINY}, float64, torch {torch.__version__}, numpy {np.__version__}")
    print(f"{'tensor':18s} {'max abs':>9s} {'max rel':>9s} bitwise")
    for r in rows:
        print(f"{r.name:18s} {r.max_abs:9.2e} {r.max_rel:9.2e} {r.bitwise}")
    worst = max(rows, key=lambda r: r.max_rel)
    n_bitwise = sum(r.bitwise for r in rows)
    print(f"worst relative: {worst.max_rel:.2e} ({worst.name}); bitwise equal: {n_bitwise} of {len(rows)}")


if __name__ == "__main__":
    main()
