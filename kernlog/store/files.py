"""Files under profiles/ written whole or not at all: atomic writes and moves, the lock a
folder's savers take turns on, and the digests that verify a report."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a profile is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(obj) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()



_DIGESTS: dict = {}  # (path, size, mtime_ns, inode) -> digest: a report shared by many profiles is read once


def file_digest(path: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file; read once per process while its size, mtime and
    inode stay the same (a file changed in the last seconds is read each time: the mtime's
    granularity could hide a second change)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = _digest(path)
    if time.time() - st.st_mtime > 2:
        _DIGESTS[key] = digest
    return digest


def _digest(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _copy_atomic(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _move_in(report_tmp: Path, dst: Path) -> None:
    """`report_tmp` at `dst`, on disk, atomically (copied where ncu wrote it on another file system)."""
    with open(report_tmp, "rb") as f:
        os.fsync(f.fileno())  # on disk before any JSON names it
    try:
        os.replace(report_tmp, dst)
        os.chmod(dst, 0o644)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        _copy_atomic(report_tmp, dst)
        report_tmp.unlink()



@contextlib.contextmanager
def folder_lock(folder: Path):
    """`folder` (made if missing) to this process alone while the block runs: saves from
    processes profiling side by side take turns (an advisory lock on the folder itself)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


