"""store.keys and store.lookup: one name for a profile (ProfileKey: its grammar, its one
spelling, the paths it has), and the defaults a side without a GPU takes (this machine's GPU,
the primary GPU), short GPU names, refs kept in suggestions, and stray files that never block
a good profile."""
import json

import pytest

from kernlog.errors import KernlogError
from kernlog.store import keys, lookup
from kernlog.store import profiles as store
from kernlog.store.keys import ProfileKey

from .helpers import GPU, ROOT, git, git_repo, make_record, profile_of, put, scratch_repo

H100, H200 = "nvidia-h100-80gb-hbm3", "nvidia-h200"


@pytest.fixture(autouse=True)
def no_gpu_here(monkeypatch):
    monkeypatch.setattr(lookup, "this_gpu", lambda: None)


def on(slug: str, rec: dict) -> dict:
    rec["gpu"] = dict(GPU, slug=slug, name=slug.upper())
    return rec


# --- ProfileKey -------------------------------------------------------------------------------------

def test_a_key_parses_parts_in_any_order_and_spells_itself_back():
    k = ProfileKey.parse("HEAD~5:softmax/v7_bf16_packed@bf16.nvidia-h200.1024x131072")
    assert k == ProfileKey("softmax", "v7_bf16_packed", (1024, 131072), "bf16", H200, "HEAD~5")
    assert k.text() == "HEAD~5:softmax/v7_bf16_packed@1024x131072.bf16.nvidia-h200"
    assert k.text(ref=False) == "softmax/v7_bf16_packed@1024x131072.bf16.nvidia-h200"
    assert ProfileKey.parse("softmax/torch", shape=(1, 2), gpu="h100").text() == "softmax/torch@1x2.h100"
    assert ProfileKey.parse("softmax/torch@fp32", dtype="bf16").dtype == "fp32"  # the text wins over the option


@pytest.mark.parametrize("text,part", [
    ("softmax/torch@8192x4096.fp32.nvidia-h100-80gb-hbm3.extra", "extra"),  # a second GPU, once dropped in silence
    ("softmax/torch@fp32.bf16", "bf16"),
    ("softmax/torch@8192x4096.1x2", "1x2"),
])
def test_an_extra_part_is_an_error_naming_it_and_the_text_as_typed(text, part):
    with pytest.raises(KernlogError) as e:
        ProfileKey.parse(text)
    assert f"extra selector part {part!r} in {text!r}" in str(e.value)


def test_an_unknown_part_names_the_text_as_typed_with_its_ref():
    with pytest.raises(KernlogError, match=r"bad selector part 'f32!' in 'HEAD~1:softmax/torch@8192x4096.f32!'"):
        ProfileKey.parse("HEAD~1:softmax/torch@8192x4096.f32!")
    with pytest.raises(KernlogError, match="nothing after '@'"):
        ProfileKey.parse("softmax/torch@")


def test_a_key_of_a_record_and_of_a_path(tmp_path):
    prof = profile_of(dict(make_record("torch"), _commit="a" * 40))
    k = ProfileKey.of(prof)
    assert prof.key == k
    assert k == ProfileKey("softmax", "torch", (8192, 4096), "fp32", H100, "a" * 40)
    path = keys.profile_json(tmp_path, k)
    assert path == tmp_path / "profiles" / H100 / "softmax" / "torch.8192x4096.fp32.json"
    assert ProfileKey.from_path(path) == k.with_(ref=None)
    assert ProfileKey.from_path(path.with_name("torch.json")) is None
    assert store.path_ident(path) == (H100, "softmax", "torch", (8192, 4096), "fp32")


def test_every_path_is_one_function(tmp_path):
    k = tmp_path / "profiles" / H100 / "softmax"
    assert keys.kernel_dir(tmp_path, H100, "softmax") == k
    assert keys.bench_csv(tmp_path, H100, "softmax") == k / "bench.csv"
    assert keys.ceilings_json(tmp_path, H100) == tmp_path / "profiles" / H100 / "ceilings.json"
    assert keys.noise_dir(tmp_path, H100, "softmax") == k / "noise"
    assert keys.at_dir(tmp_path, H100, "softmax", "0123456789abcdef") == k / "at" / "0123456789ab"
    assert keys.at_failed(tmp_path, H100, "softmax", "0123456789abcdef") == k / "at" / "0123456789ab" / "failed.json"
    assert keys.staging_dir(tmp_path, ".kernlog-1-x") == tmp_path / "profiles" / ".kernlog-1-x"
    for bad in (lambda: keys.kernel_dir(tmp_path, "..", "softmax"), lambda: keys.staging_dir(tmp_path, "../x"),
                lambda: keys.profile_json(tmp_path, ProfileKey("softmax", "torch", (1,), "fp32"))):
        with pytest.raises((KernlogError, ValueError)):
            bad()


# --- the GPU a side means ----------------------------------------------------------------------------

def test_this_machines_gpu_wins_then_the_primary(monkeypatch):
    rec = lookup.resolve_one(ROOT, lookup.parse_side("softmax/v5_tuned"))
    assert rec.gpu.slug == H100
    assert rec.gpu_choice == {"chosen": H100, "why": "primary GPU", "others": [H200]}
    monkeypatch.setattr(lookup, "this_gpu", lambda: H200)
    rec = lookup.resolve_one(ROOT, lookup.parse_side("softmax/v5_tuned"))
    assert rec.gpu_choice == {"chosen": H200, "why": "this machine's GPU", "others": [H100]}
    a, b = lookup.resolve_pair(ROOT, lookup.parse_side("softmax/v0_naive"), lookup.parse_side("softmax/v1_block_smem"))
    assert a.gpu.slug == b.gpu.slug == H200
    assert lookup.resolve_one(ROOT, lookup.parse_side("softmax/v5_tuned@nvidia-h200")).gpu_choice is None


def test_no_choice_is_recorded_where_none_was_made(monkeypatch):
    rec = lookup.resolve_one(ROOT, lookup.parse_side("softmax/v7_bf16_packed@1024x131072.bf16.nvidia-h100-80gb-hbm3"))
    assert rec.gpu_choice is None and rec.skipped == []


def test_the_primary_gpu_is_the_setting_else_the_most_profiled(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, on(H200, make_record("torch")))
    put(root, on(H200, make_record("triton")))
    put(root, on(H100, make_record("torch")))
    assert lookup.primary_gpu(root) == H200
    (root / "pyproject.toml").write_text(f'[tool.kernlog]\nprimary_gpu = "{H100}"\n')
    assert lookup.primary_gpu(root) == H100
    assert lookup.primary_gpu(ROOT) == H100  # this repository's setting


def test_a_short_gpu_name_means_the_one_stored_slug_it_is_part_of(tmp_path):
    assert lookup.resolve_one(ROOT, lookup.parse_side("softmax/v5_tuned@h200")).gpu.slug == H200
    assert lookup.resolve_one(ROOT, lookup.parse_side("softmax/v5_tuned", gpu="h100")).gpu.slug == H100
    root = scratch_repo(tmp_path)
    put(root, on(H100, make_record("torch")))
    put(root, on("nvidia-h100-pcie", make_record("torch")))
    with pytest.raises(KernlogError, match=f"GPU 'h100' in softmax/torch@h100 matches several stored GPUs: "
                                           f"{H100}, nvidia-h100-pcie"):
        lookup.resolve_one(root, lookup.parse_side("softmax/torch@h100"))
    assert lookup.resolve_one(root, lookup.parse_side("softmax/torch@pcie")).gpu.slug == "nvidia-h100-pcie"


def test_a_ref_side_keeps_its_ref_in_every_suggestion(tmp_path, monkeypatch):
    root = git_repo(tmp_path / "repo")
    put(root, on(H100, make_record("torch")))
    put(root, on(H200, make_record("torch")))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "two GPUs")
    monkeypatch.setattr(lookup, "primary_gpu", lambda root: "nvidia-b200")
    with pytest.raises(KernlogError) as e:
        lookup.resolve_one(root, lookup.parse_side("HEAD:softmax/torch"))
    assert (f"HEAD:softmax/torch has 2 profiles; name one: HEAD:softmax/torch@8192x4096.fp32.{H100}  "
            f"HEAD:softmax/torch@8192x4096.fp32.{H200}") in str(e.value)
    with pytest.raises(KernlogError, match="no profile of HEAD:softmax/torch@bf16; stored: HEAD:softmax/torch@"):
        lookup.resolve_one(root, lookup.parse_side("HEAD:softmax/torch@bf16"))
    monkeypatch.setattr(lookup, "primary_gpu", lambda root: H200)
    rec = lookup.resolve_one(root, lookup.parse_side("HEAD:softmax/torch"))
    assert rec.gpu.slug == H200 and rec.gpu_choice["others"] == [H100]


# --- files that do not load --------------------------------------------------------------------------

def test_an_empty_profile_on_another_gpu_does_not_block_the_good_one(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, on(H100, make_record("torch")))
    put(root, on(H100, make_record("triton")))
    empty = root / "profiles" / H200 / "softmax" / "torch.8192x4096.fp32.json"
    empty.parent.mkdir(parents=True)
    empty.write_text("")
    rec = lookup.resolve_one(root, lookup.parse_side("softmax/torch"))  # raised before: the empty file might be meant
    assert rec.gpu.slug == H100 and len(rec.skipped) == 1
    assert f"profiles/{H200}/softmax/torch.8192x4096.fp32.json" in rec.skipped[0]
    a, b = lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/triton"))
    assert a.gpu.slug == b.gpu.slug == H100 and a.skipped and b.skipped == []
    with pytest.raises(store.ProfileError, match="not valid JSON"):  # the only match is still an error
        lookup.resolve_one(root, lookup.parse_side("softmax/torch@h200"))


def test_stray_files_beside_a_good_profile_are_named_not_fatal(tmp_path):
    root = scratch_repo(tmp_path)
    good = put(root, make_record("torch"))
    (good.parent / "torch.8192x4096.fp32.copy.json").write_text("{}")  # no key names it
    (good.parent / "torch.8192x4096.fp32.json.bak").write_bytes(b"")
    (good.parent / ".torch.8192x4096.fp32.json").write_bytes(b"")
    rec = lookup.resolve_one(root, lookup.parse_side("softmax/torch"))
    assert rec.path == str(good.relative_to(root))
    assert len(rec.skipped) == 1 and "torch.8192x4096.fp32.copy.json" in rec.skipped[0]
    good.unlink()
    with pytest.raises(store.ProfileError, match="fp32.copy.json"):  # nothing else: the stray is the error
        lookup.resolve_one(root, lookup.parse_side("softmax/torch"))


def test_a_broken_file_the_rules_would_pick_is_raised(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, on(H200, make_record("torch")))
    bad = put(root, on(H100, make_record("torch")))
    bad.write_text(json.dumps({"schema": 1}))
    with pytest.raises(store.ProfileError, match="lacks the field kernel"):  # the primary GPU's: never passed over
        lookup.resolve_one(root, lookup.parse_side("softmax/torch"))
