"""lzma for stored reports: a .ncu-rep compressed in place, verified before the original goes,
and decompressed with its size and sha256 counted on the way (the layer under
kernlog.store.reports and save_profiles; no knowledge of profiles here)."""
from __future__ import annotations

import hashlib
import lzma
import os
import tempfile
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.store.files import file_digest
from kernlog.store.keys import compressed

CHUNK = 1 << 20


def _decompress_to(src: Path, out) -> tuple[int, str]:
    """Decompress `src` into the open binary file `out`; (size, sha256) of what was written.
    Raises lzma.LZMAError or EOFError for a corrupt or truncated file."""
    h, size = hashlib.sha256(), 0
    with lzma.open(src, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
    return size, h.hexdigest()


def _write_temp(folder: Path, name: str, fill) -> Path:
    """A hidden temporary file in `folder` (removed by the next save's tidy if left) written by `fill(f)`."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _holds(xz: Path, digest: tuple[int, str]) -> bool:
    """Whether the .xz at `xz` decompresses to bytes of this (size, sha256)."""
    try:
        return xz.is_file() and _decompress_to(xz, None) == digest
    except (lzma.LZMAError, EOFError):
        return False


# LZMA2's fastest preset with a dictionary that spans a whole report: a report repeats itself across
# its revisions (the same sections, metric names and source), megabytes apart. The softmax ladder's
# 14-revision report (37.7 MB) on the 2-core machine: preset 6 (an 8 MB dictionary) 1.06 MB in
# 12.2 s, this 1.29 MB in 1.4 s, which `kernlog profile` waited for after its ncu pass.
FILTERS = ({"id": lzma.FILTER_LZMA2, "preset": 1, "dict_size": 64 << 20},)


def compress(path: Path, filters=FILTERS) -> Path:
    """`path` (a .ncu-rep) as `path`.xz, written atomically and verified by decompressing it
    (size and sha256 equal the original's) before the original is removed; the .xz path. An
    .xz already there that holds the same bytes is kept as it is (its own hash, which
    profiles may have recorded, stays the same)."""
    path = Path(path)
    dst = compressed(path)
    size, sha = file_digest(path)
    if _holds(dst, (size, sha)):
        path.unlink()
        return dst

    def fill(f):
        with open(path, "rb") as src, lzma.LZMAFile(f, "wb", filters=list(filters)) as z:
            while chunk := src.read(CHUNK):
                z.write(chunk)

    tmp = _write_temp(path.parent, dst.name, fill)
    try:
        if _decompress_to(tmp, None) != (size, sha):
            raise KernlogError(f"{path}: its compressed copy does not decompress to the same bytes; left as it was")
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    path.unlink()
    return dst
