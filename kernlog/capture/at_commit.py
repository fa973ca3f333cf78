"""`kernlog profile KERNEL --at REF` and `--range A..B`: the revisions as past commits had them.

Each commit's tree is exported from git's objects into a temporary folder (export: the work
tree is never touched) and profiled there by a `kernlog profile` process of its own: today's tool
on that commit's kernels/. Its profiles then move under
profiles/<gpu>/<kernel>/at/<commit:12>/, beside today's, which they never replace;
`kernlog history` lists them with the committed versions, by the date of the commit
profiled.

Before any GPU work the commits are planned on the CPU: --range visits only the commits
that change a file under the kernels folder (source_paths), and each commit profiles only
the revisions whose (name, source hash) no profile on this GPU has yet -- today's, an at/
entry, or an older commit of the range. On a host with several GPUs the commits are
profiled side by side, one per GPU (kernlog.run.fanout). A commit whose process fails (a
revision that does not build or fails the gate, kernels written for an older tool) is
recorded in at/<commit:12>/failed.json and skipped; --range goes on with the next.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from kernlog import config
from kernlog.capture import provenance
from kernlog.capture.profiler import Options, require_gpu
from kernlog.errors import KernlogError
from kernlog.run import fanout
from kernlog.store import gitrefs, keys
from kernlog.store import profiles as store
from kernlog.store.record import Profile

FAILED = keys.FAILED
# What of a commit's tree a revision's hash can cover is the kernels folder ([tool.kernlog]
# kernels): the operator folders and the shared code beside them. The tool's own files in a hash
# (identity.KIND_FILES, kl_cuda.cuh, kernlog.tuning) are today's tool's: the commit's copies never run.


def source_paths(root: Path) -> tuple[str, ...]:
    lay = config.layout(root)
    return (lay.rel(lay.kernels),)
# The processes for a commit start here, so that `kernlog` is today's tool (installed or this
# checkout), never the copy inside the commit's tree.
TOOL_HOME = Path(__file__).resolve().parents[2]


def commits(root: Path, spec: str, paths: tuple[str, ...] | None = None) -> list[str]:
    """The commits `spec` names, oldest first: one ref, or A..B as git reads it (B's
    ancestors that are not A's) that change a file under `paths` (default: the kernels folder)."""
    paths = paths or source_paths(root)
    if ".." in spec:
        a, _, b = spec.partition("..")
        base, tip = gitrefs.resolve(root, a or "HEAD"), gitrefs.resolve(root, b or "HEAD")
        out = gitrefs.git(root, "rev-list", "--reverse", f"{base}..{tip}", "--", *paths).split()
        if not out:
            raise KernlogError(f"{spec} holds no commit that changes {', '.join(paths)} (is {a} an ancestor of {b}?)")
        return out
    return [gitrefs.resolve(root, spec)]


def require_one(at: str | None, range_: str | None) -> str:
    if at and range_:
        raise KernlogError("give --at REF or --range A..B, not both")
    if range_ and ".." not in range_:
        raise KernlogError(f"--range {range_!r}: expected A..B (--at names one commit)")
    return at or range_


at_dir = keys.at_dir


def known(root: Path, gpu: str, kernel: str) -> set[tuple[str, str]]:
    """(revision, source hash) of every profile on this GPU: today's and every at/ entry.
    A hash alone names no revision: a kernel's torch and torch_compile share their op's."""
    folder = store.kernel_dir(root, gpu, kernel)
    out = set()
    for path in [*folder.glob("*.json"), *folder.glob("at/*/*.json")]:
        try:
            prof = Profile.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KernlogError):  # not a profile (failed.json), or a broken one
            continue
        if isinstance(prof.source_sha256, str):
            out.add((prof.revision, prof.source_sha256))
    return out


def tree_hashes(tree: Path, kernel: str) -> dict[str, str] | None:
    """revision -> source hash, as today's tool reads `tree`'s kernels/ (a process of its
    own: each tree's kernels package is a different module of one name); None where that
    tree's kernel does not load."""
    code = ("import json, sys; from pathlib import Path; from kernlog.registry import load_kernel; "
            "k = load_kernel(Path(sys.argv[1]), sys.argv[2]); "
            "print(json.dumps({r.name: r.sha256() for r in k.revisions}))")
    done = subprocess.run([sys.executable, "-c", code, str(tree), kernel], capture_output=True, text=True,
                          cwd=TOOL_HOME, timeout=300)
    try:
        return json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else None
    except (ValueError, IndexError):
        return None


def export(root: Path, commit: str, dest: Path) -> None:
    """`commit`'s tree at `dest` but profiles/ and every .ncu-rep (data no revision runs), from
    git's objects, through an index of its own (the repository's index and work tree
    untouched). Only the blobs written are read: a partial clone without the reports
    (`git clone --filter=blob:limit=1m`) fetches nothing."""
    with tempfile.TemporaryDirectory(prefix="kernlog-index-") as tmp:
        env = dict(os.environ, GIT_INDEX_FILE=str(Path(tmp) / "index"))
        top = Path(gitrefs.git(root, "rev-parse", "--show-toplevel").strip())
        inside = gitrefs.git(root, "rev-parse", "--show-prefix").strip()  # root's folder in the repository

        def git(*args, data=None):
            return gitrefs.git(top, *args, binary=True, env=env, data=data, timeout=None,
                               what=f"{args[0]} {commit[:12]}")

        git("read-tree", f"{commit}:{inside}" if inside else commit)
        files = [f for f in git("ls-files", "-z").split(b"\0")
                 if f and not f.startswith(b"profiles/") and not f.endswith(b".ncu-rep")]
        git("checkout-index", "-z", "--stdin", f"--prefix={dest}/", data=b"\0".join(files))
    keys.profiles_dir(dest).mkdir(exist_ok=True)


def _run(cmd: list[str], env: dict, timeout: float) -> tuple[int, str]:
    return fanout.run(cmd, env, timeout, cwd=TOOL_HOME)


def profile_at(root: Path, kernel: str, commit: str, gpu: str, args: list[str], progress: Callable[[str], None],
               run=_run, timeout: float = 3600.0, env: dict | None = None) -> list[Path]:
    """Profile `kernel` as `commit` had it (`args`: profile's options) into at/<commit:12>/;
    the JSONs written there. A failed process is recorded there (failed.json), not raised.
    `env`: more of the process's environment (the GPU it may use)."""
    dest = at_dir(root, gpu, kernel, commit)
    with tempfile.TemporaryDirectory(prefix="kernlog-at-") as tmp:
        tree = Path(tmp)
        export(root, commit, tree)
        ceilings = keys.ceilings_json(root, gpu)
        if ceilings.exists():
            keys.gpu_dir(tree, gpu).mkdir(parents=True)
            shutil.copy(ceilings, keys.ceilings_json(tree, gpu))
        cmd = [sys.executable, "-m", "kernlog", "--root", str(tree), "profile", kernel, *args, "--gpus", "1"]
        code, out = run(cmd, dict(os.environ, KERNLOG_COMMIT=commit, **(env or {})), timeout)
        made = keys.kernel_dir(tree, gpu, kernel)
        files = sorted(p for p in made.iterdir() if p.is_file()) if made.is_dir() else []
        if code != 0:
            lines = [ln for ln in out.splitlines() if ln.strip()]
            progress(f"{commit[:12]}: not profiled ({lines[-1] if lines else f'exit {code}'}); recorded and skipped")
            dest.mkdir(parents=True, exist_ok=True)
            store.write_atomic(keys.at_failed(root, gpu, kernel, commit),
                               store.dump_json({"commit": commit, "exit": code, "output": lines[-20:]}))
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
        keys.at_failed(root, gpu, kernel, commit).unlink(missing_ok=True)
    progress(f"{commit[:12]}: {len(written)} profile(s) in {dest.relative_to(root)}")
    return written


def plan(root: Path, kernel: str, commits_: list[str], gpu: str, revs=(), hashes=tree_hashes,
         progress: Callable[[str], None] = print, force: bool = False) -> list[tuple[str, list[str] | None]]:
    """(commit, the revisions to profile there) for each commit with something new, oldest
    first: a revision (of `revs`, if given) is profiled at the first commit where its
    (name, source hash) has no profile on this GPU (with `force`: none in these commits).
    None: the commit's hashes could not be read (its kernels do not load with today's tool);
    its process is left to say why."""
    seen = set() if force else known(root, gpu, kernel)
    out = []
    for commit in commits_:
        with tempfile.TemporaryDirectory(prefix="kernlog-plan-") as tmp:
            export(root, commit, Path(tmp))
            found = hashes(Path(tmp), kernel)
        if found is None:
            out.append((commit, list(revs) or None))
            continue
        new = [r for r, sha in found.items() if (not revs or r in revs) and (r, sha) not in seen]
        if not new:
            progress(f"{commit[:12]}: every revision already profiled at its source hash")
            continue
        seen |= {(r, found[r]) for r in new}
        out.append((commit, new))
    return out


def profile_commits(root: Path, kernel: str, at: str | None, range_: str | None, opts: Options | None = None,
                    revs: Sequence[str] = (), progress: Callable[[str], None] = print, run=_run,
                    gpu: str | None = None, gpus: list[str] | None = None, hashes=tree_hashes) -> list[Path]:
    """profile_at for the commit --at names or each commit of --range with a revision to
    profile (plan), oldest first, side by side on `gpus` (default: one, the first visible);
    `opts` the profile options each commit's process is given (Options.to_argv), `revs` the
    revisions asked for (default: every one)."""
    opts = opts or Options()
    spec = require_one(at, range_)
    if gpu is None:
        require_gpu()
        gpu = provenance.gpu_info()["slug"]
    gpus = gpus if gpus is not None else (fanout.visible_gpus() or ["0"])[:1]
    jobs = plan(root, kernel, commits(root, spec), gpu, revs, hashes, progress, opts.force)
    if not jobs:
        return []
    progress(f"{len(jobs)} commit(s) to profile on {len(gpus)} GPU(s)")
    argv = opts.to_argv()

    def work(job, device):
        commit, revs = job
        progress(f"commit {commit[:12]}: {', '.join(revs) if revs else 'every revision'} (GPU {device})")
        args = [a for r in revs or () for a in ("--rev", r)] + argv
        return profile_at(root, kernel, commit, gpu, args, progress, run, env=fanout.child_env(device, len(gpus)))

    return [p for written in fanout.on_gpus(jobs, gpus, work) for p in written]
