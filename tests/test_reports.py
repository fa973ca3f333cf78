"""store.reports: ncu reports stored compressed (.ncu-rep.xz) beside JSONs that never change;
loaded, shown and diffed as before, read through the cache, verified in full on demand."""
import json
import lzma
import shutil

import pytest

from kernlog.judge import diff
from kernlog.render.show import render
from kernlog.store import gitrefs, lookup, reports
from kernlog.store import profiles as store

from .helpers import FULL_REP, SECTIONS_REP, git, git_repo, make_record, put, scratch_repo


@pytest.fixture
def root(tmp_path):
    return scratch_repo(tmp_path)


def _rep(root, path):
    return path.parent / json.loads(path.read_text())["ncu"]["report"]


def test_compress_round_trips_and_leaves_the_json_alone(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    before = path.read_bytes()
    rep = _rep(root, path)
    xz = reports.compress(rep)
    assert not rep.exists() and xz.name == rep.name + ".xz" and xz.stat().st_size < FULL_REP.stat().st_size
    assert lzma.decompress(xz.read_bytes()) == FULL_REP.read_bytes()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([xz.name, path.name])  # no temporary left


def test_a_compressed_profile_loads_shows_and_diffs(root):
    a = put(root, make_record("torch"), report=FULL_REP)
    put(root, make_record("torch_compile", seed=1), report=SECTIONS_REP)
    reports.compress(_rep(root, a))
    rec = store.load_profile(root, a)
    assert rec.ncu.report_bytes == FULL_REP.stat().st_size  # the original's size, as recorded
    assert "softmax/torch" in render(root, lookup.resolve_one(root, lookup.parse_side("softmax/torch")), "text")
    ra, rb = lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/torch_compile"))
    assert diff.diff(ra, rb)["rows"]
    assert [r for r in store.iter_profiles(root, bad="yield") if isinstance(r, store.ProfileError)] == []


def test_open_report_reads_plain_then_decompresses_once_into_the_cache(root, monkeypatch):
    path = put(root, make_record("torch"), report=FULL_REP)
    rec = store.load_profile(root, path)
    assert reports.open_report(root, rec) == _rep(root, path)  # plain: itself
    reports.compress(_rep(root, path))
    got = reports.open_report(root, rec)
    assert got == root / ".cache" / "reports" / f"{rec.ncu.report_sha256}.ncu-rep"
    assert got.read_bytes() == FULL_REP.read_bytes()
    calls = []
    real = reports._decompress_to
    monkeypatch.setattr(reports, "_decompress_to", lambda *a: calls.append(a) or real(*a))
    assert reports.open_report(root, rec) == got and calls == []  # reused
    got.write_bytes(b"short")  # a wrong-sized cache entry is made again
    assert reports.open_report(root, rec).read_bytes() == FULL_REP.read_bytes() and len(calls) == 1


def test_a_truncated_xz_is_caught_by_verify_report_not_by_load(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    xz = reports.compress(_rep(root, path))
    xz.write_bytes(xz.read_bytes()[: xz.stat().st_size // 2])
    rec = store.load_profile(root, path)  # the cheap check: present
    with pytest.raises(store.ProfileError, match="does not decompress") as e:
        reports.verify_report(root, rec)
    assert e.value.short == "ncu report corrupt" and "kernlog profile softmax --rev torch" in str(e.value)
    with pytest.raises(store.ProfileError, match="does not decompress"):
        reports.open_report(root, rec)
    assert not list((root / ".cache" / "reports").glob("*.ncu-rep"))


def test_verify_report_catches_another_reports_bytes(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    rep = _rep(root, path)
    shutil.copyfile(SECTIONS_REP, rep)
    reports.compress(rep)
    with pytest.raises(store.ProfileError, match="decompresses to 123109 bytes, the profile recorded"):
        reports.verify_report(root, store.load_profile(root, path))


def test_a_missing_xz_is_a_missing_report(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    reports.compress(_rep(root, path)).unlink()
    rec = store.load_profile(root, path)  # read from its JSON all the same
    assert rec.report_problem.startswith("ncu report missing: ")
    with pytest.raises(store.ProfileError) as e:
        reports.open_report(root, rec)
    assert e.value.short == "ncu report missing"


def test_compress_reports_goes_largest_first_within_the_limit(root):
    big = put(root, make_record("torch"), report=FULL_REP)
    small = put(root, make_record("torch", shape=(4096, 1024)), report=SECTIONS_REP)
    full, sections = FULL_REP.stat().st_size, SECTIONS_REP.stat().st_size
    assert reports.compress_reports(root, limit_bytes=sections) == []  # the largest does not fit: stop there
    done = reports.compress_reports(root, limit_bytes=full)
    assert [(p, b) for p, b, _ in done] == [(_rep(root, big), full)]
    done = reports.compress_reports(root)  # the one left; the compressed one skipped
    assert [(p, b) for p, b, _ in done] == [(_rep(root, small), sections)]
    assert reports.compress_reports(root) == []
    for p in (big, small):
        reports.verify_report(root, store.load_profile(root, p))


def test_a_resave_removes_the_replaced_compressed_report(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    xz = reports.compress(_rep(root, path))
    put(root, make_record("torch"), report=SECTIONS_REP)
    assert not xz.exists() and store.load_profile(root, path).ncu.report_bytes == SECTIONS_REP.stat().st_size


def test_a_committed_compressed_report_loads_from_git(tmp_path):
    root = git_repo(tmp_path / "repo")
    path = put(root, make_record("torch"), report=FULL_REP)
    reports.compress(_rep(root, path))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "compressed")
    commit = git(root, "rev-parse", "HEAD")
    rec = gitrefs.load_at(root, commit, str(path.relative_to(root)))
    assert rec.revision == "torch"
