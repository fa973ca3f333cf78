"""Which stored profile a name on the command line means.

A side is `KERNEL/REVISION[@SELECTOR]`, the selector being dot-joined parts as in the
profile file names: a shape (8192x4096), a dtype (fp32, bf16, fp16) and a GPU slug
(nvidia-h100-80gb-hbm3, or a part of one that names a single stored GPU: h100, h200),
in any order, each optional (keys.ProfileKey.parse reads it):

    softmax/v7_bf16_packed@8192x4096.bf16
    softmax/v5_tuned@nvidia-h200
    softmax/torch@1024x131072.bf16.nvidia-h100-80gb-hbm3

A side may name a commit, as git names a file at one: `REF:KERNEL/REVISION[@SELECTOR]`
(HEAD~3:softmax/v5_tuned, a9db2df:softmax/torch@1024x131072.bf16): the profile as that
commit stored it (kernlog.store.gitrefs).

A path to a profile's .json file is a side too (a profile from another checkout). Where
a side still has several profiles, the kernel's declared profile shape and dtype (Kernel.profile_dtype)
win, then the one shape, dtype and GPU both sides share (or that a settled side has);
then, where a side names no GPU and its profiles are on several, this machine's GPU
(nvidia-smi) if it has one of them, else the repository's primary GPU
(`[tool.kernlog] primary_gpu` in pyproject.toml; without it, the GPU with the most
profiles). The profile resolved then says so (its gpu_choice). What remains ambiguous is
an error listing the choices in this syntax.

A file of the revision that does not load (a stray or empty JSON) is never chosen in
silence: where the rules would pick it, its error is raised; where they pick a good
profile, it is named in the profile's `skipped` (one line each). So is the chosen profile's
ncu report where it is missing or damaged (kernlog.store.integrity.note): the profile is read
from its JSON all the same.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernlog import config, hints
from kernlog.errors import KernlogError
from kernlog.identity import gpu_slug
from kernlog.registry import kernel_names, load_kernel
from kernlog.spec import format_shape
from kernlog.store import gitrefs, integrity
from kernlog.store import profiles as store
from kernlog.store.keys import DTYPES, GPU_RE, ProfileKey, glob_profiles, profiles_dir  # noqa: F401
from kernlog.store.record import Profile

MACHINE, PRIMARY = "this machine's GPU", "primary GPU"


def parse_side(text: str, shape=None, dtype=None, gpu=None) -> ProfileKey:
    """`text` as the key of a command-line side (a path to a profile's .json, or a name whose
    selector's parts override the command's --shape/--dtype/--gpu)."""
    if text.endswith(".json") and Path(text).is_file():
        return ProfileKey("", "", path=Path(text))
    return ProfileKey.parse(text, shape, dtype, gpu)


@functools.lru_cache(maxsize=1)
def this_gpu() -> str | None:
    """This machine's GPU slug, by nvidia-smi where it is on PATH (torch is not imported), else None."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()] if done.returncode == 0 else []
    return gpu_slug(names[0]) if names else None


def primary_gpu(root: Path) -> str | None:
    """`[tool.kernlog] primary_gpu` of the repository's pyproject.toml, else the GPU with the most profiles."""
    setting = config.layout(root).primary_gpu
    if setting:
        return setting
    counts = Counter(p.parent.parent.name for p in glob_profiles(root))
    return min(counts, key=lambda g: (-counts[g], g)) if counts else None


def _load(root: Path, path: Path) -> Profile:
    prof = store.load_profile(root, path)
    try:
        prof.path = str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        prof.path = str(path)
    return prof


def stored_at(root: Path, ref: str, kernel: str, revision: str) -> list[Profile]:
    """Every profile of one revision as the commit `ref` stored it (a bad one is an error)."""
    profs = gitrefs.profiles_at(root, gitrefs.resolve(root, ref), kernel, revision)
    return [p for p in profs if p.revision == revision and p.kernel == kernel]


def stored(root: Path, kernel: str, revision: str) -> tuple[list[Profile], list[store.ProfileError]]:
    """Every stored profile of one revision, on any GPU, shape and dtype, and the files of it
    that fail verification."""
    profs, bad = [], []
    for path in glob_profiles(root, kernel=kernel, revision=revision):
        try:
            prof = _load(root, path)
        except store.ProfileError as e:
            bad.append(e)
            continue
        if prof.revision == revision and prof.kernel == kernel:
            profs.append(prof)
    return profs, bad


@dataclass(frozen=True)
class Phantom:
    """A file that failed to load, as a candidate of the key its path spells: chosen, it raises."""
    key: ProfileKey
    error: store.ProfileError


def _phantom(err: store.ProfileError) -> Phantom:
    gpu, kernel, revision, shape, dtype = err.ident
    return Phantom(ProfileKey(kernel, revision, tuple(shape), dtype, gpu), err)


def _gpu_part(root: Path, side: ProfileKey, recs: list[Profile]) -> ProfileKey:
    """`side` with its GPU part as the stored slug it names: itself, or the one slug it is part of."""
    if side.gpu is None:
        return side
    base = profiles_dir(root)
    known = {r.gpu.slug for r in recs} | ({p.name for p in base.iterdir() if p.is_dir()
                                                 and not p.name.startswith(".")} if base.is_dir() else set())
    if side.gpu in known:
        return side
    hits = sorted(s for s in known if side.gpu in s)
    if len(hits) > 1:
        raise KernlogError(f"GPU {side.gpu!r} in {side.text()} matches several stored GPUs: {', '.join(hits)}; "
                           "name one")
    return side.with_(gpu=hits[0]) if hits else side


def _named(root: Path, side: ProfileKey) -> None:
    """One line where `side` names a kernel, or (with no ref) a revision, that is neither declared nor stored."""
    if side.path is not None:
        return
    known = kernel_names(root)
    if side.kernel not in known:
        raise KernlogError(f"no kernel {side.kernel!r}; kernels: {', '.join(known)}")
    names = [r.name for r in load_kernel(root, side.kernel).revisions]
    if not side.ref and side.revision not in names and not stored(root, side.kernel, side.revision)[0]:
        raise KernlogError(f"no revision {side.revision!r} in {side.kernel}; revisions: {', '.join(names)}")


def _same_rank(side: ProfileKey, kernel) -> None:
    """One line where `side` names a shape of another rank than its kernel's (where nothing stored matches it)."""
    if side.shape is not None and len(side.shape) != len(kernel.profile_shape):
        raise KernlogError(f"shape {format_shape(side.shape)} has {len(side.shape)} dimensions, {side.kernel}'s "
                           f"shapes {len(kernel.profile_shape)} (as {format_shape(kernel.profile_shape)})")


def _gather(root: Path, side: ProfileKey) -> tuple[ProfileKey, list[Profile | Phantom], list[store.ProfileError]]:
    """(the side, its GPU part read; the profiles it may mean, a file that does not load as a
    candidate of its path's key (a Phantom); the files of the revision that no key names)."""
    if side.path is not None:
        return side, [_load(root, side.path)], []
    known = kernel_names(root)
    if side.kernel not in known:
        raise KernlogError(f"no kernel {side.kernel!r}; kernels: {', '.join(known)}")
    kernel = load_kernel(root, side.kernel)
    recs, bad = (stored_at(root, side.ref, side.kernel, side.revision), []) if side.ref else stored(
        root, side.kernel, side.revision)
    side = _gpu_part(root, side, recs)
    phantoms = [_phantom(e) for e in bad if e.ident is not None and side.wants(_phantom(e))]
    strays = [e for e in bad if e.ident is None]
    if not recs and (phantoms or strays):  # nothing loads: the file this side means is the error
        raise phantoms[0].error if phantoms else strays[0]
    names = [r.name for r in kernel.revisions]
    if side.revision not in names and not recs:
        raise KernlogError(f"no revision {side.revision!r} in {side.kernel}; revisions: {', '.join(names)}")
    if not recs and side.ref:
        raise KernlogError(f"{side.kernel}/{side.revision} has no profile at {side.ref} "
                           "(`kernlog history` lists the commits that stored one)")
    if not recs and side.revision in names and kernel.revision(side.revision).known_wrong:
        rev = kernel.revision(side.revision)
        see = f"`{hints.check_command(side.kernel, rev)}`" + (" on a GPU machine" if rev.kind == "cuda" else "")
        raise KernlogError(f"{side.kernel}/{side.revision} is a known-wrong revision, never profiled: {see} shows "
                           "the gate rejecting it")
    if not recs:
        _same_rank(side, kernel)  # a shape of another rank is the mistake to name, not the missing profile
        raise KernlogError(f"{side.kernel}/{side.revision} has no stored profile: run "
                           f"`kernlog profile {side.kernel} --rev {side.revision}` on a GPU machine")
    chosen = [r for r in recs if side.wants(r)]
    if not chosen and phantoms:
        raise phantoms[0].error
    if not chosen:
        _same_rank(side, kernel)
        raise KernlogError(f"no profile of {side.text()}; stored: {', '.join(side.name(r) for r in recs)}")
    chosen += phantoms
    return side, chosen, strays


def candidates(root: Path, side: ProfileKey) -> list[Profile]:
    """The loadable profiles `side` may mean, after its own selector; errors name the fix (a
    file that does not load is raised where no loadable one is left)."""
    return [r for r in _gather(root, side)[1] if not isinstance(r, Phantom)]  # _gather raises where none loads


def _key(prof: Profile | Phantom) -> tuple:
    k = prof.key
    return k.shape, k.dtype, k.gpu


def _prefer_declared(root: Path, recs: list) -> list:
    if len(recs) < 2 or not recs[0].key.kernel or recs[0].key.kernel not in kernel_names(root):
        return recs
    kernel = load_kernel(root, recs[0].key.kernel)
    mine = [r for r in recs if r.key.shape == tuple(kernel.profile_shape) and r.key.dtype == kernel.profile_dtype]
    return mine or recs


def _default_gpu(root: Path, side: ProfileKey, recs: list) -> tuple[list, dict | None]:
    """`recs` on one GPU where `side` names none and they are on several: this machine's if
    it is one of them, else the primary GPU if it is (and the choice made); else unchanged."""
    gpus = sorted({r.key.gpu for r in recs})
    if side.gpu is not None or side.path is not None or len(gpus) < 2:
        return recs, None
    for slug, why in ((this_gpu(), MACHINE), (primary_gpu(root), PRIMARY)):
        if slug in gpus:
            return ([r for r in recs if r.key.gpu == slug],
                    {"chosen": slug, "why": why, "others": [g for g in gpus if g != slug]})
    return recs, None


def _ambiguous(side: ProfileKey, recs: list) -> KernlogError:
    return KernlogError(f"{side.text()} has {len(recs)} profiles; name one: "
                        + "  ".join(sorted(side.name(r) for r in recs)))


def _finish(root: Path, recs: list, side: ProfileKey, candidates_: list, strays: list, choice: dict | None) -> Profile:
    if len(recs) > 1:
        raise _ambiguous(side, recs)
    prof = recs[0]
    if isinstance(prof, Phantom):
        raise prof.error
    skipped = [str(r.error) for r in candidates_ if isinstance(r, Phantom)] + [str(e) for e in strays]
    skipped += [n for n in [integrity.note(root, prof)] if n]  # a lost report: the JSON is read all the same
    if skipped:
        prof.skipped = skipped
    if choice:
        prof.gpu_choice = choice
    return prof


def resolve_one(root: Path, side: ProfileKey) -> Profile:
    side, found, strays = _gather(root, side)
    recs, choice = _default_gpu(root, side, _prefer_declared(root, found))
    return _finish(root, recs, side, found, strays, choice)


def _settle(ra: list, rb: list) -> None:
    """Narrow two ambiguous sides, in place: to the one key both share, then one settled side
    followed by the other on its shape, dtype and GPU as far as it has them."""
    if len(ra) > 1 or len(rb) > 1:
        shared = {_key(r) for r in ra} & {_key(r) for r in rb}
        if len(shared) == 1:
            key = shared.pop()
            ra[:] = [r for r in ra if _key(r) == key] if len(ra) > 1 else ra
            rb[:] = [r for r in rb if _key(r) == key] if len(rb) > 1 else rb
    for mine, other in ((ra, rb), (rb, ra)):
        if len(mine) > 1 and len(other) == 1:
            for i in range(3, 0, -1):
                same = [r for r in mine if _key(r)[-i:] == _key(other[0])[-i:]]
                if len(same) == 1:
                    mine[:] = same
                    break


def resolve_pair(root: Path, a: ProfileKey, b: ProfileKey) -> tuple[Profile, Profile]:
    """The two profiles a diff compares (see the module docstring for the rules)."""
    for side in (a, b):  # both sides' names first: a typo in the second is said as one, not as the first's state
        _named(root, side)
    (a, fa, sa), (b, fb, sb) = _gather(root, a), _gather(root, b)
    ra, rb = _prefer_declared(root, list(fa)), _prefer_declared(root, list(fb))
    _settle(ra, rb)
    ca = cb = None
    if len(ra) > 1 or len(rb) > 1:  # still open: the default GPU, then the rules above once more
        if len(ra) > 1:
            ra, ca = _default_gpu(root, a, ra)
        if len(rb) > 1:
            rb, cb = _default_gpu(root, b, rb)
        _settle(ra, rb)
    return _finish(root, ra, a, fa, sa, ca), _finish(root, rb, b, fb, sb, cb)
