"""The Triton softmax whose long rows on the 16-byte boundary meet a warp at a time too.

`triton`'s split kernel meets a row's chunks across the whole program: on the H200 at bf16
4096x151936 its hottest line (25% of the warp samples) is the chunk's max reduced at a barrier,
and the program issues 23.6 instructions an element. triton_peeled's kernel meets them a warp at
a time, with 5 barriers where the split kernel has 20, takes each exponential as one
ex2.approx.ftz and each output as one multiply: 16.9 instructions an element at bf16 4096x50257.
It was written for rows off the boundary, but a row on it is the kernel's case of an empty head
and tail (its offset from the boundary is 0), so nothing in the kernel changes here: only which
rows it takes.

Long rows (over SHORT columns, in at most SPLIT_CAP chunks) on the boundary are timed over the
peeled kernel's configs and `triton`'s own (its split chunks and, up to MAX_FUSED columns, its
pipelined rows), the fastest picked per shape, so a row this revision takes runs no slower than
`triton` by construction, within the picker's noise. Rows off the boundary take triton_peeled's
path unchanged, every other row `triton`'s kernels.
"""
from __future__ import annotations

import triton

from kernlog import tuning

from . import softmax_triton as base
from . import softmax_triton_peeled as peeled


def takes(x, out, block: int | None = None) -> bool:
    """Whether this revision's own path takes 2-D `x` (unit column stride) into contiguous `out`:
    rows too long for several a program, on the boundary (x's stride and the row length multiples
    of 16 bytes of elements), in at most SPLIT_CAP chunks of `block` columns (None: the longest
    block tried). Rows off it are peeled.peels'."""
    rows, cols = x.shape
    q = 16 // x.element_size()
    return bool(cols > base.SHORT and not (cols % q or x.stride(0) % q)
                and triton.cdiv(cols + q - 1, block or base._SPLIT_BLOCKS[-1]) <= base.SPLIT_CAP)


def candidates(x) -> list[tuple[str, int, dict]]:
    """(kind, programs per SM, launch kwargs) to time for `x`'s rows: the peeled kernel's configs
    ("met"), then `triton`'s split chunks and pipelined rows as its own launcher builds them."""
    rows, cols = x.shape
    met = [("met", 0, c) for c in peeled.configs(cols, 16 // x.element_size())]
    split = [("split", 0, c.all_kwargs()) for c in base._split_configs(base._split_tuned.configs, {"cols": cols})]
    return met + split + base.pipe_configs(cols, x.element_size(), base.pipe_smem(x.device))


def run(x, out, polls: int, candidate) -> None:
    kind, per_sm, kw = candidate
    rows, cols = x.shape
    if kind == "met":
        peeled.launch(x, out, polls, **kw)
    elif kind == "split":
        base.launch_split(x, out, polls, **kw)
    else:
        base._pipe_kernel[(min(rows, per_sm * tuning.sm_count(x.device)),)](x, out, rows, cols, x.stride(0), **kw)


def softmax(x, out, block: int | None = None, polls: int | None = None):
    """Softmax of the rows of 2-D `x` into contiguous `out`, as softmax_triton.softmax. Rows this
    revision takes are timed over `candidates` on the GPU, or run through the peeled kernel in
    chunks of `block` (under the interpreter 1024, with `polls` 1: every chunk but a row's last
    takes the fallback)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if not x.is_cuda:
        block = block or 1024
    if not (x.numel() and takes(x, out, block)):
        return peeled.softmax(x, out, block=block, polls=polls)
    if not x.is_cuda:
        from kernlog import triton_interpreter

        triton_interpreter.apply()
    polls = (base.GPU_POLLS if x.is_cuda else 1) if polls is None else polls
    if block is None and x.is_cuda:
        rows, cols = x.shape
        tuning.launch_fastest(("softmax_triton_met", rows, cols, x.dtype), lambda: candidates(x),
                              lambda c: run(x, out, polls, c), x.device)
        return out
    peeled.launch(x, out, polls, BLOCK=block, num_warps=4)
    return out


def load():
    return lambda inputs, out: softmax(inputs[0], out)
