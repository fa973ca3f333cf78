"""`kernlog profile`: gate -> timing pass -> ncu pass -> extraction -> profiles/, per revision."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernlog import metrics, timing
from kernlog.capture import hotspots, provenance
from kernlog.capture import ncu as ncurep
from kernlog.errors import GateFailure, KernlogError, NoGpu, Unsupported
from kernlog.run import gate, picker
from kernlog.run.clocks import Clocks
from kernlog.run.target import RANGE_PREFIX, TARGET_SAYS
from kernlog.spec import Kernel, Revision, Shape, format_shape
from kernlog.store import profiles as store
from kernlog.store.keys import ceilings_json, staging_dir

DEVICE = "cuda"


@dataclass(frozen=True)
class Flag:
    """One of `kernlog profile`'s options that sets an Options field: the CLI makes its click
    option from this (kernlog.commands.profile) and Options.to_argv writes it back, so a process
    of its own (run.fanout, capture.at_commit) is told what this one was."""
    field: str
    name: str  # --name on the command line
    help: str
    kind: str = "text"  # text | shape | dtype | choice | flag | many (repeatable) | count (an int >= 1)
    choices: tuple[str, ...] = ()
    metavar: str | None = None


DTYPES = ("fp32", "bf16", "fp16")
FLAGS = (
    Flag("shape", "--shape", "Shape, e.g. 8192x4096.", "shape", metavar="ROWSxCOLS"),
    Flag("dtype", "--dtype", "Default: the kernel's first dtype.", "dtype", DTYPES),
    Flag("force", "--force", "Re-profile and replace existing profiles.", "flag"),
    Flag("clock_control", "--clock-control",
         "As ncu's --clock-control; 'none' leaves clocks as the timing pass sees them.", "choice",
         ("base", "none", "reset")),
    Flag("cache_control", "--cache-control", "As ncu's --cache-control.", "choice", ("all", "none")),
    Flag("sections", "--section", "ncu section (repeatable; default: kernlog's list).", "many"),
    Flag("gate_workers", "--gate-workers",
         "Gate N revisions at once, a process each (default: half the cores, at most 8; 1: one by one).", "count",
         metavar="N"),
)


@dataclass
class Options:
    shape: Shape | None = None
    dtype: str | None = None
    force: bool = False
    clock_control: str = "none"  # as ncu names it; 'none' keeps clocks as the timing pass sees them
    cache_control: str = "all"
    sections: tuple[str, ...] = metrics.SECTIONS
    timing_budget_s: float = 1.0
    kernel_filter: str = ""  # a regex: ncu profiles only the kernels whose names match (Kernel.ncu_kernels)
    ncu_timeout_s: float = 900.0
    gate_workers: int | None = None  # gate processes at once (parallel_gates); None: gate_workers(); 1: in this process

    @classmethod
    def from_cli(cls, kernel_sections: tuple[str, ...] = (), **values) -> Options:
        """The Options the command line's FLAGS give (click's values by field name; the shape
        parsed). No --section: `kernel_sections` (Kernel.sections) where the kernel names
        some, else kernlog's SECTIONS."""
        unknown = set(values) - {f.field for f in FLAGS}
        if unknown:
            raise TypeError(f"not a profile option: {', '.join(sorted(unknown))}")
        sections = tuple(values.pop("sections", ()) or kernel_sections or ())
        opts = cls(**values)
        if sections:
            opts.sections = sections
        return opts

    def to_argv(self) -> list[str]:
        """These options as `kernlog profile` takes them (FLAGS, in their order): what
        from_cli makes back into these. Left out: what is at its default and says nothing
        (no shape or dtype, --force off, SECTIONS) and the fields no flag sets."""
        argv: list[str] = []
        for f in FLAGS:
            value = getattr(self, f.field)
            if f.kind == "flag":
                argv += [f.name] if value else []
            elif f.kind == "many":
                argv += [] if tuple(value) == metrics.SECTIONS else [a for v in value for a in (f.name, v)]
            elif value is not None:
                argv += [f.name, format_shape(value) if f.kind == "shape" else str(value)]
        return argv


def require_gpu() -> str:
    try:
        import torch
    except ImportError:
        raise NoGpu("torch is not installed: profiling needs torch with CUDA") from None
    if not torch.cuda.is_available():
        raise NoGpu("no CUDA GPU visible: `kernlog profile` and `kernlog bench` run on a GPU machine "
                    "(diff, show, list and report work here from profiles/)")
    ncu = provenance.find_ncu()
    if ncu is None:
        raise NoGpu("ncu (Nsight Compute) not found on PATH")
    return ncu


def ncu_command(ncu: str, opts: Options, report: Path, root: Path, kernel: str, shape: Shape,
                dtype: str, rev: str | list[str], after: tuple[Path, int] | None = None) -> list[str]:
    """One ncu process over the revisions `rev` (one name or several), each launched once
    inside its own NVTX range; with `after` (GO, PID), only those GO names, once it appears
    (kernlog.run.target.profile_revisions)."""
    revs = [rev] if isinstance(rev, str) else list(rev)
    cmd = [ncu, "--target-processes", "all", "--nvtx"]
    for r in revs:
        cmd += ["--nvtx-include", f"{RANGE_PREFIX}{r}/"]
    if opts.kernel_filter:
        cmd += ["--kernel-name-base", "demangled", "--kernel-name", f"regex:{opts.kernel_filter}"]
    cmd += ["--clock-control", opts.clock_control, "--cache-control", opts.cache_control,
            "--import-source", "no", "--export", str(report)]
    for section in opts.sections:
        cmd += ["--section", section]
    cmd += ["--metrics", ",".join(metrics.EXTRA_METRICS)]
    told = ["--after", str(after[0]), str(after[1])] if after else []
    return cmd + [sys.executable, "-m", "kernlog.run.target", *told, str(root), kernel, format_shape(shape), dtype,
                  *revs]


PIN_ENV = picker.PIN_ENV


def run_ncu(cmd: list[str], timeout: float, env: dict | None = None) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        raise KernlogError(f"ncu did not finish in {timeout:.0f} s") from None
    ncu_outcome(done.returncode, done.stdout + done.stderr)


def last_line(text: str) -> str:
    """A process's last non-empty line of output, stripped ("no output" where there is none):
    where a failing process says why."""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")


def ncu_outcome(returncode: int, text: str) -> None:
    """Raise with ncu's reason where its process (exit status, output) profiled nothing."""
    if "ERR_NVGPUCTRPERM" in text:
        raise NoGpu("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root "
                    "or allow profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)")
    if returncode != 0:
        said = [ln.strip() for ln in text.splitlines() if ln.startswith(TARGET_SAYS)]  # the target's own reason
        raise KernlogError(f"ncu exited with {returncode}: {said[-1] if said else last_line(text)}")
    if "No kernels were profiled" in text:
        raise KernlogError("ncu profiled no kernel: the revision launched nothing inside its NVTX range")


def stored_state(root: Path, gpu: str, kernel: Kernel, rev: Revision, shape: Shape, dtype: str) -> str:
    """'missing', 'current' (same source hash) or 'stale'."""
    json_path, _ = store.profile_paths(root, gpu, kernel.name, rev.name, shape, dtype)
    if not json_path.exists():
        return "missing"
    try:
        rec = store.load_profile(root, json_path)
    except store.ProfileError:
        return "broken"
    if rec.get("imported") and rec.get("source_sha256") is None:
        return "imported"
    return "current" if rec.get("source_sha256") == rev.sha256() else "stale"


def build_record(report: Path | list, rev: Revision, samples: list[float], range_name: str | None = None,
                 clocks: dict | None = None, root: Path | None = None) -> dict:
    """The revision's part of a profile: metrics, findings and source-line hot spots from the
    kernels its ncu report (a path, or the report's actions) holds inside the NVTX range
    `range_name` (default: the one kernlog.run.target opens for it), and the timing pass's samples."""
    range_name = range_name or RANGE_PREFIX + rev.name
    actions = ncurep.read_report(report) if isinstance(report, Path) else report
    actions = ncurep.group_by_range(actions, range_name).get(range_name, [])
    values, facts = ncurep.summarize(actions)
    if not samples or not all(map(math.isfinite, samples)):
        raise KernlogError(f"{rev.name}: the timing pass gave no usable samples ({len(samples)}, non-finite "
                           "ones included); nothing was stored")
    summary = timing.summary(samples)
    values["wall_ms"] = summary["median_ms"]
    return {"revision": rev.name, "kind": rev.kind, "role": rev.role, "change": rev.change,
            "predicts": rev.predicts, "source_sha256": rev.sha256(), "metrics": values, "facts": facts,
            "findings": ncurep.findings(actions),
            "hotspots": hotspots.of_revision(actions, root or Path.cwd(), rev.sources),
            "timing": dict(summary, samples_ms=[round(x, 5) for x in samples],
                           l2_flush_bytes=timing.FLUSH_BYTES, warmup=3, clocks=clocks),
            "ncu": {"replay_passes": ncurep.replay_passes(actions), "nvtx_range": range_name}}


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


def _check(kernel: Kernel, rev: Revision) -> tuple:
    return gate.verdict(kernel, rev, DEVICE)


GATE_WORKERS_MAX = 8
GATE_TIMEOUT_S = 900.0


def gate_workers(revisions: int, cpus: int | None = None) -> int:
    """How many revisions `kernlog profile` gates at once: a process each, half the host's
    cores (each compiles: NVRTC, Triton, Inductor), at most GATE_WORKERS_MAX. On the H100 the
    softmax ladder's 13 gates took 112 s one after another (nearly all compiling), the
    timing passes 5 s, its ncu process 56 s."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 2)
    return max(1, min(revisions, cpus // 2, GATE_WORKERS_MAX))


def exclusive_compute_mode() -> str:
    """The compute mode of a visible GPU that admits one process at a time ("Exclusive_Process",
    "Prohibited"), as nvidia-smi names it; "" where every one is shared (the default) or
    nvidia-smi cannot tell. Gate processes beside this one would fail to create a context there."""
    from kernlog.run import fanout

    modes = [row["compute_mode"] for _, row in fanout.visible() if row is not None]
    return next((m for m in modes if m in ("Exclusive_Process", "Prohibited")), "")


def _gate_in_process(root: Path, kernel: Kernel, rev: Revision, workdir: Path) -> tuple:
    """One revision's gate in a process of its own (kernlog.run.target --gate): (outcome, detail,
    seconds). A process that dies or hangs fails the gate, with its last line."""
    out = workdir / f"{rev.name}.json"
    cmd = [sys.executable, "-m", "kernlog.run.target", "--gate", str(out), str(root), kernel.name, DEVICE, rev.name]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=GATE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return ("failed", f"its gate did not finish in {GATE_TIMEOUT_S:.0f} s", time.perf_counter() - t0)
    if done.returncode != 0 or not out.exists():
        return ("failed", f"its gate process exited with {done.returncode}: {last_line(done.stdout + done.stderr)}",
                time.perf_counter() - t0)
    got = json.loads(out.read_text())
    return (got["outcome"], got["detail"], got["seconds"])


def parallel_gates(root: Path, kernel: Kernel, revs: list[Revision], workers: int,
                   progress, meanwhile: Callable[[], None] | None = None) -> dict[str, tuple]:
    """The correctness gates of `revs`, each in a process of its own, `workers` at a time:
    {name: (outcome, detail, seconds)}. Triton revisions start first (each gate shape compiles
    anew; the softmax counterpart's gate was the longest, 30 s on the H100), then the rest from
    the ladder's end (the references, then the latest steps). `meanwhile` runs in this process
    while they do. The GPU is shared while they run; the timing passes come after, one at a
    time, in this process, which checks each output again after its timing pass."""
    from concurrent.futures import ThreadPoolExecutor

    progress(f"correctness gates of {len(revs)} revisions, {workers} processes at a time")
    t0 = time.perf_counter()
    order = [r for r in reversed(revs) if r.kind == "triton"] + [r for r in reversed(revs) if r.kind != "triton"]
    with tempfile.TemporaryDirectory(prefix="kernlog-gates-") as tmp, ThreadPoolExecutor(workers) as pool:
        futures = {r.name: pool.submit(_gate_in_process, root, kernel, r, Path(tmp)) for r in order}
        if meanwhile is not None:
            meanwhile()
        verdicts = {name: f.result() for name, f in futures.items()}
    progress(f"correctness gates done in {time.perf_counter() - t0:.1f} s")
    return verdicts


def warm_references(kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str) -> None:
    """Load and launch each reference (F.*, torch.compile, Liger: framework code, not the code
    under test) once at `shape`, so its compiling is done while the gates run: in a fresh
    process torch.compile's took 13 s of the softmax ladder's timing passes on the H100. A
    failure here is left to its timing pass, which meets it again."""
    import torch

    refs = [rev for rev in revs if rev.role == "reference" and not rev.refusal(shape)]
    if not refs:
        return
    try:  # one set of inputs for all of them: references only read theirs
        inputs = kernel.make_inputs(shape, dtype, torch.Generator(device=DEVICE).manual_seed(0), DEVICE,
                                    kernel.cases[0])
    except Exception:  # noqa: BLE001 -- the timing passes report it
        return
    for rev in refs:
        try:
            rev.load()(inputs, kernel.make_output(inputs))
            if DEVICE == "cuda":
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 -- the timing pass reports it
            pass


def _by_name(kernel: Kernel, rev: Revision) -> bool:
    """Whether a fresh process loading `kernel` by name gets this very revision."""
    try:
        return kernel.revision(rev.name) is rev
    except KeyError:
        return False


def _time(kernel: Kernel, rev: Revision, shape: Shape, dtype: str, opts: Options, timer, tag: str,
          progress, check: dict) -> Timed | None:
    """Timing pass of one revision that passed the gate, in this process; None if its output
    fails the gate after the timing pass."""
    import torch

    t0 = time.perf_counter()
    progress(f"{tag}: timing pass")
    launch = rev.load()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    inputs = kernel.make_inputs(shape, dtype, gen, DEVICE, kernel.cases[0])
    out = kernel.make_output(inputs)
    gate.poison(out)  # an element no timed launch writes shows in the recheck below
    picker.forget_used()
    timer.clocks = Clocks()
    samples = timer.samples(functools.partial(launch, inputs, out), budget_s=opts.timing_budget_s)
    config = picker.used_config()
    traced = kernel_times(launch, inputs, out) if kernel.trace_kernels else None
    after = gate.recheck(kernel, rev, launch, inputs, out, dtype, shape)  # as the many timed launches left it
    if not after.ok:
        progress(f"{tag}: FAILED the gate after the timing pass, not profiled: {after.line()}")
        return None
    del inputs, out
    torch.cuda.empty_cache()
    progress(f"{tag}: timed in {time.perf_counter() - t0:.1f} s ({len(samples)} samples)")
    return Timed(rev, tag, samples, timer.clocks.summary(), config, check, t0, traced)


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


def _gate_and_time(kernel: Kernel, rev: Revision, shape: Shape, dtype: str, opts: Options, timer, tag: str,
                   progress, verdict: tuple | None = None) -> Timed | None:
    """Gate and timing pass of one revision; None if it failed the gate, before or after the
    timing pass. A shape the revision declines (Revision.refuses) is Unsupported: skipped.
    `verdict`: its gate's (outcome, detail, seconds), run already by parallel_gates."""
    why = rev.refusal(shape)
    if why:
        raise Unsupported(why)
    if verdict is None:
        progress(f"{tag}: correctness gate")
        g0 = time.perf_counter()
        outcome = _check(kernel, rev)
        seconds, where = time.perf_counter() - g0, ""
    else:
        outcome, seconds, where = verdict[:2], verdict[2], " (its own process)"
        if outcome[0] == "unsupported":
            raise Unsupported(outcome[1])
    if outcome[0] == "failed":
        progress(f"{tag}: FAILED the gate, not profiled: {outcome[1]}")
        return None
    progress(f"{tag}: gate passed in {seconds:.1f} s{where}")
    return _time(kernel, rev, shape, dtype, opts, timer, tag, progress, outcome[1])


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


STAGING = ".kernlog-"  # profiles/.kernlog-<pid>-*: an ncu pass's scratch folder, removed when it ends


def clear_abandoned_staging(root: Path) -> list[Path]:
    """Remove the scratch folders of ncu passes whose process is gone from this machine (a
    `profile` killed mid-pass cannot remove its own); a live process's folder stays. The
    folders removed."""
    gone = []
    for folder in sorted(staging_dir(root).glob(f"{STAGING}*")):
        pid = folder.name[len(STAGING):].split("-")[0]
        if not folder.is_dir() or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
        except PermissionError:  # alive, another user's
            pass
    return gone


STOP_GRACE_S = 5.0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class NcuRun:
    """An ncu process over revisions of one shape whose target (kernlog.run.target --after) waits
    for `go` to name those to profile and the picks to take. Started while the gates run, it
    loads, compiles and warms up every revision meanwhile, then says so (`ready`)."""
    names: list[str]
    tmpdir: Path
    cmd: list[str]
    proc: subprocess.Popen

    @property
    def report(self) -> Path:
        return self.tmpdir / "report.ncu-rep"

    @property
    def go(self) -> Path:
        return self.tmpdir / "go.json"

    @property
    def log(self) -> Path:
        return self.tmpdir / "ncu.log"

    def tell(self, names: list[str], config: dict) -> None:
        """Name the revisions to profile (of self.names) and the picks to take."""
        store.write_atomic(self.go, store.dump_json({"revisions": names, "pins": config}))

    def ready(self, limit_s: float) -> bool:
        """Whether the target has warmed every revision up (or ended) within `limit_s`."""
        end = time.monotonic() + limit_s
        while not self.go.with_suffix(".ready").exists() and self.proc.poll() is None:
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True

    def finish(self, timeout: float) -> float:
        """Wait for the process (told already); raise with ncu's reason where it profiled
        nothing. Seconds it ran after being told."""
        t0 = time.perf_counter()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise KernlogError(f"ncu did not finish in {timeout:.0f} s") from None
        ncu_outcome(self.proc.returncode, self.log.read_text(errors="replace"))
        return time.perf_counter() - t0

    def stop(self) -> None:
        """End the process group (ncu and the target under it, which may outlive ncu): SIGTERM,
        so ncu can put back what it changed (clocks), then SIGKILL after STOP_GRACE_S."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:  # the whole group is gone
                break
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(self.proc.pid):
                break
            time.sleep(0.05)
        self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def _staging(root: Path) -> Path:
    """A new scratch folder for an ncu pass, profiles/.kernlog-<pid>-*, after removing those of
    processes that are gone."""
    clear_abandoned_staging(root)
    return Path(tempfile.mkdtemp(prefix=f"{STAGING}{os.getpid()}-", dir=staging_dir(root)))


def start_ncu(root: Path, kernel: Kernel, names: list[str], shape: Shape, dtype: str, opts: Options,
              ncu: str) -> NcuRun:
    """An ncu process over `names`, started before their gates end, in a scratch folder under
    profiles/: it warms them all up, then waits to be told which to profile (NcuRun)."""
    tmpdir = _staging(root)
    try:
        cmd = ncu_command(ncu, opts, tmpdir / "report.ncu-rep", root, kernel.name, shape, dtype, names,
                          after=(tmpdir / "go.json", os.getpid()))
        proc = None
        with open(tmpdir / "ncu.log", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return NcuRun(names, tmpdir, cmd, proc)
    except BaseException:
        if proc is not None:
            NcuRun(names, tmpdir, cmd, proc).stop()
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise


def _ncu_pass(root: Path, kernel: Kernel, batch: list[Timed], shape: Shape, dtype: str, opts: Options, ncu: str,
              common: dict, progress, run: NcuRun | None = None) -> list[Path]:
    """One ncu process over the revisions of `batch` (one NVTX range each), their profiles
    saved as one report and a JSON each: `run`, started while the gates ran, or a new one."""
    config = {k: v for t in batch for k, v in t.config.items()}
    names = [t.rev.name for t in batch]
    progress(f"ncu pass: {', '.join(names)} in one process ({len(opts.sections)} sections"
             + (", started while the gates ran)" if run is not None else ")")
             + (f", pinned to {config}" if config else ""))
    tmpdir = _staging(root) if run is None else run.tmpdir
    try:
        if run is None:
            report = tmpdir / "report.ncu-rep"
            cmd = ncu_command(ncu, opts, report, root, kernel.name, shape, dtype, names)
            pins = tmpdir / "pinned.json"
            pins.write_text(json.dumps(config))
            t_ncu = time.perf_counter()
            run_ncu(cmd, opts.ncu_timeout_s, env={PIN_ENV: str(pins)})
            ncu_s = time.perf_counter() - t_ncu
        else:
            report, cmd = run.report, run.cmd
            run.tell(names, config)
            ncu_s = run.finish(opts.ncu_timeout_s)
        actions = ncurep.read_report(report)
        records = []
        for t in batch:
            record = dict(common, **build_record(actions, t.rev, t.samples, clocks=t.clocks, root=root),
                          captured_at=provenance.now(), config=t.config, check=t.check)
            if t.kernel_times is not None:
                record["kernel_times"] = t.kernel_times
            record["ncu"].update(command=["ncu"] + [c for c in cmd[1:cmd.index(sys.executable)]
                                                    if c not in ("--export", str(report))],
                                 sections=list(opts.sections), extra_metrics=list(metrics.EXTRA_METRICS),
                                 clock_control=opts.clock_control, cache_control=opts.cache_control,
                                 process_seconds=round(ncu_s, 1), process_revisions=names,
                                 process_started_during_gates=run is not None)
            records.append(record)
        del actions
        paths = store.save_profiles(root, records, report, opts.force, compress=True)
    finally:
        if run is not None:
            run.stop()
        shutil.rmtree(tmpdir, ignore_errors=True)
    for t, rec in zip(batch, records, strict=True):
        progress(f"{t.tag}: done ({rec['ncu']['replay_passes']} passes; ncu process {ncu_s:.0f} s "
                 f"for {len(batch)} revision(s))")
    return paths


def ceilings(root: Path, gpu: str, timer, force: bool, progress: Callable[[str], None] = lambda s: None) -> dict:
    """The GPU's copy bandwidth and matmul rate (profiles/<gpu>/ceilings.json), measured where
    there are none yet or with --force."""
    path = ceilings_json(root, gpu)
    if path.exists() and not force:
        return store.load_ceilings(root, gpu)
    t0 = time.perf_counter()
    data = timing.measure_ceilings(timer)
    data["captured_at"] = provenance.now()
    store.write_atomic(path, store.dump_json(data))
    progress(f"this GPU's ceilings measured in {time.perf_counter() - t0:.1f} s: {path.relative_to(root)}")
    return data


def _todo(root: Path, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, opts: Options, gpu: str,
          progress) -> list[Revision]:
    """The revisions to profile: those with no stored profile of this source (all with --force)."""
    todo = []
    for r in revs:
        state = "missing" if opts.force else stored_state(root, gpu, kernel, r, shape, dtype)
        if state == "missing":
            todo.append(r)
        else:
            why = {"current": "at this source hash", "stale": "but its source changed since (stale)",
                   "broken": "but its stored pair fails verification (`kernlog list` says why)",
                   "imported": "from an imported report"}[state]
            progress(f"skip {kernel.name}/{r.name}: profiled on {gpu} {why}; --force replaces it")
    return todo


def _shape_dtype(kernel: Kernel, opts: Options) -> tuple[Shape, str]:
    dtype = opts.dtype or kernel.dtypes[0]
    if dtype not in kernel.dtypes:
        raise KernlogError(f"{kernel.name} has no {dtype} revision inputs; dtypes: {', '.join(kernel.dtypes)}")
    return opts.shape or kernel.profile_shape, dtype


def profile_on_gpus(root: Path, kernel: Kernel, revs: list[Revision], opts: Options, gpus: int | None = None,
                    progress: Callable[[str], None] = print) -> list[Path]:
    """profile(), the revisions to do dealt out to `gpus` of the host's GPUs (those of the
    first's model), a process per GPU (kernlog.run.fanout); one GPU (the default): in this process.
    Not the default: measured on a 2-GPU H200 host, two GPUs took the softmax ladder 134 s,
    one 94 s (fanout.child_env)."""
    from kernlog.run import fanout

    devices = fanout.visible_gpus()[:gpus] if gpus and gpus > 1 else []
    if len(devices) < 2 or len(revs) < 2:
        return profile(root, kernel, revs, opts, progress)
    require_gpu()
    shape, dtype = _shape_dtype(kernel, opts)
    todo = _todo(root, kernel, revs, shape, dtype, opts, provenance.gpu_info()["slug"], progress)
    if len(todo) < 2:
        return profile(root, kernel, todo, opts, progress) if todo else []
    args = dataclasses.replace(opts, shape=shape, dtype=dtype).to_argv()
    return fanout.profile_on_gpus(root, kernel.name, todo, args, devices, progress)


def profile(root: Path, kernel: Kernel, revs: list[Revision], opts: Options,
            progress: Callable[[str], None] = print) -> list[Path]:
    started = time.perf_counter()
    ncu = require_gpu()
    shape, dtype = _shape_dtype(kernel, opts)
    if kernel.ncu_kernels and not opts.kernel_filter:
        opts = dataclasses.replace(opts, kernel_filter=kernel.ncu_kernels)
    gpu = provenance.gpu_info()
    todo = _todo(root, kernel, revs, shape, dtype, opts, gpu["slug"], progress)
    if not todo:
        return []
    timer = timing.Timer()
    ceil = ceilings(root, gpu["slug"], timer, opts.force, progress)
    common = {"schema": store.SCHEMA, "kernel": kernel.name, "shape": list(shape), "dtype": dtype,
              "gpu": gpu, "versions": provenance.versions(ncu), "git": provenance.git_state(root),
              "bytes_moved": kernel.bytes_moved(shape, dtype), "flops": kernel.flops(shape),
              "ceiling": kernel.ceiling, "ceilings": ceil}
    apart = [r for r in todo if _by_name(kernel, r) and not r.refusal(shape)]
    workers = opts.gate_workers if opts.gate_workers is not None else gate_workers(len(apart))
    mode = exclusive_compute_mode() if workers > 1 and len(apart) > 1 else ""
    if mode:
        progress(f"the GPU's compute mode is {mode}: the gates run one by one in this process")
        workers = 1
    verdicts, early = {}, None
    try:
        if workers > 1 and len(apart) > 1:
            early = start_ncu(root, kernel, [r.name for r in apart], shape, dtype, opts, ncu)
            verdicts = parallel_gates(root, kernel, apart, workers, progress,
                                      meanwhile=lambda: warm_references(kernel, todo, shape, dtype))
            t0 = time.perf_counter()
            if not early.ready(READY_WAIT_S):  # still warming up: it would share the GPU with the timing passes
                progress(f"the ncu process was not ready {READY_WAIT_S:.0f} s after the gates: started again later")
                early.close()
                early = None
            elif time.perf_counter() - t0 >= 1.0:
                progress(f"waited {time.perf_counter() - t0:.1f} s for the ncu process to finish its warm-up")
        written = _time_and_ncu(root, kernel, todo, shape, dtype, opts, ncu, timer, common, verdicts, early,
                                progress)
        progress(f"{kernel.name}: {len(written)} profile(s) written in {time.perf_counter() - started:.0f} s")
        return written
    finally:
        if early is not None:
            early.close()


# How long the timing passes wait, after the gates, for the ncu process started with them to
# finish its warm-up (it loads, compiles and launches every revision once under ncu).
READY_WAIT_S = 60.0


def _time_and_ncu(root: Path, kernel: Kernel, todo: list[Revision], shape: Shape, dtype: str, opts: Options,
                  ncu: str, timer, common: dict, verdicts: dict, early: NcuRun | None,
                  progress) -> list[Path]:
    """The timing passes of `todo` (their gates' `verdicts` given, or run here), then the ncu
    passes of those that passed: the first in `early` where it holds them all."""
    timed, failed, skipped = [], [], []
    for i, rev in enumerate(todo, 1):
        tag = f"[{i}/{len(todo)}] {kernel.name}/{rev.name} {format_shape(shape)} {dtype}"
        try:
            t = _gate_and_time(kernel, rev, shape, dtype, opts, timer, tag, progress, verdicts.get(rev.name))
        except Unsupported as exc:
            progress(f"{tag}: skipped: {exc}")
            skipped.append(rev.name)
            continue
        if t is None:
            failed.append(rev.name)
        else:
            timed.append(t)
    written, ncu_failed = [], []
    for batch in batches(timed):
        run = None
        if early is not None and early.proc.poll() is None and {t.rev.name for t in batch} <= set(early.names):
            run, early = early, None
        elif early is not None:  # it does not hold this batch: free the GPU memory it keeps
            early.close()
            early = None
        try:
            written += _ncu_pass(root, kernel, batch, shape, dtype, opts, ncu, common, progress, run)
        except KernlogError as exc:
            if len(batch) == 1 or isinstance(exc, NoGpu):
                raise
            # One revision may take the shared process down: each again in its own, so the
            # others are still profiled and the culprit is named.
            progress(f"ncu pass of {len(batch)} revisions failed ({exc}); each again in its own process")
            for t in batch:
                try:
                    written += _ncu_pass(root, kernel, [t], shape, dtype, opts, ncu, common, progress)
                except KernlogError as one:
                    progress(f"{t.tag}: ncu pass FAILED, not profiled: {one}")
                    ncu_failed.append(t.rev.name)
    if ncu_failed:
        raise KernlogError(f"the ncu pass failed for {', '.join(ncu_failed)}: not profiled (the lines above say why)")
    if skipped and not written and not failed:
        raise Unsupported(f"this GPU cannot run {', '.join(skipped)}: nothing was profiled")
    if failed:
        raise GateFailure(f"{len(failed)} revision(s) failed the correctness gate and were not profiled: "
                          + ", ".join(failed))
    return written
