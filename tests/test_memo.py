"""kernlog.memo: what `list` derives from files is kept between commands and reused only while
every file it came from keeps its stamp; each input the kept value depends on, changed, makes
it derived again."""
import json
import os
import time

import pytest
from click.testing import CliRunner

from kernlog import memo, snapshot
from kernlog.commands.main import main
from kernlog.spec import Revision

from .helpers import make_record, put, scratch_repo

OLD = time.time() - 3600


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own, and no table left over from another test."""
    monkeypatch.setenv("KERNLOG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(memo, "_tables", {})
    monkeypatch.setattr(memo, "RACY", 0.05)  # a file's change time cannot be set back: wait this long instead
    return tmp_path / "cache"


def aged(*paths):
    """Modified an hour ago, changed (ctime) just over memo.RACY ago."""
    for p in paths:
        os.utime(p, (OLD, OLD))
    time.sleep(memo.RACY + 0.02)


def fresh_process():
    """What the next command sees: the tables saved and read back from disk."""
    memo._save_all()
    memo._tables.clear()


def counted(value, deps):
    calls = []

    def compute():
        calls.append(1)
        return value, deps
    return compute, calls


def test_a_kept_value_is_reused_while_its_file_keeps_its_stamp(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("one")
    aged(f)
    compute, calls = counted("derived", [f])
    assert memo.table("t", []).get("k", compute) == "derived"
    fresh_process()
    assert memo.table("t", []).get("k", compute) == "derived"
    assert len(calls) == 1


def test_an_edit_of_the_same_size_and_mtime_is_seen(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("one")
    aged(f)
    memo.table("t", []).get("k", lambda: ("old", [f]))
    fresh_process()
    f.write_text("two")  # same size
    aged(f)  # and the same mtime: the change time and the edit tell
    assert memo.table("t", []).get("k", lambda: ("new", [f])) == "new"


def test_a_file_changed_just_now_is_never_kept(tmp_path, monkeypatch):
    f = tmp_path / "a.txt"
    f.write_text("one")
    aged(f)
    monkeypatch.setattr(memo, "RACY", 2.0)
    f.write_text("two")
    os.utime(f, (OLD, OLD))  # its mtime set back, as cp -p or rsync -a would: its change time still tells
    compute, calls = counted("derived", [f])
    memo.table("t", []).get("k", compute)
    fresh_process()
    memo.table("t", []).get("k", compute)
    assert len(calls) == 2


def test_a_removed_file_or_a_new_one_in_a_folder_is_seen(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    f = folder / "a.txt"
    f.write_text("one")
    aged(f, folder)
    memo.table("t", []).get("k", lambda: ("old", [f, folder]))
    fresh_process()
    (folder / "b.txt").write_text("new")
    aged(folder / "b.txt", folder)
    assert memo.table("t", []).get("k", lambda: ("new", [f, folder])) == "new"  # the folder's inode's ctime
    fresh_process()
    f.unlink()
    assert memo.table("t", []).get("k", lambda: ("gone", [])) == "gone"


def test_a_change_to_the_tool_that_derives_a_table_drops_it(tmp_path):
    f, tool = tmp_path / "a.txt", tmp_path / "tool.py"
    f.write_text("one")
    tool.write_text("rule = 1")
    aged(f, tool)
    memo.table("t", [tool]).get("k", lambda: ("by rule 1", [f]))
    fresh_process()
    tool.write_text("rule = 2")
    assert memo.table("t", [tool]).get("k", lambda: ("by rule 2", [f])) == "by rule 2"


def test_off_keeps_nothing_and_a_foreign_table_is_an_empty_one(tmp_path, cache, monkeypatch):
    f = tmp_path / "a.txt"
    f.write_text("one")
    aged(f)
    cache.mkdir()
    (cache / "t.json").write_text("[not a table")
    assert memo.table("t", []).get("k", lambda: ("derived", [f])) == "derived"
    fresh_process()
    assert json.loads((cache / "t.json").read_text())["entries"]["k"][0] == "derived"
    monkeypatch.setenv("KERNLOG_CACHE", "off")
    monkeypatch.chdir(tmp_path)
    fresh_process()
    assert memo.folder() is None
    assert memo.table("u", []).get("k", lambda: ("derived", [f])) == "derived"
    fresh_process()
    assert not list(tmp_path.rglob("u.json"))


def _revision(source, header=None):
    return Revision("v0_naive", "cuda" if header else "triton", (source,), lambda: None, "the change", "")


def test_a_source_hash_is_kept_only_while_held_and_follows_an_include(tmp_path):
    (tmp_path / "k.cuh").write_text("#define N 1\n")
    (tmp_path / "k.cu").write_text('#include "k.cuh"\n')
    aged(tmp_path / "k.cuh", tmp_path / "k.cu", tmp_path)
    rev = _revision(tmp_path / "k.cu", header=True)
    first = rev.sha256()
    assert not memo._tables  # outside held(): nothing kept
    with snapshot.held():
        assert rev.sha256() == first
    fresh_process()
    (tmp_path / "k.cuh").write_text("#define N 2\n")  # the header only
    aged(tmp_path / "k.cuh")
    with snapshot.held():
        second = rev.sha256()
    assert second != first
    fresh_process()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "k.cu").write_text('#include "kl_cuda.cuh"\n')
    aged(tmp_path / "sub" / "k.cu", tmp_path / "sub")
    rev = _revision(tmp_path / "sub" / "k.cu", header=True)
    with snapshot.held():
        common = rev.sha256()
    fresh_process()
    (tmp_path / "sub" / "kl_cuda.cuh").write_text("// beside the source, found first\n")
    aged(tmp_path / "sub" / "kl_cuda.cuh")  # the folder's stamp tells (an entry added)
    with snapshot.held():
        assert rev.sha256() != common


def test_list_reads_a_changed_profile_and_a_changed_sweep_again(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.12))
    path = next((root / "profiles").rglob("torch.8192x4096.fp32.json"))
    aged(path)

    def listed():
        out = CliRunner().invoke(main, ["--root", str(root), "list"]).output
        fresh_process()
        return out

    assert "STALE" not in listed()
    assert memo.folder() is not None and (memo.folder() / "profile_summaries.json").exists()
    rec = json.loads(path.read_text())
    rec["source_sha256"] = "0" * 64
    path.write_text(json.dumps(rec))
    aged(path)
    assert "STALE" in listed()
    for report in (root / "profiles").rglob("*.ncu-rep"):
        report.unlink()  # the JSON kept as it was: its summary is kept, its report glanced at afresh
    assert "ncu report missing" in listed()


def test_list_reads_a_changed_sweep_again(tmp_path):
    """A bench.csv whose points are kept, edited to the same size (one point's source hash made
    another's): the next list counts the point stale."""
    import pandas as pd

    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.12))
    today = load_kernel(root, "softmax").revision("torch").sha256()
    bench = root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv"

    def write(second):
        pd.DataFrame([{"kernel": "softmax", "revision": "torch", "shape": s, "dtype": "fp32", "metric": m,
                       "value": 1.0, "gpu": "NVIDIA H100 80GB HBM3", "copy_gbps": 3000.0, "matmul_tflops": 700.0,
                       "source_sha256": sha} for s, sha in (("4096x1024", today), ("1024x131072", second))
                      for m in ("gbps", "median_ms")]).to_csv(bench, index=False)
        aged(bench)

    def swept():
        out = CliRunner().invoke(main, ["--root", str(root), "list"]).output
        fresh_process()
        line = next(ln for ln in out.split("\nsoftmax ")[1].splitlines() if ln.strip().startswith("torch "))
        return line.split("swept: ")[1]

    write(today)
    assert swept() == "nvidia-h100-80gb-hbm3 2 points"
    assert swept() == "nvidia-h100-80gb-hbm3 2 points"  # from the kept points
    write("0" * 64)
    assert swept() == "nvidia-h100-80gb-hbm3 2 points (1 STALE)"
