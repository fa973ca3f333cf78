"""Extraction from real .ncu-rep files captured on the H100."""
import pytest

from kernlog.capture import ncu as ncurep
from kernlog.errors import KernlogError

from .helpers import FULL_REP, SECTIONS_REP


def test_extracts_core_metrics_from_full_report():
    values, facts = ncurep.summarize(ncurep.read_report(FULL_REP))
    assert values["duration_us"] == pytest.approx(85.12, rel=1e-3)
    # 8192 x 4096 fp32 read once and written once is 268 MB; the kernel moved about that
    assert 200 < values["dram_mb"] < 300
    assert 0 < values["dram_pct"] <= 100 and values["dram_gbps"] > 1000
    assert values["block_size"] == 256 and values["grid_size"] == 8192
    assert values["ld_sectors_per_request"] == pytest.approx(16.0)  # 16-byte loads, fully coalesced
    assert values["spill_insts"] == 0 and values["local_sectors"] == 0
    assert facts["occupancy_limiter"] == "registers"
    assert facts["main_kernel"] == "sm_kernel"


def test_stall_reasons_are_cycles_per_instruction_without_selected():
    values, _ = ncurep.summarize(ncurep.read_report(SECTIONS_REP))
    assert values["stall_long_scoreboard"] == pytest.approx(22.51, rel=1e-3)
    assert "stall_selected" not in values and "stall_not_selected" not in values


def test_metric_absent_from_report_is_not_collected_not_zero():
    values, _ = ncurep.summarize(ncurep.read_report(SECTIONS_REP))
    # the five-section capture has no dram__bytes_read/write nor instruction counts
    assert values["dram_mb"] is None
    assert values["instructions"] is None


def test_findings_carry_title_message_and_speedup_without_markup():
    found = ncurep.findings(ncurep.read_report(SECTIONS_REP))
    stall = [f for f in found if f["title"] == "Long Scoreboard Stalls"]
    assert stall and stall[0]["speedup_pct"] == pytest.approx(45.3, abs=0.1)
    assert all("@section:" not in f["message"] for f in found)
    assert not any("could not be found" in f["message"] for f in found)  # ncu's own notes are dropped


def test_actions_grouped_by_nvtx_range():
    groups = ncurep.group_by_range(ncurep.read_report(SECTIONS_REP), "k")
    assert list(groups) == ["kl"] and len(groups["kl"]) == 1
    assert ncurep.group_by_range(ncurep.read_report(SECTIONS_REP), "kl.") == {}


def test_missing_and_corrupt_reports_raise_clear_errors(tmp_path):
    with pytest.raises(KernlogError, match="missing"):
        ncurep.read_report(tmp_path / "nope.ncu-rep")
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(b"not a report")
    with pytest.raises(KernlogError, match="empty or corrupt"):
        ncurep.read_report(bad)
    with pytest.raises(KernlogError, match="no profiled kernel"):
        ncurep.summarize([])


def test_the_catalogue_imports_no_report_reader_and_no_other_stage():
    """kernels/ import the catalogue (core); reading reports is capture.ncu's."""
    import subprocess
    import sys

    code = ("import sys, kernlog.metrics; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('kernlog', 'ncu')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert set(out) <= {"kernlog", "kernlog.metrics", "kernlog.errors"}, out
    from kernlog import metrics

    assert not any(hasattr(metrics, n) for n in ("read_report", "summarize", "findings", "group_by_range"))


class _Domain:
    def __init__(self, push_pop, start_end):
        self._pp, self._se = push_pop, start_end

    def push_pop_ranges(self):
        return list(self._pp)

    def start_end_ranges(self):
        return list(self._se)


class _Action:
    """An ncu_report action's NVTX state: one domain's push/pop ranges (the launching thread's) and
    start/end ranges (the process's)."""

    def __init__(self, push_pop=(), start_end=()):
        self.domain = _Domain(push_pop, start_end)

    def nvtx_state(self):
        action = self

        class State:
            def domains(self):
                return [0]

            def domain_by_id(self, i):
                return action.domain
        return State()


def test_a_kernel_another_thread_launched_is_grouped_by_the_start_end_range():
    """autograd launches a CUDA backward from a thread of its own: that kernel is inside the
    target's start/end range only, and belongs to the revision all the same."""
    main = _Action(push_pop=["kl.torch_sdpa"], start_end=["kl.torch_sdpa"])
    backward = _Action(start_end=["kl.torch_sdpa"])
    outside = _Action(push_pop=["warmup"])
    groups = ncurep.group_by_range([main, backward, outside], "kl.")
    assert groups == {"kl.torch_sdpa": [main, backward]}
    assert ncurep.nvtx_ranges(main) == ["kl.torch_sdpa"]  # one name, not the same range twice
    inner = _Action(push_pop=["kl.v1", "kl.v1/inner"], start_end=["kl.v1"])
    assert ncurep.group_by_range([inner], "kl.") == {"kl.v1/inner": [inner]}


def test_the_thread_s_ranges_are_searched_before_the_process_s():
    """A report from elsewhere (`kernlog import --range`): the innermost push/pop range that matches
    names the group, before any start/end range open around it."""
    action = _Action(push_pop=["user.outer", "user.inner"], start_end=["user.span"])
    assert ncurep.group_by_range([action], "user.") == {"user.inner": [action]}
    assert ncurep.group_by_range([action], "user.sp") == {"user.span": [action]}


def test_the_measured_launch_is_inside_both_ranges_closed_however_it_ends():
    """kernlog.run.target's range: start/end (the process's) around push/pop (the thread's), both
    closed when the launch raises; none off the GPU."""
    from kernlog.run.target import measured_range

    calls = []

    class Nvtx:
        def range_start(self, name):
            calls.append(("start", name))
            return 7

        def range_push(self, name):
            calls.append(("push", name))

        def range_pop(self):
            calls.append(("pop",))

        def range_end(self, handle):
            calls.append(("end", handle))

    with measured_range("kl.torch_sdpa", Nvtx()):
        calls.append("launch")
    assert calls == [("start", "kl.torch_sdpa"), ("push", "kl.torch_sdpa"), "launch", ("pop",), ("end", 7)]
    calls.clear()
    with pytest.raises(RuntimeError), measured_range("kl.v1", Nvtx()):
        raise RuntimeError("the launch failed")
    assert calls[-2:] == [("pop",), ("end", 7)]
    with measured_range("kl.v1", None):
        pass  # off the GPU: no NVTX at all
