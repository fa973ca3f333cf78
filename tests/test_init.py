"""`kernlog init`: what a repository needs, written where missing, never over a file without
--force, and each file named as written or kept."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main


@pytest.fixture
def repo(tmp_path, monkeypatch, own_kernels_package):
    """A new git repository (its kernels/ not this one's); the operators it imports leave
    sys.modules and sys.path as they were."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        # the repository's own modules only: a kernlog module imported for the first time here
        # stays, or the next test's command would raise another KernlogError class than the one
        # its error handler catches (as when this file ran first in a fresh process)
        module = sys.modules[name]
        where = [getattr(module, "__file__", None), *(getattr(module, "__path__", None) or ())]  # a namespace: its path
        if any(w and Path(w).resolve().is_relative_to(tmp_path.resolve()) for w in where):
            del sys.modules[name]


def init(root: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), "init", *args])


def test_init_writes_the_section_the_example_the_ignores_the_log_and_the_workflow(repo):
    (repo / "pyproject.toml").write_text('[project]\nname = "team"\n')
    (repo / ".gitignore").write_text("__pycache__/\n*.so\n")
    done = init(repo, "--kernels-dir", "ops", "--kernel", "fused_add")
    assert done.exit_code == 0, done.output
    pyproject = (repo / "pyproject.toml").read_text()
    assert pyproject.startswith('[project]\nname = "team"\n') and 'kernels = "ops"' in pyproject
    assert "pyproject.toml: added [tool.kernlog]" in done.output
    assert (repo / "ops" / "fused_add" / "v0_two_kernels.py").is_file()
    assert 'name="fused_add"' in (repo / "ops" / "fused_add" / "__init__.py").read_text()
    ignore = (repo / ".gitignore").read_text().splitlines()
    assert ignore.count("__pycache__/") == 1 and ".cache/" in ignore and "*.so" in ignore
    log = (repo / "KERNEL_LOG.md").read_text()
    assert "fused_add" in log and "not profiled yet" in log and (repo / "reports" / "fused_add.md").is_file()
    flow = (repo / ".github" / "workflows" / "kernlog.yml").read_text()
    assert 'kernlog compare "origin/${{ github.base_ref }}"' in flow and "$(kernlog list --names)" in flow
    assert "git add profiles\n" in flow and "git add KERNEL_LOG.md reports\n" in flow
    assert not re.search(r"(?<!\$)\{\{", flow), "a template expression left unrendered"
    # the jobs that read history (compare; report's history plots) check out every commit: a shallow one refuses
    log_job = flow.split("\n  log:\n", 1)[1]
    assert "fetch-depth: 0" in flow.split("\n  gpu:\n", 1)[0] and "fetch-depth: 0" in log_job
    assert CliRunner().invoke(main, ["--root", str(repo), "report", "--check"]).exit_code == 0
    # kernlog is not on PyPI: KERNLOG starts empty, each job stops before `pip install ""`, and init says so
    assert '\n  KERNLOG: ""\n' in flow
    assert "note: set KERNLOG at the top of .github/workflows/kernlog.yml" in done.output
    # an empty or failed listing stops the job, where a loop over $(...) would gate nothing and pass
    assert flow.count('ops=$(kernlog list --names) && test -n "$ops" || exit 1\n') == 2
    installs = flow.count('- run: pip install "$KERNLOG"')
    assert installs == 3 and flow.count('- run: test -n "$KERNLOG" || {') == installs
    flow_path = repo / ".github" / "workflows" / "kernlog.yml"
    flow_path.write_text(flow.replace('KERNLOG: ""\n', 'KERNLOG: "kernlog @ git+https://example.org/k"\n'))
    assert "note: set KERNLOG" not in init(repo, "--kernels-dir", "ops").output  # set: no note


def test_init_keeps_every_file_that_exists_unless_forced(repo):
    assert init(repo).exit_code == 0
    v1 = repo / "kernels" / "add_relu" / "v1_fused.py"
    v1.write_text("# my own kernel now\n")
    again = init(repo)
    assert again.exit_code == 0 and "kernels/add_relu/v1_fused.py: kept (exists; --force replaces it)" in again.output
    assert v1.read_text() == "# my own kernel now\n"
    assert "pyproject.toml: kept [tool.kernlog]" in again.output
    forced = init(repo, "--force")
    assert forced.exit_code == 0 and "kernels/add_relu/v1_fused.py: replaced" in forced.output
    assert "my own kernel" not in v1.read_text()


@pytest.mark.parametrize("args, message", [
    (("--kernel", "Bad-Name"), "an operator's name is lower case"),
    (("--kernels-dir", ".."), "name a folder inside the repository"),
])
def test_bad_options_are_one_line(repo, args, message):
    done = init(repo, *args)
    assert done.exit_code == 2 and message in done.output and "Traceback" not in done.output
    assert not (repo / "pyproject.toml").exists()  # nothing half-written


def test_another_kernels_folder_than_the_configured_one_needs_force(repo):
    (repo / "pyproject.toml").write_text('[tool.kernlog]\nkernels = "ops"\n')
    done = init(repo, "--kernels-dir", "gpu")
    assert done.exit_code == 2 and "already names kernels = 'ops'" in done.output
    assert not (repo / "gpu").exists()


def test_the_notes_of_an_operator_not_profiled_yet_are_on_its_page(repo):
    """A team writes its notes before its first GPU run: the story and each revision's note are on
    the page from the first `kernlog report`, beside the declared ladder."""
    assert init(repo).exit_code == 0
    (repo / "kernels" / "add_relu" / "notes.md").write_text(
        "## story\n\nWe fuse the add into the ReLU.\n\n## v1_fused\n\nOne kernel: one read of each input.\n")
    done = CliRunner().invoke(main, ["--root", str(repo), "report"])
    assert done.exit_code == 0, done.output
    page = (repo / "reports" / "add_relu.md").read_text()
    assert "We fuse the add into the ReLU." in page and "**v1_fused.** One kernel: one read of each input." in page
    assert page.index("We fuse") < page.index("| v0_two_kernels |")
    assert CliRunner().invoke(main, ["--root", str(repo), "report", "--check"]).exit_code == 0
