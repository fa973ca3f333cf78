"""The ncu process of a profile: its command line, its outcome read from its output, and the
process itself (started early, beside the gates, its scratch folder under profiles/, stopped
with its whole process group)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernlog import metrics
from kernlog.capture.options import Options
from kernlog.errors import KernlogError, NoGpu
from kernlog.run.target import CLOCK_SUFFIX, GATED_SUFFIX, RANGE_PREFIX, TARGET_SAYS, WARM_SUFFIX
from kernlog.spec import Shape, format_shape
from kernlog.store import profiles as store
from kernlog.store.keys import staging_dir


def ncu_command(ncu: str, opts: Options, report: Path, root: Path, kernel: str, shape: Shape,
                dtype: str, rev: str | list[str], after: tuple[Path, int] | None = None) -> list[str]:
    """One ncu process over the revisions `rev` (one name or several), each launched once
    inside its own NVTX range; with `after` (GO, PID), only those GO names, once it appears
    (kernlog.run.target.profile_revisions)."""
    revs = [rev] if isinstance(rev, str) else list(rev)
    cmd = [ncu, "--target-processes", "all", "--nvtx"]
    for r in revs:  # the push/pop range ("name/") and the start/end one ("name"): kernlog.run.target
        cmd += ["--nvtx-include", f"{RANGE_PREFIX}{r}/", "--nvtx-include", f"{RANGE_PREFIX}{r}"]
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


def last_line(text: str) -> str:
    """A process's last non-empty line of output, stripped ("no output" where there is none):
    where a failing process says why."""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")


class NothingProfiled(KernlogError):
    """ncu ran and matched no launch: the caller knows which filter it gave."""


def ncu_outcome(returncode: int, text: str) -> None:
    """Raise with ncu's reason where its process (exit status, output) profiled nothing."""
    if "ERR_NVGPUCTRPERM" in text:
        raise NoGpu("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root "
                    "or allow profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)")
    if returncode != 0:
        said = [ln.strip() for ln in text.splitlines() if ln.startswith(TARGET_SAYS)]  # the target's own reason
        raise KernlogError(f"ncu exited with {returncode}: {said[-1] if said else last_line(text)}")
    if "No kernels were profiled" in text:
        raise NothingProfiled("ncu profiled no kernel: the revision launched nothing inside its NVTX range")


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
    loads, compiles and warms up each revision as its gate passes (`judged`), from the caches the
    gate filled, and says so (`ready`) once every revision is warm or out."""
    names: list[str]
    tmpdir: Path
    cmd: list[str]
    proc: subprocess.Popen
    _said: dict = field(default_factory=lambda: {"passed": [], "failed": []}, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def report(self) -> Path:
        return self.tmpdir / "report.ncu-rep"

    @property
    def go(self) -> Path:
        return self.tmpdir / "go.json"

    @property
    def log(self) -> Path:
        return self.tmpdir / "ncu.log"

    @property
    def gated(self) -> Path:
        return self.go.with_suffix(GATED_SUFFIX)

    def judged(self, name: str, passed: bool) -> None:
        """Say that `name`'s gate passed (the target warms it up now, from the caches its gate
        filled) or did not (never warmed up): the verdicts so far, written whole."""
        with self._lock:  # the gates' verdicts come from their threads
            self._said["passed" if passed else "failed"].append(name)
            store.write_atomic(self.gated, store.dump_json(self._said))

    def _beside(self, suffix: str) -> dict:
        """What the target wrote beside GO under `suffix` (kernlog.run.target), {} where it has
        not (yet), or wrote no JSON object."""
        try:
            said = json.loads(self.go.with_suffix(suffix).read_text())
        except (OSError, ValueError):
            return {}
        return said if isinstance(said, dict) else {}

    def warmup(self) -> dict[str, float]:
        """{revision: seconds its load and first launch took under ncu, "": the target's start}, as
        the target wrote them once warm ({} before, or where it never said)."""
        return {k: float(v) for k, v in self._beside(WARM_SUFFIX).items() if isinstance(v, (int, float))}

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

    def clock(self, ended: float) -> str:
        """Where the ncu pass's seconds went, in words, its process having ended at `ended`
        (time.time()): from being told to its first profiled launch, the launches, and after
        the last one (the target's exit, ncu's report); "" where the target did not say."""
        said = self._beside(CLOCK_SUFFIX)
        try:
            told, launched = float(said["told"]), sorted(float(t) for t in said["launched"].values())
        except (ValueError, KeyError, TypeError):
            return ""
        if not launched:
            return ""
        return (f"first profiled launch {launched[0] - told:.1f} s after it was told, the last "
                f"{launched[-1] - launched[0]:.1f} s later, the report {ended - launched[-1]:.1f} s after that")

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


def run_ncu(cmd: list[str], timeout: float, env: dict | None = None) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        raise KernlogError(f"ncu did not finish in {timeout:.0f} s") from None
    ncu_outcome(done.returncode, done.stdout + done.stderr)
