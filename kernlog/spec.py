"""What an operator folder declares: reference, inputs, shapes and its ordered revisions.

Each `kernels/<op>/__init__.py` defines one module-level ``KERNEL = Kernel(...)``. That
tuple of revisions is the only place a ladder is enumerated: the gate, the timing pass,
the profiler, the tests and the log all read it.

Launcher protocol: ``revision.load()`` builds (compiles, autotunes lazily) and returns
``launch(inputs, out) -> Tensor``. Custom kernels write into ``out`` (which the gate has
poisoned) and return it; framework references may return a fresh tensor.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kernlog.errors import KernlogError
from kernlog.identity import source_sha256

Shape = tuple[int, ...]
Inputs = tuple[Any, ...]
Launcher = Callable[[Inputs, Any], Any]

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
KINDS = ("cuda", "triton", "torch")
# step: a rung of the ladder; reference: the framework baseline; counterpart: shown beside
# the tuned step (the Triton version of a CUDA C ladder); wrong: a known-wrong revision kept to
# document a bug (its `bug` says which): the gate must reject it, and it is never timed or profiled.
ROLES = ("step", "reference", "counterpart", "wrong")
WRONG = "wrong"
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
COPY = "copy"  # the sweep's same-size copy column (kernlog bench): no revision may take the name
REFUSED = "refused"  # bench.csv's metric of a point a revision declined, its reason in the "note" column
# bench.csv's metric of a point where a reference (F.*, Liger) fails the gate at full size: the
# user's baseline is timed all the same, and the log marks it with the problem (in "note")
FAILS_GATE = "fails_gate"
RUN_SPREAD = "run_spread"  # bench.csv's metric of a point's run-to-run spread (`kernlog bench --repeat`)
SM_MHZ = "sm_mhz"  # bench.csv's metric of the median SM clock while a revision's launches at a point ran (NVML)


def torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def format_shape(shape: Shape) -> str:
    return "x".join(str(n) for n in shape)


def parse_shape(text: str) -> Shape:
    parts = text.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"bad shape {text!r}: expected positive integers joined by 'x', e.g. 8192x4096")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class Revision:
    name: str
    kind: str
    sources: tuple[Path, ...]
    load: Callable[[], Launcher]
    change: str
    predicts: str = ""
    role: str = "step"
    code: Optional[Callable] = None  # the function that is the revision, when `load` only wraps it
    deterministic: bool = True  # False (atomics): two launches may round apart, each must pass the gate
    # The launcher the gate checks across its shapes, where it differs from `load`'s (the one
    # timed and profiled): torch.compile's shape-generic graph in place of one per shape.
    load_for_gate: Optional[Callable[[], Launcher]] = None
    # The shapes it declines, declared: shape -> why ("" where it runs). The gate leaves those out
    # and bench records the refusal; a revision raising on a shape it did not decline fails.
    refuses: Optional[Callable[[Shape], str]] = None
    # role="wrong" only: the bug this revision documents, in words (a race on the row maximum, an
    # accumulator left in bf16); the log shows it beside the revision, and the gate must reject it.
    bug: str = ""
    # Shapes the gate checks for this revision alone, after the kernel's: where its own plan takes a
    # path none of the kernel's check shapes reach (a tile it picks only past a wave of SMs, a split it
    # takes only at large K). Checked on every device the gate runs it on.
    check_shapes: tuple[Shape, ...] = ()
    # What this machine lacks to run it, one line with the fix ("" where nothing): asked before
    # torch is imported, so it must be cheap (a package's metadata, never an import). `profile`
    # skips a revision that lacks something, and an unchanged ladder then ends at once.
    missing: Optional[Callable[[], str]] = None

    def refusal(self, shape: Shape) -> str:
        return self.refuses(tuple(shape)) if self.refuses is not None else ""

    def lacks(self) -> str:
        return self.missing() if self.missing is not None else ""

    def __post_init__(self):
        if not NAME_RE.match(self.name):
            raise ValueError(f"revision name {self.name!r} must match {NAME_RE.pattern}")
        if self.kind not in KINDS:
            raise ValueError(f"revision {self.name}: kind={self.kind!r} is not one of {', '.join(KINDS)}")
        if self.role not in ROLES:
            raise ValueError(f"revision {self.name}: role={self.role!r} is not one of {', '.join(ROLES)}")
        if (self.role == WRONG) != bool(self.bug.strip()):
            raise ValueError(f"revision {self.name}: role='wrong' takes bug='the bug it documents', and only it does")

    @property
    def known_wrong(self) -> bool:
        return self.role == WRONG

    def sha256(self) -> str:
        """The revision's identity: a hash of every file it executes -- `sources`, the files
        they #include, its launcher module, the tool's files for its kind -- where an
        operator's __init__.py counts only with the revision's function in it
        (kernlog.identity.executed_files and source_sha256 say which and how)."""
        return source_sha256(self)


def _no_flops(shape: Shape) -> int:
    return 0


@dataclass(frozen=True)
class Family:
    """Shapes people run, swept together by `kernlog bench --family` and shown as one table:
    a name, why these members, and the members. `check`: small versions of the members (their
    odd lengths, fewer rows) that join the kernel's check shapes, so every gate -- the CPU's
    included -- meets what the family is about; bench gates each member at full size."""
    name: str
    why: str
    shapes: tuple[Shape, ...]
    check: tuple[Shape, ...] = ()

    def __post_init__(self):
        if not NAME_RE.match(self.name):
            raise ValueError(f"family name {self.name!r} must match {NAME_RE.pattern}")
        if not self.shapes or not all(s and all(type(n) is int and n > 0 for n in s)
                                      for s in self.shapes + self.check):
            raise ValueError(f"family {self.name}: shapes must be tuples of positive integers")


def _even(shape: Shape) -> float:
    return 1.0


@dataclass(frozen=True)
class SpeedBar:
    """The speed bar of the log's sweep tables: the best step (and the counterpart) at least
    `ratio(shape)` times as fast as the fastest of `against` (empty: every reference), a gap
    inside the noise band a tie. `label` heads the table's column."""
    against: tuple[str, ...] = ()
    ratio: Callable[[Shape], float] = _even
    label: str = "best reference"


EVERY_REFERENCE = SpeedBar()  # the default bar: as fast as the fastest reference


@dataclass(frozen=True)
class Kernel:
    name: str
    revisions: tuple[Revision, ...]
    make_inputs: Callable[..., Inputs]  # (shape, dtype_name, generator, device, case) -> inputs
    make_output: Callable[[Inputs], Any]  # empty output for these inputs
    reference: Callable[[Inputs, Any], Any]  # float64 result on the inputs' device; `out` only for stochastic ops
    bytes_moved: Callable[[Shape, str], int]  # fewest DRAM bytes: each input read once, output written once
    check_shapes: tuple[Shape, ...]
    bench_shapes: tuple[Shape, ...]
    profile_shape: Shape
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    # What `kernlog bench` sweeps where its --dtype is not given (empty: every dtype above, each
    # still gated): the dtypes the log's sweep tables and speed bar judge.
    sweep_dtypes: tuple[str, ...] = ()
    cases: tuple[str, ...] = ("random",)  # input families the gate draws; the first is timed and profiled
    flops: Callable[[Shape], int] = _no_flops
    flops_per_element: float = 0.0  # a model of the arithmetic per output element, for the roofline only
    ceiling: str = "copy"  # the roofline term that bounds it: "copy" (bandwidth) or "matmul"
    sweep_axis: int = -1  # which shape entry the sweep plot puts on its x axis
    extra_check: Callable[[Inputs, Any], str | None] | None = None
    tolerance: dict = field(default_factory=dict)  # per-dtype overrides of gate.TOLERANCE
    sanitize_shapes: tuple[Shape, ...] = ()  # compute-sanitizer's shapes (default: the last two check shapes)
    # ncu sections when `profile` names none (default: metrics.SECTIONS). A target launching
    # hundreds of kernels (a model's forward) takes a few: every section is replayed per kernel.
    sections: tuple[str, ...] = ()
    # Record every kernel a launch runs and its time from a CUPTI trace (profiler.kernel_times):
    # where a launch's time goes, for targets of many kernels.
    trace_kernels: bool = False
    # A regex of kernel names: ncu profiles only those (its metrics describe them, not the whole
    # launch); the CUPTI trace still times every kernel. "" profiles every kernel.
    ncu_kernels: str = ""
    families: tuple[Family, ...] = ()  # shape families (issue 20): `kernlog bench --family`, a log table each
    speed_bar: SpeedBar = EVERY_REFERENCE  # what a sweep point must reach (default: the fastest reference)
    reference_notes: tuple[str, ...] = ()  # references a user might expect that the kernel lacks, and why
    doc: str = ""

    def __post_init__(self):
        names = [r.name for r in self.revisions]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"kernel {self.name}: two revisions named {', '.join(map(repr, twice))}: "
                             "a revision's name is its own")
        if COPY in names:
            raise ValueError(f"kernel {self.name}: {COPY!r} is the sweep's copy column, not a revision name")
        missing = [r for r in self.speed_bar.against if r not in names]
        if missing:
            raise ValueError(f"kernel {self.name}: the speed bar names {missing[0]!r}, not one of its revisions")
        extra = [d for d in self.sweep_dtypes if d not in self.dtypes]
        if extra:
            raise ValueError(f"kernel {self.name}: sweep_dtypes names {extra[0]!r}, not one of its dtypes")
        if self.ceiling not in ("copy", "matmul"):
            raise ValueError(f"kernel {self.name}: ceiling must be 'copy' or 'matmul'")
        rank = len(self.profile_shape)
        for fam in self.families:
            bad = [s for s in fam.shapes + fam.check if len(s) != rank]
            if bad:
                raise ValueError(f"kernel {self.name}, family {fam.name}: shape {bad[0]} has not {rank} dimensions")
        if len({f.name for f in self.families}) != len(self.families):
            raise ValueError(f"kernel {self.name}: duplicate family names")

    def family_shapes(self, names) -> list[Shape]:
        """The members of the families `names` ("all": every family), in order, each once."""
        known = {f.name: f for f in self.families}
        if not known:
            raise KeyError(f"{self.name} declares no shape family")
        wanted = list(known) if "all" in names else list(names)
        bad = [n for n in wanted if n not in known]
        if bad:
            raise KeyError(f"{self.name} has no family {bad[0]!r}; families: {', '.join(known)}")
        out: list[Shape] = []
        for n in wanted:
            out += [s for s in known[n].shapes if s not in out]
        return out

    @property
    def profile_dtype(self) -> str:
        """The dtype a command takes where none is named (profile, noise, import, triage, a diff's
        side) and the page heads its arc in: the first the sweeps judge (sweep_dtypes), else the
        first declared. attention's sweeps and bar are bf16's, its first dtype fp32 (the
        interpreter's exact check): a profile without --dtype lands on the page's ladder."""
        return self.sweep_dtypes[0] if self.sweep_dtypes else self.dtypes[0]

    def dtype_or_default(self, dtype: str | None) -> str:
        """`dtype`, or the profile dtype where none is named; KernlogError where the kernel has no
        such inputs (what every command taking --dtype says)."""
        dtype = dtype or self.profile_dtype
        if dtype not in self.dtypes:
            raise KernlogError(f"{self.name} has no {dtype} inputs; dtypes: {', '.join(self.dtypes)}")
        return dtype

    @property
    def gate_shapes(self) -> tuple[Shape, ...]:
        """What the gate checks: the check shapes, then the families' small versions not among them."""
        out = list(self.check_shapes)
        for fam in self.families:
            out += [s for s in fam.check if s not in out]
        return tuple(out)

    def gate_shapes_of(self, rev: Revision) -> tuple[Shape, ...]:
        """What the gate checks for `rev`: the kernel's gate shapes, then the revision's own not among them."""
        out = self.gate_shapes
        return out + tuple(dict.fromkeys(tuple(s) for s in rev.check_shapes if tuple(s) not in out))

    def revision(self, name: str) -> Revision:
        for rev in self.revisions:
            if rev.name == name:
                return rev
        raise KeyError(name)
