"""What the log may say: a step is tied with the fastest only where the two are the same within
noise (an inconclusive one is not), a GB/s figure in the prose is the data's, and the row that
sums the kernels past the top ones counts their launches."""
import statistics

import pytest

from kernlog.errors import KernlogError
from kernlog.judge.verdicts import timing_verdict
from kernlog.metrics import time_shares
from kernlog.registry import load_kernel
from kernlog.render import facts, prose, report, steps
from kernlog.render.show import render as show

from .helpers import ROOT, make_record, profile_of, put, scratch_repo

# --- ties with the fastest ------------------------------------------------------------------------

FASTEST = [0.1 + 0.0001 * (i % 5 - 2) for i in range(40)]  # 0.1 ms, tight
WITHIN = [x * 1.001 for x in FASTEST]  # 0.1% slower: the same within noise
SCATTERED = [0.08] * 5 + [0.14] * 5  # median 0.11: 10% slower, outside the band, but not significantly


def _rec(revision: str, xs: list[float], seed: int) -> dict:
    rec = make_record(revision, seed=seed)
    med = statistics.median(xs)
    rec["metrics"]["wall_ms"] = med
    rec["timing"].update(samples_ms=xs, median_ms=med, p05_ms=min(xs), p95_ms=max(xs), n=len(xs))
    return rec


def _ladder_recs() -> list[dict]:
    return [_rec("v0_naive", [x * 10 for x in FASTEST], 0), _rec("v1_block_smem", FASTEST, 1),
            _rec("v2_warp_shuffle", WITHIN, 2), _rec("v3_online", SCATTERED, 3)]


def test_the_premise_one_step_same_and_one_inconclusive_against_the_fastest():
    assert timing_verdict(FASTEST, WITHIN, 0.035).verdict == "same"
    assert timing_verdict(FASTEST, SCATTERED, 0.035).verdict == "inconclusive"


def test_an_inconclusive_step_is_not_tied_with_the_fastest():
    order = [r.name for r in load_kernel(ROOT, "softmax").revisions]
    lad = facts.ladder([profile_of(r) for r in _ladder_recs()], order)
    assert lad["arc"]["best"]["rec"].revision == "v1_block_smem"
    assert lad["arc"]["ties"] == ["v2_warp_shuffle"]


def test_the_front_page_ties_the_same_step_and_not_the_inconclusive_one(tmp_path):
    root = scratch_repo(tmp_path)
    for rec in _ladder_recs():
        put(root, rec)
    front = report.render(root, [load_kernel(root, "softmax")])
    row = next(line for line in front.splitlines() if line.startswith("| softmax |"))
    assert "best profiled: v1_block_smem ≈ v2_warp_shuffle |" in row and "v3_online" not in row


# --- a GB/s figure in the prose -------------------------------------------------------------------

def _repo(tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("torch_compile", median_ms=0.10, seed=1)
    put(root, rec)
    return root, rec


def test_a_gbps_figure_is_filled_from_the_stored_bytes_and_time(tmp_path):
    root, rec = _repo(tmp_path)
    gbps = rec["bytes_moved"] / rec["metrics"]["wall_ms"] / 1e6
    marker = "<!--fig softmax/torch_compile gbps .0f-->"
    text = f"torch.compile moves {marker}1<!--/fig--> GB/s.\n"
    assert prose.fill(root, text) == f"torch.compile moves {marker}{gbps:.0f}<!--/fig--> GB/s.\n"
    assert 2000 < gbps < 4000  # GB/s, not TB/s or MB/s
    prose.check(prose.fill(root, text))


def test_a_bare_gbps_figure_in_the_prose_fails_the_check():
    with pytest.raises(KernlogError, match=r"1 figure\(s\) in the log's prose come from no profile: "
                                           r"line 1: '2684 GB/s'"):
        prose.check("It moves 2684 GB/s.\n")
    with pytest.raises(KernlogError, match=r"'2684GB/s'"):
        prose.check("It moves 2684GB/s.\n")


# --- the row of the kernels past the top ones -----------------------------------------------------

TRACE = {"source": "CUPTI", "total_us": 100.0, "launches": 17, "kernels": [
    *({"name": f"k{i}", "count": 1, "us": 10.0} for i in range(8)),
    {"name": "tail_a", "count": 4, "us": 12.0}, {"name": "tail_b", "count": 5, "us": 8.0}]}


def test_the_more_row_counts_the_launches_of_the_kernels_it_sums():
    rec = make_record("torch")
    rec["kernel_times"] = TRACE
    rows = time_shares(profile_of(rec))
    assert len(rows) == 9 and [r["name"] for r in rows[:8]] == [f"k{i}" for i in range(8)]
    assert rows[-1] == {"name": "2 more rows", "count": 9, "us": 20.0, "share": 20.0}
    assert sum(r["count"] for r in rows) == TRACE["launches"]


def test_show_prints_the_launches_of_the_more_row():
    rec = make_record("torch")
    rec["kernel_times"] = TRACE
    text = show(ROOT, profile_of(rec))
    assert "where the time goes (17 kernels" in text
    line = next(ln for ln in text.splitlines() if ln.endswith("2 more rows"))
    assert line.split()[:2] == ["20.0%", "9x"]


# --- what may never be the best -------------------------------------------------------------------

def test_a_revision_failing_the_gate_now_is_never_the_fastest():
    recs = _ladder_recs()
    v1 = profile_of(recs[1])
    outcomes = {"v1_block_smem": {"passed": False, "source_sha256": v1.source_sha256,
                                  "failure": "3x5 fp32 random: error 5.0e-01 over tolerance 1e-04"}}
    order = [r.name for r in load_kernel(ROOT, "softmax").revisions]
    lad = facts.ladder([profile_of(r) for r in recs], order, outcomes=outcomes)
    assert lad["arc"]["best"]["rec"].revision == "v2_warp_shuffle"
    assert "v1_block_smem" not in lad["arc"]["ties"]


def test_the_arc_table_measures_against_the_fastest_reference():
    from kernlog.render import arc

    recs = [make_record("v0_naive", median_ms=0.2), make_record("torch", median_ms=0.13, seed=1),
            make_record("torch_compile", median_ms=0.10, seed=2)]
    order = [r.name for r in load_kernel(ROOT, "softmax").revisions]
    lad = dict(facts.ladder([profile_of(r) for r in recs], order), shape="8192x4096", dtype="fp32")
    rows = {r["revision"]: r for r in arc.arc_rows(lad, None, False)}
    wall = {r["revision"]: r["metrics"]["wall_ms"] for r in recs}
    assert {r["best_ref"] for r in rows.values()} == {"torch_compile"}
    assert rows["v0_naive"]["vs_ref"] == pytest.approx(wall["torch_compile"] / wall["v0_naive"])


def _row(values: dict, fails_now=None) -> dict:
    return {"dtype": "fp32", "shape": "8192x4096", "elems": 8192 * 4096, "values": values,
            "fails_now": fails_now or {}}


ROLES = {"v0_naive": "step", "v1_block_smem": "step", "torch": "reference", "torch_compile": "reference"}


def test_a_sweep_bar_is_against_the_fastest_reference():
    from kernlog.render import sweeps

    row = _row({"v0_naive": 1500.0, "torch": 1000.0, "torch_compile": 2000.0, "copy": 2500.0})
    (bar,) = sweeps._bars(row, ROLES, 0.035)
    assert bar["name"] == "v0_naive" and bar["best_ref"] == "torch_compile"
    assert bar["vs_ref"] == pytest.approx(0.75) and bar["ref_met"] is False
    assert bar["of_copy"] == pytest.approx(0.6) and bar["copy_met"] is False  # 128 MB: the copy bar applies


def test_a_step_failing_the_gate_now_is_never_the_sweeps_best():
    from kernlog.render import sweeps

    row = _row({"v0_naive": 1500.0, "v1_block_smem": 3000.0, "torch": 1000.0},
               fails_now={"v1_block_smem": "3x5 fp32 random: error 5.0e-01"})
    (bar,) = sweeps._bars(row, ROLES, 0.035)
    assert bar["name"] == "v0_naive" and bar["vs_ref"] == pytest.approx(1.5)


# --- a figure of an older source -----------------------------------------------------------------

def test_a_prose_figure_of_an_older_source_carries_the_stale_mark(tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("torch_compile", median_ms=0.10, seed=1)
    put(root, rec)
    text = "<!--fig softmax/torch_compile us .1f-->?<!--/fig--> us\n"
    assert prose.fill(root, text) == "<!--fig softmax/torch_compile us .1f-->100.0<!--/fig--> us\n"
    put(root, dict(rec, source_sha256="0" * 64))  # profiled on a source since edited
    assert prose.fill(root, text) == f"<!--fig softmax/torch_compile us .1f-->100.0{prose.STALE_MARK}<!--/fig--> us\n"


def test_a_sweep_rows_best_step_names_the_steps_inside_its_noise():
    from kernlog.render.sweeps import _ties

    roles = {"a": "step", "b": "step", "c": "step", "d": "step", "ref": "reference"}
    row = {"values": {"a": 100.0, "b": 98.5, "c": 90.0, "d": None, "ref": 99.9}, "spread": {}}
    assert _ties(row, "a", roles, 0.02) == ["b"]  # 1.5% behind: a tie; 11% behind: none; a reference: never
    row["spread"] = {"c": 0.12}  # c's own run-to-run spread wider than its gap: a tie too
    assert _ties(row, "a", roles, 0.02) == ["b", "c"]
    assert _ties(dict(row, fails_now={"b": "x"}), "a", roles, 0.02) == ["c"]  # failing the gate now: no tie
    assert _ties(row, None, roles, 0.02) == []
    # b timed in another run than a (merged by `kernlog bench --rev`): no tie judged across runs
    assert _ties(dict(row, runs={"a": "r2", "b": "r1", "c": "r2"}), "a", roles, 0.02) == ["c"]


def test_the_sweep_legend_prints_the_band_it_judges_by():
    """The legend's band is the one the ✗ marks use, to a tenth of a percent: the H200's 3.5%
    printed as 4% made a 0.916x cell against a 0.95x bar look like a tie there."""
    from kernlog.render.sweeps import band_pct

    assert band_pct(0.035) == "3.5" and band_pct(0.02) == "2" and band_pct(0.1) == "10" and band_pct(0.0125) == "1.2"


def test_a_step_profiled_elsewhere_names_each_gpu_once_with_its_places():
    """The heading's phrase of a step's places: those on one GPU named together, GPUs in the order first met,
    a stale profile's mark kept on its place."""
    at = ["4096x4096x4096 bf16 on NVIDIA H200", "3072x3072x3072 bf16 on NVIDIA H100 80GB HBM3",
          "1000x1000x1000 bf16 on NVIDIA H200 (stale)"]
    assert steps.places(at) == ("4096x4096x4096 bf16, 1000x1000x1000 bf16 (stale) on NVIDIA H200; "
                                "3072x3072x3072 bf16 on NVIDIA H100 80GB HBM3")
    assert steps.places([]) == ""


def test_a_plot_names_its_clip_paths_and_markers_by_order_not_by_their_float_geometry():
    """matplotlib names a clip path by a hash of its box at full precision: another machine's last
    bit drew the same picture under another name. Renamed by order, the two files are the same bytes."""
    from kernlog.render.plots import stable_ids

    def svg(clip, marker):
        return (f'<clipPath id="{clip}"><rect/></clipPath><path id="{marker}"/>'
                f'<g clip-path="url(#{clip})"><use xlink:href="#{marker}"/></g>'
                f'<g clip-path="url(#{clip})"/><path id="DejaVuSans-30"/><g id="line2d_51"/>')

    here, there = svg("p99fb7070f5", "m509620bef0"), svg("p3dbd86e1f3", "m509620bef0")
    assert here != there and stable_ids(here) == stable_ids(there)
    assert stable_ids(here) == ('<clipPath id="p0"><rect/></clipPath><path id="m1"/>'
                                '<g clip-path="url(#p0)"><use xlink:href="#m1"/></g>'
                                '<g clip-path="url(#p0)"/><path id="DejaVuSans-30"/><g id="line2d_51"/>')


def test_every_committed_plot_is_free_of_hashed_ids():
    import re

    plots = sorted((ROOT / "reports").glob("*.svg"))
    assert plots
    hashed = [p.name for p in plots if re.search(r'id="[pmh][0-9a-f]{10}"', p.read_text())]
    assert hashed == []
