"""docs/developing.md's own commands run: tests/test_readme.py runs every kernlog command of the
docs and only names the other programs, so a developer command (pytest on one file, ruff, the
hand mutants, mutmut) could rot unseen. Each runs here as written where that takes seconds, as a
collection where it is pytest on named test files, and parsed (`--help` after it: the options
are checked, nothing runs) where it takes minutes: the whole or slow suite, every mutant, mutmut.
A line of the page that this file does not know how to check fails, so a new command gets one."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_readme import PYTHONS, examples

ROOT = Path(__file__).resolve().parent.parent
PAGE = "docs/developing.md"
LINES = [ex for ex in examples((ROOT / PAGE).read_text(), PAGE) if not ex.is_kernlog]
BIN = Path(sys.executable).parent  # the environment's .venv/bin, wherever make put it


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _ok(done: subprocess.CompletedProcess, line: str) -> str:
    assert done.returncode == 0, f"{PAGE}: `{line}` exited {done.returncode}: {(done.stdout + done.stderr)[-1500:]}"
    return done.stdout


def test_the_page_has_the_commands_this_file_checks():
    kinds = {(ex.program, ex.args[0] if ex.args else "") for ex in LINES}
    assert {(".venv/bin/python", "-m"), (".venv/bin/python", "scripts/mutants.py"), (".venv/bin/mutmut", "run"),
            (".venv/bin/pip", "install")} <= kinds, sorted(kinds)


@pytest.mark.parametrize("ex", LINES, ids=lambda ex: f"{ex.where} {ex.line}")
def test_a_developer_command_runs_or_parses(ex):
    """How each line is checked: the command the page gives, with the environment's own python
    (sys.executable) for .venv/bin/python, so it holds wherever `make` put the environment."""
    assert not ex.problem and not ex.env and not ex.gpu, ex
    args = list(ex.args)
    if ex.program in PYTHONS and args[:2] == ["-m", "pytest"]:
        files = [a for a in args if a.startswith("tests/")]
        if files:  # pytest on named files: they collect (running them is their own tests' job)
            out = _ok(_run([sys.executable, *args, "--collect-only", "-p", "no:cacheprovider"]), ex.line)
            assert all(f"{f}::" in out for f in files), out[-1500:]
        else:  # a whole suite (the slow one: minutes): its options parse, conftest's --run-slow among them
            assert "usage:" in _ok(_run([sys.executable, *args, "--help"]), ex.line)
    elif ex.program in PYTHONS and args[:2] == ["-m", "ruff"]:
        _ok(_run([sys.executable, *args]), ex.line)  # as written: ruff is seconds
    elif ex.program in PYTHONS and args[:1] == ["scripts/mutants.py"]:
        if "--list" in args:  # runs nothing: every mutant listed, none stale (it exits 2 on a stale one)
            out = _ok(_run([sys.executable, *args]), ex.line)
            assert out.rstrip().endswith(" stale") and " 0 stale" in out, out[-500:]
        else:  # mutants run for minutes: the options parse, and the mutants they choose exist
            assert "usage:" in _ok(_run([sys.executable, *args, "--help"]), ex.line)
            listed = _ok(_run([sys.executable, *args, "--list"]), ex.line).strip().splitlines()
            assert len(listed) > 1 and not listed[-1].startswith("0 mutants"), listed
    elif ex.program == ".venv/bin/mutmut":
        mutmut = BIN / "mutmut"
        if not mutmut.exists() and shutil.which("mutmut") is None:
            pytest.skip("mutmut is not in the lock: the page installs it by hand first")
        # a run mutates for minutes or days: its subcommand and options parse
        assert "Usage:" in _ok(_run([str(mutmut if mutmut.exists() else "mutmut"), *args, "--help"]), ex.line)
    elif ex.program == ".venv/bin/pip" and args[:1] == ["install"]:
        # installing needs the network: the one package the page installs is mutmut, at an exact version
        assert len(args) == 2 and args[1].startswith("mutmut==") and args[1].count(".") == 2, ex.line
    else:
        pytest.fail(f"{ex.where}: `{ex.line}`: tests/test_developing.py does not know how to check it")
