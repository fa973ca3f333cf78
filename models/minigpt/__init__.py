"""MiniGPT: a small GPT-2-shaped language model, written twice.

    config.py       Config (vocab, context, layers, heads, width, dropout) and the seeded weights
    numpy_model.py  the reference: NumPy float64 forward and hand-written backward
    gradcheck.py    central finite differences against that backward
    corpus.py       a few KB of generated text and its character vocabulary
    train.py        Adam on the corpus with the NumPy model (`python -m models.minigpt.train`)
    torch_model.py  the nn.Module port, loading the NumPy weights; softmax, LayerNorm, GeLU and
                    dropout go through a swappable `Ops` so kernlog's kernels can replace them
    compare.py      NumPy vs torch at float64 on the CPU (`python -m models.minigpt.compare`)

Importing this package imports NumPy only; torch is imported by torch_model and compare.
"""
from .config import TINY, Config, init_params, param_shapes

__all__ = ["TINY", "Config", "init_params", "param_shapes"]
