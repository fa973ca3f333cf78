import os
import shutil
import sys

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


def pytest_collection_modifyitems(config, items):
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
