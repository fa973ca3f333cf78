"""What a gate's outcome depends on, kept with it (kernlog.store.gates) so that a revision whose
gate passed is not gated again while none of it changed: the revision's source hash, the
kernel's check plan (shapes, the shapes the revision declines, dtypes, cases, tolerances, the
input maker, the reference and any extra check), the GPU, and the libraries and kernlog gate
code it ran with. Whether a stored outcome matches is judged in kernlog.judge.gate_marks.

A function of the plan counts by its source (and the plain values it closes over), as a
revision's loader does in kernlog.identity: a helper it calls in another file does not.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
from dataclasses import asdict
from pathlib import Path

from kernlog import __version__
from kernlog.run import gate
from kernlog.spec import Kernel, Revision, format_shape

_RUN = Path(__file__).resolve().parent
# kernlog's files that decide what a gate checks and how: the checks and tolerances, the
# loading, the untimed picks, the torch.compile gate's graph, the gate's shapes (spec).
GATE_CODE = (_RUN / "gate.py", _RUN / "loading.py", _RUN / "picker.py", _RUN.parent / "frameworks.py",
             _RUN.parent / "spec.py")
# The versions of provenance.versions() and the driver and CUDA of provenance.gpu_info() a key
# names (ncu's is left out: it never runs in a gate).
VERSIONS = ("python", "torch", "triton", "cupy", "liger_kernel")
GPU_FIELDS = ("cuda", "driver")


@functools.lru_cache(maxsize=1)
def gate_code_sha256() -> str:
    """kernlog's version and the bytes of GATE_CODE: a change to the gate gates every revision again."""
    h = hashlib.sha256(__version__.encode())
    for path in GATE_CODE:
        h.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _code(fn) -> str | None:
    """A plan function as the key counts it: its source and the plain values it closes over
    (None: none given; its qualified name where its source cannot be read)."""
    if fn is None:
        return None
    try:
        text = inspect.getsource(fn)
    except (TypeError, OSError):
        text = getattr(fn, "__qualname__", repr(type(fn)))
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    bound = []
    for name, cell in zip(names, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, (str, int, float, bool, bytes, tuple, type(None))):
            bound.append(f"{name}={value!r}")
    return text + ("\0" + ";".join(bound) if bound else "")


def plan(kernel: Kernel, rev: Revision) -> dict:
    """What `rev`'s gate checks, as data: each gate shape with the reason it declines it ("" where
    it runs), the dtypes, the cases, each dtype's tolerance, whether two launches must agree bit
    for bit, and the functions that make the inputs and the answer."""
    return {"shapes": [[format_shape(s), rev.refusal(s)] for s in kernel.gate_shapes_of(rev)],
            "dtypes": list(kernel.dtypes), "cases": list(kernel.cases),
            "tolerance": {d: asdict(gate.tolerance(kernel, d)) for d in kernel.dtypes},
            "deterministic": rev.deterministic,
            "code": {"make_inputs": _code(kernel.make_inputs), "make_output": _code(kernel.make_output),
                     "reference": _code(kernel.reference), "extra_check": _code(kernel.extra_check)}}


def plan_sha256(kernel: Kernel, rev: Revision) -> str:
    return hashlib.sha256(json.dumps(plan(kernel, rev), sort_keys=True).encode()).hexdigest()


def libraries(gpu: dict, versions: dict) -> dict:
    """The versions a gate ran with, from provenance.gpu_info() (`gpu`: CUDA and the driver) and
    provenance.versions() (`versions`), and kernlog's gate code (gate_code_sha256)."""
    out = {name: versions.get(name) for name in VERSIONS}
    out.update({name: gpu.get(name) for name in GPU_FIELDS})
    out["kernlog_gate"] = gate_code_sha256()
    return out


def key(kernel: Kernel, rev: Revision, gpu: dict, versions: dict) -> dict:
    """The key a gate outcome of `rev` is kept with, on the GPU `gpu` (provenance.gpu_info()) with
    `versions` (provenance.versions())."""
    return {"source_sha256": rev.sha256(), "plan_sha256": plan_sha256(kernel, rev), "gpu": gpu.get("name"),
            "libraries": libraries(gpu, versions)}
