"""The sweep's CSV: long format, merged so a partial re-run replaces only what it measured."""
import pandas as pd

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
