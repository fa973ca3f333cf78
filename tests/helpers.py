"""Test helpers: profile records built from real H100 ncu reports, in a scratch repository
whose kernels/ is this repository's."""
from __future__ import annotations

import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernlog.capture.profiler import build_record
from kernlog.cuda import DeviceCaps
from kernlog.registry import find_root, load_kernel
from kernlog.store import profiles as store
from kernlog.store.record import Profile

ROOT = find_root(Path(__file__).parent)
FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
SECTIONS_REP = FIXTURES / "triton_softmax_8192x4096_fp32_sections.ncu-rep"  # 5 sections, range "kl"
FULL_REP = FIXTURES / "triton_softmax_8192x4096_fp32_full_src.ncu-rep"  # --set full, range "kl"
# GPUs as kernlog.cuda.device_caps reads them from the driver (shared memory: the opt-in limit
# per block). The fixtures' reports are the H100's.
H100 = DeviceCaps("NVIDIA H100 80GB HBM3", (9, 0), 132, 227 * 1024, True)
A100 = DeviceCaps("NVIDIA A100-SXM4-80GB", (8, 0), 108, 163 * 1024, False)
L4 = DeviceCaps("NVIDIA L4", (8, 9), 58, 99 * 1024, False)
GPU = {"name": H100.name, "slug": "nvidia-h100-80gb-hbm3", "sm_count": H100.sm_count,
       "driver": "580.159.04", "cuda": "13.0", "capability": "9.0", "memory_gib": 79.2}
CEILINGS = {"copy_gbps": 3000.0, "matmul_bf16_tflops": 700.0}


def fake_gpu(monkeypatch, caps: DeviceCaps) -> None:
    """Every device reports `caps` to the launchers (through kernlog.cuda.device_caps)."""
    from kernlog import cuda

    monkeypatch.setattr(cuda, "device_caps", lambda device=None: caps)


def samples(median_ms: float, n: int = 60, spread: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median_ms * (1 + spread * rng.standard_normal(n)))


def make_record(revision: str, report: Path = FULL_REP, median_ms: float = 0.1, kernel: str = "softmax",
                shape=(8192, 4096), dtype: str = "fp32", seed: int = 0) -> dict:
    k = load_kernel(ROOT, kernel)
    rec = build_record(report, k.revision(revision), samples(median_ms, seed=seed), range_name="kl")
    rec.update(schema=store.SCHEMA, kernel=kernel, shape=list(shape), dtype=dtype, gpu=GPU,
               versions={"ncu": "2025.3.1", "torch": "2.11.0", "triton": "3.6.0"},
               git={"commit": "0" * 40, "dirty": False}, bytes_moved=k.bytes_moved(shape, dtype),
               flops=k.flops(shape), ceiling=k.ceiling, ceilings=CEILINGS, captured_at="2026-11-22T00:00:00+00:00",
               check={"cases": 1, "worst_rel_error": 0.0})
    rec["ncu"].update(report=f"{revision}.ncu-rep", clock_control="none", sections=[], command=["ncu"])
    return rec


def profile_of(rec: dict, check: bool = True) -> Profile:
    """A record as built (make_record's, or one edited from it) as the typed Profile a loader
    gives; its report's size, which a save records, is 0 where the record has none yet. With
    `check` false it is typed unchecked (Profile.from_checked): a record a test cut down to the
    fields a renderer shows, which no loader would accept."""
    rec = dict(rec, ncu={"report_bytes": 0, **rec["ncu"]})
    return Profile.from_dict(rec) if check else Profile.from_checked(rec)


def make_profile(revision: str, **kw) -> Profile:
    """make_record's record as a Profile (profile_of)."""
    return profile_of(make_record(revision, **kw))


def scratch_repo(tmp_path: Path, notes: bool = False) -> Path:
    """A repository root with this repo's kernels/ and an empty profiles/: the kernels' files each
    linked but for their notes and history pages, whose links are written from this repository's
    reports/ (to its triage page, say) and resolve nowhere else; notes=True links the folder whole."""
    if notes:
        (tmp_path / "kernels").symlink_to(ROOT / "kernels")
    else:
        shutil.copytree(ROOT / "kernels", tmp_path / "kernels", copy_function=os.symlink,
                        ignore=shutil.ignore_patterns("notes.md", "history.md", "__pycache__"))
    (tmp_path / "profiles").mkdir()
    return tmp_path


def stored_files(root: Path) -> list[Path]:
    """Every file under profiles/ but the gate's outcomes (profiles/<gpu>/<kernel>/gate/outcomes.json,
    kernlog.store.gates), which `kernlog profile` keeps for each revision it gates, stored or not."""
    return sorted(p for p in (root / "profiles").rglob("*") if p.is_file() and p.parent.name != "gate")


def put(root: Path, rec: dict, report: Path = SECTIONS_REP) -> Path:
    """Store `rec` as `kernlog profile` would, with a copy of `report` as its .ncu-rep (the
    reader verifies the pair, not that the report holds these metrics)."""
    tmp = root / "profiles" / f".put-{rec['revision']}.ncu-rep"
    shutil.copyfile(report, tmp)
    return store.save_profile(root, json.loads(json.dumps(rec)), tmp, force=True, compress=False)  # as older profiles


def git(root: Path, *args: str) -> str:
    """Run git in `root`; its stdout, stripped (a failing command raises)."""
    import subprocess

    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def git_repo(path: Path) -> Path:
    """scratch_repo at `path` as a git repository (kernels/, a link to this repository's, ignored)."""
    path.mkdir(parents=True, exist_ok=True)
    root = scratch_repo(path)
    (root / ".gitignore").write_text("kernels\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    return root


def kernel_page(root: Path, name: str = "softmax", sections: list | None = None) -> str:
    """reports/NAME.md as `kernlog report` writes it (the per-kernel page: arc, evidence, sweeps)."""
    from kernlog.render import report

    if sections is None:
        sections = report.collect(root, [load_kernel(root, name)])
    return report.pages(root, sections)[report.page_path(name)]


def without_interpreter(script: str, *args: str, stdin: str | None = None, timeout: float = 600):
    """`python -c script args` at the repository's root in a fresh interpreter without
    TRITON_INTERPRET: the interpreter patches triton.language in its own process, and Triton's
    compiler cannot run beside it. The finished process (subprocess.CompletedProcess, text)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", script, *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def compile_report(source: Path, arch: str) -> str:
    """kernlog.cuda.compile_report, kept on disk under the digest of everything the compile reads:
    nvcc's version, kernlog/cuda.py (its command line), the source and each file it includes, the
    arch. The same inputs give the same ptxas report, so an unchanged revision is compiled once
    per machine (a minute of `make test` on two cores), a changed one again;
    KERNLOG_TEST_NVCC_CACHE=0 compiles every time. A failed compile is never kept."""
    import hashlib
    import os

    from kernlog import cuda

    if os.environ.get("KERNLOG_TEST_NVCC_CACHE") == "0":
        return cuda.compile_report(source, arch=arch)
    # the digest NVRTC's module cache keys on (the source, each include, the options), with
    # nvcc's version, the arch and kernlog/cuda.py (compile_report's command line) as the options
    tool = hashlib.sha256(Path(cuda.__file__).read_bytes()).hexdigest()
    digest = cuda._digest(Path(source), (_nvcc_version(), arch, tool))
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    kept = base / "kernlog-tests" / "ptxas" / f"{Path(source).stem}-{digest}.txt"
    if kept.is_file():
        return kept.read_text()
    report = cuda.compile_report(source, arch=arch)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_name(f".{kept.name}.{os.getpid()}")
        tmp.write_text(report)
        os.replace(tmp, kept)
    except OSError:  # a read-only home: compile every time
        pass
    return report


@lru_cache(maxsize=None)
def _nvcc_version() -> str:
    import subprocess

    return subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout


def ptxas_entries(report: str) -> dict[str, str]:
    """{kernel name: its ptxas resource lines} from `ptxas -v` output (kernlog.cuda.compile_report)."""
    import re

    out, current = {}, None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            out[current] = ""
        elif current:
            out[current] += line + "\n"
    return out


def gate_failures(kernel, rev_name: str, launch, shapes, dtypes=None, cases=None, device: str = "cpu") -> list[str]:
    """The gate's lines for each case `launch` fails when it stands for `kernel`'s revision
    `rev_name` at `shapes` (`cases`: only those of the kernel's cases; None: all of them)."""
    import dataclasses

    from kernlog.run import gate

    if cases:
        kernel = dataclasses.replace(kernel, cases=cases)
    results = gate.check_revision(kernel, kernel.revision(rev_name), device, shapes=shapes, dtypes=dtypes,
                                  launch=launch)
    return [r.line() for r in results if not r.ok]


def refuse(*args, **kwargs):
    """A stand-in for a path a test says must not be taken: a launcher or kernel monkeypatched to it
    fails the gate with "wrong path taken"."""
    raise AssertionError("wrong path taken")


class Refused:
    """A Triton kernel (kernel[grid](...)) that refuses, as `refuse`."""
    def __getitem__(self, grid):
        return refuse
