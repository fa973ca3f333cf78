"""One typed name for a stored profile, its one spelling, and every path under profiles/.

A ProfileKey names a profile as the command line does (`[REF:]KERNEL/REVISION[@PARTS]`, the
parts dot-joined in any order: a shape, a dtype and a GPU slug) and as profiles/ files it
(profiles/<gpu>/<kernel>/<revision>.<shape>.<dtype>.json). A part left as None is not given:
such a key is a selector, matching the profiles that agree on the parts it has.

Only the store builds paths under profiles/: every other module asks these functions.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from kernlog import config
from kernlog.errors import KernlogError
from kernlog.registry import split_rev
from kernlog.spec import NAME_RE, Shape, format_shape, parse_shape


class Loaded(Protocol):
    """What a key reads of a loaded profile (kernlog.store.record.Profile, which imports this
    module: the record's own type is not imported here, so the store's import runs one way)."""
    kernel: str
    revision: str
    shape: tuple
    dtype: str
    gpu: Any  # .slug
    commit: str | None

DTYPES = ("fp32", "bf16", "fp16")
GPU_RE = re.compile(r"[a-z][a-z0-9-]*")
SHAPE_RE = re.compile(r"\d+(x\d+)*")
FAILED = "failed.json"  # at/<commit:12>/failed.json: a commit whose `kernlog profile --at` process failed


def safe(*parts: str) -> None:
    """Refuse a path component that could name anything outside profiles/."""
    for p in parts:
        if not NAME_RE.match(p) and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", p):
            raise KernlogError(f"refusing path component {p!r}: it could escape profiles/")


@dataclass(frozen=True)
class ProfileKey:
    kernel: str
    revision: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    gpu: str | None = None
    ref: str | None = None  # a git ref: the profile as that commit stored it
    path: Path | None = None  # a profile's .json given by its path (another checkout's) instead of its name

    @classmethod
    def parse(cls, text: str, shape=None, dtype=None, gpu=None) -> ProfileKey:
        """`[REF:]KERNEL/REVISION[@PARTS]` as a key; a part in `text` overrides the matching
        argument (the command's --shape/--dtype/--gpu). An unknown part, or a second part of
        a kind already given in `text`, is an error naming the part and `text` as typed."""
        typed = text
        ref, colon, rest = text.partition(":")
        ref, text = (ref, rest) if colon else (None, text)
        if colon and not ref:
            raise KernlogError(f"bad selector {typed!r}: nothing before ':' (expected REF:KERNEL/REVISION)")
        name, at, sel = text.partition("@")
        kernel, rev = split_rev(name)
        if at and not sel:
            raise KernlogError(f"bad selector {typed!r}: nothing after '@' (expected a shape, a dtype or a GPU)")
        seen: dict[str, str] = {}
        for part in sel.split(".") if sel else ():
            if part in DTYPES:
                kind = "dtype"
            elif SHAPE_RE.fullmatch(part):
                kind = "shape"
            elif GPU_RE.fullmatch(part):
                kind = "GPU"
            else:
                raise KernlogError(f"bad selector part {part!r} in {typed!r}: expected a shape (8192x4096), "
                                   f"a dtype ({', '.join(DTYPES)}) or a GPU slug (nvidia-h100-80gb-hbm3)")
            if kind in seen:
                raise KernlogError(f"extra selector part {part!r} in {typed!r}: it already names the {kind} "
                                   f"{seen[kind]!r} (one shape, one dtype and one GPU at most)")
            seen[kind] = part
            if kind == "dtype":
                dtype = part
            elif kind == "shape":
                shape = parse_shape(part)
            else:
                gpu = part
        return cls(kernel, rev, tuple(shape) if shape else None, dtype, gpu, ref)

    @classmethod
    def of(cls, prof: Loaded) -> ProfileKey:
        """The full key of a loaded profile (its commit, where it was read from git, as the ref)."""
        return cls(prof.kernel, prof.revision, tuple(prof.shape), prof.dtype, prof.gpu.slug, prof.commit)

    @classmethod
    def from_path(cls, path: Path, folder: str = "profiles") -> ProfileKey | None:
        """The key a path .../<folder>/<gpu>/<kernel>/<rev>.<shape>.<dtype>.json spells, or None
        where it is not such a path (`folder`: the name of the profiles folder, [tool.kernlog]
        profiles)."""
        path = Path(path)
        parts = path.parts[-4:]
        names = path.name[:-len(".json")].split(".") if path.name.endswith(".json") else []
        if len(parts) != 4 or parts[0] != folder or len(names) != 3:
            return None
        rev, shape, dtype = names
        try:
            shape_t = parse_shape(shape)
            safe(parts[1], parts[2], rev, dtype)
        except (ValueError, KernlogError):
            return None
        return cls(parts[2], rev, shape_t, dtype, parts[1])

    def text(self, ref: bool = True) -> str:
        """The one spelling: `[REF:]kernel/revision[@shape.dtype.gpu]`, the parts given (the
        ref left out where `ref` is false)."""
        sel = ".".join(p for p in (format_shape(self.shape) if self.shape else None, self.dtype, self.gpu) if p)
        return (f"{self.ref}:" if ref and self.ref else "") + f"{self.kernel}/{self.revision}" + (
            f"@{sel}" if sel else "")

    def __str__(self) -> str:
        return self.text()

    def stem(self) -> str:
        """<revision>.<shape>.<dtype>, a full key's file name without its suffix."""
        if self.shape is None or self.dtype is None:
            raise ValueError(f"{self.text()}: a file name needs the shape and dtype")
        safe(self.revision, self.dtype)
        return f"{self.revision}.{format_shape(self.shape)}.{self.dtype}"

    def ident(self) -> tuple:
        """(gpu, kernel, revision, shape, dtype): the order ProfileError.ident spells."""
        return self.gpu, self.kernel, self.revision, self.shape, self.dtype

    def matches(self, prof: Loaded) -> bool:
        """Whether a loaded profile agrees with every part this key gives (the ref aside)."""
        return (prof.kernel == self.kernel and prof.revision == self.revision
                and (self.shape is None or tuple(prof.shape) == self.shape)
                and (self.dtype is None or prof.dtype == self.dtype)
                and (self.gpu is None or prof.gpu.slug == self.gpu))

    def wants(self, prof) -> bool:
        """Whether a profile (or a file that does not load, by its path's key) agrees with the
        shape, dtype and GPU this key gives: the parts a command-line side may leave open."""
        k = prof.key
        return ((self.shape is None or k.shape == self.shape)
                and (self.dtype is None or k.dtype == self.dtype)
                and (self.gpu is None or k.gpu == self.gpu))

    def name(self, prof) -> str:
        """A profile this key may mean, spelled to be pasted back: with this key's ref as typed."""
        return prof.key.with_(ref=self.ref).text()

    def with_(self, **changes) -> ProfileKey:
        return replace(self, **changes)


def stem(revision: str, shape: Shape, dtype: str) -> str:
    return ProfileKey("", revision, tuple(shape), dtype).stem()


def profiles_dir(root: Path) -> Path:
    """The repository's profiles folder ([tool.kernlog] profiles, default profiles/)."""
    return config.layout(root).profiles


def gpu_dir(root: Path, gpu: str) -> Path:
    safe(gpu)
    return profiles_dir(root) / gpu


def kernel_dir(root: Path, gpu: str, kernel: str) -> Path:
    safe(gpu, kernel)
    return profiles_dir(root) / gpu / kernel


def profile_json(root: Path, key: ProfileKey) -> Path:
    if key.gpu is None:
        raise ValueError(f"{key.text()}: a profile's path needs its GPU")
    return kernel_dir(root, key.gpu, key.kernel) / f"{key.stem()}.json"


def bench_csv(root: Path, gpu: str, kernel: str) -> Path:
    return kernel_dir(root, gpu, kernel) / "bench.csv"


def ceilings_json(root: Path, gpu: str) -> Path:
    return gpu_dir(root, gpu) / "ceilings.json"


def gate_outcomes(root: Path, gpu: str, kernel: str) -> Path:
    """profiles/<gpu>/<kernel>/gate/outcomes.json: the gate's latest outcome per revision there
    (kernlog.store.gates). In a folder of its own: a JSON beside the profiles would be read as one."""
    return kernel_dir(root, gpu, kernel) / "gate" / "outcomes.json"


def noise_dir(root: Path, gpu: str, kernel: str) -> Path:
    return kernel_dir(root, gpu, kernel) / "noise"


def at_dir(root: Path, gpu: str, kernel: str, commit: str) -> Path:
    return kernel_dir(root, gpu, kernel) / "at" / commit[:12]


def at_failed(root: Path, gpu: str, kernel: str, commit: str) -> Path:
    return at_dir(root, gpu, kernel, commit) / FAILED


def staging_dir(root: Path, name: str = "") -> Path:
    """profiles/<name>: a scratch folder's path (or with no name, profiles/ itself, where
    scratch folders are made: tempfile.mkdtemp(prefix=".kernlog-...", dir=staging_dir(root)))."""
    if name and (name in (".", "..") or "/" in name or not name.startswith(".")):
        raise KernlogError(f"refusing staging name {name!r}: a hidden folder directly under profiles/")
    return profiles_dir(root) / name if name else profiles_dir(root)


XZ = ".xz"  # a report stored compressed: <report>.ncu-rep.xz (kernlog.store.reports)


def compressed(report: Path) -> Path:
    """The compressed file of a stored report path (the JSON names the report without .xz)."""
    return report.with_name(report.name + XZ)


def report_cache(root: Path, sha256: str) -> Path:
    """Where a compressed report is decompressed for reading: <root>/.cache/reports/<sha256>.ncu-rep (git-ignored)."""
    if not re.fullmatch(r"[0-9a-f]{16,64}", sha256):
        raise KernlogError(f"refusing cache name {sha256!r}: expected a hex digest")
    return Path(root) / ".cache" / "reports" / f"{sha256}.ncu-rep"


TRIAGE_FOLDER = "triage"  # profiles/<gpu>/triage/: `kernlog triage`'s records, no kernel's profiles


def hidden(path: Path, base: Path) -> bool:
    """Whether `path` under `base` is hidden or inside a hidden folder there (a save's
    temporaries, a scratch folder: staging_dir): never read as a stored file. pathlib's glob
    matches such names, unlike the shell's."""
    return any(part.startswith(".") for part in path.relative_to(base).parts)


def glob_profiles(root: Path, gpu: str = "*", kernel: str = "*", revision: str | None = None,
                  at: bool = False) -> Iterator[Path]:
    """The JSON files that may be profiles, in path order: profiles/<gpu>/<kernel>/<revision>.*.json
    (`at`: those of the at/<commit>/ folders instead). Hidden files and whatever hidden folders
    hold (hidden()), and the triage folder, are left out."""
    pattern = f"{gpu}/{kernel}/" + ("at/*/" if at else "") + (f"{revision}.*.json" if revision else "*.json")
    base = profiles_dir(root)
    return iter(sorted(p for p in base.glob(pattern)
                       if not hidden(p, base) and p.relative_to(base).parts[1] != TRIAGE_FOLDER))


def glob_kernel_files(root: Path, name: str, gpu: str = "*", kernel: str = "*") -> list[Path]:
    """profiles/<gpu>/<kernel>/<name> (a glob: "bench.csv", "noise/*.json", "at/*"), in path
    order; hidden ones left out, as glob_profiles leaves them."""
    base = profiles_dir(root)
    return sorted(p for p in base.glob(f"{gpu}/{kernel}/{name}") if not hidden(p, base))
