"""profiles/: where captured profiles live, and how they are written (atomically) and read.

Layout: profiles/<gpu>/<kernel>/<revision>.<shape>.<dtype>.json, one per captured revision,
each naming its ncu report beside it: <shape>.<dtype>.<hash>.ncu-rep, which may hold several
revisions of one `kernlog profile` run (one NVTX range each; profiles from before reports were
shared name <revision>.<shape>.<dtype>.ncu-rep); profiles/<gpu>/ceilings.json (measured copy bandwidth and matmul rate);
profiles/<gpu>/<kernel>/bench.csv (the timing sweep, long format).

Integrity. A profile's JSON records the size and sha256 of its report (ncu.report_bytes,
ncu.report_sha256) and, stored compressed, of the .xz file itself (ncu.report_xz). Every
reader goes through load_profile, which checks the JSON's fields and glances at the report
(kernlog.store.reportfiles): a lost or damaged report never stops a profile from loading (its
report_problem says what is wrong); `report --check` and `kernlog open` check the file by
its sha256 (kernlog.store.reports). Profiles saved before the hash was recorded carry the
size alone, their plain report checked by size only (a same-size replacement passes), until
re-profiled; `kernlog list` counts them.

The pair is replaced as one: the JSON is the commit record and names its report, so a
killed save leaves the old pair or the new one (save_profiles says how).
"""
from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.spec import Shape, format_shape
from kernlog.store import reportfiles, xz
from kernlog.store.benchfile import BENCH_COLUMNS, bench_hashes, read_bench  # noqa: F401 (re-exported)
from kernlog.store.files import (  # noqa: F401 (re-exported: the store's one API for its callers)
    _digest,
    _move_in,
    dump_json,
    file_digest,
    folder_lock,
    write_atomic,
)
from kernlog.store.keys import (  # noqa: F401 (re-exported)
    XZ,
    ProfileKey,
    ceilings_json,
    compressed,
    glob_kernel_files,
    glob_profiles,
    kernel_dir,
    profile_json,
    profiles_dir,
    stem,
)
from kernlog.store.keys import safe as _safe
from kernlog.store.record import FIELDS, SCHEMA, Profile, _problems, record_problem  # noqa: F401 (re-exported)


def profile_paths(root: Path, gpu: str, kernel: str, revision: str, shape: Shape, dtype: str):
    json_path = profile_json(root, ProfileKey(kernel, revision, tuple(shape), dtype, gpu))
    return json_path, json_path.with_name(json_path.name[:-len(".json")] + ".ncu-rep")


def staged_name(stem_: str, sha256: str) -> str:
    """The hidden name, of its hash, under which an earlier kernlog staged a profile's report
    before its JSON was committed; a profile a killed save left naming it still loads."""
    return f".{stem_}.{sha256[:16]}.ncu-rep"


def report_name(shape: Shape, dtype: str, sha256: str) -> str:
    """The name of a stored ncu report: its shape, dtype and hash. One report may hold several
    revisions (one NVTX range each, ncu.nvtx_range in their JSONs); the name changes with the
    content, so a new report never overwrites one a profile still names."""
    _safe(dtype)
    return f"{format_shape(shape)}.{dtype}.{sha256[:16]}.ncu-rep"


_REPORT_RE = re.compile(r"[0-9x]+\.[a-z0-9_]+\.[0-9a-f]{16}\.ncu-rep")


def _named_reports(folder: Path) -> tuple[set[str], set[str]]:
    """(reports the folder's JSONs name, stems of JSONs that cannot be read); hidden JSONs are
    no profiles (keys.hidden)."""
    named, unread = set(), set()
    for j in (j for j in folder.glob("*.json") if not j.name.startswith(".")):
        try:
            named.add(json.loads(j.read_text())["ncu"]["report"])
        except (OSError, ValueError, KeyError, TypeError):
            unread.add(j.name[:-len(".json")])
    return named, unread


def _leftovers(folder: Path, stems: list[str]) -> list[Path]:
    """What saves leave behind in `folder` that no JSON there names: temporary files, the
    reports of the replaced profiles (`stems`: their usual and staged names) and hashed
    reports no profile names any more (a killed save's, or one every revision in it was
    re-profiled out of). While a JSON there cannot be read, no report is counted: it may
    name any of them."""
    named, unread = _named_reports(folder)
    out = []
    for p in sorted(folder.iterdir()):
        name = p.name[:-len(XZ)] if p.name.endswith(f".ncu-rep{XZ}") else p.name
        if not p.is_file() or name in named:
            continue
        if p.name.startswith(".") and p.name.endswith(".tmp"):
            out.append(p)
        elif not unread and (_REPORT_RE.fullmatch(name) or any(
                name == f"{s}.ncu-rep" or (name.startswith(f".{s}.") and name.endswith(".ncu-rep"))
                for s in stems)):
            out.append(p)
    return out


def _tidy(folder: Path, stems: list[str]) -> None:
    """Remove the folder's leftovers (`_leftovers`)."""
    for p in _leftovers(folder, stems):
        p.unlink(missing_ok=True)


def save_profiles(root: Path, records: list[Profile | dict], report_tmp: Path, force: bool,
                  compress: bool = False) -> list[Path]:
    """Write profiles that share one ncu report (moved in from `report_tmp`): one JSON per
    record, each naming the report. The records share GPU, kernel, shape and dtype. Refuses
    to replace an existing profile unless `force`.

    Each JSON is the commit record of its profile: it names its report and records its size
    and sha256, and a reader sees each profile's old pair or its new one, whenever the
    process dies:
      1. the report is moved in under report_name(), a name of its hash no JSON uses yet;
         with `compress`, it is stored compressed there (kernlog.store.xz: the .xz written and
         verified before the plain file goes; an .xz of that name already there and holding
         these bytes is kept, so the JSONs naming it keep its recorded hash);
      2. each JSON is written (atomically) naming it, with the .xz's own size and sha256
         (ncu.report_xz) where compressed: that profile's new pair is committed;
      3. the reports no JSON names any more (the replaced ones) and temporary files are
         removed; a killed save's leftovers go with the next save into the folder.

    A record built as a dict (its ncu report not named yet: the save names it) is read as
    Profile.from_dict reads one: a record readers could not load is refused, nothing written."""
    if not records:
        raise ValueError("save_profiles: no records")
    profs = [r if isinstance(r, Profile) else Profile.from_dict(_pending(r)) for r in records]
    first = profs[0]
    key = (first.gpu.slug, first.kernel, tuple(first.shape), first.dtype)
    paths = []
    for prof in profs:
        if (prof.gpu.slug, prof.kernel, tuple(prof.shape), prof.dtype) != key:
            raise ValueError("save_profiles: records of one report share GPU, kernel, shape and dtype")
        paths.append(profile_paths(root, key[0], key[1], prof.revision, key[2], key[3])[0])
    folder = paths[0].parent
    with folder_lock(folder):  # another process may save into this folder (kernlog.run.fanout)
        for json_path in paths:
            if json_path.exists() and not force:
                raise KernlogError(f"{json_path.relative_to(root)} exists; pass --force to replace it")
        size, sha = file_digest(report_tmp)
        name = report_name(key[2], key[3], sha)
        stems = [p.name[:-len(".json")] for p in paths]
        try:
            _move_in(report_tmp, folder / name)
            stored = _compress(folder / name) if compress else {}
            for prof, json_path in zip(profs, paths, strict=True):
                data = prof.to_dict()
                data["ncu"].pop("report_xz", None)
                data["ncu"].update(report=name, report_bytes=size, report_sha256=sha, **stored)
                write_atomic(json_path, dump_json(data))
            _tidy(folder, stems)
        except BaseException:
            _tidy(folder, stems)  # once more: what the failed step left (the tidy's own included)
            raise
    return paths


def _compress(report: Path) -> dict:
    """The JSONs' ncu fields for `report` stored compressed: {"report_xz": its .xz's size and
    sha256}; {} where the compressed copy does not verify (the plain report is kept, as
    xz.compress leaves it: `kernlog compress` tries again)."""
    try:
        return {"report_xz": reportfiles.xz_entry(xz.compress(report))}
    except KernlogError:
        return {}


def _pending(record: dict) -> dict:
    """A record a writer built, as its JSON will read back (a str subclass such as torch's
    version a str, a tuple a list), its report's name and size left to the save (which sets them)."""
    data = json.loads(dump_json(record))
    return dict(data, ncu={"report": "", "report_bytes": 0, **(data.get("ncu") or {})})


def save_profile(root: Path, record: Profile | dict, report_tmp: Path, force: bool, compress: bool = False) -> Path:
    """save_profiles of one record: a profile and its own report."""
    return save_profiles(root, [record], report_tmp, force, compress)[0]


class ProfileError(KernlogError):
    """A stored profile that cannot be trusted, in one line: the file, what is wrong, the fix.

    `path` is the profile's JSON relative to the root; `short` a few words for listings;
    `ident` (gpu, kernel, revision, shape, dtype) as the path spells them, or None where the
    path is not a profile's."""

    def __init__(self, message: str, path: str, short: str, ident: tuple | None):
        super().__init__(message)
        self.path, self.short, self.ident = path, short, ident


def path_ident(path: Path, folder: str = "profiles") -> tuple | None:
    """(gpu, kernel, revision, shape, dtype) as a path .../profiles/<gpu>/<kernel>/<rev>.<shape>.<dtype>.json
    spells them, or None where it is not such a path (ProfileKey.from_path's key as a tuple)."""
    key = ProfileKey.from_path(path, folder)
    return key.ident() if key else None


def _fix(ident: tuple | None, inside: bool, files: tuple = ()) -> str:
    """The remedy for a bad profile: on a GPU, the command that re-takes it; on a CPU, the one
    that restores the committed files (`files`: the JSON, and its report where it is named)."""
    if ident is not None:
        _, kernel, rev, shape, dtype = ident
        restore = f"; on a CPU, restore the committed files: `git checkout -- {' '.join(map(str, files))}`" \
            if files else ""
        return (f"re-profile on a GPU with `kernlog profile {kernel} --rev {rev} --shape {format_shape(shape)} "
                f"--dtype {dtype} --force`{restore}")
    where = "`profiles/<gpu>/<kernel>/<revision>.<shape>.<dtype>.json`"
    if inside:
        return f"remove it: profiles/ holds only what `kernlog profile` writes, as {where}"
    return f"point at a profile where `kernlog profile` wrote it ({where})"


def load_profile(root: Path, json_path: Path) -> Profile:
    """A stored profile, verified and typed, its path (its JSON, relative to `root`) set.

    Checks that the JSON parses, has this schema, every field in FIELDS with its type,
    positive finite timing samples and finite metrics, that it sits at the path its kernel,
    revision, shape, dtype and GPU spell, and that it names its report by a name it may have
    (the usual name, or the staged or hashed name of its recorded sha256). The report file
    itself is glanced at (reportfiles.glance: there, with the recorded size), never a reason
    to refuse the profile: where it is missing or damaged, the profile's report_problem says
    so in one line, and what needs the report's bytes checks it in full (kernlog.store.reports).
    Raises ProfileError, one line naming the file and the fix."""
    json_path = Path(json_path)
    rel = Path(os.path.relpath(json_path, root))
    inside = not rel.parts or rel.parts[0] != ".."
    rel = rel if inside else json_path
    ident = path_ident(Path(os.path.abspath(json_path)), profiles_dir(root).name)

    def fail(short: str, message: str):
        return ProfileError(f"{message}; {_fix(ident, inside, (rel,))}", str(rel), short, ident)

    try:
        data = json.loads(json_path.read_text())
    except OSError as exc:
        raise fail("unreadable", f"cannot read profile {rel}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise fail("invalid JSON", f"cannot read profile {rel}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise fail("not a profile", f"{rel} is not a kernlog profile (schema {SCHEMA})")
    for short, problem in _problems(data):
        raise fail(short, f"{rel} {problem}")
    prof = Profile.from_checked(data)
    said = (prof.gpu.slug, prof.kernel, prof.revision, tuple(prof.shape), prof.dtype)
    # Outside a profiles/<gpu>/<kernel>/ folder (a copied pair) only the file name is checked.
    if rel.name != f"{said[2]}.{format_shape(said[3])}.{said[4]}.json" or ident not in (None, said):
        raise fail("misplaced", f"{rel} holds {said[1]}/{said[2]} {format_shape(said[3])} {said[4]} on {said[0]}, "
                   "not what its path says")
    stem_ = rel.name[:-len(".json")]
    ncu = prof.ncu
    sha = ncu.report_sha256
    names = {f"{stem_}.ncu-rep"} | ({staged_name(stem_, sha), report_name(said[3], said[4], sha)} if sha else set())
    if ncu.report not in names:
        expected = report_name(said[3], said[4], sha) if sha else f"{stem_}.ncu-rep"
        raise fail("report misnamed", f"{rel} names its report {ncu.report!r}, expected {expected}")
    prof.path = str(rel)
    damage = reportfiles.glance(json_path.parent, ncu)
    if damage:
        what = f" {damage.what}" if damage.what else ""
        prof.report_problem = f"{damage.short}: {rel.with_name(damage.path.name)}{what}, named by {rel}"
    return prof


def replaced_message(rep_rel, rel) -> str:
    return (f"{rep_rel}, the ncu report {rel} names, does not have the sha256 {Path(rel).name} recorded: "
            "the report was replaced (not the one this profile was extracted from)")


def profile_error(root: Path, json_path: Path, short: str, message: str, files: tuple = ()) -> ProfileError:
    """A ProfileError about the profile at `json_path`, its fix added as load_profile adds it
    (`files`: what `git checkout` restores, relative to the root; default the JSON)."""
    rel = Path(os.path.relpath(json_path, root))
    inside = not rel.parts or rel.parts[0] != ".."
    ident = path_ident(Path(os.path.abspath(json_path)), profiles_dir(root).name)
    return ProfileError(f"{message}; {_fix(ident, inside, files or (rel,))}", str(rel if inside else json_path),
                        short, ident)


def load(root: Path, path_or_key: Path | str | ProfileKey) -> Profile:
    """A stored profile, verified and typed as load_profile gives it. A key names the profile
    under profiles/ (it needs its shape, dtype and GPU)."""
    path = profile_json(root, path_or_key) if isinstance(path_or_key, ProfileKey) else Path(path_or_key)
    return load_profile(root, path)


def report_hashed(prof: Profile) -> bool:
    """Whether the profile recorded its report's sha256 (else its report is checked by size
    only: profiles saved before kernlog recorded the hash)."""
    return bool(prof.ncu.report_sha256)


def report_path(root: Path, prof: Profile) -> Path:
    """The .ncu-rep of a profile from load_profile."""
    return (root / prof.path).parent / prof.ncu.report


def iter_profiles(root: Path, kernel: str | None = None, bad: str = "raise") -> Iterator[Profile | ProfileError]:
    """Every stored profile (of `kernel`), verified by load_profile, in path order. A bad file
    raises its ProfileError (bad="raise"), or is yielded as one in its place (bad="yield") so
    that one bad file hides none of the others."""
    if bad not in ("raise", "yield"):
        raise ValueError(f"bad={bad!r}: 'raise' or 'yield'")
    for path in glob_profiles(root, kernel=kernel or "*"):
        try:
            yield load_profile(root, path)
        except ProfileError as err:
            if bad == "raise":
                raise
            yield err


def load_ceilings(root: Path, gpu: str) -> dict:
    path = ceilings_json(root, gpu)
    return json.loads(path.read_text()) if path.exists() else {}


def prune_reports(root: Path, kernel: str | None = None, dry_run: bool = False) -> tuple[list[Path], int]:
    """Remove the .ncu-rep of every --at entry (profiles/<gpu>/<kernel>/at/<commit>/), each JSON
    naming one rewritten first with ncu.pruned (when, and how to make the report again); the
    JSONs keep the report's name, size and sha256, and every metric, sample and hot spot, so
    history, diff and the log read them as before. Today's profiles keep their reports; a
    report no profile names (what a killed or replaced save left) goes. (reports removed,
    bytes freed)."""
    removed, freed = [], 0
    for folder in (p for p in glob_kernel_files(root, "", kernel=kernel or "*") if p.is_dir()):
        with folder_lock(folder):  # reports no profile names (a save's leftovers)
            for rep in _leftovers(folder, []):
                freed += rep.stat().st_size
                removed.append(rep)
                if not dry_run:
                    rep.unlink()
    for folder in (p for p in glob_kernel_files(root, "at/*", kernel=kernel or "*") if p.is_dir()):
        with folder_lock(folder):
            for rep in sorted([*folder.glob("*.ncu-rep"), *folder.glob(f"*.ncu-rep{XZ}")]):
                size = rep.stat().st_size
                if not dry_run:
                    for j in sorted(folder.glob("*.json")):
                        data = json.loads(j.read_text())
                        if data.get("ncu", {}).get("report") != rep.name.removesuffix(XZ):
                            continue  # another report's, or not a profile (failed.json)
                        prof = Profile.from_dict(data)
                        commit = prof.git.get("commit") or folder.name
                        prof.ncu.pruned = {
                            "on": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
                            "again": f"kernlog profile {prof.kernel} --at {commit} --rev {prof.revision} "
                                     f"--shape {format_shape(tuple(prof.shape))} --dtype {prof.dtype} --force"}
                        write_atomic(j, dump_json(prof.to_dict()))
                    rep.unlink()
                removed.append(rep)
                freed += size
    return removed, freed
