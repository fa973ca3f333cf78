"""The timing pass charges GPU time only: a slow host launcher must not show up in samples."""
import time

import pytest

from kernlog import timing


class _Event:
    def __init__(self, gpu):
        self.gpu = gpu

    def record(self):
        self.gpu.queued.append(self)

    def query(self):
        return self.gpu.caught_up.pop(0)

    def elapsed_time(self, other):
        return 1.0

    def synchronize(self):
        pass


class _FakeTorch:
    """Enough of torch.cuda for Timer: `caught_up` scripts what each batch's query() says."""

    def __init__(self, caught_up):
        self.caught_up = list(caught_up)
        self.queued = []
        gpu = self

        class cuda:
            @staticmethod
            def Event(enable_timing=True):
                return _Event(gpu)

            @staticmethod
            def synchronize():
                pass

        self.cuda = cuda


class _Flush:
    def __init__(self):
        self.zeroed = 0

    def zero_(self):
        self.zeroed += 1


def _timer(caught_up):
    t = timing.Timer.__new__(timing.Timer)
    t.torch, t.flush, t._flush_ms, t.clocks = _FakeTorch(caught_up), _Flush(), 0.09, None
    return t


def test_a_batch_the_gpu_caught_up_with_is_dropped_and_the_head_start_doubled():
    t = _timer([True, True, False, False])
    flushes = []

    def fn():
        flushes.append(t.flush.zeroed)

    samples = t.samples(fn, warmup=1, min_samples=20, max_samples=20, budget_s=0)
    assert len(samples) == 20  # two batches kept, two dropped
    starts = flushes[2::timing.BATCH]  # flush count at each batch's first launch (after 2 warm-up calls)
    heads = [b - a - 1 for a, b in zip([0] + [s + timing.BATCH - 1 for s in starts], starts, strict=False)]
    assert heads[1] == 2 * heads[0] and heads[2] == 2 * heads[1] and heads[3] == heads[2]


@pytest.mark.gpu
def test_host_time_of_a_slow_launcher_stays_out_of_the_samples():
    import torch

    x = torch.zeros(1 << 20, device="cuda")
    timer = timing.Timer()
    fast = timing.summary(timer.samples(lambda: x.add_(1.0), budget_s=0.2))["median_ms"]

    def slow():  # 300 us of host work before each launch, ~10x the kernel
        t = time.perf_counter()
        while time.perf_counter() - t < 3e-4:
            pass
        x.add_(1.0)

    slow_ms = timing.summary(timer.samples(slow, budget_s=0.2))["median_ms"]
    assert slow_ms < fast + 0.05, (slow_ms, fast)
