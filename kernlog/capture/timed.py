"""What a timing pass leaves for the ncu pass: each revision's samples, clocks and picks
(Timed), batched for one ncu process; the references warmed beside the gates; and, for a
target of many kernels, where one launch's GPU time goes (kernel_times, a CUPTI trace)."""
from __future__ import annotations

from dataclasses import dataclass

from kernlog.spec import Kernel, Revision, Shape


@dataclass

class Timed:
    """A revision that passed the gate, before and after its timing pass."""
    rev: Revision
    tag: str
    samples: list[float]
    clocks: dict
    config: dict
    check: dict
    started: float
    kernel_times: dict | None = None


def warm_references(kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, device: str) -> None:
    """Load and launch each reference (F.*, torch.compile, Liger: framework code, not the code
    under test) once at `shape`, so its compiling is done while the gates run: in a fresh
    process torch.compile's took 13 s of the softmax ladder's timing passes on the H100. A
    failure here is left to its timing pass, which meets it again."""
    import torch

    refs = [rev for rev in revs if rev.role == "reference" and not rev.refusal(shape)]
    if not refs:
        return
    try:  # one set of inputs for all of them: references only read theirs
        inputs = kernel.make_inputs(shape, dtype, torch.Generator(device=device).manual_seed(0), device,
                                    kernel.cases[0])
    except Exception:  # noqa: BLE001 -- the timing passes report it
        return
    for rev in refs:
        try:
            rev.load()(inputs, kernel.make_output(inputs))
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 -- the timing pass reports it
            pass


def loads_by_name(kernel: Kernel, rev: Revision) -> bool:
    """Whether a fresh process loading `kernel` by name gets this very revision."""
    try:
        return kernel.revision(rev.name) is rev
    except KeyError:
        return False


KERNEL_TIMES_KEPT = 24


def kernel_times(launch, inputs, out) -> dict:
    """Every kernel one launch runs and its GPU time, from a CUPTI trace (torch.profiler) of a
    launch after a warm one: per kernel name its count and total microseconds, the longest
    KERNEL_TIMES_KEPT kept (the rest summed as "other"). Unlike ncu's, these durations are
    taken back to back with warm caches, as the model runs them."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as trace

    gpu = torch.cuda.is_available()
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    launch(inputs, out)
    sync()
    with trace(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:  # CPU: the tests
        launch(inputs, out)
        sync()
    rows = []
    for avg in prof.key_averages():
        if gpu:
            us = getattr(avg, "device_time_total", None)
            us = getattr(avg, "cuda_time_total", 0.0) if us is None else us
        else:
            us = avg.self_cpu_time_total
        if us > 0:
            rows.append({"name": avg.key, "count": int(avg.count), "us": round(float(us), 2)})
    rows.sort(key=lambda r: -r["us"])
    kept, rest = rows[:KERNEL_TIMES_KEPT], rows[KERNEL_TIMES_KEPT:]
    if rest:
        kept.append({"name": f"other ({len(rest)} kernels)", "count": sum(r["count"] for r in rest),
                     "us": round(sum(r["us"] for r in rest), 2)})
    return {"source": "CUPTI trace of one launch (torch.profiler), after a warm one", "kernels": kept,
            "total_us": round(sum(r["us"] for r in rows), 2), "launches": sum(r["count"] for r in rows)}


def batches(timed: list[Timed]) -> list[list[Timed]]:
    """The revisions grouped for one ncu process each: all of them, unless two picked
    different configs under one tuning key (the process takes one pick per key)."""
    groups: list[tuple[dict, list[Timed]]] = []
    for t in timed:
        for pins, group in groups:
            if all(pins.get(k, v) == v for k, v in t.config.items()):
                pins.update(t.config)
                group.append(t)
                break
        else:
            groups.append((dict(t.config), [t]))
    return [group for _, group in groups]
