"""Tests that fail when kernlog's code is wrong in the ways a mutation run found unguarded:
each names the mistake it catches. docs/developing.md (Mutation testing) says how to run one."""
import os
import statistics

import pytest
from click.testing import CliRunner

from kernlog import metrics, timing, units
from kernlog.capture import bench
from kernlog.capture import ncu as ncurep
from kernlog.commands.main import main
from kernlog.judge import diff, verdicts
from kernlog.metrics import metric
from kernlog.registry import load_kernel
from kernlog.render import diff as diff_text
from kernlog.render import facts
from kernlog.run import gate
from kernlog.store import profiles as store

from .helpers import GPU, ROOT, SECTIONS_REP, kernel_page, make_record, profile_of, scratch_repo

# --- a metric's good direction --------------------------------------------------------------------

# Which way is good, metric by metric: fewer bytes, instructions, spills and less time; more
# throughput and busier issue slots (each read while the work done stays the same); no direction
# for occupancy, hit rates and launch parameters, whose worth depends on the kernel.
DIRECTION = {
    "wall_ms": "lower", "duration_us": "lower", "dram_mb": "lower", "instructions": "lower",
    "ld_sectors": "lower", "spill_insts": "lower", "local_sectors": "lower", "stall_barrier": "lower",
    "dram_gbps": "higher", "dram_pct": "higher", "issue_active_pct": "higher",
    "memory_pct": None, "compute_pct": None, "achieved_occupancy_pct": None, "theoretical_occupancy_pct": None,
    "registers_per_thread": None, "smem_per_block": None, "block_size": None, "grid_size": None,
    "ld_sectors_per_request": None, "l1_hit_pct": None, "l2_hit_pct": None,
}


@pytest.mark.parametrize("key", sorted(DIRECTION))
def test_every_metric_is_judged_in_its_good_direction(key):
    up = {"lower": "worse", "higher": "better", None: "changed"}[DIRECTION[key]]
    down = {"lower": "better", "higher": "worse", None: "changed"}[DIRECTION[key]]
    assert verdicts.judge(metric(key), 1.0, 2.0) == up
    assert verdicts.judge(metric(key), 2.0, 1.0) == down


def test_the_report_judges_moves_by_each_metrics_direction():
    """Throughput up and DRAM percent up are better, instructions up worse: a report that read
    every rise (or every fall) as better gets one of them wrong."""
    a = {"dram_mb": 100.0, "dram_gbps": 1000.0, "dram_pct": 30.0, "instructions": 10.0, "duration_us": 100.0}
    b = {"dram_mb": 100.0, "dram_gbps": 2000.0, "dram_pct": 60.0, "instructions": 30.0, "duration_us": 100.0}
    moves = {m["label"]: m for m in facts.largest_deltas(a, b)}
    assert moves["DRAM throughput"]["judgement"] == "better"
    assert moves["DRAM throughput, % of peak"]["judgement"] == "better"
    assert moves["warp instructions executed"]["judgement"] == "worse"
    assert moves["warp instructions executed"]["pct"] == pytest.approx(200.0)
    assert list(moves)[0] == "warp instructions executed"  # the largest move first


# --- stall names and the main kernel ----------------------------------------------------------------

class _Value:
    def __init__(self, v):
        self.v = v

    def value(self):
        return self.v


class _Action:
    """Enough of an ncu_report action for ncurep.summarize."""

    def __init__(self, name, values):
        self._name, self.values = name, values

    def name(self):
        return self._name

    def metric_names(self):
        return list(self.values)

    def metric_by_name(self, name):
        return _Value(self.values[name]) if name in self.values else None


def _stall(reason):
    return metrics.STALL_PREFIX + reason + metrics.STALL_SUFFIX


def test_each_stall_keeps_its_own_name():
    action = _Action("k", {_stall("barrier"): 1.0, _stall("long_scoreboard"): 2.0, _stall("wait"): 3.0,
                           _stall("selected"): 4.0, _stall("not_selected"): 5.0,
                           metrics.STALL_PREFIX + "barrier_per_warp_active.pct": 99.0,
                           "gpu__time_duration.sum": 1000.0})
    values, _ = ncurep.summarize([action])
    assert {k: v for k, v in values.items() if k.startswith("stall_")} == {
        "stall_barrier": 1.0, "stall_long_scoreboard": 2.0, "stall_wait": 3.0}


def test_stalls_of_a_real_report_under_their_names():
    values, _ = ncurep.summarize(ncurep.read_report(SECTIONS_REP))
    got = {k: round(values[k], 3) for k in ("stall_long_scoreboard", "stall_short_scoreboard", "stall_barrier",
                                           "stall_drain", "stall_wait", "stall_mio_throttle")}
    assert got == {"stall_long_scoreboard": 22.507, "stall_short_scoreboard": 11.663, "stall_barrier": 5.269,
                   "stall_drain": 4.57, "stall_wait": 1.711, "stall_mio_throttle": 0.722}


def test_the_main_kernel_of_several_is_the_longest_and_sums_cover_all():
    """A reference that launches a short helper then the real kernel (torch.compile's reduction
    and its epilogue): launch figures and stalls come from the longest, times and bytes add up."""
    short = _Action("helper", {"gpu__time_duration.sum": 10_000.0, "launch__block_size": 128.0,
                               "dram__bytes_read.sum": 1e6, _stall("barrier"): 9.0,
                               "launch__occupancy_limit_registers": 1.0, "launch__occupancy_limit_warps": 4.0})
    long = _Action("main", {"gpu__time_duration.sum": 90_000.0, "launch__block_size": 256.0,
                            "dram__bytes_read.sum": 3e6, _stall("barrier"): 1.0,
                            "launch__occupancy_limit_registers": 8.0, "launch__occupancy_limit_warps": 2.0})
    for actions in ([short, long], [long, short]):
        values, facts = ncurep.summarize(actions)
        assert facts["main_kernel"] == "main" and facts["occupancy_limiter"] == "warps"
        assert values["block_size"] == 256.0 and values["stall_barrier"] == 1.0
        assert values["duration_us"] == pytest.approx(100.0) and values["dram_mb"] == pytest.approx(4.0)
        assert {k["name"]: k["duration_us"] for k in facts["kernels"]} == {"helper": 10.0, "main": 90.0}


# --- writes ---------------------------------------------------------------------------------------

def test_write_atomic_replaces_the_file_and_never_writes_into_it(tmp_path):
    path = tmp_path / "p" / "x.json"
    store.write_atomic(path, b"old")
    reader = tmp_path / "reader.json"
    os.link(path, reader)  # a reader holding the old file keeps it whole
    store.write_atomic(path, b"new")
    assert path.read_bytes() == b"new" and reader.read_bytes() == b"old"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    store.write_atomic(path, b"old")

    def broken(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        store.write_atomic(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["x.json"]


# --- the ladder -----------------------------------------------------------------------------------

def _ladder():
    recs = [make_record("v0_naive", median_ms=0.2), make_record("v1_block_smem", median_ms=0.1, seed=1),
            make_record("triton", median_ms=0.08, seed=2), make_record("torch", median_ms=0.12, seed=3)]
    # every record holds the one fixture report's kernel: v1 its own, or it is "same kernel as v0_naive"
    recs[1]["facts"]["main_kernel"] = "softmax_block_smem"
    order = [r.name for r in load_kernel(ROOT, "softmax").revisions]
    return recs, facts.ladder([profile_of(r) for r in reversed(recs)], order)


def test_the_ladder_keeps_counterparts_and_says_speedup_vs_the_previous_step():
    recs, lad = _ladder()
    wall = {r["revision"]: r["metrics"]["wall_ms"] for r in recs}
    rows = {row["rec"].revision: row for row in lad["rows"]}
    assert [row["rec"].revision for row in lad["rows"]] == ["v0_naive", "v1_block_smem", "triton", "torch"]
    assert lad["ref"] == "torch" and lad["tuned"] == "v1_block_smem"
    assert "base" not in rows["v0_naive"] and "base" not in rows["torch"]
    v1 = rows["v1_block_smem"]
    assert v1["base"] == "v0_naive" and v1["verdict"] == "faster"
    assert v1["speedup"] == pytest.approx(wall["v0_naive"] / wall["v1_block_smem"]) and v1["speedup"] > 1.8
    tri = rows["triton"]  # a counterpart is set beside the last step
    assert tri["base"] == "v1_block_smem" and tri["verdict"] == "faster"
    assert tri["speedup"] == pytest.approx(wall["v1_block_smem"] / wall["triton"]) and tri["speedup"] > 1.2
    assert v1["vs_ref"] == pytest.approx(100 * wall["torch"] / wall["v1_block_smem"])
    assert v1["vs_naive"] == pytest.approx(wall["v0_naive"] / wall["v1_block_smem"])


def test_a_second_counterpart_is_set_beside_the_counterpart_before_it():
    """triton_peeled follows triton, not the last step: the Triton counterparts are a ladder of
    their own."""
    recs = [make_record("v1_block_smem", median_ms=0.1, seed=1), make_record("triton", median_ms=0.08, seed=2),
            make_record("triton_peeled", median_ms=0.05, seed=4)]
    for r in recs[1:]:
        r["role"] = "counterpart"
    order = [r.name for r in load_kernel(ROOT, "softmax").revisions]
    rows = {row["rec"].revision: row for row in facts.ladder([profile_of(r) for r in recs], order)["rows"]}
    assert rows["triton"]["base"] == "v1_block_smem"
    assert rows["triton_peeled"]["base"] == "triton"
    assert rows["triton_peeled"]["speedup"] == pytest.approx(0.08 / 0.05, rel=0.05)


def test_the_log_shows_the_step_speedup_and_the_counterpart_row(tmp_path):
    from .helpers import put

    root = scratch_repo(tmp_path)
    recs, _ = _ladder()
    for rec in recs:
        put(root, rec)
    text = kernel_page(root)
    speedup = recs[0]["metrics"]["wall_ms"] / recs[1]["metrics"]["wall_ms"]
    assert f"| {speedup:.2f}x faster |" in text.split("| v1_block_smem |")[1].split("\n")[0]  # the arc row
    assert f"- **Bought:** {speedup:.2f}x vs v0_naive (faster)" in text
    assert "| triton (counterpart) |" in text and "### triton (counterpart)" in text


def test_a_step_running_the_previous_step_s_kernel_claims_no_change(tmp_path):
    from .helpers import put

    root = scratch_repo(tmp_path)
    recs, _ = _ladder()
    recs[1]["facts"]["main_kernel"] = recs[0]["facts"]["main_kernel"]  # v1's profile of v0's compiled kernel
    for rec in recs:
        put(root, rec)
    text = kernel_page(root)
    row = text.split("| v1_block_smem |")[1].split("\n")[0]
    assert "| same kernel as v0_naive |" in row and "faster" not in row
    assert "- **Bought:** nothing at this shape: the same compiled kernel and launch as v0_naive" in text
    assert "vs v0_naive (faster)" not in text


# --- medians --------------------------------------------------------------------------------------

def test_timing_summary_is_the_median_and_the_5th_and_95th_percentiles():
    samples = [float(x) for x in range(1, 101)] + [1e6]  # one launch that hit a stall
    s = timing.summary(samples)
    assert s["median_ms"] == 51.0 and s["n"] == 101
    assert s["p05_ms"] == pytest.approx(5.1) and s["p95_ms"] == pytest.approx(96.9)
    assert timing.summary([2.5]) == {"median_ms": 2.5, "p05_ms": 2.5, "p95_ms": 2.5, "n": 1}


class _ScriptedTimer:
    """tuning's timer with scripted times: candidate "spiky" runs at 1 ms but 4 of every 9 kept
    launches stall at 50 ms (mean 23 ms), "steady" always at 2 ms."""

    def head_start(self, fn, launches):
        return 1

    def batch(self, fns, head):
        c = fns[0].args[0]
        kept = [50.0] * 4 + [1.0] * (len(fns) - 5) if c == "spiky" else [2.0] * (len(fns) - 1)
        return [99.0] + kept, head


def test_the_picker_keeps_the_candidate_of_least_median_not_mean(monkeypatch):
    from kernels.common import tuning

    monkeypatch.setattr(tuning, "_timer", lambda device: _ScriptedTimer())
    assert tuning.fastest(lambda c: None, ["steady", "spiky"], "cpu") == "spiky"
    assert tuning.fastest(lambda c: None, ["spiky", "steady"], "cpu") == "spiky"
    assert statistics.mean([50.0] * 4 + [1.0] * 5) > 2.0  # the mean would have kept "steady"


# --- kernlog check's exit status ------------------------------------------------------------------

def _results(ok):
    return [gate.CheckResult("torch", (3, 5), "fp32", "random", 1e-9, True),
            gate.CheckResult("torch", (7, 33), "fp32", "random", 0.5 if not ok else 1e-9, ok,
                             "" if ok else "error 5.00e-01 over tolerance 1e-04")]


@pytest.mark.parametrize("ok", [True, False])
def test_check_exits_nonzero_exactly_when_a_revision_fails(ok, monkeypatch):
    monkeypatch.setattr(gate, "check_revision", lambda kernel, rev, device, dtypes=None, seed=None: _results(ok))
    result = CliRunner().invoke(main, ["--root", str(ROOT), "check", "softmax", "--rev", "torch", "--device", "cpu"])
    if ok:
        assert result.exit_code == 0, result.output
        assert "torch: ok (2 cases, worst rel err 1.0e-09)" in result.output
    else:
        assert result.exit_code == 3, result.output
        assert "torch: FAIL (2 cases, worst rel err 5.0e-01)" in result.output
        assert "torch 7x33 fp32 random: FAIL error 5.00e-01 over tolerance 1e-04" in result.output
        assert "failed the correctness gate: torch" in result.output


# --- bench rows differing only in dtype -----------------------------------------------------------

def _point(dtype, value, rev="torch"):
    return {"kernel": "softmax", "revision": rev, "shape": "4096x1024", "dtype": dtype, "metric": "gbps",
            "value": value, "gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0, "source_sha256": None}


def test_a_bench_rerun_of_one_dtype_keeps_the_others_points(tmp_path):
    import pandas as pd

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    bench._write(root, GPU, kernel, [_point("fp32", 1000.0), _point("bf16", 2000.0)])
    path = bench._write(root, GPU, kernel, [_point("fp32", 1100.0)])
    df = pd.read_csv(path, dtype={"shape": str})
    assert sorted(zip(df["dtype"], df["value"], strict=True)) == [("bf16", 2000.0), ("fp32", 1100.0)]


def test_the_sweep_table_has_a_row_per_dtype(tmp_path):
    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    bench._write(root, GPU, kernel, [_point("bf16", 2000.0), _point("fp32", 1000.0),
                                     _point("bf16", 1500.0, "v5_tuned"), _point("fp32", 800.0, "v5_tuned")])
    text = kernel_page(root)
    assert "| bf16 | 4096x1024 | v5_tuned | 1500 | 0.75x ✗ | torch |" in text
    assert "| fp32 | 4096x1024 | v5_tuned | 800 | 0.80x ✗ | torch |" in text


# --- the gate's NaN rule --------------------------------------------------------------------------

def test_a_number_where_the_reference_is_nan_fails_the_gate():
    import torch

    ref = torch.tensor([[0.25, 0.25, 0.25, 0.25], [float("nan")] * 4], dtype=torch.float32)
    out = ref.clone()
    assert gate.compare(out, ref) == (0.0, "")
    out[1] = 0.25  # a softmax of an all -inf row that invented numbers
    assert gate.compare(out, ref)[1] == "4 NaN in the reference missing from the output"
    out = ref.clone()
    out[0, 0] = float("nan")  # NaN where the reference has a number
    assert gate.compare(out, ref)[1] == "1 elements non-finite or unwritten"


# --- messages and stamps --------------------------------------------------------------------------

def test_an_unknown_revision_lists_the_known_ones():
    result = CliRunner().invoke(main, ["--root", str(ROOT), "check", "vector_add", "--rev", "v9"])
    assert result.exit_code == 2
    names = ", ".join(r.name for r in load_kernel(ROOT, "vector_add").revisions)
    assert f"kernlog: unknown revision 'v9' of vector_add; known: {names}" in result.output


def test_capture_time_is_utc_to_the_second():
    import re

    from kernlog.capture import provenance

    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", provenance.now())


def test_without_torch_a_gpu_or_ncu_profiling_says_which_is_missing(monkeypatch):
    import sys

    import torch

    from kernlog.capture import profiler, provenance
    from kernlog.errors import NoGpu

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(NoGpu) as exc:
        profiler.require_gpu()
    assert str(exc.value) == "torch is not installed: profiling needs torch with CUDA"
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NoGpu) as exc:
        profiler.require_gpu()
    assert str(exc.value) == ("no CUDA GPU visible: this command runs on a GPU machine "
                              "(check --device cpu, diff, show, list and report work here)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(provenance, "find_ncu", lambda: None)
    with pytest.raises(NoGpu) as exc:
        profiler.require_gpu()
    assert str(exc.value) == "ncu (Nsight Compute) not found on PATH"
    monkeypatch.setattr(provenance, "find_ncu", lambda: "/opt/ncu/ncu")
    assert profiler.require_gpu() == "/opt/ncu/ncu"


def test_require_reads_the_caps_of_the_device_it_is_given(monkeypatch):
    from kernlog import cuda

    from .helpers import H100

    asked = []
    monkeypatch.setattr(cuda, "device_caps", lambda device=None: asked.append(device) or H100)
    assert cuda.require("cuda:1") is H100 and asked == ["cuda:1"]
    assert cuda.require("cuda:0", smem=H100.smem_per_block_optin) is H100
    with pytest.raises(Exception, match="needs 228 KiB of shared memory per block, this GPU"):
        cuda.require("cuda:0", smem=H100.smem_per_block_optin + 1024)


# --- diff's text --------------------------------------------------------------------------------------

def test_verdict_lines_read_exactly():
    v = verdicts.Verdict("faster", 0.5, 0.0123, 0.5, "default", 60, 61)
    assert v.line() == "wall time: FASTER: median ratio 0.500 (p=0.012, band +-50.0% default, 60 vs 61 samples)"
    v = verdicts.Verdict("inconclusive", 1.1, None, 0.02, "calibrated", 5, 6, "outside the band")
    assert v.line() == ("wall time: INCONCLUSIVE: median ratio 1.100 (p n/a, band +-2.0% calibrated, 5 vs 6 samples)"
                        "; outside the band")


def test_diff_cells_carry_stall_shares_and_the_ratio():
    cells = {"unit": "cycles/inst", "a": 2.0, "b": 6.0, "share_a": 50.0, "share_b": 75.0, "ratio": 3.0}
    assert diff_text._cells(cells) == ("2 (50%)", "6 (75%)", "cycles/inst", "3.000x")
    assert diff_text._cells({"unit": "cycles/inst", "a": None, "b": 6.0, "share_a": None, "share_b": 20.0,
                        "ratio": None}) == ("not collected", "6 (20%)", "cycles/inst", "")
    assert diff_text._cells({"unit": "cycles/inst", "a": 6.0, "b": None, "share_a": 20.0, "share_b": None,
                        "ratio": None}) == ("6 (20%)", "not collected", "cycles/inst", "")
    assert diff_text._cells({"unit": "MB", "a": 250.0, "b": 125.0, "ratio": 0.5}) == ("250", "125", "MB", "0.500x")


def test_largest_moves_carry_their_figures_and_leave_wall_time_to_the_verdict():
    a = {"dram_mb": 100.0, "dram_gbps": 1000.0, "instructions": 10.0, "wall_ms": 1.0, "spill_insts": 0.0}
    b = {"dram_mb": 100.0, "dram_gbps": 2000.0, "instructions": 30.0, "wall_ms": 2.0, "spill_insts": 500.0}
    assert facts.largest_deltas(a, b) == [
        {"label": "register-spill instructions", "unit": "inst", "a": 0.0, "b": 500.0, "pct": float("inf"),
         "judgement": "worse", "weight": 10.0},  # from none: no ratio, the capped weight, listed first
        {"label": "warp instructions executed", "unit": "M inst", "a": 10.0, "b": 30.0, "pct": 200.0,
         "judgement": "worse", "weight": 2.0},
        {"label": "DRAM throughput", "unit": "GB/s", "a": 1000.0, "b": 2000.0, "pct": 100.0, "judgement": "better",
         "weight": 1.0}]
    assert len(facts.largest_deltas(a, b, n=2)) == 2


# --- units ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("unit, values, shown, mult", [
    ("ms", (0.0012,), "us", 1e3), ("ms", (2.5,), "ms", 1.0), ("ms", (5e-7,), "ns", 1e6),
    ("us", (1.0,), "us", 1.0),  # exactly one of a unit is shown in it
    ("ms", (0.0012, 2.5), "ms", 1.0),  # the larger value picks the unit
    ("M inst", (0.0005,), "inst", 1e6), ("M inst", (30.0,), "M inst", 1.0), ("M inst", (2500.0,), "G inst", 1e-3),
    ("K sectors", (2000.0,), "M sectors", 1e-3), ("sectors", (5e6,), "M sectors", 1e-6),
    ("threads", (5.0,), "threads", 1.0), ("%", (50.0,), "%", 1.0),
    ("ms", (None, 0.0), "ms", 1.0), ("ms", (float("inf"),), "ms", 1.0),
    ("GB/s", (2500.0,), "TB/s", 1e-3), ("B", (4096.0,), "KB", 1e-3), ("MB", (-3000.0,), "GB", 1e-3),
])
def test_common_unit_shows_one_to_three_digits(unit, values, shown, mult):
    got_shown, got_mult = units.common_unit(unit, *values)
    assert got_shown == shown and got_mult == pytest.approx(mult)


@pytest.mark.parametrize("v, text", [
    (None, "not collected"), (float("inf"), "inf"), (0.0, "0"), (1e6, "1.000e+06"), (-1e6, "-1.000e+06"),
    (999999.0, "1e+06"), (1e-3, "0.001"), (0.000999, "9.990e-04"), (-2e-4, "-2.000e-04"), (12.34567, "12.35"),
])
def test_numbers_print_four_digits_or_scientific_at_the_extremes(v, text):
    assert units.number(v) == text


def test_pairs_and_quantities_share_one_unit():
    assert units.number(12.34567, 6) == "12.3457"
    assert units.pair("ms", 0.0012, 0.0024) == ("1.2", "2.4", "us")
    assert units.pair("ms", None, 0.5) == ("not collected", "500", "us")
    assert units.quantity("ms", 0.0012) == "1.2 us" and units.quantity("ms", None) == "not collected"
    assert units.quantity("", 3.0) == "3" and units.quantity("%", 50.0) == "50 %"


# --- kernlog show ---------------------------------------------------------------------------------

def _shown():
    rec = make_record("v1_block_smem", median_ms=0.1)
    rec.update(_path="profiles/x.json", config={"BLOCK": 256}, git={"commit": "abc", "dirty": True},
               change="one block per row", predicts="duration 10x",
               metrics={"wall_ms": 0.1, "duration_us": 85.12, "dram_mb": 246.9, "block_size": 256.0,
                        "stall_barrier": 5.3},
               facts={"occupancy_limiter": "registers", "kernels": [{"name": "k1"}, {"name": "k2"}]},
               findings=[{"title": "Long Scoreboard Stalls", "speedup_pct": 45.3, "message": "wait less"},
                         {"title": "High Throughput", "speedup_pct": None, "message": "busy"}],
               hotspots={"kernel": "k1", "samples": 200, "lines": [
                   {"file": "kernels/softmax/v1_block_smem.cu", "line": 12, "share": 0.6, "stall": "barrier",
                    "stall_share": 0.55, "text": "__syncthreads();", "sass": "BAR.SYNC"},
                   {"file": None, "line": 64, "share": 0.1, "stall": None, "stall_share": None, "text": None,
                    "sass": "EXIT"}]})
    rec["timing"].update(median_ms=0.1, p05_ms=0.098, p95_ms=0.102, n=60,
                         clocks={"sm_mhz": {"median": 1755.0}, "mem_mhz": {"median": 2619.0}})
    return rec


def test_show_prints_every_value_with_its_unit():
    from kernlog.render import show

    assert show.render(ROOT, profile_of(_shown(), check=False)).splitlines() == [
        "softmax/v1_block_smem  8192x4096 fp32  on NVIDIA H100 80GB HBM3  (profiles/x.json)",
        "captured 2026-11-22T00:00:00+00:00 at commit abc (dirty)",
        "change: one block per row",
        "predicts: duration 10x",
        "config picked: {'BLOCK': 256}",
        "wall time: median 100 us (p05 98, p95 102 us; 60 samples); 2.684 TB/s achieved",
        "clocks while timed: SM 1755 MHz, memory 2619 MHz",
        "  wall time (median, no ncu)                         100 us",
        "  ncu duration                                     85.12 us",
        "  DRAM bytes read+written                          246.9 MB",
        "  block size                                    256 threads",
        "  stall: barrier                            5.3 cycles/inst",
        "  occupancy limiter: registers; kernels: k1, k2",
        "source-line hot spots of k1 (200 warp samples; share of them, and the stall that leads on the line):",
        "   60%  kernels/softmax/v1_block_smem.cu:12      barrier 55%              __syncthreads();",
        "   10%  SASS +0x40                               issuing                  EXIT",
        "- Long Scoreboard Stalls (est. speedup 45%): wait less",
        "- High Throughput: busy"]


def test_show_names_the_gpus_highest_clock_and_a_throttled_pass():
    from kernlog.render import show

    rec = _shown()
    rec["timing"]["clocks"] = {"sm_mhz": {"median": 1845.0}, "mem_mhz": {"median": 3201.0}, "sm_max_mhz": 1980.0}
    lines = show.render(ROOT, profile_of(rec, check=False)).splitlines()
    i = lines.index("clocks while timed: SM 1845 MHz (its highest 1980), memory 3201 MHz")
    assert lines[i + 1].startswith("Timed at an SM clock of 1845 MHz, 7% under this GPU's 1980: it throttled")
    rec["timing"]["clocks"]["sm_mhz"]["median"] = 1965.0
    lines = show.render(ROOT, profile_of(rec, check=False)).splitlines()
    i = lines.index("clocks while timed: SM 1965 MHz (its highest 1980), memory 3201 MHz")
    assert not lines[i + 1].startswith("Timed at")


def test_show_says_plainly_a_profile_taken_before_the_first_commit():
    """kernlog init, then profile before any commit: git names no commit, and show says so with the fix, where
    it had read "at commit unknown (whether the tree was dirty: unknown)"; a known commit keeps its dirty mark."""
    from kernlog.render import show

    rec = _shown()
    rec["git"] = {"commit": "unknown", "dirty": "unknown"}
    assert show.render(ROOT, profile_of(rec, check=False)).splitlines()[1] == (
        "captured 2026-11-22T00:00:00+00:00 at no commit git could name (outside a repository, or before its "
        "first commit): commit, then profile again to tie its figures to one")
    rec["git"] = {"commit": "abc", "dirty": "unknown"}
    assert show.render(ROOT, profile_of(rec, check=False)).splitlines()[1] == (
        "captured 2026-11-22T00:00:00+00:00 at commit abc (whether the tree was dirty: unknown)")


def test_show_of_an_imported_report_says_what_is_unknown():
    import json

    from kernlog.render import show

    rec = _shown()
    rec.update(git={"commit": None, "dirty": "unknown"}, imported={"file": "a.ncu-rep", "sha256": "f" * 64},
               config=None, predicts="", facts={})
    rec["timing"].update(source="ncu duration", clocks={})
    lines = show.render(ROOT, profile_of(rec, check=False)).splitlines()
    assert lines[1:4] == [
        "captured 2026-11-22T00:00:00+00:00 at no known commit",
        "imported from a.ncu-rep (sha256 ffffffffffffffff...), not captured by kernlog: the source it ran is unknown",
        "change: one block per row"]
    assert lines[4] == "time: 100 us, ncu's duration of the profiled launch (no wall-time samples); 2.684 TB/s achieved"
    assert not any("wall time" in ln or "predicts" in ln or "config" in ln for ln in lines)
    assert "  occupancy limiter: not collected; kernels: " in lines
    data = json.loads(show.render(ROOT, profile_of(rec, check=False), fmt="json"))
    assert "_path" not in data and data["flags"] == [] and data["revision"] == "v1_block_smem"
    rec["metrics"]["wall_ms"] = 0.05  # 5.4 TB/s: over the H100's copy ceiling
    assert show.render(ROOT, profile_of(rec, check=False)).splitlines()[-1].startswith("IMPOSSIBLE: ")


# --- kernlog diff's text and markdown -------------------------------------------------------------

def _step_pair():
    a, b = make_record("v0_naive", median_ms=0.2), make_record("v1_block_smem", median_ms=0.1, seed=1)
    a["metrics"] = {"wall_ms": a["metrics"]["wall_ms"], "dram_mb": 500.0, "block_size": 256.0, "stall_barrier": 2.0,
                    "instructions": 10.0, "l2_hit_pct": 50.0}
    b["metrics"] = {"wall_ms": b["metrics"]["wall_ms"], "dram_mb": 250.0, "block_size": 512.0, "stall_barrier": 6.0,
                    "instructions": 10.0, "l2_hit_pct": 50.0}
    a["findings"] = [{"title": "Gone", "rule": "R1", "message": "m", "speedup_pct": 5.0}]
    b["findings"] = [{"title": "New", "rule": "R2", "message": "m", "speedup_pct": 5.0}]
    return diff.diff(profile_of(a, check=False), profile_of(b, check=False))


HEAD = ["wall time: FASTER: median ratio 0.500 (p=3.6e-21, band +-3.5% default (time), 60 vs 60 samples)"]
BANDS = "default bands (no noise calibration for this GPU; `kernlog noise` measures one)"


def test_diff_text_shows_the_moves_hides_the_rest_and_lists_findings():
    d = _step_pair()
    assert diff_text.render(d).splitlines() == [
        "softmax/v0_naive -> softmax/v1_block_smem  (8192x4096 fp32, NVIDIA H100 80GB HBM3)", *HEAD,
        f"noise bands: {BANDS}",
        "metric                                before             after  unit           ratio  judgement",
        "wall time (median, no ncu)             200.2               100  us            0.500x  better",
        "DRAM bytes read+written                  500               250  MB            0.500x  better",
        "block size                               256               512  threads       2.000x  changed",
        "stall: barrier                      2 (100%)          6 (100%)  cycles/inst   3.000x  worse",
        "(18 rows same or not collected; --all shows them)",
        "finding appeared: New (R2)",
        "finding gone: Gone (R1)"]
    full = diff_text.render(d, all_rows=True).splitlines()
    assert len(full) == 3 + 1 + 22 + 2 and not any("--all shows them" in ln for ln in full)
    assert ("ncu duration                           not collected     not collected  us"
            "                    not collected") in full
    assert "L2 hit rate                                       50                50  %             1.000x  same" in full


def test_diff_markdown_has_the_table_with_bands_and_the_findings():
    assert diff_text.render(_step_pair(), "md").splitlines() == [
        "**softmax/v0_naive → softmax/v1_block_smem** (8192x4096 fp32, NVIDIA H100 80GB HBM3)", "", *HEAD, "",
        f"Noise bands: {BANDS}.", "",
        "| metric | before | after | unit | ratio | judgement | band |",
        "| --- | ---: | ---: | --- | ---: | --- | --- |",
        "| wall time (median, no ncu) | 200.2 | 100 | us | 0.500x | better | ±3.5% |",
        "| DRAM bytes read+written | 500 | 250 | MB | 0.500x | better | ±1.0% |",
        "| block size | 256 | 512 | threads | 2.000x | changed | ±0.0% |",
        "| stall: barrier | 2 (100%) | 6 (100%) | cycles/inst | 3.000x | worse | ±10.0% +0.05 |",
        "", "Findings that appeared:", "", "- New (R2)", "", "Findings that went away:", "", "- Gone (R1)"]


def test_diff_of_two_shapes_is_per_element_and_warns():
    a = make_record("v0_naive", median_ms=0.2)
    b = make_record("v0_naive", median_ms=0.05, seed=1, shape=(4096, 4096))
    a["metrics"] = {"wall_ms": a["metrics"]["wall_ms"], "dram_mb": 500.0}
    b["metrics"] = {"wall_ms": b["metrics"]["wall_ms"], "dram_mb": 125.0}
    b["bytes_moved"] *= 8  # 21 TB/s: impossible
    d = diff.diff(profile_of(a, check=False), profile_of(b, check=False))
    warn = "warning: shapes differ: times and amounts are compared per element"
    flag = ("IMPOSSIBLE: softmax/v0_naive: achieved bandwidth (bytes moved / wall time) 21471 GB/s exceeds the GPU's "
            "spec peak 3350 GB/s: a measurement bug, not a win")
    assert diff_text.render(d).splitlines() == [
        "softmax/v0_naive -> softmax/v0_naive  (8192x4096 fp32, NVIDIA H100 80GB HBM3; differs: shape 8192x4096 vs "
        "4096x4096)",
        "wall time: FASTER: median ratio 0.500 (p=3.5e-21, band +-3.5% default (time), 60 vs 60 samples)",
        f"noise bands: {BANDS}",
        "metric                                              before             after  unit           ratio  judgement",
        "wall time (median, no ncu) (per element)             5.966             2.981  ps/elem       0.500x  better",
        "DRAM bytes read+written (per element)                 14.9             7.451  B/elem        0.500x  better",
        "(19 rows same or not collected; --all shows them)", warn, flag]
    md = diff_text.render(d, "md").splitlines()
    assert md[-3:] == ["", warn, flag]
    assert "| DRAM bytes read+written (per element) | 14.9 | 7.451 | B/elem | 0.500x | better | ±1.0% |" in md


# --- noise: spread of calibration runs ------------------------------------------------------------

def test_spread_handles_zero_medians_long_runs_and_lone_values():
    s = verdicts.band_of_runs([{"a": 1.0, "z": 0.0, "w": -1.0}, {"z": 0.0, "w": 1.0, "b": 2.0}, {"b": 4.0, "z": 0.0}])
    assert "a" not in s  # one value: no spread, and the keys after it still count
    assert s["b"] == {"median": 3.0, "abs": 2.0, "rel": pytest.approx(2 / 3), "sigma_rel": pytest.approx(2 / 3 / 1.128),
                      "n": 2, "configs": 1}
    assert s["z"]["rel"] == 0.0 and s["z"]["sigma_rel"] == 0.0  # always zero: no noise
    assert s["w"]["rel"] is None and s["w"]["sigma_rel"] is None  # median zero, values not: no relative band
    long = verdicts.band_of_runs([{"x": v} for v in [1.0] * 10 + [2.0]])
    assert long["x"]["n"] == 11 and long["x"]["sigma_rel"] == pytest.approx(1.0 / 3.078)  # d2 of 10 beyond the table


def test_spread_keeps_the_widest_launch_config_and_the_first_of_equals():
    def runs(block, values):
        return [{"block_size": block, "x": v} for v in values]

    s = verdicts.band_of_runs(runs(128.0, [1.0, 1.1]) + runs(256.0, [2.0, 2.2]))  # the same relative spread
    assert s["x"]["median"] == pytest.approx(1.05) and s["x"]["configs"] == 2
    s = verdicts.band_of_runs(runs(128.0, [1.0, 1.01]) + runs(256.0, [1.0, 1.5]))
    assert s["x"]["abs"] == pytest.approx(0.5)
    s = verdicts.band_of_runs(runs(128.0, [1.0, 1.5]) + runs(256.0, [1.0, 1.01]))
    assert s["x"]["abs"] == pytest.approx(0.5)
    s = verdicts.band_of_runs(runs(128.0, [-1.0, 1.0]) + runs(256.0, [1.0, 1.01]))  # a group with no relative band
    assert s["x"]["abs"] == pytest.approx(0.01)
    s = verdicts.band_of_runs(runs(256.0, [1.0, 1.01]) + runs(128.0, [-1.0, 1.0]))
    assert s["x"]["abs"] == pytest.approx(0.01)


def test_a_retimed_diff_judges_the_new_samples_and_says_so():
    from .helpers import samples

    a, b = make_record("v0_naive", median_ms=0.2), make_record("v1_block_smem", median_ms=0.1, seed=1)
    retimed = {"a": samples(0.1, seed=3), "b": samples(0.1, seed=4), "rounds": 3, "round_ratios": [1.0] * 3,
               "clocks": None, "stale": ["softmax/v0_naive"]}
    a, b = profile_of(a), profile_of(b)
    d = diff.diff(a, b, retimed=retimed)
    assert d["timing"]["verdict"] == "same" and d["timing"]["rounds"] == 3
    text = diff_text.render(d).splitlines()
    assert text[1].startswith("wall time: SAME: median ratio 1.0") and text[1].endswith(" [interleaved re-timing]")
    assert ("warning: softmax/v0_naive: its source changed since it was profiled; the re-timing ran today's source"
            in text)
    assert "[interleaved re-timing]" not in diff_text.render(diff.diff(a, b))


def test_diff_names_every_difference_of_the_sides_and_warns():
    a = make_record("v6_autotuned", median_ms=0.2)
    a.update(_path="p/a.json", config={"BLOCK": 256, "W": 4})
    a["timing"]["clocks"] = {"sm_mhz": {"median": 2000.0}, "mem_mhz": {"median": 2619.0}}
    sa = diff.side(profile_of(a))
    assert sa == {"label": "softmax/v6_autotuned", "kernel": "softmax", "revision": "v6_autotuned",
                  "shape": [8192, 4096], "dtype": "fp32", "gpu": "NVIDIA H100 80GB HBM3",
                  "gpu_slug": "nvidia-h100-80gb-hbm3", "driver": "580.159.04", "commit": "0" * 40, "path": "p/a.json",
                  "selector": "softmax/v6_autotuned@8192x4096.fp32.nvidia-h100-80gb-hbm3", "sm_mhz": 2000.0,
                  "mem_mhz": 2619.0, "config": {"BLOCK": 256, "W": 4}, "stored_in": None, "gpu_choice": None,
                  "_skipped": []}
    no_clocks = dict(a, git={"commit": None}, timing={k: v for k, v in a["timing"].items() if k != "clocks"})
    assert diff.side(profile_of(no_clocks))["commit"] is None and diff.side(profile_of(no_clocks))["sm_mhz"] is None
    sb = dict(sa, sm_mhz=1500.0, mem_mhz=1593.0, config={"BLOCK": 512, "W": 8}, driver="590", dtype="bf16")
    assert diff.differences(sa, sb, 0.25) == (
        ["dtype fp32 vs bf16", "driver 580.159.04 vs 590", "tuned config BLOCK: 256 vs 512; W: 4 vs 8",
         "memory clock 2619 vs 1593 MHz"],  # the SM clocks are exactly 25% apart: inside the band
        ["the same revision picked another config: its metrics moved with the config, not noise",
         "the sides ran at memory clocks 2619 and 1593 MHz, 39.2% apart (band 25.0%): part of any timing change is "
         "the clock"])
    sc = dict(sa, kernel="vector_add", revision="torch", shape=[4096], gpu="NVIDIA H200", config=None)
    assert diff.differences(sa, sc, 0.25) == (
        ["kernel softmax vs vector_add", "shape 8192x4096 vs 4096", "GPU NVIDIA H100 80GB HBM3 vs NVIDIA H200"],
        ["the two sides are different kernels: they compute different things",
         "shapes differ: times and amounts are compared per element",
         "different GPUs: timings compare the hardware as much as the code; default noise bands apply"])
    assert diff.differences(sa, dict(sa, driver="unknown"), 0.25) == ([], [])


def test_findings_are_matched_by_rule_and_title():
    a = [{"rule": "R", "title": "T1"}, {"rule": "R", "title": "T2"}]
    b = [{"rule": "R", "title": "T2"}, {"rule": "S", "title": "T1"}]
    assert diff.finding_changes(a, b) == ([{"rule": "S", "title": "T1"}], [{"rule": "R", "title": "T1"}])


def test_a_side_prints_as_the_selector_that_names_it():
    from kernlog.store import lookup

    assert lookup.ProfileKey("softmax", "v7", (1024, 131072), "bf16", "nvidia-h200").text() == \
        "softmax/v7@1024x131072.bf16.nvidia-h200"
    assert lookup.ProfileKey("softmax", "v7", dtype="bf16").text() == "softmax/v7@bf16"
    assert lookup.ProfileKey("softmax", "v7").text() == "softmax/v7"


def test_a_field_of_the_wrong_type_is_named_with_what_it_holds():
    rec = make_record("torch")
    assert next(store._problems(dict(rec, dtype=None))) == ("field of wrong type", "has dtype null, expected str")
    assert next(store._problems(dict(rec, dtype=3))) == ("field of wrong type", "has dtype a int, expected str")


# --- a metric row takes the GPU's calibrated band, not the default -------------------------------

def test_a_metric_row_is_judged_in_the_calibrated_band_not_the_default():
    """A 5% DRAM-throughput move (the bytes unchanged) inside a 9.4% calibrated band is "same";
    judged in the default 3.5% band it would read "better"."""
    sigma = 0.094 / (verdicts.Z99 * 2 ** 0.5)
    cal = {"kernel": "softmax", "revision": "torch", "spread": {"dram_gbps": {"sigma_rel": sigma, "median": 2000.0}}}
    bands = verdicts.Bands([cal], GPU["slug"])
    a, b = make_record("torch"), make_record("torch")
    for rec, gbps in ((a, 2000.0), (b, 2100.0)):
        rec["metrics"].update(dram_gbps=gbps, dram_mb=256.0)
    a, b = profile_of(a), profile_of(b)
    row = next(r for r in diff.diff(a, b, bands)["rows"] if r["metric"] == "dram_gbps")
    assert abs(row["band"]["rel"] - 0.094) < 1e-6 and row["judgement"] == "same"
    row = next(r for r in diff.diff(a, b)["rows"] if r["metric"] == "dram_gbps")  # defaults: judged
    assert row["judgement"] == "better"


# --- one unsourced figure is enough to fail the prose check ----------------------------------------

def test_one_unsourced_figure_fails_the_prose_check():
    from kernlog.errors import KernlogError
    from kernlog.render import prose

    prose.check("# KERNEL_LOG\n\nNo figure here but a shape, 8192x4096.\n")
    one = r"1 figure\(s\) in the log's prose come from no profile: line 3: '2.5 TB/s'"
    with pytest.raises(KernlogError, match=one):
        prose.check("# KERNEL_LOG\n\nIt once ran at 2.5 TB/s.\n")
