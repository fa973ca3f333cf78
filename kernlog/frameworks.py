"""The framework-reference revisions (plain PyTorch), eager and compiled, for any operator."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

# A sweep runs one compiled function over ~16 (shape, dtype) pairs; past Dynamo's default
# recompile limit of 8 it silently falls back to eager (seen on the H100, torch 2.11).
RECOMPILE_LIMIT = 64


def compiled(fn):
    """torch.compile(fn) with static shapes, allowed to specialize for every sweep point."""
    import torch

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))
    return torch.compile(fn, dynamic=False)


def references(op: Callable, init: Path, eager: str, compiled_: str, args: Optional[int] = None) -> tuple:
    """The `torch` and `torch_compile` revisions of `op(*inputs[:args])`, both identified by
    the code of `op` (a lambda in the operator's `init` file)."""
    from .spec import Revision

    def load_eager():
        return lambda inputs, out: op(*inputs[:args])

    def load_compiled():
        fn = compiled(op)
        return lambda inputs, out: fn(*inputs[:args])

    return (Revision("torch", "torch", (init,), load_eager, eager, role="reference", code=op),
            Revision("torch_compile", "torch", (init,), load_compiled, compiled_, role="reference", code=op))
