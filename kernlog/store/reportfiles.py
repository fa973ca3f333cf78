"""Which file under profiles/ holds a profile's ncu report, and whether it is the one the
profile recorded: a glance by size on every load (nothing read), a check by sha256 where the
report's bytes matter (`report --check`, `kernlog open`).

A report is stored plain (<report>.ncu-rep: checked against ncu.report_bytes and
ncu.report_sha256) or compressed (<report>.ncu-rep.xz: checked against ncu.report_xz, the
size and sha256 of the .xz file itself, so nothing is decompressed to check it). A lost or
damaged report is a Damage, not an error of its profile: the JSON holds every metric, sample
and hot spot, so show, diff, list, compare and the log read it all the same; what needs the
report's bytes (`kernlog open`) refuses it, and `report --check` names it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernlog.store.files import file_digest
from kernlog.store.keys import compressed
from kernlog.store.record import Ncu

MISSING = "ncu report missing"
RESIZED = "ncu report truncated or replaced"
REPLACED = "ncu report replaced"
UNHASHED = "ncu report unhashed"


@dataclass(frozen=True)
class Damage:
    """What is wrong with a stored report file: `path`, the file (where it is missing, the one
    its record says is stored); `short`, a few words (MISSING, RESIZED, REPLACED, UNHASHED);
    `what`, the details after the file's name ("" where `short` says it all)."""
    path: Path
    short: str
    what: str


def stored_file(folder: Path, ncu: Ncu) -> Path:
    """The file in `folder` that holds the report a profile names: the plain one where it is
    there, else the .xz; where neither is, the .xz if the record says it was stored compressed
    (ncu.report_xz), else the plain name (git may hold either: kernlog.store.reports asks it)."""
    plain = folder / ncu.report
    xz = compressed(plain)
    if plain.is_file():
        return plain
    return xz if xz.is_file() or ncu.report_xz else plain


def xz_entry(path: Path) -> dict:
    """ncu.report_xz for a stored .xz: its own size and sha256."""
    size, sha = file_digest(path)
    return {"bytes": size, "sha256": sha}


def _recorded(path: Path, ncu: Ncu) -> tuple[int | None, str | None]:
    """(size, sha256) the record holds for the stored file `path` (None: not recorded)."""
    if path.name == ncu.report:
        return ncu.report_bytes, ncu.report_sha256
    return (ncu.report_xz["bytes"], ncu.report_xz["sha256"]) if ncu.report_xz else (None, None)


def glance(folder: Path, ncu: Ncu) -> Damage | None:
    """The cheap check every load makes: the stored file is there with the recorded size. A
    report `kernlog prune` removed on purpose is no damage."""
    path = stored_file(folder, ncu)
    if not path.is_file():
        return None if isinstance(ncu.pruned, dict) else Damage(path, MISSING, "")
    size, want = path.stat().st_size, _recorded(path, ncu)[0]
    if want is not None and size != want:
        return Damage(path, RESIZED, f"is {size} bytes, not the {want} recorded")
    return None


def inspect(folder: Path, ncu: Ncu) -> Damage | None:
    """glance, then the stored file's sha256 against the recorded one (a shared file is read
    once per process: files.file_digest). A compressed report whose record has no report_xz
    cannot be checked so: UNHASHED (`kernlog compress` records it). A plain report saved
    before kernlog recorded hashes is checked by size alone."""
    damage = glance(folder, ncu)
    path = stored_file(folder, ncu)
    if damage or not path.is_file():
        return damage
    want = _recorded(path, ncu)[1]
    if path.name != ncu.report and want is None:
        return Damage(path, UNHASHED, "has no sha256 in its profile's record (ncu.report_xz): it was compressed "
                                      "before kernlog recorded one")
    if want is not None and file_digest(path)[1] != want:
        return Damage(path, REPLACED, "has the recorded size but another sha256 (other bytes)")
    return None
