import os
import shutil
import sys

# xdist workers share the cores (`make test`: -n 2 on CI's two): each computes on its share of
# them, as kernlog's own parallel processes do (kernlog.run.fanout.child_env), instead of every
# worker's torch and OpenBLAS spreading a thread per core over cores the other worker is using
# (13% more CPU for the interpreter and library tests on two cores). Read before torch is imported;
# a value set by hand stands.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

# kernlog.memo keeps what `list` and `report` derive in a cache of the user's; the tests keep
# theirs in a folder of the run's own (a subprocess inherits it), never in the home's.
if "KERNLOG_CACHE" not in os.environ:
    import atexit
    import tempfile

    os.environ["KERNLOG_CACHE"] = tempfile.mkdtemp(prefix="kernlog-test-cache-")
    atexit.register(shutil.rmtree, os.environ["KERNLOG_CACHE"], True)

# Triton runs its kernels through the CPU interpreter where there is no GPU; it reads this
# variable when it is first imported, so set it before any test imports triton.
try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    HAS_CUDA = False
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

HAS_NCU = shutil.which("ncu") is not None
HAS_NVCC = shutil.which("nvcc") is not None


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true",
                     help="also run the tests marked slow (README: the GPU machine runs them, `make test-slow`)")


# `make test` runs the files on two workers, each file whole on one (--dist loadfile: a file's
# module fixtures, cached compiles and collected sections are made once, not once per worker),
# in this file order (--no-loadscope-reorder). The files of a minute or half a minute of CPU go
# first, longest first, so that the last files to start are short and both workers finish
# together; the rest keep pytest's order. A file missing here only runs later: a stale list
# costs time, never a test.
LONGEST_FIRST = ("test_gate_all_kernels.py", "test_softmax_cuda.py", "test_profiler.py", "test_log_gate.py",
                 "test_adopt.py", "test_integrity.py", "test_triton_compiles.py", "test_matmul_cuda.py",
                 "test_readme.py", "test_cli.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_ncu = pytest.mark.skip(reason="needs a GPU and ncu")
    skip_slow = pytest.mark.skip(reason="slow on the CPU: run with --run-slow")
    for item in items:
        if item.get_closest_marker("slow") and not config.getoption("--run-slow"):
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "ncu" in item.keywords and not (HAS_CUDA and HAS_NCU):
            item.add_marker(skip_ncu)


@pytest.fixture
def own_kernels_package(monkeypatch):
    """Lets a test import another repository's kernels/ package; this one's is back after (and
    sys.path, where load_kernel puts the other repository first)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
        del sys.modules[name]


@pytest.fixture
def toy(tmp_path, own_kernels_package):
    """(root, kernel) of the toy operator in a scratch repository (tests/test_profiler.py's TOY);
    a test file needing more of it defines its own `toy`."""
    from kernlog.registry import load_kernel

    from .test_profiler import _toy_repo

    root = _toy_repo(tmp_path)
    return root, load_kernel(root, "toy")


# tests/helpers.scratch_repo links a scratch repository's kernels/ to this repository's: a test
# that writes there writes into the checkout (one overwrote softmax's notes.md, and the change
# was committed). The run fails where any file under kernels/ differs at its end from its start.
KERNELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
_KERNELS_AT_START: dict = {}


def _kernels_files() -> dict:
    import hashlib

    out = {}
    for folder, dirs, files in os.walk(KERNELS):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, KERNELS)] = hashlib.sha256(f.read()).hexdigest()
    return out


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller only (xdist workers share the files)
        _KERNELS_AT_START.update(_kernels_files())


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or not _KERNELS_AT_START:
        return
    now = _kernels_files()
    changed = sorted(p for p in set(now) | set(_KERNELS_AT_START) if now.get(p) != _KERNELS_AT_START.get(p))
    if changed:
        sys.stderr.write("\nthe tests changed files of this repository's kernels/ (a test writing through "
                         f"scratch_repo's link?): {', '.join('kernels/' + p for p in changed[:8])}\n")
        session.exitstatus = 1
