"""`kernlog noise`: A/A runs of revisions on this GPU -> profiles/<gpu>/<kernel>/noise/.

Each run repeats what `kernlog profile` does for the revisions, in fresh processes: a timing
pass (kernlog.run.target --time) and an ncu pass. The runs of all revisions interleave (run 1 of
every revision, then run 2, ...), so drift over the minutes it takes spreads over all of
them. Each revision passes the gate first. The first run's timing pass picks each tuned
launcher's config; later runs are pinned to it (KERNLOG_PINNED): on the H100, softmax v7 and
matmul v1 picked between near-tied configs from process to process (v7: 128- or 256-thread
blocks, 92.9-93.2 us, twice the instructions), which is a change of code path, not noise.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kernlog.capture import profiler, provenance
from kernlog.errors import GateFailure, KernlogError
from kernlog.judge.verdicts import band_of_runs
from kernlog.registry import load_kernel, split_rev
from kernlog.run import gate
from kernlog.spec import format_shape
from kernlog.store import calibrations
from kernlog.store import profiles as store
from kernlog.store.keys import noise_dir, staging_dir


def _groups(root: Path, revs: list[str], shape, dtype) -> dict:
    """{(kernel name, shape, dtype): [revision names]} in the order given."""
    groups: dict = {}
    for text in revs:
        kname, rname = split_rev(text)
        kernel = load_kernel(root, kname)
        try:
            kernel.revision(rname)
        except KeyError:
            raise KernlogError(f"no revision {rname!r} in {kname}; revisions: "
                               + ", ".join(r.name for r in kernel.revisions)) from None
        d = kernel.dtype_or_default(dtype)
        groups.setdefault((kname, tuple(shape or kernel.profile_shape), d), []).append(rname)
    return groups


def _timing_run(root: Path, key, names: list[str], tmp: Path, env: dict) -> dict:
    out = tmp / "timing.json"
    cmd = [sys.executable, "-m", "kernlog.run.target", "--time", str(out), str(root), key[0], format_shape(key[1]),
           key[2], *names]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=dict(os.environ, **env))
    if done.returncode != 0 or not out.exists():
        raise KernlogError(f"the timing process failed ({done.returncode}): "
                           f"{profiler.last_line(done.stdout + done.stderr)}")
    return json.loads(out.read_text())


def _pin_env(tmp: Path, config: dict | None) -> dict:
    """The environment that pins a process to `config` (none before the first run picked)."""
    if config is None:
        return {}
    (tmp / "pinned.json").write_text(json.dumps(config))
    return {profiler.PIN_ENV: str(tmp / "pinned.json")}


def calibrate(root: Path, revs: list[str], shape, dtype, runs: int,
              progress: Callable[[str], None] = print) -> list[Path]:
    ncu = profiler.require_gpu()
    groups = _groups(root, revs, shape, dtype)
    gpu = provenance.gpu_info()
    opts = profiler.Options()
    for (kname, shp, d), names in groups.items():
        kernel = load_kernel(root, kname)
        for name in names:
            bad = gate.first_failure(gate.check_revision(kernel, kernel.revision(name), "cuda", shapes=[shp],
                                                         dtypes=[d]))
            if bad is not None:
                raise GateFailure(f"not calibrated: {bad.line()}")
    values: dict = {}  # (kernel, shape, dtype, rev) -> [metrics of each run]
    clocks: dict = {}
    pins: dict = {}  # group -> the configs its first run picked, taken by every later process
    configs: dict = {}  # (kernel, shape, dtype, rev) -> the config it picked
    for i in range(runs):
        for key, names in groups.items():
            kernel = load_kernel(root, key[0])
            progress(f"run {i + 1}/{runs}: {key[0]} {', '.join(names)} {format_shape(key[1])} {key[2]}")
            tmp = Path(tempfile.mkdtemp(prefix=".kernlog-noise-", dir=staging_dir(root)))
            try:
                timed = _timing_run(root, key, names, tmp, _pin_env(tmp, pins.get(key)))
                pins.setdefault(key, {k: v for n in names for k, v in timed[n].get("config", {}).items()})
                env = _pin_env(tmp, pins[key])
                report = tmp / "report.ncu-rep"
                profiler.run_ncu(profiler.ncu_command(ncu, opts, report, root, key[0], key[1], key[2], names),
                                 opts.ncu_timeout_s, env=env)
                for name in names:
                    part = profiler.build_record(report, kernel.revision(name), timed[name]["samples_ms"])
                    values.setdefault((*key, name), []).append(part["metrics"])  # a record part, no Profile yet
                    clocks.setdefault((*key, name), []).append(timed[name]["clocks"])
                    configs.setdefault((*key, name), timed[name].get("config", {}))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    written = []
    common = {"schema": calibrations.SCHEMA, "gpu": gpu, "versions": provenance.versions(ncu),
              "git": provenance.git_state(root), "captured_at": provenance.now(), "runs_n": runs,
              "method": f"{runs} A/A runs, interleaved across the revisions, each a fresh timing process and a "
                        "fresh ncu process as `kernlog profile` runs them; spread = (max - min) / |median|"}
    for (kname, shp, d, name), runs_m in values.items():
        rev = load_kernel(root, kname).revision(name)
        sm = [c["sm_mhz"]["median"] for c in clocks[(kname, shp, d, name)] if c and c.get("sm_mhz")]
        data = dict(common, kernel=kname, revision=name, shape=list(shp), dtype=d, source_sha256=rev.sha256(),
                    runs=runs_m, spread=band_of_runs(runs_m), config=configs[(kname, shp, d, name)],
                    sm_mhz_medians=sm, sm_mhz=statistics.median(sm) if sm else None)
        path = noise_dir(root, gpu["slug"], kname) / f"{store.stem(name, shp, d)}.json"
        store.write_atomic(path, store.dump_json(data))
        written.append(path)
    return written
