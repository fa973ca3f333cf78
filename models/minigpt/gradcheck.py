"""Central finite differences against the NumPy model's hand-written backward.

For a sample of entries of every parameter tensor, (L(w + h) - L(w - h)) / 2h against the
analytic gradient. In float64 the difference quotient's own error is h^2/6 |L'''| (truncation)
plus ~eps |L| / h (rounding, ~1e-11 at h = 1e-5 for L ~ 2.4). An entry passes when
|analytic - numeric| <= ATOL + RTOL |numeric|. A missing term in a backward moves gradients by
a share of their own size: the known-wrong backwards in tests/test_minigpt.py miss by 0.05 to
0.6, a million times the bound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import numpy_model
from .config import Config, init_params

H = 1e-5
# Measured on TINY (gradcheck_report, 20 entries a tensor): worst |analytic - numeric| 1.6e-9 on wte,
# for gradients up to 0.6, truncation (1.5e-7 at h = 1e-4, h^2 apart); 2e-11 to 6e-11 on the rest,
# rounding (4e-10 at h = 1e-6). The bound 1e-8 + 1e-7 |g|: ATOL alone is 6x the worst error, 160x the rest's.
ATOL = 1e-8
RTOL = 1e-7


@dataclass(frozen=True)
class TensorCheck:
    name: str
    n_checked: int
    max_abs_err: float  # max |analytic - numeric| over the sampled entries
    max_abs_grad: float  # max |numeric| over the same entries
    n_failed: int  # entries past ATOL + RTOL |numeric|


def check_params(cfg: Config, seed: int = 0, jitter: float = 0.3):
    """Weights for the check: the model's initialisation plus N(0, jitter) on every entry, so
    biases and LayerNorm weights are not 0 and 1 (a backward that drops a term multiplied by
    them would pass at the initialisation) and attention is far from uniform."""
    rng = np.random.default_rng(seed + 1)
    return {k: v + jitter * rng.standard_normal(v.shape) for k, v in init_params(cfg, seed).items()}


def check_batch(cfg: Config, batch: int = 2, seed: int = 0):
    """Token ids and next-token targets over the full context, with repeated tokens (which the
    embedding's backward must add up)."""
    rng = np.random.default_rng(seed + 2)
    idx = rng.integers(0, cfg.vocab_size, size=(batch, cfg.context))
    targets = rng.integers(0, cfg.vocab_size, size=(batch, cfg.context))
    return idx, targets


def finite_difference_check(params, idx, targets, cfg: Config, per_tensor: int = 6, seed: int = 0,
                            h: float = H, names=None) -> list[TensorCheck]:
    """One TensorCheck per parameter tensor (those in `names`, or all), `per_tensor` entries of
    each (all where fewer)."""
    _, grads = numpy_model.loss_and_grads(params, idx, targets, cfg)
    rng = np.random.default_rng(seed)
    results = []
    for name in names or params:
        w = params[name]
        flat = w.reshape(-1)  # a view: perturbing it perturbs params[name]
        picks = rng.choice(flat.size, size=min(per_tensor, flat.size), replace=False)
        errs, refs = [], []
        for j in picks:
            saved = flat[j]
            flat[j] = saved + h
            up = numpy_model.loss_only(params, idx, targets, cfg)
            flat[j] = saved - h
            down = numpy_model.loss_only(params, idx, targets, cfg)
            flat[j] = saved
            numeric = (up - down) / (2 * h)
            errs.append(abs(grads[name].reshape(-1)[j] - numeric))
            refs.append(abs(numeric))
        errs, refs = np.array(errs), np.array(refs)
        results.append(TensorCheck(name, len(picks), float(errs.max()), float(refs.max()),
                                   int((errs > ATOL + RTOL * refs).sum())))
    return results


def gradcheck_report(cfg: Config, seed: int = 0, per_tensor: int = 6, names=None) -> list[TensorCheck]:
    idx, targets = check_batch(cfg, seed=seed)
    return finite_difference_check(check_params(cfg, seed), idx, targets, cfg, per_tensor, seed, names=names)
