"""The sweep's CSV: long format, merged so a partial re-run replaces only what it measured."""
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from kernlog.capture import bench

from .helpers import GPU, kernel_page, scratch_repo
from .test_profiler import toy_picker  # noqa: F401 -- a fixture a test here takes


def _row(rev, shape, value):
    return {"kernel": "softmax", "revision": rev, "shape": shape, "dtype": "fp32", "metric": "gbps", "value": value}


def test_rerun_replaces_its_points_and_keeps_the_rest(tmp_path):
    root = scratch_repo(tmp_path)
    kernel = type("K", (), {"name": "softmax"})
    bench._write(root, GPU, kernel, [_row("v5_tuned", "4096x1024", 1.0), _row("torch", "4096x1024", 2.0),
                                     _row("torch", "65536", 5.0)])
    path = bench._write(root, GPU, kernel, [_row("v5_tuned", "4096x1024", 3.0)])
    df = pd.read_csv(path, dtype={"shape": str})
    got = {(r.revision, r.shape): r.value for r in df.itertuples()}
    assert got == {("v5_tuned", "4096x1024"): 3.0, ("torch", "4096x1024"): 2.0, ("torch", "65536"): 5.0}


def test_a_one_dimensional_kernel_s_shapes_stay_text_across_reruns(tmp_path):
    """vector_add's shapes are plain numbers ("65536"): read back as integers they would sort
    apart from the re-run's text shapes, and the file would change order on every re-run."""
    root = scratch_repo(tmp_path)
    kernel = type("K", (), {"name": "vector_add"})
    bench._write(root, GPU, kernel, [_row("v1_vec", "7", 1.0), _row("v1_vec", "1024", 2.0)])
    path = bench._write(root, GPU, kernel, [_row("v1_vec", "65536", 3.0)])
    assert [line.split(",")[2] for line in path.read_text().splitlines()[1:]] == ["1024", "65536", "7"]


def test_nothing_measured_writes_nothing(tmp_path):
    root = scratch_repo(tmp_path)
    path = bench._write(root, GPU, type("K", (), {"name": "softmax"}), [])
    assert not path.exists()


def _softmax_point(shape=(3, 50257), dtype="fp32"):
    import torch

    from kernlog.registry import find_root, load_kernel

    kernel = load_kernel(find_root(), "softmax")
    inputs = kernel.make_inputs(shape, dtype, torch.Generator().manual_seed(0), "cpu", "random")
    return kernel, inputs


def test_a_sweep_point_is_judged_by_the_gate_at_full_size():
    """bench.attempt: the float64 reference decides, element by element; a wrong output is
    never timed, whoever wrote it."""
    import dataclasses

    import torch

    kernel, inputs = _softmax_point()
    torch_rev = kernel.revision("torch")
    assert bench.attempt(kernel, torch_rev, torch_rev.load(), inputs, (3, 50257), "fp32") == ("ok", "")

    def last_columns_doubled(inp, out):  # right but for the row's last 8 of 50257: a localized error
        out.copy_(torch.softmax(inp[0], -1))
        out[:, -8:] *= 2
        return out

    mine = dataclasses.replace(torch_rev, name="mine", kind="triton", role="step")
    verdict, why = bench.attempt(kernel, mine, last_columns_doubled, inputs, (3, 50257), "fp32")
    assert verdict == "wrong" and "elements over" in why

    def unwritten(inp, out):
        return out

    assert bench.attempt(kernel, mine, unwritten, inputs, (3, 50257), "fp32")[0] == "wrong"


def test_a_declined_shape_is_refused_without_a_launch_and_a_raise_is_wrong():
    import dataclasses

    from kernlog.errors import Unsupported

    kernel, inputs = _softmax_point((2, 70000))
    launched = []

    def launch(inp, out):
        launched.append(1)
        raise RuntimeError("n = 70000 exceeds the recommended Triton blocksize = 65536")

    ref = dataclasses.replace(kernel.revision("torch"), name="liger",
                              refuses=lambda shape: "at most 65536 columns" if shape[-1] > 65536 else "")
    assert bench.attempt(kernel, ref, launch, inputs, (2, 70000), "fp32") == ("refused", "at most 65536 columns")
    assert not launched
    # a reference that raises on a shape it did not decline is wrong, not refused
    undeclared = dataclasses.replace(ref, refuses=None)
    verdict, why = bench.attempt(kernel, undeclared, launch, inputs, (2, 70000), "fp32")
    assert (verdict, launched) == ("wrong", [1]) and why.startswith("raised RuntimeError: n = 70000")

    def unsupported(inp, out):
        raise Unsupported("needs thread block clusters (compute capability 8.0)")

    assert bench.attempt(kernel, undeclared, unsupported, inputs, (2, 70000), "fp32") == (
        "refused", "needs thread block clusters (compute capability 8.0)")


def test_a_refused_point_shows_as_refused_with_its_reason(tmp_path):
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    rows = [dict(_row("torch", "16x1048576", 2000.0), **common),
            dict(_row("liger", "16x1048576", float("nan")), metric="refused",
                 note="Liger-Kernel takes rows of at most 65536 columns", **common),
            dict(_row("liger", "4096x50257", 2500.0), **common), dict(_row("torch", "4096x50257", 2400.0), **common),
            dict(_row("torch", "4096x50257", float("nan")), metric="fails_gate", note="3 of 9 elements over", **common)]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    assert "| long_rows | fp32 | 16x1048576 | – | – | – | torch |" in text  # liger refused it: not its best
    assert "| vocab | fp32 | 4096x50257 | – | – | – | liger |" in text
    assert ("‡ torch fails kernlog's gate at 4096x50257 fp32 (timed all the same: it is what a user runs): "
            "3 of 9 elements over.") in text
    assert "*refused* (liger): Liger-Kernel takes rows of at most 65536 columns." in text
    assert "**long_rows**" in text and "**vocab**" in text


def test_the_sweep_shows_a_same_size_copy_last_and_never_judges_it_stale(tmp_path):
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    today = kernel.revision("torch").sha256()
    # a hash on the copy row, and a revision no longer in the kernel that sorts after "copy"
    points = ((bench.COPY, 2750.0, "1" * 64), ("torch", 2200.0, today), ("v7_bf16_packed", 2700.0, "0" * 64),
              ("v9_gone", 100.0, "2" * 64))
    rows = [dict(_row(rev, "8192x4096", v), source_sha256=sha, gpu=GPU["name"], copy_gbps=3000.0, matmul_tflops=700.0)
            for rev, v, sha in points]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    # of copy over the same run's copy (2700 / 2750), the copy itself never marked stale
    assert "| fp32 | 8192x4096 | v7_bf16_packed† | 2700 | 1.23x | 98% | torch |" in text
    assert "*copy*: a device-to-device copy of as many bytes" in text
    assert ("† Measured on an older source: v7_bf16_packed at fp32 8192x4096 (marked where it is a step or "
            "reference the table shows): `kernlog bench softmax --rev v7_bf16_packed`") in text


@pytest.mark.gpu
def test_bench_repeat_records_each_points_run_to_run_spread(tmp_path):
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "vector_add")
    path = bench.bench(root, kernel, [kernel.revision("torch"), kernel.revision("triton")], [(1 << 20,)], ["fp32"],
                       budget_s=0.1, progress=lambda line: None, repeat=3)
    df = pd.read_csv(path, dtype={"shape": str})
    spread = df[df["metric"] == "run_spread"].set_index("revision")["value"]
    assert set(spread.index) == {"torch", "triton", bench.COPY} and (spread >= 0).all() and (spread < 1).all()


@pytest.mark.gpu
def test_bench_times_each_revision_and_a_same_size_copy_in_one_run(tmp_path):
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "vector_add")
    said = []
    path = bench.bench(root, kernel, [kernel.revision("torch"), kernel.revision("triton")], [(1 << 20,)], ["fp32"],
                       budget_s=0.05, progress=said.append)
    assert [line.split(" in ")[0] for line in said if "gate passed" in line] == ["torch: gate passed",
                                                                                 "triton: gate passed"], said
    df = pd.read_csv(path, dtype={"shape": str})
    gbps = df[df["metric"] == "gbps"].set_index("revision")["value"]
    assert set(gbps.index) == {"torch", "triton", bench.COPY} and (gbps > 0).all()
    copy = df[df["revision"] == bench.COPY]
    # no commit where the tree has no git (NaN, which no set of NaNs equals): compare as text
    assert copy["source_sha256"].isna().all() and set(copy["commit"].fillna("")) == set(df["commit"].fillna(""))


def test_the_csv_is_sorted_long_format_with_six_significant_digits_and_no_index(tmp_path):
    root = scratch_repo(tmp_path)
    kernel = type("K", (), {"name": "softmax"})
    bench._write(root, GPU, kernel, [_row("v5_tuned", "65536", 1.23456789), _row("torch", "4096x1024", 2.0)])
    path = bench._write(root, GPU, kernel, [_row("torch", "65536", 3.0)])
    assert path.read_text().splitlines() == [
        "kernel,revision,shape,dtype,metric,value",
        "softmax,torch,4096x1024,fp32,gbps,2",
        "softmax,torch,65536,fp32,gbps,3",
        "softmax,v5_tuned,65536,fp32,gbps,1.23457"]


def test_each_row_shows_the_best_step_and_the_counterpart_against_the_bars(tmp_path):
    """Issue 20's bars beside each row: the best step and the counterpart each against the best
    reference (a gap inside the wall-time band is a tie) and against the copy, where the tensor
    holds 64 MB or more."""
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    points = {"4096x50257": (("v7_bf16_packed", 1600.0), ("v5_tuned", 1500.0), ("triton", 2245.0),
                             ("torch", 2089.0), ("liger", 2000.0), (bench.COPY, 2983.0)),
              "1x50257": (("v7_bf16_packed", 60.0), ("triton", 59.8), ("torch", 60.0), (bench.COPY, 88.0))}
    rows = [dict(_row(rev, shape, v), **common) for shape, pts in points.items() for rev, v in pts]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    # 823 MB: both bars apply; v7 is the best step (v5 slower), torch the best reference
    assert "| v7_bf16_packed | 1600 | 0.77x ✗ | 54% ✗ | triton | 2245 | 1.07x | 75% ✗ | torch |" in text
    # 0.4 MB: no copy bar; triton 0.3% under torch is a tie
    assert "| v7_bf16_packed | 60 | 1.00x | 68% | triton | 60 | 1.00x | 68% | torch |" in text
    assert "1 of 2 points miss a bar." in text


def test_the_counterpart_cell_takes_the_fastest_counterpart_measured_there(tmp_path):
    """Two counterparts (triton, triton_peeled): each row's counterpart bar is the faster of the
    two measured at that point, and a point that measured only one shows that one."""
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    points = {"4096x50257": (("v7_bf16_packed", 1600.0), ("triton", 2245.0), ("triton_peeled", 2900.0),
                             ("torch", 2089.0), (bench.COPY, 2983.0)),
              "4096x32000": (("v7_bf16_packed", 1600.0), ("triton", 2500.0), ("torch", 2089.0),
                             (bench.COPY, 2983.0))}
    rows = [dict(_row(rev, shape, v), **common) for shape, pts in points.items() for rev, v in pts]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    assert "| triton_peeled | 2900 | 1.39x | 97% | torch |" in text
    assert "| triton | 2500 | 1.20x |" in text


def test_interleaved_runs_rotate_the_order_and_time_each_revision_once_per_run():
    order = []

    def sample(fn):
        order.append(fn())
        return [1.0]

    runs = bench.interleaved({"a": lambda: "a", "b": lambda: "b", "copy": lambda: "copy"}, 3, sample)
    assert order == ["a", "b", "copy", "b", "copy", "a", "copy", "a", "b"]
    assert {k: len(v) for k, v in runs.items()} == {"a": 3, "b": 3, "copy": 3}
    assert bench.interleaved({}, 3, sample) == {}


def test_a_point_of_several_runs_is_the_median_of_their_medians_with_their_spread():
    s = bench.combine([[1.0, 1.0, 9.0], [1.1, 1.1, 1.1], [1.2, 0.1, 1.2]])
    assert s["median_ms"] == 1.1 and s["runs"] == 3 and s["n"] == 9
    assert s["run_spread"] == pytest.approx((1.2 - 1.0) / 1.1)
    one = bench.combine([[2.0, 4.0, 3.0]])
    assert (one["median_ms"], one["run_spread"], one["runs"]) == (3.0, 0.0, 1)
    # one long run does not outvote two short ones: the median of medians, not of all samples
    assert bench.combine([[1.0] * 5, [2.0], [3.0]])["median_ms"] == 2.0
    assert bench.combine([[0.0], [0.0]])["run_spread"] == 0.0  # an all-zero point divides by nothing


def test_a_gap_inside_the_measured_run_to_run_spread_is_a_tie(tmp_path):
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    rows = [dict(_row("v8_split", "8x128256", 900.0), **common), dict(_row("torch", "8x128256", 1000.0), **common),
            dict(_row("v8_split", "4x1048576", 900.0), **common), dict(_row("torch", "4x1048576", 1000.0), **common),
            # 12% run-to-run spread measured for torch at the first point only
            dict(_row("torch", "8x128256", 0.12), metric="run_spread", **common)]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    assert "| v8_split | 900 | 0.90x | torch |" in text  # 10% slower, inside the 12% spread: a tie
    assert "| v8_split | 900 | 0.90x ✗ | torch |" in text  # the same gap with no spread measured: a miss


def test_a_ratio_of_two_runs_is_marked_with_the_run_that_would_time_it_side_by_side(tmp_path):
    """`kernlog bench --rev` merges one run into bench.csv: a ratio whose step and reference (or
    copy) come from different runs carries their drift, and the log says so with the command."""
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    rows = [dict(_row("v8_split", "8x128256", 900.0), run="r1", **common),
            dict(_row("copy", "8x128256", 1000.0), run="r1", **common),
            dict(_row("torch", "8x128256", 1000.0), run="r2", **common),  # a later run of the reference alone
            dict(_row("v8_split", "4x1048576", 990.0), run="r1", **common),
            dict(_row("torch", "4x1048576", 1000.0), run="r1", **common),
            dict(_row("copy", "4x1048576", 1000.0), run="r2", **common),  # the copy of another run
            dict(_row("v4_vectorized", "4x1048576", 500.0), run="r3", **common),  # in no marked ratio
            dict(_row("v5_tuned", "2048x32768", 500.0), run="r3", **common),  # at no marked point
            dict(_row("torch", "2048x32768", 500.0), run="r3", **common)]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    assert "| v8_split | 900 | 0.90x§<!--xrun--> ✗ | 90% |" in text  # step and copy of r1, torch of r2
    assert "| v8_split | 990 | 0.99x | 99%§<!--xrun--> |" in text  # step and torch of r1, copy of r2
    # every revision timed at the two points, so the run leaves no ratio there across runs
    assert ("(2 points). One run times them together: `kernlog bench softmax --rev v4_vectorized --rev v8_split "
            "--rev torch --shape 8x128256 --shape 4x1048576 --dtype fp32 --repeat 3`") in text


def test_a_kernel_s_own_speed_bar_names_its_reference_and_its_ratio_per_shape(tmp_path):
    """matmul_relu's bar: 0.95x of the faster of relu(A@B) eager and torch.compile; 1.0x on
    squares from 2048 up."""
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "matmul_relu")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    points = {"256x256x65536": (("v2_split_k", 193.0), ("torch", 150.0), ("torch_compile", 199.0)),
              "512x512x16384": (("v2_split_k", 249.0), ("torch", 279.0)),
              "4096x4096x4096": (("v2_split_k", 686.0), ("torch", 730.0))}
    rows = [dict(_row(rev, shape, v), kernel="matmul_relu", dtype="bf16", metric="tflops", **common)
            for shape, pts in points.items() for rev, v in pts]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    assert "| v2_split_k | 193 | 0.97x (bar 0.95x) | torch_compile |" in text  # compile's 199, not eager's 150
    assert "| v2_split_k | 249 | 0.89x (bar 0.95x) ✗ |" in text
    assert "| v2_split_k | 686 | 0.94x ✗ |" in text  # a square of 4096: the bar is 1.0x
    assert "| x faster of relu(A@B), compile |" in text and "2 of 3 points miss a bar." in text


def test_a_speed_bar_naming_no_revision_of_the_kernel_is_refused():
    from kernlog.registry import load_kernel
    from kernlog.spec import SpeedBar

    k = load_kernel(Path(__file__).resolve().parents[1], "matmul_relu")
    with pytest.raises(ValueError, match="the speed bar names 'cublas'"):
        dataclasses.replace(k, speed_bar=SpeedBar(against=("cublas",)))


def test_the_whole_sweep_on_the_cpu_marks_refusals_wrong_references_and_left_out_revisions(
        tmp_path, monkeypatch, own_kernels_package):
    """bench() end to end with a toy kernel on the CPU (the sweep's loop is otherwise reached
    on the GPU alone): a wrong revision is left out, a declined shape is a REFUSED row, a
    reference wrong at full size is timed and marked FAILS_GATE, a revision the machine cannot
    run is skipped with one line; each point's rows carry the run's stamp."""
    import re

    from kernlog.errors import GateFailure, Unsupported
    from kernlog.registry import load_kernel

    from .test_profiler import _cpu_bench, _toy_repo

    root = _toy_repo(tmp_path)
    _cpu_bench(monkeypatch)
    kernel = load_kernel(root, "toy")
    ref = kernel.revision("ref")

    def off_at_full_size():
        def launch(inputs, out):
            out.copy_(inputs[0] * 2 + (1.0 if out.shape[0] > 8 else 0.0))  # gated at 3x5 and 7x33
            return out
        return launch

    def not_here():
        raise Unsupported("needs a GPU feature this one lacks")

    revs = [kernel.revision("right"), kernel.revision("one_bad_row"), kernel.revision("declines"), ref,
            dataclasses.replace(ref, name="ref_off", load=off_at_full_size),
            dataclasses.replace(ref, name="unsupported", load=not_here)]
    said = []
    with pytest.raises(GateFailure, match="one_bad_row"):
        bench.bench(root, kernel, revs, [(9, 33)], ["fp32"], budget_s=0.01, progress=said.append, repeat=3)
    df = pd.read_csv(root / "profiles" / GPU["slug"] / "toy" / "bench.csv", dtype={"shape": str})
    metrics = {rev: set(g["metric"]) for rev, g in df.groupby("revision")}
    timed = {"median_ms", "p05_ms", "p95_ms", "gbps", "run_spread"}
    assert metrics["right"] == timed and metrics[bench.COPY] == timed
    assert metrics["declines"] == {bench.REFUSED} and metrics["ref_off"] == timed | {bench.FAILS_GATE}
    assert "one_bad_row" not in metrics and "unsupported" not in metrics
    marked = df[(df["revision"] == "ref_off") & (df["metric"] == bench.FAILS_GATE)]
    assert marked["note"].str.contains("FAIL|rel|err", case=False).all()
    assert df.loc[df["revision"] == "declines", "note"].tolist() == ["too big"]
    assert df["run"].nunique() == 1 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", df["run"].iloc[0])
    right = df[df["revision"] == "right"].set_index("metric")["value"]
    assert right["median_ms"] == pytest.approx(0.1) and right["run_spread"] == 0.0
    assert right["gbps"] == pytest.approx(8 * 9 * 33 / 0.1 / 1e6)
    assert "unsupported: skipped: needs a GPU feature this one lacks" in said
    assert any(s.startswith("ref_off 9x33 fp32: fails the gate at full size (a reference") for s in said), said
    assert any("declines" in s and "refused: too big" in s for s in said), said


def test_bench_refuses_a_revision_wrong_in_a_dtype_it_does_not_sweep(tmp_path, monkeypatch, own_kernels_package):
    """bench of fp32 gates every declared dtype first: a revision wrong in bf16 alone is left out
    of the sweep with its failing case named, and no row of it is stored."""
    from kernlog.errors import GateFailure
    from kernlog.registry import load_kernel

    from .test_profiler import _cpu_bench, _toy_repo

    root = _toy_repo(tmp_path)
    _cpu_bench(monkeypatch)
    kernel = load_kernel(root, "toy")
    said = []
    with pytest.raises(GateFailure, match="bf16_wrong"):
        bench.bench(root, kernel, [kernel.revision("right"), kernel.revision("bf16_wrong")], [(7, 33)], ["fp32"],
                    budget_s=0.01, progress=said.append)
    df = pd.read_csv(root / "profiles" / GPU["slug"] / "toy" / "bench.csv", dtype={"shape": str})
    assert "bf16_wrong" not in set(df["revision"]) and "right" in set(df["revision"])
    assert any(s.startswith("bf16_wrong: FAILED the gate") and " bf16 " in s for s in said), said
    from kernlog.store import gates

    kept = gates.load(root, GPU["slug"], "toy")  # each gate's outcome kept for this GPU
    assert kept["bf16_wrong"]["passed"] is False and kept["right"]["passed"] is True
    assert kept["bf16_wrong"]["source_sha256"] == kernel.revision("bf16_wrong").sha256()


def test_bench_gates_side_by_side_in_processes_of_their_own_as_profile_does(tmp_path, monkeypatch,
                                                                            own_kernels_package):
    """With more than one gate worker, bench gates each revision in a process of its own
    (gated.side_by_side, the function profile gates through): a pass is swept and kept with its
    key and check, a failure in a dtype it does not sweep still leaves it out, by name and case."""
    from kernlog.capture import gated
    from kernlog.errors import GateFailure
    from kernlog.registry import load_kernel
    from kernlog.store import gates

    from .test_profiler import _cpu_bench, _toy_repo

    root = _toy_repo(tmp_path)
    _cpu_bench(monkeypatch)
    apart = []
    real = gated.side_by_side
    monkeypatch.setattr(bench.gated, "side_by_side",
                        lambda root, kernel, revs, workers, *a, **k: apart.append(([r.name for r in revs], workers))
                        or real(root, kernel, revs, workers, *a, **k))
    kernel = load_kernel(root, "toy")
    said = []
    with pytest.raises(GateFailure, match="bf16_wrong"):
        bench.bench(root, kernel, [kernel.revision("right"), kernel.revision("bf16_wrong")], [(7, 33)], ["fp32"],
                    budget_s=0.01, progress=said.append, workers=2)
    assert apart == [(["right", "bf16_wrong"], 2)]
    assert "right: gate passed" in " ".join(said) and any(s.endswith("(its own process)") for s in said), said
    assert any(s.startswith("bf16_wrong: FAILED the gate") and " bf16 " in s for s in said), said
    assert not any("correctness gate at the check shapes" in s for s in said), said  # none gated in this process
    df = pd.read_csv(root / "profiles" / GPU["slug"] / "toy" / "bench.csv", dtype={"shape": str})
    assert set(df["revision"]) == {"right", bench.COPY}
    kept = gates.load(root, GPU["slug"], "toy")
    assert kept["right"]["passed"] is True and kept["right"]["check"]["cases"] > 0 and kept["right"]["key"]
    assert kept["bf16_wrong"]["passed"] is False


def test_bench_sweeps_the_kernel_s_sweep_dtypes_unless_told(monkeypatch):
    """With no --dtype, `kernlog bench attention` sweeps bf16 alone (its sweep_dtypes: the dtype its
    tables and bar judge), a kernel without sweep_dtypes every dtype it declares; --dtype wins."""
    from click.testing import CliRunner

    from kernlog.commands.main import main

    asked = []
    monkeypatch.setattr(bench, "bench", lambda root, kernel, revs, shapes, dtypes, *a, **k:
                        asked.append((kernel.name, dtypes)) or Path(root) / "x")
    root = str(Path(__file__).resolve().parents[1])
    for args in (["attention"], ["softmax"], ["attention", "--dtype", "fp32"]):
        result = CliRunner().invoke(main, ["--root", root, "bench", *args])
        assert result.exit_code == 0, result.output
    assert asked == [("attention", ["bf16"]), ("softmax", ["fp32", "bf16"]), ("attention", ["fp32"])]


def test_a_sweep_dtype_the_kernel_does_not_declare_is_refused():
    from kernlog.registry import load_kernel

    k = load_kernel(Path(__file__).resolve().parents[1], "attention")
    with pytest.raises(ValueError, match="sweep_dtypes names 'fp16'"):
        dataclasses.replace(k, sweep_dtypes=("fp16",))


def test_the_front_page_line_takes_the_first_dtype_the_sweep_has():
    """A kernel whose steps were swept only in its second dtype (attention: bf16 only) still gets
    its front-page figures, from that dtype, not dashes; a reference swept in the first does not count."""
    import tempfile
    from pathlib import Path

    from kernlog.registry import load_kernel
    from kernlog.render import report

    with tempfile.TemporaryDirectory() as tmp:
        root = scratch_repo(Path(tmp))
        kernel = load_kernel(root, "softmax")
        assert kernel.dtypes[0] == "fp32"
        common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
        rows = [dict(_row(rev, "8192x4096", v), dtype="bf16", **common)
                for rev, v in (("v0_naive", 200.0), ("v5_tuned", 2800.0), ("torch", 2000.0))]
        rows.append(dict(_row("torch", "8192x4096", 1900.0), **common))  # fp32: a reference alone
        bench._write(root, GPU, kernel, rows)
        (section,) = report.collect(root, [kernel])
    front = section["front"]
    assert front["dtype"] == "bf16" and front["point"]["best"] == "v5_tuned"
    assert front["point"]["vs_naive"] == 14.0
    assert front["point"]["gpu"] == GPU["name"]  # the front line names the GPU of its sweep


@pytest.mark.usefixtures("toy_picker")
def test_a_point_keeps_the_configs_its_revision_picked_there(tmp_path, monkeypatch, own_kernels_package):
    """A revision that picks its launch config per shape (kernlog.tuning) has the pick it timed
    at each point written beside that point's median, so a sweep says which config it measured."""
    from kernlog.registry import load_kernel

    from .test_profiler import _cpu_bench, _toy_repo

    root = _toy_repo(tmp_path)
    _cpu_bench(monkeypatch)
    kernel = load_kernel(root, "toy")
    bench.bench(root, kernel, [kernel.revision("picky"), kernel.revision("right")], [(9, 33), (5, 33)], ["fp32"],
                budget_s=0.01, progress=lambda s: None)
    df = pd.read_csv(root / "profiles" / GPU["slug"] / "toy" / "bench.csv", dtype={"shape": str})
    med = df[df["metric"] == "median_ms"].set_index(["revision", "shape"])["note"]
    assert med[("picky", "9x33")] == "picked 'picky'|9|33: 'c'" and med[("picky", "5x33")] == "picked 'picky'|5|33: 'c'"
    assert pd.isna(med[("right", "9x33")])  # nothing picked, nothing said


def test_profile_takes_the_dtype_the_page_heads_its_arc_in_unless_told():
    """attention declares fp32 first (the interpreter's exact check) and sweeps bf16: `kernlog profile
    attention` with no --dtype profiles bf16, the ladder its page shows; softmax, with no sweep_dtypes,
    its first dtype; --dtype wins."""
    from kernlog.capture import profiler
    from kernlog.capture.options import Options
    from kernlog.errors import KernlogError
    from kernlog.registry import load_kernel

    root = Path(__file__).resolve().parents[1]
    att, sm = load_kernel(root, "attention"), load_kernel(root, "softmax")
    assert att.dtypes[0] == "fp32" and att.profile_dtype == "bf16"
    assert profiler._shape_dtype(att, Options())[1] == "bf16"
    assert profiler._shape_dtype(sm, Options())[1] == sm.dtypes[0] == "fp32"
    assert profiler._shape_dtype(att, Options(dtype="fp32"))[1] == "fp32"
    with pytest.raises(KernlogError, match="attention has no fp16 inputs; dtypes: fp32, bf16"):
        profiler._shape_dtype(att, Options(dtype="fp16"))  # one message for every command (Kernel.dtype_or_default)


def test_each_point_stores_the_sm_clock_its_revision_ran_at_and_says_a_throttled_one(
        tmp_path, monkeypatch, own_kernels_package):
    """A sweep point's rows carry the median SM clock NVML read while that revision's own batches ran (not its
    neighbours'), and a revision timed more than the wall-time band under the GPU's highest clock gets the profile's
    throttle line: at the LM heads one kernel timed 8% apart from itself in one sweep, and only the clock can say
    whether that was the GPU."""
    from kernlog.registry import load_kernel

    from .test_profiler import FakeTimer, _cpu_bench, _toy_repo

    class FakeClocks:
        def __init__(self):
            self.sm, self.sm_max = [], 1980.0

    seen: dict = {}

    class ClockTimer(FakeTimer):
        def samples(self, fn, **kw):  # the first revision timed runs at the boost clock, every later one throttled
            self.clocks.sm += [1980.0 if seen.setdefault(fn, len(seen)) == 0 else 1500.0] * 3
            return super().samples(fn, **kw)

    root = _toy_repo(tmp_path)
    _cpu_bench(monkeypatch)
    monkeypatch.setattr(bench.timing, "Timer", ClockTimer)
    monkeypatch.setattr(bench, "Clocks", FakeClocks)
    kernel = load_kernel(root, "toy")
    said = []
    bench.bench(root, kernel, [kernel.revision("right"), kernel.revision("ref")], [(9, 33)], ["fp32"],
                budget_s=0.01, progress=said.append, repeat=3)
    df = pd.read_csv(root / "profiles" / GPU["slug"] / "toy" / "bench.csv", dtype={"shape": str})
    sm = df[df["metric"] == bench.SM_MHZ].set_index("revision")["value"]
    assert sm.to_dict() == {"right": 1980.0, "ref": 1500.0, bench.COPY: 1500.0}
    slow = [s for s in said if "throttled" in s]
    assert [s.split(":")[0] for s in slow] == ["  ref", f"  {bench.COPY}"], said
    assert "timed at an SM clock of 1500 MHz, 24% under this GPU's 1980" in slow[0]


def test_a_ratio_of_two_figures_timed_at_clocks_apart_is_marked_with_both_clocks(tmp_path):
    """Where bench.csv holds each revision's SM clock at a point, a best step and best reference timed at clocks
    further apart than the wall-time band carry ‖, and the legend names the point and both clocks; clocks inside
    the band carry nothing."""
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "softmax")
    common = {"gpu": GPU["name"], "copy_gbps": 3000.0, "matmul_tflops": 700.0}
    rows = [dict(_row("v8_split", "8x128256", 990.0), **common), dict(_row("torch", "8x128256", 1000.0), **common),
            dict(_row("v8_split", "8x128256", 1530.0), metric="sm_mhz", **common),
            dict(_row("torch", "8x128256", 1980.0), metric="sm_mhz", **common),
            dict(_row("v8_split", "4x1048576", 980.0), **common), dict(_row("torch", "4x1048576", 1000.0), **common),
            dict(_row("v8_split", "4x1048576", 1965.0), metric="sm_mhz", **common),  # inside the band
            dict(_row("torch", "4x1048576", 1980.0), metric="sm_mhz", **common)]
    bench._write(root, GPU, kernel, rows)
    text = kernel_page(root, kernel.name)
    assert "| v8_split | 990 | 0.99x‖ | torch |" in text
    assert "| v8_split | 980 | 0.98x | torch |" in text  # 1965 and 1980 MHz: inside the band
    assert ("‖ The ratio's two figures were timed at SM clocks further apart than the GPU's wall-time band "
            "(fp32 8x128256: 1530 and 1980 MHz): part of that ratio is the clock, not the code.") in text
