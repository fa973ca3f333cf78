"""What a profile must be before it is stored: gated in every dtype its kernel declares, whichever
one is profiled; its wall time the median of its timing samples; no sample of zero or less."""
import json
import statistics
import subprocess
import sys

import pytest

from kernlog.capture import profiler
from kernlog.capture.extract import build_record
from kernlog.errors import KernlogError
from kernlog.registry import load_kernel
from kernlog.run import gate
from kernlog.store import profiles as store
from kernlog.store.record import record_problem

from .helpers import FULL_REP, ROOT, make_record, put, scratch_repo
from .test_profiler import _toy_repo

# --- the gate before any timing covers every declared dtype -------------------------------------


@pytest.fixture
def toy(tmp_path, own_kernels_package):
    """The toy operator (tests/test_profiler.py's TOY): fp32 then bf16 declared; "bf16_wrong"
    doubles its input right in fp32 and one row 5% high in bf16 alone."""
    root = _toy_repo(tmp_path)
    kernel = load_kernel(root, "toy")
    assert kernel.dtypes == ("fp32", "bf16")
    return root, kernel


def test_the_pre_timing_gate_fails_a_revision_wrong_in_its_second_dtype_alone(toy):
    _, kernel = toy
    outcome, line = gate.verdict(kernel, kernel.revision("bf16_wrong"), "cpu", seed=1)
    assert outcome == "failed" and line.startswith("bf16_wrong 3x5 bf16 random: FAIL")
    outcome, detail = gate.verdict(kernel, kernel.revision("right"), "cpu", seed=1)
    assert outcome == "ok" and detail["cases"] == 2 * 2  # two shapes in each of the two dtypes


def test_profiling_in_the_first_dtype_never_times_a_revision_wrong_in_the_second(toy, monkeypatch):
    _, kernel = toy
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    monkeypatch.setattr(profiler, "_time", lambda *a, **k: pytest.fail("a revision that failed its gate was timed"))
    said = []
    got = profiler._gate_and_time(kernel, kernel.revision("bf16_wrong"), (7, 33), "fp32", None, None,
                                  "toy/bf16_wrong", said.append)
    assert got is None
    assert any(s.startswith("toy/bf16_wrong: FAILED the gate, not profiled: ") and " bf16 " in s for s in said), said


def test_a_gate_in_its_own_process_covers_every_declared_dtype(toy, tmp_path):
    """`kernlog profile` gates each revision in a process of its own (`python -m kernlog.run.target
    --gate OUT ROOT KERNEL DEVICE REV`): that process's verdict covers the second dtype too."""
    root, _ = toy
    out = tmp_path / "gate.json"
    done = subprocess.run([sys.executable, "-m", "kernlog.run.target", "--gate", str(out), str(root), "toy", "cpu",
                           "bf16_wrong"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(out.read_text())
    assert got["outcome"] == "failed" and " bf16 random: FAIL" in got["detail"], got


# --- the stored wall time is the median of the samples --------------------------------------------

SKEWED = [1.0] * 50 + [1.1] * 5 + [4.0] * 5  # the median 1.0, a tail of stalls: p95 near 4


def test_a_profile_s_wall_time_is_the_median_of_its_samples_not_a_percentile():
    rev = load_kernel(ROOT, "softmax").revision("torch")
    rec = build_record(FULL_REP, rev, SKEWED, range_name="kl")
    assert rec["metrics"]["wall_ms"] == statistics.median(SKEWED) == 1.0
    assert rec["timing"]["median_ms"] == 1.0 and rec["timing"]["n"] == 60
    assert rec["timing"]["p95_ms"] > 3.0 and rec["timing"]["p05_ms"] == 1.0
    assert rec["timing"]["samples_ms"] == SKEWED


def test_the_stored_wall_time_reads_back_as_the_median(tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("torch")
    rev = load_kernel(ROOT, "softmax").revision("torch")
    built = build_record(FULL_REP, rev, SKEWED, range_name="kl")
    rec.update(metrics=built["metrics"], timing=built["timing"])
    prof = store.load_profile(root, put(root, rec))
    assert prof.metrics["wall_ms"] == prof.timing.median_ms == 1.0


# --- no timing sample of zero or less ---------------------------------------------------------------

@pytest.mark.parametrize("bad", [0.0, -0.05, float("nan"), float("inf")])
def test_a_timing_pass_with_a_sample_of_zero_or_less_stores_nothing(bad):
    rev = load_kernel(ROOT, "softmax").revision("torch")
    with pytest.raises(KernlogError, match="the timing pass gave no usable samples"):
        build_record(FULL_REP, rev, [0.1, 0.11, bad, 0.1], range_name="kl")
    with pytest.raises(KernlogError, match="the timing pass gave no usable samples"):
        build_record(FULL_REP, rev, [], range_name="kl")


@pytest.mark.parametrize("bad", [0.0, -0.05])
def test_a_record_with_a_sample_of_zero_or_less_is_refused_by_the_store(bad, tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("torch")
    rec["timing"]["samples_ms"] = rec["timing"]["samples_ms"][:-1] + [bad]
    with pytest.raises(KernlogError, match=rf"has a timing sample of {bad!r} ms, expected positive finite numbers"):
        put(root, rec)
    assert not list((root / "profiles").rglob("*.json"))  # nothing stored
    rec["timing"]["samples_ms"][-1] = 0.1
    assert record_problem(dict(rec, ncu={"report_bytes": 1, **rec["ncu"]})) is None


def test_a_record_with_a_zero_dimension_is_refused_by_the_store(tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("torch")
    rec["shape"] = [8192, 0]
    with pytest.raises(KernlogError, match=r"has shape \[8192, 0\], expected a list of positive integers"):
        put(root, rec)


def test_a_profile_in_another_gpus_folder_is_refused_as_misplaced(tmp_path):
    """A JSON copied under another GPU's folder, its file name right, is not read as that GPU's."""
    import shutil

    root = scratch_repo(tmp_path)
    path = put(root, make_record("torch"))
    moved = root / "profiles" / "nvidia-h200" / "softmax" / path.name
    moved.parent.mkdir(parents=True)
    shutil.copyfile(path, moved)
    with pytest.raises(store.ProfileError, match="not what its path says"):
        store.load_profile(root, moved)
    assert store.load_profile(root, path).gpu.slug == "nvidia-h100-80gb-hbm3"
