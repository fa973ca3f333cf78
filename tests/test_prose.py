"""Prose that cannot go stale: a figure marker is filled from the profiles, so changing a
stored figure makes `report --check` fail on the prose that quoted it; an unsourced figure
fails the check; a dated history region is exempt."""
import pytest
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.errors import KernlogError
from kernlog.render import prose

from .helpers import make_record, profile_of, put, scratch_repo

PROSE = ("# KERNEL_LOG\n\nThe tuned step runs at <!--fig softmax/torch_compile tbps .2f-->?<!--/fig--> TB/s, "
         "<!--fig softmax/torch_compile speedup:torch .2f-->?<!--/fig-->x eager.\n")


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), "report", *args])


def repo_with(tmp_path, text=PROSE):
    tmp_path.mkdir(parents=True, exist_ok=True)
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.12))
    put(root, make_record("torch_compile", median_ms=0.10, seed=1))
    (root / "KERNEL_LOG.md").write_text(text)
    return root


def test_a_changed_stored_figure_fails_the_check_on_the_prose_that_quoted_it(tmp_path):
    root = repo_with(tmp_path)
    assert run(root).exit_code == 0
    log = (root / "KERNEL_LOG.md").read_text()
    rec = make_record("torch_compile", median_ms=0.10, seed=1)
    tbps = rec["bytes_moved"] / rec["metrics"]["wall_ms"] / 1e9
    assert f"-->{tbps:.2f}<!--/fig--> TB/s" in log and "-->1.20<!--/fig-->x eager" in log
    assert run(root, "--check").exit_code == 0
    put(root, make_record("torch_compile", median_ms=0.08, seed=1))  # re-profiled: a new figure
    r = run(root, "--check")
    assert r.exit_code == 2 and "KERNEL_LOG.md is out of date" in r.stderr
    run(root)
    assert "-->1.50<!--/fig-->x eager" in (root / "KERNEL_LOG.md").read_text()


def test_an_unsourced_figure_fails_the_check_and_a_dated_one_does_not(tmp_path):
    root = repo_with(tmp_path, PROSE + "\nIt once ran at 2.5 TB/s and was 13x faster.\n")
    run(root)
    r = run(root, "--check")
    assert r.exit_code == 2 and "2 figure(s) in the log's prose come from no profile" in r.stderr
    assert "line 5: '2.5 TB/s'; line 5: '13x'" in r.stderr
    dated = PROSE + "\n<!--history 2026-11-22 abc1234-->\nIt once ran at 2.5 TB/s, `x = 3%`.\n<!--/history-->\n"
    root2 = repo_with(tmp_path / "b", dated)
    run(root2)
    assert run(root2, "--check").exit_code == 0


def test_the_figure_pattern_spares_shapes_names_and_code():
    text = "8192x4096 fp32 on an NVIDIA H100 80GB HBM3, `v[i] *= 2x`, ```\n3.0 TB/s\n```, but 0.95x and 96% and 65 us"
    assert [f for _, f in prose.unsourced(text)] == ["0.95x", "96%", "65 us"]


def test_a_marker_naming_no_profile_or_quantity_is_one_line(tmp_path):
    for text, message in (("<!--fig softmax/v9 tbps-->1<!--/fig-->", "no revision 'v9'"),
                          ("<!--fig softmax/torch nope-->1<!--/fig-->", "the figure 'nope' of softmax/torch"),
                          ("<!--fig softmax/torch-->1<!--/fig-->", "expected KERNEL/REV[@SELECTOR] QUANTITY")):
        root = repo_with(tmp_path / str(abs(hash(text))), "# KERNEL_LOG\n\n" + text + "\n")
        r = run(root)
        assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output, r.output


def test_a_share_figure_sums_the_matching_kernels_of_the_launch(tmp_path):
    rec = make_record("torch")
    rec["kernel_times"] = {"total_us": 200.0, "launches": 4, "kernels": [
        {"name": "sm80_xmma_gemm_f32", "count": 2, "us": 120.0},
        {"name": "cunn_SoftMaxForward", "count": 1, "us": 50.0},
        {"name": "vectorized_layer_norm_kernel", "count": 1, "us": 30.0}]}
    assert prose.quantity(tmp_path, profile_of(rec), "share:gemm", None) == 60.0
    assert prose.quantity(tmp_path, profile_of(rec), "share:softmax|layer_norm", None) == 40.0
    assert prose.quantity(tmp_path, profile_of(rec), "launches", None) == 4
    del rec["kernel_times"]
    with pytest.raises(KernlogError, match="not in its profile"):
        prose.quantity(tmp_path, profile_of(rec), "share:gemm", None)


def test_a_quoted_rate_is_the_stored_bytes_over_the_stored_time_to_the_last_digit(tmp_path):
    root = repo_with(tmp_path, "TB/s: <!--fig softmax/torch_compile tbps .6f-->?<!--/fig-->\n")
    assert run(root).exit_code == 0
    rec = make_record("torch_compile", median_ms=0.10, seed=1)
    tbps = rec["bytes_moved"] / rec["metrics"]["wall_ms"] / 1e9
    assert f"-->{tbps:.6f}<!--/fig-->" in (root / "KERNEL_LOG.md").read_text()



def test_a_note_s_unsourced_figure_fails_the_check_though_its_page_renders_it_in_a_generated_block(
        tmp_path, monkeypatch):
    """A note is rendered inside the page's generated blocks, which the page's own prose check
    passes over: `report --check` reads the notes file itself, and names it and the line."""
    from kernlog.render import notes as notes_module

    root = repo_with(tmp_path)
    # the scratch repository's kernels/ is this repository's: its notes are read from a folder of the test's
    monkeypatch.setattr(notes_module, "folder", lambda root, kernel: root / "notes" / kernel)
    notes = root / "notes" / "softmax" / "notes.md"
    notes.parent.mkdir(parents=True)
    notes.write_text("## story\n\nFused, it ran 1.4x faster.\n")
    run(root)
    r = run(root, "--check")
    assert r.exit_code == 2 and "notes/softmax/notes.md line 3: the figure '1.4x' comes from no profile" in r.stderr
    notes.write_text("## story\n\n<!--history 2026-11-28 abc1234-->Fused, it ran 1.4x faster.<!--/history-->\n")
    run(root)
    assert run(root, "--check").exit_code == 0
