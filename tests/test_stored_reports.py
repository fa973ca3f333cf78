"""Stored ncu reports as the repository keeps them (.ncu-rep.xz, their own sha256 in the
records): `report --check` names a truncated, a lost and a same-size replaced one with the
`git checkout` of the file git holds; show, diff, list and compare read the profiles that
share a lost report from their JSONs; `kernlog open` never trusts a replaced one; hidden files
under profiles/ are never profiles. Each test works on a copy of a small part of profiles/ in
a scratch git repository, never on the repository's own."""
import json
import shlex
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.store import integrity, reports
from kernlog.store import profiles as store
from kernlog.store.keys import glob_profiles

from .helpers import ROOT, git, git_repo, make_record, put

GPU = "nvidia-h100-80gb-hbm3"
SOFTMAX = ROOT / "profiles" / GPU / "softmax"


def _shared_report() -> tuple[Path, list[Path]]:
    """The smallest compressed report in the repository's softmax folder that several of its
    profiles share, and their JSONs."""
    by_report = defaultdict(list)
    for j in sorted(SOFTMAX.glob("*.json")):
        by_report[json.loads(j.read_text())["ncu"]["report"]].append(j)
    shared = [(SOFTMAX / f"{r}.xz", js) for r, js in by_report.items()
              if len(js) >= 2 and (SOFTMAX / f"{r}.xz").is_file()]
    return min(shared, key=lambda s: s[0].stat().st_size)


def at(xz: Path) -> str:
    """The selector of the profiles that share the report `xz`: @SHAPE.DTYPE."""
    return "@" + ".".join(xz.name.split(".")[:2])


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.fixture
def repo(tmp_path):
    """A scratch git repository holding, committed, the profiles that share one compressed report
    (copied from profiles/) and the report; (root, the .xz's path, the profiles' revisions)."""
    root = git_repo(tmp_path / "repo")
    xz, jsons = _shared_report()
    folder = root / "profiles" / GPU / "softmax"
    folder.mkdir(parents=True)
    for src in (xz, *jsons):
        shutil.copy(src, folder / src.name)
    assert run(root, "compress").exit_code == 0  # records the .xz's hash where the copy lacks it
    git(root, "add", "-A")
    git(root, "commit", "-qm", "profiles")
    revs = sorted(j.name.split(".")[0] for j in jsons)
    return root, folder / xz.name, revs


def _truncate(xz: Path):
    xz.write_bytes(xz.read_bytes()[: xz.stat().st_size // 2])


def _delete(xz: Path):
    xz.unlink()


def _same_size_other_bytes(xz: Path):
    data = bytearray(xz.read_bytes())
    data[len(data) // 2] ^= 0x01
    xz.write_bytes(bytes(data))


DAMAGE = {
    "truncated": (_truncate, "ncu report truncated or replaced"),
    "deleted": (_delete, "ncu report missing"),
    "same size, other bytes": (_same_size_other_bytes, "ncu report replaced"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_report_check_names_the_damaged_xz_with_the_git_checkout_that_restores_it(repo, case):
    root, xz, revs = repo
    damage, short = DAMAGE[case]
    before = run(root, "report", "--check")  # the log is not rendered here: its own lines are the baseline
    assert integrity.check_stored(root) == [] and not any("ncu report" in ln for ln in lines(before.stderr))
    damage(xz)
    after = run(root, "report", "--check")
    assert after.exit_code == 2 and "Traceback" not in after.output
    new = [ln for ln in lines(after.stderr) if ln not in lines(before.stderr)]
    rel = str(xz.relative_to(root))
    assert len(new) == 1 and new[0].startswith(f"kernlog: {short}: {rel}"), after.stderr
    assert new[0] == f"kernlog: {integrity.check_stored(root)[0]}"
    assert f"named by {', '.join(f'softmax/{r}' for r in revs)} (" in new[0]
    command = new[0].split("restore it: `")[1].rstrip("`")
    assert command == f"git checkout -- {rel}" and rel.endswith(".ncu-rep.xz")
    assert git(root, "ls-files", "--", rel) == rel  # a file git holds
    git(root, *shlex.split(command)[1:])  # run as printed, it restores the report
    assert integrity.check_stored(root) == [] and lines(run(root, "report", "--check").stderr) == lines(before.stderr)


def test_show_diff_list_and_compare_read_the_profiles_that_share_a_lost_report(repo):
    root, xz, revs = repo
    shown = {rev: run(root, "show", f"softmax/{rev}{at(xz)}") for rev in revs}
    xz.unlink()
    rel = str(xz.relative_to(root))
    restore = f"restore it: `git checkout -- {rel}`"
    for rev, good in shown.items():
        r = run(root, "show", f"softmax/{rev}{at(xz)}")
        assert r.exit_code == 0 and r.stdout == good.stdout and good.stderr == ""
        (line,) = lines(r.stderr)
        assert line.startswith(f"kernlog: passed over: ncu report missing: {rel}, named by softmax/{rev} (")
        assert line.endswith(restore)
    d = run(root, "diff", f"softmax/{revs[0]}{at(xz)}", f"softmax/{revs[1]}{at(xz)}")
    assert d.exit_code == 0 and d.stdout.strip()
    assert [ln.endswith(restore) and f"ncu report missing: {rel}" in ln for ln in lines(d.stderr)] == [True, True]
    listed = run(root, "list")
    assert listed.exit_code == 0 and "UNREADABLE" not in listed.stdout
    (line,) = lines(listed.stderr)
    assert line.startswith(f"kernlog: ncu report missing: {rel}, named by {', '.join(f'softmax/{r}' for r in revs)}")
    assert line.endswith(restore)
    compared = run(root, "compare", "HEAD")
    assert compared.exit_code == 0 and lines(compared.stderr) == lines(listed.stderr)
    opened = run(root, "open", f"softmax/{revs[0]}{at(xz)}")  # what needs the report itself refuses
    assert opened.exit_code == 2 and opened.stdout == ""
    (line,) = lines(opened.stderr)
    assert line.startswith(f"kernlog: ncu report missing: {rel}, named by softmax/{revs[0]} (")
    assert line.endswith(restore)


def test_an_xz_replaced_by_other_bytes_of_its_size_is_never_opened(repo):
    """Its own sha256 is checked before anything trusts it: even with a good decompressed copy
    in the cache, and even where the bytes would decompress, the mismatch is named."""
    root, xz, revs = repo
    sel = f"softmax/{revs[0]}{at(xz)}"
    first = run(root, "open", sel)
    assert first.exit_code == 0 and Path(first.stdout.strip()).is_file()  # decompressed into the cache
    other = xz.read_bytes()
    xz.write_bytes(other[1:] + other[:1])  # the same size, other bytes
    again = run(root, "open", sel)
    assert again.exit_code == 2 and again.stdout == ""
    rel = xz.relative_to(root)
    assert lines(again.stderr)[0].startswith(f"kernlog: ncu report replaced: {rel} has the recorded size but another "
                                            "sha256")
    prof = store.load(root, xz.parent / f"{revs[0]}.{at(xz)[1:]}.json")
    with pytest.raises(store.ProfileError, match="another sha256") as e:
        reports.verify_report(root, prof)
    assert e.value.short == "ncu report replaced"
    assert integrity.check_stored(root)[0].startswith(f"ncu report replaced: {rel}")


def test_hidden_files_under_profiles_are_never_read_as_profiles(repo):
    root, xz, revs = repo
    profiles = root / "profiles"
    a_profile = next((profiles / GPU / "softmax").glob(f"{revs[0]}.*.json"))
    hidden = [profiles / GPU / "softmax" / f".{a_profile.name}",  # a hidden file
              profiles / ".kernlog-scratch" / "softmax" / a_profile.name,  # in a hidden GPU folder
              profiles / GPU / ".softmax" / a_profile.name,  # in a hidden kernel folder
              profiles / GPU / "softmax" / "at" / ".0123456789ab" / a_profile.name]  # in a hidden at/ entry
    for i, path in enumerate(hidden):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{" if i % 2 else a_profile.read_text().replace('"median_ms": ', '"median_ms": 9'))
    (profiles / GPU / "softmax" / f".{xz.name}").write_bytes(b"not a report")
    records = sorted(str(p.relative_to(root)) for p in (profiles / GPU / "softmax").glob("[!.]*.json"))
    assert sorted(str(p.relative_to(root)) for p in [*glob_profiles(root), *glob_profiles(root, at=True)]) == records
    assert [p.path for p in store.iter_profiles(root)] == records
    listed = run(root, "list")
    assert listed.exit_code == 0 and listed.stderr == "" and "UNREADABLE" not in listed.stdout
    shown = run(root, "show", f"softmax/{revs[0]}{at(xz)}", "--format", "json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["timing"] == json.loads(a_profile.read_text())["timing"]
    assert integrity.check_stored(root) == []
    before = {p: p.read_bytes() for p in hidden}
    assert run(root, "compress").exit_code == 0 and {p: p.read_bytes() for p in hidden} == before
    git(root, "add", "-A")
    git(root, "commit", "-qm", "hidden files")
    assert run(root, "compare", "HEAD~1", "HEAD").exit_code == 0  # git's copies of them are not read either


def test_the_restore_names_the_form_git_holds_or_none(tmp_path):
    """A report committed plain and compressed since is restored by its plain name; one never
    committed has no `git checkout`, only the re-profile."""
    root = git_repo(tmp_path / "repo")
    committed = put(root, make_record("torch"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "plain")
    fresh = put(root, make_record("torch", shape=(4096, 1024)))
    assert run(root, "compress").exit_code == 0
    for p in (committed, fresh):
        store.compressed(store.report_path(root, store.load(root, p))).unlink()
    plain = store.report_path(root, store.load(root, committed)).relative_to(root)
    by_shape = {ln.split("/softmax/")[1].split(".")[0]: ln for ln in integrity.check_stored(root)}
    assert by_shape["8192x4096"].endswith(f"; on a CPU, restore it: `git checkout -- {plain}`")
    assert by_shape["4096x1024"].endswith("re-profile on a GPU with `kernlog profile softmax --rev torch --shape "
                                          "4096x1024 --dtype fp32 --force` (git holds no copy to restore)")
    git(root, "checkout", "--", str(plain))
    assert [ln for ln in integrity.check_stored(root) if "8192x4096" in ln] == []


def test_compress_records_only_the_xz_hash_after_checking_what_it_decompresses_to(tmp_path):
    """The store upgrade: a record whose report was compressed before kernlog recorded the .xz's
    hash gains ncu.report_xz and nothing else; a compressed report that does not decompress to
    its recorded bytes is named and left unrecorded."""
    root = git_repo(tmp_path / "repo")
    good = put(root, make_record("torch"))
    bad = put(root, make_record("torch", shape=(4096, 1024)))
    for p in (good, bad):
        reports.compress(store.report_path(root, store.load(root, p)))  # as kernlog compressed before
    originals = {p: p.read_bytes() for p in (good, bad)}
    check = integrity.check_stored(root)
    assert len(check) == 1 and check[0].startswith("ncu report unhashed: 2 compressed report(s)")
    bad_xz = store.compressed(store.report_path(root, store.load(root, bad)))
    bad_xz.write_bytes(bad_xz.read_bytes()[:-8])  # its stream cut short
    r = run(root, "compress")
    assert r.exit_code == 2 and "recorded the sha256 of compressed reports in 1 profile(s)" in r.stdout
    assert [ln for ln in lines(r.stderr) if ln.startswith("kernlog: ")] == [
        f"kernlog: left unrecorded: ncu report corrupt: {bad_xz.relative_to(root)} does not decompress "
        + lines(r.stderr)[-1].split(" does not decompress ", 1)[1]]
    assert bad.read_bytes() == originals[bad]
    data = json.loads(originals[good])
    xz = store.compressed(store.report_path(root, store.load(root, good)))
    data["ncu"]["report_xz"] = {"bytes": xz.stat().st_size, "sha256": store.file_digest(xz)[1]}
    assert good.read_bytes() == store.dump_json(data)  # the field added, every other byte as it was
    assert run(root, "compress").stdout.strip() == "compressed 0 report(s): 0.0 MB -> 0.0 MB"  # nothing left


def test_a_compressed_save_records_the_xz_hash_in_each_json_it_commits(tmp_path):
    root = git_repo(tmp_path / "repo")
    rep = tmp_path / "run.ncu-rep"
    shutil.copy(ROOT / "tests" / "fixtures" / "ncu" / "triton_softmax_8192x4096_fp32_sections.ncu-rep", rep)
    paths = store.save_profiles(root, [make_record("torch"), make_record("triton")], rep, force=False, compress=True)
    recs = [store.load(root, p) for p in paths]
    xz = store.compressed(store.report_path(root, recs[0]))
    assert not store.report_path(root, recs[0]).exists() and xz.is_file()
    assert {json.dumps(r.ncu.report_xz) for r in recs} == {json.dumps(
        {"bytes": xz.stat().st_size, "sha256": store.file_digest(xz)[1]})}
    assert integrity.check_stored(root) == []


def test_every_committed_compressed_report_has_its_hash_in_its_records():
    """What `kernlog compress` wrote over profiles/: each record whose report is stored as .xz
    carries that file's size (its sha256 is `report --check`'s to compare)."""
    unrecorded = []
    for path in [*glob_profiles(ROOT), *glob_profiles(ROOT, at=True)]:
        ncu = json.loads(path.read_text())["ncu"]
        xz = path.parent / f"{ncu['report']}.xz"
        if xz.is_file() and (ncu.get("report_xz") or {}).get("bytes") != xz.stat().st_size:
            unrecorded.append(str(path.relative_to(ROOT)))
    assert unrecorded == []
