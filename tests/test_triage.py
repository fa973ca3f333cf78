"""kernlog triage, the pure parts: the Chrome trace's attribution, the 90% cover, the roofline
at minimum bytes and FLOPs, fusion chains, ranking, Amdahl and the verify verdict."""
import math

import pytest

from kernlog.capture.trace import group_times, parse_chrome_trace
from kernlog.judge import triage as judge
from kernlog.judge.opcost import minimum_cost
from tests.triage_fixtures import GELU, GEMM, REDUCE, bf16, f32, row, two_op_trace

PEAKS = judge.Peaks(bandwidth_gbps=1000.0, tensor_tflops=100.0, fp32_tflops=50.0)  # 1 MB/us; 1e8 FLOP/us


def test_trace_kernels_link_to_the_op_and_module_that_launched_them():
    rows = parse_chrome_trace(two_op_trace())
    assert [r.name for r in rows] == [GEMM, REDUCE, GELU]  # GPU order, not file order
    gemm, red, gelu = rows
    assert (gemm.op, gemm.top_op, gemm.module) == ("aten::addmm", "aten::linear", "Linear_0")
    assert gemm.modules == ("Sequential_0", "Linear_0")
    assert gemm.inputs[1] == ((64, 256), "c10::BFloat16")
    assert red.op == "aten::addmm" and red.call == gemm.call  # one call, two kernels
    assert (gelu.op, gelu.module, gelu.modules) == ("aten::gelu", "GELU_0", ("Sequential_0", "GELU_0"))
    assert gelu.call != gemm.call
    assert [r.us for r in rows] == [70.0, 10.0, 40.0]
    by_op = group_times(rows, "op")
    assert by_op == [{"name": "aten::addmm", "count": 2, "us": 80.0}, {"name": "aten::gelu", "count": 1, "us": 40.0}]
    assert group_times(rows, "module")[0] == {"name": "Linear_0", "count": 2, "us": 80.0}


def test_a_kernel_without_its_launch_is_unattributed_and_a_driver_launch_counts():
    trace = two_op_trace()
    for e in trace["traceEvents"]:
        if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] == 3:
            e["cat"], e["name"] = "cuda_driver", "cuLaunchKernel"  # Triton launches through the driver API
        if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] == 2:
            e["args"]["correlation"] = 99
    rows = {r.name: r for r in parse_chrome_trace(trace)}
    assert rows[GELU].op == "aten::gelu"
    assert (rows[REDUCE].op, rows[REDUCE].module, rows[REDUCE].call) == ("", "", -1)
    assert group_times(list(rows.values()), "op")[-1]["name"] == "(none)"


def test_spans_starting_together_nest_longest_outside():
    from tests.triage_fixtures import cpu_op, kernel, launch

    bf = "c10::BFloat16"
    trace = {"traceEvents": [  # the inner op listed first, both opening with the launch's microsecond
        kernel(GEMM, 1, 100.0, 5.0), launch(1, 20),
        cpu_op("aten::addmm", 20, 10, [(4,), (2, 3), (3, 4)], [bf, bf, bf]),
        cpu_op("aten::linear", 20, 50, [(2, 3), (4, 3), (4,)], [bf, bf, bf])]}
    (r,) = parse_chrome_trace(trace)
    assert (r.op, r.top_op) == ("aten::addmm", "aten::linear")


def test_a_trace_without_kernels_gives_no_rows():
    trace = {"traceEvents": [e for e in two_op_trace()["traceEvents"] if e.get("cat") != "kernel"]}
    assert parse_chrome_trace(trace) == []


def test_cover_takes_the_fewest_kernels_reaching_90_percent():
    rows = [row("a", 50, 0), row("b", 20, 1), row("b", 10, 2), row("c", 15, 3), row("d", 5, 4)]
    assert judge.cover(rows) == ["a", "b", "c"]  # 50 + 30 = 80% < 90%, + 15 = 95%
    exact = [row("a", 60, 0), row("b", 30, 1), row("c", 10, 2)]
    assert judge.cover(exact) == ["a", "b"]  # 90% exactly is enough
    assert judge.cover(exact, share=0.5) == ["a"]


def test_minimum_cost_of_matmuls_convolutions_and_elementwise_ops():
    mm = minimum_cost("aten::addmm", [bf16(512), bf16(64, 256), bf16(256, 512), ((), "Scalar"), ((), "Scalar")])
    assert mm.flops == 2 * 64 * 512 * 256
    assert mm.bytes == 2 * (512 + 64 * 256 + 256 * 512 + 64 * 512)
    lin = minimum_cost("aten::linear", [f32(8, 1024, 768), f32(3072, 768), f32(3072)])
    assert lin.flops == 2 * 8 * 1024 * 3072 * 768 and lin.out_dims == (8, 1024, 3072)
    bmm = minimum_cost("aten::bmm", [f32(12, 128, 64), f32(12, 64, 128)])
    assert bmm.flops == 2 * 12 * 128 * 128 * 64 and bmm.out_dims == (12, 128, 128)
    # a 3x3 stride-2 pad-1 convolution of 2x3x16x16 to 8 channels: 8x8 output
    conv = minimum_cost("aten::cudnn_convolution", [f32(2, 3, 16, 16), f32(8, 3, 3, 3)],
                        ("", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"))
    assert conv.out_dims == (2, 8, 8, 8) and conv.flops == 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)
    add = minimum_cost("aten::add", [f32(4, 1, 8), f32(5, 8), ((), "Scalar")])
    assert add.out_dims == (4, 5, 8) and add.bytes == 4 * (32 + 40 + 160) and add.flops is None
    copy = minimum_cost("aten::copy_", [bf16(10, 10), f32(10, 10), ((), "Scalar")])
    assert copy.bytes == 400 + 200  # the source read, the destination written, not read
    assert minimum_cost("aten::sum", [f32(100, 10)]).bytes == 4000
    assert minimum_cost("aten::_flash_attention_forward", [bf16(8, 12, 1024, 64)]) is None


def _placed_rows():
    mm = [bf16(1024, 1024), bf16(1024, 1024)]  # 6.29 MB, 2.15 GFLOP: compute-bound, roof 21.47 us
    gelu = [f32(1000, 1000), ((), "")]  # 8 MB: roof 8 us a call
    return [row(GEMM, 30.0, 0, "aten::mm", mm, call=0, module_="Linear_0"),
            row(GELU, 10.0, 1, "aten::gelu", gelu, call=1, module_="GELU_0"),
            row(GELU, 10.0, 2, "aten::gelu", gelu, call=2, module_="GELU_1"),
            row("flash_fwd", 9.0, 3, "aten::_flash_attention_forward", [bf16(8, 12, 1024, 64)], call=3)]


def test_time_above_the_roofline_at_minimum_bytes_and_flops():
    groups = {g.op: g for g in judge.place_groups(_placed_rows(), PEAKS, {"flash_fwd": {"dram_bytes": 6e6}})}
    mm = groups["aten::mm"]
    assert mm.side == "compute" and mm.basis == "minimum"
    assert mm.roof_us == pytest.approx(2 * 1024 ** 3 / 1e8)
    assert mm.above_us == pytest.approx(30.0 - 2 * 1024 ** 3 / 1e8)
    gelu = groups["aten::gelu"]
    assert (gelu.calls, gelu.side, gelu.modules) == (2, "memory", ["GELU"])
    assert gelu.roof_us == pytest.approx(16.0) and gelu.above_us == pytest.approx(4.0)
    flash = groups["aten::_flash_attention_forward"]
    assert flash.basis == "measured" and "not a minimum" in flash.model
    assert flash.above_us == pytest.approx(3.0)
    order = [g.op for g in judge.place_groups(_placed_rows(), PEAKS, {"flash_fwd": {"dram_bytes": 6e6}})]
    assert order == ["aten::mm", "aten::gelu", "aten::_flash_attention_forward"]


def test_an_unknown_op_without_ncu_evidence_is_left_unplaced_and_last():
    groups = judge.place_groups(_placed_rows(), PEAKS)
    assert groups[-1].op == "aten::_flash_attention_forward" and groups[-1].above_us is None
    assert judge.above_roof(5.0, 8.0) == 0.0  # faster than the roof (a model's error): nothing to gain


def _chain_rows(us=20.0, start=0, call=0, gelu_dims=(1000, 1000)):
    x = f32(1000, 1000)
    return [row("add_k", us, start, "aten::add", [x, x, ((), "Scalar")], call=call),
            row("gelu_k", us, start + 1, "aten::gelu", [f32(*gelu_dims), ((), "")], call=call + 1),
            row("mul_k", us, start + 2, "aten::mul", [x, x], call=call + 2),
            row(GEMM, 30.0, start + 3, "aten::mm", [bf16(1024, 1024), bf16(1024, 1024)], call=call + 3),
            row("small_k", 2.0, start + 4, "aten::add", [f32(10, 10), f32(10, 10)], call=call + 4)]


def test_a_fusion_chain_saves_its_intermediates_bytes_written_and_read():
    rows = _chain_rows() + _chain_rows(start=10, call=10)  # two layers: one chain, repeated
    (chain,) = judge.fusion_chains(rows, PEAKS)
    assert chain.ops == ["aten::add", "aten::gelu", "aten::mul"]
    assert chain.repeats == 2 and chain.intermediate_bytes == 8e6
    assert chain.saved_us == pytest.approx(2 * 2 * 8e6 / 1e6)  # 2 layers x (write + read of 8 MB) at 1 MB/us


def test_a_fusion_saves_no_more_than_the_chain_above_its_fused_roof():
    (chain,) = judge.fusion_chains(_chain_rows(us=6.0), PEAKS)
    assert chain.saved_us == pytest.approx(18.0 - 16.0)  # fused: 32 MB - 2 x 8 MB at 1 MB/us


def test_no_chain_where_the_next_op_does_not_read_the_previous_output():
    assert judge.fusion_chains(_chain_rows(gelu_dims=(1000, 999)), PEAKS) == []


def _attention_rows(us=(20.0, 10.0, 1.0, 10.0, 10.0, 20.0)):
    """One layer's unfused causal attention in fp32, as MiniGPT's trace has it: scores by bmm,
    scaled, the mask built beside them (bitwise_not: no cost rule), filled, softmaxed, @ v
    (views: the bmm sees 3-D tensors, the elementwise ops 4-D)."""
    s3, s4, v = f32(12, 128, 128), f32(1, 12, 128, 128), f32(12, 128, 64)
    return [row(GEMM, us[0], 0, "aten::bmm", [f32(12, 128, 64), f32(12, 64, 128)], call=0),
            row("mul_k", us[1], 1, "aten::mul", [s4, ((), "Scalar")], call=1),
            row("not_k", us[2], 2, "aten::bitwise_not", [((128, 128), "bool")], call=2),
            row("fill_k", us[3], 3, "aten::masked_fill_", [s4, ((128, 128), "bool"), ((), "Scalar")], call=3),
            row("softmax_k", us[4], 4, "aten::_softmax", [s4, ((), ""), ((), "")], call=4),
            row(GEMM, us[5], 5, "aten::bmm", [s3, v], call=5)]


def test_attention_is_one_chain_from_the_scores_matmul_to_the_one_reading_them():
    (chain,) = judge.fusion_chains(_attention_rows(), PEAKS)
    assert chain.ops == ["aten::bmm", "aten::mul", "aten::masked_fill_", "aten::_softmax", "aten::bmm"]
    scores = 12 * 128 * 128 * 4
    assert chain.intermediate_bytes == 4 * scores  # bmm's, mul's, fill's and softmax's outputs
    assert chain.measured_us == pytest.approx(70.0)  # the mask's 1 us passed over, not counted
    assert chain.saved_us == pytest.approx(2 * 4 * scores / 1e6)  # each written and read once, at 1 MB/us
    # fast kernels: the saving stops at the fused kernel's roof (its FLOPs at 50 TFLOP/s fp32)
    (fast,) = judge.fusion_chains(_attention_rows((1.0, 1.0, 0.1, 1.0, 1.0, 1.0)), PEAKS)
    flops = 2 * (2 * 12 * 128 * 128 * 64)
    fused_bytes = 4 * 12 * 128 * 64 * 4 + 128 * 128  # q, k, v, out and the mask
    assert fast.saved_us == pytest.approx(5.0 - max(flops / 5e7, fused_bytes / 1e6))


def test_matmuls_alone_make_no_chain_and_two_unknown_calls_break_one():
    rows = _attention_rows()
    mm_only = [rows[0], row(GEMM, 20.0, 1, "aten::bmm", [f32(12, 128, 128), f32(12, 128, 64)], call=1)]
    assert judge.fusion_chains(mm_only, PEAKS) == []
    broken = rows[:3] + [row("not_k", 1.0, 2.5, "aten::bitwise_not", [((128, 128), "bool")], call=6)] + rows[3:]
    assert [c.ops for c in judge.fusion_chains(broken, PEAKS)] == [["aten::masked_fill_", "aten::_softmax",
                                                                     "aten::bmm"], ["aten::bmm", "aten::mul"]]


def test_amdahl_on_the_measured_total():
    assert judge.amdahl(100.0, 20.0) == pytest.approx(1.25)
    assert judge.amdahl(100.0, 0.0) == 1.0
    with pytest.raises(ValueError):
        judge.amdahl(100.0, 100.0)


def _group(key, above):
    return judge.Group(key, key, [], 1, [], [], 20.0, above_us=above, side="memory")


def test_candidates_rank_by_time_saved_with_their_amdahl_speedup():
    groups = [_group("aten::gelu(64x512)", 5.0), _group("aten::mm(64x256, 256x512)", 12.0),
              _group("aten::layer_norm(64x512)", 0.0), _group("kernel flash_fwd", None)]
    chains = [judge.Chain(["aten::add", "aten::gelu"], ["a", "b"], 3, 1e6, 30.0, 8.0)]
    cands = judge.rank(groups, chains, total_us=100.0)
    assert [(c.kind, c.saved_us) for c in cands] == [("roofline", 12.0), ("fusion", 8.0), ("roofline", 5.0)]
    assert cands[0].title.startswith("aten::mm(") and cands[1].title == "fuse aten::add -> aten::gelu (3x)"
    assert [c.speedup for c in cands] == pytest.approx([100 / 88, 100 / 92, 100 / 95])
    assert [c.kind for c in judge.rank(groups, chains, 100.0, top=2)] == ["roofline", "fusion"]


def test_ranking_a_traced_program_puts_its_largest_saving_first():
    rows = _placed_rows()[:1] + _chain_rows(start=10, call=10)[:3]
    cands = judge.rank(judge.place_groups(rows, PEAKS), judge.fusion_chains(rows, PEAKS), total_us=100.0)
    # the chain saves 16 us; the mm is 30 - 21.47 = 8.53 us above its roof; add, gelu, mul 20 us each
    # against roofs of 12, 8, 12 us
    assert [c.title.split("(")[0] for c in cands] == ["fuse aten::add -> aten::gelu -> aten::mul ",
                                                      "aten::gelu", "aten::mm", "aten::add", "aten::mul"]
    assert cands[0].speedup == pytest.approx(100 / 84)


BAND = judge.BAND


@pytest.mark.parametrize("measured, outcome", [
    (1.30, "met"), (1.25 * (1 - BAND), "met"), (math.nextafter(1.25 * (1 - BAND), 0), "partly"),
    (1.10, "partly"), (math.nextafter(1 + BAND, 2), "partly"), (1 + BAND, "missed"), (0.97, "missed")])
def test_verify_verdict_at_the_bands_edges(measured, outcome):
    v = judge.verdict(1.25, measured)
    assert v.outcome == outcome
    assert v.line().startswith(outcome) and "1.250x predicted" in v.line()


def test_interleaved_pairs_give_the_median_ratio_and_widen_a_noisy_band():
    speedup, band = judge.interleaved_speedup([2.0] * 8, [1.6] * 8)
    assert speedup == pytest.approx(1.25) and band == BAND
    noisy_new = [1.6, 1.2, 2.0, 1.6, 1.3, 1.9, 1.6, 1.6]
    speedup, band = judge.interleaved_speedup([2.0] * 8, noisy_new)
    assert speedup == pytest.approx(1.25) and band > 0.1
    assert judge.stored_speedup(125.0, [0.1, 0.1, 0.2]) == pytest.approx(1.25)
    with pytest.raises(ValueError):
        judge.interleaved_speedup([1.0, 2.0], [1.0])


def test_a_tensor_of_the_same_element_count_but_another_last_dimension_is_not_read():
    x, y = f32(1000, 1000), f32(500, 2000)  # 1e6 elements each
    rows = [row("add_k", 20.0, 0, "aten::add", [x, x, ((), "Scalar")], call=0),
            row("gelu_k", 20.0, 1, "aten::gelu", [y, ((), "")], call=1)]
    assert judge.fusion_chains(rows, PEAKS) == []
    rows[1] = row("gelu_k", 20.0, 1, "aten::gelu", [f32(10, 100, 1000), ((), "")], call=1)  # a view of x
    assert [c.ops for c in judge.fusion_chains(rows, PEAKS)] == [["aten::add", "aten::gelu"]]


def test_compile_fuses_only_the_memory_bound_calls_of_a_run_and_leaves_the_matmuls():
    # attention: Inductor fuses mul -> masked_fill_ -> softmax (their two intermediates kept on chip);
    # the bmm that writes the scores and the one reading them stay cuBLAS calls
    got = judge.compile_saving(_attention_rows(), PEAKS)
    scores = 12 * 128 * 128 * 4
    assert got["runs"] == 1 and got["calls_fused_away"] == 2 and got["measured_us"] == pytest.approx(30.0)
    assert got["saved_us"] == pytest.approx(2 * 2 * scores / 1e6)
    # add -> gelu -> mul then a matmul: the three memory-bound calls, twice
    got = judge.compile_saving(_chain_rows() + _chain_rows(start=10, call=10), PEAKS)
    assert got["runs"] == 2 and got["saved_us"] == pytest.approx(2 * 2 * 8e6 / 1e6)
    # a lone elementwise call between matmuls: nothing for Inductor to fuse
    assert judge.compile_saving(_chain_rows(gelu_dims=(1000, 999)), PEAKS) is None
