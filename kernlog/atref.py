"""`kernlog profile KERNEL --at REF` and `--range A..B`: the revisions as past commits had them.

Each commit's tree is exported with `git archive` into a temporary folder (the work tree is
never touched) and profiled there by a `kernlog profile` process of its own: today's tool
on that commit's kernels/. Its profiles then move under
profiles/<gpu>/<kernel>/at/<commit:12>/, beside today's, which they never replace;
`kernlog history` lists them with the committed versions, by the date of the commit
profiled. A revision whose source hash already has a profile on this GPU (today's or an
at/ entry) is skipped. A commit whose process fails (a revision that does not build or
fails the gate, kernels written for an older tool) is recorded in at/<commit:12>/failed.json
and skipped; --range goes on with the next.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import gitrefs, store
from .errors import KernlogError

FAILED = "failed.json"


def commits(root: Path, spec: str) -> list[str]:
    """The commits `spec` names, oldest first: one ref, or A..B as git reads it (B's
    ancestors that are not A's)."""
    if ".." in spec:
        a, _, b = spec.partition("..")
        base, tip = gitrefs.resolve(root, a or "HEAD"), gitrefs.resolve(root, b or "HEAD")
        out = gitrefs.git(root, "rev-list", "--reverse", f"{base}..{tip}").split()
        if not out:
            raise KernlogError(f"{spec} holds no commit (is {a} an ancestor of {b}?)")
        return out
    return [gitrefs.resolve(root, spec)]


def require_one(at: str | None, range_: str | None) -> str:
    if at and range_:
        raise KernlogError("give --at REF or --range A..B, not both")
    if range_ and ".." not in range_:
        raise KernlogError(f"--range {range_!r}: expected A..B (--at names one commit)")
    return at or range_


def at_dir(root: Path, gpu: str, kernel: str, commit: str) -> Path:
    return store.kernel_dir(root, gpu, kernel) / "at" / commit[:12]


def known_hashes(root: Path, gpu: str, kernel: str) -> set[str]:
    """Source hashes already profiled on this GPU: today's profiles and every at/ entry."""
    folder = store.kernel_dir(root, gpu, kernel)
    out = set()
    for path in [*folder.glob("*.json"), *folder.glob("at/*/*.json")]:
        try:
            sha = json.loads(path.read_text()).get("source_sha256")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(sha, str):
            out.add(sha)
    return out


def export(root: Path, commit: str, dest: Path) -> None:
    """`commit`'s tree but profiles/ at `dest`, from git's objects; profiles/ holds only this
    GPU's ceilings, copied, so the process measures none it already has."""
    tar = dest / ".tree.tar"
    with open(tar, "wb") as f:
        done = subprocess.run(["git", "archive", "--format=tar", commit, "--", ".", ":(exclude)profiles"],
                              cwd=root, stdout=f, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise KernlogError(f"git archive {commit[:12]} failed: {done.stderr.decode(errors='replace').strip()}")
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()
    (dest / "profiles").mkdir(exist_ok=True)


def _run(cmd: list[str], env: dict, timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"no result in {timeout:.0f} s"
    return done.returncode, done.stdout + done.stderr


def profile_at(root: Path, kernel: str, commit: str, gpu: str, args: list[str], progress: Callable[[str], None],
               run=_run, timeout: float = 3600.0) -> list[Path]:
    """Profile `kernel` as `commit` had it (`args`: profile's options) into at/<commit:12>/;
    the JSONs written there. A failed process is recorded there (failed.json), not raised."""
    dest = at_dir(root, gpu, kernel, commit)
    with tempfile.TemporaryDirectory(prefix="kernlog-at-") as tmp:
        tree = Path(tmp)
        export(root, commit, tree)
        ceilings = root / "profiles" / gpu / "ceilings.json"
        if ceilings.exists():
            (tree / "profiles" / gpu).mkdir(parents=True)
            shutil.copy(ceilings, tree / "profiles" / gpu / "ceilings.json")
        skip = [a for sha in sorted(known_hashes(root, gpu, kernel)) for a in ("--skip-hash", sha)]
        cmd = [sys.executable, "-m", "kernlog", "--root", str(tree), "profile", kernel, *args, *skip]
        code, out = run(cmd, dict(os.environ, KERNLOG_COMMIT=commit), timeout)
        made = tree / "profiles" / gpu / kernel
        files = sorted(p for p in made.iterdir() if p.is_file()) if made.is_dir() else []
        if code != 0:
            lines = [ln for ln in out.splitlines() if ln.strip()]
            progress(f"{commit[:12]}: not profiled ({lines[-1] if lines else f'exit {code}'}); recorded and skipped")
            dest.mkdir(parents=True, exist_ok=True)
            store.write_atomic(dest / FAILED, store.dump_json({"commit": commit, "exit": code, "output": lines[-20:]}))
            return []
        if not files:
            progress(f"{commit[:12]}: every revision already profiled at its source hash")
            return []
        dest.mkdir(parents=True, exist_ok=True)
        for p in files:  # reports first: a JSON never names a report not yet there
            if not p.name.endswith(".json"):
                shutil.copyfile(p, dest / p.name)
        written = []
        for p in files:
            if p.name.endswith(".json"):
                store.write_atomic(dest / p.name, p.read_bytes())
                written.append(dest / p.name)
        (dest / FAILED).unlink(missing_ok=True)
    progress(f"{commit[:12]}: {len(written)} profile(s) in {dest.relative_to(root)}")
    return written


def profile_args(revs=(), shape=None, dtype=None, force=False, clock_control="none", cache_control="all",
                 sections=()) -> list[str]:
    """`kernlog profile`'s options as the process for one commit takes them."""
    return ([a for r in revs for a in ("--rev", r)] + (["--shape", "x".join(map(str, shape))] if shape else [])
            + (["--dtype", dtype] if dtype else []) + (["--force"] if force else [])
            + ["--clock-control", clock_control, "--cache-control", cache_control]
            + [a for sec in sections for a in ("--section", sec)])


def profile_commits(root: Path, kernel: str, at: str | None, range_: str | None, opts: dict,
                    progress: Callable[[str], None] = print, run=_run, gpu: str | None = None) -> list[Path]:
    """profile_at for the commit --at names or each commit of --range, oldest first; `opts`
    are profile_args' keywords."""
    from . import provenance

    spec = require_one(at, range_)
    args = profile_args(**opts)
    if gpu is None:
        from .profiler import require_gpu

        require_gpu()
        gpu = provenance.gpu_info()["slug"]
    written = []
    for i, commit in enumerate(commits(root, spec), 1):
        progress(f"commit {commit[:12]} ({i})")
        written += profile_at(root, kernel, commit, gpu, args, progress, run)
    return written
