import os
import shutil

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


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_ncu = pytest.mark.skip(reason="needs a GPU and ncu")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "ncu" in item.keywords and not (HAS_CUDA and HAS_NCU):
            item.add_marker(skip_ncu)
