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


def test_another_shapes_ratio_whose_profile_the_sweep_timed_apart_is_marked(tmp_path):
    """In the other profiled shapes' table, a ratio one of whose two profiles the sweep measured
    apart beyond noise carries ≠, and the line under the table names both figures; an agreeing
    point, and a launch-bound one (its launch overhead moves between sessions), carry none."""
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.12))  # the headline ladder (softmax's profile shape)
    recs = {}
    for rev, ms, shape in (("v7_bf16_packed", 0.19, (1024, 131072)), ("torch", 0.21, (1024, 131072)),
                           ("v7_bf16_packed", 0.19, (2048, 131072)), ("torch", 0.21, (2048, 131072)),
                           ("v7_bf16_packed", 0.004, (8, 1024)), ("torch", 0.0045, (8, 1024))):
        recs[rev, shape] = rec = make_record(rev, median_ms=ms, shape=shape, dtype="bf16")
        put(root, rec)

    def swept(rev, shape, factor):
        rec = recs[rev, shape]
        return {"kernel": "softmax", "revision": rev, "shape": "x".join(map(str, shape)), "dtype": "bf16",
                "metric": "median_ms", "value": rec["metrics"]["wall_ms"] * factor, "gpu": "NVIDIA H100 80GB HBM3",
                "copy_gbps": 3000.0, "matmul_tflops": 700.0, "source_sha256": rec["source_sha256"]}

    rows = [swept("torch", (1024, 131072), 1.25), swept("v7_bf16_packed", (1024, 131072), 1.0),
            swept("torch", (2048, 131072), 1.01), swept("v7_bf16_packed", (2048, 131072), 1.0),
            swept("torch", (8, 1024), 1.3), swept("v7_bf16_packed", (8, 1024), 1.0)]
    pd.DataFrame(rows).to_csv(root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv", index=False)
    other = kernel_page(root).split("### Other profiled shapes")[1].split("###")[0]
    table = {ln.split("|")[1].strip(): ln for ln in other.splitlines() if ln.startswith("| ") and "bf16" in ln}
    assert table["1024x131072 bf16"].endswith("x torch≠ |")
    assert table["2048x131072 bf16"].endswith("x torch |") and "≠" not in table["8x1024 bf16"]
    t_us = recs["torch", (1024, 131072)]["metrics"]["wall_ms"] * 1e3
    assert f"1024x131072 bf16 torch profiled {t_us:.1f} us, swept {t_us * 1.25:.1f}" in other
    assert "2048x131072 bf16 torch profiled" not in other and "8x1024 bf16" not in other.split("≠ The sweep")[1]
