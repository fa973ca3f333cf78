"""kernlog triage on the CPU: TARGET resolution and its errors, a fresh triage with fake GPU
steps, the store (round trip, atomic writes, half-written files), the ncu command, the table,
the examples and the standalone click command's no-GPU paths."""
import gzip
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog.capture import triage as lib
from kernlog.capture import triage_ncu as tncu
from kernlog.capture.trace import parse_chrome_trace, slim
from kernlog.commands.triage import triage as triage_cmd
from kernlog.errors import KernlogError, NoGpu
from kernlog.judge import triage as judge
from kernlog.render.triage import markdown, table
from kernlog.store import triages as store
from tests.conftest import HAS_CUDA
from tests.triage_fixtures import GELU, GEMM, REDUCE, two_op_trace

ROOT = Path(__file__).resolve().parent.parent
PEAKS = judge.Peaks(bandwidth_gbps=1000.0, tensor_tflops=100.0, fp32_tflops=50.0)
GPU = {"name": "Fake GPU", "slug": "fake-gpu"}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository root (kernels/ marks it) holding a program module with a unique name."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("")
    name = f"prog_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "def make():\n    return lambda: None\n\n"
        "def boom():\n    raise RuntimeError('CUDA error: out of memory\\nsecond line')\n\n"
        "def not_callable():\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path, name


def steps(trace=None, ncu_calls=None, build=None, time=None, ncu=None):
    """Fake GPU steps; `ncu` replaces the fake ncu pass (which records its calls in `ncu_calls`)."""
    ncu_calls = [] if ncu_calls is None else ncu_calls

    def recorded(cmd, report, plan):
        ncu_calls.append((cmd, plan))
        return {k: {"dram_bytes": 2e5, "dram_pct": 81.0, "compute_pct": 12.0} for k in plan.positions}
    return lib.Steps(gpu=lambda: GPU, peaks=lambda root, gpu: PEAKS, build=build or (lambda root, t: (lambda: None)),
                     time=time or (lambda fn: [0.2] * 5), trace=lambda fn: fn() or trace or two_op_trace(),
                     ncu=ncu or recorded, ncu_path=lambda: "/usr/local/cuda/bin/ncu",
                     versions=lambda ncu: {"torch": "2.13", "ncu": ncu})


def test_targets_resolve_to_a_program_or_a_kernels_defaults():
    t = lib.resolve_target(ROOT, "models.triage_examples:resnet50")
    assert (t.module, t.function, t.kernel) == ("models.triage_examples", "resnet50", "")
    from kernlog.registry import load_kernel

    k = load_kernel(ROOT, "minigpt")
    shape = "x".join(map(str, k.profile_shape))
    assert lib.resolve_target(ROOT, "minigpt").text == f"minigpt/torch@{shape}.{k.dtypes[0]}"
    t = lib.resolve_target(ROOT, "minigpt/torch_sdpa@2x128x128x512.bf16")
    assert (t.revision, t.shape, t.dtype) == ("torch_sdpa", (2, 128, 128, 512), "bf16")


@pytest.mark.parametrize("text, said", [("not a target!", "bad target"), ("nosuchkernel", "unknown kernel"),
                                        ("minigpt/nope", "unknown revision 'nope'"),
                                        ("minigpt@0x4", "bad shape"), ("minigpt.fp64", "no fp64 inputs")])
def test_bad_targets_are_one_line(text, said):
    with pytest.raises(KernlogError, match=said) as e:
        lib.resolve_target(ROOT, text)
    assert "\n" not in str(e.value)


def test_a_module_that_does_not_exist_a_function_that_raises_or_returns_no_callable(repo):
    root, name = repo
    with pytest.raises(KernlogError, match="cannot import no_such_module_xyz"):
        lib.check_target(root, lib.resolve_target(root, "no_such_module_xyz:make"))
    with pytest.raises(KernlogError, match="has no function 'nope'"):
        lib.check_target(root, lib.resolve_target(root, f"{name}:nope"))
    with pytest.raises(KernlogError) as e:
        lib.build_callable(root, lib.resolve_target(root, f"{name}:boom"))
    assert str(e.value) == f"{name}:boom raised RuntimeError: CUDA error: out of memory"
    with pytest.raises(KernlogError, match="returned int, not a zero-argument callable"):
        lib.build_callable(root, lib.resolve_target(root, f"{name}:not_callable"))
    assert callable(lib.build_callable(root, lib.resolve_target(root, f"{name}:make")))


def test_a_callable_that_launches_no_cuda_kernel_is_one_line_and_stores_nothing(repo):
    root, name = repo
    cpu_only = {"traceEvents": [e for e in two_op_trace()["traceEvents"] if e.get("cat") != "kernel"]}
    with pytest.raises(KernlogError, match="launched no CUDA kernel"):
        lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(trace=cpu_only), progress=lambda s: 0)
    assert not (root / "profiles").exists()


def test_a_callable_that_raises_while_measured_is_one_line(repo):
    root, name = repo

    def explode():
        raise ValueError("shapes (3,4) and (5,6) do not match")
    with pytest.raises(KernlogError) as e:
        lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"),
                         steps(build=lambda r, t: explode, time=lambda fn: [fn()]), progress=lambda s: 0)
    assert str(e.value) == f"{name}:make: the callable raised ValueError: shapes (3,4) and (5,6) do not match"


def test_without_a_gpu_a_fresh_triage_says_so_with_the_command(repo):
    root, name = repo
    with pytest.raises(NoGpu) as e:
        lib.triage(root, f"{name}:make", gpu=False)
    assert f"run `kernlog triage {name}:make` on a GPU machine" in str(e.value) and e.value.exit_code == 4
    with pytest.raises(NoGpu, match="--verify re-measures"):
        lib.verify(root, f"{name}:make", gpu=False)


def test_a_fresh_triage_profiles_the_covering_kernels_and_stores_its_ranking(repo):
    root, name = repo
    calls, said = [], []
    trace = two_op_trace()
    for e in trace["traceEvents"]:  # the GEMM's launch as CUPTI records it: the plan checks the report against it
        if e.get("cat") == "kernel" and e["name"] == GEMM:
            e["args"].update(grid=[4, 8, 1], block=[128, 1, 1])
    path = lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(trace=trace, ncu_calls=calls),
                            progress=said.append)
    assert path == root / "profiles" / "fake-gpu" / "triage" / f"{name.replace('_', '-')}-make.json"
    rec = store.load_triage(path)
    assert rec.picked == [GEMM, GELU]  # 70 + 40 of 120 us: 92%; the 10 us split-K reduce left out
    # one ncu process for both, by function name inside the profiled call's window
    ((cmd, plan),) = calls
    assert cmd[cmd.index("--kernel-name") + 1] == f"regex:^({GEMM}|vectorized_elementwise_kernel)$"
    assert cmd[cmd.index("--launch-count") + 1] == "2" and "--launch-skip" not in cmd and cmd[-1] == f"{name}:make"
    assert plan.positions == {GEMM: 0, GELU: 1}
    assert plan.expected == ((GEMM, 32, 128), ("vectorized_elementwise_kernel", None, None))  # the report is held to it
    assert "ncu: 2 kernels of 2 functions in one process, 2 launches profiled" in said
    assert rec.ncu["commands"] == [cmd[:cmd.index(sys.executable)]]
    assert rec.ncu["kernels"] == {k: {"dram_bytes": 2e5, "dram_pct": 81.0, "compute_pct": 12.0} for k in (GEMM, GELU)}
    assert rec.versions == {"torch": "2.13", "ncu": "/usr/local/cuda/bin/ncu"}
    assert rec.total_us == pytest.approx(200.0) and rec.gpu_us == pytest.approx(120.0) and rec.launches == 3
    top = rec.candidates[0]
    assert top["title"].startswith("aten::addmm(512, 64x256, 256x512)")
    assert top["speedup"] == pytest.approx(200.0 / (200.0 - top["saved_us"]))
    assert top["evidence"]["group"]["ncu"][GEMM]["dram_pct"] == 81.0
    assert rec.trace == path.name.replace(".json", ".trace.json.gz")
    assert store.load_trace(root, rec) == slim(trace)
    assert lib.triage(root, f"{name}:make", gpu=False)[0].to_dict() == rec.to_dict()  # without a GPU: stored


def test_a_kernel_the_ncu_pass_could_not_read_is_left_without_evidence_the_rest_stands(repo):
    root, name = repo

    def ncu(cmd, report, plan):
        return {GEMM: {"error": "expected sm90 at matched launch 0, found other"}, GELU: {"dram_pct": 81.0}}
    s, said = steps(ncu=ncu), []
    rec = store.load_triage(lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), s, progress=said.append))
    figures = rec.ncu["kernels"]
    assert figures[GEMM] == {"error": "expected sm90 at matched launch 0, found other"}
    assert figures[GELU] == {"dram_pct": 81.0}
    assert [m for m in said if "no evidence" in m] == [f"ncu: no evidence for {GEMM}: expected sm90 at matched "
                                                       "launch 0, found other"]


def test_a_failed_ncu_pass_leaves_every_picked_kernel_without_evidence(repo):
    root, name = repo

    def ncu(cmd, report, plan):
        raise KernlogError("ncu exited with 1: boom")
    s = steps(ncu=ncu)
    rec = store.load_triage(lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), s, progress=lambda m: 0))
    assert rec.ncu["kernels"] == {k: {"error": "ncu exited with 1: boom"} for k in (GEMM, GELU)}
    assert len(rec.ncu["commands"]) == 1 and rec.candidates  # the trace's placing stands


def test_no_gpu_in_the_ncu_pass_stops_the_triage(repo):
    root, name = repo

    def ncu(cmd, report, plan):
        raise NoGpu("ncu may not read the GPU's performance counters")
    s = steps(ncu=ncu)
    with pytest.raises(NoGpu, match="performance counters"):
        lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), s, progress=lambda m: 0)
    assert not (root / "profiles").exists()


def test_slim_keeps_what_the_parser_reads():
    trace = two_op_trace()
    frame = {"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1782): _call_impl",
             "pid": 985, "tid": 985, "ts": 0.0, "dur": 1.0}
    trace["traceEvents"].append(frame)
    slimmed = slim(trace)
    assert frame not in slimmed["traceEvents"] and len(slimmed["traceEvents"]) == len(trace["traceEvents"]) - 3
    assert parse_chrome_trace(slimmed) == parse_chrome_trace(trace)
    assert [r.name for r in parse_chrome_trace(slimmed)] == [GEMM, REDUCE, GELU]


def test_ncu_command_matches_the_functions_inside_the_profiled_calls_window():
    order = ["void at::k<4>(float*, int)", "void a.b<2>(int)", "void at::k<8>(float*, int)"]
    plan = tncu.plan_ncu(order, ["void at::k<8>(float*, int)", "void a.b<2>(int)"])
    cmd = tncu.ncu_command("ncu", plan, Path("/t/r.ncu-rep"), Path("/repo"), "m:f")
    assert cmd[cmd.index("--kernel-name") + 1] == r"regex:^(a\.b|k)$"  # sorted, escaped, matched whole
    assert cmd[cmd.index("--kernel-name-base") + 1] == "function"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off" and "--nvtx" not in cmd  # a process-wide window
    # k<4> comes first but is not needed: skipped, and ncu profiles the two launches needed
    assert cmd[cmd.index("--launch-skip") + 1] == "1" and cmd[cmd.index("--launch-count") + 1] == "2"
    assert plan.positions == {"void at::k<8>(float*, int)": 1, "void a.b<2>(int)": 0}
    first_needed = tncu.plan_ncu(order, ["void at::k<4>(float*, int)"])
    assert "--launch-skip" not in tncu.ncu_command("ncu", first_needed, Path("/r"), Path("/repo"), "m:f")
    for flag, value in [("--cache-control", "all"), ("--clock-control", "none"), ("--import-source", "no"),
                        ("--target-processes", "all"), ("--export", "/t/r.ncu-rep")]:
        assert cmd[cmd.index(flag) + 1] == value
    assert [cmd[i + 1] for i, c in enumerate(cmd) if c == "--section"] == list(tncu.TRIAGE_SECTIONS)
    assert cmd[-6:] == [sys.executable, "-m", "kernlog.capture.triage", "--launch", "/repo", "m:f"]


@pytest.mark.parametrize("cupti, function", [
    # as ncu's function base names them (the softmax one read from a real H100 report's action)
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 4>(float*, float const*, long)",
     "cunn_SoftMaxForwardReg"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
     "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
     "std::array<char*, 3ul>)", "vectorized_elementwise_kernel"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>("
     "cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1::Params)", "Kernel2"),
    ("nvjet_sm90_tst_160x256_64x3_2x1_v_bz_coopA_NNN", "nvjet_sm90_tst_160x256_64x3_2x1_v_bz_coopA_NNN"),
    ("triton_poi_fused_mm_relu_1", "triton_poi_fused_mm_relu_1"),
])
def test_a_cupti_kernel_name_gives_ncus_function_name(cupti, function):
    assert tncu.function_name(cupti) == function


EW_A = "void at::native::elementwise_kernel<128, 2, A>(int, A)"
EW_B = "void at::native::elementwise_kernel<128, 4, B>(int, B)"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, 4>(float*, float const*, long)"
ORDER = [SOFTMAX, EW_A, "gemm", "void other_kernel<1>(int)", EW_A, "gemm", EW_B, EW_A, EW_B, "gemm", "late"]


def test_the_plan_positions_each_kernel_by_its_first_launch_among_the_matched_ones():
    plan = tncu.plan_ncu(ORDER, ["gemm", EW_B, EW_A])
    assert plan.functions == ("elementwise_kernel", "gemm") and plan.regex == "^(elementwise_kernel|gemm)$"
    # matched launches: EW_A gemm EW_A gemm EW_B EW_A EW_B gemm (softmax, other_kernel and late are not)
    assert plan.positions == {"gemm": 1, EW_B: 4, EW_A: 0}
    assert plan.launch_count == 5  # stops at EW_B's first launch: the later matched ones are not profiled
    plan = tncu.plan_ncu(ORDER, [SOFTMAX, "late"])
    assert plan.regex == "^(cunn_SoftMaxForwardReg|late)$" and plan.positions == {SOFTMAX: 0, "late": 1}
    assert plan.launch_count == 2
    assert tncu.plan_ncu(ORDER, [EW_A]).launch_count == 1
    with pytest.raises(KernlogError, match="not launched"):
        tncu.plan_ncu(ORDER, ["absent"])


def test_over_the_launch_budget_the_kernel_saving_most_launches_per_microsecond_is_left_out():
    """A dense function (elementwise, launched all through a training step) makes every launch up
    to the last needed one count; over the budget, the kernels whose leaving saves the most
    launches per microsecond of GPU time are left out, until the run fits."""
    ew = "void at::native::elementwise_kernel<4, F>(int, F)"
    order = ["gemm_fwd"] + [ew] * 300 + ["big_gemm", "small_late"]
    picked = ["gemm_fwd", ew, "big_gemm", "small_late"]
    # the elementwise kernel holds 50 us: leaving it saves 300 launches, 6 a microsecond; the rest fit then
    plan = tncu.plan_ncu(order, picked, {"gemm_fwd": 100.0, ew: 50.0, "big_gemm": 500.0, "small_late": 1.0},
                         budget=10)
    assert plan.positions == {"gemm_fwd": 0, "big_gemm": 1, "small_late": 2} and plan.launch_count == 3
    assert set(plan.left_out) == {ew} and "over 10 launches" in plan.left_out[ew] and "elementwise" not in plan.regex
    # holding 5000 us it stays: small_late goes first (1 launch for 1 us), then big_gemm (300 for 500 us)
    us = {"gemm_fwd": 100.0, ew: 5000.0, "big_gemm": 500.0, "small_late": 1.0}
    plan = tncu.plan_ncu(order, picked, us, budget=10)
    assert plan.positions == {"gemm_fwd": 0, ew: 1} and plan.launch_count == 2
    assert set(plan.left_out) == {"big_gemm", "small_late"} and "big_gemm" not in plan.regex
    # within the budget nothing is left out; the report's reading names the left-out kernels' reason
    assert tncu.plan_ncu(order, ["gemm_fwd", "big_gemm"], us, budget=10).left_out == {}
    figures = tncu.figures_by_kernel([], plan)
    assert set(figures) == set(picked) and "over 10 launches" in figures["big_gemm"]["error"]
    assert "only 0 launches" in figures[ew]["error"]
    assert "over 10 launches" in tncu.nothing_profiled(plan)["small_late"]["error"]


class FakeMetric:
    def __init__(self, value):
        self._value = value

    def value(self):
        return self._value


class FakeAction:
    """What ncu.summarize reads of a report's action: its function name and a few metrics."""
    def __init__(self, name, duration_ns, dram_pct):
        self._name = name
        self._metrics = {"gpu__time_duration.sum": duration_ns,
                         "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": dram_pct}

    def name(self):
        return self._name

    def metric_by_name(self, name):
        return FakeMetric(self._metrics[name]) if name in self._metrics else None

    def metric_names(self):
        return list(self._metrics)


def test_reading_takes_each_kernels_figures_from_the_action_at_its_position():
    plan = tncu.plan_ncu(ORDER, ["gemm", EW_B, EW_A])
    names = ["elementwise_kernel", "gemm", "elementwise_kernel", "gemm", "elementwise_kernel"]
    actions = [FakeAction(n, 1000.0 * (i + 1), 10.0 * (i + 1)) for i, n in enumerate(names)]
    figures = tncu.figures_by_kernel(actions, plan)
    assert {k: (f["duration_us"], f["dram_pct"]) for k, f in figures.items()} == {
        "gemm": (pytest.approx(2.0), 20.0), EW_B: (pytest.approx(5.0), 50.0), EW_A: (pytest.approx(1.0), 10.0)}


def test_from_the_first_launch_that_differs_from_the_trace_every_later_kernel_is_an_error():
    """A launch added, lost or reordered in the profiled call shifts every later position: the
    kernels before the first difference keep their figures, the ones from it on get its error."""
    plan = tncu.plan_ncu(ORDER, ["gemm", EW_B, EW_A])  # expected: ew gemm ew gemm ew
    names = ["elementwise_kernel", "elementwise_kernel", "elementwise_kernel", "gemm", "elementwise_kernel"]
    figures = tncu.figures_by_kernel([FakeAction(n, 1000.0, 10.0) for n in names], plan)
    said = ("the profiled call departs from the traced one at profiled launch 1: expected gemm, "
            "found elementwise_kernel")
    assert figures["gemm"] == {"error": said} and figures[EW_B] == {"error": said}  # EW_B's name matches: shifted
    assert figures[EW_A]["dram_pct"] == 10.0
    right = ["elementwise_kernel", "gemm", "elementwise_kernel"]
    figures = tncu.figures_by_kernel([FakeAction(n, 1000.0, 10.0) for n in right], plan)
    assert figures[EW_B] == {"error": "expected elementwise_kernel at profiled launch 4, but ncu profiled only 3 "
                                      "launches"}
    assert "error" not in figures[EW_A] and "error" not in figures["gemm"]


class SizedAction(FakeAction):
    def __init__(self, name, blocks, threads):
        super().__init__(name, 1000.0, 10.0)
        if blocks is not None:
            self._metrics.update({"launch__grid_size": blocks, "launch__block_size": threads})


def test_two_instantiations_that_swap_places_are_caught_by_their_launch_sizes():
    """Two instantiations of one function that swap places between the traced and the profiled
    call match by name; their grids do not: each profiled launch must show the trace's (blocks,
    threads) where both know them."""
    sizes = [None, (1024, 128), (132, 384), None, (1, 1), (1, 1), (64, 256), None, None, None, None]
    plan = tncu.plan_ncu(ORDER, ["gemm", EW_B, EW_A], sizes=sizes)
    ew = "elementwise_kernel"
    assert plan.expected == ((ew, 1024, 128), ("gemm", 132, 384), (ew, 1, 1), ("gemm", 1, 1), (ew, 64, 256))
    ok = [SizedAction(ew, 1024, 128), SizedAction("gemm", 132, 384), SizedAction(ew, 1, 1), SizedAction("gemm", 1, 1),
          SizedAction(ew, 64, 256)]
    assert not any("error" in f for f in tncu.figures_by_kernel(ok, plan).values())
    swapped = [SizedAction(ew, 64, 256)] + ok[1:4] + [SizedAction(ew, 1024, 128)]
    figures = tncu.figures_by_kernel(swapped, plan)
    said = ("the profiled call departs from the traced one at profiled launch 0: expected elementwise_kernel "
            "(1024 blocks of 128 threads), found elementwise_kernel (64 blocks of 256 threads)")
    assert figures == {k: {"error": said} for k in ("gemm", EW_B, EW_A)}
    # a report without the launch figures, or launches the trace gave no size: judged by name alone
    unsized = [SizedAction(a.name(), None, None) for a in swapped]
    assert not any("error" in f for f in tncu.figures_by_kernel(unsized, plan).values())
    bare = tncu.plan_ncu(ORDER, ["gemm", EW_B, EW_A])
    assert not any("error" in f for f in tncu.figures_by_kernel(swapped, bare).values())


def test_the_budget_takes_back_the_left_out_kernels_that_fit_again():
    """Leaving kernels out one at a time can leave out one that fits once a dense function is gone."""
    order = ["void at::native::elementwise_kernel<4, F>(int, F)"] * 300 + ["big", "tiny"]
    ew = order[0]
    plan = tncu.plan_ncu(order, [ew, "big", "tiny"], {ew: 1000.0, "big": 1000.0, "tiny": 1.0}, budget=10)
    assert plan.positions == {"big": 0, "tiny": 1} and plan.launch_count == 2 and set(plan.left_out) == {ew}


def test_the_launches_before_the_first_one_needed_are_skipped():
    """A training step's backward kernels sit together late in the call: ncu skips the matched
    launches before them instead of profiling them."""
    order = [EW_A] * 100 + ["bwd_gemm", EW_B, "bwd_gemm"]
    plan = tncu.plan_ncu(order, [EW_B, "bwd_gemm"], budget=10)
    assert (plan.skip, plan.launch_count, plan.positions, plan.left_out) == (100, 2, {EW_B: 1, "bwd_gemm": 0}, {})
    cmd = tncu.ncu_command("ncu", plan, Path("/r"), Path("/repo"), "m:f")
    assert cmd[cmd.index("--launch-skip") + 1] == "100" and cmd[cmd.index("--launch-count") + 1] == "2"


def test_the_trace_gives_each_launch_its_grid_and_block():
    trace = two_op_trace()
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == GEMM:
            e["args"].update(grid=[33, 4, 1], block=[384, 1, 1])
    rows = parse_chrome_trace(slim(trace))
    gemm = next(r for r in rows if r.name == GEMM)
    assert (gemm.grid, gemm.block) == ((33, 4, 1), (384, 1, 1))
    assert next(r for r in rows if r.name == GELU).grid == ()  # not recorded: no geometry to check


def test_the_ncu_report_names_the_function_as_the_cupti_name_gives_it(tmp_path):
    """A real H100 report of F.softmax (`--nvtx-include`, one action): its function name is the
    one function_name derives from the name the CUPTI trace gives the same kernel."""
    import lzma

    from kernlog.capture import ncu

    from .helpers import FIXTURES

    report = tmp_path / "torch_softmax.ncu-rep"
    report.write_bytes(lzma.decompress((FIXTURES / "torch_softmax_8192x4096_fp32_full.ncu-rep.xz").read_bytes()))
    (action,) = ncu.read_report(report)[:1]
    cupti = ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, float, "
             "at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 4>(float*, float const*, long)")
    assert action.name() == tncu.function_name(cupti)


def _record(**kw) -> store.TriageRecord:
    cand = {"kind": "fusion", "title": "fuse aten::add -> aten::gelu (12x)", "saved_us": 20.0, "speedup": 1.25,
            "evidence": {"chain": {"intermediate_bytes": 4e6, "measured_us": 30.0}}}
    base = dict(target="m:f", gpu=GPU, captured_at="2026-11-26T00:00:00+00:00", total_us=100.0, gpu_us=90.0,
                launches=3, peaks={}, by_kernel=[{"name": "k", "count": 3, "us": 90.0}],
                by_op=[{"name": "aten::add", "count": 3, "us": 90.0}], by_module=[], picked=["k"], groups=[],
                chains=[], candidates=[cand])
    return store.TriageRecord(**dict(base, **kw))


def test_the_store_round_trips_a_record_and_its_trace(tmp_path):
    rec = _record()
    path = store.save_triage(tmp_path, rec, {"traceEvents": []})
    assert path == tmp_path / "profiles" / "fake-gpu" / "triage" / "m-f.json"
    assert store.load_triage(path) == rec and rec.schema == store.SCHEMA
    assert store.load_trace(tmp_path, rec) == {"traceEvents": []} and store.stored(tmp_path, "m:f") == [path]
    (path.parent / rec.trace).write_bytes(gzip.compress(b'{"traceEvents": [1]}'))
    with pytest.raises(store.TriageError, match="sha256 differs"):
        store.load_trace(tmp_path, rec)


def test_a_failed_write_keeps_the_old_record_and_leaves_no_partial_file(tmp_path, monkeypatch):
    path = store.save_triage(tmp_path, _record())
    before = path.read_bytes()

    def crash(fd):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError):
        store.save_triage(tmp_path, _record(total_us=50.0))
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["m-f.json"]


@pytest.mark.parametrize("text, said", [('{"schema": 1, "target": "m:f", "gpu"', "not complete JSON"),
                                        ('{"schema": 99, "target": "m:f"}', "schema 99"),
                                        ('{"schema": 1, "target": "m:f"}', "lacks gpu")])
def test_a_half_written_or_foreign_record_is_refused_in_one_line(tmp_path, text, said):
    path = tmp_path / "m-f.json"
    path.write_text(text)
    with pytest.raises(store.TriageError, match=said) as e:
        store.load_triage(path)
    assert "\n" not in str(e.value) and "kernlog triage" in str(e.value)


def test_the_table_and_markdown_name_the_candidates_in_rank_order():
    second = {"kind": "roofline", "title": "aten::mm(64x256, 256x512) to its compute roof (12 calls)",
              "saved_us": 5.0, "speedup": 100 / 95,
              "evidence": {"group": {"measured_us": 30.0, "roof_us": 25.0, "basis": "measured", "modules": ["Linear"],
                                     "ncu": {"k": {"dram_pct": 40.0, "compute_pct": 70.0}}}}}
    rec = _record(candidates=_record().candidates + [second])
    text = table(rec)
    assert text.index("1.250x  fuse aten::add") < text.index("1.053x  aten::mm")
    assert "not a minimum" in text and "ncu DRAM 40%" in text and "in Linear" in text
    md = markdown(rec)
    assert md.count("\n| ") == 4 and "| 1 | fuse aten::add -> aten::gelu (12x) | 20.0 us | 1.250x |" in md


def test_judge_verify_against_interleaved_pairs_or_the_stored_total():
    rec = _record()
    v = lib.judge_verify(rec, 1, [1.0] * 8, [1.25] * 8, "m:g")
    assert v.outcome == "met" and v.measured == pytest.approx(1.25)
    assert "8 interleaved pairs (wall time per call) against m:g" in v.basis
    v = lib.judge_verify(rec, 1, [0.1] * 5)  # 100 us stored, 100 us now: no speedup
    assert v.outcome == "missed" and "stored total" in v.basis
    assert lib.judge_verify(rec, 1, [0.09] * 5).outcome == "partly"  # 1.11x of a predicted 1.25x
    with pytest.raises(KernlogError, match="candidate 2 of 1"):
        lib.judge_verify(rec, 2, [0.1])


def test_examples_resnet50_needs_torchvision_and_the_block_runs(monkeypatch):
    import sys

    from models import triage_examples

    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(KernlogError, match="torchvision is missing"):
        triage_examples.resnet50()
    out = triage_examples.transformer_block(batch=2, seq=4, width=16, heads=2)()
    assert tuple(out.shape) == (2, 4, 16)


def invoke(root, *args):
    return CliRunner().invoke(triage_cmd, list(args), obj={"root": root})


def test_cli_prints_the_stored_triage_without_a_gpu(repo, monkeypatch):
    root, name = repo
    lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(), progress=lambda s: 0)
    monkeypatch.setattr(lib, "gpu_visible", lambda: False)
    r = invoke(root, f"{name}:make")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"triage of {name}:make on Fake GPU") and " 1  " in r.stdout
    r = invoke(root, f"{name}:make", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["target"] == f"{name}:make"


@pytest.mark.parametrize("args, code, said", [
    (["{name}:make"], 4, "no triage of {name}:make is stored and no CUDA GPU is visible"),
    (["no_such_module_xyz:make"], 2, "cannot import no_such_module_xyz"),
    (["{name}:make", "--verify"], 4, "--verify re-measures the program"),
    (["{name}:make", "--baseline", "{name}:make"], 2, "--baseline goes with --verify"),
    (["Not a target"], 2, "bad target")])
def test_cli_bad_input_and_no_gpu_are_one_line_and_nonzero(repo, monkeypatch, args, code, said):
    root, name = repo
    monkeypatch.setattr(lib, "gpu_visible", lambda: False)
    r = invoke(root, *[a.format(name=name) for a in args])
    assert r.exit_code == code
    assert r.stdout == "" and r.stderr.count("\n") == 1 and said.format(name=name) in r.stderr
    assert "Traceback" not in r.output


def test_cli_kernel_target_without_a_gpu_names_the_canonical_target(monkeypatch, tmp_path):
    monkeypatch.setattr(lib, "gpu_visible", lambda: False)
    r = invoke(ROOT, "minigpt/torch@2x128x128x512.fp32")
    assert r.exit_code == 4 and "run `kernlog triage minigpt/torch@2x128x128x512.fp32` on a GPU" in r.stderr


READ_STORED = """
import sys
from kernlog.commands.triage import triage
try:
    triage([sys.argv[2]], obj={"root": sys.argv[1]})
except SystemExit as e:
    assert e.code in (0, None), e.code
print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton", "pandas")))
"""


@pytest.mark.skipif(HAS_CUDA, reason="with a GPU, triage takes a fresh one")
def test_reading_a_stored_triage_imports_no_torch(repo):
    root, name = repo
    lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(), progress=lambda s: 0)
    done = subprocess.run([sys.executable, "-c", READ_STORED, str(root), f"{name}:make"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"triage of {name}:make" in done.stdout and done.stdout.strip().endswith("[]")


def test_a_kernel_target_builds_its_revisions_launcher_on_its_inputs():
    target = lib.resolve_target(ROOT, "minigpt/torch@1x64x16x64.fp32")
    out = lib.build_callable(ROOT, target, device="cpu")()
    assert tuple(out.shape) == (16, 64) and bool(out.isfinite().all())


@pytest.mark.skipif(HAS_CUDA, reason="checks the CPU's refusal")
def test_taking_a_trace_without_a_gpu_is_the_one_line_no_gpu_error(tmp_path):
    from kernlog.capture.trace import take_trace

    with pytest.raises(NoGpu, match="no CUDA GPU visible"):
        take_trace(lambda: None, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_a_stored_triage_gets_its_page_linked_from_the_front_page_and_check_gates_it(tmp_path):
    from kernlog.registry import kernel_names, load_kernel
    from kernlog.render import report
    from tests.helpers import scratch_repo

    root = scratch_repo(tmp_path)
    kernels = [load_kernel(root, n) for n in kernel_names(root)]
    sections = report.collect(root, kernels)
    assert report.TRIAGE_PAGE not in report.pages(root, sections)  # nothing stored: no page, no link
    assert "reports/triage.md" not in report.render(root, kernels, sections)
    store.save_triage(root, _record())
    page = report.pages(root, sections)[report.TRIAGE_PAGE]
    assert page.startswith("<!-- kernlog:begin triage -->\n# Triage: which kernel to write next")
    assert "| 1 | fuse aten::add -> aten::gelu (12x) | 20.0 us | 1.250x |" in page
    assert "[reports/triage.md](reports/triage.md)" in report.render(root, kernels, sections)
    report.plot_all(root, sections)
    assert (root / report.TRIAGE_PAGE).read_text() == page
    assert f"{report.TRIAGE_PAGE} is out of date" not in report.out_of_date(root, sections)
    store.save_triage(root, _record(candidates=[]))  # re-taken: the committed page no longer says it
    assert f"{report.TRIAGE_PAGE} is out of date" in report.out_of_date(root, sections)
    (root / "profiles" / "fake-gpu" / "triage" / "other.json").write_text("{")
    assert "**Left out:**" in report.pages(root, sections)[report.TRIAGE_PAGE]


def test_a_report_ncu_wrote_reads_into_the_evidence_kept():
    """The ncu pass's own reader on a real H100 report (a fake ncu step skipped it: the reader
    once called a function the store rebuild had moved, and only the GPU found out)."""
    from kernlog.capture.triage_ncu import plan_ncu, read_figures

    from .helpers import FULL_REP

    # a Triton softmax of 8192 x 4096 fp32 (one action): 2 x 134 MB moved
    (figures,) = read_figures(FULL_REP, plan_ncu(["sm_kernel"], ["sm_kernel"])).values()
    assert set(figures) == {"dram_bytes", "dram_pct", "compute_pct", "duration_us", "occupancy_pct",
                            "occupancy_limiter"}
    # read once, written once (part of the write still in L2 when the kernel ends)
    assert 50 < figures["duration_us"] < 1000 and 1.5 * 8192 * 4096 * 4 < figures["dram_bytes"] < 3e8
    assert 50 < figures["dram_pct"] <= 100 and figures["occupancy_limiter"] == "registers"


def test_a_verify_is_stored_in_the_baselines_record_and_rendered(repo, monkeypatch):
    root, name = repo
    path = lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(), progress=lambda s: 0)
    monkeypatch.setattr(lib.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(lib, "build_callable", lambda root, t, device="cuda": (lambda: None))
    monkeypatch.setattr(lib, "time_interleaved", lambda base, new: ([0.2] * 8, [0.16] * 8))
    v = lib.verify(root, f"{name}:make", baseline=f"{name}:make", gpu=True, progress=lambda s: 0)
    (stored,) = store.load_triage(path).verified
    assert stored["measured"] == pytest.approx(1.25) == v.measured and stored["outcome"] == v.outcome
    assert stored["candidate"] == 1 and stored["title"] == store.load_triage(path).candidates[0]["title"]
    assert "1.250x" in markdown(store.load_triage(path)) and v.outcome in markdown(store.load_triage(path))


def test_rejudging_a_stored_triage_reproduces_its_ranking_and_keeps_its_verdicts(repo, monkeypatch):
    root, name = repo
    path = lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(), progress=lambda s: 0)
    before = store.load_triage(path).to_dict()
    store.add_verdict(path, {"target": "x", "candidate": 1})
    data = json.loads(path.read_text())
    data["candidates"] = data["candidates"][::-1][:1]  # as an older judge might have ranked
    path.write_text(json.dumps(data))
    (rec,) = lib.rejudge(root, f"{name}:make")
    assert rec.candidates == before["candidates"] and rec.verified == [{"target": "x", "candidate": 1}]
    with pytest.raises(KernlogError, match="no triage of .* is stored"):
        lib.rejudge(root, f"{name}:boom")


def test_a_stored_triage_is_not_taken_for_a_kernels_profile(repo):
    """profiles/<gpu>/triage/ sits where a kernel's folder would: the profile readers pass it by
    (a stored triage once made `kernlog list` refuse every command)."""
    from kernlog.store.profiles import iter_profiles

    root, name = repo
    lib.fresh_triage(root, lib.resolve_target(root, f"{name}:make"), steps(), progress=lambda s: 0)
    assert list(iter_profiles(root)) == []


def test_an_ncu_pass_that_profiled_nothing_gives_every_kernel_an_error_naming_the_functions(monkeypatch):
    from kernlog.capture import profiler
    from kernlog.capture.ncurun import ncu_outcome

    def nothing(cmd, timeout, env=None):
        ncu_outcome(0, "==WARNING== No kernels were profiled.")  # what ncu prints, as run_ncu reads it
    monkeypatch.setattr(profiler, "run_ncu", nothing)
    plan = tncu.plan_ncu(ORDER, ["gemm", EW_B, EW_A])
    cmd = tncu.ncu_command("ncu", plan, Path("/t/r.ncu-rep"), Path("/repo"), "m:f")
    said = ("ncu profiled nothing: no launch of elementwise_kernel, gemm inside the profiled call "
            "(between cudaProfilerStart and Stop)")
    assert tncu.run_ncu(cmd, Path("/t/r.ncu-rep"), plan) == {k: {"error": said} for k in ("gemm", EW_B, EW_A)}
