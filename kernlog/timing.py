"""The timing pass, without ncu: CUDA events around each launch, L2 flushed before each,
queued ahead of the GPU so no host time lands in a sample, warm-up first (launchers that
tune pick their configuration there), every sample kept."""
from __future__ import annotations

import math
import statistics
import time

FLUSH_BYTES = 256 * 1024 * 1024  # five times the H100's 50 MB L2
BATCH = 10  # launches queued before each synchronize
MAX_HEAD = 256  # flushes (~90 us each on the H100) of head start, at most


class Timer:
    def __init__(self, device="cuda"):
        import torch

        self.torch = torch
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self._flush_ms = None
        self.clocks = None  # a kernlog.run.clocks.Clocks to sample while each batch runs

    def flush_ms(self) -> float:
        """GPU time of one L2 flush, measured once."""
        if self._flush_ms is None:
            torch = self.torch
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush.zero_()
            b.record()
            for _ in range(4):
                self.flush.zero_()
            e.record()
            e.synchronize()
            self._flush_ms = b.elapsed_time(e) / 4
        return self._flush_ms

    def samples(self, fn, warmup: int = 3, min_samples: int = 20, max_samples: int = 200,
                budget_s: float = 1.0) -> list[float]:
        """Milliseconds of GPU time of each of up to `max_samples` launches of `fn()`, at least
        `min_samples`, stopping once `budget_s` of wall time is spent.

        Launches go in batches of BATCH, each behind a head start of flushes sized from the
        host's measured time per launch, so the GPU never waits on the host inside a timed
        window: a launcher with slow Python (Triton's, ~30-90 us on the H100 host) would
        otherwise be charged for it whenever the GPU caught up. A batch whose last launch
        the GPU reached before the host had queued it all is dropped and the head start
        doubled."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        head = self.head_start(fn, BATCH)
        out, start = [], time.perf_counter()
        while len(out) < max_samples and (len(out) < min_samples or time.perf_counter() - start < budget_s):
            ms, head = self.batch([fn] * BATCH, head)
            out.extend(ms)
        return out

    def head_start(self, fn, launches: int) -> int:
        """Flushes to queue ahead of `launches` calls of `fn` (warmed up): 1.5 times the host's
        time for them, measured on one call, in flushes of GPU time."""
        torch = self.torch
        t = time.perf_counter()
        fn()
        host_ms = (time.perf_counter() - t) * 1e3 + 0.02  # + the flush and two event records
        torch.cuda.synchronize()
        return max(1, math.ceil(1.5 * launches * host_ms / self.flush_ms()))

    def batch(self, fns, head: int) -> tuple[list[float], int]:
        """Milliseconds of GPU time of each of `fns` in turn, each after an L2 flush, queued
        behind `head` flushes, and the head start that held. While the GPU reaches the last
        launch before the host has queued it (a timed window may then hold host time), the
        batch is dropped and run again behind twice the head start, up to MAX_HEAD."""
        torch = self.torch
        while True:
            for _ in range(head):
                self.flush.zero_()
            events = []
            for fn in fns:
                self.flush.zero_()
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record()
                fn()
                e.record()
                events.append((b, e))
            caught_up = events[-1][0].query()  # the GPU reached the last launch's start already
            if self.clocks is not None:  # the GPU is busy with this batch now
                self.clocks.sample()
            torch.cuda.synchronize()
            if not caught_up or head >= MAX_HEAD:
                return [b.elapsed_time(e) for b, e in events], head
            head *= 2


def measure_launch_floor(timer: Timer, launches: int = 256) -> dict:
    """The least a kernel launch costs on this GPU, measured now: in a CUDA graph (`graph_us`:
    one replay of `launches` one-element kernels, per kernel) and issued one by one from Python
    (`eager_us`: the same launches back to back, per kernel, host time counted)."""
    torch = timer.torch
    x = torch.zeros(1, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm outside the capture, as torch.cuda.graphs asks
        for _ in range(3):
            x.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            x.add_(1)
    graph_ms = statistics.median(timer.samples(graph.replay, min_samples=20, max_samples=50))

    def eager():
        for _ in range(launches):
            x.add_(1)
    eager()
    torch.cuda.synchronize()
    walls = []
    for _ in range(10):
        t = time.perf_counter()
        eager()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t) * 1e3)
    return {"graph_us": graph_ms * 1e3 / launches, "eager_us": statistics.median(walls) * 1e3 / launches,
            "launches": launches, "method": "a CUDA graph of one-element adds replayed (CUDA events), and the "
            "same adds issued from Python back to back (wall clock), per launch"}


def summary(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=20) if len(samples) >= 2 else [samples[0]] * 19
    return {"median_ms": statistics.median(samples), "p05_ms": q[0], "p95_ms": q[-1], "n": len(samples)}


def measure_ceilings(timer: Timer) -> dict:
    """The two ceilings every roofline figure is divided by, measured on this GPU now."""
    torch = timer.torch
    n = 1 << 28  # 1 GiB of fp32
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    copy_ms = statistics.median(timer.samples(lambda: y.copy_(x), min_samples=20, max_samples=50))
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    mm_ms = statistics.median(timer.samples(lambda: a @ b, min_samples=10, max_samples=30))
    return {"copy_gbps": 2 * n * 4 / copy_ms / 1e6, "copy_bytes": 2 * n * 4,
            "matmul_bf16_tflops": 2 * m ** 3 / mm_ms / 1e9, "matmul_shape": [m, m, m],
            "method": "median of CUDA-event-timed launches, L2 flushed before each, queued behind a head start"}
