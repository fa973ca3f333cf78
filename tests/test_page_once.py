"""A page says a thing once and stays readable as GPUs are added: each GPU after the first has its
sweep on a page of its own, the same hot lines are printed under the first step that has them,
references failing the gate alike share one footnote, and a prediction's claims about other
ladders are listed where they could be judged."""
import re
from pathlib import Path

import pytest

from kernlog.errors import KernlogError
from kernlog.render import steps, sweeps

from .helpers import scratch_repo

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def _bench(root, gpu_slug, gpu_name, points):
    import pandas as pd

    rows = [{"kernel": "softmax", "revision": rev, "shape": shape, "dtype": "fp32", "metric": "gbps", "value": v,
             "gpu": gpu_name, "copy_gbps": 3000.0, "matmul_tflops": 700.0} for rev, shape, v in points]
    path = root / "profiles" / gpu_slug / "softmax" / "bench.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)


def test_a_second_gpus_sweep_has_a_page_of_its_own_with_every_definition_and_goes_with_its_sweep(tmp_path):
    from kernlog.registry import load_kernel
    from kernlog.render import limits, paths, report

    root = scratch_repo(tmp_path)
    _bench(root, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3",
           [("torch", "1x50257", 100.0), ("triton", "1x50257", 90.0)])
    _bench(root, "nvidia-h200", "NVIDIA H200", [("torch", "1x50257", 110.0), ("triton", "1x50257", 100.0),
                                                ("copy", "1x50257", 220.0)])
    sections = report.collect(root, [load_kernel(root, "softmax")])
    pages = report.pages(root, sections)
    page, other = pages["reports/softmax.md"], pages["reports/softmax_sweep_nvidia-h200.md"]
    # the kernel page: the first GPU's sweep in full, the other's as a line linking its page
    assert "### softmax sweep on NVIDIA H100 80GB HBM3 (" in page and "- **decode**: " in page
    assert ("**The sweep on NVIDIA H200** is on a page of its own: [softmax_sweep_nvidia-h200.md]"
            "(softmax_sweep_nvidia-h200.md), 1 point, 1 missing a bar.") in page
    assert "| decode | fp32 | 1x50257 |" in page and page.count("| decode | fp32 | 1x50257 |") == 1
    # its own page stands alone: back link, the families' words, the legend, the copy
    assert other.startswith(report.SWEEP_PAGE.split("\n")[0]) and "[softmax's page](softmax.md)" in other
    for part in ("- **decode**: ", "*best step* is the fastest rung", "*copy*: a device-to-device copy",
                 "| decode | fp32 | 1x50257 |", "![softmax sweep on NVIDIA H200](softmax_sweep_nvidia-h200.svg)"):
        assert part in other, part
    # report writes it, --check reads it (it is published: the page rules apply), and removes it with its sweep
    report.plot_all(root, sections)
    (root / "KERNEL_LOG.md").write_text(report.render(root, [load_kernel(root, "softmax")], sections))
    assert "reports/softmax_sweep_nvidia-h200.md" in paths.published(root)
    assert not [v for v in limits.violations(root) if "sweep_nvidia-h200.md" in str(v)]
    (root / "profiles" / "nvidia-h200" / "softmax" / "bench.csv").unlink()
    sections = report.collect(root, [load_kernel(root, "softmax")])
    assert report.orphan_pages(root, sections) == [("reports/softmax_sweep_nvidia-h200.md", True)]
    assert any(line.startswith("reports/softmax_sweep_nvidia-h200.md is a sweep page no sweep is kept apart on")
               for line in report.out_of_date(root, sections))
    report.plot_all(root, sections)
    assert not (root / "reports" / "softmax_sweep_nvidia-h200.md").exists()


def test_references_failing_the_gate_alike_at_a_point_share_one_footnote():
    rows = [{"shape": "2047x2049x2048", "dtype": "bf16", "fails_gate": {"torch_compile": "3 bad", "torch": "3 bad"}},
            {"shape": "8x8", "dtype": "bf16", "fails_gate": {"torch": "1 bad", "liger": "2 bad"}}]
    rank = {"torch": 0, "torch_compile": 1, "liger": 2}.get
    assert sweeps._gate_failures(rows, rank) == [("torch and torch_compile", "2047x2049x2048", "bf16", "3 bad"),
                                                 ("torch", "8x8", "bf16", "1 bad"), ("liger", "8x8", "bf16", "2 bad")]


def test_claims_about_another_ladder_are_listed_where_they_could_be_judged():
    def judged(value):
        return {"claims": [{"text": "speedup >= 1.1", "value": value, "ok": None if value is None else value >= 1.1,
                            "tie": False, "why": "no earlier step profiled here"}]}

    class Rec:
        predicts = "faster"

    here = {"rec": Rec(), "judged": judged(1.2)}
    pred = steps._prediction(here, [("A on GPU-2", {"judged": judged(None)}), ("B on GPU-2", {"judged": judged(1.0)})])
    assert pred["claims"] == ["speedup >= 1.1: 1.2 (met)", "speedup >= 1.1 at B on GPU-2: 1 (missed)"]
    # on the ladder's own shape an unmeasured claim is still said, with why
    alone = steps._prediction({"rec": Rec(), "judged": judged(None)})
    assert alone["claims"] == ["speedup >= 1.1: not measured (no earlier step profiled here)"]


def test_no_page_prints_the_same_hot_lines_twice():
    """matmul_relu's cu5 and cu6 are hot on the same line of the header they share: printed once,
    under cu5, and named under cu6 (the page rendered afresh from the stored profiles)."""
    from kernlog.registry import load_kernel
    from kernlog.render import report

    root = REPORTS.parent
    text = report.pages(root, report.collect(root, [load_kernel(root, "matmul_relu")], histories=False))[
        "reports/matmul_relu.md"]
    blocks = re.findall(r"- \*\*Where its time goes in the code\*\* \(`([^`]+)`.*?\n  ```\w*\n(.*?)  ```", text, re.S)
    assert blocks and len({code for _, code in blocks}) == len(blocks)
    named = re.findall(r"- \*\*Where its time goes in the code:\*\* `([^`]+)`, the line (\w+)'s section shows", text)
    assert ("kernels/matmul_relu/cuda/mm_mma.cuh:36", "cu5_mma") in named
    assert all(any(where == w for w, _ in blocks) for where, _ in named)


def test_the_primary_gpus_sweep_stays_on_the_kernel_page_and_a_sweep_page_fills_its_figures(tmp_path, monkeypatch):
    """An A100 swept later sorts before the H100, yet [tool.kernlog] primary_gpu keeps the H100's sweep
    on the page (prose there speaks of it); a figure marker written on a sweep page is filled."""
    from kernlog.registry import load_kernel
    from kernlog.render import report

    root = scratch_repo(tmp_path)
    _bench(root, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", [("torch", "1x50257", 100.0)])
    _bench(root, "nvidia-a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", [("torch", "1x50257", 50.0)])
    text = (root / "pyproject.toml").read_text() if (root / "pyproject.toml").exists() else ""
    if "primary_gpu" not in text:
        (root / "pyproject.toml").write_text(text + '\n[tool.kernlog]\nprimary_gpu = "nvidia-h100-80gb-hbm3"\n')
    sections = report.collect(root, [load_kernel(root, "softmax")])
    pages = report.pages(root, sections)
    assert "### softmax sweep on NVIDIA H100 80GB HBM3 (" in pages["reports/softmax.md"]
    assert "reports/softmax_sweep_nvidia-a100-sxm4-80gb.md" in pages
    # a marker on the sweep page is read as on any page: one naming no profile is an error
    page = root / "reports" / "softmax_sweep_nvidia-a100-sxm4-80gb.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(pages["reports/softmax_sweep_nvidia-a100-sxm4-80gb.md"]
                    + "\nSee <!--fig softmax/torch@1x1.fp32 us .1f-->9.9<!--/fig--> us.\n")
    with pytest.raises(KernlogError):
        report.pages(root, sections)


@pytest.mark.parametrize("reports", [".", "perf", "docs/perf"])
def test_a_sweep_page_is_published_wherever_the_reports_folder_is(tmp_path, reports):
    from kernlog.render import paths

    (tmp_path / "pyproject.toml").write_text(f'[tool.kernlog]\nreports = "{reports}"\n')
    folder = tmp_path / reports
    folder.mkdir(parents=True, exist_ok=True)
    log = paths.of(tmp_path).log
    (tmp_path / log).write_text(f"[softmax]({paths.Paths.link(paths.of(tmp_path).page('softmax'), log)})\n")
    (folder / "softmax.md").write_text("[its H200 sweep](softmax_sweep_nvidia-h200.md), [notes](../x/notes.md)\n")
    (folder / "softmax_sweep_nvidia-h200.md").write_text("the sweep\n")
    got = paths.published(tmp_path)
    assert paths.of(tmp_path).under_reports("softmax_sweep_nvidia-h200.md") in got
    assert not any(rel.endswith("notes.md") for rel in got)  # outside the reports folder: not followed


def test_the_across_gpus_table_sits_on_the_second_gpus_sweep_page_and_the_kernel_page_links_it(tmp_path):
    """Each revision's time on each GPU is about the second GPU: where that GPU's sweep has a page of
    its own, the table is there, once, and the kernel page keeps a line that links it."""
    from kernlog.registry import load_kernel
    from kernlog.render import report

    from .helpers import make_record, put

    root = scratch_repo(tmp_path)
    for slug, name, ms in (("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", 0.12), ("nvidia-h200", "NVIDIA H200",
                                                                                      0.09)):
        rec = make_record("torch", median_ms=ms)
        rec["gpu"] = dict(rec["gpu"], slug=slug, name=name)
        put(root, rec)
    _bench(root, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", [("torch", "1x50257", 100.0)])
    _bench(root, "nvidia-h200", "NVIDIA H200", [("torch", "1x50257", 110.0), ("copy", "1x50257", 220.0)])
    pages = report.pages(root, report.collect(root, [load_kernel(root, "softmax")]))
    page, other = pages["reports/softmax.md"], pages["reports/softmax_sweep_nvidia-h200.md"]
    assert "## Across GPUs" in other and other.count("| torch | 8192x4096 fp32 |") == 1
    assert "| revision | at | NVIDIA H100 80GB HBM3 us | NVIDIA H200 us | speed |" in other
    assert "### Across GPUs" not in page and "| torch | 8192x4096 fp32 | 120" not in page
    assert ("**Across GPUs**, each revision's time on each GPU at the shapes profiled on more than one: on "
            "[softmax_sweep_nvidia-h200.md](softmax_sweep_nvidia-h200.md).") in page


def test_an_arc_after_the_first_leaves_each_step_s_change_to_its_section():
    """The first arc's table holds each step's change; a later arc's does not repeat it."""
    from kernlog.render.report import _env

    macro = _env().get_template("arc_table.md.j2").module.arc_table
    lad = {"arc_rows": [{"revision": "v1", "role": "step", "change": "THE CHANGE", "us": 1.0, "rate": 2.0, "pct": None,
                         "roof": None, "excess": None, "verdict": None, "speedup": None, "vs_ref": None,
                         "best_ref": None, "imported": False, "stale": False, "fails_gate": False,
                         "launch_bound": False, "pct_apart": False}]}
    first, later = str(macro(lad, False)), str(macro(lad, False, False))
    assert "THE CHANGE" in first and "| step | change | time (us) |" in first
    assert "THE CHANGE" not in later and later.splitlines()[0].startswith("| step | time (us) |")
    assert all(line.count("|") == later.splitlines()[0].count("|") for line in later.splitlines() if line)
