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


class _Clock:
    """A fake GPU whose clock advances 0.09 ms per L2 flush and by each launch's own time;
    an event records the clock, elapsed_time is the difference. `caught_up(event)` says what
    query() answers."""

    def __init__(self, caught_up=lambda gpu, event: False):
        self.t, self.queued, self.timing_flags, self.caught_up = 0.0, [], [], caught_up
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                gpu.timing_flags.append(enable_timing)

            def record(self):
                self.t = gpu.t
                gpu.queued.append(self)

            def query(self):
                return gpu.caught_up(gpu, self)

            def elapsed_time(self, other):
                return other.t - self.t

            def synchronize(self):
                pass

        class cuda:
            @staticmethod
            def synchronize():
                pass

        cuda.Event = Event
        self.cuda = cuda


class _ClockFlush:
    def __init__(self, gpu):
        self.gpu, self.zeroed = gpu, 0

    def zero_(self):
        self.gpu.t += 0.09
        self.zeroed += 1


def _clock_timer(gpu, flush_ms=0.09):
    t = timing.Timer.__new__(timing.Timer)
    t.torch, t.flush, t._flush_ms, t.clocks = gpu, _ClockFlush(gpu), flush_ms, None
    return t


def _launch(gpu, ms, calls=None):
    def fn():
        gpu.t += ms
        if calls is not None:
            calls.append(1)
    return fn


def test_one_flush_is_timed_over_four_with_timing_events():
    gpu = _Clock()
    t = _clock_timer(gpu, flush_ms=None)
    assert t.flush_ms() == pytest.approx(0.09) and t.flush.zeroed == 5  # one to warm, four timed
    assert gpu.timing_flags == [True, True]
    t.flush.zeroed = 0
    assert t.flush_ms() == pytest.approx(0.09) and t.flush.zeroed == 0  # measured once


def test_samples_are_each_launchs_gpu_time_between_the_default_counts():
    gpu = _Clock()
    t = _clock_timer(gpu)
    calls = []
    out = t.samples(_launch(gpu, 0.5, calls))  # defaults: 3 warm-up, 20 to 200 samples, 1 s
    assert len(out) == 200 and out == pytest.approx([0.5] * 200)
    assert len(calls) == 3 + 1 + 200  # warm-up, the head start's measured call, the samples
    assert len(t.samples(_launch(gpu, 0.5), budget_s=0)) == 20
    assert all(gpu.timing_flags)


def test_head_start_is_one_and_a_half_times_the_hosts_time_in_flushes(monkeypatch):
    gpu = _Clock()
    t = _clock_timer(gpu, flush_ms=0.5)
    stamps = []
    monkeypatch.setattr(timing, "time", type("T", (), {"perf_counter": staticmethod(lambda: stamps.pop(0))}))
    stamps[:] = [0.0, 0.01]  # 10 ms of host time for one call, + 0.02 ms for the flush and events
    assert 3006 <= t.head_start(_launch(gpu, 0.1), 100) <= 3007  # 1.5 x 100 x 10.02 / 0.5
    stamps[:] = [0.0, 0.0]
    assert t.head_start(_launch(gpu, 0.1), 1) == 1  # never less than one flush


def test_a_batch_is_judged_by_whether_the_gpu_reached_its_last_launch():
    def last_started(gpu, event):  # the GPU has reached the last launch's start event, no other
        return event is gpu.queued[-2]

    gpu = _Clock(last_started)
    t = _clock_timer(gpu)
    ms, head = t.batch([_launch(gpu, 0.25), _launch(gpu, 0.75)], 4)
    assert ms == pytest.approx([0.25, 0.75]) and head == timing.MAX_HEAD  # doubled until the cap
    gpu = _Clock(lambda gpu, event: True)
    t = _clock_timer(gpu)
    assert t.batch([_launch(gpu, 0.25)], timing.MAX_HEAD)[1] == timing.MAX_HEAD
    assert t.batch([_launch(gpu, 0.25)], 3)[1] == 384  # 3, 6, ... 192 (under the cap), 384
    gpu = _Clock()
    t = _clock_timer(gpu)
    assert t.batch([_launch(gpu, 0.25)], 3)[1] == 3 and gpu.timing_flags == [True, True]
