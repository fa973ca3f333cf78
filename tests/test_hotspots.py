"""Source-line hot spots from real H100 reports: PC samples summed per line, the leading
stall per line, library kernels without line info split per instruction, and the lines
whose share moved between two profiles."""
from pathlib import Path

import pytest

from kernlog.capture import hotspots
from kernlog.capture import ncu as ncurep
from kernlog.judge import hotlines
from kernlog.render import diff as diff_text
from kernlog.render import show

from .helpers import FIXTURES, FULL_REP, ROOT, make_record, profile_of

CUDA_V0 = FIXTURES / "cuda_softmax_v0_naive_8192x4096_fp32.ncu-rep"  # kernlog profile softmax --rev v0_naive


def _hot(report, source=None):
    return hotspots.of_revision(ncurep.read_report(report), ROOT, [source] if source else [])


def test_cuda_c_lines_are_named_in_the_repository_with_their_text_and_stall():
    hot = _hot(CUDA_V0, ROOT / "kernels/softmax/v0_naive.cu")
    lines = hot["lines"]
    assert hot["kernel"] == "softmax_fp32"
    assert hot["samples"] == sum(ln["samples"] for ln in lines)  # every sampled line kept (v0 has under KEEP)
    assert [hotlines.where(ln) for ln in lines[:3]] == [
        "kernels/softmax/v0_naive.cu:24", "kernels/softmax/v0_naive.cu:19", "kernels/softmax/v0_naive.cu:21"]
    assert lines[0]["samples"] > lines[1]["samples"] > lines[2]["samples"]
    assert lines[0]["stall"] == "long_scoreboard" and lines[0]["stall_share"] == pytest.approx(0.9033, abs=1e-4)
    assert lines[0]["text"].startswith("for (int c = 0; c < cols; ++c) yr[c]")
    assert any(ln["file"] == "kernlog/include/kl_cuda.cuh" for ln in lines)  # an #included header by its own name
    assert sum(ln["share"] for ln in lines) == pytest.approx(1.0, abs=1e-3)


def test_the_leading_stall_is_never_the_issuing_warp():
    for ln in _hot(FULL_REP)["lines"]:
        assert ln["stall"] not in ("selected", "not_selected")
        if ln["stall"]:
            others = {r: c for r, c in ln["stalls"].items() if r not in ("selected", "not_selected")}
            assert others[ln["stall"]] == max(others.values())


def test_triton_lines_name_the_python_file_and_library_lines_their_package_path():
    files = {ln["file"] for ln in _hot(FULL_REP)["lines"]}
    assert "triton/language/standard.py" in files  # tl.max/tl.sum inlined from Triton's own source
    assert any(f.endswith("ncu_tri.py") for f in files)


def test_a_kernel_without_line_info_is_split_per_instruction(monkeypatch):
    real = type(ncurep.read_report(FULL_REP)[0]).source_info
    monkeypatch.setattr(type(ncurep.read_report(FULL_REP)[0]), "source_info", lambda self, pc: None)
    hot = _hot(FULL_REP)
    monkeypatch.setattr(type(ncurep.read_report(FULL_REP)[0]), "source_info", real)
    assert len(hot["lines"]) == hotspots.KEEP and all(ln["file"] is None for ln in hot["lines"])
    assert all(hotlines.where(ln).startswith("SASS +0x") and ln["sass"] for ln in hot["lines"])
    assert len({ln["line"] for ln in hot["lines"]}) == hotspots.KEEP


def test_moved_matches_lines_by_text_and_ranks_by_the_size_of_the_move():
    a = {"lines": [{"file": "a.cu", "line": 10, "share": 0.6, "stall": "long_scoreboard", "text": "x = load(p);"},
                   {"file": "a.cu", "line": 20, "share": 0.1, "stall": "barrier", "text": "sync();"}]}
    b = {"lines": [{"file": "b.cu", "line": 12, "share": 0.2, "stall": "long_scoreboard", "text": "x  = load(p);"},
                   {"file": "b.cu", "line": 30, "share": 0.5, "stall": "wait", "text": "y = exp(x);"}]}
    rows = hotlines.moved(a, b)
    assert [(r["text"], r["share_a"], r["share_b"]) for r in rows] == [
        ("y = exp(x);", None, 0.5), ("x = load(p);", 0.6, 0.2), ("sync();", 0.1, None)]
    assert rows[1]["where_a"] == "a.cu:10" and rows[1]["where_b"] == "b.cu:12"
    assert hotlines.moved(a, None) == [] and hotlines.moved(a, a) == []  # nothing moved, nothing listed
    a["lines"][1]["share"] = 0.205  # 0.5 points from b's line of the same text: under MOVE_MIN
    b["lines"].append({"file": "b.cu", "line": 40, "share": 0.2, "stall": "barrier", "text": "sync();"})
    assert [r["text"] for r in hotlines.moved(a, b)] == ["y = exp(x);", "x = load(p);"]


def test_show_lists_the_hot_lines_or_says_why_there_are_none():
    rec = make_record("v0_naive")
    rec["hotspots"] = _hot(CUDA_V0, ROOT / "kernels/softmax/v0_naive.cu")
    text = "\n".join(show.hot_lines(profile_of(rec)))
    assert "kernels/softmax/v0_naive.cu:24" in text and "long_scoreboard 90%" in text
    rec.pop("hotspots")
    assert "not collected (profiled before kernlog extracted them; re-profile)" in show.hot_lines(profile_of(rec))[0]
    rec["hotspots"] = None
    assert "holds no PC samples" in show.hot_lines(profile_of(rec))[0]


def test_the_capture_stores_hot_spots_in_the_profile():
    rec = make_record("triton")
    assert rec["hotspots"]["samples"] > 0 and rec["hotspots"]["lines"][0]["share"] > 0.1
    assert Path(rec["hotspots"]["lines"][0]["file"]).name in ("standard.py", "ncu_tri.py")


def test_diff_renders_the_moved_lines_in_text_and_markdown():
    from kernlog.judge import diff

    a, b = make_record("v4_vectorized"), make_record("v5_tuned")
    a["hotspots"] = {"kernel": "k", "samples": 10, "lines": [
        {"file": "kernels/softmax/v4_vectorized.cu", "line": 49, "share": 0.34, "stall": "long_scoreboard",
         "text": "mt = fmaxf(mt, v[k]);"},
        {"file": "kernlog/include/kl_cuda.cuh", "line": 103, "share": 0.10, "stall": "short_scoreboard",
         "text": "s = a | b;"}]}
    b["hotspots"] = {"kernel": "k", "samples": 10, "lines": [
        {"file": "kernlog/include/kl_cuda.cuh", "line": 103, "share": 0.14, "stall": "short_scoreboard",
         "text": "s = a | b;"}]}
    d = diff.diff(profile_of(a), profile_of(b))
    text = diff_text.render(d).splitlines()
    i = text.index("source lines whose share of the warp samples moved (before -> after, leading stall):")
    assert text[i + 1].split() == ["34%", "->", "-", "kernels/softmax/v4_vectorized.cu:49", "long_scoreboard",
                                   "mt", "=", "fmaxf(mt,", "v[k]);"]
    assert text[i + 2].split()[:5] == ["10%", "->", "14%", "kernlog/include/kl_cuda.cuh:103", "short_scoreboard"]
    md = diff_text.render(d, "md")
    assert "| 10% | 14% | `kernlog/include/kl_cuda.cuh:103` | short_scoreboard | `s = a \\| b;` |" in md
