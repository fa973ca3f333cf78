"""Code shared by this repository's operator folders: the row-norm kernels of LayerNorm and
RMSNorm, their shape families, and LazyModule, which keeps torch out of `kernlog list`/`show`/
`diff`. Not an operator (no KERNEL here), so kernlog passes it over.

The picker of launch configurations and the Triton interpreter shim are kernlog's own
(kernlog.tuning, kernlog.triton_interpreter), as any repository's kernels import them; they are
named here too, `from kernels.common import tuning` being how the operator files written
before the move spell that import (the bytes of those files are their revisions' identity)."""
import importlib
from pathlib import Path

from kernlog import triton_interpreter, tuning  # noqa: F401

# Listed among the sources of every revision that picks through kernlog.tuning, so a change to the
# picker marks their profiles and sweep points stale.
TUNING_SOURCE = Path(tuning.__file__).resolve()


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
