"""Code shared by the operator folders: kl_cuda.cuh for CUDA C, Triton interpreter shims, and
tuning.py, the picker of launch configurations."""
from pathlib import Path

# Listed among the sources of every revision that picks through tuning.py, so a change to the
# picker marks their profiles and sweep points stale.
TUNING_SOURCE = Path(__file__).resolve().parent / "tuning.py"
