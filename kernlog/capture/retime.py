"""`kernlog diff A B --retime`: both sides timed again in one process, interleaved.

Stored samples come from two timing passes that may be days apart; drift between them
(clocks, temperature, another tenant) reads as a change. Here the two sides alternate,
A then B, in batches of timing.BATCH launches, each after an L2 flush, for `rounds` rounds,
so drift lands on both. The first launch of each batch follows the other side's and is not
kept, as in the picker (kernlog/tuning.py). Clocks are read while it runs.
"""
from __future__ import annotations

import functools
import statistics
from pathlib import Path

from kernlog import timing
from kernlog.errors import GateFailure, KernlogError, NoGpu
from kernlog.judge.diff import run as judged
from kernlog.registry import load_kernel
from kernlog.run import gate
from kernlog.store.record import Profile


def _prepare(root: Path, prof: Profile, gpu_slug: str):
    import torch

    if prof.gpu.slug != gpu_slug:
        raise KernlogError(f"{prof.kernel}/{prof.revision} was profiled on {prof.gpu.slug}; this GPU is "
                           f"{gpu_slug}: --retime times both sides here, so pick profiles of this GPU")
    kernel = load_kernel(root, prof.kernel)
    try:
        rev = kernel.revision(prof.revision)
    except KeyError:
        raise KernlogError(f"{prof.kernel}/{prof.revision} is no longer a revision: "
                           "it cannot be re-timed") from None
    shape, dtype = tuple(prof.shape), prof.dtype
    launch = rev.load()
    results = gate.check_revision(kernel, rev, "cuda", shapes=[shape], dtypes=[dtype], launch=launch)
    bad = gate.first_failure(results)
    if bad is not None:
        raise GateFailure(f"not re-timed: {bad.line()}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = kernel.make_inputs(shape, dtype, gen, "cuda", kernel.cases[0])
    out = kernel.make_output(inputs)
    # The gate's picks were untimed (picker.untimed); this launch picks by time, so its pick
    # is checked here, before it is timed.
    gate.poison(out)
    launch(inputs, out)
    picked = gate.recheck(kernel, rev, launch, inputs, out, dtype, shape)
    if not picked.ok:
        raise GateFailure(f"not re-timed: {picked.line()}")
    stale = rev.sha256() != prof.source_sha256
    return functools.partial(launch, inputs, out), stale


def retime(root: Path, a: Profile, b: Profile, rounds: int) -> dict:
    """{"a": samples, "b": samples, "rounds", "round_ratios", "clocks", "stale"}: GPU time of
    each kept launch, ms."""
    try:
        import torch
    except ImportError:
        raise NoGpu("--retime needs torch with CUDA") from None
    if not torch.cuda.is_available():
        raise NoGpu("--retime needs a CUDA GPU: without one, diff judges the stored samples")
    from kernlog.capture.provenance import gpu_info
    from kernlog.run.clocks import Clocks

    slug = gpu_info()["slug"]
    fa, stale_a = _prepare(root, a, slug)
    fb, stale_b = _prepare(root, b, slug)
    timer = timing.Timer()
    for fn in (fa, fb):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    head = max(timer.head_start(fa, timing.BATCH), timer.head_start(fb, timing.BATCH))
    timer.clocks = Clocks()
    sa, sb, ratios = [], [], []
    for _ in range(rounds):
        ma, head = timer.batch([fa] * timing.BATCH, head)
        mb, head = timer.batch([fb] * timing.BATCH, head)
        sa += ma[1:]
        sb += mb[1:]
        ratios.append(statistics.median(mb[1:]) / statistics.median(ma[1:]))
    stale = [s for s, flag in ((a, stale_a), (b, stale_b)) if flag]
    return {"a": sa, "b": sb, "rounds": rounds, "round_ratios": [round(r, 4) for r in ratios],
            "clocks": timer.clocks.summary(), "gpu": slug,
            "stale": [f"{s.kernel}/{s.revision}" for s in stale]}


def diff_retimed(root: Path, side_a, side_b, rounds: int) -> dict:
    """`kernlog diff --retime`: the two stored sides compared on samples taken again here, both
    interleaved (kernlog.judge.diff judges them as it judges stored ones)."""
    return judged(root, side_a, side_b, retimed=lambda a, b: retime(root, a, b, rounds))
