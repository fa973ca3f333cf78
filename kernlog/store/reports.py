"""ncu reports stored compressed: <report>.ncu-rep.xz (lzma) in place of <report>.ncu-rep.

A profile's JSON never changes when its report is compressed: it names the report by its
.ncu-rep name with its original size and sha256. load_profile accepts either form (a
compressed one by its presence alone, cheaply); verify_report decompresses one and checks
size and sha256 in full. Whatever reads a stored report's bytes asks open_report for a path:
the plain file where it is there, else the compressed one decompressed once into a
git-ignored cache (<root>/.cache/reports/<sha256>.ncu-rep) and reused while its size is right.
"""
from __future__ import annotations

import lzma
import os
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.store.files import file_digest, folder_lock
from kernlog.store.keys import compressed, profiles_dir, report_cache
from kernlog.store.profiles import _named_reports, load_profile, profile_error, replaced_message, report_path
from kernlog.store.record import Profile
from kernlog.store.xz import _decompress_to, _write_temp, compress  # noqa: F401  (compress: the API)


def _where(root: Path, prof: Profile) -> tuple[Path, Path]:
    if ":" in (prof.path or "") and prof.commit:
        raise KernlogError(f"{prof.path}: a profile read from git has no report file in this checkout")
    return report_path(root, prof), root / prof.path


def open_report(root: Path, prof: Profile) -> Path:
    """A path to the bytes of a loaded profile's ncu report: the plain .ncu-rep beside its JSON
    where it is there, else its .xz decompressed into the cache (reused while its size is the
    recorded one; a decompressed copy that is not the recorded report is an error, not cached)."""
    plain, json_path = _where(root, prof)
    if plain.is_file():
        return plain
    xz = compressed(plain)
    ncu = prof.ncu
    if not xz.is_file():
        raise profile_error(root, json_path, "ncu report missing",
                            f"{plain.relative_to(root)}, the ncu report {prof.path} names, is missing")
    cache = report_cache(root, ncu.report_sha256 or file_digest(xz)[1])
    if cache.is_file() and cache.stat().st_size == ncu.report_bytes:
        return cache
    got = {}

    def fill(f):
        got["digest"] = _decompress_to(xz, f)

    try:
        tmp = _write_temp(cache.parent, cache.name, fill)
    except (lzma.LZMAError, EOFError) as exc:
        raise profile_error(root, json_path, "ncu report corrupt",
                            f"{xz.relative_to(root)}, the ncu report {prof.path} names, does not decompress "
                            f"({exc or 'truncated'})") from None
    problem = _mismatch(root, prof, xz, *got["digest"])
    if problem:
        tmp.unlink(missing_ok=True)
        raise problem
    os.replace(tmp, cache)
    return cache


def _mismatch(root: Path, prof: Profile, xz: Path, size: int, sha: str):
    ncu, json_path = prof.ncu, root / prof.path
    rep_rel = xz.relative_to(root)
    if size != ncu.report_bytes:
        return profile_error(root, json_path, "ncu report truncated or replaced",
                             f"{rep_rel}, the ncu report {prof.path} names, decompresses to {size} bytes, the "
                             f"profile recorded {ncu.report_bytes}: the report is truncated or replaced")
    if ncu.report_sha256 and sha != ncu.report_sha256:
        return profile_error(root, json_path, "ncu report replaced", replaced_message(rep_rel, prof.path))
    return None


def verify_report(root: Path, prof: Profile) -> None:
    """Check a loaded profile's report in full: a plain one by size and sha256 (as load_profile
    does), a compressed one decompressed (corrupt, truncated, another size or sha256 is a
    ProfileError). A pruned profile's missing report is no error."""
    plain, json_path = _where(root, prof)
    xz = compressed(plain)
    if plain.is_file() or not xz.is_file():
        load_profile(root, json_path)
        return
    try:
        digest = _decompress_to(xz, None)
    except (lzma.LZMAError, EOFError) as exc:
        raise profile_error(root, json_path, "ncu report corrupt",
                            f"{xz.relative_to(root)}, the ncu report {prof.path} names, does not decompress "
                            f"({exc or 'truncated'})") from None
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


def compress_reports(root: Path, limit_bytes: int | None = None,
                     progress=lambda line: None) -> list[tuple[Path, int, int]]:
    """Compress the plain reports under profiles/ (ones already compressed are skipped),
    largest first, stopping before the original bytes converted would pass `limit_bytes`.
    (the report's path, its bytes before, the .xz's bytes after) for each."""
    done, total = [], 0
    for rep in plain_reports(root):
        before = rep.stat().st_size
        if limit_bytes is not None and total + before > limit_bytes:
            break
        with folder_lock(rep.parent):  # a save into the folder waits (its tidy reads the JSONs)
            if not rep.is_file():
                continue
            after = compress(rep).stat().st_size
        total += before
        done.append((rep, before, after))
        progress(f"{rep.relative_to(root)}: {before} -> {after} bytes")
    return done
