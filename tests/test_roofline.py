"""Roofline placement, by hand: intensity from the minimum bytes (each input read once, the
output written once) and the FLOP model, so traffic beyond the minimum costs % of roofline, the
attainable rate under the bandwidth slope or the compute ceiling, % of roofline, and the
label that follows from where the kernel sits (not from one percentage)."""
import pytest

from kernlog.judge import roofline
from kernlog.registry import load_kernel

from .helpers import ROOT, make_record, profile_of

SOFTMAX = load_kernel(ROOT, "softmax")
MATMUL = load_kernel(ROOT, "matmul_relu")


def place(rec: dict, kernel=None) -> dict:
    """roofline.place of a record built here, as the Profile a loader gives."""
    return roofline.place(profile_of(rec), kernel)


def rec_with(wall_ms, dram_mb, **metrics):
    rec = make_record("torch", median_ms=wall_ms)
    rec["metrics"].update(wall_ms=wall_ms, dram_mb=dram_mb, **metrics)
    rec["ceilings"] = {"copy_gbps": 3000.0, "matmul_bf16_tflops": 777.3}
    return rec


def test_a_memory_bound_softmax_sits_under_the_bandwidth_slope():
    # F.softmax's own figures: memory 67%, SM 69% of peak (the old classifier said compute-bound)
    p = place(rec_with(0.1, 268.435456, memory_pct=67.0, dram_pct=67.0, compute_pct=69.0), SOFTMAX)
    assert p["flops"] == 5 * 8192 * 4096 and p["intensity"] == pytest.approx(0.625)
    assert p["attainable"] == pytest.approx(0.625 * 3000 / 1e3)  # 1.875 TFLOP/s, far left of the ridge
    assert p["achieved"] == pytest.approx(5 * 8192 * 4096 / 1e-4 / 1e12)
    assert p["pct_of_roof"] == pytest.approx(1.6777216 / 1.875)
    assert p["side"] == "memory" and p["ridge"] == pytest.approx(66.9e12 / 3000e9)
    assert p["label"] == "memory-bound: 89% of the bandwidth roof (DRAM 67% of peak)"


def test_far_under_its_roof_a_kernel_is_latency_bound_and_says_what_holds_it():
    p = place(rec_with(1.0, 536.870912, dram_pct=11.0, achieved_occupancy_pct=6.0,
                                stall_long_scoreboard=37.5, stall_wait=1.0), SOFTMAX)
    # the minimum bytes place it (intensity 0.625, not the 0.3125 its doubled DRAM traffic gives):
    # twice the traffic halves % of roofline instead of moving the point to a lower roof
    assert p["intensity"] == pytest.approx(0.625) and p["excess"] == pytest.approx(2.0)
    assert p["pct_of_roof"] == pytest.approx((5 * 8192 * 4096 / 1e-3 / 1e12) / (0.625 * 3000 / 1e3))  # 9%
    assert p["label"] == ("latency-bound: 9% of the bandwidth roof it sits under; occupancy 6%, top stall "
                          "long scoreboard (37.5 cycles/inst); DRAM traffic 2.0x the minimum")


def test_a_matmul_right_of_the_ridge_is_judged_against_the_measured_tensor_rate():
    rec = make_record("torch", median_ms=0.18358)
    rec.update(flops=2 * 4096 ** 3, shape=[4096, 4096, 4096], bytes_moved=3 * 2 * 4096 * 4096)
    rec["metrics"].update(wall_ms=0.18358, dram_mb=215.144448, compute_pct=87.0)
    rec["ceilings"] = {"copy_gbps": 3000.0, "matmul_bf16_tflops": 777.3}
    p = place(rec, MATMUL)
    assert p["intensity"] == pytest.approx(2 * 4096 ** 3 / (3 * 2 * 4096 ** 2))  # minimum bytes, not DRAM's
    assert p["excess"] == pytest.approx(215.144448e6 / (3 * 2 * 4096 ** 2))
    assert p["ridge"] == pytest.approx(777.3e12 / 3000e9) and p["side"] == "compute"
    assert p["attainable"] == 777.3 and p["achieved"] == pytest.approx(2 * 4096 ** 3 / 0.18358e-3 / 1e12)
    assert p["label"].startswith("compute-bound: 96% of the cuBLAS bf16 matmul (measured) roof (SM 87% of peak)")


def test_without_a_flop_model_the_bandwidth_roof_alone_applies():
    rec = rec_with(0.1, 268.435456, dram_pct=80.0)
    p = place(rec)  # no kernel: no model
    assert p["intensity"] is None and p["unit"] == "GB/s"
    assert p["pct_of_roof"] == pytest.approx(rec["bytes_moved"] / 1e-4 / 1e9 / 3000)


def test_no_measured_bandwidth_no_placement():
    rec = rec_with(0.1, 268.435456)
    rec["ceilings"] = {"copy_gbps": None, "matmul_bf16_tflops": None}
    p = place(rec, SOFTMAX)
    assert p["pct_of_roof"] is None and p["label"].startswith("not placed")
