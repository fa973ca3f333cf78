"""Train the NumPy MiniGPT on the generated corpus with Adam, written out.

    python -m models.minigpt.train [--steps 200]

prints the loss on a fixed evaluation batch before, during and after, and a greedy sample.
Run it with OPENBLAS_NUM_THREADS=1: on the busy 2-core CPU machine two OpenBLAS threads took
8-25 ms for a step's 512x32x128 product against 0.13 ms on one, and the default 200 steps
29 s against 2.9 s.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from . import corpus, numpy_model
from .config import Config, init_params


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 200
    batch_size: int = 16
    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    seed: int = 0


def corpus_config(vocab_size: int) -> Config:
    return Config(vocab_size=vocab_size, context=32, n_layer=2, n_head=2, width=32)


class Adam:
    """Kingma & Ba's Adam with bias correction, on a dict of arrays, updated in place."""

    def __init__(self, params, lr, beta1, beta2, eps):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        for k, g in grads.items():
            self.m[k] = self.beta1 * self.m[k] + (1 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g * g
            m_hat = self.m[k] / (1 - self.beta1**self.t)
            v_hat = self.v[k] / (1 - self.beta2**self.t)
            params[k] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def train(cfg: Config, data: np.ndarray, settings: TrainSettings, eval_every: int = 0, log=None):
    """Trained params and the evaluation losses [(step, loss)], the first at step 0 and the last
    at settings.steps. The evaluation batch is a fixed set of windows of the same text (its own
    seed): no held-out split, so it shows that the optimisation works, not generalisation."""
    params = init_params(cfg, settings.seed)
    rng = np.random.default_rng(settings.seed)
    eval_idx, eval_targets = corpus.batch(data, 4 * settings.batch_size, cfg.context,
                                          np.random.default_rng(settings.seed + 1000))
    opt = Adam(params, settings.lr, settings.beta1, settings.beta2, settings.eps)
    history = []
    for step in range(settings.steps + 1):
        if step == settings.steps or step == 0 or (eval_every and step % eval_every == 0):
            history.append((step, float(numpy_model.loss_only(params, eval_idx, eval_targets, cfg))))
            if log:
                log(f"step {step:4d}  eval loss {history[-1][1]:.4f}")
        if step == settings.steps:
            break
        idx, targets = corpus.batch(data, settings.batch_size, cfg.context, rng)
        _, grads = numpy_model.loss_and_grads(params, idx, targets, cfg)
        opt.step(params, grads)
    return params, history


def greedy(params, prompt_ids, n_tokens: int, cfg: Config) -> list[int]:
    ids = list(prompt_ids)
    for _ in range(n_tokens):
        window = np.array([ids[-cfg.context:]])
        logits, _ = numpy_model.forward(params, window, cfg)
        ids.append(int(logits[0, -1].argmax()))
    return ids


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=TrainSettings.steps)
    parser.add_argument("--lr", type=float, default=TrainSettings.lr)
    parser.add_argument("--seed", type=int, default=TrainSettings.seed)
    args = parser.parse_args(argv)
    text = corpus.text()
    vocab = corpus.CharVocab(text)
    cfg = corpus_config(len(vocab))
    print(f"corpus: {len(text)} characters, vocabulary {len(vocab)}; {cfg}")
    settings = TrainSettings(steps=args.steps, lr=args.lr, seed=args.seed)
    params, _ = train(cfg, vocab.encode(text), settings, eval_every=max(1, args.steps // 10), log=print)
    print("greedy sample:", repr(vocab.decode(greedy(params, vocab.encode("the "), 60, cfg))))


if __name__ == "__main__":
    main()
