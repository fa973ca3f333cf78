"""`kernlog profile`'s options, written once: the click options of the command are made from
FLAGS, and Options.to_argv turns a set of them back into the flags a process of its own takes
(the GPU fan-out, profiling at a commit)."""
from __future__ import annotations

from dataclasses import dataclass

from kernlog import metrics
from kernlog.spec import Shape, format_shape


@dataclass(frozen=True)

class Flag:
    """One of `kernlog profile`'s options that sets an Options field: the CLI makes its click
    option from this (kernlog.commands.profile) and Options.to_argv writes it back, so a process
    of its own (run.fanout, capture.at_commit) is told what this one was."""
    field: str
    name: str  # --name on the command line
    help: str
    kind: str = "text"  # text | shape | dtype | choice | flag | many (repeatable) | count (an int >= 1)
    choices: tuple[str, ...] = ()
    metavar: str | None = None


DTYPES = ("fp32", "bf16", "fp16")


FLAGS = (
    Flag("shape", "--shape", "Shape: the kernel's dimensions joined by x, e.g. 8192x4096 (or 1048576, "
         "4096x4096x4096).", "shape", metavar="DIMxDIM..."),
    Flag("dtype", "--dtype", "Default: the kernel's first sweep dtype, else its first dtype.", "dtype", DTYPES),
    Flag("force", "--force", "Re-profile and replace existing profiles.", "flag"),
    Flag("regate", "--regate", "Gate every revision again, even one whose stored pass has the same source, check "
         "plan, GPU and libraries (reused otherwise).", "flag"),
    Flag("clock_control", "--clock-control",
         "As ncu's --clock-control; 'none' leaves clocks as the timing pass sees them.", "choice",
         ("base", "none", "reset")),
    Flag("cache_control", "--cache-control", "As ncu's --cache-control.", "choice", ("all", "none")),
    Flag("sections", "--section", "ncu section (repeatable; default: kernlog's list).", "many"),
    Flag("gate_workers", "--gate-workers",
         "Gate N revisions at once, a process each (default: half the cores, at most 8; 1: one by one).", "count",
         metavar="N"),
)


@dataclass

class Options:
    shape: Shape | None = None
    dtype: str | None = None
    force: bool = False
    regate: bool = False  # gate again where a stored pass would be reused (kernlog.capture.gate_runs.reused)
    clock_control: str = "none"  # as ncu names it; 'none' keeps clocks as the timing pass sees them
    cache_control: str = "all"
    sections: tuple[str, ...] = metrics.SECTIONS
    timing_budget_s: float = 1.0
    kernel_filter: str = ""  # a regex: ncu profiles only the kernels whose names match (Kernel.ncu_kernels)
    ncu_timeout_s: float = 900.0
    gate_workers: int | None = None  # gate processes at once (parallel_gates); None: gate_workers(); 1: in this process

    @classmethod
    def from_cli(cls, kernel_sections: tuple[str, ...] = (), **values) -> Options:
        """The Options the command line's FLAGS give (click's values by field name; the shape
        parsed). No --section: `kernel_sections` (Kernel.sections) where the kernel names
        some, else kernlog's SECTIONS."""
        unknown = set(values) - {f.field for f in FLAGS}
        if unknown:
            raise TypeError(f"not a profile option: {', '.join(sorted(unknown))}")
        sections = tuple(values.pop("sections", ()) or kernel_sections or ())
        opts = cls(**values)
        if sections:
            opts.sections = sections
        return opts

    def to_argv(self) -> list[str]:
        """These options as `kernlog profile` takes them (FLAGS, in their order): what
        from_cli makes back into these. Left out: what is at its default and says nothing
        (no shape or dtype, --force off, SECTIONS) and the fields no flag sets."""
        argv: list[str] = []
        for f in FLAGS:
            value = getattr(self, f.field)
            if f.kind == "flag":
                argv += [f.name] if value else []
            elif f.kind == "many":
                argv += [] if tuple(value) == metrics.SECTIONS else [a for v in value for a in (f.name, v)]
            elif value is not None:
                argv += [f.name, format_shape(value) if f.kind == "shape" else str(value)]
        return argv
