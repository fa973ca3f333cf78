"""Jobs spread over a host's GPUs: one worker per GPU, each job a `kernlog profile` process
that sees only its GPU (CUDA_VISIBLE_DEVICES), so every profile names the GPU it ran on.

`kernlog profile KERNEL` deals the revisions out to the GPUs (one process and one ncu
report per GPU); `--range` gives each GPU the next commit to profile. Processes of one
kernel write into one folder; store.save_profiles holds the folder's lock while it writes.
On one GPU, `kernlog profile` and `kernlog bench` gate revisions in processes side by side
(gate_workers), where the GPU admits more than one (exclusive_compute_mode).
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kernlog.errors import KernlogError

GPUS_ENV = "CUDA_VISIBLE_DEVICES"


def visible() -> list[tuple[str, dict | None]]:
    """Each GPU this process may use, as (the name CUDA_VISIBLE_DEVICES gives it: its entries
    where it is set, else every index nvidia-smi lists; its nvidia-smi row, {index, uuid,
    compute_mode, name}, or None where nvidia-smi does not list it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,compute_mode,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    rows = [dict(zip(("index", "uuid", "compute_mode", "name"), (c.strip() for c in line.split(",", 3)), strict=True))
            for line in out.splitlines() if line.count(",") >= 3]
    by_key = {key: row for row in rows for key in (row["index"], row["uuid"])}
    env = os.environ.get(GPUS_ENV)
    keys = [g.strip() for g in env.split(",") if g.strip()] if env is not None else [r["index"] for r in rows]
    return [(key, by_key.get(key)) for key in keys]


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out, as CUDA_VISIBLE_DEVICES names them (`visible`): only
    those of the first one's model (profiles are kept per GPU model, and a job may land on any
    of them)."""
    gpus = [(key, (row or {}).get("name")) for key, row in visible()]
    return [key for key, name in gpus if name == gpus[0][1]] if gpus else []


GATE_WORKERS_MAX = 8


def gate_workers(revisions: int, cpus: int | None = None) -> int:
    """How many revisions `kernlog profile` (and `kernlog bench`) gates at once: a process each, half the host's
    cores (each compiles: NVRTC, Triton, Inductor), at most GATE_WORKERS_MAX. On the H100 the
    softmax ladder's 13 gates took 112 s one after another (nearly all compiling), the
    timing passes 5 s, its ncu process 56 s."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 2)
    return max(1, min(revisions, cpus // 2, GATE_WORKERS_MAX))


def exclusive_compute_mode() -> str:
    """The compute mode of a visible GPU that admits one process at a time ("Exclusive_Process",
    "Prohibited"), as nvidia-smi names it; "" where every one is shared (the default) or
    nvidia-smi cannot tell. Gate processes beside this one would fail to create a context there."""
    modes = [row["compute_mode"] for _, row in visible() if row is not None]
    return next((m for m in modes if m in ("Exclusive_Process", "Prohibited")), "")


def on_gpus(jobs: Sequence, gpus: Sequence[str], work: Callable[[object, str], object]) -> list:
    """work(job, gpu) for every job, at most one job per GPU at a time, a GPU taking the next
    job as soon as it is free; the results in the order of `jobs`. An exception in one job
    is raised once every job has ended."""
    if not gpus:
        raise KernlogError("no GPU to run on")
    free: queue.Queue = queue.Queue()
    for g in gpus:
        free.put(g)
    results: list = [None] * len(jobs)
    errors: list = []

    def one(i, job):
        gpu = free.get()
        try:
            results[i] = work(job, gpu)
        except BaseException as exc:  # noqa: BLE001 -- raised below, after the others end
            errors.append(exc)
        finally:
            free.put(gpu)

    threads = [threading.Thread(target=one, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def deal(items: Sequence, n: int, weight: Callable[[object], float] = lambda _: 1,
         span: Callable[[list], float] | None = None) -> list[list]:
    """`items` in `n` groups that end about together: heaviest first, each to the group it
    ends soonest in (longest-processing-time-first, where a group's `span` is the sum of its
    weights, the default: the heaviest group is within 4/3 of the best split's); each group
    in the items' own order. `span(group)`: how long a group takes, where its items do not
    simply add up (gates side by side, then passes one after another: kernlog.capture.costs)."""
    groups: list[list] = [[] for _ in range(n)]
    span = span or (lambda g: sum(weight(x) for x in g))
    for item in sorted(items, key=weight, reverse=True):
        ends = [(span(g + [item]), span(g), i) for i, g in enumerate(groups)]
        groups[min(ends)[2]].append(item)
    order = {id(x): k for k, x in enumerate(items)}
    return [sorted(g, key=lambda x: order[id(x)]) for g in groups if g]


def makespan(groups: Sequence[Sequence], weight: Callable[[object], float]) -> float:
    """The weight of the heaviest group: how long groups run side by side take."""
    return max((sum(weight(x) for x in g) for g in groups), default=0.0)


def child_env(gpu: str, n_processes: int) -> dict:
    """The environment of a process given `gpu`, one of `n_processes` side by side: its GPU
    alone, and its share of the CPU's threads (torch's CPU work -- the gate's float64
    references -- in every process at once on all cores oversubscribed a 2-GPU H200 host:
    the softmax ladder took 134 s over two GPUs, 94 s on one)."""
    threads = str(max(1, (os.cpu_count() or 1) // max(1, n_processes)))
    return dict(os.environ, **{GPUS_ENV: gpu, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})


def run(cmd: list[str], env: dict, timeout: float, progress: Callable[[str], None] | None = None,
        prefix: str = "", cwd: Path | None = None) -> tuple[int, str]:
    """`cmd`'s exit status and its output (stdout and stderr); stderr's lines also go to
    `progress` as they come, after `prefix`."""
    try:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        return 127, f"cannot start {cmd[0]}: {exc}"
    err: list[str] = []

    def read_err():
        for line in proc.stderr:
            err.append(line)
            if progress is not None:
                progress(prefix + line.rstrip("\n"))

    reader = threading.Thread(target=read_err)
    reader.start()
    killed = threading.Event()

    def kill():
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        out = proc.stdout.read()
        code = proc.wait()
    finally:
        timer.cancel()
        reader.join()
    if killed.is_set():
        return 124, out + "".join(err) + f"\nno result in {timeout:.0f} s"
    return code, out + "".join(err)


def profile_on_gpus(root: Path, kernel: str, revs: Sequence, args: list[str], gpus: Sequence[str],
                    progress: Callable[[str], None], runner=run, timeout: float = 3600.0,
                    cost: dict[str, float] | None = None, span: Callable[[list], float] | None = None) -> list[Path]:
    """`kernlog profile` of `revs` (Revision objects) dealt out to `gpus`, a process each,
    into `root`'s profiles/, each given `args` (capture.profiler.Options.to_argv); the profiles
    written. Dealt by `cost` ({name: seconds of its gate, timing and ncu passes}) and `span`
    (a group's seconds in one process; kernlog.capture.costs), where given; else a
    compile-heavy kind (Triton, torch) weighs twice a CUDA C revision. Raises naming each GPU
    whose process failed, after every process has ended (what the others wrote stays)."""
    def weight(r) -> float:
        return cost[r.name] if cost and r.name in cost else (1 if r.kind == "cuda" else 2)

    span = span or (lambda group: sum(weight(r) for r in group))
    groups = deal(list(revs), len(gpus), weight=weight, span=span)
    about = [f" (~{span(g):.0f} s)" if cost else "" for g in groups]
    progress(f"{len(revs)} revisions over {len(groups)} GPUs ({', '.join(gpus[:len(groups)])}): "
             + "; ".join(", ".join(r.name for r in g) + a for g, a in zip(groups, about, strict=True)))

    def work(group, gpu):
        cmd = [sys.executable, "-m", "kernlog", "--root", str(root), "profile", kernel,
               *[a for r in group for a in ("--rev", r.name)], *args, "--gpus", "1"]
        t0 = time.perf_counter()
        code, out = runner(cmd, child_env(gpu, len(groups)), timeout, progress, f"[gpu {gpu}] ")
        progress(f"[gpu {gpu}] its process ended after {time.perf_counter() - t0:.1f} s (exit {code})")
        return gpu, code, out

    written, failed = [], []
    for gpu, code, out in on_gpus(groups, gpus, work):
        lines = [ln for ln in out.splitlines() if ln.strip()]
        written += [root / ln for ln in lines if ln.startswith("profiles/") and ln.endswith(".json")]
        if code != 0:
            failed.append(f"GPU {gpu} (exit {code}: {lines[-1] if lines else 'no output'})")
    if failed:
        raise KernlogError(f"profiling failed on {'; '.join(failed)}; the other GPUs' profiles are written")
    return written
