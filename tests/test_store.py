"""store: the profile loader's checks, the weaker state of profiles saved before report
hashes, and the pair write (report and JSON replaced as one)."""
import json
import os
import shutil

import pytest

from kernlog.errors import KernlogError
from kernlog.store import files, integrity, reports
from kernlog.store import profiles as store
from kernlog.store.keys import ProfileKey
from kernlog.store.record import Profile

from .helpers import FULL_REP, ROOT, SECTIONS_REP, make_record, put, scratch_repo


def fresh(path):
    path.mkdir(parents=True)
    return scratch_repo(path)


@pytest.fixture
def root(tmp_path):
    return fresh(tmp_path / "repo")


def _report_of(root, json_path):
    return json_path.parent / json.loads(json_path.read_text())["ncu"]["report"]


def test_save_records_size_and_hash_and_load_verifies_them(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    rec = store.load_profile(root, path)
    size, sha = store.file_digest(FULL_REP)
    name = f"8192x4096.fp32.{sha[:16]}.ncu-rep"
    assert rec.ncu.report == name and rec.path == str(path.relative_to(root))
    assert (rec.ncu.report_bytes, rec.ncu.report_sha256) == (size, sha)
    assert store.report_hashed(rec) and store.report_path(root, rec).read_bytes() == FULL_REP.read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == [name, "torch.8192x4096.fp32.json"]


def _records(*revs, median_ms=0.12):
    return [make_record(r, median_ms=median_ms) for r in revs]


def test_revisions_of_one_run_share_one_report_and_each_verifies_it(root, tmp_path):
    rep = tmp_path / "run.ncu-rep"
    shutil.copy(FULL_REP, rep)
    paths = store.save_profiles(root, _records("torch", "triton"), rep, force=False)
    recs = [store.load_profile(root, p) for p in paths]
    assert {r.ncu.report for r in recs} == {recs[0].ncu.report}
    assert sorted(p.name for p in paths[0].parent.iterdir()) == sorted(
        [recs[0].ncu.report, "torch.8192x4096.fp32.json", "triton.8192x4096.fp32.json"])
    with pytest.raises(ValueError, match="share GPU, kernel, shape and dtype"):
        other = make_record("torch_compile")
        other["dtype"] = "bf16"
        store.save_profiles(root, [make_record("torch"), other], rep, force=True)


def test_a_shared_report_stays_while_a_profile_names_it_and_goes_with_the_last(root, tmp_path):
    first = tmp_path / "run.ncu-rep"
    shutil.copy(FULL_REP, first)
    torch_json, triton_json = store.save_profiles(root, _records("torch", "triton"), first, force=False)
    shared = store.report_path(root, store.load_profile(root, torch_json))
    for rev, rep in (("torch", SECTIONS_REP), ("triton", SECTIONS_REP)):
        again = tmp_path / f"{rev}.ncu-rep"
        shutil.copy(rep, again)
        store.save_profile(root, make_record(rev, median_ms=0.5), again, force=True)
        assert shared.exists() == (rev == "torch")  # triton still named it; then nobody did
    names = {store.load_profile(root, p).ncu.report for p in (torch_json, triton_json)}
    assert len(names) == 1  # the same bytes: the same hashed name
    with pytest.raises(KernlogError, match="exists; pass --force"):
        store.save_profiles(root, _records("torch", "torch_compile"), SECTIONS_REP, force=False)
    assert not (torch_json.parent / "torch_compile.8192x4096.fp32.json").exists()


def test_a_report_beside_a_json_that_cannot_be_read_is_kept(root, tmp_path):
    put(root, make_record("torch"), report=FULL_REP)
    bad = put(root, make_record("triton"), report=SECTIONS_REP)
    named = store.report_path(root, store.load_profile(root, bad))
    bad.write_text("{")
    again = tmp_path / "again.ncu-rep"
    shutil.copy(FULL_REP, again)
    store.save_profile(root, make_record("torch", median_ms=0.5), again, force=True)
    assert named.exists()  # the unreadable JSON may name it: kept, for the fix its error names


def _drop_hash(path):
    """The profile as kernlog saved it before reports were hashed: no sha256, the report under
    the profile's own name."""
    rec = json.loads(path.read_text())
    del rec["ncu"]["report_sha256"]
    old = path.with_suffix(".ncu-rep")
    os.replace(path.parent / rec["ncu"]["report"], old)
    rec["ncu"]["report"] = old.name
    path.write_text(json.dumps(rec))


def test_a_profile_from_before_report_hashes_loads_checked_by_size(root):
    """Profiles saved before reports were hashed record report_bytes alone: their report is
    checked by size only, so a replacement of the same size passes (the documented weaker
    state); one of another size is named, the profile loading all the same."""
    path = put(root, make_record("torch"))
    _drop_hash(path)
    rec = store.load_profile(root, path)
    assert not store.report_hashed(rec)
    rep = _report_of(root, path)
    data = bytearray(rep.read_bytes())
    data[100] ^= 0xFF
    rep.write_bytes(bytes(data))
    assert store.load_profile(root, path).report_problem is None and integrity.check_stored(root) == []
    rep.write_bytes(bytes(data[:-1]))
    rec = store.load_profile(root, path)
    folder = "profiles/nvidia-h100-80gb-hbm3/softmax"
    assert rec.revision == "torch" and rec.report_problem == (
        f"ncu report truncated or replaced: {folder}/torch.8192x4096.fp32.ncu-rep is 123108 bytes, not the 123109 "
        f"recorded, named by {folder}/torch.8192x4096.fp32.json")
    (line,) = integrity.check_stored(root)
    assert line.startswith("ncu report truncated or replaced: profiles/nvidia-h100-80gb-hbm3/softmax/torch.")


def test_a_report_of_the_same_size_but_other_bytes_is_caught_by_the_hash_where_it_is_checked(root):
    """Loading glances at the size alone (the profile reads from its JSON); what trusts the
    report's bytes (`report --check`, verify_report, `kernlog open`) checks its sha256."""
    path = put(root, make_record("torch"))
    rep = _report_of(root, path)
    data = bytearray(rep.read_bytes())
    data[-1] ^= 0xFF
    rep.write_bytes(bytes(data))
    rec = store.load_profile(root, path)
    assert rec.report_problem is None
    (line,) = integrity.check_stored(root)
    assert line.startswith(f"ncu report replaced: {rep.relative_to(root)} has the recorded size but another sha256")
    for check in (reports.verify_report, reports.open_report):
        with pytest.raises(store.ProfileError, match="has the recorded size but another sha256") as e:
            check(root, rec)
        assert e.value.short == "ncu report replaced" and e.value.path == str(path.relative_to(root))


def test_a_json_at_the_wrong_path_is_refused(root):
    path = put(root, make_record("torch"))
    other = path.with_name("torch_compile.8192x4096.fp32.json")
    shutil.copy(path, other)
    with pytest.raises(store.ProfileError, match="holds softmax/torch 8192x4096 fp32 .* not what its path says"):
        store.load_profile(root, other)


def test_a_report_named_other_than_beside_its_json_is_refused(root):
    path = put(root, make_record("torch"))
    rec = json.loads(path.read_text())
    rec["ncu"]["report"] = "../torch.ncu-rep"
    path.write_text(json.dumps(rec))
    expected = r"names its report '../torch.ncu-rep', expected 8192x4096\.fp32\.[0-9a-f]{16}\.ncu-rep"
    with pytest.raises(store.ProfileError, match=expected):
        store.load_profile(root, path)


def test_a_pair_copied_out_of_the_repository_loads(root, tmp_path):
    """select.py loads a profile by its path, also from another checkout or a copied pair."""
    path = put(root, make_record("torch"))
    for dest in (tmp_path / "other" / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax", tmp_path / "loose"):
        dest.mkdir(parents=True)
        shutil.copy(path, dest)
        shutil.copy(_report_of(root, path), dest)
        assert store.load_profile(root, dest / path.name).revision == "torch"
    (tmp_path / "loose" / path.name).rename(tmp_path / "loose" / "renamed.json")
    with pytest.raises(store.ProfileError, match="not what its path says"):
        store.load_profile(root, tmp_path / "loose" / "renamed.json")


def test_iter_profiles_yields_the_bad_file_in_its_place_or_raises(root):
    put(root, make_record("torch"))
    bad = put(root, make_record("torch_compile"))
    put(root, make_record("triton"))
    bad.write_text("{")
    got = list(store.iter_profiles(root, "softmax", bad="yield"))
    assert [g.revision if isinstance(g, Profile) else g.ident[2] for g in got] == ["torch", "torch_compile", "triton"]
    err = got[1]
    assert isinstance(err, store.ProfileError) and err.short == "invalid JSON"
    assert err.ident == ("nvidia-h100-80gb-hbm3", "softmax", "torch_compile", (8192, 4096), "fp32")
    with pytest.raises(store.ProfileError, match="cannot read profile .*torch_compile"):
        list(store.iter_profiles(root, "softmax"))


def test_a_stray_json_in_profiles_says_to_remove_it(root):
    put(root, make_record("torch"))
    stray = root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "notes.json"
    stray.write_text("{}")
    (err,) = [e for e in store.iter_profiles(root, bad="yield") if isinstance(e, store.ProfileError)]
    assert err.ident is None and "remove it" in str(err) and "notes.json" in str(err)


# The pair write. Every call that changes the folder is a step; a crash at any one must leave
# the old pair or the new one, each consistent, and (when the process lives to clean up) no
# temporary file.

STEPS = ("replace", "link", "unlink", "fsync")


def _fail_at(monkeypatch, k, action):
    """Make the k-th step (counting os.replace/link/unlink/fsync and store.write_atomic) do `action`."""
    seen = [0]

    def wrap(fn):
        def step(*a, **kw):
            seen[0] += 1
            if seen[0] == k:
                action()
            return fn(*a, **kw)
        return step

    for name in STEPS:
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    monkeypatch.setattr(store, "write_atomic", wrap(store.write_atomic))
    return seen


def _old_and_new(root, tmp_path):
    put(root, make_record("torch", median_ms=0.12), report=SECTIONS_REP)
    new = make_record("torch", median_ms=0.5)
    rep = tmp_path / "new.ncu-rep"
    shutil.copy(FULL_REP, rep)
    return new, rep


def _state(root):
    """'old' or 'new': which pair the profile is, verified; fails on anything else."""
    path = next((root / "profiles").rglob("torch.*.json"))
    rec = store.load_profile(root, path)
    which = {0.12: "old", 0.5: "new"}[round(rec.metrics["wall_ms"], 2)]
    want = SECTIONS_REP if which == "old" else FULL_REP
    assert store.report_path(root, rec).read_bytes() == want.read_bytes()
    return which


def _leftovers(root, named=()):
    folder = next((root / "profiles").rglob("torch.*.json")).parent
    expected = {"torch.8192x4096.fp32.json", *named}
    return sorted(p.name for p in folder.iterdir() if p.name not in expected)


def test_a_failure_at_any_step_of_a_forced_save_leaves_one_whole_pair_and_no_temp_file(root, tmp_path,
                                                                                          monkeypatch):
    outcomes = []
    for k in range(1, 50):
        with monkeypatch.context() as m:
            base = tmp_path / str(k)
            r = fresh(base)
            new, rep = _old_and_new(r, base)

            def crash():
                raise OSError("simulated crash")

            seen = _fail_at(m, k, crash)
            try:
                store.save_profile(r, new, rep, force=True)
                failed = False
            except OSError:
                failed = True
        state = _state(r)
        rec = json.loads(next((r / "profiles").rglob("torch.*.json")).read_text())
        assert _leftovers(r, named=[rec["ncu"]["report"]]) == [], (k, state)
        outcomes.append((state, failed))
        if seen[0] < k:  # the save finished before step k: every step has been tried
            break
    assert outcomes[-1] == ("new", False) and ("old", True) in outcomes and ("new", True) in outcomes
    assert len(outcomes) > 5


def test_a_save_killed_at_any_step_leaves_one_whole_pair_and_the_next_save_tidies(root, tmp_path):
    """A real kill (os._exit in a forked child: no `finally` runs) at each step."""
    states = []
    for k in range(1, 50):
        base = tmp_path / str(k)
        r = fresh(base)
        new, rep = _old_and_new(r, base)
        pid = os.fork()
        if pid == 0:  # the child: save, dying at step k
            try:
                with pytest.MonkeyPatch.context() as m:
                    _fail_at(m, k, lambda: os._exit(9))
                    store.save_profile(r, new, rep, force=True)
                os._exit(0)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        assert code in (0, 9)
        states.append(_state(r))
        again = base / "again.ncu-rep"
        shutil.copy(FULL_REP, again)
        store.save_profile(r, make_record("torch", median_ms=0.5), again, force=True)
        rec = json.loads(next((r / "profiles").rglob("torch.*.json")).read_text())
        assert _state(r) == "new" and _leftovers(r, named=[rec["ncu"]["report"]]) == []
        if code == 0:
            break
    assert states[0] == "old" and states[-1] == "new" and "old" in states and len(states) > 5


def test_the_staged_state_a_killed_save_can_leave_is_a_whole_pair(root, tmp_path):
    """Killed after committing the JSON but before the report took its usual name: the JSON
    names the staged report, which matches it; the usual name still holds the old report."""
    path = put(root, make_record("torch", median_ms=0.12))
    rep = tmp_path / "new.ncu-rep"
    shutil.copy(FULL_REP, rep)
    size, sha = store.file_digest(rep)
    staged = path.parent / store.staged_name("torch.8192x4096.fp32", sha)
    os.replace(rep, staged)
    rec = make_record("torch", median_ms=0.5)
    rec["ncu"].update(report=staged.name, report_bytes=size, report_sha256=sha)
    store.write_atomic(path, store.dump_json(rec))
    loaded = store.load_profile(root, path)
    assert loaded.metrics["wall_ms"] == rec["metrics"]["wall_ms"]
    assert store.report_path(root, loaded) == staged
    staged.write_bytes(SECTIONS_REP.read_bytes())  # the staged file is glanced at like any report
    assert "is 123109 bytes, not the 1321356 recorded" in store.load_profile(root, path).report_problem


def test_a_report_shared_by_many_profiles_is_hashed_once_unless_it_just_changed(root, tmp_path, monkeypatch):
    rep = tmp_path / "run.ncu-rep"
    shutil.copy(FULL_REP, rep)
    paths = store.save_profiles(root, _records("torch", "torch_compile", "triton"), rep, force=False)
    reads = []
    real = files._digest
    monkeypatch.setattr(files, "_digest", lambda p: reads.append(p) or real(p))
    for p in paths:
        store.load_profile(root, p)
    assert reads == []  # loading glances at the size: nothing is read
    assert integrity.check_stored(root) == [] and len(reads) == 3  # written just now: read each time
    shared = store.report_path(root, store.load_profile(root, paths[0]))
    os.utime(shared, (1e9, 1e9))
    reads.clear()
    assert integrity.check_stored(root) == [] and len(reads) == 1
    data = bytearray(shared.read_bytes())
    data[-1] ^= 0xFF
    shared.write_bytes(bytes(data))
    os.utime(shared, (1e9 + 1, 1e9 + 1))  # another mtime: the cached digest no longer applies
    (line,) = integrity.check_stored(root)
    assert "another sha256" in line and "named by softmax/torch, softmax/torch_compile, softmax/triton" in line


# --- the typed record -------------------------------------------------------------------------------

def _committed_profiles():
    base = ROOT / "profiles"
    return sorted(p for p in [*base.glob("*/*/*.json"), *base.glob("*/*/at/*/*.json")]
                  if p.relative_to(base).parts[1] != "triage")  # triage's records: tested in test_triage_flow


def test_every_committed_profile_round_trips_through_the_typed_record_byte_for_byte():
    paths = [p for p in _committed_profiles() if p.name != "failed.json"]
    assert len(paths) > 100
    for path in paths:
        data = path.read_bytes()
        prof = Profile.from_dict(json.loads(data))
        assert store.dump_json(prof.to_dict()) == data, path
        assert isinstance(prof.shape, tuple) and prof.gpu.slug == path.parts[-3 if "/at/" not in str(path) else -5]


def test_the_typed_record_types_what_readers_rely_on_and_keeps_the_rest(root):
    path = put(root, make_record("torch"), report=FULL_REP)
    prof = store.load(root, path)
    assert prof.key == ProfileKey("softmax", "torch", (8192, 4096), "fp32", "nvidia-h100-80gb-hbm3")
    assert store.load(root, prof.key).to_dict() == prof.to_dict()
    assert prof.ncu.report_sha256 and prof.timing.n == 60 and prof.gpu.rest["driver"] == "580.159.04"
    assert prof.extra["_path"] == str(path.relative_to(root)) and "captured_at" in prof.extra
    rec = json.loads(path.read_text())
    del rec["ncu"]["report_sha256"]  # an old profile: the field stays absent, not null
    assert "report_sha256" not in Profile.from_dict(rec).to_dict()["ncu"]


@pytest.mark.parametrize("change,message", [
    (lambda r: r.update(schema=2), r"schema 2.*reads only schema 1"),
    (lambda r: r.pop("kernel"), "lacks the field kernel"),
    (lambda r: r["timing"].update(samples_ms=[]), "no timing samples"),
])
def test_the_typed_record_refuses_what_load_profile_refuses(change, message):
    rec = make_record("torch")
    rec["schema"] = store.SCHEMA
    rec["ncu"].update(report_bytes=1)
    assert Profile.from_dict(rec).to_dict() == rec
    change(rec)
    with pytest.raises(KernlogError, match=message):
        Profile.from_dict(rec)


def test_a_schema_1_profile_must_hold_every_metric_the_catalog_had_then():
    """A key taken out of `metrics` (not a null: ncu's "not collected") is a hand edit and names
    itself; the list of schema 1 is the catalog's own keys, so no catalog metric goes unasked."""
    from kernlog.metrics import CATALOG
    from kernlog.store import record

    assert set(record.SCHEMA1_METRICS) <= {m.key for m in CATALOG}
    rec = make_record("torch")
    rec["schema"] = store.SCHEMA
    rec["ncu"].update(report_bytes=1)
    assert store.record_problem(rec) is None
    rec["metrics"]["dram_gbps"] = None
    assert store.record_problem(rec) is None  # not collected: a value of its own
    del rec["metrics"]["dram_gbps"]
    assert store.record_problem(rec).startswith("lacks the field metrics.dram_gbps")
