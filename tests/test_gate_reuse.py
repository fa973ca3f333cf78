"""A passed gate is taken again, not run again, while nothing it depends on changed: the
revision's source, the kernel's check plan (shapes, cases, dtypes, tolerances, the reference),
the GPU and the libraries (kernlog.run.gatekey). A change to any one of them gates again; a
failure is never taken; a revision with no outcome is always gated; --regate gates anyway."""
import dataclasses
import json
import re

import pytest

from kernlog.capture import gate_runs, profiler
from kernlog.judge import gate_marks
from kernlog.registry import load_kernel
from kernlog.run import gate, gatekey
from kernlog.store import gates
from kernlog.store.keys import gate_outcomes

from .helpers import GPU
from .test_profiler import _cpu_profiler, _toy_repo, toy_picker  # noqa: F401 -- a fixture the profile test uses

SLUG = GPU["slug"]
VERSIONS = {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0", "cupy": "14.2.0", "liger_kernel": None,
            "kernlog": "0.1.0", "ncu": "2025.3.1"}
PASSED = ("ok", {"cases": 4, "worst_rel_error": 1e-7})


def _common(gpu: dict | None = None, **versions) -> dict:
    return {"gpu": dict(GPU, **(gpu or {})), "versions": dict(VERSIONS, **versions), "git": {"commit": "a" * 40}}


@pytest.fixture
def toy(tmp_path, own_kernels_package):
    """The toy kernel, its `right` revision reading one more source file (extra.cu) that a test may edit."""
    root = _toy_repo(tmp_path)
    kernel = load_kernel(root, "toy")
    extra = root / "kernels" / "toy" / "extra.cu"
    extra.write_text("// v1\n")
    right = dataclasses.replace(kernel.revision("right"), sources=kernel.revision("right").sources + (extra,))
    kernel = dataclasses.replace(kernel, revisions=tuple(right if r.name == "right" else r for r in kernel.revisions))
    return root, kernel, extra


def _passed(root, kernel, name="right", common=None, seconds=3.0):
    gate_runs.note_verdict(root, kernel, kernel.revision(name), common or _common(), PASSED, seconds)


def _reused(root, kernel, common=None, names=("right",)) -> dict:
    said = []
    got = gate_runs.reused(root, kernel, [kernel.revision(n) for n in names], common or _common(), said.append)
    return got, said


def test_a_pass_is_kept_with_its_key_and_taken_while_nothing_changed(toy):
    root, kernel, _ = toy
    _passed(root, kernel)
    entry = gates.load(root, SLUG, "toy")["right"]
    key = entry["key"]
    assert key == gatekey.key(kernel, kernel.revision("right"), _common()["gpu"], _common()["versions"])
    assert key["source_sha256"] == entry["source_sha256"] == kernel.revision("right").sha256()
    assert key["gpu"] == GPU["name"] and key["libraries"]["torch"] == "2.11.0+cu130"
    assert key["libraries"]["cuda"] == GPU["cuda"] and key["libraries"]["driver"] == GPU["driver"]
    assert "ncu" not in key["libraries"] and len(key["libraries"]["kernlog_gate"]) == 64
    assert entry["check"] == PASSED[1] and entry["seconds"] == 3.0 and entry["by"] == "profile"
    got, said = _reused(root, kernel)
    assert got == {"right": ("ok", PASSED[1], 0.0, f"gate: reused (passed {entry['checked_at'][:10]}, same source, "
                                                     "plan, GPU, libraries)")}
    assert said == []


def test_an_edit_to_the_source_gates_again(toy):
    root, kernel, extra = toy
    _passed(root, kernel)
    extra.write_text("// v2: one byte more\n")
    got, said = _reused(root, kernel)
    assert got == {} and said == [f"toy/right: gated again, changed since its pass of {_date(root)}: source"]


def _date(root) -> str:
    return gates.load(root, SLUG, "toy")["right"]["checked_at"][:10]


@pytest.mark.parametrize("change", [
    {"check_shapes": ((3, 5), (7, 33), (1, 1))},  # a shape added
    {"check_shapes": ((3, 5),)},  # one taken away: the gate proves less, not the same
    {"cases": ("random", "large")},
    {"dtypes": ("fp32",)},
    {"tolerance": {"fp32": 1e-3}},
    {"tolerance": {"bf16": {"rtol": 2**-5}}},
    {"reference": lambda inputs, out=None: inputs[0].double() * 2.0},
], ids=["shape_added", "shape_removed", "cases", "dtypes", "tolerance", "tolerance_field", "reference"])
def test_a_change_to_the_check_plan_gates_again(toy, change):
    root, kernel, _ = toy
    _passed(root, kernel)
    got, said = _reused(root, dataclasses.replace(kernel, **change))
    assert got == {} and said[0].endswith(": plan"), said


def test_a_revision_declining_another_shape_is_another_plan(toy):
    root, kernel, _ = toy
    _passed(root, kernel, "declines")
    assert _reused(root, kernel, names=("declines",))[0]
    rev = dataclasses.replace(kernel.revision("declines"), refuses=lambda s: "too big" * (s[0] > 2))
    other = dataclasses.replace(kernel, revisions=tuple(rev if r.name == "declines" else r for r in kernel.revisions))
    assert _reused(root, other, names=("declines",))[0] == {}


def test_another_gpu_gates_again(toy):
    root, kernel, _ = toy
    _passed(root, kernel)
    got, said = _reused(root, kernel, _common({"name": "NVIDIA H100 PCIe"}))
    assert got == {} and said[0].endswith(": GPU")


@pytest.mark.parametrize("where,name,value", [
    ("versions", "torch", "2.12.0+cu130"), ("versions", "triton", "3.7.0"), ("versions", "python", "3.13.1"),
    ("versions", "cupy", "14.3.0"), ("versions", "liger_kernel", "0.8.5"),
    ("gpu", "cuda", "13.1"), ("gpu", "driver", "590.10.01"),
])
def test_each_library_version_gates_again(toy, where, name, value):
    root, kernel, _ = toy
    _passed(root, kernel)
    common = _common(**{name: value}) if where == "versions" else _common({name: value})
    got, said = _reused(root, kernel, common)
    was = (VERSIONS if where == "versions" else GPU)[name]
    assert got == {} and said[0].endswith(f": {name} {was} -> {value}"), said


def test_ncu_s_version_is_not_the_gate_s(toy):
    root, kernel, _ = toy
    _passed(root, kernel)
    assert _reused(root, kernel, _common(ncu="2026.1.0"))[0]


def test_a_change_to_kernlog_s_gate_code_gates_again(toy, tmp_path, monkeypatch):
    root, kernel, _ = toy
    code = tmp_path / "gate.py"
    code.write_text("TOLERANCE = 1\n")
    # A patch of its own, undone alone: monkeypatch.undo() would also undo the toy's, putting this
    # repository's kernels modules back before own_kernels_package drops what sys.modules holds
    # then, which left no kernels.* for the next test (its kernels.softmax imported afresh).
    try:
        with monkeypatch.context() as patch:
            patch.setattr(gatekey, "GATE_CODE", (code,))
            gatekey.gate_code_sha256.cache_clear()
            _passed(root, kernel)
            code.write_text("TOLERANCE = 2\n")
            gatekey.gate_code_sha256.cache_clear()
            got, said = _reused(root, kernel)
    finally:
        gatekey.gate_code_sha256.cache_clear()
    assert got == {} and said[0].endswith(": kernlog's gate code"), said


def test_a_failed_outcome_is_never_reused(toy):
    root, kernel, _ = toy
    gate_runs.note_verdict(root, kernel, kernel.revision("right"), _common(),
                           ("failed", "right 3x5 fp32 random: FAIL x"), 2.0)
    entry = gates.load(root, SLUG, "toy")["right"]
    assert entry["passed"] is False and entry["key"] and "check" not in entry
    assert _reused(root, kernel) == ({}, [])  # nothing said: a failure is gated again as a matter of course
    assert not gate_marks.reusable(dict(entry, passed=False, check={"cases": 1}), entry["key"])


def test_no_outcome_or_one_kept_before_keys_is_no_reuse(toy):
    root, kernel, _ = toy
    assert _reused(root, kernel, names=("right", "ref")) == ({}, [])
    # an entry as kept before keys were (kernlog check on a GPU, schema 1): a pass that matches nothing
    gates.record(root, SLUG, "toy", {"right": gates.outcome(kernel.revision("right").sha256(), None, None, "check")})
    got, said = _reused(root, kernel)
    assert got == {} and said[0].endswith(": no key kept with it")
    assert json.loads(gate_outcomes(root, SLUG, "toy").read_text())["schema"] == gates.SCHEMA


def test_a_known_wrong_revision_is_always_gated(toy):
    root, kernel, _ = toy
    wrong = dataclasses.replace(kernel.revision("bf16_wrong"), role="wrong", bug="one row 5% high in bf16")
    kernel = dataclasses.replace(kernel, revisions=tuple(wrong if r.name == "bf16_wrong" else r
                                                         for r in kernel.revisions))
    _passed(root, kernel, "bf16_wrong")  # even a stored pass (its bug fixed?) is not taken: it must be seen again
    assert _reused(root, kernel, names=("bf16_wrong",)) == ({}, [])


@pytest.mark.usefixtures("toy_picker")
def test_profile_takes_a_pass_says_so_and_gates_what_failed_or_changed(toy, monkeypatch):
    from kernlog.errors import GateFailure

    root, kernel, extra = toy
    _cpu_profiler(monkeypatch, lambda cmd, timeout, env=None: None)
    monkeypatch.setattr(profiler, "_ncu_pass", lambda *a, **k: [])
    gated = []
    real = gate.verdict
    monkeypatch.setattr(gate, "verdict", lambda k, rev, *a, **kw: gated.append(rev.name) or real(k, rev, *a, **kw))
    opts = profiler.Options(shape=(7, 33), gate_workers=1, force=True)
    revs = [kernel.revision(n) for n in ("right", "ref", "bf16_wrong")]

    def profile(**kw):
        said = []
        with pytest.raises(GateFailure, match="bf16_wrong"):
            profiler.profile(root, kernel, revs, dataclasses.replace(opts, **kw), said.append)
        return said

    profile()
    assert gated == ["right", "ref", "bf16_wrong"]
    stored = gates.load(root, SLUG, "toy")
    assert stored["right"]["key"]["source_sha256"] == kernel.revision("right").sha256()
    assert stored["right"]["seconds"] >= 0 and stored["right"]["check"]["cases"] == 4

    gated.clear()
    said = profile()
    assert gated == ["bf16_wrong"]  # the failure gated again, the passes taken
    line = next(s for s in said if "toy/right" in s and "gate" in s)
    assert re.search(r"toy/right 7x33 fp32: gate: reused \(passed \d{4}-\d\d-\d\d, same source, plan, GPU, "
                     r"libraries\)$", line), line
    assert gates.load(root, SLUG, "toy")["right"] == stored["right"]  # kept as it was, its date the gate's own

    gated.clear()
    extra.write_text("// edited\n")
    said = profile()
    assert gated == ["right", "bf16_wrong"] and any("toy/right: gated again" in s for s in said)

    gated.clear()
    profile(regate=True)
    assert gated == ["right", "ref", "bf16_wrong"]


def test_regate_is_a_profile_flag_that_travels_to_other_processes():
    opts = profiler.Options(regate=True)
    assert "--regate" in opts.to_argv()
    assert "--regate" not in profiler.Options().to_argv()


def test_a_check_on_the_gpu_of_every_dtype_keeps_a_pass_profile_takes(toy, monkeypatch):
    root, kernel, _ = toy
    monkeypatch.setattr(gate_runs.provenance, "gpu_info", lambda: _common()["gpu"])
    monkeypatch.setattr(gate_runs.provenance, "versions", lambda ncu=None: _common()["versions"])
    monkeypatch.setattr(gate, "check_revision", lambda k, rev, device, shapes=None, dtypes=None, seed=None: [
        gate.CheckResult(rev.name, (7, 33), d, "random", 1e-9, True) for d in dtypes or k.dtypes])
    list(gate_runs.check(root, kernel, [kernel.revision("right")], "cuda", ["fp32"], gpu=SLUG))
    assert "right" not in gates.load(root, SLUG, "toy")  # fp32 alone says nothing of bf16
    list(gate_runs.check(root, kernel, [kernel.revision("right")], "cuda", gpu=SLUG))
    entry = gates.load(root, SLUG, "toy")["right"]
    assert entry["by"] == "check" and entry["check"] == {"cases": 2, "worst_rel_error": 1e-9}
    assert set(_reused(root, kernel)[0]) == {"right"}


def test_bench_takes_a_stored_pass_keeps_its_own_with_a_key_and_gates_what_changed(toy, monkeypatch):
    """bench, as profile: a pass kept under the key its gate would run with is taken (one line
    says so); its own passes are kept with their key, so the next bench or profile takes them;
    an edit to the source, or --regate, gates again; a failure is always gated."""
    from kernlog.capture import bench

    from .test_profiler import _cpu_bench

    root, kernel, extra = toy
    _cpu_bench(monkeypatch)
    monkeypatch.setattr(bench.provenance, "gpu_info", lambda: _common()["gpu"])
    monkeypatch.setattr(bench.provenance, "versions", lambda *a: _common()["versions"])
    gated = []
    real = gate.check_revision
    monkeypatch.setattr(gate, "check_revision",
                        lambda k, rev, *a, **kw: gated.append(rev.name) or real(k, rev, *a, **kw))
    revs = [kernel.revision("right"), kernel.revision("ref")]

    def swept(**kw):
        said = []
        bench.bench(root, kernel, revs, [(9, 33)], ["fp32"], budget_s=0.01, progress=said.append, **kw)
        return said

    swept()
    assert gated == ["right", "ref"]
    entry = gates.load(root, SLUG, "toy")["right"]
    common = _common()
    assert entry["by"] == "bench"
    assert entry["key"] == gatekey.key(kernel, kernel.revision("right"), common["gpu"], common["versions"])
    assert set(_reused(root, kernel, names=("right", "ref"))[0]) == {"right", "ref"}  # profile would take them

    gated.clear()
    said = swept()
    assert gated == []
    assert any(re.fullmatch(r"right: gate: reused \(passed \d{4}-\d\d-\d\d, same source, plan, GPU, libraries\)", s)
               for s in said), said

    gated.clear()
    extra.write_text("// edited\n")
    said = swept()
    assert gated == ["right"] and any("toy/right: gated again" in s for s in said)

    gated.clear()
    swept(regate=True)
    assert gated == ["right", "ref"]


def test_a_revisions_own_check_shapes_are_gated_for_it_alone_and_are_part_of_its_plan(toy):
    """Revision.check_shapes: a path its own plan takes only past the kernel's check shapes (here a
    row past 40, wrong) is gated once the revision names a shape that reaches it; the shapes are its
    gate plan's (another plan: gated again), split among its gate's parts, and no other revision's."""
    from kernlog.run import parts

    root, kernel, _ = toy

    def wrong_past_40(inputs, out):
        out.copy_(inputs[0] * 2)
        if out.shape[0] > 40:
            out[40] += 1
        return out

    plain = kernel.revision("right")
    own = dataclasses.replace(plain, check_shapes=((48, 8), (7, 33)))  # (7, 33) is the kernel's already
    assert all(r.ok for r in gate.check_revision(kernel, plain, "cpu", launch=wrong_past_40))
    got = gate.check_revision(kernel, own, "cpu", launch=wrong_past_40)
    assert [r.shape for r in got if not r.ok] == [(48, 8)] * len(kernel.dtypes)
    assert kernel.gate_shapes_of(own) == kernel.gate_shapes + ((48, 8),)
    assert kernel.gate_shapes_of(kernel.revision("declines")) == kernel.gate_shapes
    assert gatekey.plan_sha256(kernel, own) != gatekey.plan_sha256(kernel, plain)
    assert len(kernel.gate_shapes) in {i for p in parts.split(kernel, own, 4) for i in p.shapes}
    _passed(root, kernel)
    other = dataclasses.replace(kernel, revisions=tuple(own if r.name == "right" else r for r in kernel.revisions))
    got, said = _reused(root, other)
    assert got == {} and said[0].endswith(": plan"), said
