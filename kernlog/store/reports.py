"""ncu reports stored compressed: <report>.ncu-rep.xz (lzma) in place of <report>.ncu-rep.

A profile's JSON names the report by its .ncu-rep name with its original size and sha256, and
records the .xz file's own size and sha256 (ncu.report_xz: what `report --check` hashes,
kernlog.store.integrity); compressing a report records it in every JSON that names it, and
`kernlog compress` records it for reports compressed before kernlog did (record_xz_hashes),
each checked first to decompress to its recorded report. load_profile accepts either form (by
its size, cheaply); verify_report checks one in full. Whatever reads a stored report's bytes
asks open_report for a path: the plain file where it is there, else the compressed one, its
own sha256 checked, decompressed once into a git-ignored cache
(<root>/.cache/reports/<sha256>.ncu-rep) and reused while its size is right.
"""
from __future__ import annotations

import json
import lzma
import os
from collections.abc import Callable
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.store import integrity, reportfiles
from kernlog.store.files import dump_json, file_digest, folder_lock, write_atomic
from kernlog.store.keys import compressed, glob_profiles, profiles_dir, report_cache
from kernlog.store.profiles import (
    ProfileError,
    _named_reports,
    load_profile,
    profile_error,
    replaced_message,
    report_path,
)
from kernlog.store.record import SCHEMA, Profile
from kernlog.store.reportfiles import Damage
from kernlog.store.xz import _decompress_to, _write_temp, compress  # noqa: F401  (compress: the API)

CORRUPT = "ncu report corrupt"


def _where(root: Path, prof: Profile) -> tuple[Path, Path]:
    if ":" in (prof.path or "") and prof.commit:
        raise KernlogError(f"{prof.path}: a profile read from git has no report file in this checkout")
    return report_path(root, prof), root / prof.path


def _inspected(root: Path, prof: Profile) -> tuple[Path, Path]:
    """(the plain report's path, its .xz's) of a loaded profile whose stored report file is the
    one it recorded (reportfiles.inspect); else the ProfileError naming the file and its fix."""
    plain, _ = _where(root, prof)
    damage = reportfiles.inspect(plain.parent, prof.ncu)
    if damage and damage.short != reportfiles.UNHASHED:  # unhashed: checked by decompressing it
        raise integrity.refusal(root, prof, damage)
    return plain, compressed(plain)


def open_report(root: Path, prof: Profile) -> Path:
    """A path to the bytes of a loaded profile's ncu report, its stored file first checked by
    size and sha256 (a plain .ncu-rep against the report's, an .xz against its own): the plain
    report where it is there, else its .xz decompressed into the cache (reused while its size
    is the recorded one; a decompressed copy that is not the recorded report is an error, not
    cached)."""
    plain, xz = _inspected(root, prof)
    if plain.is_file():
        return plain
    ncu = prof.ncu
    if not xz.is_file():  # removed by `kernlog prune`, on purpose
        raise KernlogError(f"{prof.path}: its ncu report was removed by `kernlog prune`; make it again with "
                           f"`{(ncu.pruned or {}).get('again', 'kernlog profile')}`")
    cache = report_cache(root, ncu.report_sha256 or file_digest(xz)[1])
    if cache.is_file() and cache.stat().st_size == ncu.report_bytes:
        return cache
    got = {}

    def fill(f):
        got["digest"] = _decompress_to(xz, f)

    try:
        tmp = _write_temp(cache.parent, cache.name, fill)
    except (lzma.LZMAError, EOFError) as exc:
        raise _corrupt(root, prof, xz, exc) from None
    problem = _mismatch(root, prof, xz, *got["digest"])
    if problem:
        tmp.unlink(missing_ok=True)
        raise problem
    os.replace(tmp, cache)
    return cache


def _corrupt(root: Path, prof: Profile, xz: Path, exc: Exception) -> ProfileError:
    return integrity.refusal(root, prof, Damage(xz, CORRUPT, f"does not decompress ({exc or 'truncated'})"))


def _mismatch(root: Path, prof: Profile, xz: Path, size: int, sha: str):
    ncu, json_path = prof.ncu, root / prof.path
    rep_rel = xz.relative_to(root)
    if size != ncu.report_bytes:
        return profile_error(root, json_path, "ncu report truncated or replaced",
                             f"{rep_rel}, the ncu report {prof.path} names, decompresses to {size} bytes, the "
                             f"profile recorded {ncu.report_bytes}: the report is truncated or replaced", (rep_rel,))
    if ncu.report_sha256 and sha != ncu.report_sha256:
        return profile_error(root, json_path, "ncu report replaced", replaced_message(rep_rel, prof.path), (rep_rel,))
    return None


def verify_report(root: Path, prof: Profile) -> None:
    """Check a loaded profile's report in full: its stored file by size and sha256
    (reportfiles.inspect), and a compressed one decompressed (corrupt, truncated, another size
    or sha256 is a ProfileError). A pruned profile's missing report is no error."""
    plain, xz = _inspected(root, prof)
    if plain.is_file() or not xz.is_file():
        return
    try:
        digest = _decompress_to(xz, None)
    except (lzma.LZMAError, EOFError) as exc:
        raise _corrupt(root, prof, xz, exc) from None
    problem = _mismatch(root, prof, xz, *digest)
    if problem:
        raise problem


def plain_reports(root: Path) -> list[Path]:
    """Every plain report a profile under profiles/ names (today's and at/ entries'), largest first."""
    out = []
    for folder in {p.parent for p in profiles_dir(root).rglob("*.json")}:
        if any(part.startswith(".") for part in folder.relative_to(profiles_dir(root)).parts):
            continue  # a scratch folder's
        named, _ = _named_reports(folder)
        out += [folder / n for n in named if (folder / n).is_file() and n.endswith(".ncu-rep")]
    return sorted(out, key=lambda p: (-p.stat().st_size, str(p)))


def _record(folder: Path, report: str, entry: dict) -> int:
    """Write `entry` as ncu.report_xz into every profile JSON in `folder` naming `report`, each
    JSON otherwise byte for byte as it was; how many were written. The caller holds the lock."""
    written = 0
    for j in sorted(j for j in folder.glob("*.json") if not j.name.startswith(".")):
        data = json.loads(j.read_text())
        ncu = data.get("ncu") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
        if isinstance(ncu, dict) and ncu.get("report") == report and ncu.get("report_xz") != entry:
            ncu["report_xz"] = entry
            write_atomic(j, dump_json(data))
            written += 1
    return written


def compress_reports(root: Path, limit_bytes: int | None = None,
                     progress=lambda line: None) -> list[tuple[Path, int, int]]:
    """Compress the plain reports under profiles/ (ones already compressed are skipped),
    largest first, stopping before the original bytes converted would pass `limit_bytes`, and
    record each .xz's own size and sha256 in the JSONs that name it (ncu.report_xz; a kill
    between leaves it unrecorded, for record_xz_hashes). (the report's path, its bytes before,
    the .xz's bytes after) for each."""
    done, total = [], 0
    for rep in plain_reports(root):
        before = rep.stat().st_size
        if limit_bytes is not None and total + before > limit_bytes:
            break
        with folder_lock(rep.parent):  # a save into the folder waits (its tidy reads the JSONs)
            if not rep.is_file():
                continue
            xz = compress(rep)
            _record(rep.parent, rep.name, reportfiles.xz_entry(xz))
        total += before
        done.append((rep, before, xz.stat().st_size))
        progress(f"{rep.relative_to(root)}: {before} -> {done[-1][2]} bytes")
    return done


def record_xz_hashes(root: Path, progress: Callable[[str], None] = lambda line: None) -> tuple[int, list[str]]:
    """The store upgrade for reports compressed before kernlog recorded their .xz's hash: each
    such .xz (today's profiles' and the at/ entries') decompressed and checked against the
    size and sha256 its profiles recorded, then its own size and sha256 written into every
    JSON that names it (ncu.report_xz), nothing else in them changed. (profiles written, one
    line per .xz that does not decompress to its recorded report: left unrecorded, with the
    command that restores it)."""
    todo: dict[Path, list[Profile]] = {}
    for path in [*glob_profiles(root), *glob_profiles(root, at=True)]:
        try:
            prof = load_profile(root, path)
        except ProfileError:
            continue  # `kernlog list` names it
        stored = reportfiles.stored_file(path.parent, prof.ncu)
        if stored.name != prof.ncu.report and stored.is_file() and prof.ncu.report_xz is None:
            todo.setdefault(stored, []).append(prof)
    written, bad = 0, []
    for xz, profs in sorted(todo.items()):
        with folder_lock(xz.parent):
            try:
                digest = _decompress_to(xz, None)
                problem = _mismatch(root, profs[0], xz, *digest)
            except (lzma.LZMAError, EOFError) as exc:
                problem = _corrupt(root, profs[0], xz, exc)
            if problem:
                bad.append(f"left unrecorded: {problem}")
                continue
            n = _record(xz.parent, profs[0].ncu.report, reportfiles.xz_entry(xz))
        written += n
        progress(f"{xz.relative_to(root)}: sha256 recorded in {n} profile(s)")
    return written, bad
