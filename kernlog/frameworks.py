"""Helpers for the framework-reference revisions (plain PyTorch)."""
from __future__ import annotations

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
