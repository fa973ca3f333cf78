"""Triage's host side on the CPU: the call's time split from a trace (stored H100 traces and
synthetic ones), the host candidates it yields (a sync, a CUDA graph) or does not (a GPU-bound
call), their place in the ranking on the wall time, the per-launch floor's storage, and
`--verify --graph` with fakes."""
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog.capture import profiler
from kernlog.capture import triage as lib
from kernlog.capture.trace import parse_timeline
from kernlog.commands.triage import triage as triage_cmd
from kernlog.errors import KernlogError
from kernlog.judge import hostside
from kernlog.judge import triage as judge
from kernlog.render.triage import markdown, split_line, table
from kernlog.store import triages as store
from tests.triage_fixtures import PID, TID, cpu_op, kernel, launch, module

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted(ROOT.glob("profiles/*/triage/*.trace.json.gz"))
K = "void at::native::vectorized_elementwise_kernel<4, at::native::AddKernel>(int, ...)"


def sync(name, ts, dur):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": 4880213522547.0 + ts,
            "dur": dur, "args": {"correlation": 10_000 + int(ts), "cbid": 165}}


def chain(n, kernel_us, gap_us, start=0.0, corr=0):
    """n ops, each an aten::add in a Block module launching one kernel of `kernel_us`, the host
    taking `gap_us` per op (so the GPU waits on it where gap_us > kernel_us)."""
    events, t = [], start
    for i in range(n):
        events += [module(f"Block_{i}", t, gap_us - 1), cpu_op("aten::add", t + 1, gap_us - 3, [(1024,), (1024,)],
                                                                ["float", "float"]),
                   launch(corr + i, t + 2), kernel(K, corr + i, t + 6, kernel_us)]
        t += gap_us
    return events, t


def tracer_end(events, t):
    """The tracer's closing synchronize, outside every op, after the last launch."""
    last = max(e["ts"] + e["dur"] for e in events if e.get("cat") == "kernel") - 4880213522547.0
    return events + [sync("cudaDeviceSynchronize", t, max(1.0, last - t) + 2)]


def host_bound():
    """100 launches of 2 us kernels, the host taking 20 us per op: the GPU idle 90% of the call."""
    return {"traceEvents": tracer_end(*chain(100, 2.0, 20.0))}


def gpu_bound():
    """100 launches of 50 us kernels issued every 5 us: the GPU never waits."""
    return {"traceEvents": tracer_end(*chain(100, 50.0, 5.0))}


def with_item():
    """Ten launches, then `.item()` (aten::item -> aten::_local_scalar_dense, a copy and a stream
    synchronize) inside a Loss module, then ten more: the GPU drains at the sync and waits."""
    first, t = chain(10, 30.0, 5.0)
    gpu_end = 6 + 10 * 30.0  # the last first-half kernel's end: launched every 5 us, they queue
    item = [module("Loss_0", t, gpu_end + 10 - t + 5), cpu_op("aten::item", t + 1, gpu_end + 10 - t),
            cpu_op("aten::_local_scalar_dense", t + 2, gpu_end + 8 - t),
            sync("cudaStreamSynchronize", t + 3, gpu_end + 2 - t - 3)]
    second, end = chain(10, 30.0, 50.0, start=gpu_end + 20, corr=100)
    return {"traceEvents": tracer_end(first + item + second, end)}


def busy_serialized(trace):
    """The GPU's kernels as a stream runs them: each starts at its launch or at the previous one's end."""
    kernels = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    end = 0.0
    for k in kernels:
        k["ts"] = max(k["ts"], end)
        end = k["ts"] + k["dur"]
    return trace


@pytest.mark.parametrize("path", STORED, ids=[p.name.split(".")[0] for p in STORED])
def test_the_split_of_a_stored_trace_sums_to_the_traced_call(path):
    tl = parse_timeline(json.loads(gzip.decompress(path.read_bytes())))
    s = hostside.split(tl, wall_us=5000.0)
    parts = s.kernel_us + s.copy_us + s.launch_gap_us + s.sync_gap_us
    assert parts == pytest.approx(s.traced_us, abs=0.01)  # the trace's timestamps resolve 1 ns
    assert s.kernel_us > 0 and s.launch_gap_us > 0 and s.launches == tl.launches
    assert s.idle_us == pytest.approx(max(0.0, 5000.0 - s.busy_us))
    if s.launch_gap_us + s.sync_gap_us:
        assert sum(g["us"] for g in s.gaps) <= s.idle_us + 1e-6


def test_a_host_bound_call_yields_a_graph_candidate_ranked_above_a_smaller_kernel_win():
    trace = busy_serialized(host_bound())
    tl = parse_timeline(trace)
    assert tl.syncs == () and tl.launches == 100  # the tracer's closing synchronize is not the program's
    s = hostside.split(tl, wall_us=2000.0)
    assert s.kernel_us == pytest.approx(200.0) and s.idle_us == pytest.approx(1800.0)
    assert s.kernel_us + s.launch_gap_us == pytest.approx(s.traced_us)
    (g,) = [g for g in s.gaps if g["module"] == "Block_1"]
    assert g["cause"] == "launch" and g["op"] == "aten::add" and g["count"] == 1
    fixes = hostside.candidates(tl, s, floor_us=3.0, band=judge.BAND)
    (fix,) = fixes
    assert fix.kind == "graph" and fix.title == "capture the call in a CUDA graph (100 launches)"
    assert fix.evidence["predicted_us"] == pytest.approx(300.0)  # 100 kernels of 2 us, each raised to the 3 us floor
    assert fix.saved_us == pytest.approx(1700.0)
    kernel_win = judge.Chain(keys=("k",), ops=("aten::add", "aten::add"), repeats=1, measured_us=200.0,
                             intermediate_bytes=1.0, saved_us=100.0)
    ranked = judge.rank([], [kernel_win], 2000.0, host=tuple(fixes))
    assert [c.kind for c in ranked] == ["graph", "fusion"]
    assert ranked[0].speedup == pytest.approx(2000.0 / 300.0) and ranked[1].speedup == pytest.approx(2000 / 1900)
    assert hostside.candidates(tl, s, floor_us=None, band=judge.BAND) == []  # no floor measured: no prediction


def test_a_gpu_bound_call_yields_no_host_candidate():
    tl = parse_timeline(busy_serialized(gpu_bound()))
    s = hostside.split(tl, wall_us=5010.0)
    assert s.busy_us == pytest.approx(5000.0) and s.launch_gap_us == pytest.approx(5.0)  # only before the first
    assert hostside.candidates(tl, s, floor_us=3.0, band=judge.BAND) == []


def test_a_sync_inside_the_call_is_named_at_its_op_and_module_and_bars_the_graph():
    trace = busy_serialized(with_item())
    tl = parse_timeline(trace)
    (sy,) = tl.syncs
    assert (sy.name, sy.op, sy.top_op, sy.module) == ("cudaStreamSynchronize", "aten::_local_scalar_dense",
                                                      "aten::item", "Loss_0")
    s = hostside.split(tl, wall_us=1200.0)
    assert s.syncs == 1 and s.sync_gap_us > 0
    assert s.kernel_us + s.copy_us + s.launch_gap_us + s.sync_gap_us == pytest.approx(s.traced_us)
    (g,) = [g for g in s.gaps if g["cause"] == "sync"]
    assert (g["op"], g["module"], g["count"]) == ("aten::item", "Loss_0", 1)
    fixes = hostside.candidates(tl, s, floor_us=3.0, band=judge.BAND)
    assert [f.kind for f in fixes] == ["sync"]  # a graph cannot capture a sync: no graph candidate
    assert fixes[0].title == "remove the host sync at aten::item in Loss_0 (1 calls)"
    assert fixes[0].saved_us == pytest.approx(g["traced_us"] * s.scale, abs=1e-3)


def test_a_sync_whose_idle_is_within_the_noise_band_is_no_candidate():
    tl = parse_timeline(busy_serialized(with_item()))
    s = hostside.split(tl, wall_us=hostside.split(tl, 0).busy_us + 2.0)  # the timed call barely idle
    assert hostside.candidates(tl, s, floor_us=3.0, band=judge.BAND) == []


# --- the flow: a fresh triage stores the split and ranks the host fixes; --verify --graph ---

GPU = {"name": "Fake GPU", "slug": "fake-gpu"}
PEAKS = judge.Peaks(bandwidth_gbps=1000.0, tensor_tflops=100.0, fp32_tflops=50.0, launch_us=3.0)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("")
    (tmp_path / "hostprog.py").write_text("def make():\n    return lambda: None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def fresh(root, trace, wall_ms):
    s = lib.Steps(gpu=lambda: GPU, peaks=lambda root, gpu: PEAKS, build=lambda root, t: (lambda: None),
                  time=lambda fn: [wall_ms] * 5, trace=lambda fn: trace, ncu=None, ncu_path=lambda: None,
                  versions=lambda ncu: {})
    return lib.fresh_triage(root, lib.resolve_target(root, "hostprog:make"), s, progress=lambda m: 0)


def test_a_fresh_triage_stores_the_split_on_the_wall_time_and_shows_it_first(repo):
    path = fresh(repo, busy_serialized(host_bound()), wall_ms=2.0)
    rec = store.load_triage(path)
    assert rec.timing == lib.WALL_METHOD and rec.total_us == pytest.approx(2000.0)
    assert rec.time_split["idle_us"] == pytest.approx(1800.0) and rec.time_split["launches"] == 100
    assert rec.candidates[0]["kind"] == "graph" and rec.candidates[0]["speedup"] == pytest.approx(2000 / 300)
    line = split_line(rec)
    assert line.startswith("Of 2000.0 us per call, 200.0 us with the GPU busy (200.0 us in kernels), 1800.0 us (90%) "
                           "with it idle: 1800.0 us in launch gaps")
    assert "Block_" in line and "GPU's clock" not in line
    md = markdown(rec)
    assert md.index(line) < md.index("| # | candidate")  # the split comes before the candidates
    assert table(rec).splitlines()[2] == line
    # a record taken before wall timing says its idle time is launch latency only
    data = json.loads(path.read_text())
    del data["timing"]
    assert "the host's time not counted" in split_line(store.TriageRecord.from_dict(data))


def test_rejudge_fills_the_split_and_the_floor_of_a_record_taken_before_them(repo):
    path = fresh(repo, busy_serialized(host_bound()), wall_ms=2.0)
    data = json.loads(path.read_text())
    for key in ("time_split",):
        del data[key]
    del data["peaks"]["launch_us"]
    data["candidates"] = []
    path.write_text(json.dumps(data))
    (repo / "profiles" / "fake-gpu" / "ceilings.json").write_text(json.dumps(
        {"copy_gbps": 1000.0, "launch_floor": {"graph_us": 3.0}}))
    (rec,) = lib.rejudge(repo, "hostprog:make")
    assert rec.peaks["launch_us"] == 3.0 and rec.time_split["idle_us"] == pytest.approx(1800.0)
    assert rec.candidates[0]["kind"] == "graph"


def test_the_launch_floor_is_measured_once_and_added_beside_the_other_ceilings(tmp_path, monkeypatch):
    folder = tmp_path / "profiles" / "g"
    folder.mkdir(parents=True)
    (folder / "ceilings.json").write_text(json.dumps({"copy_gbps": 3000.0}))
    calls = []
    monkeypatch.setattr(profiler.timing, "measure_launch_floor", lambda timer: calls.append(1) or {"graph_us": 1.5})
    assert profiler.launch_floor(tmp_path, "g", None)["graph_us"] == 1.5
    assert profiler.launch_floor(tmp_path, "g", None)["graph_us"] == 1.5 and calls == [1]
    stored = json.loads((folder / "ceilings.json").read_text())
    assert stored["copy_gbps"] == 3000.0 and stored["launch_floor"]["graph_us"] == 1.5


def test_verify_graph_times_the_call_against_its_graph_and_judges_the_graph_candidate(repo, monkeypatch):
    path = fresh(repo, busy_serialized(host_bound()), wall_ms=2.0)
    monkeypatch.setattr(lib.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(lib, "build_callable", lambda root, t, device="cuda": (lambda: "eager"))
    timed = []
    monkeypatch.setattr(lib, "graphed", lambda fn, text: (lambda: "graph"))
    monkeypatch.setattr(lib, "time_interleaved", lambda base, new: timed.append((base(), new())) or
                        ([2.0] * 8, [0.4] * 8))
    v = lib.verify(repo, "hostprog:make", gpu=True, progress=lambda s: 0, graph=True)
    assert timed == [("eager", "graph")] and v.measured == pytest.approx(5.0) and v.outcome == "partly"
    (stored,) = store.load_triage(path).verified
    assert stored["target"] == "hostprog:make in a CUDA graph" and stored["candidate"] == 1
    assert stored["title"].startswith("capture the call in a CUDA graph")
    with pytest.raises(KernlogError, match="drop --baseline"):
        lib.verify(repo, "hostprog:make", baseline="hostprog:make", gpu=True, graph=True)


def test_verify_graph_without_a_graph_candidate_is_one_line(repo, monkeypatch):
    fresh(repo, busy_serialized(gpu_bound()), wall_ms=5.0)
    monkeypatch.setattr(lib.provenance, "gpu_info", lambda: GPU)
    with pytest.raises(KernlogError, match="names no CUDA-graph candidate"):
        lib.verify(repo, "hostprog:make", gpu=True, graph=True)


def test_graph_without_verify_is_one_line_and_exit_2(repo):
    r = CliRunner().invoke(triage_cmd, ["hostprog:make", "--graph"], obj={"root": str(repo)})
    assert r.exit_code == 2 and r.stderr.strip() == "kernlog: --graph goes with --verify"


# --- on a GPU: the floor and the graph are real ---

@pytest.mark.gpu
def test_on_a_gpu_the_launch_floor_is_positive_and_a_graph_launches_cheaper_than_python():
    from kernlog import timing

    floor = timing.measure_launch_floor(timing.Timer())
    assert 0 < floor["graph_us"] < floor["eager_us"] and floor["launches"] == 256


@pytest.mark.gpu
def test_on_a_gpu_a_graph_replays_the_calls_output_and_a_sync_cannot_be_captured():
    import torch

    x = torch.randn(4096, device="cuda")
    replay = lib.graphed(lambda: (x * 2).relu(), "relu")
    assert torch.equal(replay(), (x * 2).relu())
    with pytest.raises(KernlogError, match="cannot be captured in a CUDA graph"):
        lib.graphed(lambda: x.sum().item(), "item")
    ms = lib.time_samples(replay, budget_s=0.2)
    assert len(ms) >= 10 and min(ms) > 0


def test_a_verify_with_a_baseline_judges_the_first_kernel_candidate_not_a_host_fix(repo, monkeypatch):
    path = fresh(repo, busy_serialized(host_bound()), wall_ms=2.0)
    kinds = [c["kind"] for c in store.load_triage(path).candidates]
    assert kinds[0] == "graph" and kinds[1] == "roofline"
    monkeypatch.setattr(lib.provenance, "gpu_info", lambda: GPU)
    monkeypatch.setattr(lib, "build_callable", lambda root, t, device="cuda": (lambda: None))
    monkeypatch.setattr(lib, "time_interleaved", lambda base, new: ([2.0] * 8, [1.99] * 8))
    lib.verify(repo, "hostprog:make", baseline="hostprog:make", gpu=True, progress=lambda s: 0)
    (stored,) = store.load_triage(path).verified
    assert stored["candidate"] == 2 and stored["title"] == store.load_triage(path).candidates[1]["title"]


def test_copies_are_busy_time_named_by_the_op_and_module_that_issued_them():
    trace = busy_serialized(host_bound())
    trace["traceEvents"] += [
        module("Embed_0", 2010, 20), cpu_op("aten::copy_", 2011, 15, [(64,), (64,)], ["float", "float"]),
        launch(900, 2012, name="cudaMemcpyAsync"),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
         "ts": 4880213522547.0 + 2020, "dur": 30.0, "args": {"correlation": 900}}]
    s = hostside.split(parse_timeline(trace), wall_us=2100.0)
    assert s.copy_us == pytest.approx(30.0) and s.kernel_us == pytest.approx(200.0)
    assert s.copies == [{"op": "aten::copy_", "module": "Embed_0", "count": 1, "us": 30.0}]
    assert s.kernel_us + s.copy_us + s.launch_gap_us + s.sync_gap_us == pytest.approx(s.traced_us)
