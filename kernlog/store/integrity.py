"""Whether the ncu report files under profiles/ are the ones their profiles recorded, said one
line per file with the command that restores it.

`report --check` (check_stored) hashes every stored report file, today's and the at/ entries',
against its records (kernlog.store.reportfiles.inspect: a compressed one by its .xz's own
sha256, nothing decompressed). `list` and `compare` (notes) and the lookup behind `show` and
`diff` (note) glance by size alone: they read the JSONs, so a lost report is a note, never
their error. Each line ends with the fix: the re-profile that makes the report again, and the
`git checkout` that restores it, naming the form git's index holds (the .xz, where the report
is stored compressed), or none where git holds neither.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kernlog.spec import format_shape
from kernlog.store import gitrefs, reportfiles
from kernlog.store.keys import compressed, glob_profiles
from kernlog.store.profiles import ProfileError, load_profile, path_ident
from kernlog.store.record import Profile
from kernlog.store.reportfiles import Damage

READ_ANYWAY = "read from the JSON all the same (`kernlog open` needs the report)"


def _rel(root: Path, path: Path) -> str:
    """`path` relative to `root` where it is inside (a profile read from another checkout: as it is)."""
    for base, where in ((Path(root), path), (Path(root).resolve(), path.resolve())):
        if where.is_relative_to(base):
            return str(where.relative_to(base))
    return str(path)


def _other_form(path: Path) -> Path:
    """The report's other file name: the .xz of a plain one, the plain one of an .xz."""
    return path.with_name(path.name[:-len(".xz")]) if path.name.endswith(".xz") else compressed(path)


def restore_file(root: Path, damage: Damage, held: set[str] | None) -> str | None:
    """The file, relative to `root`, that `git checkout --` restores for `damage`: the form git's
    index holds (`held`: gitrefs.held), the damaged one first; where git cannot say, the one the
    record names as stored; None where git holds neither."""
    rel = [_rel(root, p) for p in (damage.path, _other_form(damage.path))]
    if held is None:
        return rel[0]
    return next((p for p in rel if p in held), None)


def _remake(profs: list[Profile]) -> str:
    """The command that captures the report of `profs` (one kernel, shape, dtype and GPU) again."""
    p = profs[0]
    at = Path(p.path).parent.name if Path(p.path).parent.parent.name == "at" else None
    revs = " ".join(f"--rev {r}" for r in sorted({q.revision for q in profs}))
    return (f"kernlog profile {p.kernel}" + (f" --at {p.git.get('commit') or at}" if at else "")
            + f" {revs} --shape {format_shape(tuple(p.shape))} --dtype {p.dtype} --force")


def line(root: Path, damage: Damage, profs: list[Profile], held: set[str] | None, also: str = "") -> str:
    """One line: what is wrong with the file, which profiles name it, (`also`,) the fix."""
    p = profs[0]
    names = ", ".join(sorted(f"{q.kernel}/{q.revision}" for q in profs))
    whose = f"named by {names} ({format_shape(tuple(p.shape))} {p.dtype} on {p.gpu.slug})"
    git = restore_file(root, damage, held)
    fix = f"re-profile on a GPU with `{_remake(profs)}`" + (
        f"; on a CPU, restore it: `git checkout -- {git}`" if git else " (git holds no copy to restore)")
    what = f" {damage.what}" if damage.what else ""
    return f"{damage.short}: {_rel(root, damage.path)}{what}, {whose}{f'; {also}' if also else ''}; {fix}"


def _held(root: Path, damaged: Iterable[Damage]) -> set[str] | None:
    paths = sorted({_rel(root, p) for d in damaged for p in (d.path, _other_form(d.path))})
    return gitrefs.held(root, paths) if paths else set()


def _grouped(root: Path, found: list[tuple[Damage, Profile]], also: str = "") -> list[str]:
    """One line per damaged file, naming every profile that names it, in path order."""
    by_file: dict[tuple, list[Profile]] = {}
    for damage, prof in found:
        by_file.setdefault((damage.path, damage.short, damage.what), []).append(prof)
    held = _held(root, (d for d, _ in found))
    return [line(root, Damage(*key), profs, held, also) for key, profs in sorted(by_file.items(), key=str)]


def refusal(root: Path, prof: Profile, damage: Damage) -> ProfileError:
    """The error of a command that needs the report's bytes (`kernlog open`), in line()'s words."""
    return ProfileError(line(root, damage, [prof], _held(root, [damage])), prof.path, damage.short,
                        path_ident((Path(root) / prof.path).resolve()))


def note(root: Path, prof: Profile) -> str | None:
    """One line where a loaded profile's report is missing or damaged by its size (as load_profile
    glanced at it), else None: what `show` and `diff` say beside the profile they read."""
    if not prof.report_problem or prof.commit:
        return None
    damage = reportfiles.glance((root / prof.path).parent, prof.ncu)
    return _grouped(root, [(damage, prof)], READ_ANYWAY)[0] if damage else None


def notes_of(root: Path, profs: list[Profile]) -> list[str]:
    """One line per report file of `profs` (loaded: load_profile glanced at each one's report)
    that is missing or damaged by its size: what `list` and `compare` say besides the profiles
    they read."""
    found = []
    for prof in profs:
        if prof.report_problem:
            damage = reportfiles.glance((root / prof.path).parent, prof.ncu)
            if damage:
                found.append((damage, prof))
    return _grouped(root, found, READ_ANYWAY)


def check_stored(root: Path) -> list[str]:
    """`report --check`'s lines: one per stored report file, today's profiles' and the at/
    entries', that is missing, of another size or sha256 than its records say, or compressed
    with no sha256 recorded (reportfiles.inspect). A profile whose JSON does not load is left to
    the log's own check, which names it."""
    found = []
    for path in [*glob_profiles(root), *glob_profiles(root, at=True)]:
        try:
            prof = load_profile(root, path)
        except ProfileError:
            continue
        damage = reportfiles.inspect(path.parent, prof.ncu)
        if damage:
            found.append((damage, prof))
    lines = _grouped(root, [(d, p) for d, p in found if d.short != reportfiles.UNHASHED])
    unhashed = sorted({_rel(root, d.path) for d, _ in found if d.short == reportfiles.UNHASHED})
    if unhashed:
        lines.append(f"{reportfiles.UNHASHED}: {len(unhashed)} compressed report(s) ({', '.join(unhashed[:3])}"
                     f"{', ...' if len(unhashed) > 3 else ''}) have no sha256 of the .xz in their profiles' records: "
                     "run `kernlog compress`, which checks each decompresses to its recorded report and records it")
    return lines
