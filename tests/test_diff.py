"""diff: noise bands, the timing verdict, units, selectors, and the rows a wrong diff gets wrong."""
import json
import math

import numpy as np
import pytest

from kernlog import units
from kernlog.errors import KernlogError
from kernlog.judge import bands, diff, verdicts
from kernlog.judge.plausible import impossible
from kernlog.metrics import CATALOG, metric
from kernlog.render import diff as diff_text
from kernlog.store import calibrations, lookup

from .helpers import ROOT, SECTIONS_REP, make_profile, make_record, profile_of, put, samples, scratch_repo

# --- the timing verdict ---------------------------------------------------------------------------

def mann_whitney_p(x: list[float], y: list[float]) -> float:
    """The hand-written rank test kernlog used before scipy's: two-sided Mann-Whitney U, normal
    approximation with tie and continuity corrections. Kept here only to hold scipy to it."""
    xa, ya = np.asarray(x, float), np.asarray(y, float)
    n1, n2 = xa.size, ya.size
    allv = np.concatenate([xa, ya])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(allv.size)
    sorted_v = allv[order]
    i = 0
    ties = 0.0
    while i < allv.size:
        j = i
        while j + 1 < allv.size and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    if sigma == 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / sigma
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def _stored_samples(gpu: str, kernel: str) -> list[tuple[str, list[float]]]:
    folder = ROOT / "profiles" / gpu / kernel
    return [(p.name, json.loads(p.read_text())["timing"]["samples_ms"]) for p in sorted(folder.glob("*.json"))]


def test_the_rank_test_gives_the_hand_written_p_values_on_every_stored_pair():
    """scipy's Mann-Whitney (asymptotic, continuity-corrected) against the hand-written test it
    replaced, on the stored samples of every consecutive pair of the H100's softmax profiles:
    the same p-value to 1e-12 relative, so no verdict of the log or of compare moved."""
    stored = _stored_samples("nvidia-h100-80gb-hbm3", "softmax")
    assert len(stored) > 20
    pairs = list(zip(stored, stored[1:], strict=False))
    small = 0
    for (na, a), (nb, b) in pairs:
        want = mann_whitney_p(a, b)
        got = verdicts.rank_test(a, b)
        assert got == pytest.approx(want, rel=1e-12, abs=0), f"{na} vs {nb}"
        assert verdicts.rank_test(b, a) == pytest.approx(want, rel=1e-12, abs=0)
        small += want < 1e-6
    assert small > len(pairs) // 2  # the tail matters: most pairs differ far beyond ALPHA


def test_identical_samples_give_p_one():
    for _, samples_ms in _stored_samples("nvidia-h100-80gb-hbm3", "softmax")[:5]:
        assert verdicts.rank_test(samples_ms, list(samples_ms)) == 1.0
    assert verdicts.rank_test([1.0] * 10, [1.0] * 12) == 1.0  # every sample tied: nothing to rank
    v = verdicts.timing_verdict([0.5] * 10, [0.5] * 10)
    assert v.p_value == 1.0 and v.verdict == "same"


def test_rank_test_separates_shifted_samples_and_is_symmetric():
    rng = np.random.default_rng(0)
    a = list(rng.normal(1.0, 0.01, 30))
    same = list(rng.normal(1.0, 0.01, 30))
    shifted = list(rng.normal(1.05, 0.01, 30))
    assert verdicts.rank_test(a, same) > 0.05
    assert verdicts.rank_test(a, shifted) < 1e-6
    assert verdicts.rank_test(a, shifted) == pytest.approx(verdicts.rank_test(shifted, a))
    assert verdicts.rank_test(a, shifted) == pytest.approx(mann_whitney_p(a, shifted), rel=1e-12)


def test_rank_test_matches_a_hand_computed_case():
    # x all below y, n=8 each: U = 0, z = (32 - 0.5) / sqrt(8*8*17/12) = 3.309, p = erfc(z/sqrt2)
    p = verdicts.rank_test(list(range(8)), list(range(10, 18)))
    assert p == pytest.approx(math.erfc((32 - 0.5) / math.sqrt(8 * 8 * 17 / 12) / math.sqrt(2)), rel=1e-12)


@pytest.mark.parametrize("factor,expected", [(0.9, "faster"), (1.1, "slower"), (1.0, "same")])
def test_timing_verdict_from_samples(factor, expected):
    a = samples(1.0, seed=1)
    b = [x * factor for x in samples(1.0, seed=2)]
    assert verdicts.timing_verdict(a, b).verdict == expected


def test_a_significant_move_inside_the_band_is_same():
    a = samples(1.0, n=200, spread=0.001, seed=3)
    b = samples(1.01, n=200, spread=0.001, seed=4)
    v = verdicts.timing_verdict(a, b, 0.035)
    assert v.p_value < 1e-6 and v.verdict == "same"
    assert verdicts.timing_verdict(a, b, 0.005).verdict == "slower"  # a narrower band calls it


def test_outside_the_band_but_not_significant_is_inconclusive():
    a = [1.0, 1.5, 0.7, 1.2, 0.9, 1.6, 0.6, 1.1]
    b = [1.1, 1.4, 0.8, 1.3, 1.0, 1.7, 0.65, 1.25]
    v = verdicts.timing_verdict(a, b, 0.01)
    assert abs(v.ratio - 1) > 0.01 and v.p_value > verdicts.ALPHA and v.verdict == "inconclusive"


@pytest.mark.parametrize("n", [1, 2, verdicts.MIN_SAMPLES - 1])
def test_too_few_samples_gives_no_verdict(n):
    v = verdicts.timing_verdict([1.0] * n, [0.5] * 50)
    assert v.verdict == "too few samples" and v.ratio is None
    assert f"n={n} vs 50" in v.line()


def test_non_finite_samples_do_not_count():
    v = verdicts.timing_verdict([float("nan")] * 50 + [1.0] * 3, [1.0] * 50)
    assert v.verdict == "too few samples" and v.n_a == 3


def test_verdict_is_deterministic():
    a, b = samples(1.0, seed=5), samples(0.97, seed=6)
    assert verdicts.timing_verdict(a, b) == verdicts.timing_verdict(a, b)


@pytest.mark.parametrize("factor", [0.5, 0.97, 0.99, 1.0, 1.01, 1.03, 2.0])
def test_the_wall_time_row_always_agrees_with_the_verdict(factor):
    a = make_record("torch", median_ms=0.1)
    b = make_record("torch_compile", median_ms=0.1 * factor, seed=1)
    d = diff.diff(profile_of(a), profile_of(b))
    row = next(r for r in d["rows"] if r["metric"] == "wall_ms")
    assert row["judgement"] == verdicts.VERDICT_ROW.get(d["timing"]["verdict"], d["timing"]["verdict"])


def test_too_few_samples_reaches_the_row():
    a = make_record("torch")
    b = make_record("torch_compile", seed=1)
    b["timing"]["samples_ms"] = b["timing"]["samples_ms"][:1]
    d = diff.diff(profile_of(a), profile_of(b))
    assert d["timing"]["verdict"] == "too few samples"
    assert next(r for r in d["rows"] if r["metric"] == "wall_ms")["judgement"] == "too few samples"
    assert "too few samples (n=60 vs 1" in diff_text.render(d)


# --- judgements ------------------------------------------------------------------------------------

def test_each_metric_knows_its_good_direction():
    assert verdicts.judge(metric("wall_ms"), 2.0, 1.0) == "better"
    assert verdicts.judge(metric("duration_us"), 1.0, 2.0) == "worse"
    assert verdicts.judge(metric("dram_gbps"), 2.0, 1.0) == "worse"
    assert verdicts.judge(metric("dram_gbps"), 1.0, 2.0) == "better"
    assert verdicts.judge(metric("stall_long_scoreboard"), 1.0, 3.0) == "worse"
    assert verdicts.judge(metric("dram_mb"), None, 3.0) == "not collected"


@pytest.mark.parametrize("key", ["block_size", "grid_size", "achieved_occupancy_pct", "theoretical_occupancy_pct",
                                 "registers_per_thread", "compute_pct", "memory_pct"])
def test_context_dependent_metrics_only_change(key):
    assert verdicts.judge(metric(key), 100.0, 200.0) == "changed"
    assert verdicts.judge(metric(key), 200.0, 100.0) == "changed"


def test_inside_the_band_is_same_outside_is_judged():
    band = verdicts.Band(0.02, 0.0, "test")
    m = metric("duration_us")
    assert verdicts.judge(m, 100.0, 101.9, band) == "same"
    assert verdicts.judge(m, 100.0, 102.5, band) == "worse"
    assert verdicts.judge(m, 100.0, 97.5, band) == "better"


def test_a_rate_with_more_bytes_is_changed_not_better():
    a = {"dram_mb": 100.0, "dram_gbps": 1000.0, "instructions": 10.0}
    b = {"dram_mb": 200.0, "dram_gbps": 1500.0, "instructions": 10.0}
    rows = {r.metric: r for r in diff.metric_rows(a, b)}
    assert rows["dram_mb"].judgement == "worse"
    assert rows["dram_gbps"].judgement == "changed"
    b["dram_mb"] = 100.0
    assert {r.metric: r for r in diff.metric_rows(a, b)}["dram_gbps"].judgement == "better"


def test_stalls_with_far_fewer_instructions_are_changed_not_worse():
    a = {"instructions": 100.0, "stall_long_scoreboard": 2.0, "stall_wait": 2.0}
    b = {"instructions": 10.0, "stall_long_scoreboard": 6.0, "stall_wait": 2.0}
    rows = {r.metric: r for r in diff.metric_rows(a, b)}
    assert rows["stall_long_scoreboard"].judgement == "changed"
    b["instructions"] = 100.0
    rows = {r.metric: r for r in diff.metric_rows(a, b)}
    assert rows["stall_long_scoreboard"].judgement == "worse"
    assert rows["stall_long_scoreboard"].share_a == pytest.approx(50.0)
    assert rows["stall_long_scoreboard"].share_b == pytest.approx(75.0)


def test_a_real_step_on_the_committed_profiles_reads_right():
    """v0 -> v1 is 13x faster: better time and bytes, and no stall or occupancy called worse."""
    a, b = lookup.resolve_pair(ROOT, lookup.parse_side("softmax/v0_naive@nvidia-h100-80gb-hbm3"),
                               lookup.parse_side("softmax/v1_block_smem@nvidia-h100-80gb-hbm3"))
    d = diff.diff(a, b)
    rows = {r["metric"]: r for r in d["rows"]}
    assert d["timing"]["verdict"] == "faster"
    assert rows["wall_ms"]["judgement"] == rows["duration_us"]["judgement"] == rows["dram_mb"]["judgement"] == "better"
    assert rows["achieved_occupancy_pct"]["judgement"] == "changed"
    assert rows["dram_gbps"]["judgement"] == "changed"  # v0 moved twice the bytes
    assert not [r for r in d["rows"] if r["kind"] == "stall" and r["judgement"] in ("better", "worse")]


def test_an_a_a_diff_is_all_same():
    a = make_record("torch", median_ms=0.1, seed=1)
    b = make_record("torch", median_ms=0.1, seed=2)
    d = diff.diff(profile_of(a), profile_of(b))
    assert d["timing"]["verdict"] == "same"
    assert {r["judgement"] for r in d["rows"]} <= {"same", "not collected"}


# --- rows, units and the JSON ------------------------------------------------------------------------

def test_every_numeric_json_row_has_its_fields_and_a_unit():
    a, b = make_record("torch", median_ms=0.12), make_record("torch_compile", report=SECTIONS_REP, seed=1)
    d = json.loads(diff_text.render(diff.diff(profile_of(a), profile_of(b)), "json"))
    assert d["rows"]
    for r in d["rows"]:
        assert {"metric", "unit", "a", "b", "delta", "ratio", "judgement", "band"} <= set(r)
        assert r["judgement"] in verdicts.JUDGEMENTS + ("too few samples", "inconclusive")
        assert {"rel", "abs", "source"} <= set(r["band"])
        if r["a"] is not None or r["b"] is not None:
            assert r["unit"], r["metric"]
    assert d["rows"][0]["metric"] == "wall_ms" and d["rows"][0]["unit"] == "ms"


def test_every_catalog_metric_has_a_unit_and_kind():
    for m in CATALOG:
        assert m.unit and m.kind in ("time", "amount", "rate", "util", "stall", "config", "ratio"), m.key


@pytest.mark.parametrize("unit,a,b,shown", [("us", 14.0, 1200.0, "ms"), ("us", 14.0, 20.0, "us"),
                                           ("ms", 0.0005, 0.0009, "ns"), ("GB/s", 2890, 400, "TB/s"),
                                           ("MB", 0.5, 0.1, "KB"), ("M inst", 0.002, 0.004, "K inst")])
def test_both_sides_share_one_readable_unit(unit, a, b, shown):
    ta, tb, u = units.pair(unit, a, b)
    assert u == shown
    ratio = float(tb) / float(ta)
    assert ratio == pytest.approx(b / a, rel=1e-3)


def test_text_rows_print_units():
    a, b = make_record("torch", median_ms=0.012), make_record("torch_compile", median_ms=1.2, seed=1)
    text = diff_text.render(diff.diff(profile_of(a), profile_of(b)))
    wall = next(ln for ln in text.splitlines() if ln.startswith("wall time (median"))
    assert " ms " in wall and "1.2" in wall and "0.012" in wall


# --- which profiles, and what differs ---------------------------------------------------------------

def test_selector_parts_in_any_order():
    s = lookup.parse_side("softmax/v7_bf16_packed@bf16.nvidia-h200.1024x131072")
    assert (s.shape, s.dtype, s.gpu) == ((1024, 131072), "bf16", "nvidia-h200")
    assert lookup.parse_side("softmax/v7_bf16_packed", shape=(1, 2)).shape == (1, 2)
    assert lookup.parse_side("softmax/torch@fp32", dtype="bf16").dtype == "fp32"  # the side wins
    with pytest.raises(KernlogError, match="bad selector part"):
        lookup.parse_side("softmax/torch@8192x4096.f32!")


def test_committed_references_diff_with_no_options():
    a, b = lookup.resolve_pair(ROOT, lookup.parse_side("softmax/torch@nvidia-h100-80gb-hbm3"),
                               lookup.parse_side("softmax/torch_compile@nvidia-h100-80gb-hbm3"))
    assert tuple(a.shape) == tuple(b.shape) == (8192, 4096) and a.dtype == b.dtype == "fp32"


def test_committed_fp32_against_bf16_of_one_revision():
    a, b = lookup.resolve_pair(ROOT, lookup.parse_side("softmax/v7_bf16_packed@8192x4096.fp32.nvidia-h100-80gb-hbm3"),
                               lookup.parse_side("softmax/v7_bf16_packed@1024x131072.bf16.nvidia-h100-80gb-hbm3"))
    d = diff.diff(a, b)
    assert "dtype fp32 vs bf16" in d["differs"] and "shape 8192x4096 vs 1024x131072" in d["differs"]
    wall = next(r for r in d["rows"] if r["metric"] == "wall_ms")
    assert wall["per"] == "element" and wall["unit"] == "ps/elem"
    assert wall["a"] == pytest.approx(a.metrics["wall_ms"] * 1e9 / (8192 * 4096))


def test_one_settled_side_picks_the_others_profile(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", shape=(4096, 1024)))
    put(root, make_record("torch", shape=(1024, 4096)))
    put(root, make_record("triton", shape=(1024, 4096)))
    a, b = lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/triton"))
    assert tuple(a.shape) == (1024, 4096)


def test_remaining_ambiguity_lists_copy_pasteable_choices(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", shape=(4096, 1024)))
    put(root, make_record("torch", shape=(1024, 4096)))
    put(root, make_record("triton", shape=(2048, 2048)))
    with pytest.raises(KernlogError) as e:
        lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/triton"))
    msg = str(e.value)
    assert "softmax/torch@4096x1024.fp32.nvidia-h100-80gb-hbm3" in msg
    choice = "softmax/torch@1024x4096.fp32.nvidia-h100-80gb-hbm3"
    assert choice in msg
    a, _ = lookup.resolve_pair(root, lookup.parse_side(choice), lookup.parse_side("softmax/triton"))
    assert tuple(a.shape) == (1024, 4096)


@pytest.mark.parametrize("text,fragment", [
    ("softmax/v9", "no revision 'v9' in softmax; revisions: v0_naive,"),
    ("nosuch/v0", "no kernel 'nosuch'; kernels:"),
    ("softmax/v7_bf16_packed@4096x1024", "no profile of softmax/v7_bf16_packed@4096x1024; stored: "
                                         "softmax/v7_bf16_packed@1024x131072.bf16.nvidia-h100-80gb-hbm3"),
    ("softmax/v7_bf16_packed@nvidia-b200", "no profile of softmax/v7_bf16_packed@nvidia-b200"),
    ("softmax/v5_tuned@4096x4096x2", "shape 4096x4096x2 has 3 dimensions, softmax's shapes 2 (as 8192x4096)"),
])
def test_errors_name_the_fix(text, fragment):
    with pytest.raises(KernlogError) as e:
        lookup.resolve_one(ROOT, lookup.parse_side(text))
    assert fragment in str(e.value)


def test_a_profile_path_is_a_side():
    path = next((ROOT / "profiles").rglob("v0_naive.8192x4096.fp32.json"))
    rec = lookup.resolve_one(ROOT, lookup.parse_side(str(path)))
    assert rec.revision == "v0_naive"


def test_the_header_says_what_differs_and_warns():
    a = make_record("torch")
    b = make_record("torch_compile", seed=1)
    b["kernel"] = "layernorm"
    b["gpu"] = dict(b["gpu"], name="NVIDIA H200", slug="nvidia-h200", driver="590.1")
    d = diff.diff(profile_of(a), profile_of(b))
    assert "kernel softmax vs layernorm" in d["differs"] and "GPU NVIDIA H100 80GB HBM3 vs NVIDIA H200" in d["differs"]
    assert "driver 580.159.04 vs 590.1" in d["differs"]
    assert any("different kernels" in w for w in d["warnings"])
    assert any("different GPUs" in w for w in d["warnings"])


def test_clocks_apart_beyond_the_band_warn():
    a, b = make_record("torch"), make_record("torch", seed=1)
    a["timing"]["clocks"] = {"sm_mhz": {"median": 1980.0}, "mem_mhz": {"median": 2619.0}}
    b["timing"]["clocks"] = {"sm_mhz": {"median": 1755.0}, "mem_mhz": {"median": 2619.0}}
    d = diff.diff(profile_of(a), profile_of(b))
    assert any("SM clock 1980 vs 1755 MHz" == x for x in d["differs"])
    assert any("SM clocks 1980 and 1755 MHz" in w for w in d["warnings"])
    b["timing"]["clocks"]["sm_mhz"]["median"] = 1975.0
    assert not [w for w in diff.diff(profile_of(a), profile_of(b))["warnings"] if "clock" in w]


# --- noise bands -----------------------------------------------------------------------------------

def test_spread_of_runs():
    s = verdicts.band_of_runs([{"x": 1.0, "y": None}, {"x": 1.1}, {"x": 0.9}])
    assert s["x"]["rel"] == pytest.approx(0.2) and s["x"]["abs"] == pytest.approx(0.2) and "y" not in s
    assert s["x"]["sigma_rel"] == pytest.approx(0.2 / verdicts.D2[3])


def test_runs_of_another_config_are_a_change_not_noise():
    """softmax v7 on the H100 picked 128- or 256-thread blocks from process to process: twice the
    instructions, the same time. Spread is taken within one config."""
    runs = [{"block_size": 128.0, "instructions": 14.42, "wall_ms": 0.09286},
            {"block_size": 256.0, "instructions": 28.44, "wall_ms": 0.09315},
            {"block_size": 128.0, "instructions": 14.42, "wall_ms": 0.09312},
            {"block_size": 256.0, "instructions": 28.44, "wall_ms": 0.09299}]
    s = verdicts.band_of_runs(runs)
    assert s["instructions"]["rel"] == 0.0 and s["instructions"]["configs"] == 2
    assert s["wall_ms"]["rel"] == pytest.approx((0.09312 - 0.09286) / 0.09299, rel=1e-3)


def _calibration(root, spread_wall, revision="torch", runs=5):
    """A stored calibration whose wall times span `spread_wall` of their median."""
    walls = [0.1 * (1 - spread_wall / 2)] + [0.1] * (runs - 2) + [0.1 * (1 + spread_wall / 2)]
    cal = {"schema": calibrations.SCHEMA, "kernel": "softmax", "revision": revision, "shape": [8192, 4096],
           "dtype": "fp32", "runs_n": runs,
           "runs": [{"wall_ms": w, "stall_wait": 0.001 * (1 + i), "block_size": 128.0} for i, w in enumerate(walls)]}
    path = calibrations.noise_dir(root, "nvidia-h100-80gb-hbm3", "softmax") / f"{revision}.8192x4096.fp32.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cal))


def _band(spread_wall, runs=5):
    return max(verdicts.Z99 * 2 ** 0.5 * spread_wall / verdicts.D2[runs], verdicts.FLOOR["time"])


def test_a_calibration_sets_the_band_and_says_so(tmp_path):
    root = scratch_repo(tmp_path)
    a, b = make_record("torch"), make_record("torch_compile", seed=1)
    assert bands.bands_for(root, profile_of(a), profile_of(b))("wall_ms").source == "default (time)"
    _calibration(root, 0.04, revision="v0_naive")
    band = bands.bands_for(root, profile_of(a), profile_of(b))("wall_ms")
    assert band.rel == pytest.approx(_band(0.04))
    assert band.source == "calibrated on nvidia-h100-80gb-hbm3: softmax/v0_naive"
    _calibration(root, 0.06, revision="torch")  # the widest of the GPU's calibrations
    assert bands.bands_for(root, profile_of(a), profile_of(b))("wall_ms").rel == pytest.approx(_band(0.06))
    _calibration(root, 0.01, revision="torch")  # a side's own narrower calibration does not narrow it
    assert bands.bands_for(root, profile_of(a), profile_of(b))("wall_ms").rel == pytest.approx(_band(0.04))
    # a spread measured on a value near zero is no relative band: the default stays
    assert bands.bands_for(root, profile_of(a), profile_of(b))("stall_wait").source == "default (stall)"


def test_a_calibrated_time_band_is_never_under_the_floor(tmp_path):
    root = scratch_repo(tmp_path)
    _calibration(root, 0.001)
    band = bands.bands_for(root, make_profile("torch"), make_profile("torch", seed=1))("wall_ms")
    assert band.rel == verdicts.FLOOR["time"] and band.source.startswith("calibrated")


def test_the_diff_judges_with_the_calibrated_band(tmp_path):
    root = scratch_repo(tmp_path)
    a = make_record("torch", median_ms=0.100)
    b = make_record("torch_compile", median_ms=0.102, seed=1)
    put(root, a)
    put(root, b)
    b = make_record("torch_compile", median_ms=0.103, seed=1)
    put(root, b)
    d = diff.run(root, lookup.parse_side("softmax/torch@nvidia-h100-80gb-hbm3"),
                               lookup.parse_side("softmax/torch_compile@nvidia-h100-80gb-hbm3"))
    assert d["timing"]["verdict"] == "same"  # 3% inside the 3.5% default
    _calibration(root, 0.002)  # 0.2%: the band is the 2% floor
    d = diff.run(root, lookup.parse_side("softmax/torch@nvidia-h100-80gb-hbm3"),
                               lookup.parse_side("softmax/torch_compile@nvidia-h100-80gb-hbm3"))
    assert d["timing"]["verdict"] == "slower" and "calibrated" in d["bands"]


def test_across_gpus_the_default_bands_apply(tmp_path):
    root = scratch_repo(tmp_path)
    _calibration(root, 0.001)
    a, b = make_record("torch"), make_record("torch", seed=1)
    b["gpu"] = dict(b["gpu"], slug="nvidia-h200", name="NVIDIA H200")
    assert bands.bands_for(root, profile_of(a), profile_of(b))("wall_ms").source == "default (time)"


# --- impossible numbers ----------------------------------------------------------------------------

def test_bandwidth_over_the_copy_ceiling_is_flagged():
    rec = make_record("torch", median_ms=0.1)
    assert impossible(profile_of(rec), 0.035) == []
    rec["metrics"]["wall_ms"] = rec["bytes_moved"] / 3300e6  # 3.3 TB/s against a 3.0 copy
    flags = impossible(profile_of(rec), 0.035)
    assert len(flags) == 1 and "exceeds the measured copy ceiling" in flags[0]
    rec["metrics"]["wall_ms"] = rec["bytes_moved"] / 3400e6  # past the H100's 3.35 TB/s spec
    assert "spec peak" in impossible(profile_of(rec), 0.035)[0]
    d = diff.diff(make_profile("torch"), profile_of(rec))
    assert d["flags"] and "IMPOSSIBLE" in diff_text.render(d)


def test_a_broken_profile_of_another_shape_does_not_block(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch"))
    bad = put(root, make_record("torch", shape=(4096, 1024)))
    bad.write_text("{not json")
    assert lookup.resolve_one(root, lookup.parse_side("softmax/torch@8192x4096")).dtype == "fp32"
    with pytest.raises(KernlogError, match="torch.4096x1024.fp32.json"):
        lookup.resolve_one(root, lookup.parse_side("softmax/torch@4096x1024"))
    rec = lookup.resolve_one(root, lookup.parse_side("softmax/torch@fp32"))  # the declared shape: the bad one named
    assert tuple(rec.shape) == (8192, 4096) and "torch.4096x1024.fp32.json" in rec.skipped[0]


def test_another_tuned_config_is_named_in_the_header():
    a, b = make_record("torch"), make_record("torch", seed=1)
    a["config"] = {"'v7'|8192|4096|'fp32'|True": "Launch(block=128)"}
    b["config"] = {"'v7'|8192|4096|'fp32'|True": "Launch(block=256)"}
    d = diff.diff(profile_of(a), profile_of(b))
    assert any(x.startswith("tuned config 'v7'|8192|4096|'fp32'|True: Launch(block=128) vs Launch(block=256)")
               for x in d["differs"])
    assert any("picked another config" in w for w in d["warnings"])
    b["config"] = dict(a["config"])
    assert not [x for x in diff.diff(profile_of(a), profile_of(b))["differs"] if "config" in x]


def test_an_imported_profile_is_bounded_by_the_spec_not_the_event_timed_copy():
    rec = make_record("torch", median_ms=0.1)
    rec["metrics"]["wall_ms"] = rec["bytes_moved"] / 3200e6  # 3.2 TB/s: over the 3.0 copy, under the 3.35 spec
    assert impossible(profile_of(rec), 0.035)
    rec["timing"]["source"] = "ncu duration"
    assert impossible(profile_of(rec), 0.035) == []
    rec["metrics"]["wall_ms"] = rec["bytes_moved"] / 3400e6
    assert "spec peak" in impossible(profile_of(rec), 0.035)[0]


def test_an_unknown_driver_is_no_difference():
    a, b = make_record("torch"), make_record("torch", seed=1)
    b["gpu"] = dict(b["gpu"], driver="unknown")
    assert not [x for x in diff.diff(profile_of(a), profile_of(b))["differs"] if x.startswith("driver")]


def test_two_ambiguous_sides_meet_on_the_one_key_they_share(tmp_path):
    root = scratch_repo(tmp_path)
    for shape in ((4096, 1024), (1024, 4096)):
        put(root, make_record("torch", shape=shape))
    for shape in ((1024, 4096), (2048, 2048)):
        put(root, make_record("triton", shape=shape))
    a, b = lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/triton"))
    assert tuple(a.shape) == tuple(b.shape) == (1024, 4096)


def test_the_declared_profile_shape_wins_before_anything_else(tmp_path):
    root = scratch_repo(tmp_path)
    for shape in ((8192, 4096), (1024, 4096)):
        put(root, make_record("torch", shape=shape))
        put(root, make_record("triton", shape=shape))
    a, b = lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/triton"))
    assert tuple(a.shape) == tuple(b.shape) == (8192, 4096)
    a, b = lookup.resolve_pair(root, lookup.parse_side("softmax/torch@1024x4096"), lookup.parse_side("softmax/triton"))
    assert tuple(a.shape) == (1024, 4096) and tuple(b.shape) == (8192, 4096)  # each side its own default


def test_a_settled_side_is_followed_on_dtype_and_gpu_when_the_shape_differs(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", shape=(4096, 1024)))
    put(root, make_record("triton", shape=(2048, 2048), dtype="fp32"))
    put(root, make_record("triton", shape=(2048, 2048), dtype="bf16"))
    a, b = lookup.resolve_pair(root, lookup.parse_side("softmax/torch"), lookup.parse_side("softmax/triton"))
    assert b.dtype == "fp32" and tuple(a.shape) == (4096, 1024)


def test_a_revision_profiled_on_two_gpus_asks_which_where_no_default_gpu_has_it(monkeypatch):
    monkeypatch.setattr(lookup, "this_gpu", lambda: None)
    monkeypatch.setattr(lookup, "primary_gpu", lambda root: "nvidia-b200")
    with pytest.raises(KernlogError, match=r"has 2 profiles; name one: .*nvidia-h100-80gb-hbm3.*nvidia-h200"):
        lookup.resolve_pair(ROOT, lookup.parse_side("softmax/v0_naive"), lookup.parse_side("softmax/v1_block_smem"))


# --- verdicts: one pure module that every judgement comes from -------------------------------------

def test_verdicts_is_pure():
    """judge/verdicts.py reads no file and runs no git: at module level it imports nothing of
    kernlog but the metric catalogue and units, and nothing that does I/O."""
    import ast

    tree = ast.parse((ROOT / "kernlog" / "judge" / "verdicts.py").read_text())
    imported = {alias.name if isinstance(node, ast.Import) else node.module
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert {m for m in imported if m.startswith("kernlog")} <= {"kernlog.metrics", "kernlog.units"}
    assert not imported & {"json", "os", "pathlib", "subprocess", "shutil", "io"}
    # mutmut: its trampoline, imported into every module it mutates (`mutmut run`), runs no I/O
    assert {m.split(".")[0] for m in imported} <= {"__future__", "kernlog", "math", "statistics", "dataclasses",
                                                   "scipy", "mutmut"}


def test_bounds_tie_inside_the_band():
    assert verdicts.at_least(0.96, 1.0, 0.04) and not verdicts.at_least(0.959, 1.0, 0.04)
    assert verdicts.at_least(1.0, 1.0) and not verdicts.at_least(0.999, 1.0)
    assert verdicts.at_most(1.04, 1.0, 0.04) and not verdicts.at_most(1.041, 1.0, 0.04)
    assert verdicts.apart(1980.0, 1755.0, 0.1) and not verdicts.apart(1980.0, 1800.0, 0.1)
    assert verdicts.apart(1755.0, 1980.0, 0.1)  # the band of the larger, either order


@pytest.mark.parametrize("verdict,ratio,regressed", [("slower", 1.05, True), ("slower", 1.025, False),
                                                      ("slower", 1.02, False), ("inconclusive", 1.2, False),
                                                      ("faster", 0.5, False)])
def test_a_regression_is_slower_beyond_noise_and_the_threshold(verdict, ratio, regressed):
    v = verdicts.Verdict(verdict, ratio, 1e-9, 0.02, "test", 60, 60)
    assert verdicts.regression(v, 0.03) is regressed
    assert v.step is (verdict in ("faster", "slower"))


def test_stale_only_where_the_revision_is_known_and_its_hash_differs():
    assert verdicts.stale("aaa", {"v1": "bbb"}, "v1") is True
    assert verdicts.stale("bbb", {"v1": "bbb"}, "v1") is False
    assert verdicts.stale("aaa", {"v1": "bbb"}, "gone") is False  # no longer in the kernel
    assert verdicts.stale(None, {"v1": "bbb"}, "v1") is False  # no hash recorded


def test_rate_of_a_profile():
    rec = make_record("torch")
    rec.update(metrics=dict(rec["metrics"], wall_ms=0.5), bytes_moved=int(1e9), flops=None,
               ceilings={"copy_gbps": 4000.0, "matmul_bf16_tflops": None})
    assert verdicts.rate(profile_of(rec)) == {"us": 500.0, "gbps": 2000.0, "pct_copy": 50.0}
    r = verdicts.rate(profile_of(dict(rec, flops=1e9, ceilings={"copy_gbps": None, "matmul_bf16_tflops": 400.0})))
    assert r["pct_copy"] is None and r["tflops"] == pytest.approx(2.0) and r["pct_matmul"] == pytest.approx(0.5)


def test_bands_of_a_gpu_are_those_bands_for_gives_a_pair_on_it(tmp_path):
    root = scratch_repo(tmp_path)
    _calibration(root, 0.05)
    a, b = make_record("torch"), make_record("torch", seed=1)
    a, b = profile_of(a), profile_of(b)
    assert bands.bands_of(root, a.gpu.slug)("wall_ms") == bands.bands_for(root, a, b)("wall_ms")
    assert bands.bands_of(root, "nvidia-h200")("wall_ms").source == "default (time)"


def test_a_shape_of_another_rank_is_named_where_the_revision_has_no_profile_at_all(tmp_path):
    """In a new repository nothing is stored yet: a --shape of the wrong rank is still the mistake named."""
    from .helpers import scratch_repo

    root = scratch_repo(tmp_path)
    with pytest.raises(KernlogError, match=r"^shape 8x8x8 has 3 dimensions, softmax's shapes 2"):
        lookup.resolve_one(root, lookup.parse_side("softmax/v0_naive@8x8x8"))
    with pytest.raises(KernlogError, match=r"^softmax/v0_naive has no stored profile: "):
        lookup.resolve_one(root, lookup.parse_side("softmax/v0_naive@8x8"))


def test_a_typo_in_the_second_side_is_said_before_the_first_sides_state():
    """`kernlog diff A B` with B misspelt says B's typo, not A's own state (here a known-wrong revision, never
    profiled), which would send the user to fix the wrong side."""
    a = lookup.parse_side("attention_backward/wrong_no_delta")
    with pytest.raises(KernlogError, match="is a known-wrong revision, never profiled"):
        lookup.resolve_one(ROOT, a)
    with pytest.raises(KernlogError) as e:
        lookup.resolve_pair(ROOT, a, lookup.parse_side("attention_backward/v3_orderd"))
    assert str(e.value).startswith("no revision 'v3_orderd' in attention_backward; revisions: "), str(e.value)
    with pytest.raises(KernlogError) as e:
        lookup.resolve_pair(ROOT, a, lookup.parse_side("atention_backward/v3_ordered"))
    assert str(e.value).startswith("no kernel 'atention_backward'; kernels: "), str(e.value)
