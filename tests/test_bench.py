"""The sweep's CSV: long format, merged so a partial re-run replaces only what it measured."""
import pandas as pd
import pytest

from kernlog import bench

from .helpers import GPU, scratch_repo


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


def test_nothing_measured_writes_nothing(tmp_path):
    root = scratch_repo(tmp_path)
    path = bench._write(root, GPU, type("K", (), {"name": "softmax"}), [])
    assert not path.exists()


def test_agreement_rejects_unwritten_elements_and_measures_distance():
    import torch

    ref = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    assert bench.agree(ref.clone(), ref) == 0.0
    assert bench.agree(torch.tensor([1.0, float("nan"), 0.0, 4.0]), ref) == float("inf")
    assert abs(bench.agree(torch.tensor([1.0, 2.0, 0.0, 4.4]), ref) - 0.4 / 21 ** 0.5) < 1e-6


def test_the_sweep_shows_a_same_size_copy_last_and_never_judges_it_stale(tmp_path):
    from kernlog import report
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
    text = report.render(root, [kernel])
    assert "| dtype | shape | v7_bf16_packed | torch | v9_gone | copy |" in text
    assert "| fp32 | 8192x4096 | 2700† | 2200 | 100 | 2750 |" in text
    assert "*copy*: a device-to-device copy of as many bytes" in text
    assert "† Measured on an older source of v7_bf16_packed: `kernlog bench softmax --rev v7_bf16_packed`" in text


@pytest.mark.gpu
def test_bench_times_each_revision_and_a_same_size_copy_in_one_run(tmp_path):
    from kernlog.registry import load_kernel

    root = scratch_repo(tmp_path)
    kernel = load_kernel(root, "vector_add")
    path = bench.bench(root, kernel, [kernel.revision("torch"), kernel.revision("triton")], [(1 << 20,)], ["fp32"],
                       budget_s=0.05, progress=lambda line: None)
    df = pd.read_csv(path, dtype={"shape": str})
    gbps = df[df["metric"] == "gbps"].set_index("revision")["value"]
    assert set(gbps.index) == {"torch", "triton", bench.COPY} and (gbps > 0).all()
    copy = df[df["revision"] == bench.COPY]
    # no commit where the tree has no git (NaN, which no set of NaNs equals): compare as text
    assert copy["source_sha256"].isna().all() and set(copy["commit"].fillna("")) == set(df["commit"].fillna(""))


def test_agreement_is_relative_to_the_reference_norm_however_small():
    import torch

    ref = torch.tensor([3e-6, 4e-6])  # norm 5e-6: a softmax row of 131072 averages 7.6e-6
    assert bench.agree(torch.tensor([3e-6, 4.5e-6]), ref) == pytest.approx(0.1, rel=1e-5)
    assert bench.agree(torch.zeros(2), torch.zeros(2)) == 0.0  # an all-zero reference divides by no zero


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
