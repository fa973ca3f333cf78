"""The framework-reference revisions (plain PyTorch), eager and compiled, for any operator."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

# A sweep runs one compiled function over ~16 (shape, dtype) pairs; past Dynamo's default
# recompile limit of 8 it silently falls back to eager (seen on the H100, torch 2.11).
RECOMPILE_LIMIT = 64


def compiled(fn, dynamic: bool | None = False):
    """torch.compile(fn) with static shapes, allowed to specialize for every sweep point;
    dynamic=None: Dynamo's default, a shape-generic graph after the first change of shape."""
    import torch

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))
    return torch.compile(fn, dynamic=dynamic)


def references(op: Callable, init: Path, eager: str, compiled_: str, args: Optional[int] = None) -> tuple:
    """The `torch` and `torch_compile` revisions of `op(*inputs[:args])`, both identified by
    the code of `op` (a lambda in the operator's `init` file)."""
    from .spec import Revision

    def load_eager():
        return lambda inputs, out: op(*inputs[:args])

    def load_compiled(dynamic=False):
        fn = compiled(op, dynamic)
        return lambda inputs, out: fn(*inputs[:args])

    # The gate's dozens of shapes through one shape-generic graph: a static compile per shape
    # took 22 of the 125 s of `kernlog profile softmax` on a fresh H100. The graph timed and
    # profiled is the static one, checked again at its shape after the timing pass.
    return (Revision("torch", "torch", (init,), load_eager, eager, role="reference", code=op),
            Revision("torch_compile", "torch", (init,), load_compiled, compiled_, role="reference", code=op,
                     load_for_gate=lambda: load_compiled(dynamic=None)))
