"""profiles/<gpu>/triage/: what `kernlog triage TARGET` found, one record per target and GPU.

Layout: profiles/<gpu-slug>/triage/<target-slug>.json, the CUPTI trace it was judged from
beside it as <target-slug>.trace.json.gz (the events kernlog.capture.trace.slim keeps). Both
are written atomically (a temporary file in the folder, fsync, rename): the trace first, then
the JSON, which is the commit record and names the trace and its sha256. A killed save leaves
the old pair, or the new trace beside the old JSON (load_trace then refuses it by its hash),
never a half-written file.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.store import keys
from kernlog.store.keys import TRIAGE_FOLDER
from kernlog.store.profiles import dump_json, write_atomic

SCHEMA = 1
# How the first triages timed a call: the host's time hidden behind queued work
GPU_CLOCK = "GPU time per call (CUDA events, L2 flushed, queued behind a head start): the host's time not counted"
FOLDER = TRIAGE_FOLDER


class TriageError(KernlogError):
    """A stored triage that cannot be read as one."""


@dataclass
class TriageRecord:
    target: str
    gpu: dict  # name, slug
    captured_at: str
    total_us: float  # the program's time per call (median of timed calls; the kernels' sum where untimed)
    gpu_us: float  # the kernels' GPU time in the traced call
    launches: int
    peaks: dict  # bandwidth_gbps, tensor_tflops, fp32_tflops
    by_kernel: list[dict]
    by_op: list[dict]
    by_module: list[dict]
    picked: list[str]  # the kernels covering COVER of the GPU time, profiled under ncu
    groups: list[dict]
    chains: list[dict]
    candidates: list[dict]
    ncu: dict = field(default_factory=dict)  # "kernels": kernel name -> its ncu figures; "commands": the command lines
    wall_samples_ms: list[float] = field(default_factory=list)
    trace: str = ""  # the trace's file name, beside the record
    trace_sha256: str = ""
    versions: dict = field(default_factory=dict)
    # `triage --verify`'s verdicts on this record's predictions, oldest first: target, candidate,
    # title, predicted, measured, band, outcome, basis, at
    verified: list[dict] = field(default_factory=list)
    # the call's time: wall (timed), GPU busy and idle, the traced call's parts and its longest
    # idle stretches (kernlog.judge.hostside.Split); {} in a record taken before it was
    time_split: dict = field(default_factory=dict)
    timing: str = GPU_CLOCK  # how total_us was timed: kernlog.capture.triage.WALL_METHOD since it had host time
    schema: int = SCHEMA

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "the record") -> TriageRecord:
        if not isinstance(data, dict):
            raise TriageError(f"{where} is not a triage record (a JSON object)")
        if data.get("schema") != SCHEMA:
            raise TriageError(f"{where} has schema {data.get('schema')!r}, this kernlog reads {SCHEMA}: "
                              f"run `kernlog triage {data.get('target', 'TARGET')}` on a GPU to take it again")
        names = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING
                   and f.default_factory is MISSING]
        if missing:
            raise TriageError(f"{where} lacks {', '.join(missing)}: run `kernlog triage "
                              f"{data.get('target', 'TARGET')}` on a GPU to take it again")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise TriageError(f"{where} is not a complete triage record ({exc})") from None


def target_slug(target: str) -> str:
    """A target as a file name: 'minigpt/torch@2x128x128x512.fp32' -> 'minigpt-torch-2x128x128x512-fp32'."""
    slug = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")
    if not slug:
        raise KernlogError(f"bad target {target!r}: expected module:function or a kernel such as minigpt")
    return slug


def _gpu_folder(root: Path, gpu_slug: str) -> Path:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", gpu_slug):
        raise KernlogError(f"refusing GPU name {gpu_slug!r}: it could escape profiles/")
    return keys.profiles_dir(root) / gpu_slug / FOLDER


def triage_path(root: Path, gpu_slug: str, target: str) -> Path:
    return _gpu_folder(root, gpu_slug) / f"{target_slug(target)}.json"


def trace_path(root: Path, gpu_slug: str, target: str) -> Path:
    return _gpu_folder(root, gpu_slug) / f"{target_slug(target)}.trace.json.gz"


def save_triage(root: Path, record: TriageRecord, trace: dict | None = None) -> Path:
    """Write the trace (where given), then the record naming it; both atomically."""
    path = triage_path(root, record.gpu["slug"], record.target)
    if trace is not None:
        data = gzip.compress(json.dumps(trace).encode(), mtime=0)
        record.trace = trace_path(root, record.gpu["slug"], record.target).name
        record.trace_sha256 = hashlib.sha256(data).hexdigest()
        blob = dump_json(record.to_dict())  # serialized before anything is written
        write_atomic(path.with_name(record.trace), data)
    else:
        blob = dump_json(record.to_dict())
    write_atomic(path, blob)
    return path


def add_verdict(path: Path, verdict: dict) -> None:
    """Append one verdict to the stored record at `path` (read, extended, written atomically)."""
    rec = load_triage(path)
    rec.verified.append(verdict)
    write_atomic(path, dump_json(rec.to_dict()))


def load_triage(path: Path) -> TriageRecord:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise TriageError(f"no triage at {path}") from None
    except (ValueError, UnicodeDecodeError):
        raise TriageError(f"{path} is not complete JSON (a half-written or edited file?): "
                          "run `kernlog triage TARGET` on a GPU to take it again") from None
    rec = TriageRecord.from_dict(data, str(path))
    if rec.target and target_slug(rec.target) + ".json" != path.name:
        raise TriageError(f"{path} holds the triage of {rec.target}, not of the file's name")
    return rec


def load_trace(root: Path, rec: TriageRecord) -> dict:
    """The trace a stored triage was judged from, checked against the sha256 its record names."""
    path = _gpu_folder(root, rec.gpu["slug"]) / rec.trace
    if not rec.trace or not path.is_file():
        raise TriageError(f"the triage of {rec.target} has no trace beside it: run `kernlog triage {rec.target}` "
                          "on a GPU to take it again")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != rec.trace_sha256:
        raise TriageError(f"{path} is not the trace its triage names (sha256 differs): run `kernlog triage "
                          f"{rec.target}` on a GPU to take it again")
    return json.loads(gzip.decompress(data))


def stored(root: Path, target: str) -> list[Path]:
    """The stored triages of `target`, one per GPU that has one, by GPU name."""
    name = f"{target_slug(target)}.json"
    return sorted(p for p in keys.profiles_dir(root).glob(f"*/{FOLDER}/{name}") if p.is_file())


def all_stored(root: Path) -> list[Path]:
    """Every stored triage, of every target on every GPU, by GPU then target."""
    return sorted(p for p in keys.profiles_dir(root).glob(f"*/{FOLDER}/*.json") if p.is_file())
