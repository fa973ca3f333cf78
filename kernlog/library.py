"""The library that picks its revision from measurements, as a user's code runs it: shape classes,
the dispatch table's file (<kernels>/<op>/dispatch.json, which `kernlog dispatch` makes from
the committed sweep: kernlog.judge.dispatch), the pick for one call, and `Dispatched`, an
operator's one entry point. docs/dispatch.md says it in words.

    op = Dispatched.open(root, "softmax")
    y = op((x,))                       # the launcher protocol: inputs as make_inputs builds them

A shape class: each shape axis as the power of two a kernel rounds it up to (`bucket`: 1000 and
1024 -> 1024, 1025 -> 2048; triton.next_power_of_2 sizes blocks so; a ClassRule of two buckets an
octave also stops at three quarters of one: 3072 apart from 4096), and how the rows the kernel
reads lie (`align`, over ClassRule.aligned's axes): "tiled" where each is a multiple of 128
elements (blocks of 64 or 128 cover it with no masked tail), else "aligned" where each is a
whole number of 16-byte words (128-bit loads, TMA), else "ragged" (a row of 50257). 1000 and
1024 fall in different classes: the matmul v0_tiled took 6x as long at 1000x1000x1000 as at
1024x1024x1024 on the H100.

A call takes the class it falls in, else the nearest class of its dtype and alignment (the
fewest octaves apart, over all axes). It takes the fallback -- the revision fastest over the
whole sweep that runs the shape -- where a call is more than one octave beyond what the sweep
measured on some axis, of a dtype or alignment the sweep has no class of, or where every
revision of its class declines its shape (Revision.refuses) or cannot run here (a CUDA C one on
the CPU, Triton on the CPU without its interpreter).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernlog import config
from kernlog.errors import CannotRun, KernlogError, Unsupported
from kernlog.spec import DTYPE_BYTES, Kernel, Shape, format_shape

TABLE = "dispatch.json"  # beside the operator: the library reads it wherever the kernels go
GPU_TABLE = "dispatch."  # dispatch.<gpu slug>.json: a table of another GPU's own sweep, beside it
SCHEMA = 1
ALIGN_BYTES = 16  # a row of whole 16-byte words: what 128-bit loads and TMA descriptors need
TILE = 128  # a row of whole tiles: a multiple of the 64- and 128-wide blocks the ladders use
ALIGNS = ("ragged", "aligned", "tiled")
ANY = "any"  # the fallback's entry over every dtype, for a dtype the sweep has no point of


@dataclass(frozen=True)
class ClassRule:
    """How a kernel's shapes fall into classes: a name per axis, and the axes whose lengths are
    the rows the kernel reads (a row-wise op's columns, a matmul's N and K, attention's head
    dimension), which decide a shape's alignment."""
    axes: tuple[str, ...]
    aligned: tuple[int, ...]
    align_bytes: int = ALIGN_BYTES
    tile: int = TILE
    # Buckets an octave: 1 rounds each length up to a power of two; 2 also to three quarters of one
    # (3072 apart from 4096, where a matmul's tile count and so its best kernel changes).
    per_octave: int = 1

    def __post_init__(self):
        if self.per_octave not in (1, 2):
            raise ValueError(f"ClassRule(per_octave={self.per_octave!r}): 1 or 2 buckets an octave")

    def as_dict(self) -> dict:
        out = {"axes": list(self.axes), "aligned": list(self.aligned), "align_bytes": self.align_bytes,
               "tile": self.tile}
        return out | ({"per_octave": self.per_octave} if self.per_octave != 1 else {})

    @classmethod
    def from_dict(cls, d: dict) -> ClassRule:
        return cls(tuple(d["axes"]), tuple(d["aligned"]), int(d["align_bytes"]), int(d["tile"]),
                   int(d.get("per_octave", 1)))


# By the shape's rank, as this repository's operators lay their shapes out; an operator whose
# shape means something else declares DISPATCH_CLASSES = ClassRule(...) in its __init__.py.
RULES = {
    1: ClassRule(("n",), (0,)),  # elementwise (GeLU, dropout, vector add): the element count
    2: ClassRule(("rows", "cols"), (1,)),  # row-wise (softmax, LayerNorm, RMSNorm)
    3: ClassRule(("M", "N", "K"), (1, 2)),  # matmul: a is M x K, b is K x N
    4: ClassRule(("batch", "heads", "tokens", "head_dim"), (3,)),  # attention: q, k, v are B x H x T x D
}


def rule_for(rank: int) -> ClassRule:
    return RULES.get(rank) or ClassRule(tuple(f"d{i}" for i in range(rank)), (rank - 1,))


def bucket(n: int, per_octave: int = 1) -> int:
    """The exponent of the power of two `n` rounds up to: 1 -> 0, 1000 -> 10, 1024 -> 10, 1025 -> 11.
    With two buckets an octave, in half octaves, three quarters of a power of two between: 3072 -> 23,
    3073 and 4096 -> 24, 2049 -> 23 (bucket_size says what each rounds up to)."""
    e = (int(n) - 1).bit_length()
    if per_octave == 1:
        return e
    return 2 * e - (1 if e >= 2 and int(n) <= 3 << (e - 2) else 0)


def bucket_size(b: int, per_octave: int = 1) -> int:
    """The length bucket `b` rounds up to: 1 << b, or with two an octave 2^(b/2), 3 x 2^((b-3)/2) for odd b."""
    if per_octave == 1 or b % 2 == 0:
        return 1 << (b // per_octave)
    return (3 << ((b + 1) // 2)) >> 2


def align(shape, dtype: str, rule: ClassRule) -> str:
    """"tiled", "aligned" or "ragged": how the rows of `shape` (rule.aligned's axes) lie in memory."""
    rows = [shape[i] for i in rule.aligned]
    if all(n % rule.tile == 0 for n in rows):
        return "tiled"
    size = DTYPE_BYTES.get(dtype, 4)
    return "aligned" if all(n * size % rule.align_bytes == 0 for n in rows) else "ragged"


def class_key(shape, dtype: str, rule: ClassRule) -> tuple:
    """(dtype, align, buckets): the class a shape falls in."""
    return dtype, align(shape, dtype, rule), tuple(bucket(n, rule.per_octave) for n in shape)


def table_path(root: Path, kernel: str, gpu: str | None = None) -> Path:
    """The operator's table, <kernels>/<kernel>/dispatch.json; with `gpu` (a slug), the table of
    that GPU's own sweep beside it, dispatch.<gpu>.json, which calls on that GPU read first."""
    return config.layout(root).kernels / kernel / (TABLE if gpu is None else f"{GPU_TABLE}{gpu}.json")


def gpu_table_paths(root: Path, kernel: str) -> dict[str, Path]:
    """{GPU slug: path} of the operator's per-GPU tables (dispatch.<gpu>.json)."""
    folder = config.layout(root).kernels / kernel
    return {p.name[len(GPU_TABLE):-len(".json")]: p for p in sorted(folder.glob(f"{GPU_TABLE}*.json"))}


def load_table(path: Path) -> dict | None:
    """The dispatch table in `path`; None where there is none. A file that is not a table of this
    schema is an error naming it and the command that writes it again."""
    again = "`kernlog dispatch` writes it again"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise KernlogError(f"{path}: not a dispatch table ({e}); {again}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("classes"), list):
        raise KernlogError(f"{path}: not a dispatch table of schema {SCHEMA}; {again}")
    return data


@dataclass(frozen=True)
class Pick:
    revision: str
    # "gpu" (the call's own class in this GPU's table), "class" (its own class), "nearest" (the
    # nearest class), "fallback"
    how: str
    cls: dict | None  # the class entry it came from; None for the fallback
    why: str = ""  # for a fallback: why no class served

    def line(self) -> str:
        if self.how == "fallback":
            return f"{self.revision} (fallback: {self.why})"
        where = {"class": "", "nearest": "nearest ", "gpu": "this GPU's own "}[self.how]
        return f"{self.revision} ({where}class of {', '.join(self.cls['points'])})"


def nearest(table: dict, shape, dtype: str) -> tuple[dict | None, str, str]:
    """(the class entry a call of `shape` and `dtype` takes, "class" or "nearest", "") or
    (None, "", why it takes none)."""
    rule = ClassRule.from_dict(table["rule"])
    if len(shape) != len(rule.axes):
        return None, "", f"shape {format_shape(shape)} has not {len(rule.axes)} axes"
    d, how, buckets = class_key(shape, dtype, rule)
    mine = [c for c in table["classes"] if c["dtype"] == d and c["align"] == how and c["revision"]]
    if not mine:
        return None, "", f"no class of {how} {dtype} shapes in the sweep"
    octave = rule.per_octave
    for i, b in enumerate(buckets):
        lo, hi = min(c["buckets"][i] for c in mine), max(c["buckets"][i] for c in mine)
        if not lo - octave <= b <= hi + octave:
            return None, "", (f"{rule.axes[i]} {shape[i]} is more than 2x beyond the sweep's "
                              f"{bucket_size(max(lo - octave, 0), octave)}..{bucket_size(hi, octave)}")
    dist = min((sum((x - y) ** 2 for x, y in zip(c["buckets"], buckets, strict=True)), c["buckets"], i)
               for i, c in enumerate(mine))
    return mine[dist[2]], "class" if dist[0] == 0 else "nearest", ""


def pick(table: dict, shape, dtype: str, refuses: Callable | None = None, skip=(), own: dict | None = None) -> Pick:
    """The revision a call of `shape` and `dtype` runs. `refuses(revision, shape)`: why the
    revision declines the shape ("" where it runs it: spec.Revision.refusal); `skip`: revisions
    not to take (those that cannot run here). `own`: the table of the GPU the call runs on, made
    from that GPU's own sweep: where the call falls in one of its classes, that class's ranking
    first; its nearest class and fallback are not taken (a GPU's own sweep may cover few classes:
    docs/dispatch.md). LookupError where no revision of the tables runs it."""
    def runs(name):
        return name not in skip and not (refuses and refuses(name, tuple(shape)))

    mine, how, _ = nearest(own, tuple(shape), dtype) if own is not None else (None, "", "")
    if mine is not None and how == "class":
        for name, _ in mine["ranking"]:
            if runs(name):
                return Pick(name, "gpu", mine)
    cls, how, why = nearest(table, tuple(shape), dtype)
    if cls is not None:
        for name, _ in cls["ranking"]:
            if runs(name):
                return Pick(name, how, cls)
        why = "no revision of its class runs the shape here"
    for name in table["fallback"].get(dtype) or table["fallback"].get(ANY, []):
        if runs(name):
            return Pick(name, "fallback", None, why)
    raise LookupError(f"{table['kernel']}: no revision of its dispatch table runs {format_shape(shape)} {dtype} "
                      f"({why or 'none runs the shape here'})")


def dtype_name(tensor) -> str:
    name = str(tensor.dtype).removeprefix("torch.")
    names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    if name not in names:
        raise KernlogError(f"the library takes {', '.join(names.values())} tensors, not {tensor.dtype}")
    return names[name]


def device_gpu(index: int | None) -> str:
    """The slug of CUDA device `index` (profiles/ spells its folder so), from kernlog.cuda's caps
    of it (read from the driver once per device)."""
    from kernlog.cuda import device_caps
    from kernlog.identity import gpu_slug

    return gpu_slug(device_caps(index).name)


def first_shape(inputs) -> Shape:
    """The call's shape where it is the first input's (every operator here but the matmul)."""
    return tuple(inputs[0].shape)


class Dispatched:
    """One operator's entry point: `op(inputs, out=None)` runs the revision its table picks for
    the inputs' shape (`shape_of(inputs)`, in the kernel's shape convention), dtype and device,
    into `out` (a fresh kernel.make_output where None). Picks are kept per (shape, dtype,
    device); each revision is loaded on its first pick."""

    def __init__(self, kernel: Kernel, table: dict, shape_of: Callable = first_shape,
                 gpu_tables: dict[str, dict] | None = None):
        self.kernel, self.table, self.shape_of = kernel, table, shape_of
        self.gpu_tables = gpu_tables or {}  # GPU slug -> the table of that GPU's own sweep
        self._picks: dict = {}
        self._launchers: dict = {}
        self.unrunnable: dict[str, dict[str, str]] = {}  # device -> {revision: why it cannot run there}
        self._ran: dict[str, set[str]] = {}  # device -> the revisions that have run there

    @classmethod
    def open(cls, root: Path, name: str, shape_of: Callable = first_shape, path: Path | None = None) -> Dispatched:
        """The entry point of kernel `name` from its table (`path`, by default its dispatch.json,
        with the per-GPU tables beside it)."""
        from kernlog.registry import load_kernel

        own = {} if path else {gpu: load_table(p) for gpu, p in gpu_table_paths(root, name).items()}
        path = path or table_path(root, name)
        table = load_table(path)
        if table is None:
            raise KernlogError(f"{name}: no dispatch table at {path}; `kernlog dispatch {name}` makes it")
        return cls(load_kernel(root, name), table, shape_of, own)

    def pick(self, shape: Shape, dtype: str, device: str = "cuda", gpu: str | None = None) -> Pick:
        """The pick for a call of `shape` and `dtype` on `device` ("cuda" or "cpu"), its revision
        loaded; `gpu`, the slug of the GPU it runs on, whose own table (if any) is read first.
        KernlogError where no revision of the table runs it here."""
        key = (tuple(shape), dtype, device, gpu)
        own = self.gpu_tables.get(gpu) if device != "cpu" else None
        while key not in self._picks:
            skip = self.unrunnable.get(device, {})
            try:
                got = pick(self.table, shape, dtype, lambda n, s: self.kernel.revision(n).refusal(s), skip, own)
            except LookupError as e:
                said = "; ".join(f"{n} cannot run on {device} here: {w}" for n, w in skip.items())
                raise KernlogError(f"{e}{'; ' + said if said else ''}") from None
            try:
                self._launcher(got.revision, device)
            except (Unsupported, CannotRun) as e:
                self.unrunnable.setdefault(device, {})[got.revision] = str(e) or type(e).__name__
                continue
            self._picks[key] = got
        return self._picks[key]

    def _launcher(self, name: str, device: str):
        """The revision's launcher, loaded once; CannotRun where it cannot run on `device`."""
        rev = self.kernel.revision(name)
        if device == "cpu" and rev.kind == "cuda":
            raise CannotRun(f"{self.kernel.name}/{name} is CUDA C: it runs on a GPU only")
        if device == "cpu" and rev.kind == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
            raise CannotRun(f"{self.kernel.name}/{name} is Triton: on the CPU it runs under TRITON_INTERPRET=1 only")
        if name not in self._launchers:
            try:
                self._launchers[name] = rev.load()
            except ImportError as e:
                raise CannotRun(f"{self.kernel.name}/{name}: cannot import {e.name or 'a module'}") from None
        return self._launchers[name]

    def __call__(self, inputs, out=None):
        first = inputs[0]
        on_cpu = first.device.type == "cpu"
        device = "cpu" if on_cpu else "cuda"
        shape, dtype = self.shape_of(inputs), dtype_name(first)
        gpu = None if on_cpu or not self.gpu_tables else device_gpu(first.device.index)
        if out is None:
            out = self.kernel.make_output(inputs)
        for _ in range(len(self.kernel.revisions) + 1):  # each attempt passes one revision over
            got = self.pick(shape, dtype, device, gpu)
            try:
                result = self._launchers[got.revision](inputs, out)
            except (Unsupported, CannotRun) as e:
                # a revision that learns only at its first launch that it cannot run here (a CUDA C rung
                # built by nvcc on its first call, where there is none) is passed over, as at load
                if got.revision in self._ran.get(device, ()):
                    raise
                self.unrunnable.setdefault(device, {})[got.revision] = str(e) or type(e).__name__
                self._picks = {k: v for k, v in self._picks.items()
                               if not (k[2] == device and v.revision == got.revision)}
                continue
            self._ran.setdefault(device, set()).add(got.revision)
            return result
        raise KernlogError(f"{self.kernel.name}: every revision picked for {shape} {dtype} refused to run on {device}")
