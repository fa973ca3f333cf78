"""What `kernlog list` needs of each stored profile: which revision it is, where and at what
source hash it was measured, and whether its report file looks whole. Each is read from its
JSON as load_profile verifies it; while kernlog.snapshot.held(), it is kept on disk
(kernlog.memo) until the JSON changes, so a listing after an edit reads only the profiles
that changed. The report file is glanced at afresh every time (reportfiles.glance: a stat).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kernlog import memo, spec
from kernlog.store import files, keys, record, reportfiles
from kernlog.store import profiles as store
from kernlog.store.profiles import ProfileError


@dataclass(frozen=True)
class Summary:
    path: str  # the JSON, relative to the root
    gpu: str  # the GPU's slug
    kernel: str
    revision: str
    shape: tuple
    dtype: str
    source_sha256: str
    report: str  # the report's name, as recorded
    hashed: bool  # whether the report's sha256 is recorded (store.report_hashed)
    damaged: bool  # whether the report file is missing or of another size (reportfiles.glance)


def _read(root: Path, path: Path) -> dict:
    prof = store.load_profile(root, path)
    ncu = {k: v for k, v in prof.ncu.to_dict().items() if k in record.Ncu.NAMES}
    return {"gpu": prof.gpu.slug, "kernel": prof.kernel, "revision": prof.revision, "shape": list(prof.shape),
            "dtype": prof.dtype, "source_sha256": prof.source_sha256, "ncu": ncu}


def summaries(root: Path) -> Iterator[Summary | ProfileError]:
    """A Summary of every stored profile, in path order; a file that fails load_profile is
    yielded as its ProfileError in its place (never kept)."""
    code = [Path(m.__file__) for m in (record, store, keys, reportfiles, files, spec)] + [Path(__file__)]
    for path in keys.glob_profiles(root):
        try:
            got = memo.kept("profile_summaries", code, os.path.abspath(path),
                            lambda path=path: (_read(root, path), [path]))
        except ProfileError as err:
            yield err
            continue
        ncu = record.Ncu.from_dict(got["ncu"])
        yield Summary(os.path.relpath(path, root), got["gpu"], got["kernel"], got["revision"], tuple(got["shape"]),
                      got["dtype"], got["source_sha256"], ncu.report, bool(ncu.report_sha256),
                      reportfiles.glance(path.parent, ncu) is not None)
