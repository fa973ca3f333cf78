import json

import pytest

from kernlog import diff
from kernlog.metrics import metric

from .helpers import SECTIONS_REP, make_record, samples


@pytest.mark.parametrize("factor,expected", [(0.9, "faster"), (1.1, "slower"), (1.0, "same")])
def test_timing_verdict_from_samples(factor, expected):
    a = samples(1.0, seed=1)
    b = [x * factor for x in samples(1.0, seed=2)]
    assert diff.timing_verdict(a, b).verdict == expected


def test_noisy_small_change_is_ambiguous():
    a = samples(1.0, n=20, spread=0.05, seed=3)
    b = samples(1.02, n=20, spread=0.05, seed=4)
    v = diff.timing_verdict(a, b)
    assert v.verdict == "ambiguous" and v.low < 1 < v.high


def test_verdict_is_deterministic():
    a, b = samples(1.0, seed=5), samples(0.97, seed=6)
    assert diff.timing_verdict(a, b) == diff.timing_verdict(a, b)


def test_each_metric_knows_its_good_direction():
    assert diff.judge(metric("wall_ms"), 2.0, 1.0) == "better"
    assert diff.judge(metric("dram_gbps"), 2.0, 1.0) == "worse"
    assert diff.judge(metric("stall_long_scoreboard"), 1.0, 3.0) == "worse"
    assert diff.judge(metric("block_size"), 128, 256) == "changed"
    assert diff.judge(metric("dram_mb"), None, 3.0) == "not collected"


def test_diff_of_two_profiles():
    a = make_record("torch", median_ms=0.12)
    b = make_record("torch_compile", report=SECTIONS_REP, median_ms=0.09, seed=1)
    d = diff.diff(a, b)
    assert d["timing"]["verdict"] == "faster"
    rows = {r["key"]: r for r in d["metrics"]}
    assert rows["wall_ms"]["judgement"] == "better"
    assert rows["dram_mb"]["judgement"] == "not collected"  # absent from the five-section report
    assert rows["duration_us"]["pct"] == pytest.approx(100 * (84.64 - 85.12) / 85.12, rel=1e-3)
    gone = {f["title"] for f in d["findings_gone"]}
    assert gone, "the full report has findings the five-section one lacks"
    text = diff.render(d)
    assert "FASTER" in text and "not collected" in text
    assert json.loads(diff.render(d, "json"))["timing"]["verdict"] == "faster"
    assert diff.render(d, "md").startswith("**softmax/torch → softmax/torch_compile**")


def test_diff_warns_on_different_shapes():
    a = make_record("torch")
    b = make_record("torch_compile", shape=(4096, 1024))
    assert any("shape differs" in w for w in diff.diff(a, b)["warnings"])
