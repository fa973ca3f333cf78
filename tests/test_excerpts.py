"""Each step's page block shows a short diff of its source against the previous step's."""
from dataclasses import replace
from pathlib import Path

from kernlog.registry import load_kernel
from kernlog.render import excerpts

from .helpers import kernel_page, make_record, put, scratch_repo


def _block(page: str, revision: str) -> str:
    return page.split(f"### {revision}")[1].split("\n### ")[0]


def test_a_step_shows_its_change_against_the_previous_step(tmp_path):
    root = scratch_repo(tmp_path)
    for i, rev in enumerate(("torch", "v0_naive", "v1_block_smem", "v2_warp_shuffle", "v3_online")):
        put(root, make_record(rev, median_ms=0.1 + 0.01 * i, seed=i))
    page = kernel_page(root)
    v3 = _block(page, "v3_online")
    assert "- **The code** (`kernels/softmax/v3_online.cu` against `kernels/softmax/v2_warp_shuffle.cu`, " \
           "code lines only; " in v3
    diff = v3.split("```diff\n")[1].split("```")[0]
    minus = [" ".join(ln.split()) for ln in diff.splitlines() if ln.startswith("  -")]
    plus = [" ".join(ln.split()) for ln in diff.splitlines() if ln.startswith("  +")]
    # the online max and sum: the separate max pass goes, one loop carries the running max and sum
    assert "- for (int c = tid; c < cols; c += THREADS) m = fmaxf(m, kl_to_float(xr[c]));" in minus
    assert "+ float m = KL_NEG_MAX, s = 0.f;" in plus
    assert not any(ln[1:].lstrip().startswith("//") for ln in minus + plus)  # comment lines left out
    assert len(minus) + len(plus) <= excerpts.CAP
    assert "more changed lines: `git diff --no-index kernels/softmax/v2_warp_shuffle.cu " \
           "kernels/softmax/v3_online.cu`)" in v3
    # the first step gets none, a reference no section at all
    assert "The code" not in _block(page, "v0_naive") and "### torch" not in page
    assert "against `kernels/softmax/v0_naive.cu`" in _block(page, "v1_block_smem")


def test_the_code_shown_holds_the_steps_hot_line_and_its_new_instructions(tmp_path):
    """Of a step's hunks, the one holding its hottest line comes first; else one adding an
    instruction the step is about; never #include/#define lines alone."""
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    body = [f"int x{i} = {i};" for i in range(40)]
    a.write_text("\n".join(body) + "\n")
    changed = list(body)
    changed[2:2] = ['#include "extra.cuh"', "#define A 1", "#define B 2", "#define C 3", "#define D 4",
                    "#define E 5", "#define F 6"]
    changed[30] = 'asm volatile("wgmma.fence.sync.aligned;");'
    b.write_text("\n".join(changed) + "\n")
    ex = excerpts.excerpt(_rev("v1", a), _rev("v2", b))
    assert "wgmma" in ex["diff"] and "#define" not in ex["diff"]  # the key hunk within the cap, first
    changed[20] = "int hot = 1;"
    text = "\n".join(changed) + "\n"
    diff, shown, _ = excerpts.unified(a.read_text(), text, ".cu", cap=2, focus={20})  # room for one hunk
    assert "int hot = 1;" in diff and "wgmma" not in diff  # the hot line's hunk, before the key one
    diff, _, _ = excerpts.unified(a.read_text(), text, ".cu", cap=2)
    assert "wgmma" in diff and "int hot" not in diff  # no hot line known: the key hunk


def test_the_excerpt_reads_the_current_source(tmp_path):
    """Diffs come from the files on disk: a step built on one (an #include) shows what it adds."""
    k = load_kernel(scratch_repo(tmp_path), "softmax")
    a, b = k.revision("v5_tuned"), k.revision("v6_autotuned")
    ex = excerpts.excerpt(a, b)
    assert "it #includes `kernels/softmax/v5_tuned.cu`" in ex["title"]
    assert all(not ln.startswith("-") for ln in ex["diff"].splitlines())
    assert '+#include "v5_tuned.cu"' in ex["diff"]


def _rev(name: str, path: Path, load=None):
    k = load_kernel(Path(__file__).resolve().parent.parent, "softmax")
    return replace(k.revision("v1_block_smem"), name=name, sources=(path,), load=load or (lambda: None))


def test_cap_whitespace_and_comment_changes(tmp_path):
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    body = [f"int x{i} = {i};" for i in range(30)]
    a.write_text("// old comment\n" + "\n".join(body) + "\n")
    b.write_text("// new comment\n/* block\n comment */\n" + "\n".join("  " + ln for ln in body) + "\n")
    ex = excerpts.excerpt(_rev("v1", a), _rev("v2", b))
    assert ex["diff"] == "" and "comments and whitespace" in ex["note"]
    b.write_text("\n".join(ln.replace("=", "= 1 +") for ln in body) + "\n")
    ex = excerpts.excerpt(_rev("v1", a), _rev("v2", b))
    changed = [ln for ln in ex["diff"].splitlines() if ln[:1] in "+-" and not ln.startswith("@@")]
    assert len(changed) == excerpts.CAP and ex["more"] == 60 - excerpts.CAP
    assert ex["command"] == "git diff --no-index a.cu b.cu"  # outside a repository: the files' names


def test_one_file_of_several_functions_diffs_the_functions(tmp_path):
    src = tmp_path / "ops.py"
    src.write_text('"""Module."""\n\n\ndef kern_v1(x):\n    """Doc."""\n    return x + 1\n\n\n'
                   'def kern_v2(x):\n    # faster\n    return x + 2\n')
    ex = excerpts.excerpt(_rev("v1", src), _rev("v2", src))
    assert "same file" in ex["title"] and "`kern_v2` against `kern_v1`" in ex["title"]
    assert ex["diff"].splitlines()[1:] == ["-def kern_v1(x):", "-    return x + 1", "+def kern_v2(x):",
                                           "+    return x + 2"]
