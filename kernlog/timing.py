"""The timing pass, without ncu: CUDA events around each launch, L2 flushed before each,
warm-up first (Triton autotunes there), every sample kept."""
from __future__ import annotations

import statistics
import time

FLUSH_BYTES = 256 * 1024 * 1024  # five times the H100's 50 MB L2


class Timer:
    def __init__(self, device="cuda"):
        import torch

        self.torch = torch
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    def samples(self, fn, warmup: int = 3, min_samples: int = 20, max_samples: int = 200,
                budget_s: float = 1.0) -> list[float]:
        """Milliseconds of each of up to `max_samples` launches of `fn()`, at least
        `min_samples`, stopping once `budget_s` of wall time is spent."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        out, start = [], time.perf_counter()
        while len(out) < max_samples and (len(out) < min_samples or time.perf_counter() - start < budget_s):
            batch = []
            for _ in range(10):
                self.flush.zero_()
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record()
                fn()
                e.record()
                batch.append((b, e))
            torch.cuda.synchronize()
            out.extend(b.elapsed_time(e) for b, e in batch)
        return out


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
            "method": "median of CUDA-event-timed launches, L2 flushed before each"}
