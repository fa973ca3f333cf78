"""The published pages' own rules (kernlog.render.limits): a ceiling quoted in prose says what
ceilings.json stores, a figure over two runs carries §, and no page, paragraph or table
outgrows what a reader takes in; `report --check` names each page, line and rule."""
import json

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main
from kernlog.errors import KernlogError
from kernlog.render import limits, paths

H100 = "nvidia-h100-80gb-hbm3"
CEILINGS = {H100: {"copy_gbps": 3001.29, "matmul_bf16_tflops": 776.08, "matmul_shape": [8192, 8192, 8192],
                   "copy_bytes": 2 ** 31},
            "nvidia-h200": {"copy_gbps": 4240.95, "matmul_bf16_tflops": 791.37, "matmul_shape": [8192, 8192, 8192],
                            "copy_bytes": 2 ** 31}}


def flagged(text, ceilings=CEILINGS):
    return [n for n, _ in limits.ceiling_mismatches(text, ceilings)]


def test_a_ceiling_in_prose_must_be_the_stored_one_at_its_written_precision():
    wrong = "On the H100, 0.75-0.88x the cuBLAS roof of 795.\n\nThe copy ceiling of 3.1 TB/s on the H100.\n"
    assert flagged(wrong) == [1, 3]
    (_, msg), _ = limits.ceiling_mismatches(wrong, CEILINGS, {H100: f"profiles/{H100}/ceilings.json"})
    assert "'cuBLAS roof of 795' differs from the stored cuBLAS bf16 ceiling, 776 TFLOP/s" in msg
    assert f"profiles/{H100}/ceilings.json" in msg
    right = ("On the H100: the cuBLAS roof of 776, a copy ceiling of 3.0 TB/s (3001 GB/s, 3,001 GB/s), "
             "0.9x cuBLAS 776 TFLOP/s.\n")
    assert flagged(right) == []
    assert flagged("H100. Against plain `A @ B` (cuBLAS, 791 TFLOP/s at 8192^3 in the latest ceiling).\n") == [1]
    assert flagged("On the H200, cuBLAS 791.\n") == []  # the GPU the paragraph names
    assert flagged("cuBLAS 791.\n") == []  # no GPU named: any stored one's ceiling


def test_what_is_not_a_stored_ceiling_is_not_read():
    spared = ("On the H100: cuBLAS 449.9 us, cuBLAS 3 stages, 0.93x cuBLAS, cuBLAS's 639 at 128x128, cuBLAS 600 "
              "TFLOP/s at 4096^3, a copy ceiling of 2.7 TB/s at 64 MB, the fp32 FMA ceiling (~50 TFLOP/s), "
              "a DRAM bandwidth ceiling of 3.35 TB/s, `copy ceiling of 9 TB/s`.\n"
              "<!--history 2026-11-27 60c6c31-->the cuBLAS roof of 795<!--/history-->\n"
              "<!-- kernlog:begin head -->\nthe cuBLAS roof of 795\n<!-- kernlog:end head -->\n"
              "the cuBLAS roof of <!--fig matmul_relu/torch matmul_bf16_tflops .0f-->795<!--/fig-->\n")
    assert flagged(spared) == []
    assert flagged("the cuBLAS roof of <!--fig matmul_relu/torch tflops .0f-->795<!--/fig-->\n") == [1]
    generated = "<!-- kernlog:begin head -->\nthe cuBLAS roof of 795\n<!-- kernlog:end head -->\n"
    assert [n for n, _ in limits.ceiling_mismatches(generated, CEILINGS, generated=True)] == [2]


def test_a_figure_over_two_runs_carries_the_mark():
    assert limits.cross_run("101%") == "101%§<!--xrun-->"
    assert limits.runs_apart("r1", "r2") and not limits.runs_apart("r1", "r1") and not limits.runs_apart("r1", None)
    table = "| point | of copy |\n|---|---|\n| 8192x4096 | {} |\n"
    assert limits.unmarked_cross_runs(table.format(limits.cross_run("101%"))) == []
    assert limits.unmarked_cross_runs(table.format("101%")) == []  # one run: no mark needed
    (line, msg), = limits.unmarked_cross_runs(table.format("101%" + limits.XRUN))
    assert line == 3 and "'101%' is over two runs but lacks §" in msg


def test_a_page_over_the_size_limits_fails():
    assert limits.over_size("x\n" * limits.MAX_LINES) == []
    assert limits.over_size("x\n" * (limits.MAX_LINES + 1)) == [(451, "451 lines (at most 450)")]
    big = ("y" * 199 + "\n") * 400  # 80 000 bytes in 400 lines
    assert limits.over_size(big) == [(308, "80000 bytes (at most 61440)")]
    assert limits.over_size(("y" * 149 + "\n") * 400) == []


def test_a_paragraph_over_the_limit_fails_counting_what_a_reader_sees():
    at_limit = "word " * 159 + "fives"  # 800 visible characters, however the lines break
    assert limits.long_paragraphs(at_limit.replace("word word", "word\nword")) == []
    (line, msg), = limits.long_paragraphs("# Title\n\n" + at_limit + "s\n")
    assert line == 3 and "801 visible characters" in msg
    hidden = "<!--fig softmax/v5_tuned tbps .2f-->2.88<!--/fig--> [plot](" + "p" * 400 + ".svg) " + "**a** " * 100
    assert limits.long_paragraphs(hidden + "<!-- a comment " + "c" * 900 + " -->\n") == []
    items = "".join(f"- item {i}: {'z' * 700}\n" for i in range(3))  # each item a paragraph of its own
    table = "| a | b |\n|---|---|\n" + f"| {'t' * 900} | b |\n"
    code = "```\n" + "c" * 900 + "\n```\n"
    assert limits.long_paragraphs(items + "\n" + table + "\n" + code) == []
    assert [n for n, _ in limits.long_paragraphs(items.replace("- item 1", "  item 1"))] == [1]


def test_a_table_wider_than_the_limit_fails():
    def table(cols):
        return "| " + " | ".join(f"c{i}" for i in range(cols)) + " |\n|" + "---|" * cols + "\n"

    assert limits.wide_tables("text\n\n" + table(12)) == []
    (line, msg), = limits.wide_tables("text\n\n" + table(13))
    assert line == 3 and "13 columns (at most 12)" in msg
    assert limits.wide_tables("```\n" + table(13) + "```\n") == []
    escaped = "| a \\| b | <!--fig m/r share:x|y .0f-->5<!--/fig--> |\n|---|---|\n"
    assert limits.tables(escaped) == [(1, 2)]


def _repo(tmp_path, page):
    root = tmp_path
    (root / "kernels").mkdir()
    (root / "profiles" / H100).mkdir(parents=True)
    (root / "profiles" / H100 / "ceilings.json").write_text(json.dumps(CEILINGS[H100]))
    (root / "reports").mkdir()
    (root / "KERNEL_LOG.md").write_text("# Log\n\nThe [softmax page](reports/softmax.md) and [docs](https://x.md).\n")
    (root / "reports" / "softmax.md").write_text(page)
    return root


def test_check_names_the_file_line_and_rule_of_each_and_counts_the_rest(tmp_path):
    wide = "| " + " | ".join("c" * 13) + " |\n|" + "---|" * 13 + "\n"
    page = "# softmax\n\nOn the H100 the copy ceiling of 2.5 TB/s.\n\n" + (wide + "\n") * 9
    root = _repo(tmp_path, page)
    assert list(paths.published(root)) == ["KERNEL_LOG.md", "reports/softmax.md"]
    found = limits.violations(root)
    assert [(v.path, v.line, v.rule) for v in found][:2] == [("reports/softmax.md", 3, "ceiling"),
                                                             ("reports/softmax.md", 5, "table")]
    with pytest.raises(KernlogError) as err:
        limits.check(root)
    said = str(err.value)
    assert said.startswith("10 page rule(s) broken: reports/softmax.md line 3: ceiling: '")
    assert "reports/softmax.md line 8: table: a table of 13 columns" in said and "; and 2 more;" in said
    assert "run `kernlog report`" in said
    (root / "reports" / "softmax.md").write_text("# softmax\n\nOn the H100 the copy ceiling of 3.0 TB/s.\n")
    limits.check(root)


def test_a_relative_link_must_name_a_file_from_the_page_s_own_folder(tmp_path):
    """A kernel's notes render into reports/: their `history.md` link, right beside notes.md, is
    broken on the page; the same link written from reports/ holds. URLs, anchors, links in code
    and in comments are not read."""
    page = ("# softmax\n\nSee [history](history.md) and [plot](softmax_sweep.svg#top).\n\n"
            "Also [history](../kernels/softmax/history.md), [docs](https://x.org/a.md), [here](#next), "
            "`[code](nowhere.md)` <!-- [gone](gone.md) -->.\n\n```\n[fenced](nowhere.md)\n```\n")
    root = _repo(tmp_path, page)
    (root / "kernels" / "softmax").mkdir(parents=True)
    (root / "kernels" / "softmax" / "history.md").write_text("# history\n")
    (root / "reports" / "softmax_sweep.svg").write_text("<svg/>")
    found = [(v.path, v.line, v.rule, v.message) for v in limits.violations(root) if v.rule == "link"]
    assert found == [("reports/softmax.md", 3, "link", "link to history.md: no file reports/history.md")]
    # a title, <brackets>, an escaped space, a link from the root and a protocol-relative URL are
    # read as a viewer reads them; a link that leaves the repository, or with a title, still fails
    (root / "reports" / "a b.md").write_text("x\n")
    fine = ('[t](../kernels/softmax/history.md "the history") [s](<a b.md>) [e](a%20b.md) '
            "[r](/kernels/softmax/history.md) [c](//cdn.example/x.svg) [m](mailto:a@b.c)")
    assert limits.broken_links("reports/softmax.md", fine, lambda p: (root / p).exists()) == []
    bad = '[o](../../outside.md) [t](gone.md "a title")'
    assert limits.broken_links("reports/softmax.md", bad, lambda p: (root / p).exists()) == [
        (1, "link to ../../outside.md: outside the repository"), (1, "link to gone.md: no file reports/gone.md")]


def test_report_check_fails_on_a_broken_rule(tmp_path):
    root = _repo(tmp_path, "# softmax\n\nBy hand.\n")
    (root / "kernels" / "__init__.py").write_text("")  # a kernels package with no operator yet
    (root / "KERNEL_LOG.md").write_text("# KERNEL_LOG\n\nOn the H100: see [the page](reports/softmax.md).\n")

    def run(*args):
        return CliRunner().invoke(main, ["--root", str(root), "report", *args])

    assert run().exit_code == 0 and run("--check").exit_code == 0
    log = (root / "KERNEL_LOG.md").read_text()
    (root / "KERNEL_LOG.md").write_text(log.replace("On the H100:", "On the H100, cuBLAS 800:"))
    (root / "reports" / "softmax.md").write_text("# softmax\n\n" + "| c " * 13 + "|\n" + "|---" * 13 + "|\n")
    r = run("--check")
    assert r.exit_code == 2 and "2 page rule(s) broken: KERNEL_LOG.md line 3: ceiling: 'cuBLAS 800' differs" in r.stderr
    assert "reports/softmax.md line 3: table: a table of 13 columns" in r.stderr
