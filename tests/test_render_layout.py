"""`kernlog report` in a team's own repository: the log and the pages where its [tool.kernlog]
says (log, reports), every link between them relative and resolving; each operator named from
the start ("not profiled yet", a page listing its ladder) and filled in once profiles exist; a
legend that speaks only of the data there is; known-wrong revisions named with their bugs."""
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main

from .helpers import make_record, put, scratch_repo

LAYOUT = '[tool.kernlog]\nkernels = "ops"\nreports = "docs/perf"\nlog = "docs/LOG.md"\n'
TOY = '''
from pathlib import Path

import torch

from kernlog.spec import Kernel, Revision

SRC = (Path(__file__),)


def _times2(off=None):
    def load():
        def launch(inputs, out):
            out.copy_(inputs[0] * 2)
            if off is not None:
                out[off] += 1.0
            return out
        return launch
    return load


KERNEL = Kernel(
    "toy",
    (Revision("right", "torch", SRC, _times2(), "x * 2, in one | pass"),
     Revision("racy", "torch", SRC, _times2((2, 1)), "x * 2 with a race", role="wrong",
              bug="a race leaves element [2, 1] one too high"),
     Revision("also_right", "torch", SRC, _times2(), "x * 2 again")),
    make_inputs=lambda shape, dtype, gen, device, case: (torch.randn(*shape, generator=gen, device=device),),
    make_output=lambda inputs: torch.empty_like(inputs[0]),
    reference=lambda inputs, out=None: inputs[0].double() * 2,
    bytes_moved=lambda shape, dtype: 8 * shape[0] * shape[1],
    check_shapes=((3, 5),), bench_shapes=((7, 33),), profile_shape=(7, 33), dtypes=("fp32",),
)
'''
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _forget_ops() -> None:
    for name in [m for m in sys.modules if m == "ops" or m.startswith("ops.")]:
        del sys.modules[name]


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A repository with its operators in ops/ (the toy ladder, one revision known wrong), its
    log at docs/LOG.md and its pages in docs/perf/, nothing profiled."""
    root = tmp_path / "team"
    (root / "ops" / "toy").mkdir(parents=True)
    (root / "pyproject.toml").write_text(LAYOUT)
    (root / "ops" / "toy" / "__init__.py").write_text(TOY)
    (root / "profiles").mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    _forget_ops()
    yield root
    _forget_ops()


def run(root: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def links(path: Path) -> list[str]:
    """The relative links of a Markdown file (web addresses and anchors left out)."""
    return [t for t in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:|#", t)]


def broken(root: Path) -> list[str]:
    """Each relative link of every Markdown file under root that points at no file."""
    return [f"{md.relative_to(root)} -> {t}" for md in sorted(root.rglob("*.md")) if "ops" not in md.parts
            for t in links(md) if not (md.parent / t.split("#")[0]).is_file()]


def test_a_fresh_repository_gets_its_log_and_a_page_per_operator_where_it_says(team):
    got = run(team, "report")
    assert got.exit_code == 0, got.output
    assert got.stdout.splitlines() == [f"wrote docs/LOG.md (in {team.resolve()})"]  # --root away from here: named
    log, page = team / "docs" / "LOG.md", team / "docs" / "perf" / "toy.md"
    assert log.is_file() and page.is_file()
    assert not (team / "KERNEL_LOG.md").exists() and not (team / "reports").exists()
    text = log.read_text()
    row = next(ln for ln in text.splitlines() if ln.startswith("| toy |"))
    assert "not profiled yet" in row and "`kernlog profile toy` on a GPU machine" in row
    assert "[docs/perf/toy.md](perf/toy.md)" in row  # named from the root, linked from the log
    assert "one page per kernel under docs/perf/" in text and text.startswith("# LOG\n")
    assert "[Front page](../LOG.md)" in page.read_text()
    assert broken(team) == []
    assert run(team, "report", "--check").exit_code == 0


def test_a_fresh_log_speaks_of_no_data_it_does_not_have(team):
    assert run(team, "report").exit_code == 0
    text = (team / "docs" / "LOG.md").read_text()
    for theirs in ("cuBLAS", "H100", "8192", "Legend"):
        assert theirs not in text, theirs


def test_an_unprofiled_operators_page_lists_its_ladder_and_its_known_wrong_revisions(team):
    assert run(team, "report").exit_code == 0
    page = (team / "docs" / "perf" / "toy.md").read_text()
    assert "Not profiled yet: run `kernlog profile toy` on a GPU machine" in page
    assert "| right | torch | step | x * 2, in one \\| pass |" in page
    assert "| racy | torch | wrong | x * 2 with a race |" in page
    wrong = page.split("### Known-wrong revisions", 1)[1]
    assert "- racy: a race leaves element [2, 1] one too high; the gate rejects it" in wrong
    assert "right" not in wrong


def test_list_names_a_known_wrong_revision_with_its_bug(team):
    got = run(team, "list")
    assert got.exit_code == 0, got.output
    racy = next(ln.split() for ln in got.stdout.splitlines() if ln.split()[:1] == ["racy"])
    assert racy[1:3] == ["torch", "wrong"]
    assert " ".join(racy[3:]) == "never profiled (known wrong: a race leaves element [2, 1] one too high)"
    right = next(ln.split() for ln in got.stdout.splitlines() if ln.split()[:1] == ["right"])
    assert " ".join(right[3:]) == "not profiled"


def test_check_names_the_configured_log(team):
    assert run(team, "report").exit_code == 0
    log = team / "docs" / "LOG.md"
    assert run(team, "report", "--check").stdout.splitlines() == ["docs/LOG.md and its plots are up to date"]
    log.write_text(log.read_text().replace("| toy |", "| EDITED |"))
    got = run(team, "report", "--check")
    assert got.exit_code == 2 and "docs/LOG.md is out of date" in got.output


@pytest.fixture
def shop(tmp_path):
    """This repository's kernels (softmax's profiles are what helpers build), its log at
    docs/LOG.md and its pages and plots in docs/perf/. The kernels' notes are left out: their
    links are written from this repository's reports/ folder, and would not resolve from docs/perf/."""
    scratch_repo(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kernlog]\nreports = "docs/perf"\nlog = "docs/LOG.md"\n')
    return tmp_path


def test_a_page_fills_in_once_profiles_exist_its_plots_beside_it(shop):
    assert run(shop, "report").exit_code == 0
    page = shop / "docs" / "perf" / "softmax.md"
    assert "Not profiled yet" in page.read_text()
    put(shop, make_record("torch", median_ms=0.12))
    put(shop, make_record("torch_compile", median_ms=0.09, seed=1))
    got = run(shop, "report")
    assert got.exit_code == 0, got.output
    at = re.escape(str(shop.resolve()))
    last = got.stdout.splitlines()[-1]
    assert re.match(rf"wrote docs/LOG\.md and drew \d+ plot\(s\) in docs/perf/ \(in {at}\)$", last), last
    text = page.read_text()
    assert "Not profiled yet" not in text and "## softmax: the evidence" in text
    plots = sorted(p.name for p in (shop / "docs" / "perf").glob("*.svg"))
    assert plots and not (shop / "reports").exists()
    linked = [t for t in links(page) if t.endswith(".svg")]
    assert linked and set(linked) <= set(plots)  # beside the page, linked by name
    assert broken(shop) == []
    assert "`profiles/nvidia-h100-80gb-hbm3/softmax/" in text
    assert run(shop, "report", "--check").exit_code == 0


def test_the_legend_names_cublas_only_beside_a_matmul_kernels_figures(tmp_path):
    root = scratch_repo(tmp_path)  # the default layout: KERNEL_LOG.md, reports/
    put(root, make_record("torch", median_ms=0.12))
    assert run(root, "report").exit_code == 0
    log = (root / "KERNEL_LOG.md").read_text()
    assert "### Legend" in log and "**% of copy**" in log  # softmax's figures are there
    assert "cuBLAS" not in log  # every matmul kernel is not profiled yet
    assert "| matmul_relu | – | – | not profiled yet" in log
    assert "[reports/matmul_relu.md](reports/matmul_relu.md)" in log
    assert broken(root) == []


@pytest.mark.parametrize("kernlogs, stray, own, own_text, said", [
    ("softmax_arc_*.svg", "old_sweep.svg", "diagram.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>",
     "docs/perf/old_sweep.svg is linked from nowhere"),
    ("softmax.md", "old_op.md", "design.md", "# How we tune\n", "docs/perf/old_op.md is the page of no operator"),
])
def test_a_file_kernlog_wrote_that_nothing_names_fails_the_check_and_report_removes_it(shop, kernlogs, stray, own,
                                                                                        own_text, said):
    """A plot kernlog drew (its data digest in it) that no page links, or a kernel page it wrote
    (its head block) whose operator folder is gone, is named by the check and removed by report;
    the team's own image or page in that folder is neither."""
    put(shop, make_record("torch", median_ms=0.12))
    assert run(shop, "report").exit_code == 0
    written = next((shop / "docs" / "perf").glob(kernlogs))
    stray, own = written.with_name(stray), written.with_name(own)
    stray.write_text(written.read_text())
    own.write_text(own_text)
    got = run(shop, "report", "--check")
    assert got.exit_code == 2 and said in got.output
    assert own.name not in got.output
    assert run(shop, "report").exit_code == 0 and not stray.exists() and own.exists() and written.exists()
    assert run(shop, "report", "--check").exit_code == 0


def test_the_page_of_an_operator_gone_that_holds_prose_of_its_own_is_named_and_kept(shop):
    """Prose a team wrote on its page, outside kernlog's blocks, is never deleted with the page."""
    assert run(shop, "report").exit_code == 0
    page = shop / "docs" / "perf" / "softmax.md"
    old = page.with_name("renamed_op.md")
    old.write_text(page.read_text() + "\n## Our findings\n\nThe tail matters.\n")
    said = ("docs/perf/renamed_op.md is the page of no operator (its folder is gone) and holds prose of its own, "
            "which `kernlog report` keeps: move that prose, then `git rm docs/perf/renamed_op.md`")
    for _ in range(2):
        got = run(shop, "report", "--check")
        assert got.exit_code == 2 and got.stderr == f"kernlog: {said}\n", got.output
        done = run(shop, "report")
        assert done.exit_code == 0 and f"warning: {said}\n" in done.stderr and "The tail matters." in old.read_text()
    old.unlink()
    assert run(shop, "report", "--check").exit_code == 0


def test_links_between_log_pages_and_plots_are_relative_to_each_file():
    from kernlog.render import paths

    default = paths.Paths()
    assert default.from_log(default.page("softmax")) == "reports/softmax.md"
    assert default.front == "../KERNEL_LOG.md" and default.link("reports/a.svg", "reports/softmax.md") == "a.svg"
    team = paths.Paths(log="docs/LOG.md", reports="docs/perf")
    assert team.from_log(team.page("toy")) == "perf/toy.md" and team.front == "../LOG.md"
    apart = paths.Paths(log="LOG.md", reports="site/kernels")
    assert apart.from_log(apart.triage) == "site/kernels/triage.md" and apart.front == "../../LOG.md"



def test_a_page_with_nothing_stored_opens_with_its_notes_story_and_next(team):
    """Before the first profile, the team's notes.md story and next are the page's first words after its title, above
    the list of revisions (next had been left out, and the story sat under the list's heading)."""
    notes = "## story\n\nWhy toy exists.\n\n## next\n\nProfile it on the H100.\n"
    (team / "ops" / "toy" / "notes.md").write_text(notes)
    assert run(team, "report").exit_code == 0, run(team, "report").output
    page = (team / "docs" / "perf" / "toy.md").read_text()
    assert "Why toy exists." in page and "**Next:** Profile it on the H100." in page
    assert page.index("Why toy exists.") < page.index("**Next:** Profile it") < page.index("### Revisions")
