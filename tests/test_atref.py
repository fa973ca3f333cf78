"""`kernlog profile --at/--range` on the CPU, the per-commit process faked: the commit's tree
exported (not the work tree's), only the commits that change sources visited, only the
revisions with a new (name, source hash) profiled, profiles moved under at/, a failing
commit recorded and skipped, commits spread over GPUs side by side, and history placing
the entries by the commit profiled."""
import json
import subprocess
import threading

import pytest

from kernlog.capture import at_commit
from kernlog.errors import KernlogError
from kernlog.judge import history
from kernlog.store.lookup import parse_side

from .helpers import GPU, git, git_repo, make_record, put


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setattr(at_commit, "source_paths", lambda root: ("marker.txt",))  # the scratch repository's "sources"
    return git_repo(tmp_path / "repo")


def commit(root, message, marker, path="marker.txt"):
    """A commit a minute after the last (a timeline is ordered by commit dates)."""
    import os

    n = int(git(root, "rev-list", "--count", "--all") or 0) if (root / ".git" / "refs" / "heads").exists() else 0
    (root / path).write_text(marker)
    git(root, "add", "-A")
    date = f"2026-11-20T10:{n:02d}:00+00:00"
    subprocess.run(["git", "commit", "-qm", message], cwd=root, check=True, capture_output=True,
                   env=dict(os.environ, GIT_COMMITTER_DATE=date, GIT_AUTHOR_DATE=date))
    return git(root, "rev-parse", "HEAD")


def fake_process(seen, source="o", code=0, output="", barrier=None):
    """A `kernlog profile` process for one commit: records what it was given and, when it
    succeeds, stores a profile of each --rev in its tree as the real one would."""
    def run(cmd, env, timeout):
        tree = cmd[cmd.index("--root") + 1]
        from pathlib import Path

        revs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--rev"]
        seen.append({"cmd": cmd, "commit": env["KERNLOG_COMMIT"], "marker": (Path(tree) / "marker.txt").read_text(),
                     "revs": revs, "gpu": env.get("CUDA_VISIBLE_DEVICES")})
        if barrier is not None:
            barrier.wait()  # raises BrokenBarrierError unless the other commit runs at the same time
        if code == 0:
            for r in revs:
                rec = make_record(r, median_ms=0.2)
                marker = (Path(tree) / "marker.txt").read_text()
                rec["source_sha256"] = source(marker, r) if callable(source) else source * 64
                rec["git"] = {"commit": env["KERNLOG_COMMIT"], "dirty": False}
                put(Path(tree), rec)
        return code, output
    return run


def hashes_by_marker(table, kernel_name="softmax"):
    """tree_hashes read from the tree's marker: {marker: {revision: hash}}; asked for the
    kernel being profiled, none other."""
    def hashes(tree, kernel):
        assert kernel == kernel_name, kernel
        return table[(tree / "marker.txt").read_text()]
    return hashes


def test_commits_of_a_range_oldest_first_and_one_ref(repo):
    c1, c2, c3 = (commit(repo, f"c{i}", str(i)) for i in (1, 2, 3))
    commit(repo, "docs only", "x", path="README.md")  # changes no source: not visited
    assert at_commit.commits(repo, f"{c1[:7]}..HEAD") == [c2, c3]
    assert at_commit.commits(repo, "HEAD~2") == [c2]
    with pytest.raises(KernlogError, match="holds no commit"):
        at_commit.commits(repo, f"HEAD..{c1[:7]}")
    with pytest.raises(KernlogError, match="holds no commit that changes marker.txt"):
        at_commit.commits(repo, "HEAD~1..HEAD")
    with pytest.raises(KernlogError, match="give --at REF or --range A..B, not both"):
        at_commit.profile_commits(repo, "softmax", "HEAD", "a..b", gpu=GPU["slug"])


def test_a_commit_is_profiled_from_its_own_tree_into_at(repo):
    old = commit(repo, "old", "old tree")
    new = commit(repo, "new", "new tree")
    (repo / "marker.txt").write_text("work tree, uncommitted")
    for rev in ("torch", "torch_compile"):
        now = make_record(rev, median_ms=0.1)
        now.update(source_sha256="n" * 64, git={"commit": new, "dirty": True})
        put(repo, now)
    seen = []
    # At the old commit torch had today's hash (profiled already), torch_compile another one;
    # v5_tuned is not asked for.
    hashes = hashes_by_marker({"old tree": {"torch": "n" * 64, "torch_compile": "o" * 64, "v5_tuned": "v" * 64}})
    written = at_commit.profile_commits(repo, "softmax", old[:7], None, revs=["torch", "torch_compile"],
                                    progress=lambda s: None, run=fake_process(seen), gpu=GPU["slug"], gpus=["0"],
                                    hashes=hashes)
    assert [s["marker"] for s in seen] == ["old tree"] and seen[0]["commit"] == old
    assert seen[0]["revs"] == ["torch_compile"]  # torch's (name, hash) is profiled already; v5_tuned not asked
    assert seen[0]["cmd"][seen[0]["cmd"].index("profile") + 1:][:3] == ["softmax", "--rev", "torch_compile"]
    (path,) = written
    assert path.parent == repo / "profiles" / GPU["slug"] / "softmax" / "at" / old[:12]
    assert (repo / "marker.txt").read_text() == "work tree, uncommitted"  # the work tree untouched
    t = history.timeline(repo, parse_side("softmax/torch_compile"))
    (entry,) = [e for e in t["entries"] if e["at"]]
    assert entry["at"] == old[:12] and entry["profiled_at"] == old and entry["source_sha256"] == "o" * 64
    assert t["entries"][-1]["source_sha256"] == "n" * 64  # ordered by the commit profiled: the old one first


def test_a_hash_is_profiled_once_at_its_first_commit(repo):
    c1 = commit(repo, "c1", "1")
    commit(repo, "c2", "2")
    c3 = commit(repo, "c3", "3")
    seen, said = [], []
    table = {"2": {"torch": "a" * 64, "torch_compile": "a" * 64}, "3": {"torch": "a" * 64, "torch_compile": "b" * 64}}
    hashes, stored = hashes_by_marker(table), (lambda marker, rev: table[marker][rev])
    at_commit.profile_commits(repo, "softmax", None, f"{c1}..{c3}", progress=said.append,
                          run=fake_process(seen, source=stored), gpu=GPU["slug"], gpus=["0"], hashes=hashes)
    # torch and torch_compile share a hash at c2 and are both new there; at c3 only torch_compile changed.
    assert [(s["marker"], s["revs"]) for s in seen] == [("2", ["torch", "torch_compile"]), ("3", ["torch_compile"])]
    seen.clear()
    at_commit.profile_commits(repo, "softmax", None, f"{c1}..{c3}", progress=said.append, run=fake_process(seen),
                          gpu=GPU["slug"], gpus=["0"], hashes=hashes)
    assert seen == [] and any("already profiled" in s for s in said)  # the at/ entries are known now


def test_commits_run_side_by_side_one_per_gpu(repo):
    c1 = commit(repo, "c1", "1")
    commit(repo, "c2", "2")
    c3 = commit(repo, "c3", "3")
    seen = []
    hashes = hashes_by_marker({"2": {"torch": "a" * 64}, "3": {"torch": "b" * 64}})
    written = at_commit.profile_commits(repo, "softmax", None, f"{c1}..{c3}", progress=lambda s: None,
                                    run=fake_process(seen, barrier=threading.Barrier(2, timeout=30)),
                                    gpu=GPU["slug"], gpus=["0", "1"], hashes=hashes)
    assert sorted(s["gpu"] for s in seen) == ["0", "1"] and len(written) == 2
    assert all("--gpus" in s["cmd"] and s["cmd"][s["cmd"].index("--gpus") + 1] == "1" for s in seen)


def test_a_failing_commit_is_recorded_and_the_range_goes_on(repo):
    c1 = commit(repo, "c1", "1")
    c2 = commit(repo, "c2", "2")
    c3 = commit(repo, "c3", "3")
    put(repo, make_record("torch"))
    seen = []
    ok = fake_process(seen, source="a")
    bad = fake_process(seen, code=3, output="v5_tuned: FAILED the gate\nkernlog: 1 revision(s) failed the gate")

    def run(cmd, env, timeout):
        return (bad if env["KERNLOG_COMMIT"] == c2 else ok)(cmd, env, timeout)

    unreadable = lambda tree, kernel: None  # noqa: E731 -- an old tree today's tool cannot load
    written = at_commit.profile_commits(repo, "softmax", None, f"{c1}..{c3}", revs=["torch"],
                                    progress=lambda s: None, run=run, gpu=GPU["slug"], gpus=["0"], hashes=unreadable)
    assert [s["commit"] for s in seen] == [c2, c3] and len(written) == 1
    failed = repo / "profiles" / GPU["slug"] / "softmax" / "at" / c2[:12] / at_commit.FAILED
    assert json.loads(failed.read_text())["exit"] == 3
    rows = history.timeline(repo, parse_side("softmax/torch"))["entries"]
    why = "not profiled at this commit: kernlog: 1 revision(s) failed the gate"
    assert any(why in r.get("error", "") for r in rows)


def test_tree_hashes_are_todays_tools_reading_of_a_commits_kernels(tmp_path):
    from kernlog.registry import load_kernel

    from .helpers import ROOT

    tree = tmp_path / "tree"
    tree.mkdir()
    if not git(ROOT, "ls-tree", "HEAD", "--", "kernels"):
        pytest.skip("this checkout's kernels/ is not committed (a copy, e.g. mutmut's)")
    at_commit.export(ROOT, "HEAD", tree)
    assert not list(tree.rglob("*.ncu-rep")) and list((tree / "profiles").iterdir()) == []
    got = at_commit.tree_hashes(tree, "vector_add")
    committed = {r.name for r in load_kernel(ROOT, "vector_add").revisions}
    assert set(got) == committed and all(len(h) == 64 for h in got.values())
    assert at_commit.tree_hashes(tree, "no_such_kernel") is None


def test_a_commits_process_runs_todays_kernlog(tmp_path):
    import os
    import sys

    code, out = at_commit._run([sys.executable, "-c", "import kernlog, os; print(kernlog.__file__, os.getcwd())"],
                           dict(os.environ), 60)
    path, cwd = out.split()
    assert code == 0 and cwd == str(at_commit.TOOL_HOME) and path.startswith(str(at_commit.TOOL_HOME))


def test_export_of_a_root_inside_a_larger_repository(tmp_path):
    outer = tmp_path / "outer"
    (outer / "sub" / "kernels").mkdir(parents=True)
    (outer / "sub" / "profiles").mkdir()
    (outer / "sub" / "kernels" / "k.py").write_text("x = 1\n")
    (outer / "sub" / "profiles" / "p.json").write_text("{}")
    (outer / "sub" / "r.ncu-rep").write_bytes(b"report")
    (outer / "other.txt").write_text("not the root's")
    git(outer, "init", "-q", "-b", "main")
    git(outer, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", "-A")
    git(outer, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "c")
    dest = tmp_path / "dest"
    dest.mkdir()
    at_commit.export(outer / "sub", "HEAD", dest)
    assert (dest / "kernels" / "k.py").read_text() == "x = 1\n"
    assert sorted(p.name for p in dest.iterdir()) == ["kernels", "profiles"]  # no report, no outer file
    assert list((dest / "profiles").iterdir()) == []


def test_a_commit_git_cannot_export_is_one_line_with_git_s_reason(repo, tmp_path):
    with pytest.raises(KernlogError, match=r"git read-tree 0000000000ab failed: fatal: "):
        at_commit.export(repo, "0000000000ab" + "0" * 28, tmp_path / "out")
