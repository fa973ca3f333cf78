"""A program's call timed as its loop runs it, on the wall clock (host and GPU both counted), and
the call captured in a CUDA graph: what `kernlog triage` measures and verifies (GPU only)."""
from __future__ import annotations

import math
from collections.abc import Callable

from kernlog.errors import KernlogError, said

WALL_METHOD = "wall clock per call, calls back to back (host and GPU both counted), a synchronize per sample"
SAMPLE_S = 0.02  # the wall time one sample spans: enough calls that a synchronize's cost is small


def _per_sample(fn: Callable[[], object]) -> int:
    """Calls per sample: SAMPLE_S of wall time, from one timed call (at least 1, at most 200)."""
    import time

    import torch

    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return max(1, min(200, math.ceil(SAMPLE_S / max(time.perf_counter() - t, 1e-6))))


def _loop_ms(fn: Callable[[], object], calls: int) -> float:
    import time

    import torch

    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / calls


def time_samples(fn: Callable[[], object], budget_s: float = 2.0) -> list[float]:
    """GPU only: milliseconds per call as a program's loop calls it (WALL_METHOD): the host may
    run ahead of the GPU, so the time is the slower of the two. No L2 flush between calls."""
    import time

    for _ in range(3):
        fn()
    calls = _per_sample(fn)
    out, start = [], time.perf_counter()
    while len(out) < 10 or (len(out) < 50 and time.perf_counter() - start < budget_s):
        out.append(_loop_ms(fn, calls))
    return out


def time_interleaved(base: Callable[[], object], new: Callable[[], object], pairs: int = 20):
    """GPU only: (baseline ms, new ms) per call, WALL_METHOD, the two timed in turn `pairs` times."""
    for fn in (base, new, base, new):
        fn()
    calls = min(_per_sample(base), _per_sample(new))
    b, n = [], []
    for _ in range(pairs):
        b.append(_loop_ms(base, calls))
        n.append(_loop_ms(new, calls))
    return b, n


def graphed(fn: Callable[[], object], text: str) -> Callable[[], object]:
    """GPU only: `fn` captured once in a CUDA graph, as a callable that replays it; checked first
    to give the eager call's output (within 1e-3) on its inputs."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm outside the capture (torch.cuda.graphs)
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = fn()
    except Exception as exc:  # noqa: BLE001 -- torch's capture error, said in one line
        raise KernlogError(f"{text} cannot be captured in a CUDA graph: {said(exc)} (a host sync inside the "
                           "call? the triage names each as a candidate)") from None
    graph.replay()
    want = fn()
    torch.cuda.synchronize()
    got, ref = _tensors(out), _tensors(want)
    if len(got) != len(ref) or any(not torch.allclose(g.float(), r.float(), rtol=1e-3, atol=1e-3)
                                   for g, r in zip(got, ref, strict=True)):
        raise KernlogError(f"{text} replayed from a CUDA graph gives other outputs than called eagerly: "
                           "not measured")

    def replay():
        graph.replay()
        return out
    return replay


def _tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []
