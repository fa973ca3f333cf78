"""Issue 38's gate: `report --check` fails on a contradiction between two renderings of one
fact, a step claiming a change over an identical kernel, and a stale prose figure unmarked."""
import copy
import functools
import re
import shutil
from pathlib import Path

import pytest

from kernlog.registry import kernel_names, load_kernel
from kernlog.render import arc, report
from kernlog.render.facts import collect

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def _collected():
    return collect(ROOT, [load_kernel(ROOT, n) for n in kernel_names(ROOT)])


def _sections():
    """The committed repository's sections, collected once for this file (3-7 s each time); each
    test gets its own copy to edit, the kernels (read-only) shared."""
    sections = _collected()
    return copy.deepcopy(sections, {id(s["kernel"]): s["kernel"] for s in sections})


def test_the_committed_log_has_no_contradiction():
    assert arc.contradictions(_sections()) == []


def test_check_fails_when_the_front_page_and_its_sweep_disagree():
    sections = _sections()
    s = next(s for s in sections if s["kernel"].name == "softmax")
    s["front"]["point"] = dict(s["front"]["point"], best="v0_naive")  # a summary that ranks another best
    found = report.out_of_date(ROOT, sections)
    assert any("contradiction: softmax: the front page's best" in p for p in found)


def test_a_kernel_swept_on_another_gpu_has_that_gpus_point_and_check_fails_when_it_disagrees():
    sections = _sections()
    s = next(s for s in sections if s["kernel"].name == "matmul_relu")
    other = s["front"]["elsewhere"]
    assert [p["gpu"] for p in other] == ["NVIDIA H200"]
    p = other[0]
    row = arc.sweep_row(arc.sweep_of(s["sweeps"], "NVIDIA H200"), p["shape"], p["dtype"])
    assert p["best"] == row["bars"][0]["name"] and p["vs_ref"] == row["bars"][0]["vs_ref"]  # that sweep's own best
    s["front"]["elsewhere"] = [dict(p, best="cu0_naive")]
    assert any("on NVIDIA H200 (cu0_naive) is not the sweep's" in c for c in arc.contradictions(sections))


def test_the_front_page_quotes_the_sweeps_best_where_it_is_within_noise_of_the_pages():
    """matmul at 4096^3 on the H100: the page's best step is v1 (v2, the fastest profile, runs v1's kernel), and
    v2, v3 and v4 are within noise of it; the sweep ran v4 fastest there. The front page quotes the sweep
    table's best and figures, not v1's older point from another run."""
    s = next(s for s in _sections() if s["kernel"].name == "matmul_relu")
    assert s["front"]["best"] == "v1_tma_persistent" and "v4_padded" in s["front"]["tied"]
    p = s["front"]["point"]
    row = arc.sweep_row(s["front"]["sweep"], p["shape"], p["dtype"])
    assert p["best"] == row["bars"][0]["name"] == "v4_padded"
    assert p["rate"] == row["values"]["v4_padded"] and not p["apart_ref"]
    from kernlog.render import steps

    head = steps.stands(s, s["ladders"][0])  # the page's head says whose figures the front page quotes
    assert head.startswith("v1_tma_persistent is the best step at 4096x4096x4096 bf16")
    assert f"In its sweep v4_padded ran fastest (the front page's figures): {p['rate']:.0f} TFLOP/s" in head


def test_next_says_to_profile_the_later_rungs_that_ran_only_on_another_gpu():
    """attention's headline ladder is the H100's, whose best step is v2_tuned; v3-v5 were profiled only on the
    H200. The Next line says so, with the command that puts them in this ladder, not how to tune v2 further;
    attention_backward, profiled on one GPU, and matmul, whose later rungs there precede its best, keep theirs."""
    from kernlog.render import steps

    sections = {s["kernel"].name: s for s in _sections()}
    att = steps.next_line(sections["attention"], sections["attention"]["ladders"][0])
    # the headline ladder's shape and dtype in the command: attention's first dtype is fp32
    assert att.startswith("v3_fma, v4_wgmma, v5_persistent were profiled only on NVIDIA H200: `kernlog profile "
                          "attention --rev v3_fma --rev v4_wgmma --rev v5_persistent --shape 1x12x1024x64 "
                          "--dtype bf16` on the NVIDIA H100 80GB HBM3")
    assert "past v2_tuned" in att and "go after the limit" not in att
    for name in ("attention_backward", "matmul_relu"):
        assert "profiled only on" not in steps.next_line(sections[name], sections[name]["ladders"][0])
    # a rung the kernel no longer declares a step (known wrong since) is never named
    att_s = sections["attention"]
    v5 = next(r for r in att_s["kernel"].revisions if r.name == "v5_persistent")
    import dataclasses
    wrong = dict(att_s, kernel=dataclasses.replace(att_s["kernel"], revisions=tuple(
        dataclasses.replace(r, role="wrong", bug="x") if r is v5 else r for r in att_s["kernel"].revisions)))
    assert "--rev v5_persistent" not in steps.next_line(wrong, att_s["ladders"][0])


def test_a_page_opens_with_the_arc_of_the_rungs_its_headline_gpu_never_ran():
    """attention's first screen: the H100's arc (v0-v2), then the H200's at the same shape, where v5 is the best
    step and v3-v5 were never profiled on the H100; softmax's: the H100's arcs, then the H200's at 4096x151936
    bf16, where v11 (never profiled on the H100) is the fastest step. matmul's later CUDA C rungs come before its
    best step in the kernel's order: it gets no such arc."""
    sections = {s["kernel"].name: s for s in _sections()}
    att = sections["attention"]["arcs"]
    assert [(a["gpu"]["name"], a["shape"]) for a in att] == [("NVIDIA H100 80GB HBM3", "1x12x1024x64"),
                                                             ("NVIDIA H200", "1x12x1024x64")]
    sm = sections["softmax"]["arcs"]
    assert [(a["gpu"]["name"], a["shape"]) for a in sm] == [("NVIDIA H100 80GB HBM3", "8192x4096"),
                                                            ("NVIDIA H100 80GB HBM3", "4096x151936"),
                                                            ("NVIDIA H200", "4096x151936")]
    mm = sections["matmul_relu"]["arcs"]
    assert {a["gpu"]["name"] for a in mm} == {mm[0]["gpu"]["name"]}


def test_check_fails_on_a_step_claiming_a_change_over_the_same_kernel():
    sections = _sections()
    s = next(s for s in sections if s["kernel"].name == "softmax")
    row = next(r for r in s["ladders"][0]["rows"] if r["rec"].revision == "v8_split")
    assert row["same_as"] == "v5_tuned" and "verdict" not in row  # the renderer claims nothing
    row["verdict"] = "faster"
    assert any("v8_split claims a change (faster) over v7_bf16_packed" in c for c in arc.contradictions(sections))


def test_a_prose_figure_from_a_stale_profile_carries_the_mark_and_check_fails_without_it(tmp_path):
    # a page whose prose quotes a profile measured on an older source (minigpt's library on the
    # H100, today): its figure carries the mark, and the page without it is out of date
    sections = {s["kernel"].name: s for s in _sections()}
    pages = {name: report.pages(ROOT, [s]) for name, s in sections.items()}
    found = next(((name, rel, text) for name, texts in pages.items() for rel, text in texts.items()
                  if re.search(r"<!--fig [^>]*-->[^<]*†<!--/fig-->", text)), None)
    if found is None:
        pytest.skip("no prose figure of the committed pages comes from a stale profile")
    name, rel, text = found
    assert (ROOT / rel).read_text() == text  # committed with its marks
    # The page is unmarked in a copy of the repository whose reports/ is its own: the checkout's
    # page stays as committed for the tests running beside this one (test_readme reads `git status`).
    copy_root = tmp_path / "repo"
    copy_root.mkdir()
    for entry in ROOT.iterdir():
        if entry.name == "reports":
            shutil.copytree(entry, copy_root / entry.name)
        else:
            (copy_root / entry.name).symlink_to(entry)
    assert f"{rel} is out of date" not in report.out_of_date(copy_root, [sections[name]])  # read as the checkout
    (copy_root / rel).write_text(text.replace("†<!--/fig-->", "<!--/fig-->"))
    assert f"{rel} is out of date" in report.out_of_date(copy_root, [sections[name]])


# one of each kind: an arc, a sweep with shape families, one by size, a roofline, a history
DRAWN_AGAIN = ("softmax_arc_nvidia-h100-80gb-hbm3_8192x4096_fp32.svg", "softmax_sweep.svg", "attention_sweep.svg",
               "softmax_roofline_nvidia-h100-80gb-hbm3_8192x4096_fp32.svg",
               "softmax_history_nvidia-h100-80gb-hbm3_8192x4096_fp32.svg")


def test_a_fresh_clone_is_clean_after_make_log(tmp_path):
    """`make log` on a fresh clone rewrites KERNEL_LOG.md, every page and every plot byte for byte
    (a plot's float printed one digit differently would leave the clone modified). The render
    runs in a process of its own with another hash seed and an empty matplotlib cache."""
    import os
    import subprocess
    import sys

    import pytest

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(clone)], check=True)
    # `report` draws a plot again only where its data changed: one plot of each kind is removed,
    # so each drawing function runs and must write the committed bytes again
    for name in DRAWN_AGAIN:
        (clone / "reports" / name).unlink()
    env = dict(os.environ, PYTHONHASHSEED="12345", MPLCONFIGDIR=str(tmp_path / "mpl"))
    done = subprocess.run([sys.executable, "-m", "kernlog", "report"], cwd=clone, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"drew {len(DRAWN_AGAIN)} plot(s)" in done.stdout, done.stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    assert status == "", status
