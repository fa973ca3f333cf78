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
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 4 * RECOMPILE_LIMIT))
    # Past the limit Dynamo runs the function eagerly with a warning: a torch.compile column
    # that silently times eager (a bench gate over 22 shapes x 2 dtypes x 5 cases reached it on
    # the H100). Raise instead, so the gate or the sweep fails naming it.
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True
    return torch.compile(fn, dynamic=dynamic)


def references(op: Callable, init: Path, eager: str, compiled_: str, args: Optional[int] = None,
               compiled_op: Optional[Callable] = None) -> tuple:
    """The `torch` and `torch_compile` revisions of `op(*inputs[:args])`, both identified by
    the code of `op` (a lambda in the operator's `init` file). `compiled_op`, where compiling
    `op` whole would compile nothing (a gradient taken inside it breaks Dynamo's graph, which
    then runs eagerly): a function of the compiler (`fn -> compiled fn`) that returns the
    torch_compile revision's function, compiling what it can; that revision is identified by
    its code instead."""
    from kernlog.spec import Revision

    def load_eager():
        return lambda inputs, out: op(*inputs[:args])

    build = compiled_op or (lambda compile_: compile_(op))  # the compiled revision's function, given the compiler

    def load_compiled(dynamic=False):
        fn = build(lambda f: compiled(f, dynamic))
        return lambda inputs, out: fn(*inputs[:args])

    # The gate's dozens of shapes through shape-generic graphs: a static compile per shape
    # took 22 of the 125 s of `kernlog profile softmax` on a fresh H100. The graph timed and
    # profiled is the static one, checked again at its shape after the timing pass. Dynamo's
    # default still makes 16 graphs of softmax's gate (a dtype, a stride, size-1 rows or columns
    # each; 17.7 s alone from empty caches, H200). dynamic=True made as many (CPU); with size-1
    # dimensions not specialized (backed_size_oblivious) it made 8, but its looped reduction put
    # 2x300007 fp32 at 5.07e-4, over the kernel's 5e-4, so the default stays.
    return (Revision("torch", "torch", (init,), load_eager, eager, role="reference", code=op),
            Revision("torch_compile", "torch", (init,), load_compiled, compiled_, role="reference",
                     code=compiled_op or op,
                     load_for_gate=lambda: load_compiled(dynamic=None)))


LIGER_INSTALL = ("python3 -m pip install liger-kernel (a GPU machine without network: python3 -m pip install "
                 "--no-deps liger_kernel-<version>-py3-none-any.whl)")


def liger_version() -> str | None:
    """The installed Liger-Kernel's version, None where it is not installed (read from the
    package metadata: importing it pulls in its Triton kernels)."""
    from importlib import metadata

    try:
        return metadata.version("liger-kernel")
    except metadata.PackageNotFoundError:
        return None


def liger(op: Callable, init: Path, change: str, max_cols: int = 65536) -> tuple:
    """The `liger` revision: `op(*inputs)` calling Liger-Kernel (Triton kernels, the usual choice
    for softmax and norms in training stacks), an optional GPU dependency. Without it, or without
    a GPU, loading it raises Unsupported, so profile, check and bench skip it with one line. Its
    row kernels take at most `max_cols` columns (liger_kernel.ops.utils.calculate_settings raises
    past 65536): longer rows are declined, and bench's table says so."""
    from kernlog.errors import Unsupported
    from kernlog.spec import Revision

    def missing() -> str:
        return "" if liger_version() else f"Liger-Kernel is not installed: {LIGER_INSTALL}"

    def load():
        import torch

        why = missing()
        if why:
            raise Unsupported(why)
        if not torch.cuda.is_available():
            raise Unsupported("Liger-Kernel runs on a GPU")
        return lambda inputs, out: op(*inputs)

    def refuses(shape) -> str:
        return f"Liger-Kernel takes rows of at most {max_cols} columns" if shape[-1] > max_cols else ""

    return (Revision("liger", "torch", (init,), load, change, role="reference", code=op, refuses=refuses,
                     missing=missing),)
