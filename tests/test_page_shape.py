"""The committed pages keep the worklog's shape: each profiled kernel's first screen (60 lines)
holds the arc table, the arc chart with its roofline drawn as a line, and a Next line; each step
after the first says why, shows its code, what it bought and its prediction; the tensor-core rungs
show their mma / wgmma code."""
import re

import pytest

from kernlog.render import paths as where

from .helpers import ROOT

REPORTS = ROOT / where.of(ROOT).reports
PAGES = sorted(p for p in REPORTS.glob("*.md") if "<!-- kernlog:begin steps -->" in p.read_text())


def _steps(text: str) -> dict[str, str]:
    block = text.split("<!-- kernlog:begin steps -->")[1].split("<!-- kernlog:end steps -->")[0]
    return {s.splitlines()[0].strip(): s for s in re.split(r"^### ", block, flags=re.M)[1:]}


def test_every_profiled_kernel_has_a_page_with_steps():
    assert {p.stem for p in PAGES} >= {"softmax", "matmul_relu", "attention", "layernorm", "rmsnorm", "gelu",
                                       "dropout", "vector_add"}


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_first_screen_tells_where_it_stands_and_what_is_next(page):
    head = "\n".join(page.read_text().splitlines()[:60])
    assert "**Where it stands:**" in head and "**Next:**" in head
    assert re.search(r"^\| step \| change \|", head, re.M), "no arc table on the first screen"
    chart = re.search(r"!\[arc of [^\]]*\]\(([^)]+\.svg)\)", head)
    assert chart, "no arc chart on the first screen"
    svg = (page.parent / chart.group(1)).read_text()
    if "`kernlog triage" in head:  # a whole model (minigpt): no one roofline, its references are the lines
        assert "(reference)" in head
        return
    assert "roofline " in svg and " us (the GPU's measured " in svg, "the arc chart draws no roofline"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_each_step_after_the_first_says_why_shows_code_bought_and_prediction(page):
    sections = _steps(page.read_text())
    steps = {name: s for name, s in sections.items()
             if "(counterpart)" not in name and name != "Other profiled shapes" and ", profiled elsewhere:" not in name}
    assert steps
    for name, section in list(steps.items())[1:]:
        for part in ("- **What changed:**", "- **Why:**", "- **The code**", "- **Bought:**", "- **Prediction**"):
            assert part in section, f"{page.name} {name}: no {part}"
    # a step the page's ladder lacks still says what changed, where it is profiled, what it bought
    # there against the step before it, and its prediction (judged there, or said not to be)
    for name, section in sections.items():
        if ", profiled elsewhere:" in name:
            for part in ("- **What changed:**", "- **Prediction**"):
                assert part in section, f"{page.name} {name}: no {part}"
            # where: the heading names every place, or the section lists them past the heading's two
            assert (" more" not in name) or "- **Profiled at:**" in section, f"{page.name} {name}: where?"
            if "(counterpart)" not in name:
                assert "- **Bought:**" in section, f"{page.name} {name}: no Bought"


def test_the_tensor_core_rungs_show_their_mma_and_wgmma_code():
    steps = _steps((REPORTS / "matmul_relu.md").read_text())
    for name, word in (("cu5_mma", "mma"), ("cu6_cp_async", "mma"), ("cu7_wgmma", "wgmma"),
                       ("cu8_wgmma_wide", "wgmma")):
        code = "\n".join(re.findall(r"```\w*\n(.*?)```", steps[name], re.S))
        # hot lines an earlier step printed are named, not printed again: that step's code counts
        for earlier in re.findall(r"the line (\w+)'s section shows", steps[name]):
            code += "\n".join(re.findall(r"```\w*\n(.*?)```", steps[earlier], re.S))
        assert word in code, f"{name}: its code shows no {word}"


def test_a_claim_about_another_shape_is_judged_on_the_step_and_counts_in_its_verdict():
    """A prediction's claim limited to a shape other than the page's ladder is judged in that
    shape's ladder; the step's line shows it (with where) and its verdict counts it: a claim
    missed there turns the ladder's "met" into "partly"."""
    from types import SimpleNamespace

    from kernlog.render import steps

    def claims(*oks):
        return {"claims": [{"text": f"c{i}", "value": 1.0, "ok": ok, "tie": False} for i, ok in enumerate(oks)]}

    row = {"rec": SimpleNamespace(predicts="it gets faster"), "judged": claims(True)}
    assert steps._prediction(row)["verdict"] == "met"
    other = {"judged": claims(False)}
    p = steps._prediction(row, [("1x32x4096x128 bf16 on NVIDIA H200", other)])
    assert p["verdict"] == "partly"
    assert p["claims"] == ["c0: 1 (met)", "c0 at 1x32x4096x128 bf16 on NVIDIA H200: 1 (missed)"]
    unjudged = {"rec": SimpleNamespace(predicts="it gets faster"), "judged": None}
    assert steps._prediction(unjudged, [("there", other)])["verdict"] == "missed"


def test_a_page_head_quotes_its_front_page_line_where_the_sweep_has_its_point():
    """One fact, one value: the front page's figures of a kernel (its sweep) are the figures the
    page's head names as its sweep's, beside its profile's."""
    log = (ROOT / where.of(ROOT).log).read_text()
    rows: dict = {}
    for line in log.splitlines():  # a kernel's first line: its first GPU's, the page's headline
        cells = line.split("|")
        if line.startswith("| ") and len(cells) > 8:
            rows.setdefault(cells[1].strip(), cells)
    quoted = 0
    for page in PAGES:
        head = "\n".join(page.read_text().splitlines()[:20])
        row = rows.get(page.stem)
        if row is None or "(the front page's figures)" not in head:
            continue
        rate, ref = row[5].strip(), row[6].strip()  # a ratio over two runs keeps its § there too
        assert f"(the front page's figures): {rate}, {ref}." in head, page.stem
        assert ", in its profile: " in head
        quoted += 1
    assert quoted >= 5  # the swept kernels: attention, layernorm, matmul_relu, rmsnorm, softmax and more


def test_the_front_page_has_a_line_for_each_gpu_a_kernel_was_swept_on_with_that_sweeps_best_step():
    """A kernel swept on two GPUs gets a line for each: the second is that GPU's own sweep point, its best step
    and figures the ones that GPU's sweep table prints at that shape (the H200's CUDA C and fused rungs would
    otherwise be missing from the first screen of the log)."""
    log = (ROOT / where.of(ROOT).log).read_text()
    lines: dict = {}
    for line in log.split("<!-- kernlog:begin front -->")[1].split("### Legend")[0].splitlines():
        cells = [c.strip() for c in line.split("|")]
        if line.startswith("| ") and len(cells) > 8 and cells[1] != "kernel":
            lines.setdefault(cells[1], []).append(cells)
    swept = {}
    for csv in ROOT.glob("profiles/*/*/bench.csv"):
        swept.setdefault(csv.parent.name, set()).add(csv.parent.parent.name)
    two = [k for k, gpus in swept.items() if len(gpus) > 1 and k in lines]
    assert len(two) >= 3, two  # attention, matmul_relu, softmax
    for kernel in two:
        assert len({c[2] for c in lines[kernel]}) == len(swept[kernel]), kernel
    checked = 0
    for kernel in swept:  # every line, the first GPU's too: its best step and rate are its sweep table's
        for cells in lines.get(kernel, []):
            if "->" not in cells[4]:
                continue
            gpu = cells[2]
            sweep = next(REPORTS.glob(f"{kernel}_sweep_*{gpu.lower().replace(' ', '-')}*.md"), None)
            table = sweep.read_text() if sweep else (REPORTS / f"{kernel}.md").read_text()
            shape, dtype = cells[3].split()
            best = cells[4].split("-> ")[1].split()[0].rstrip("†")
            rate = cells[5].split()[0]
            if f"| {dtype} | {shape} |" not in table:  # a bench point outside the families: in the CSV alone
                continue
            checked += 1
            assert re.search(rf"\| {dtype} \| {shape} \| {best}†?( \(ties[^|]*\))? \| {rate} \|", table), (kernel, gpu)
    assert checked >= 6, checked


def test_within_noise_names_the_fastest_where_the_best_step_is_an_earlier_same_kernel():
    """matmul at 4096^3 on the H100: v2 ran fastest, the same kernel as v1, so v1 is the best step; the
    steps within noise of it are v2 (the fastest), v3 and v4, in ladder order, never v1 itself."""
    from types import SimpleNamespace

    from kernlog.render import steps

    rows = [{"rec": SimpleNamespace(revision=r)} for r in ("v0", "v1", "v2", "v3", "v4")]
    lad = {"rows": rows, "arc": {"best": rows[2], "ties": ["v4", "v1", "v3"]}}
    assert steps.tied_with(lad, "v1") == ["v2", "v3", "v4"]
    assert steps.tied_with({"rows": rows, "arc": {"best": rows[2], "ties": []}}, "v2") == []
    assert "Within noise of it: v2_split_k, v3_b_pointers, v4_padded." in (REPORTS / "matmul_relu.md").read_text()


def test_a_step_profiled_elsewhere_on_an_older_source_is_marked_stale_there():
    """A step the page's ladder lacks, profiled at another shape on a source since changed: where
    it is profiled and what it bought there carry the stale mark, as the main ladder's rows do."""
    from types import SimpleNamespace

    from kernlog.render import steps

    def ladder(shape, rows):
        return {"shape": shape, "dtype": "bf16", "gpu": {"name": "G"}, "rows": rows}

    main = ladder("1x8", [{"rec": SimpleNamespace(revision="v1")}])
    other = ladder("4x8", [{"rec": SimpleNamespace(revision="v2", predicts=None), "stale": stale, "base": "v1",
                            "speedup": 0.99, "verdict": "same"} for stale in (True,)])
    fresh = ladder("2x8", [{"rec": SimpleNamespace(revision="v2", predicts=None), "stale": False, "base": "v1",
                            "speedup": 1.5, "verdict": "faster"}])
    kernel = SimpleNamespace(revisions=[SimpleNamespace(name=n, role="step", change="c") for n in ("v1", "v2")])
    got = steps.elsewhere({"ladders": [main, other, fresh], "kernel": kernel}, main, {})
    assert len(got) == 1
    assert got[0]["at"] == ["4x8 bf16 on G (stale)", "2x8 bf16 on G"]
    assert got[0]["bought"] == ["0.99x† vs v1 (same) at 4x8 bf16 on G", "1.50x vs v1 (faster) at 2x8 bf16 on G"]
    got = steps.elsewhere({"ladders": [main, fresh], "kernel": kernel}, main, {})
    assert got[0]["at"] == ["2x8 bf16 on G"]


def test_the_first_screen_says_where_another_gpus_sweep_stands_and_every_sweeps_misses():
    """A page headed by one GPU's ladder says, for each other GPU's sweep, which step is best at
    how many of its points and how many miss a bar; Next counts the misses of every sweep, not
    only the first one's."""
    from kernlog.render import steps

    def row(shape, best, met):
        return {"shape": shape, "dtype": "bf16", "bars": [{"name": best, "ref_met": met}]}

    h100 = {"gpu": "H100", "rows": [row("a", "v2", True), row("b", "v2", False)]}
    h100["missed"] = h100["rows"][1:]
    h200 = {"gpu": "H200", "rows": [row("a", "v5", True), row("b", "v4", False), row("c", "v5", False)]}
    h200["missed"] = h200["rows"][1:]
    s = {"sweeps": [h100, h200]}
    lad = {"gpu": {"name": "H100"}}
    assert steps.sweep_standing(s, lad, "v2") == " On H200's sweep, v5 is the best step at 2 of 3 points; 2 miss a bar."
    assert steps.sweep_standing(s, {"gpu": {"name": "H200"}}, "v5") == (
        " On H100's sweep, v2 is the best step at 2 of 2 points; 1 misses a bar.")
    # another GPU's sweep is said even where the same step leads it
    assert steps.sweep_standing(s, lad, "v5") == (" On H100's sweep, v2 is the best step at 2 of 2 points; 1 misses "
                                                  "a bar. On H200's sweep, v5 is the best step at 2 of 3 points; 2 "
                                                  "miss a bar.")
    # its own GPU's sweep, where another step than the profiled best leads most points, is said too
    assert steps.sweep_standing(s, lad, "v1").startswith(" On H100's sweep, v2 is the best step at 2 of 2")
    h200["missed"] = []
    assert steps.sweep_standing(s, lad, "v2").endswith("every point meets its bars.")


def test_every_mark_a_published_page_uses_is_in_the_front_pages_legend():
    """The legend is titled "every symbol of the log and its pages": each mark a committed page prints (a sweep's,
    the other-shapes table's) is defined there, so a reader who meets it on a page can look it up in one place."""
    marks = ("§", "‖", "≠", "‡", "†", "✗", "≈")
    log = (ROOT / "KERNEL_LOG.md").read_text()
    legend = log.split("### Legend", 1)[1]
    used = {m for page in (ROOT / "reports").glob("*.md") for m in marks if m in page.read_text()}
    missing = sorted(m for m in used if f"{m}:" not in legend)
    assert used and not missing, missing
