"""Picking a launch configuration by measurement: shared by the CUDA C softmax launcher and
every Triton kernel here, in place of Triton's autotuner.

Triton's autotuner times its configs one after another. On the H100 its picks moved from
run to run (a LayerNorm at 8192x4096 bf16 came out at 2.61 TB/s in one sweep and 2.80 in
the next, the same code), as anything that drifts during tuning (clocks, power) favours
whichever config ran at the better moment. `fastest` times the candidates in rounds, each
launch alone after an L2 flush, the candidates in a rotating order, and keeps the median.
Every revision that picks this way lists this file among its sources, so a change here marks
its profiles stale.
"""
from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence

from kernlog import cuda
from kernlog.timing import BATCH

# Rounds of timing, every candidate in each. It was 7: on the H100 at softmax bf16 8192x4096 and
# 4096x8192 the Triton split path then kept 4 warps, which ran 0.6-1.5% slower than 8 warps under
# the sweep's timer (the same configs, timed alone, in one run).
ROUNDS = 15
# Launches of a candidate in a row, each after an L2 flush: as many as the timing pass puts in
# one batch, and only those after the first are kept. A launch right after another candidate's
# could run several percent faster than one after its own, flush or not (on the H100, a
# LayerNorm config at 8192x4096 bf16: 2.79 TB/s interleaved with other candidates, 2.64
# repeated). Within a batch behind the head start, later launches tended to run faster than the
# first few, and not by as much for every kernel (on the H100, softmax bf16 8192x4096, medians of
# 20 batches: a copy 2.65-2.71 TB/s at launches 1-4, 2.70-2.75 at 6-9; the 16-warp split config
# 2.43-2.47 throughout). It was 3: three picks
# at that point ranked the 4- and 8-warp split configs 2698/2717, 2723/2719 (a tie: 4 warps
# ran) and 2724/2760 GB/s; at 10, 2697/2732, 2690/2713 and 2703/2725, as the sweep's own timer
# ranked them in the same run (2681/2706).
REPEAT = BATCH
# Closer than this to the fastest counts as a tie: the earlier candidate wins. It was 2%,
# which on the H100 kept the norms 1-2% under their best config (the first within 2% ran);
# 0.5% is about the spread of a median of ROUNDS cold launches of a 50-100 us kernel.
TIE = 0.005
PICKED: dict = {}  # key -> the candidate `launch_fastest` settled on


def sm_count(device) -> int:
    """Streaming multiprocessors of `device` (kernlog.cuda.device_caps): persistent kernels
    launch a multiple of it."""
    return cuda.device_caps(device).sm_count


def choose(medians: Sequence[float], tie: float = TIE) -> int:
    """Index of the first candidate within `tie` of the fastest median."""
    best = min(medians)
    return next(i for i, t in enumerate(medians) if t <= best * (1 + tie))


def fastest(run: Callable, candidates: Sequence, device):
    """The candidate with the least median time over ROUNDS rounds, each launch timed alone
    after an L2 flush, by the timing pass's own timer. Timed back to back, a tensor that fits
    in L2 is read from it, and the winner there can lose from DRAM (on the H100, softmax
    4096x1024 fp32 settled on a layout that ran at 1.5 TB/s cold, against 2.1 for the default).
    A round launches every candidate REPEAT times in a row, in an order that rotates each
    round, behind a head start of flushes that keeps the host's launch cost out of every timed
    window; the first launch of each run, which follows another candidate, is not kept."""
    timer = _timer(device)
    fns = [functools.partial(run, c) for c in candidates]
    for fn in fns:  # compiles, and warms each up
        fn()
    head = max(timer.head_start(fn, REPEAT) for fn in fns)
    times = [[] for _ in candidates]
    for r in range(ROUNDS):
        for i in ((r + j) % len(fns) for j in range(len(fns))):
            ms, head = timer.batch([fns[i]] * REPEAT, head)
            times[i].extend(ms[1:])
    return candidates[choose([statistics.median(t) for t in times])]


@functools.lru_cache(maxsize=None)
def _timer(device):
    from kernlog.timing import Timer

    return Timer(device)


USED: dict = {}  # keys picked for (or launched with a pick) since the profiler last cleared it
PIN_ENV = "KERNLOG_PINNED"  # a JSON file {key_text: repr(candidate)}: picks to take, not measure
_PINS: list = []


def key_text(key) -> str:
    """A pick's key as text that is the same in every process: functions and Triton kernels by
    name, everything else by repr."""
    def one(part):
        for obj in (part, getattr(part, "fn", None)):
            name = getattr(obj, "__name__", None)
            if isinstance(name, str):
                return name
        return repr(part)
    return "|".join(one(p) for p in key)


def used_config() -> dict[str, str]:
    """{key_text: repr(pick)} of every pick made or launched since USED was cleared: what the
    profiler records, and passes to the ncu pass through PIN_ENV."""
    return {key_text(k): repr(PICKED[k]) for k in USED if k in PICKED}


def _pins() -> dict:
    if not _PINS:
        import json
        import os

        path = os.environ.get(PIN_ENV)
        _PINS.append(json.loads(open(path).read()) if path else {})
    return _PINS[0]


def pick(key, candidates: Sequence | Callable[[], Sequence], run: Callable, device):
    """The candidate for `key`: the pinned one where PIN_ENV names it (the ncu pass runs the
    config the timing pass picked), else the one picked before in this process, else the
    fastest by `fastest`."""
    USED[key] = None
    if key in PICKED:
        return PICKED[key]
    if callable(candidates):
        candidates = candidates()
    pinned = _pins().get(key_text(key))
    if pinned is not None:
        match = [c for c in candidates if repr(c) == pinned]
        if not match:
            from kernlog.errors import KernlogError

            raise KernlogError(f"the pinned config {pinned} of {key_text(key)} is not among its candidates")
        PICKED[key] = match[0]
    else:
        PICKED[key] = candidates[0] if len(candidates) == 1 else fastest(run, candidates, device)
    return PICKED[key]


def launch_fastest(key, candidates: Sequence | Callable[[], Sequence], run: Callable, device) -> None:
    """run(the fastest of `candidates`), picked by `pick` on the first call for `key`.
    `candidates` may be a function returning them: it is called on that first call only, so
    building them (pruning configs) stays out of every later launch."""
    run(pick(key, candidates, run, device))


def launch_tuned(tuner, grid, args, key, device, **extra) -> None:
    """Launch `tuner`'s (a triton.autotune object: its configs and pruning) fastest config,
    picked by `fastest` per `key`, with the JIT function under it: Triton's own tuning and
    its per-call Python are skipped."""
    def candidates():
        configs = tuner.configs
        if tuner.early_config_prune:
            configs = tuner.early_config_prune(configs, dict(zip(tuner.arg_names, args, strict=False)), **extra)
        return [c.all_kwargs() for c in configs]

    def run(kw):
        tuner.fn[grid(kw)](*args, **extra, **kw)

    launch_fastest((tuner, *key), candidates, run, device)
