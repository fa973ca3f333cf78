"""The library's dispatch: shape classes, the table made from a sweep (only gated, current steps
and counterparts qualify), the pick for a call (its class, the nearest, the fallback), the
`kernlog dispatch` command, the page's markdown, the committed tables, and the entry points."""
import csv
import json
import random

import pytest
import torch
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.errors import KernlogError
from kernlog.judge import dispatch as judge
from kernlog.library import (
    ANY,
    ClassRule,
    Dispatched,
    align,
    bucket,
    bucket_size,
    class_key,
    load_table,
    pick,
    rule_for,
    table_path,
)
from kernlog.registry import load_kernel
from kernlog.render import dispatch as render
from kernlog.store import gates
from tests.helpers import GPU, ROOT, scratch_repo

SOFTMAX = load_kernel(ROOT, "softmax")
CURRENT = {r.name: r.sha256() for r in SOFTMAX.revisions}
ROLES = {r.name: r.role for r in SOFTMAX.revisions}
ORDER = [r.name for r in SOFTMAX.revisions]
ROWS = rule_for(2)
GATE_FAILURE = "7x33 fp32 random: error 1.0e-01 over tolerance 5e-04"

# (shape, dtype) -> {revision: median ms}: torch (a reference) fastest everywhere; v9_peeled
# next, but measured on an older source; v8_split next, but its gate fails now on this source;
# v4_vectorized marked failing the gate at 64x8192 by the sweep.
SWEEP = {
    ("4096x8192", "fp32"): {"torch": 0.05, "v8_split": 0.06, "v9_peeled": 0.065, "v10_meet": 0.10, "triton": 0.11,
                            "v0_naive": 1.0},
    ("4096x50257", "fp32"): {"torch": 0.3, "v9_peeled": 0.35, "triton": 0.5, "v10_meet": 0.6, "v0_naive": 3.0},
    ("64x8192", "fp32"): {"torch": 0.01, "v4_vectorized": 0.012, "v10_meet": 0.02, "triton": 0.03},
    ("4096x8192", "bf16"): {"torch": 0.03, "triton": 0.04, "v10_meet": 0.05},
}
STALE = {"v9_peeled": "0" * 64}
MARKED = {("v4_vectorized", "64x8192", "fp32"): "64x8192 fp32: error 3e-2 over tolerance 5e-4"}


def points(sweep=SWEEP) -> list[dict]:
    return [{"revision": rev, "shape": shape, "dtype": dtype, "median_ms": ms,
             "sha256": STALE.get(rev, CURRENT[rev]), "spread": 0.0,
             "fails_gate": MARKED.get((rev, shape, dtype), "")}
            for (shape, dtype), revs in sweep.items() for rev, ms in revs.items()]


OUTCOMES = {"v8_split": {"source_sha256": CURRENT["v8_split"], "passed": False, "failure": GATE_FAILURE}}


def build(pts=None, outcomes=OUTCOMES, band=0.02):
    return judge.build("softmax", points() if pts is None else pts, ROLES, CURRENT, ORDER, ROWS, outcomes, band,
                       {"gpu": GPU["name"]})


def entry(table, shape, dtype="fp32"):
    return next(c for c in table["classes"] if c["points"] == [shape] and c["dtype"] == dtype)


# -- shape classes --------------------------------------------------------------------------------

def test_a_length_falls_in_the_power_of_two_it_rounds_up_to():
    assert [bucket(n) for n in (1, 2, 3, 1000, 1024, 1025, 50257)] == [0, 1, 2, 10, 10, 11, 16]


def test_two_buckets_an_octave_round_up_to_a_power_of_two_or_three_quarters_of_one():
    assert [bucket_size(bucket(n, 2), 2) for n in (1, 2, 3, 5, 768, 1000, 1536, 2049, 2880, 3072, 3073, 4096)] == \
        [1, 2, 3, 6, 768, 1024, 1536, 3072, 3072, 3072, 4096, 4096]
    for per in (1, 2):  # each length in the smallest bucket that holds it, the buckets in order
        for n in range(1, 5000):
            b = bucket(n, per)
            assert bucket_size(b, per) >= n and (b == 0 or bucket_size(b - 1, per) < n), (per, n)
    with pytest.raises(ValueError):
        ClassRule(("n",), (0,), per_octave=3)


def test_a_rule_of_half_octaves_keeps_3072_apart_from_4096_and_reads_old_tables():
    """The matmul's classes: 3072^3 its own class (cu10's 192x192 tile won there on the H200, cu9's tile
    at 4096^3); a table written before the field reads as one bucket an octave; a call one octave past
    the sweep takes the nearest class, two past the fallback, as with whole octaves."""
    half = ClassRule(("M", "N", "K"), (1, 2), per_octave=2)
    assert class_key((3072,) * 3, "bf16", half) != class_key((4096,) * 3, "bf16", half)
    assert class_key((3072,) * 3, "bf16", rule_for(3)) == class_key((4096,) * 3, "bf16", rule_for(3))
    assert class_key((2880,) * 3, "bf16", half)[2] == class_key((3072,) * 3, "bf16", half)[2]  # (not tiled)
    assert ClassRule.from_dict(half.as_dict()) == half and "per_octave" not in rule_for(3).as_dict()
    assert ClassRule.from_dict({"axes": ["n"], "aligned": [0], "align_bytes": 16, "tile": 128}).per_octave == 1
    table = {"kernel": "mm", "rule": half.as_dict(), "fallback": {"bf16": ["f"]},
             "classes": [{"dtype": "bf16", "align": "tiled", "buckets": list(class_key((1024,) * 3, "bf16", half)[2]),
                          "points": ["1024x1024x1024"], "ranking": [["a", 1.0]], "revision": "a"}]}
    assert pick(table, (1024, 1024, 1024), "bf16").how == "class"
    assert pick(table, (2048, 1024, 1024), "bf16").how == "nearest"  # one octave up
    assert pick(table, (4096, 1024, 1024), "bf16").how == "fallback"  # two
    assert pick(table, (256, 1024, 1024), "bf16").how == "fallback"
    assert "M ≤ 3072" in judge.class_label({**table["classes"][0], "buckets": [23, 20, 20]}, half)


def test_the_matmul_classes_are_half_octaves_and_the_h200_table_keeps_3072_cu10s():
    from kernels import matmul_relu

    assert matmul_relu.DISPATCH_CLASSES.per_octave == 2
    h200 = load_table(table_path(ROOT, "matmul_relu", "nvidia-h200"))
    picks = {p: c["revision"] for c in h200["classes"] for p in c["points"]}
    assert picks["3072x3072x3072"] == "cu10_waves" and picks["4096x4096x4096"] != "cu10_waves"
    assert h200["rule"]["per_octave"] == 2


def test_alignment_tells_whole_tiles_from_whole_words_from_ragged_rows():
    assert align((4096, 8192), "fp32", ROWS) == "tiled"
    assert align((16384, 1000), "fp32", ROWS) == "aligned"  # 4000 bytes: whole 16-byte words, no whole tile
    assert align((4096, 50257), "bf16", ROWS) == "ragged"
    assert align((65536, 100), "bf16", ROWS) == "ragged" and align((65536, 100), "fp32", ROWS) == "aligned"
    matmul = rule_for(3)  # N and K are the rows a matmul reads; M is not
    assert align((1000, 1024, 1024), "bf16", matmul) == "tiled"
    assert align((4096, 50257, 768), "bf16", matmul) == "ragged"
    assert class_key((1000, 1000, 1000), "bf16", matmul) != class_key((1024, 1024, 1024), "bf16", matmul)


# -- the table -------------------------------------------------------------------------------------

def test_each_class_takes_its_fastest_qualifying_revision_with_runner_up_and_margin():
    table = build()
    tiled = entry(table, "4096x8192")
    assert tiled["align"] == "tiled" and tiled["buckets"] == [12, 13]
    assert (tiled["revision"], tiled["runner_up"], tiled["margin"]) == ("v10_meet", "triton", 0.1)
    ragged = entry(table, "4096x50257")
    assert (ragged["align"], ragged["revision"], ragged["runner_up"], ragged["margin"]) == \
        ("ragged", "triton", "v10_meet", 0.2)
    assert [name for name, _ in tiled["ranking"]] == ["v10_meet", "triton", "v0_naive"]
    assert table["source"] == {"gpu": GPU["name"]} and table["rule"] == ROWS.as_dict()


def test_references_stale_and_gate_failing_revisions_never_qualify():
    table = build()
    picked = {name for c in table["classes"] for name, _ in c["ranking"]}
    assert picked == {"v10_meet", "triton", "v0_naive"}
    assert set(table["revisions"]) == picked and all(n in picked for names in table["fallback"].values()
                                                     for n in names)
    left = table["left_out"]
    assert left["torch"] == {"a reference": 4}
    assert left["v9_peeled"] == {"stale (measured on another source)": 2}
    assert table["unranked"] == {}  # v9_peeled qualifies nowhere: its stale points rank without it
    assert left["v8_split"] == {f"fails the gate ({GATE_FAILURE})": 1}
    assert left["v4_vectorized"] == {f"fails the gate ({MARKED[('v4_vectorized', '64x8192', 'fp32')]})": 1}


def test_a_point_where_nothing_qualifies_has_no_class_and_is_named():
    only_references = {**SWEEP, ("1024x8192", "fp32"): {"torch": 0.01, "v9_peeled": 0.02}}
    table = build(points(only_references))
    assert table["unserved"] == ["fp32 1024x8192"]
    assert all(c["points"] != ["1024x8192"] for c in table["classes"])
    assert pick(table, (1024, 8192), "fp32").cls["points"] == ["4096x8192"]


def test_a_point_where_a_qualifying_revision_is_stale_is_not_ranked_and_takes_the_nearest_class():
    # v10_meet qualifies elsewhere, but at 2048x8192 its figure is of an older source: v0_naive
    # alone is current there, and a class of it would send calls to the naive kernel
    stale_here = [{"revision": "v0_naive", "shape": "2048x8192", "dtype": "fp32", "median_ms": 1.0,
                   "sha256": CURRENT["v0_naive"], "spread": 0.0, "fails_gate": ""},
                  {"revision": "v10_meet", "shape": "2048x8192", "dtype": "fp32", "median_ms": 0.1,
                   "sha256": "1" * 64, "spread": 0.0, "fails_gate": ""}]
    table, before = build(points() + stale_here), build()
    assert table["unranked"] == {"fp32 2048x8192": ["v10_meet"]} and table["unserved"] == []
    assert table["classes"] == before["classes"] and table["fallback"] == before["fallback"]
    got = pick(table, (2048, 8192), "fp32")
    assert got.cls["points"] == ["4096x8192"] and got.revision == "v10_meet"
    said = "\n".join(render.summary(table_path(ROOT, "softmax"), table, ROOT))
    assert "not ranked at 1 point(s)" in said and "fp32 2048x8192 (v10_meet)" in said
    said_on_page = render._unranked_said(table)
    assert "1 sweep point(s) are not ranked, where the figure of v10_meet is stale" in said_on_page
    assert "the nearest class or the fallback" in said_on_page
    assert render._unranked_said(before) == ""


def test_a_later_gate_pass_or_an_outcome_of_another_source_lets_a_revision_back():
    passed = {"v8_split": dict(OUTCOMES["v8_split"], passed=True, failure=None)}
    assert entry(build(outcomes=passed), "4096x8192")["revision"] == "v8_split"
    other = {"v8_split": dict(OUTCOMES["v8_split"], source_sha256="f" * 64)}
    assert entry(build(outcomes=other), "4096x8192")["revision"] == "v8_split"


def test_a_class_of_several_points_ranks_by_geometric_mean_and_names_its_costliest_point():
    sweep = {("16384x768", "fp32"): {"v10_meet": 1.0, "triton": 2.0},  # 768 and 1024 share a class
             ("16384x1024", "fp32"): {"v10_meet": 1.5, "triton": 1.0}}
    c = build(points(sweep))["classes"][0]
    assert c["points"] == ["16384x768", "16384x1024"]
    assert (c["revision"], c["runner_up"]) == ("v10_meet", "triton")  # sqrt(1 * 1.5) < sqrt(2 * 1)
    assert c["margin"] == round((2.0 / 1.0 * 1.0 / 1.5) ** 0.5 - 1, 4)
    assert c["worst_point"] == ["16384x1024", 0.5, "triton"]  # what sharing the class costs there


def test_a_margin_inside_the_noise_band_is_a_tie():
    tie = {("4096x8192", "fp32"): {"v10_meet": 1.0, "triton": 1.01}}
    c = build(points(tie))["classes"][0]
    assert c["margin"] == 0.01 and c["noise"] == 0.02
    assert "(tie: within noise)" in render._margin(c) and "tie" not in render._margin(dict(c, noise=0.005))


def test_revisions_that_ran_the_same_pick_at_every_point_count_once_as_the_earliest_rung():
    """triton_packed hands fp32 rows to triton_met's launcher: their notes name the same pick, so
    the class credits triton_met (the rung that brought it), and the runner-up is another kernel.
    A note that differs at one point of the class, or no note at all, keeps both."""
    same = "picked 'softmax_triton_met'|4096|8192|torch.float32: ('met', 0, {'BLOCK': 8192})"
    sweep = {("4096x8192", "fp32"): {"triton_met": 1.01, "triton_packed": 1.0, "v10_meet": 1.1},
             ("4096x12000", "fp32"): {"triton_met": 2.0, "triton_packed": 2.02, "v10_meet": 2.1}}
    notes = {"triton_met": same, "triton_packed": same}

    def table(notes_at):
        pts = [dict(p, note=notes_at(p)) for p in points(sweep)]
        return build(pts)

    c = table(lambda p: notes.get(p["revision"], ""))["classes"]
    assert [(x["revision"], x["runner_up"]) for x in c] == [("triton_met", "v10_meet")] * 2
    assert all("triton_packed" not in dict(x["ranking"]) for x in c)
    c = table(lambda p: notes.get(p["revision"], "") + ("x" if p["revision"] == "triton_packed" and
                                                        p["shape"] == "4096x8192" else ""))["classes"]
    assert entry({"classes": c}, "4096x8192")["revision"] == "triton_packed"
    c = table(lambda p: "")["classes"]
    assert entry({"classes": c}, "4096x8192")["revision"] == "triton_packed"


def test_the_fallback_is_the_fastest_over_the_whole_sweep():
    fb = build()["fallback"]
    assert fb["fp32"][0] == "v10_meet"  # 1.0, 1.2, 1.0 against the fastest: triton 1.1, 1.0, 1.5
    assert fb["bf16"] == ["triton", "v10_meet"] and ANY in fb


def test_the_table_is_the_same_whatever_the_order_of_the_sweep():
    pts = points()
    first = json.dumps(build(pts), sort_keys=True)
    for seed in range(3):
        random.Random(seed).shuffle(pts)
        assert json.dumps(build(pts), sort_keys=True) == first


# -- the pick --------------------------------------------------------------------------------------

def test_a_call_takes_its_class_else_the_nearest_class():
    table = build()
    assert pick(table, (4096, 8192), "fp32").revision == "v10_meet"
    got = pick(table, (4096, 8000), "fp32")  # rounds up to 4096 x 8192, but its rows are no whole tiles
    assert got.how == "fallback" and "no class of aligned fp32" in got.why
    near = pick(table, (2048, 8192), "fp32")  # between 64 and 4096 rows: nearer 4096
    assert (near.revision, near.how, near.cls["points"]) == ("v10_meet", "nearest", ["4096x8192"])
    assert pick(table, (4096, 40001), "fp32").revision == "triton"  # ragged: the ragged class


def test_a_call_beyond_the_sweep_or_of_an_unswept_dtype_takes_the_fallback():
    table = build()
    far = pick(table, (4096, 1 << 20), "fp32")  # 2^20 columns: more than 2x past the sweep's 2^13
    assert (far.revision, far.how) == ("v10_meet", "fallback") and "cols 1048576" in far.why
    fp16 = pick(table, (4096, 8192), "fp16")
    assert (fp16.revision, fp16.how) == (table["fallback"][ANY][0], "fallback")


def test_a_call_takes_the_fallback_two_octaves_past_the_sweep_on_either_side():
    table = build()  # tiled fp32 classes: rows of 64 and 4096, 8192 columns
    assert pick(table, (4096, 1 << 14), "fp32").how == "nearest"  # one octave past the columns: the nearest
    assert pick(table, (4096, 1 << 15), "fp32").how == "fallback"  # two past
    assert pick(table, (32, 8192), "fp32").how == "nearest"  # one octave under the rows
    assert pick(table, (16, 8192), "fp32").how == "fallback"  # two under


def test_the_nearest_class_is_one_with_a_pick_by_squared_octaves():
    # 768 and 1024 rows share a class, but no revision was timed at both: it ranks nothing
    disjoint = {**SWEEP, ("768x8192", "fp32"): {"v10_meet": 0.1}, ("1024x8192", "fp32"): {"triton": 0.1}}
    table = build(points(disjoint))
    assert [c["revision"] for c in table["classes"] if c["points"] == ["768x8192", "1024x8192"]] == [None]
    got = pick(table, (1024, 8192), "fp32")
    assert got.how == "nearest" and got.cls["points"] == ["4096x8192"]
    # (2048, 2048) is 3 octaves from 16384x2048 (3 + 0) and from 8192x8192 (2 + 2), but 9 against 8 squared
    spread = {("16384x2048", "fp32"): {"triton": 1.0}, ("8192x8192", "fp32"): {"v10_meet": 1.0},
              ("512x65536", "fp32"): {"v0_naive": 1.0}}
    assert pick(build(points(spread)), (2048, 2048), "fp32").cls["points"] == ["8192x8192"]


def test_the_fallback_takes_the_calls_own_dtype_ranking_before_every_dtypes():
    table = build()
    table["fallback"][ANY] = ["v0_naive"]
    assert pick(table, (4096, 1 << 20), "fp32").revision == table["fallback"]["fp32"][0] != "v0_naive"


def test_a_known_wrong_revision_or_a_point_with_no_source_hash_never_qualifies():
    wrong = judge.build("softmax", points(), dict(ROLES, v10_meet="wrong"), CURRENT, ORDER, ROWS, OUTCOMES, 0.02, {})
    assert wrong["left_out"]["v10_meet"] == {"a wrong": 4} and "v10_meet" not in wrong["revisions"]
    unhashed = [dict(p, sha256="") if p["revision"] == "v10_meet" else p for p in points()]
    assert "v10_meet" not in build(unhashed)["revisions"]


def test_the_check_sees_any_change_to_a_table_and_the_page_shows_a_current_one(tmp_path):
    table = load_table(table_path(ROOT, "softmax"))
    table["fallback"]["fp32"] = list(reversed(table["fallback"]["fp32"]))  # the classes untouched
    moved = tmp_path / "dispatch.json"
    moved.write_text(json.dumps(table))
    assert render.check(ROOT, "softmax", path=moved) != ""
    page = render.page_md(ROOT, "softmax")
    assert "| revision | shape classes |" in page and "made from another sweep" not in page
    assert "tie" in render._margin({"margin": 0.02, "noise": 0.02})  # a margin at the band is a tie
    said = render.summary(table_path(ROOT, "softmax"), build(band=0.0), ROOT)
    assert not any("0.0% slower" in line for line in said)  # a class's pick is never said to lose by nothing


def test_a_revision_that_declines_the_shape_or_cannot_run_is_passed_over():
    table = build()
    got = pick(table, (4096, 8192), "fp32", refuses=lambda name, shape: "no" if name == "v10_meet" else "")
    assert (got.revision, got.how) == ("triton", "class")
    got = pick(table, (4096, 8192), "fp32", skip={"v10_meet", "triton"})
    assert got.revision == "v0_naive"
    fb = pick(table, (4096, 1 << 20), "fp32", skip={"v10_meet"})
    assert (fb.revision, fb.how) == ("triton", "fallback")
    with pytest.raises(LookupError, match="no revision of its dispatch table runs 4096x8192 fp32"):
        pick(table, (4096, 8192), "fp32", refuses=lambda name, shape: "no")


# -- the command, the file, the page ---------------------------------------------------------------

def write_sweep(root, sweep=SWEEP):
    folder = root / "profiles" / GPU["slug"] / "softmax"
    folder.mkdir(parents=True)
    cols = ["kernel", "revision", "shape", "dtype", "metric", "value", "gpu", "commit", "source_sha256",
            "copy_gbps", "matmul_tflops", "run", "note"]
    with open(folder / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for p in points(sweep):
            base = {"kernel": "softmax", "revision": p["revision"], "shape": p["shape"], "dtype": p["dtype"],
                    "gpu": GPU["name"], "commit": "a" * 40, "source_sha256": p["sha256"], "copy_gbps": 3000.0,
                    "matmul_tflops": 700.0, "run": "2026-11-26T00:00:00Z", "note": ""}
            w.writerow(dict(base, metric="median_ms", value=p["median_ms"]))
            if p["fails_gate"]:
                w.writerow(dict(base, metric="fails_gate", value="nan", note=p["fails_gate"]))
    gates.record(root, GPU["slug"], "softmax", OUTCOMES)
    return folder / "bench.csv"


def dispatch(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), "dispatch", "softmax", *args])


def test_the_command_writes_the_table_of_the_committed_sweep_the_same_each_time(tmp_path):
    (tmp_path / "repo").mkdir()
    root = scratch_repo(tmp_path / "repo")  # its kernels/ is this repository's: the table goes to --out
    write_sweep(root)
    out = tmp_path / "softmax.json"
    result = dispatch(root, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "softmax: 4 shape classes" in result.output and "left out: v9_peeled" in result.output
    table = load_table(out)
    assert table["source"]["bench_csv"] == f"profiles/{GPU['slug']}/softmax/bench.csv"
    assert table["source"]["runs"] == [{"run": "2026-11-26T00:00:00Z", "commit": "a" * 40,
                                        "revisions": sorted({r for revs in SWEEP.values() for r in revs})}]
    assert table["classes"] == build(band=table["classes"][0]["noise"])["classes"]
    first = out.read_bytes()
    assert dispatch(root, "--out", str(out)).exit_code == 0 and out.read_bytes() == first
    assert dispatch(root, "--out", str(out), "--check").exit_code == 0
    out.write_text(first.decode().replace('"v10_meet"', '"v0_naive"', 1))
    stale = dispatch(root, "--out", str(out), "--check")
    assert stale.exit_code == 1 and "not what the sweep makes now" in stale.output


def test_the_command_says_where_there_is_no_sweep(tmp_path):
    result = dispatch(scratch_repo(tmp_path), "--out", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "no sweep of softmax stored" in result.output


def test_the_page_table_has_a_row_per_class_in_at_most_six_columns(tmp_path):
    md = render.table_md(ROOT, SOFTMAX)
    table = load_table(table_path(ROOT, "softmax"))
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert rows[0] == "| class | dtype | revision | runner-up | margin |"
    assert len(rows) == 1 + len(table["classes"]) and all(ln.count("|") <= 7 for ln in rows)
    assert table["source"]["bench_csv"] in md
    (tmp_path / "kernels").mkdir()
    assert render.table_md(tmp_path, "softmax") is None


# -- the committed tables and the entry points -----------------------------------------------------

TABLED = [name for name in ("softmax", "layernorm", "rmsnorm", "gelu", "dropout", "matmul_relu", "attention",
                            "vector_add") if table_path(ROOT, name).exists()]


# every committed table: the primary GPU's dispatch.json and each other GPU's dispatch.<slug>.json
TABLES = [(name, f.name[len("dispatch."):-len(".json")] or None) for name in TABLED
          for f in sorted(table_path(ROOT, name).parent.glob("dispatch*.json"))]


def test_every_other_gpus_table_is_checked_too():
    assert ("matmul_relu", "nvidia-h200") in TABLES and ("softmax", None) in TABLES


@pytest.mark.parametrize("name, gpu", TABLES)
def test_the_committed_table_is_what_the_committed_sweep_makes(name, gpu):
    assert render.check(ROOT, name, gpu) == ""


def test_the_entry_point_passes_a_cuda_c_pick_over_on_the_cpu():
    from kernels import library

    x = torch.randn(4, 8192)
    op = library.dispatched("softmax")
    got = op.pick((4096, 8192), "fp32", "cpu")
    assert SOFTMAX.revision(got.revision).kind == "triton"
    assert "v4_vectorized" in op.unrunnable["cpu"]  # the class's CUDA C pick, passed over
    torch.testing.assert_close(library.softmax(x), torch.softmax(x, -1))
    y = torch.randn(2, 3, 40)
    torch.testing.assert_close(library.softmax(y), torch.softmax(y, -1))


def test_a_pick_is_kept_per_device_and_triton_on_the_cpu_needs_the_interpreter(monkeypatch):
    from kernlog.library import Dispatched

    op = Dispatched(SOFTMAX, load_table(table_path(ROOT, "softmax")))
    monkeypatch.setattr(op, "_launcher", lambda name, device: (
        Dispatched._launcher(op, name, device) if device == "cpu" else None))  # "cuda": anything loads
    cpu = op.pick((4096, 8192), "fp32", "cpu")
    assert op.pick((4096, 8192), "fp32", "cuda").revision == "v4_vectorized" != cpu.revision  # the class's own
    monkeypatch.delenv("TRITON_INTERPRET")
    bare = Dispatched(SOFTMAX, load_table(table_path(ROOT, "softmax")))
    with pytest.raises(KernlogError, match="TRITON_INTERPRET=1"):
        bare.pick((4096, 8192), "fp32", "cpu")  # neither CUDA C nor Triton runs here


def test_an_entry_point_runs_the_table_it_is_given(tmp_path):
    path = tmp_path / "softmax.json"
    path.write_text(json.dumps(build()))
    op = Dispatched.open(ROOT, "softmax", path=path)
    x = torch.randn(3, 300)
    torch.testing.assert_close(op((x,)), torch.softmax(x, -1))
    assert op.pick((3, 300), "fp32", "cpu").revision == "triton"
    assert ClassRule.from_dict(op.table["rule"]) == ROWS


def test_every_entry_point_matches_its_reference_on_the_cpu():
    import torch.nn.functional as F

    from kernels import library

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 96, generator=gen)
    w, b = torch.randn(96, generator=gen), torch.randn(96, generator=gen)
    torch.testing.assert_close(library.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (96,), w, b, 1e-5))
    torch.testing.assert_close(library.rms_norm(x, w, 1e-6), F.rms_norm(x, (96,), w, 1e-6))
    torch.testing.assert_close(library.gelu(x), F.gelu(x, approximate="tanh"))
    kept = library.dropout(x, 0.5, seed=1)
    assert torch.all((kept == 0) | torch.isclose(kept, 2 * x)) and 0 < int((kept == 0).sum()) < x.numel()
    a, m = torch.randn(33, 70, generator=gen), torch.randn(70, 47, generator=gen)
    torch.testing.assert_close(library.matmul_relu(a, m), torch.relu(a @ m), rtol=1e-4, atol=1e-4)
    q, k, v = (torch.randn(1, 2, 33, 64, generator=gen) for _ in range(3))
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(library.attention(q, k, v), causal, rtol=1e-4, atol=1e-4)


def test_a_revision_that_finds_at_its_first_launch_it_cannot_run_here_is_passed_over(monkeypatch):
    """cu9 and cu10 build with nvcc at their first launch, v1 finds no TMA there: a pick that raises
    Unsupported on its first call is passed over for the device, as one that cannot load; one that
    has run before and then fails is an error to show."""
    from types import SimpleNamespace

    from kernlog.errors import Unsupported
    from kernlog.library import Dispatched

    op = Dispatched(SOFTMAX, load_table(table_path(ROOT, "softmax")))
    calls, refuse = [], {}

    def launcher(name, device):
        def launch(inputs, out):
            calls.append(name)
            if name in refuse:
                raise Unsupported(refuse[name])
            return out.copy_(torch.softmax(inputs[0].x, -1))
        op._launchers.setdefault(name, launch)
        return op._launchers[name]

    monkeypatch.setattr(op, "_launcher", launcher)
    x = torch.randn(4, 8192)
    on_gpu = SimpleNamespace(x=x, shape=x.shape, dtype=x.dtype, device=SimpleNamespace(type="cuda", index=0))
    first = op.pick((4, 8192), "fp32", "cuda").revision  # the class's pick loads
    refuse[first] = "needs nvcc to build sm_90a (wgmma) code"
    got = op((on_gpu,), torch.empty_like(x))
    torch.testing.assert_close(got, torch.softmax(x, -1))
    assert calls[0] == first and len(calls) == 2 and calls[1] != first
    assert op.unrunnable["cuda"] == {first: "needs nvcc to build sm_90a (wgmma) code"}
    assert op.pick((4, 8192), "fp32", "cuda").revision == calls[1]  # kept: the next call goes there at once
    refuse[calls[1]] = "grid over the limits"  # one that ran before and now fails: shown, not passed over
    with pytest.raises(Unsupported, match="grid over the limits"):
        op((on_gpu,), torch.empty_like(x))
