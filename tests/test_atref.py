"""`kernlog profile --at/--range` on the CPU, the per-commit process faked: the commit's tree
exported (not the work tree's), known source hashes passed on, profiles moved under at/,
a failing commit recorded and skipped, and history placing the entries by the commit
profiled."""
import json
import subprocess

import pytest

from kernlog import atref, history
from kernlog.errors import KernlogError
from kernlog.select import parse_side

from .helpers import GPU, git, git_repo, make_record, put


@pytest.fixture
def repo(tmp_path):
    return git_repo(tmp_path / "repo")


def commit(root, message, marker):
    """A commit a minute after the last (a timeline is ordered by commit dates)."""
    import os

    n = int(git(root, "rev-list", "--count", "--all") or 0) if (root / ".git" / "refs" / "heads").exists() else 0
    (root / "marker.txt").write_text(marker)
    git(root, "add", "-A")
    date = f"2026-11-20T10:{n:02d}:00+00:00"
    subprocess.run(["git", "commit", "-qm", message], cwd=root, check=True, capture_output=True,
                   env=dict(os.environ, GIT_COMMITTER_DATE=date, GIT_AUTHOR_DATE=date))
    return git(root, "rev-parse", "HEAD")


def fake_process(seen, source="o", code=0, output=""):
    """A `kernlog profile` process for one commit: records what it was given and, when it
    succeeds, stores a profile of torch in its tree as the real one would."""
    def run(cmd, env, timeout):
        tree = cmd[cmd.index("--root") + 1]
        from pathlib import Path

        seen.append({"cmd": cmd, "commit": env["KERNLOG_COMMIT"], "marker": (Path(tree) / "marker.txt").read_text(),
                     "skip": [cmd[i + 1] for i, a in enumerate(cmd) if a == "--skip-hash"]})
        if code == 0:
            rec = make_record("torch", median_ms=0.2)
            rec["source_sha256"] = source * 64
            rec["git"] = {"commit": env["KERNLOG_COMMIT"], "dirty": False}
            put(Path(tree), rec)
        return code, output
    return run


def test_commits_of_a_range_oldest_first_and_one_ref(repo):
    c1, c2, c3 = (commit(repo, f"c{i}", str(i)) for i in (1, 2, 3))
    assert atref.commits(repo, f"{c1[:7]}..HEAD") == [c2, c3]
    assert atref.commits(repo, "HEAD~1") == [c2]
    with pytest.raises(KernlogError, match="holds no commit"):
        atref.commits(repo, f"HEAD..{c1[:7]}")
    with pytest.raises(KernlogError, match="give --at REF or --range A..B, not both"):
        atref.profile_commits(repo, "softmax", "HEAD", "a..b", {}, gpu=GPU["slug"])


def test_a_commit_is_profiled_from_its_own_tree_into_at(repo):
    old = commit(repo, "old", "old tree")
    new = commit(repo, "new", "new tree")
    (repo / "marker.txt").write_text("work tree, uncommitted")
    now = make_record("torch", median_ms=0.1)
    now.update(source_sha256="n" * 64, git={"commit": new, "dirty": True})
    put(repo, now)
    seen = []
    written = atref.profile_commits(repo, "softmax", old[:7], None, {"revs": ["torch"]}, progress=lambda s: None,
                                    run=fake_process(seen), gpu=GPU["slug"])
    assert [s["marker"] for s in seen] == ["old tree"] and seen[0]["commit"] == old
    assert "n" * 64 in seen[0]["skip"]  # today's profile's hash: not profiled again
    assert seen[0]["cmd"][seen[0]["cmd"].index("profile") + 1:][:3] == ["softmax", "--rev", "torch"]
    (path,) = written
    assert path.parent == repo / "profiles" / GPU["slug"] / "softmax" / "at" / old[:12]
    assert (repo / "marker.txt").read_text() == "work tree, uncommitted"  # the work tree untouched
    t = history.timeline(repo, parse_side("softmax/torch"))
    (entry,) = [e for e in t["entries"] if e["at"]]
    assert entry["at"] == old[:12] and entry["profiled_at"] == old and entry["source_sha256"] == "o" * 64
    assert t["entries"][-1]["source_sha256"] == "n" * 64  # ordered by the commit profiled: the old one first


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

    written = atref.profile_commits(repo, "softmax", None, f"{c1}..{c3}", {}, progress=lambda s: None, run=run,
                                    gpu=GPU["slug"])
    assert [s["commit"] for s in seen] == [c2, c3] and len(written) == 1
    failed = repo / "profiles" / GPU["slug"] / "softmax" / "at" / c2[:12] / atref.FAILED
    assert json.loads(failed.read_text())["exit"] == 3
    rows = history.timeline(repo, parse_side("softmax/torch"))["entries"]
    why = "not profiled at this commit: kernlog: 1 revision(s) failed the gate"
    assert any(why in r.get("error", "") for r in rows)
    again = []
    atref.profile_commits(repo, "softmax", c3, None, {}, progress=lambda s: None, run=fake_process(again),
                          gpu=GPU["slug"])
    assert "a" * 64 in again[0]["skip"]  # the at/ entry's hash is known now
