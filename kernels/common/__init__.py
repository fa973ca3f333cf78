"""Code shared by the operator folders: kl_cuda.cuh for CUDA C, Triton interpreter shims, and
tuning.py, the picker of launch configurations; and LazyModule, which keeps torch out of
`kernlog list`/`show`/`diff`."""
import importlib
from pathlib import Path

# Listed among the sources of every revision that picks through tuning.py, so a change to the
# picker marks their profiles and sweep points stale.
TUNING_SOURCE = Path(__file__).resolve().parent / "tuning.py"


class LazyModule:
    """Stands for a module in an operator folder's globals until an attribute is read, then
    puts the real module in place of every LazyModule there, so later code (and
    torch.compile, tracing a reference) sees plain modules. `import torch` took 1.8 s of the
    3-5 s of `kernlog list` on the 2-core CPU machine, and list/show/diff run nothing.
    A function-level import would not do for the framework references: their lambdas' source,
    `lambda x: torch.softmax(...)`, is their revision's identity (spec.Revision.sha256), so
    they keep reading the globals `torch` and `F`.
    An `optional` one (Liger-Kernel, absent from most machines) is imported only when read
    itself, never along with the others."""

    def __init__(self, name: str, namespace: dict, optional: bool = False):
        self._name = name
        self._namespace = namespace
        self._optional = optional

    def __getattr__(self, attr):
        for key, value in list(self._namespace.items()):
            if isinstance(value, LazyModule) and (value is self or not value._optional):
                self._namespace[key] = importlib.import_module(value._name)
        return getattr(importlib.import_module(self._name), attr)
