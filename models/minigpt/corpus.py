"""The training text: ~5 KB (128 lines) of short sentences generated without a random number generator
(every subject x verb x object x place, in an order fixed by a stride), so the same bytes come
out on any machine and NumPy version; and its character-level vocabulary."""
from __future__ import annotations

from itertools import product

import numpy as np

SUBJECTS = ("the cat", "a dog", "the old man", "my sister")
VERBS = ("sees", "finds", "carries", "follows")
OBJECTS = ("the red ball", "a wooden box", "the moon", "an apple")
PLACES = ("at night", "in the garden")
STRIDE = 37  # coprime with the 128 sentences: visits each once, neighbours far apart in the product


def text() -> str:
    sentences = [f"{s} {v} {o} {p}." for s, v, o, p in product(SUBJECTS, VERBS, OBJECTS, PLACES)]
    n = len(sentences)
    return "\n".join(sentences[(i * STRIDE) % n] for i in range(n)) + "\n"


class CharVocab:
    def __init__(self, corpus: str):
        self.chars = sorted(set(corpus))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def __len__(self):
        return len(self.chars)

    def encode(self, s: str) -> np.ndarray:
        return np.array([self.index[c] for c in s], dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)


def batch(data: np.ndarray, batch_size: int, context: int, rng: np.random.Generator):
    """batch_size windows of `context` ids at random offsets, and the same shifted by one."""
    starts = rng.integers(0, data.size - context - 1, size=batch_size)
    idx = np.stack([data[s: s + context] for s in starts])
    return idx, np.stack([data[s + 1: s + context + 1] for s in starts])
