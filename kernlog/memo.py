"""What a read-only command derives from files, kept on disk between commands and reused while
every file it was derived from keeps its stamp (size, modification and change times, inode):
`kernlog list`, run after every edit, reads again only the profiles, bench files and sources
that changed since the last run.

Used only while kernlog.snapshot.held() (the repository held still for a command that only
reads it); a command that writes (profile, bench) derives everything afresh. Kept in
$KERNLOG_CACHE, else $XDG_CACHE_HOME/kernlog, else ~/.cache/kernlog: one JSON a table, keyed
by absolute paths (as found, links not followed); KERNLOG_CACHE=off keeps nothing. A table
belongs to the kernlog that wrote it: two installs (two checkouts of kernlog itself) drop
each other's tables.

Nothing here is trusted over the files:
- a file changed in the last RACY seconds is never kept (a second edit within the same clock
  tick could leave the same stamp), judged by its change time too, which no tool sets back (one
  replaced while the value was derived, its old mtime kept, is too recent to keep);
- a table is dropped whole where one of the tool's own files that derive it changed;
- a missing, unreadable or foreign table is an empty one, and one that cannot be written
  (a read-only home) is left as it was.
"""
from __future__ import annotations

import atexit
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kernlog import snapshot

RACY = 2.0  # seconds
VERSION = 1
_tables: dict[str, Table] = {}


def folder() -> Path | None:
    """Where the tables are; None where KERNLOG_CACHE=off."""
    env = os.environ.get("KERNLOG_CACHE")
    if env == "off":
        return None
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernlog"


def stamp(path: Path) -> list | None:
    """[size, mtime_ns, ctime_ns, inode] of a file or folder; None where it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class Table:
    """key -> [value, [[path, stamp], ...]]: a value derived from those files (or folders)."""

    def __init__(self, name: str, code: Iterable[Path]):
        where = folder()
        self.path = where / f"{name}.json" if where else None
        self.code = [[str(p), stamp(p)] for p in code]
        self.entries: dict = {}
        self.dirty = False
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") == VERSION and data.get("code") == self.code:
                self.entries = data["entries"]
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            pass

    def get(self, key: str, compute: Callable[[], tuple[object, Iterable[Path]]]):
        """The value kept under `key` while each file it was derived from keeps its stamp, else
        compute() -> (value, the files it read), kept where none of them is racy. The value must
        survive JSON as it is (lists, dicts with str keys, str, numbers)."""
        entry = self.entries.get(key)
        if entry is not None and all(stamp(p) == s for p, s in entry[1]):
            return entry[0]
        value, deps = compute()
        stamps = [[str(p), stamp(p)] for p in deps]
        recent = time.time_ns() - int(RACY * 1e9)
        if self.path is not None and all(s is not None and max(s[1], s[2]) < recent for _, s in stamps):
            self.entries[key] = [value, stamps]
            self.dirty = True
        return value

    def save(self) -> None:
        if not (self.dirty and self.path):
            return
        live = {k: e for k, e in self.entries.items() if all(stamp(p) == s for p, s in e[1])}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "code": self.code, "entries": live}, f)
            os.replace(tmp, self.path)
        except OSError:
            pass
        self.dirty = False


def table(name: str, code: Iterable[Path]) -> Table:
    """The process's one Table `name`, saved when the process exits; `code`: the tool's own files
    that derive its values (any of them changed: the table starts empty)."""
    if name not in _tables:
        _tables[name] = Table(name, code)
    return _tables[name]


def kept(name: str, code: Iterable[Path], key: str, compute: Callable[[], tuple[object, Iterable[Path]]]):
    """table(name, code).get(key, compute) while kernlog.snapshot.held(); elsewhere compute()'s
    value, no table read or kept (a command that writes derives everything afresh)."""
    if not snapshot.holding():
        return compute()[0]
    return table(name, code).get(key, compute)


@atexit.register
def _save_all() -> None:
    for t in _tables.values():
        t.save()
