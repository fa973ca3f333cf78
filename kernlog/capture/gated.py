"""The correctness gates of a ladder in processes of their own (kernlog.run.target --gate), several
at once, the longest first, a long one in parts (kernlog.run.parts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kernlog.capture.ncurun import last_line
from kernlog.run import gate, parts
from kernlog.run.fanout import exclusive_compute_mode, gate_workers
from kernlog.spec import Kernel, Revision

# A gate's CPU work (inputs, float64 references, comparisons) is many small torch ops; each
# process's OpenMP threads, one per core by default, spin between them. On a 32-core H200 host,
# eight CUDA C softmax gates side by side took 43-47 s with the default threads, 22.8 s with 4
# each (the host's share), 11.6 s with one; one gate alone took 9.8 s.
# torch.compile compiles in this process, not a pool of workers started for it: a gate, the ncu
# target and the timing process each compile a graph or two, and a pool's start (a Python with
# torch per worker, each injected by ncu under its --target-processes all) and its shutdown at
# exit cost them more than the pool saves (kernlog.capture.profiler sets it where unset).
ONE_COMPILE_PROCESS = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
GATE_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **ONE_COMPILE_PROCESS}


def workers(asked: int | None, revs: list[Revision], progress) -> int:
    """How many of `revs`' gates run at once (`profile` and `bench`): `asked` (--gate-workers),
    else gate_workers' share of the host for them in parts; one, in the calling process, where
    the GPU admits one process (gate processes beside it could not create a context)."""
    n = asked if asked is not None else gate_workers(len(revs) * parts.MAX_PARTS)
    mode = exclusive_compute_mode() if n > 1 and revs else ""
    if mode:
        progress(f"the GPU's compute mode is {mode}: the gates run one by one in this process")
        return 1
    return n


def in_process(root: Path, kernel: Kernel, rev: Revision, workdir: Path, part: gate.Part | None, seed: int | None,
               device: str, timeout: float) -> tuple:
    """One revision's gate (or `part` of it, its inputs drawn from `seed`) in a process of its own,
    one CPU thread for torch (GATE_ENV): (outcome, detail, seconds). A process that dies or hangs
    fails the gate, with its last line."""
    out = workdir / (f"{rev.name}.{part.turn}.json" if part is not None else f"{rev.name}.json")
    cmd = [sys.executable, "-m", "kernlog.run.target", "--gate", str(out), str(root), kernel.name, device, rev.name]
    if part is not None:
        cmd.append(json.dumps({"dtypes": part.dtypes, "shapes": part.shapes, "turn": part.turn, "seed": seed}))
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **GATE_ENV))
    except subprocess.TimeoutExpired:
        return ("failed", f"its gate did not finish in {timeout:.0f} s", time.perf_counter() - t0)
    if done.returncode != 0 or not out.exists():
        return ("failed", f"its gate process exited with {done.returncode}: {last_line(done.stdout + done.stderr)}",
                time.perf_counter() - t0)
    got = json.loads(out.read_text())
    return (got["outcome"], got["detail"], got["seconds"])


def _merged(mine: list[tuple]) -> tuple:
    """One revision's verdict from its [(part or None, verdict)]: the whole's, or its parts' merged."""
    mine = sorted(mine, key=lambda pv: pv[0].turn if pv[0] else 0)
    return mine[0][1] if mine[0][0] is None else parts.merge([v for _, v in mine])


def side_by_side(root: Path, kernel: Kernel, revs: list[Revision], workers: int, progress,
                 meanwhile: Callable[[], None] | None, gate_s: dict[str, float] | None, device: str,
                 timeout: float, judged: Callable[[str, tuple], None] | None = None) -> dict[str, tuple]:
    """The gates of `revs`, `workers` processes at a time: {name: (outcome, detail, seconds)}. The
    longest start first, by `gate_s` ({name: seconds}, kernlog.capture.costs; estimated where
    missing), and a gate longer than the gates' fair share of the workers runs in parts, side
    by side (parts.jobs), their verdicts merged. `meanwhile` runs in this process while they do;
    `judged(name, verdict)` hears each revision's verdict as soon as its last part ends."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    jobs = parts.jobs(kernel, revs, workers, gate_s or {})
    left = {r.name: sum(j[0] is r for j in jobs) for r in revs}
    got: dict[str, list] = {r.name: [] for r in revs}
    lock = threading.Lock()

    def heard(name, part, future):
        with lock:
            got[name].append((part, future.result()))
            whole = len(got[name]) == left[name]
        if whole and judged is not None:
            judged(name, _merged(got[name]))
    workers = min(workers, len(jobs))
    progress(f"correctness gates of {len(revs)} revisions, {workers} processes at a time")
    split = {r.name: left[r.name] for r, part, _ in jobs if part is not None}
    if split:
        progress("in parts side by side: " + ", ".join(f"{name} ({n})" for name, n in split.items()))
    seed = gate.fresh_seed()  # the parts of a gate draw as the whole would: a failure's --seed draws it again
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kernlog-gates-") as tmp, ThreadPoolExecutor(workers) as pool:
        futures = [(rev, part, pool.submit(in_process, root, kernel, rev, Path(tmp), part, seed, device, timeout))
                   for rev, part, _ in jobs]
        for rev, part, f in futures:
            f.add_done_callback(lambda f, name=rev.name, part=part: heard(name, part, f))
        if meanwhile is not None:
            meanwhile()
        done = [(rev.name, part, f.result()) for rev, part, f in futures]
    verdicts = {rev.name: _merged([(p, v) for name, p, v in done if name == rev.name]) for rev in revs}
    progress(f"correctness gates done in {time.perf_counter() - t0:.1f} s")
    return verdicts
