"""A definition is written once a page: a family's words and a sweep table's legend in the first
sweep that shows them, the same hot lines under the first step that has them, one footnote for
references failing the gate alike; and a prediction's claims about other ladders are listed where
they could be judged."""
import re
from pathlib import Path

from kernlog.render import steps, sweeps

from .helpers import kernel_page, scratch_repo

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def _bench(root, gpu_slug, gpu_name, points):
    import pandas as pd

    rows = [{"kernel": "softmax", "revision": rev, "shape": shape, "dtype": "fp32", "metric": "gbps", "value": v,
             "gpu": gpu_name, "copy_gbps": 3000.0, "matmul_tflops": 700.0} for rev, shape, v in points]
    path = root / "profiles" / gpu_slug / "softmax" / "bench.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)


def test_a_second_gpus_sweep_describes_only_families_the_first_did_not_and_shortens_its_legend(tmp_path):
    root = scratch_repo(tmp_path)
    _bench(root, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3",
           [("torch", "1x50257", 100.0), ("triton", "1x50257", 90.0)])
    _bench(root, "nvidia-h200", "NVIDIA H200", [("torch", "1x50257", 110.0), ("triton", "1x50257", 100.0),
                                                ("torch", "4096x32000", 2000.0), ("triton", "4096x32000", 2100.0)])
    page = kernel_page(root)
    first, second = page.split("### softmax sweep on NVIDIA H100")[1].split("### softmax sweep on NVIDIA H200")
    assert "- **decode**: " in first and "*best step* is the fastest rung" in first
    # decode was described above: named only for what is still unmeasured; vocab is new here
    assert "- **decode**: " not in second and "- **decode** (not measured yet: " in second
    assert "- **vocab**: " in second
    assert "*best step* is the fastest rung" not in second
    assert re.search(r"Columns as in the sweep above, with this GPU's wall-time band \(±[\d.]+%\)\. ", second)
    # the list ends before the table (a table glued to a list item is not a table)
    assert re.search(r"\n\n\| family \| dtype \| shape \|", second)
    # the copy is defined where a sweep first has one
    for rev, first_copy in (("copy", True), ("torch", False)):
        _bench(root, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3",
               [("torch", "1x50257", 100.0), ("triton", "1x50257", 90.0), (rev, "1x50257", 200.0)])
        _bench(root, "nvidia-h200", "NVIDIA H200",
               [("torch", "1x50257", 110.0), ("copy", "1x50257", 220.0)])
        page = kernel_page(root)
        first, second = page.split("### softmax sweep on NVIDIA H100")[1].split("### softmax sweep on NVIDIA H200")
        copy = "*copy*: a device-to-device copy"
        assert (copy in first, copy in second) == (first_copy, not first_copy), rev


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
    for page in sorted(REPORTS.glob("*.md")):
        text = page.read_text()
        blocks = re.findall(r"- \*\*Where its time goes in the code\*\* \(`([^`]+)`.*?\n  ```\w*\n(.*?)  ```", text,
                            re.S)
        seen = [code for _, code in blocks]
        assert len(seen) == len(set(seen)), page.name
        for line in re.findall(r"- \*\*Where its time goes in the code:\*\* `([^`]+)`, the line (\w+)'s", text):
            assert any(where == line[0] for where, _ in blocks), (page.name, line)
