"""Profiles as git holds them: a profile's JSON at any commit, and the commits that changed it.

Every committed version of a profile is an entry of its revision's history (`kernlog
history`), and a side of a diff may name one: `REF:KERNEL/REV[@SELECTOR]`. Read-only: git
objects are read with `git show`, the work tree is never touched. A profile read from a
commit is checked as `store.load_profile` checks one (fields, types, finite samples) and its
report by the size git records for it (a compressed report, <report>.xz, by its presence); its
sha256 is not recomputed (that would read every report blob of the history).
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.store import profiles as store
from kernlog.store.keys import TRIAGE_FOLDER, XZ
from kernlog.store.record import Profile


def _run(root: Path, args: tuple, binary: bool, env: dict | None, data, timeout: float):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=not binary, timeout=timeout, env=env,
                          input=data)


def git(root: Path, *args: str, binary: bool = False, env: dict | None = None, data=None, timeout: float = 60,
        what: str | None = None):
    """git's stdout in `root` (bytes where `binary`; `data` its stdin). The one place kernlog runs
    git. Raises KernlogError where git is missing or fails: "git WHAT failed: <git's last line>"
    (WHAT: the first two arguments unless given)."""
    try:
        done = _run(root, args, binary, env, data, timeout)
    except FileNotFoundError:
        raise KernlogError("git is not installed: naming a commit needs git") from None
    if done.returncode != 0:
        err = done.stderr if not binary else done.stderr.decode(errors="replace")
        what = what or " ".join(args[:2])
        raise KernlogError(f"git {what} failed: {(err.strip().splitlines() or ['no output'])[-1]}")
    return done.stdout


def git_or_none(root: Path, *args: str, timeout: float = 30) -> str | None:
    """git's stdout in `root`, stripped; None where git is missing, times out or fails (no
    repository there): for what is best effort (provenance), never an error."""
    try:
        done = _run(root, args, False, None, None, timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def resolve(root: Path, ref: str) -> str:
    """The full commit id `ref` names; one line naming the ref where git knows none."""
    if not ref or ref.startswith("-"):
        raise KernlogError(f"bad git ref {ref!r}")
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except KernlogError:
        if git_or_none(root, "rev-parse", "--git-dir") is None:
            raise KernlogError(f"{root} is no git repository, so {ref!r} names nothing: `git init` there and "
                               "commit first") from None
        if git_or_none(root, "rev-parse", "--verify", "--quiet", "HEAD") is None:
            raise KernlogError(f"{ref!r} names no commit: the repository has none yet (`git commit` makes the "
                               "first)") from None
        raise KernlogError(f"{ref!r} names no commit of this repository (`git log` lists them)") from None


_SHA = re.compile(r"[0-9a-f]{40}")


def _once_per_commit(fn):
    """`fn(root, commit)` read once per process for a full commit id (its objects never change;
    a ref such as HEAD may move, and is read each time)."""
    cached = functools.lru_cache(maxsize=None)(fn)

    @functools.wraps(fn)
    def call(root: Path, commit: str):
        return cached(root, commit) if _SHA.fullmatch(commit) else fn(root, commit)
    return call


@_once_per_commit
def _paths(root: Path, commit: str) -> tuple[tuple[str, int], ...]:
    out = []
    for line in git(root, "ls-tree", "-r", "-l", commit, "--", "profiles/").splitlines():
        meta, _, path = line.partition("\t")
        size = meta.split()[3]
        out.append((path, int(size) if size.isdigit() else -1))
    return tuple(out)


def paths(root: Path, commit: str) -> dict[str, int]:
    """{path: size} of every file under profiles/ at `commit` (`kernlog history` asks once per
    revision for the same commits: read once per commit)."""
    return dict(_paths(root, commit))


@_once_per_commit
def commit_date(root: Path, commit: str) -> str | None:
    """The committer date of `commit` (ISO 8601), or None where git knows no such commit (a
    shallow clone) or `commit` names no object but a ref: "HEAD", which old profiles recorded,
    would date the entry at today's HEAD, moving with every commit."""
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}", commit):
        return None
    try:
        return git(root, "show", "-s", "--format=%cI", commit).strip() or None
    except KernlogError:
        return None


def profiles_at(root: Path, commit: str, kernel: str | None = None, revision: str | None = None) -> list[Profile]:
    """Every profile `commit` stored (of `kernel`, of `revision`), each checked by load_at:
    the JSONs of profiles/<gpu>/<kernel>/, not those of its noise/ or at/ folders (nor triage's)."""
    sizes = paths(root, commit)
    wanted = []
    for path in sorted(sizes):
        parts = Path(path).parts
        if (len(parts) == 4 and path.endswith(".json") and kernel in (None, parts[2])
                and not any(part.startswith(".") for part in parts)  # hidden: never a profile (keys.hidden)
                and parts[2] != TRIAGE_FOLDER and (revision is None or parts[3].startswith(f"{revision}."))):
            wanted.append(path)
    bodies = _batch(root, [f"{commit}:./{path}" for path in wanted])  # one git for them all, not one each
    return [load_at(root, commit, path, sizes, body) for path, body in zip(wanted, bodies, strict=True)]


def held(root: Path, paths: list[str]) -> set[str] | None:
    """Which of `paths` (relative to `root`) git's index holds, so that `git checkout -- PATH`
    restores them; None where git cannot say (not installed, no repository)."""
    if not paths:
        return set()
    out = git_or_none(root, "ls-files", "--", *paths)
    return None if out is None else set(out.splitlines())


def log(root: Path, path: str) -> list[tuple[str, str]]:
    """(commit, committer date) of every commit that changed `path`, oldest first."""
    text = git(root, "log", "--format=%H%x09%cI", "--", path)
    return [tuple(line.split("\t")) for line in reversed(text.splitlines()) if line]


def blobs(root: Path, commits: list[str], path: str) -> dict[str, bytes]:
    """The bytes of `path` at each of `commits` that holds it, read by one `git cat-file --batch`
    (a `git show` each took 2 of the 5 s `kernlog report` spent collecting this repository's
    histories); a commit git holds no file for is left out (load_at's `git show` names why)."""
    return {c: body for c, body in zip(commits, _batch(root, [f"{c}:./{path}" for c in commits]), strict=True)
            if body is not None}


def _batch(root: Path, names: list[str]) -> list[bytes | None]:
    """The bytes of each blob `names` names ("COMMIT:./PATH"), by one `git cat-file --batch`; None
    for a name git holds no blob for."""
    if not names:
        return []
    out = git(root, "cat-file", "--batch", binary=True, data="".join(f"{n}\n" for n in names).encode())
    found, at = [], 0
    for _ in names:  # each answer: "<sha> <type> <size>\n<bytes>\n", or "<name> missing\n"
        end = out.index(b"\n", at)
        header, at = out[at:end].split(), end + 1
        body = None
        if len(header) == 3 and header[2].isdigit():
            size = int(header[2])
            if header[1] == b"blob":
                body = out[at:at + size]
            at += size + 1
        found.append(body)
    return found


def load_at(root: Path, commit: str, path: str, sizes: dict[str, int] | None = None,
            body: bytes | None = None) -> Profile:
    """The profile stored at `path` in `commit`, checked; its path is "COMMIT:path" (short
    commit) and its commit the full id. `body`: its bytes where already read (blobs)."""
    where = f"{commit[:10]}:{path}"
    try:
        data = json.loads(git(root, "show", f"{commit}:./{path}", binary=True) if body is None else body)
    except ValueError as exc:
        raise KernlogError(f"cannot read profile {where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != store.SCHEMA:
        raise KernlogError(f"{where} is not a kernlog profile (schema {store.SCHEMA})")
    problem = store.record_problem(data)
    if problem:
        raise KernlogError(f"{where} {problem}")
    prof = Profile.from_checked(data)
    report = str(Path(path).parent / prof.ncu.report)
    if sizes is None:
        sizes = paths(root, commit)
    if report not in sizes and f"{report}{XZ}" in sizes:  # stored compressed: its presence is the check
        pass
    elif sizes.get(report) != prof.ncu.report_bytes:
        recorded = prof.ncu.report_bytes
        what = "missing" if report not in sizes else f"{sizes[report]} bytes, the profile recorded {recorded}"
        raise KernlogError(f"{commit[:10]}:{report}, the ncu report {where} names, is {what}")
    prof.path, prof.commit = where, commit
    return prof
