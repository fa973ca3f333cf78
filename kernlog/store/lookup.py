"""Which stored profile a name on the command line means.

A side is `KERNEL/REVISION[@SELECTOR]`, the selector being dot-joined parts as in the
profile file names: a shape (8192x4096), a dtype (fp32, bf16, fp16) and a GPU slug
(nvidia-h100-80gb-hbm3), in any order, each optional:

    softmax/v7_bf16_packed@8192x4096.bf16
    softmax/v5_tuned@nvidia-h200
    softmax/torch@1024x131072.bf16.nvidia-h100-80gb-hbm3

A side may name a commit, as git names a file at one: `REF:KERNEL/REVISION[@SELECTOR]`
(HEAD~3:softmax/v5_tuned, a9db2df:softmax/torch@1024x131072.bf16): the profile as that
commit stored it (kernlog.store.gitrefs).

A path to a profile's .json file is a side too (a profile from another checkout). Where
a side still has several profiles, the kernel's declared profile shape and first dtype
win, then the one shape, dtype and GPU both sides share; what remains ambiguous is an
error listing the choices in this syntax.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.registry import kernel_names, load_kernel, split_rev
from kernlog.spec import format_shape, parse_shape
from kernlog.store import profiles as store

DTYPES = ("fp32", "bf16", "fp16")
GPU_RE = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Side:
    kernel: str
    revision: str
    shape: tuple | None = None
    dtype: str | None = None
    gpu: str | None = None
    path: Path | None = None
    ref: str | None = None  # a git ref: the profile as that commit stored it

    def wants(self, rec: dict) -> bool:
        return ((self.shape is None or tuple(rec["shape"]) == self.shape)
                and (self.dtype is None or rec["dtype"] == self.dtype)
                and (self.gpu is None or rec["gpu"]["slug"] == self.gpu))

    def text(self) -> str:
        parts = [format_shape(self.shape) if self.shape else None, self.dtype, self.gpu]
        sel = ".".join(p for p in parts if p)
        return (f"{self.ref}:" if self.ref else "") + f"{self.kernel}/{self.revision}" + (f"@{sel}" if sel else "")


def parse_side(text: str, shape=None, dtype=None, gpu=None) -> Side:
    """`text` as a Side; the selector's parts override the command's --shape/--dtype/--gpu."""
    if text.endswith(".json") and Path(text).is_file():
        return Side("", "", path=Path(text))
    ref, colon, rest = text.partition(":")
    ref, text = (ref, rest) if colon else (None, text)
    name, _, sel = text.partition("@")
    kernel, rev = split_rev(name)
    for part in filter(None, sel.split(".")) if sel else ():
        if part in DTYPES:
            dtype = part
        elif re.fullmatch(r"\d+(x\d+)*", part):
            shape = parse_shape(part)
        elif GPU_RE.fullmatch(part):
            gpu = part
        else:
            raise KernlogError(f"bad selector part {part!r} in {text!r}: expected a shape (8192x4096), "
                               f"a dtype ({', '.join(DTYPES)}) or a GPU slug (nvidia-h100-80gb-hbm3)")
    return Side(kernel, rev, tuple(shape) if shape else None, dtype, gpu, ref=ref)


def _load(root: Path, path: Path) -> dict:
    rec = store.load_profile(root, path)
    try:
        rec["_path"] = str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        rec["_path"] = str(path)
    return rec


def stored_at(root: Path, ref: str, kernel: str, revision: str) -> list[dict]:
    """Every profile of one revision as the commit `ref` stored it (a bad one is an error)."""
    from kernlog.store import gitrefs

    recs = gitrefs.profiles_at(root, gitrefs.resolve(root, ref), kernel, revision)
    return [r for r in recs if r["revision"] == revision and r["kernel"] == kernel]


def stored(root: Path, kernel: str, revision: str) -> tuple[list[dict], list[store.ProfileError]]:
    """Every stored profile of one revision, on any GPU, shape and dtype, and the files of it
    that fail verification."""
    recs, bad = [], []
    for path in sorted((root / "profiles").glob(f"*/{kernel}/{revision}.*.json")):
        try:
            rec = _load(root, path)
        except store.ProfileError as e:
            bad.append(e)
            continue
        if rec["revision"] == revision and rec["kernel"] == kernel:
            recs.append(rec)
    return recs, bad


def candidates(root: Path, side: Side) -> list[dict]:
    """The profiles `side` may mean, after its own selector; errors name the fix."""
    if side.path is not None:
        return [_load(root, side.path)]
    known = kernel_names(root)
    if side.kernel not in known:
        raise KernlogError(f"no kernel {side.kernel!r}; kernels: {', '.join(known)}")
    kernel = load_kernel(root, side.kernel)
    recs, bad = (stored_at(root, side.ref, side.kernel, side.revision), []) if side.ref else stored(
        root, side.kernel, side.revision)
    for e in bad:  # a broken file this side may mean is never passed over for another
        if e.ident is None or side.wants({"shape": e.ident[3], "dtype": e.ident[4], "gpu": {"slug": e.ident[0]}}):
            raise e
    names = [r.name for r in kernel.revisions]
    if side.revision not in names and not recs:
        raise KernlogError(f"no revision {side.revision!r} in {side.kernel}; revisions: {', '.join(names)}")
    if not recs and side.ref:
        raise KernlogError(f"{side.kernel}/{side.revision} has no profile at {side.ref} "
                           "(`kernlog history` lists the commits that stored one)")
    if not recs:
        raise KernlogError(f"{side.kernel}/{side.revision} has no stored profile: run "
                           f"`kernlog profile {side.kernel} --rev {side.revision}` on a GPU machine")
    chosen = [r for r in recs if side.wants(r)]
    if not chosen:
        from kernlog.judge.diff import selector

        raise KernlogError(f"no profile of {side.text()}; stored: {', '.join(selector(r) for r in recs)}")
    return chosen


def _key(rec: dict) -> tuple:
    return tuple(rec["shape"]), rec["dtype"], rec["gpu"]["slug"]


def _prefer_declared(root: Path, recs: list[dict]) -> list[dict]:
    if len(recs) < 2 or not recs[0]["kernel"] or recs[0]["kernel"] not in kernel_names(root):
        return recs
    kernel = load_kernel(root, recs[0]["kernel"])
    mine = [r for r in recs if tuple(r["shape"]) == tuple(kernel.profile_shape) and r["dtype"] == kernel.dtypes[0]]
    return mine or recs


def _ambiguous(side: Side, recs: list[dict]) -> KernlogError:
    from kernlog.judge.diff import selector

    return KernlogError(f"{side.text()} has {len(recs)} profiles; name one: "
                        + "  ".join(sorted(selector(r) for r in recs)))


def resolve_one(root: Path, side: Side) -> dict:
    recs = _prefer_declared(root, candidates(root, side))
    if len(recs) > 1:
        raise _ambiguous(side, recs)
    return recs[0]


def resolve_pair(root: Path, a: Side, b: Side) -> tuple[dict, dict]:
    """The two profiles a diff compares (see the module docstring for the rules)."""
    ra, rb = (_prefer_declared(root, candidates(root, s)) for s in (a, b))
    if len(ra) > 1 or len(rb) > 1:
        shared = {_key(r) for r in ra} & {_key(r) for r in rb}
        if len(shared) == 1:
            key = shared.pop()
            ra = [r for r in ra if _key(r) == key] if len(ra) > 1 else ra
            rb = [r for r in rb if _key(r) == key] if len(rb) > 1 else rb
    # One side settled: the other follows its shape, dtype and GPU as far as it has them.
    for mine, other in ((ra, rb), (rb, ra)):
        if len(mine) > 1 and len(other) == 1:
            for i in range(3, 0, -1):
                same = [r for r in mine if _key(r)[-i:] == _key(other[0])[-i:]]
                if len(same) == 1:
                    mine[:] = same
                    break
    if len(ra) > 1:
        raise _ambiguous(a, ra)
    if len(rb) > 1:
        raise _ambiguous(b, rb)
    return ra[0], rb[0]
