"""The README and docs/ run: every kernlog command in their fenced blocks runs in-process on
the committed profiles (click's CliRunner) and exits 0, or the status its line states.

The conventions (docs/developing.md, "Examples that run"): commands sit in blocks fenced `sh`,
`console` (only its `$ ` lines) or bare; `# gpu` opening a line's comment, or `gpu` in the
fence's info string, marks a command that needs a GPU (parsed with --help, not run);
`# exit N`, alone or before a colon, opening the comment is the status it must give. Lines of other programs (make,
pip, git, source, python -m models...) are skipped, but must be programs this file knows."""
from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

RUN_FENCES = {"", "sh", "bash", "shell", "console"}
KERNLOG = {"kernlog", ".venv/bin/kernlog"}
PYTHONS = {"python", "python3", ".venv/bin/python"}
# Programs an example may run that are not kernlog: skipped, but a name outside this set (a
# mistyped `kernlg`) fails test_every_line_is_a_known_program.
SHELL = {"make", "pip", ".venv/bin/pip", "git", "source", "cd", "export", "bash", "ncu", "scripts/gpu.sh",
         "mutmut", ".venv/bin/mutmut", *PYTHONS}
OPERATORS = set("();<>|&")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

# These fail until a name without a GPU selector defaults to one GPU: softmax has profiles on
# two today ("has 2 profiles; name one"). Remove the set once the store work lands.
@dataclass(frozen=True)
class Example:
    where: str                      # PAGE:LINE
    line: str                       # the command as written, without its comment
    program: str                    # kernlog, or the other program it runs
    args: tuple[str, ...] = ()      # kernlog's arguments
    env: dict = field(default_factory=dict, hash=False, compare=False)
    gpu: bool = False
    exit: int = 0
    problem: str | None = None      # why it cannot run in-process

    @property
    def is_kernlog(self) -> bool:
        return self.program == "kernlog"


def split_comment(line: str) -> tuple[str, str]:
    """(code, comment): a `#` outside quotes that starts a word starts the comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def parse_command(code: str, comment: str, where: str, gpu_block: bool) -> Example:
    lexer = shlex.shlex(code, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    gpu = gpu_block or bool(re.match(r"#\s*gpu\b", comment))
    status = re.match(r"#\s*exit\s+(\d+)\s*(?::|$)", comment)
    program, args = (words[0] if words else ""), words[1:]
    if program in PYTHONS and args[:2] == ["-m", "kernlog"]:
        program, args = "kernlog", args[2:]
    if program in KERNLOG:
        program = "kernlog"
    problem = None
    if any(w and set(w) <= OPERATORS for w in words):
        problem = "a pipe, list or redirection: it cannot run in-process (docs/developing.md)"
    return Example(where, code, program, tuple(args), env, gpu, int(status.group(1)) if status else 0, problem)


def examples(text: str, page: str) -> list[Example]:
    """Every command line of the runnable fenced blocks of one markdown text."""
    found, fence, info, pending, start = [], None, "", "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        opening = re.match(r"^\s*(`{3,}|~{3,})\s*(.*)$", raw)
        if fence is None:
            if opening:
                fence, info = opening.group(1), opening.group(2).split()
            continue
        if opening and opening.group(1).startswith(fence) and not opening.group(2):
            fence = None
            continue
        lang = info[0] if info else ""
        if lang not in RUN_FENCES:
            continue
        line = raw.strip()
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        code, comment = split_comment(line)
        if not code:
            continue
        found.append(parse_command(code, comment, f"{page}:{start}", "gpu" in info[1:]))
    return found


def entry_point():
    """The console script's function, found as pip finds it: through pyproject.toml's
    [project.scripts], so the test follows the CLI wherever it moves. (kernlog/__main__.py
    runs the CLI when imported, so it is not imported here.)"""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["kernlog"].partition(":")
    return getattr(importlib.import_module(module), attr)


def run(example: Example, extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """(exit status, output) of one kernlog example, in-process."""
    result = CliRunner().invoke(entry_point(), ["--root", str(ROOT), *example.args, *extra], env=example.env,
                                prog_name="kernlog")
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        out += "".join(traceback.format_exception(result.exception))
    return result.exit_code, out


def failures(items: list[Example]) -> list[str]:
    """One line per example that does not give the status its docs state."""
    bad = []
    for ex in items:
        if ex.problem:
            bad.append(f"{ex.where}: `{ex.line}`: {ex.problem}")
            continue
        code, out = run(ex)
        if code != ex.exit:
            bad.append(f"{ex.where}: `{ex.line}` exited {code}, the docs say {ex.exit}: {out.strip()[-1500:]}")
    return bad


ALL = [ex for page in PAGES for ex in examples(page.read_text(), str(page.relative_to(ROOT)))]
# A page marked so runs its examples in a new repository, in order, from the installed wheel
# (tests/test_adopt.py), not here against this one.
NEW_REPOSITORY = "<!-- examples: a new repository"
ELSEWHERE = {str(p.relative_to(ROOT)) for p in PAGES if NEW_REPOSITORY in p.read_text()}
RUNNABLE = [ex for ex in ALL if ex.is_kernlog and not ex.gpu and ex.where.split(":")[0] not in ELSEWHERE]
ON_GPU = [ex for ex in ALL if ex.is_kernlog and ex.gpu]


def _param(ex: Example):
    return pytest.param(ex, id=f"{ex.where} {' '.join(ex.args)}")


def _tree_state() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", "profiles", "reports", "KERNEL_LOG.md"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def tree_before():
    """The tree's state before this file's first example ran (other files' tests ran before)."""
    return _tree_state()


def distinct(items: list[Example]) -> list[Example]:
    """One example per distinct command (its arguments, environment and stated status), naming
    every place the docs give it: each runs in-process against the same unchanged tree
    (test_the_examples_changed_nothing), so a repeat gives the same status; `report --check`,
    given twice, took 8 s of CPU each time."""
    places: dict[tuple, list[Example]] = {}
    for ex in items:
        places.setdefault((ex.args, tuple(sorted(ex.env.items())), ex.exit, ex.problem), []).append(ex)
    return [replace(same[0], where=", ".join(e.where for e in same)) for same in places.values()]


@pytest.mark.parametrize("ex", [_param(ex) for ex in distinct(RUNNABLE)])
def test_example_runs(ex, monkeypatch, tree_before):
    if not (ROOT / ".git").exists():  # a copy without its history (`mutmut run`'s mutants/)
        pytest.skip("not a git checkout: the examples read the repository's history (history, compare, the log)")
    monkeypatch.chdir(ROOT)  # a path in an example is relative to the repository root
    assert not failures([ex])


@pytest.mark.parametrize("ex", [_param(ex) for ex in ON_GPU])
def test_gpu_example_names_real_options(ex):
    """A GPU example is not run, but its command and options must exist: --help after them
    exits 0 once click has parsed them, 2 on an unknown command or option."""
    assert not ex.problem, ex.problem
    code, out = run(ex, ("--help",))
    assert code == 0, f"{ex.where}: `{ex.line}`: {out.strip()[-800:]}"


def test_the_pages_have_examples():
    pages = {ex.where.split(":")[0] for ex in RUNNABLE}
    assert "README.md" in pages and len(RUNNABLE) >= 30, sorted(pages)


def test_every_line_is_a_known_program():
    unknown = [f"{ex.where}: `{ex.line}`" for ex in ALL if not ex.is_kernlog and ex.program not in SHELL]
    assert not unknown, "neither kernlog nor a known program:\n" + "\n".join(unknown)


BROKEN = """\
Some prose.

```sh
kernlog list
kernlog show nope/nothing
kernlog show nope/nothing   # exit 2: stated, so it passes
make test
```

```sh gpu
kernlog profile softmax
```

```console
$ .venv/bin/kernlog list   # exit 1
output that is not run
$ python -m kernlog list | head
```

```text
kernlog show nope/nothing
```
"""


def test_the_conventions_parse():
    found = examples(BROKEN, "broken.md")
    assert [(ex.where, ex.program, ex.args, ex.gpu, ex.exit) for ex in found] == [
        ("broken.md:4", "kernlog", ("list",), False, 0),
        ("broken.md:5", "kernlog", ("show", "nope/nothing"), False, 0),
        ("broken.md:6", "kernlog", ("show", "nope/nothing"), False, 2),
        ("broken.md:7", "make", ("test",), False, 0),
        ("broken.md:11", "kernlog", ("profile", "softmax"), True, 0),
        ("broken.md:15", "kernlog", ("list",), False, 1),
        ("broken.md:17", "kernlog", ("list", "|", "head"), False, 0),
    ]
    continued = examples("```sh\nTRITON_INTERPRET=1 kernlog diff a/b \\\n  c/d  # gpu\n```\n", "c.md")
    assert [(ex.where, ex.env, ex.args, ex.gpu) for ex in continued] == [
        ("c.md:2", {"TRITON_INTERPRET": "1"}, ("diff", "a/b", "c/d"), True)]
    assert split_comment("kernlog diff 'a #b' c  # exit 2") == ("kernlog diff 'a #b' c", "# exit 2")


def test_a_broken_example_fails(monkeypatch):
    monkeypatch.chdir(ROOT)
    runnable = [ex for ex in examples(BROKEN, "broken.md") if ex.is_kernlog and not ex.gpu]
    bad = failures(runnable)
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in bad] == [
        "broken.md:5", "broken.md:15", "broken.md:17"]
    assert "exited 2, the docs say 0" in bad[0] and "no kernel 'nope'" in bad[0]
    assert "exited 0, the docs say 1" in bad[1]
    assert "cannot run in-process" in bad[2]


def test_the_examples_changed_nothing(tree_before):
    """Runs after the examples (pytest keeps a file's order): none of them wrote into the tree."""
    assert _tree_state() == tree_before
