"""A profile and a sweep point of one revision, source and GPU that disagree beyond noise are
named under the arc table; agreeing ones, or ones of another source, are not."""
import pandas as pd

from kernlog.registry import load_kernel
from kernlog.render import arc, report

from .helpers import kernel_page, make_record, put, scratch_repo

NOTE = "Profile and sweep disagree beyond noise at 8192x4096 fp32"


def _bench(root, points):
    """bench.csv medians (revision, ms, source hash) at softmax's profile shape."""
    rows = [{"kernel": "softmax", "revision": rev, "shape": "8192x4096", "dtype": "fp32", "metric": metric,
             "value": v, "gpu": "NVIDIA H100 80GB HBM3", "copy_gbps": 3000.0, "matmul_tflops": 700.0,
             "source_sha256": sha}
            for rev, ms, sha in points for metric, v in (("gbps", 268.435456 / ms), ("median_ms", ms))]
    pd.DataFrame(rows).to_csv(root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv", index=False)


def test_a_planted_disagreement_is_flagged_and_an_agreeing_point_is_not(tmp_path):
    root = scratch_repo(tmp_path)
    torch, compiled = make_record("torch", median_ms=0.12), make_record("torch_compile", median_ms=0.09, seed=1)
    put(root, torch)
    put(root, compiled)
    kernel = load_kernel(root, "softmax")
    t_ms, c_ms = torch["metrics"]["wall_ms"], compiled["metrics"]["wall_ms"]
    # torch agrees (0.5% apart, inside the 3.5% default band); torch_compile is 10% slower in the sweep
    _bench(root, [("torch", t_ms * 1.005, torch["source_sha256"]), ("torch_compile", c_ms * 1.1,
                                                                     compiled["source_sha256"])])
    page = kernel_page(root)
    assert NOTE in page
    line = next(ln for ln in page.splitlines() if ln.startswith("- torch_compile: profiled"))
    assert line == (f"- torch_compile: profiled {c_ms * 1e3:.2f} us, swept {c_ms * 1.1e3:.2f} us, 9.09% apart, "
                    "beyond the ±3.50% band.")
    assert "- torch: profiled" not in page
    # a visible note, not a broken log: report --check has nothing against it
    sections = report.collect(root, [kernel])
    assert arc.contradictions(sections) == []
    # another source in the sweep: not the same measurement, not compared
    _bench(root, [("torch_compile", c_ms * 1.1, "0" * 64)])
    assert NOTE not in kernel_page(root)
    # a wider run-to-run spread measured at the point widens the band
    _bench(root, [("torch_compile", c_ms * 1.1, compiled["source_sha256"])])
    path = root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv"
    df = pd.read_csv(path)
    spread = df.iloc[[0]].assign(metric="run_spread", value=0.12)
    pd.concat([df, spread]).to_csv(path, index=False)
    assert NOTE not in kernel_page(root)


def test_no_sweep_no_note(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.12))
    assert "disagree" not in kernel_page(root)
