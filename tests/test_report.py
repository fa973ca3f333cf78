"""KERNEL_LOG.md rendering from profiles/ alone, its hand-written prose, and --check."""
import json

import pytest

from kernlog.registry import load_kernel
from kernlog.render import facts, plots, report, sweeps

from .helpers import GPU, SECTIONS_REP, kernel_page, make_record, profile_of, put, scratch_repo


def _profiles(root):
    put(root, make_record("torch", median_ms=0.12))
    put(root, make_record("torch_compile", report=SECTIONS_REP, median_ms=0.09, seed=1))


def test_ladder_rows_carry_speed_bottleneck_and_deltas(tmp_path):
    root = scratch_repo(tmp_path)
    _profiles(root)
    section = kernel_page(root)
    rec = make_record("torch", median_ms=0.12)
    gbps = rec["bytes_moved"] / rec["metrics"]["wall_ms"] / 1e6  # 268 MB in ~0.12 ms
    excess = rec["metrics"]["dram_mb"] * 1e6 / rec["bytes_moved"]
    # issue 38: % of copy needs a same-size copy timed in the same run (none here: –); % of
    # roofline is at the op's minimum bytes (roof: the 3000 GB/s copy ceiling); DRAM x min apart
    assert (f"| torch (reference) | F.softmax, eager: PyTorch's own kernel | {rec['metrics']['wall_ms'] * 1e3:.1f} "
            f"| {gbps:.0f} | – "
            f"| {gbps / 30:.0f}% | {excess:.2f} |") in section
    refs = section.split("**The references** at this shape:")[1].split("<sub>")[0]
    assert "- **torch**: F.softmax, eager" in refs and "It is memory-bound" in refs  # where each reference sits
    assert "Long Scoreboard Stalls" not in section  # ncu's rules: `kernlog show`, not the page


def test_render_is_deterministic_and_check_detects_staleness(tmp_path):
    root = scratch_repo(tmp_path)
    _profiles(root)
    kernels = [load_kernel(root, "softmax")]
    sections = report.collect(root, kernels)
    front, first = report.render(root, kernels, sections), kernel_page(root, sections=sections)
    (root / report.LOG).write_text(front)
    report.plot_all(root, sections)
    assert report.render(root, kernels) == front and kernel_page(root) == first
    assert report.out_of_date(root, report.collect(root, kernels)) == []
    path = next((root / "profiles").rglob("torch.8192x4096.fp32.json"))
    rec = json.loads(path.read_text())
    rec["metrics"]["wall_ms"] = 0.2
    path.write_text(json.dumps(rec))
    assert kernel_page(root) != first
    assert "reports/softmax.md is out of date" in report.out_of_date(root, report.collect(root, kernels))


def test_a_plot_is_drawn_again_only_where_its_data_changed_or_when_asked(tmp_path):
    root = scratch_repo(tmp_path)
    _profiles(root)
    kernels = [load_kernel(root, "softmax")]
    drawn = report.plot_all(root, report.collect(root, kernels))
    assert drawn and all(p.exists() for p in drawn)
    assert report.plot_all(root, report.collect(root, kernels)) == []  # nothing changed: nothing drawn
    assert sorted(report.plot_all(root, report.collect(root, kernels), redraw=True)) == sorted(drawn)
    drawn[0].write_text(drawn[0].read_text().replace("kernlog-data ", "kernlog-data 0"))  # another digest
    assert report.plot_all(root, report.collect(root, kernels)) == [drawn[0]]
    drawn[-1].unlink()
    assert report.plot_all(root, report.collect(root, kernels)) == [drawn[-1]]
    path = next((root / "profiles").rglob("torch.8192x4096.fp32.json"))
    rec = json.loads(path.read_text())
    rec["metrics"]["wall_ms"] = 0.2
    path.write_text(json.dumps(rec))
    assert sorted(report.plot_all(root, report.collect(root, kernels))) == sorted(drawn)  # both show it
    assert not any(".svg" in p for p in report.out_of_date(root, report.collect(root, kernels)))


def test_prose_outside_generated_blocks_survives(tmp_path):
    root = scratch_repo(tmp_path)
    _profiles(root)
    kernels = [load_kernel(root, "softmax")]
    rendered = kernel_page(root)
    edited = rendered.replace("<!-- kernlog:begin evidence -->",
                              "Hand-written: why v3 went online.\n\n<!-- kernlog:begin evidence -->")
    edited += "\nClosing notes by hand.\n"
    (root / "reports").mkdir()
    (root / report.page_path("softmax")).write_text(edited.replace("| torch (reference) |", "| torch EDITED |"))
    again = kernel_page(root)
    assert "Hand-written: why v3 went online." in again and "Closing notes by hand." in again
    assert "EDITED" not in again and again.replace("Hand-written: why v3 went online.\n\n", "") == \
        rendered + "\nClosing notes by hand.\n"
    front = report.render(root, kernels)  # the front page keeps its prose the same way
    by_hand = front.replace("<!-- kernlog:begin front -->", "By hand.\n\n<!-- kernlog:begin front -->")
    (root / report.LOG).write_text(by_hand.replace("| softmax |", "| EDITED |"))
    assert report.render(root, kernels) == by_hand


def test_largest_moves_skip_noise_and_rank_by_size():
    a = {"duration_us": 100.0, "dram_mb": 500.0, "stall_barrier": 0.0, "stall_long_scoreboard": 30.0,
         "achieved_occupancy_pct": 50.0, "instructions": 10.0}
    b = {"duration_us": 50.0, "dram_mb": 250.0, "stall_barrier": 0.04, "stall_long_scoreboard": 10.0,
         "achieved_occupancy_pct": 80.0, "instructions": 10.0}
    moves = facts.largest_deltas(a, b)
    labels = [m["label"] for m in moves]
    assert "stall: barrier" not in labels  # 0 -> 0.04 cycles/inst is inside the band, however large in %
    assert "achieved occupancy" not in labels  # no direction is good in itself: "changed", not a move
    b["instructions"] = 5.0  # half the instructions: stalls per instruction no longer compare
    assert "stall: long scoreboard" not in [m["label"] for m in facts.largest_deltas(a, b)]
    b["instructions"] = 10.0
    assert labels[0] == "stall: long scoreboard" and all(m["judgement"] == "better" for m in moves)
    assert {"ncu duration", "DRAM bytes read+written"} <= set(labels)


def test_sweep_table_and_plot_from_bench_csv(tmp_path):
    import pandas as pd

    root = scratch_repo(tmp_path)
    _profiles(root)
    rows = [{"kernel": "softmax", "revision": rev, "shape": shape, "dtype": "fp32", "metric": "gbps",
             "value": v, "gpu": "NVIDIA H100 80GB HBM3", "copy_gbps": 3000.0, "matmul_tflops": 700.0}
            for rev, shape, v in (("torch", "4096x1024", 2000.0), ("torch", "1024x131072", 1500.0),
                                  ("triton", "4096x1024", 1900.0))]
    path = root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    kernels = [load_kernel(root, "softmax")]
    text = kernel_page(root)
    # a row per point: the best step (none swept here) and the counterpart against the best reference
    assert "| fp32 | 4096x1024 | – | – | – | triton | 1900 | 0.95x ✗ | torch |" in text
    assert "| fp32 | 1024x131072 | – | – | – | triton | – | – | torch |" in text
    (svg,) = plots.plot_sweeps(root, report.collect(root, kernels))
    assert svg.name == "softmax_sweep.svg" and svg.stat().st_size > 1000
    assert "softmax fp32 (NVIDIA H100 80GB HBM3)" in svg.read_text()  # no family member: one panel per dtype
    # a family member measured: a panel per family (and the rest), members side by side
    pd.DataFrame(rows + [dict(rows[0], shape="64x50257", value=900.0)]).to_csv(path, index=False)
    (svg,) = plots.plot_sweeps(root, report.collect(root, kernels))
    text = svg.read_text()
    assert "softmax decode fp32" in text and "softmax other bench shapes fp32" in text and "64x50257" in text
    # the page: the measured family with its description, the ones with nothing measured in one line
    page = kernel_page(root)
    assert "- **decode**: " in page and "(not measured yet: 1x50257, 8x128256, 32x151936)" in page
    assert "- Not measured on NVIDIA H100 80GB HBM3 yet: vocab, long_rows, short_rows." in page
    assert "- **vocab**" not in page
    # the plot's digest is that of the data: current now; a value, a shape or a family grouping
    # moved in bench.csv makes it stale (report --check), drawing it again mends it
    sections = report.collect(root, kernels)
    assert [p for p in report.out_of_date(root, sections) if "sweep" in p] == []
    for changed in (dict(rows[0], shape="64x50257", value=901.0), dict(rows[0], shape="65x50257", value=900.0),
                    dict(rows[0], shape="64x50256", value=900.0)):
        pd.DataFrame(rows + [changed]).to_csv(path, index=False)
        sections = report.collect(root, kernels)
        assert "reports/softmax_sweep.svg was drawn from other data than profiles/ holds" in report.out_of_date(
            root, sections), changed
    plots.plot_sweeps(root, sections)
    assert [p for p in report.out_of_date(root, sections) if "sweep" in p] == []


def test_summary_of_a_shape_profiled_without_a_reference_says_so(tmp_path):
    """A revision profiled at an extra shape (no reference there) still gets a row under the
    other profiled shapes, and the reference column says none was profiled instead of None."""
    root = scratch_repo(tmp_path)
    _profiles(root)
    put(root, make_record("v7_bf16_packed", median_ms=0.19, shape=(1024, 131072), dtype="bf16"))
    text = kernel_page(root)
    other = text.split("### Other profiled shapes")[1]
    row = next(line for line in other.splitlines() if line.startswith("| 1024x131072 bf16 |"))
    assert "| v7_bf16_packed |" in row and row.split("|")[-2] == " – "  # no reference profiled there
    assert "None" not in text
    assert text.index("## Step by step at 8192x4096 fp32") < text.index("| 1024x131072 bf16 |")  # declared first
    lines = text.splitlines()  # a table straight under a paragraph line is no table in Markdown
    assert [i for i, ln in enumerate(lines) if ln.startswith("| ") and not lines[i - 1].startswith("| ")
            and lines[i - 1] != ""] == []


def _bench(root, points):
    """bench.csv rows (revision, shape, GB/s, source hash) for softmax fp32."""
    import pandas as pd

    rows = [{"kernel": "softmax", "revision": rev, "shape": shape, "dtype": "fp32", "metric": "gbps", "value": v,
             "gpu": "NVIDIA H100 80GB HBM3", "copy_gbps": 3000.0, "matmul_tflops": 700.0, "source_sha256": sha}
            for rev, shape, v, sha in points]
    pd.DataFrame(rows).to_csv(root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv", index=False)


def test_figures_from_an_older_source_are_marked_stale(tmp_path):
    """A profile or sweep point whose revision's source changed since is marked where the log
    shows it, listed under the summary, and the current ones are not."""
    root = scratch_repo(tmp_path)
    _profiles(root)
    kernel = load_kernel(root, "softmax")
    path = next((root / "profiles").rglob("torch_compile.8192x4096.fp32.json"))
    rec = json.loads(path.read_text())
    rec["source_sha256"] = "0" * 64
    path.write_text(json.dumps(rec))
    today = kernel.revision("torch").sha256()
    _bench(root, [("torch", "4096x1024", 2000.0, today), ("triton", "4096x1024", 1900.0, "0" * 64),
                  ("triton", "1024x131072", 2800.0, kernel.revision("triton").sha256())])
    text = kernel_page(root)
    us = make_record("torch_compile", median_ms=0.09, seed=1)["metrics"]["wall_ms"] * 1e3
    assert (f"| torch_compile (reference) (stale) | torch.compile of F.softmax (Inductor's generated Triton) "
            f"| {us:.1f}† |") in text
    assert "| torch (reference) | F.softmax, eager" in text
    assert "- **torch_compile**†:" in text and "- **torch**:" in text
    assert "| fp32 | 4096x1024 | – | – | – | triton† | 1900 |" in text
    assert "| fp32 | 1024x131072 | – | – | – | triton | 2800 |" in text
    assert ("† Measured on an older source: triton at fp32 4096x1024 (marked where it is a step or reference "
            "the table shows): `kernlog bench softmax --rev triton`") in text  # its current point is not named
    front = report.render(root, [kernel])
    assert ("- softmax: profiles of torch_compile (8192x4096 fp32 on NVIDIA H100 80GB HBM3); sweep points of "
            "triton (on NVIDIA H100 80GB HBM3) were measured on an older source.") in front


def test_a_log_of_current_figures_marks_nothing_stale(tmp_path):
    root = scratch_repo(tmp_path)
    _profiles(root)
    kernel = load_kernel(root, "softmax")
    _bench(root, [("torch", "4096x1024", 2000.0, kernel.revision("torch").sha256())])
    text = kernel_page(root)
    assert "stale" not in text.lower() and "†" not in text
    front = report.render(root, [kernel])  # the legend names the mark; no figure carries it
    assert "Stale figures" not in front and front.count("†") == 1


def test_a_sweep_merged_from_two_runs_says_which_revisions_each_timed(tmp_path):
    """`kernlog bench --rev` merges a run into bench.csv: the log must not call the table one
    run. Runs are told apart by bench's run stamp, or by commit in files written before it."""
    import pandas as pd

    root = scratch_repo(tmp_path)
    _profiles(root)
    kernel = load_kernel(root, "softmax")
    path = root / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv"

    def write(points):
        pd.DataFrame([{"kernel": "softmax", "revision": rev, "shape": "4096x1024", "dtype": "fp32", "metric": "gbps",
                       "value": 2000.0, "gpu": "NVIDIA H100 80GB HBM3", "copy_gbps": 3000.0, "matmul_tflops": 700.0,
                       "source_sha256": kernel.revision(rev).sha256() if rev != "copy" else None, "commit": commit,
                       "run": run} for rev, commit, run in points]).to_csv(path, index=False)

    a, b = "a" * 40, "b" * 40
    write([("torch", a, "2026-11-22T10:00:00Z"), ("triton", a, "2026-11-22T10:00:00Z")])
    text = kernel_page(root)
    assert "every revision timed side by side in one run)" in text
    assert "Every point meets its bar." in text  # no copy timed: one bar, not both
    write([("torch", a, "2026-11-22T10:00:00Z"), ("triton", a, "2026-11-22T11:00:00Z"),
           ("copy", a, "2026-11-22T11:00:00Z")])
    text = kernel_page(root)
    assert "(GB/s, from 2 bench runs)" in text and "one run" not in text.split("sweep on")[1].split("\n")[0]
    assert "| triton | 2000 | 1.00x§<!--xrun--> | 100% | torch |" in text  # triton and torch: two runs
    write([("torch", a, None), ("triton", b, None)])  # no run stamp: the commit tells them apart
    assert "(GB/s, from 2 bench runs)" in kernel_page(root)
    write([("torch", a, None), ("triton", a, None)])
    assert "1.00x§" not in kernel_page(root)  # one commit, no stamp: one run


def test_a_metric_a_profile_lacks_renders_as_not_collected(tmp_path):
    """A catalog metric ncu did not collect (stored as null) is "–" in the log, never a template
    error; a metric missing outright is a hand edit, refused by the schema (test_store)."""
    root = scratch_repo(tmp_path)
    _profiles(root)
    path = next((root / "profiles").rglob("torch.8192x4096.fp32.json"))
    rec = json.loads(path.read_text())
    rec["metrics"].update(theoretical_occupancy_pct=None, dram_mb=None)
    path.write_text(json.dumps(rec))
    section = kernel_page(root)
    row = next(line for line in section.splitlines() if line.startswith("| torch (reference) |"))
    assert row.split("|")[7] == " – "  # DRAM x min: not collected
    torch = section.split("- **torch**:")[1].split("\n")[0]
    assert "It is " in torch and "the minimum" not in torch


def test_each_step_names_its_hottest_source_line_with_code(tmp_path):
    root = scratch_repo(tmp_path)
    rec = make_record("v0_naive", median_ms=1.2)
    rec["hotspots"] = {"kernel": "softmax_k", "samples": 500, "lines": [
        {"file": "kernels/softmax/x.cu", "line": 7, "share": 0.5, "stall": "long_scoreboard", "stall_share": 0.9,
         "text": "v = x[i];"},
        {"file": None, "line": 32, "share": 0.2, "stall": None, "stall_share": None, "text": None, "sass": "EXIT"}]}
    put(root, rec)
    put(root, dict(make_record("torch", median_ms=0.12, seed=1), hotspots=rec["hotspots"]))
    text = kernel_page(root)
    hot = ("- **Hottest line:** 50% of 500 warp samples, `kernels/softmax/x.cu:7`, long scoreboard: "
           "`v = x[i];`")
    assert hot in text and text.count("**Hottest line:**") == 1  # the step's top line; a reference's none
    rec["hotspots"]["lines"].reverse()  # the SASS line first: an address, issuing
    put(root, rec)
    assert "- **Hottest line:** 20% of 500 warp samples, `SASS +0x20`, issuing: `EXIT`" in kernel_page(root)
    rec["hotspots"]["samples"] = 90  # 18 and 45 samples: under HOT_MIN_SAMPLES, not listed
    put(root, rec)
    assert "**Hottest line:**" not in kernel_page(root)


def test_each_ladder_embeds_its_roofline_chart_written_the_same_each_time(tmp_path):
    root = scratch_repo(tmp_path)
    _profiles(root)
    kernels = [load_kernel(root, "softmax")]
    sections = report.collect(root, kernels)
    text = kernel_page(root, sections=sections)
    name = "reports/softmax_roofline_nvidia-h100-80gb-hbm3_8192x4096_fp32.svg"
    assert f"Every step on the roofline: [plot]({name.removeprefix('reports/')})" in text  # beside the page
    assert "| % of roofline |" in text
    paths = plots.plot_rooflines(root, sections)
    assert [str(p.relative_to(root)) for p in paths] == [name]
    first = (root / name).read_bytes()
    plots.plot_rooflines(root, sections)
    assert (root / name).read_bytes() == first


def test_the_front_page_names_ties_with_the_fastest_rather_than_one_inside_the_noise(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("v4_vectorized", median_ms=0.1000, seed=1))
    put(root, make_record("v5_tuned", median_ms=0.0999, seed=2))  # 0.1% apart: a tie
    put(root, make_record("v0_naive", median_ms=1.0, seed=3))
    put(root, make_record("torch", median_ms=0.13, seed=4))
    front = report.render(root, [load_kernel(root, "softmax")])  # no sweep: the front names the profiled fastest
    row = next(line for line in front.splitlines() if line.startswith("| softmax |")).split("|")
    assert row[2].strip() == GPU["name"].removeprefix("NVIDIA ")  # the line names the GPU it was measured on
    assert row[4].strip() in ("not swept; best profiled: v5_tuned ≈ v4_vectorized",
                              "not swept; best profiled: v4_vectorized ≈ v5_tuned")
    page = kernel_page(root)
    arc = {r.split("|")[1].strip(): r.split("|") for r in page.split("<!-- kernlog:end head -->")[0].splitlines()
           if r.startswith("| v") or r.startswith("| torch")}
    assert float(arc["v5_tuned"][-2].strip(" x")) == pytest.approx(1.3, rel=0.05)  # x torch
    assert float(arc["v0_naive"][-2].strip(" x")) == pytest.approx(0.13, rel=0.05)  # 10x slower than v5


def test_largest_moves_rank_a_stall_by_the_cycles_it_moved_not_its_percent():
    a = {"instructions": 100.0, "stall_long_scoreboard": 40.0, "stall_barrier": 1.0, "stall_wait": 2.0,
         "dram_mb": 500.0}
    b = {"instructions": 100.0, "stall_long_scoreboard": 30.0, "stall_barrier": 3.0, "stall_wait": 2.0,
         "dram_mb": 480.0}
    moves = facts.largest_deltas(a, b)
    labels = [m["label"] for m in moves]
    # barrier tripled (+200%) but moved 2 of 43 stalled cycles per instruction; long scoreboard
    # fell 25% and moved 10 of them: it leads
    assert labels.index("stall: long scoreboard") < labels.index("stall: barrier")
    weights = {m["label"]: m["weight"] for m in moves}
    assert weights["stall: long scoreboard"] == pytest.approx(10 / 43)
    assert weights["stall: barrier"] == pytest.approx(2 / 43)


KERNEL_TIMES = {"source": "CUPTI", "total_us": 100.0, "launches": 5, "kernels": [
    {"name": "void sm80_xmma_gemm_f32", "count": 3, "us": 70.0},
    {"name": "softmax_warp_forward", "count": 2, "us": 30.0}]}


def test_two_gpus_side_by_side_and_a_filtered_ncu_pass_judges_no_bottleneck(tmp_path):
    root = scratch_repo(tmp_path)
    gpus = (("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", 0.12), ("nvidia-h200", "NVIDIA H200", 0.09))
    for slug, name, ms in gpus:
        for rev in ("torch", "torch_compile"):
            rec = make_record(rev, median_ms=ms)
            rec["gpu"] = dict(rec["gpu"], slug=slug, name=name)
            if rev == "torch":
                rec["ncu"]["command"] = ["ncu", "--kernel-name", "regex:.*softmax.*"]
                rec["kernel_times"] = KERNEL_TIMES
            put(root, rec)
    (section,) = report.collect(root, [load_kernel(root, "softmax")])
    (x,) = section["across"]
    assert [g["slug"] for g in x["gpus"]] == ["nvidia-h100-80gb-hbm3", "nvidia-h200"]
    torch_row = next(r for r in x["rows"] if r["revision"] == "torch")
    assert torch_row["cells"][1]["speed"] == pytest.approx(torch_row["cells"][0]["us"] / torch_row["cells"][1]["us"])
    assert torch_row["cells"][1]["speed"] > 1.2
    row = next(r for lad in section["ladders"] for r in lad["rows"] if r["rec"].revision == "torch")
    assert row["bottleneck"].startswith("not judged: ncu profiled") and row["roof"]["intensity"] is None
    assert [(k["share"], k["count"]) for k in row["shares"]] == [(70.0, 3), (30.0, 2)]
    assert row["shares"][0]["name"] == "sm80_xmma_gemm_f32"  # "void " dropped
    other = next(r for lad in section["ladders"] for r in lad["rows"] if r["rec"].revision == "torch_compile")
    assert not other["bottleneck"].startswith("not judged") and other["shares"] == []
    text = kernel_page(root)
    assert "### Across GPUs" in text and "| torch | 8192x4096 fp32 |" in text
    assert "Where the time goes: 70% `sm80_xmma_gemm_f32`, 30% `softmax_warp_forward`." in text


def test_show_says_where_the_time_goes_and_what_ncu_left_out(tmp_path):
    from kernlog.render.show import render

    rec = make_record("torch")
    rec["ncu"]["command"] = ["ncu", "--kernel-name", "regex:.*softmax.*"]
    rec["kernel_times"] = KERNEL_TIMES
    text = render(tmp_path, profile_of(rec))
    assert "where the time goes (5 kernels" in text and " 70.0%     3x" in text
    assert "ncu profiled only the kernels matching .*softmax.*" in text
    del rec["kernel_times"]
    assert "where the time goes" not in render(tmp_path, profile_of(rec))


def test_a_sweep_is_one_table_per_shape_family_and_names_what_is_not_measured():
    from kernlog.spec import Family

    rows = [{"shape": s, "dtype": "fp32"} for s in ("4096x32000", "1x50257", "8192x4096")]
    fams = (Family("vocab", "vocabularies", ((4096, 32000), (4096, 50257))),
            Family("decode", "few rows", ((1, 50257),)), Family("long", "long rows", ((4, 1048576),)))
    groups = sweeps._groups(rows, fams)
    assert [(g["name"], [r["shape"] for r in g["rows"]], g["missing"]) for g in groups] == [
        ("vocab", ["4096x32000"], ["4096x50257"]), ("decode", ["1x50257"], []), ("long", [], ["4x1048576"]),
        ("other bench shapes", ["8192x4096"], [])]
    assert [g["name"] for g in sweeps._groups(rows, ())] == [None]  # no families: one table, no heading


def test_the_points_outside_every_family_are_counted_and_their_misses_named_by_shape_and_dtype():
    a, b, c = ({"shape": "1024x32768", "dtype": d} for d in ("bf16", "fp32", "fp16"))
    assert sweeps.others_line([a], []) == "The other bench point, 1024x32768 bf16, is in the CSV."
    assert sweeps.others_line([a], [a]) == "The other bench point, 1024x32768 bf16, is in the CSV; it misses a bar."
    assert sweeps.others_line([a, b, c], []) == "The 3 other bench points are in the CSV."
    assert sweeps.others_line([a, b, c], [c, a]) == ("The 3 other bench points are in the CSV; of them, "
                                                     "1024x32768 bf16, 1024x32768 fp16 miss a bar.")
    assert sweeps.others_line([a, b], [b]).endswith("of them, 1024x32768 fp32 misses a bar.")


def test_a_prediction_with_no_claim_about_the_shape_says_so_rather_than_an_empty_list(tmp_path):
    """v8's claims are about fp32 at the profile shape; a ladder of bf16 4096x50257 profiles
    once said "on this profile: ." (an empty list of claims)."""
    root = scratch_repo(tmp_path)
    put(root, make_record("v8_split", median_ms=0.19, shape=(4096, 50257), dtype="bf16"))
    line = next(ln for ln in kernel_page(root).splitlines() if ln.startswith("- **Prediction**"))
    assert ": ." not in line and "(NOT JUDGED HERE)" in line and "(No claim about 4096x50257 bf16.)" in line
    # and what the profiles cannot judge (predictions.toml's `unchecked`) is said, after the claims
    assert line.endswith("(No claim about 4096x50257 bf16.) Not judged by a profile: rows <= 128 at >= F.softmax "
                         "and long / decode rows at >= 1.5 TB/s: the family sweep."), line


def test_a_judged_prediction_with_a_part_no_profile_judges_says_where_judged(tmp_path):
    """v8's claim (a tie with v7 at 8192x4096 fp32) is judged on its profiles; its `unchecked`
    sweep half is not, so the label is MET WHERE JUDGED, not MET, and v7's (claims alone) MET."""
    root = scratch_repo(tmp_path)
    put(root, make_record("v7_bf16_packed", median_ms=0.19, shape=(8192, 4096), dtype="fp32"))
    v8 = make_record("v8_split", median_ms=0.19, shape=(8192, 4096), dtype="fp32")
    v8["facts"]["main_kernel"] = "v8_split_kernel"  # a kernel of its own, so its claim is measured
    put(root, v8)
    v9 = make_record("v9_peeled", median_ms=0.19, shape=(8192, 4096), dtype="fp32")
    v9["facts"]["main_kernel"] = "v8_split_kernel"  # v8's kernel again: its claim cannot be judged here
    put(root, v9)
    lines = [ln for ln in kernel_page(root).splitlines() if ln.startswith("- **Prediction**")]
    v8 = next(ln for ln in lines if "rows <= 128 at >= F.softmax" in ln)
    assert v8.startswith("- **Prediction** (MET WHERE JUDGED): ") and "Judged: speedup" in v8, v8
    # v9 runs v8's kernel: its verdict judged nothing, so no "where judged"
    v9 = next(ln for ln in lines if "bf16 4096x50257 from 0.77x" in ln)
    assert v9.startswith("- **Prediction** (NOT CHECKABLE HERE): ") and "Not judged by a profile:" in v9, v9
    assert v8.endswith("Not judged by a profile: rows <= 128 at >= F.softmax and long / decode rows at >= 1.5 TB/s: "
                       "the family sweep."), v8


def test_judge_and_render_modules_stay_small_and_free_of_import_circles():
    """No circle among kernlog's module-level imports that a module of judge/, render/ or
    store/calibrations.py is part of (their length: tests/test_layers.py, for every module)."""
    import ast

    from .helpers import ROOT

    mine = sorted((ROOT / "kernlog" / "judge").glob("*.py")) + sorted((ROOT / "kernlog" / "render").glob("*.py")) \
        + [ROOT / "kernlog" / "store" / "calibrations.py"]

    def name(path):
        rel = path.relative_to(ROOT).with_suffix("")
        return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)

    graph = {}
    for path in (ROOT / "kernlog").rglob("*.py"):
        deps = set()
        for node in ast.parse(path.read_text()).body:  # module level only: a function's import is lazy
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kernlog"):
                deps |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("kernlog")}
        graph[name(path)] = deps
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}

    def reaches(start, goal, seen):
        return any(d == goal or (d not in seen and not seen.add(d) and reaches(d, goal, seen)) for d in graph[start])

    circles = [name(p) for p in mine if reaches(name(p), name(p), set())]
    assert circles == []


def test_another_shapes_ratio_timed_at_clocks_apart_is_marked_and_says_both(tmp_path):
    """The other profiled shapes' "x best reference" between two profiles timed at SM clocks further
    apart than the wall-time band carries a mark, and a line under the table names both clocks."""
    root = scratch_repo(tmp_path)
    _profiles(root)

    def at(rev, ms, mhz, shape=(1024, 131072)):
        rec = make_record(rev, median_ms=ms, shape=shape, dtype="bf16")
        rec["timing"]["clocks"] = {"sm_mhz": {"median": mhz, "min": mhz, "max": mhz, "n": 20},
                                   "mem_mhz": {"median": 3201.0, "min": 3201.0, "max": 3201.0, "n": 20},
                                   "source": "nvml"}
        put(root, rec)

    at("v7_bf16_packed", 0.19, 1740.0)
    at("torch", 0.21, 1950.0)
    at("v7_bf16_packed", 0.19, 1980.0, shape=(2048, 131072))
    at("torch", 0.21, 1970.0, shape=(2048, 131072))
    other = kernel_page(root).split("### Other profiled shapes")[1].split("###")[0]
    rows = {ln.split("|")[1].strip(): ln for ln in other.splitlines() if ln.startswith("| ") and "bf16" in ln}
    assert rows["1024x131072 bf16"].endswith("x torch‖ |")
    assert rows["2048x131072 bf16"].endswith("x torch |")  # 0.5% apart: inside the band
    assert "(1024x131072 bf16: 1740 and 1950 MHz)" in other and "2048x131072 bf16:" not in other
