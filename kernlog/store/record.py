"""A profile's record: what readers rely on (FIELDS, checked by record_problem) and the typed
Profile every schema version is read into.

Schema 1 is today's files. Profile.from_dict reads one (validated as load_profile validates
it) and Profile.to_dict gives back the same dict, so dump_json(p.to_dict()) is the file's
bytes: fields the dataclass does not type are kept in `extra` (and a typed part's in its own
`rest`), never dropped.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernlog.errors import KernlogError
from kernlog.spec import ROLES

SCHEMA = 1


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_TYPES = {"str": str, "int": int, "list": list, "dict": dict, "null": type(None)}  # and "num": int or float

# What readers of a profile (show, diff, list, the log) rely on: dotted field -> accepted
# types. Other fields are provenance for people and may come and go. A null source hash and
# ceilings: an imported report (kernlog.capture.importer) ran no source kernlog knows, measured no ceiling.
FIELDS = {
    "kernel": "str", "revision": "str", "kind": "str", "role": "str", "change": "str", "predicts": "str|null",
    "shape": "list", "dtype": "str", "source_sha256": "str|null", "bytes_moved": "int", "flops": "num|null",
    "gpu": "dict", "gpu.slug": "str", "gpu.name": "str",
    "metrics": "dict", "metrics.wall_ms": "num",
    "facts": "dict", "facts.kernels": "list", "facts.main_kernel": "str|null", "facts.occupancy_limiter": "str|null",
    "findings": "list",
    "timing": "dict", "timing.samples_ms": "list", "timing.median_ms": "num", "timing.p05_ms": "num",
    "timing.p95_ms": "num", "timing.n": "int",
    "ncu": "dict", "ncu.report": "str", "ncu.report_bytes": "int", "ncu.clock_control": "str",
    "ceilings": "dict", "ceilings.copy_gbps": "num|null", "ceilings.matmul_bf16_tflops": "num|null",
    "versions": "dict", "versions.ncu": "str", "versions.torch": "str", "versions.triton": "str|null",
    "git": "dict", "git.commit": "str|null",
}


def _type_ok(value, kinds: str) -> bool:
    return any(_is_num(value) if kind == "num" else type(value) is _TYPES[kind] for kind in kinds.split("|"))


def _what(value) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


# Every catalog metric a schema-1 profile records, null where ncu did not collect it (every
# profile kernlog or its import wrote since the catalog took this form): a key gone is a file
# edited by hand, not a metric "not collected". A metric the catalog gains later is not asked of
# schema-1 files, which predate it.
SCHEMA1_METRICS = (
    "wall_ms", "duration_us", "dram_mb", "dram_gbps", "dram_pct", "memory_pct", "compute_pct",
    "achieved_occupancy_pct", "theoretical_occupancy_pct", "issue_active_pct", "instructions",
    "registers_per_thread", "smem_per_block", "block_size", "grid_size", "ld_sectors_per_request", "ld_sectors",
    "l1_hit_pct", "l2_hit_pct", "spill_insts", "local_sectors",
)


def _problems(data: dict) -> Iterator[tuple[str, str]]:
    """(short, problem) for each way `data`, a record as stored (raw JSON, before it is typed), breaks
    what readers rely on; the first is reported."""
    for name, kinds in FIELDS.items():
        head, _, leaf = name.rpartition(".")
        parent = data[head] if head else data  # parents come first in FIELDS, already checked
        if leaf not in parent:
            yield "field missing", f"lacks the field {name}"
            return
        if not _type_ok(parent[leaf], kinds):
            yield "field of wrong type", f"has {name} {_what(parent[leaf])}, expected {kinds.replace('|', ' or ')}"
            return
    lacking = next((k for k in SCHEMA1_METRICS if k not in data["metrics"]), None)
    if lacking is not None:
        yield "field missing", f"lacks the field metrics.{lacking} (a metric ncu did not collect is stored as null)"
        return
    if data["role"] not in ROLES:
        yield "field of wrong value", f"has role {data['role']!r}, expected one of {', '.join(ROLES)}"
    shape = data["shape"]
    if not shape or not all(type(n) is int and n > 0 for n in shape):
        yield "bad shape", f"has shape {shape!r}, expected a list of positive integers"
    samples = data["timing"]["samples_ms"]
    if not samples:
        yield "no timing samples", "has no timing samples (timing.samples_ms is empty)"
    # the common case in one pass (a float compares False with nan on both sides, inf fails < inf)
    fine = all(type(v) is float and 0.0 < v < math.inf for v in samples)
    bad = None if fine else next((v for v in samples if not (_is_num(v) and math.isfinite(v) and v > 0)), None)
    if bad is not None:
        yield "bad timing sample", f"has a timing sample of {bad!r} ms, expected positive finite numbers"
    for key, v in data["metrics"].items():
        if v is not None and not (_is_num(v) and math.isfinite(v)):
            yield "bad metric", f"has metrics.{key} = {v!r}, expected a finite number or null"
    for name in ("metrics.wall_ms", "timing.median_ms", "timing.p05_ms", "timing.p95_ms", "ceilings.copy_gbps",
                 "ceilings.matmul_bf16_tflops"):
        head, leaf = name.split(".")
        v = data[head][leaf]
        if not (v is None and head == "ceilings") and not (math.isfinite(v) and v > 0):
            yield "bad number", f"has {name} = {v!r}, expected a positive finite number"
    for i, f in enumerate(data["findings"]):
        if not (isinstance(f, dict) and all(isinstance(f.get(k), str) for k in ("rule", "title", "message"))
                and (f.get("speedup_pct") is None or _is_num(f["speedup_pct"]))):
            yield "bad finding", f"has findings[{i}] without rule, title and message strings"
    for i, k in enumerate(data["facts"]["kernels"]):
        if not (isinstance(k, dict) and isinstance(k.get("name"), str)):
            yield "bad kernel fact", f"has facts.kernels[{i}] without a name"
    sha = data["ncu"].get("report_sha256")
    if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        yield "field of wrong type", f"has ncu.report_sha256 {sha!r}, expected 64 hex digits"
    stored = data["ncu"].get("report_xz")
    if stored is not None and not (isinstance(stored, dict) and set(stored) == {"bytes", "sha256"}
                                   and type(stored["bytes"]) is int and stored["bytes"] > 0
                                   and isinstance(stored["sha256"], str)
                                   and re.fullmatch(r"[0-9a-f]{64}", stored["sha256"])):
        yield "field of wrong type", (f"has ncu.report_xz {stored!r}, expected the compressed file's "
                                      "{\"bytes\": size, \"sha256\": 64 hex digits}")


def record_problem(data: dict) -> str | None:
    """The first way a profile record breaks what readers rely on (FIELDS, samples, metrics),
    as words after the file's name, or None."""
    return next((problem for _, problem in _problems(data)), None)




_ABSENT = object()


def _split(d: dict, names: tuple[str, ...]) -> tuple[list, dict]:
    return [d.get(n, _ABSENT) for n in names], {k: v for k, v in d.items() if k not in names}


def _join(names: tuple[str, ...], values: tuple, rest: dict) -> dict:
    out = {n: v for n, v in zip(names, values, strict=True) if v is not _ABSENT}
    out.update(rest)
    return out


@dataclass
class Gpu:
    slug: str
    name: str
    rest: dict = field(default_factory=dict)  # driver, cuda, capability, sm_count, ... as recorded

    NAMES = ("slug", "name")

    @classmethod
    def from_dict(cls, d: dict) -> Gpu:
        (slug, name), rest = _split(d, cls.NAMES)
        return cls(slug, name, rest)

    def to_dict(self) -> dict:
        return _join(self.NAMES, (self.slug, self.name), self.rest)

    @property
    def driver(self) -> str | None:
        return self.rest.get("driver")


@dataclass
class Timing:
    samples_ms: list
    median_ms: float
    p05_ms: float
    p95_ms: float
    n: int
    rest: dict = field(default_factory=dict)  # source, clocks, ...

    NAMES = ("samples_ms", "median_ms", "p05_ms", "p95_ms", "n")

    @classmethod
    def from_dict(cls, d: dict) -> Timing:
        values, rest = _split(d, cls.NAMES)
        return cls(*values, rest=rest)

    def to_dict(self) -> dict:
        return _join(self.NAMES, (self.samples_ms, self.median_ms, self.p05_ms, self.p95_ms, self.n), self.rest)

    @property
    def source(self) -> str | None:
        """Where the samples came from ("ncu duration" for an imported report), where recorded."""
        return self.rest.get("source")

    @property
    def clocks(self) -> dict:
        """The clocks read while timing ({"sm_mhz": {...}, "mem_mhz": {...}}), {} where not recorded."""
        return self.rest.get("clocks") or {}


@dataclass
class Ncu:
    report: str
    report_bytes: int
    clock_control: str
    report_sha256: str | None = None  # None: a profile saved before the hash was recorded
    pruned: dict | None = None  # set by `kernlog prune`: the report was removed on purpose
    # {"bytes", "sha256"} of the stored <report>.xz itself (kernlog.store.reportfiles): what
    # `report --check` hashes, nothing decompressed; None: stored plain, or compressed before
    # kernlog recorded it (`kernlog compress` records it)
    report_xz: dict | None = None
    rest: dict = field(default_factory=dict)  # command, sections, nvtx_range, ...
    _has: tuple = ()  # which optional keys the file has (a null one is kept as null)

    NAMES = ("report", "report_bytes", "clock_control", "report_sha256", "pruned", "report_xz")

    @classmethod
    def from_dict(cls, d: dict) -> Ncu:
        values, rest = _split(d, cls.NAMES)
        has = tuple(n for n, v in zip(cls.NAMES[3:], values[3:], strict=True) if v is not _ABSENT)
        return cls(*values[:3], *(None if v is _ABSENT else v for v in values[3:]), rest=rest, _has=has)

    def to_dict(self) -> dict:
        opt = tuple(v if (v is not None or n in self._has) else _ABSENT
                    for n, v in zip(self.NAMES[3:], (self.report_sha256, self.pruned, self.report_xz),
                                    strict=True))
        return _join(self.NAMES, (self.report, self.report_bytes, self.clock_control, *opt), self.rest)

    @property
    def command(self) -> list | None:
        """The ncu command line that took the report, where recorded."""
        return self.rest.get("command")


class _Extra:
    """A Profile attribute read from `extra` (what the record keeps outside FIELDS): the value as
    recorded, else None (or a fresh `empty()`); `writable` ones are set by the loaders."""

    def __init__(self, key: str, doc: str, writable: bool = False, empty=None):
        self.key, self.__doc__, self.writable, self.empty = key, doc, writable, empty

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj.extra.get(self.key, self.empty() if self.empty else None)

    def __set__(self, obj, value) -> None:
        if not self.writable:
            raise AttributeError(f"Profile.{self.name} is read from the record; it is not set")
        obj.extra[self.key] = value


_TOP = ("schema", "kernel", "revision", "kind", "role", "change", "predicts", "shape", "dtype", "source_sha256",
        "bytes_moved", "flops", "gpu", "metrics", "facts", "findings", "timing", "ncu", "ceilings", "versions", "git")


@dataclass
class Profile:
    """A stored profile, typed (schema 1). Fields outside FIELDS are in `extra`, as recorded."""
    kernel: str
    revision: str
    kind: str
    role: str
    change: str
    predicts: str | None
    shape: tuple[int, ...]
    dtype: str
    source_sha256: str | None
    bytes_moved: int
    flops: float | None
    gpu: Gpu
    metrics: dict
    facts: dict
    findings: list
    timing: Timing
    ncu: Ncu
    ceilings: dict
    versions: dict
    git: dict
    extra: dict = field(default_factory=dict)
    schema: int = SCHEMA

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        """A profile of a record as stored (keys starting with "_", added by the loaders, go to
        `extra` too). Raises KernlogError for another schema version or a record that breaks
        what readers rely on (record_problem's words)."""
        if not isinstance(d, dict):
            raise KernlogError(f"not a kernlog profile: a JSON {type(d).__name__}, not an object")
        version = d.get("schema")
        if version != SCHEMA:
            raise KernlogError(f"not a kernlog profile of schema {SCHEMA} (schema {version!r}): "
                               "this kernlog reads only schema 1")
        problem = record_problem(d)
        if problem:
            raise KernlogError(f"profile {problem}")
        return _read_v1(cls, d)

    @classmethod
    def from_checked(cls, d: dict) -> Profile:
        """A profile of a schema-1 record its reader has already checked (record_problem)."""
        return _read_v1(cls, d)

    def to_dict(self) -> dict:
        out = {"schema": self.schema, "kernel": self.kernel, "revision": self.revision, "kind": self.kind,
               "role": self.role, "change": self.change, "predicts": self.predicts, "shape": list(self.shape),
               "dtype": self.dtype, "source_sha256": self.source_sha256, "bytes_moved": self.bytes_moved,
               "flops": self.flops, "gpu": self.gpu.to_dict(), "metrics": self.metrics, "facts": self.facts,
               "findings": self.findings, "timing": self.timing.to_dict(), "ncu": self.ncu.to_dict(),
               "ceilings": self.ceilings, "versions": self.versions, "git": self.git}
        out.update(self.extra)
        return out

    @property
    def key(self):
        from kernlog.store.keys import ProfileKey  # keys imports registry; record stays import-light

        return ProfileKey.of(self)

    # Fields outside FIELDS that readers use, kept in `extra` as recorded (None where absent),
    # and what the loaders add there ("_path", "_commit", ...): never written by a save.
    path = _Extra("_path", "the JSON this profile was read from, relative to the root (\"COMMIT:path\" from git)",
                  writable=True)
    commit = _Extra("_commit", "the full commit id this profile was read from git at; None for the work tree's",
                    writable=True)
    at = _Extra("_at", "the at/<commit:12>/ folder a `kernlog profile --at` entry was read from, else None")
    skipped = _Extra("_skipped", "what lookup passed over when it chose this one: files of the revision that did "
                     "not load, and its ncu report where that is missing or damaged (report_problem)",
                     writable=True, empty=list)
    report_problem = _Extra("_report_problem", "one line where the stored ncu report is missing or damaged (by its "
                            "size: kernlog.store.reportfiles), else None; the profile reads from its JSON all the same",
                            writable=True)
    gpu_choice = _Extra("_gpu_choice", "how lookup chose this profile's GPU where the side named none, else None",
                        writable=True)
    imported = _Extra("imported", "what `kernlog import` recorded of an imported ncu report, else None")
    hotspots = _Extra("hotspots", "the source-line hot spots recorded from the report, else None")
    captured_at = _Extra("captured_at", "when the profile was captured (UTC, ISO 8601), where recorded")
    ceiling = _Extra("ceiling", "the roof the revision's kernel is judged against (copy, matmul), where recorded")
    kernel_times = _Extra("kernel_times", "the launch's kernels by GPU time from its CUPTI trace, where recorded")
    config = _Extra("config", "the tuned config the revision picked, where it tunes one, else None")

def _read_v1(cls, d: dict) -> Profile:
    """Schema 1, validated: today's files."""
    top = {k: d[k] for k in _TOP}
    extra = {k: v for k, v in d.items() if k not in _TOP}
    top.update(shape=tuple(top["shape"]), gpu=Gpu.from_dict(top["gpu"]), timing=Timing.from_dict(top["timing"]),
               ncu=Ncu.from_dict(top["ncu"]))
    return cls(**top, extra=extra)
