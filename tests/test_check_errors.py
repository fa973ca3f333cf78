"""`kernlog check` in a user's own repository says what to do, in one line, where the revision is
not at fault: its import fails (the user's package not on the path) or it is a Triton kernel on a
machine with no GPU and no interpreter; the other revisions are still checked and the command
exits 2, not 3. A real failure names its case, its first bad element and its seed, and the same
seed draws the same inputs again."""
import re
import shutil
import sys

import pytest
from click.testing import CliRunner

from kernlog.capture import profiler
from kernlog.commands.main import main
from kernlog.errors import CannotRun
from kernlog.registry import load_kernel
from kernlog.run import gate

from .test_profiler import _cpu_profiler

OP = '''
from pathlib import Path

import torch

from kernlog.spec import Kernel, Revision

HERE = Path(__file__).parent
LOADED = []  # the revisions whose load() ran, in order


def _times2(name, off=()):
    """x * 2; each (row, col, by) of `off` added where the output has that element."""
    def load():
        LOADED.append(name)

        def launch(inputs, out):
            out.copy_(inputs[0] * 2)
            for row, col, by in off:
                if out.shape[0] > row and out.shape[1] > col:
                    out[row, col] += by
            return out
        return launch
    return load


def _needs_mypkg():
    LOADED.append("v1_fast")
    import mypkg  # noqa: F401 -- the user's own package, not installed here

    return _times2("v1_fast")()


def _triton():
    LOADED.append("v3_triton")

    def launch(inputs, out):  # what triton says where it has neither a GPU nor the interpreter
        raise RuntimeError("0 active drivers ([]). There should only be one.")
    return launch


KERNEL = Kernel(
    "myop",
    (Revision("v0_naive", "torch", (HERE / "v0_naive.py",), _times2("v0_naive"), "x * 2"),
     Revision("v1_fast", "torch", (HERE / "v1_fast.py",), _needs_mypkg, "x * 2 through mypkg"),
     Revision("v2_off", "torch", (HERE / "v0_naive.py",), _times2("v2_off", ((1, 4, 0.5), (2, 0, 3.0))),
              "x * 2, two elements off"),
     Revision("v3_triton", "triton", (HERE / "v3_triton.py",), _triton, "x * 2 in Triton"),
     Revision("v4_after", "torch", (HERE / "v0_naive.py",), _times2("v4_after"), "x * 2, checked last")),
    make_inputs=lambda shape, dtype, gen, device, case: (
        torch.randn(*shape, generator=gen, device=device).to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]),),
    make_output=lambda inputs: torch.empty_like(inputs[0]),
    reference=lambda inputs, out=None: inputs[0].double() * 2,
    bytes_moved=lambda shape, dtype: 8 * shape[0] * shape[1],
    check_shapes=((3, 5), (7, 33)), bench_shapes=((7, 33),), profile_shape=(7, 33), dtypes=("fp32", "bf16"),
)
'''
IMPORT_LINE = ("myop/v1_fast: cannot import mypkg (ops/myop/v1_fast.py: No module named 'mypkg'); "
               "install your package (pip install -e .) or put it on PYTHONPATH")


def _forget_ops() -> None:
    for name in [m for m in sys.modules if m == "ops" or m.startswith("ops.")]:
        del sys.modules[name]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A user's repository whose [tool.kernlog] keeps its operators in `ops/`, with the operator
    `myop`; its package imported fresh, and forgotten after (sys.path as it was)."""
    root = tmp_path / "team"
    (root / "ops" / "myop").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.kernlog]\nkernels = "ops"\n')
    (root / "ops" / "myop" / "__init__.py").write_text(OP)
    for name in ("v0_naive.py", "v1_fast.py", "v3_triton.py"):
        (root / "ops" / "myop" / name).write_text("# the revision's source\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    _forget_ops()
    yield root
    _forget_ops()


def check(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), "check", "myop", "--device", "cpu", *args])


def test_a_revision_that_cannot_import_is_one_line_and_the_others_are_still_checked(repo):
    got = check(repo, "--rev", "v0_naive", "--rev", "v1_fast", "--rev", "v4_after")
    assert got.exit_code == 2, got.output
    assert "Traceback" not in got.output
    assert got.stderr.splitlines() == [f"kernlog: {IMPORT_LINE}"], got.stderr  # its one line, and no other
    assert re.search(r"^v0_naive: ok ", got.stdout, re.M) and re.search(r"^v4_after: ok ", got.stdout, re.M)
    assert sys.modules["ops.myop"].LOADED == ["v0_naive", "v1_fast", "v4_after"]


def test_a_gate_failure_beside_an_import_failure_exits_3_naming_both(repo):
    got = check(repo, "--rev", "v1_fast", "--rev", "v2_off")
    assert got.exit_code == 3, got.output
    lines = got.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("kernlog: myop/v1_fast: cannot import mypkg"), lines
    assert lines[1] == "kernlog: failed the correctness gate: v2_off; not checked: v1_fast (said above)"


def test_the_profile_gate_says_an_import_failure_in_one_line_and_profiles_the_rest(repo, monkeypatch):
    """`kernlog profile` meets the same import: in its own gate process ("cannot_run"), or in
    this one; the other revisions are timed, and it ends in CannotRun (exit 2), not a traceback."""
    kernel = load_kernel(repo, "myop")
    monkeypatch.setattr(profiler, "DEVICE", "cpu")
    got = profiler.parallel_gates(repo, kernel, [kernel.revision("v1_fast"), kernel.revision("v0_naive")], 2,
                                  lambda s: None)
    assert got["v1_fast"][:2] == ("cannot_run", IMPORT_LINE)
    assert got["v0_naive"][0] == "ok"

    timed = []
    _cpu_profiler(monkeypatch, lambda *a, **k: None)
    monkeypatch.setattr(profiler, "_ncu_pass", lambda root, kernel, batch, *a: timed.extend(batch) or [])
    said = []
    with pytest.raises(CannotRun, match=r"not gated, so not profiled: v1_fast") as raised:
        profiler.profile(repo, kernel, [kernel.revision("v1_fast"), kernel.revision("v0_naive")],
                         profiler.Options(gate_workers=1), said.append)
    assert raised.value.exit_code == 2
    assert [t.rev.name for t in timed] == ["v0_naive"]
    assert any(s.endswith(f"myop/v1_fast 7x33 fp32: not gated: {IMPORT_LINE}") for s in said), said


def test_a_triton_revision_with_no_gpu_and_no_interpreter_is_told_to_set_it_not_failed(repo, monkeypatch):
    """Without TRITON_INTERPRET=1 and a GPU, triton cannot run at all ("0 active drivers"): that
    is the machine's, not the kernel's, said before the revision is loaded."""
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    got = check(repo, "--rev", "v3_triton", "--rev", "v0_naive")
    assert got.exit_code == 2, got.output
    assert got.stderr.splitlines() == ["kernlog: myop/v3_triton is a Triton kernel and this machine has no GPU: "
                                       "run TRITON_INTERPRET=1 kernlog check myop --device cpu"], got.stderr
    assert re.search(r"^v0_naive: ok ", got.stdout, re.M) and "v3_triton" not in got.stdout
    assert "v3_triton" not in sys.modules["ops.myop"].LOADED  # told before it is loaded
    # where the interpreter is on, it runs (and this stand-in fails, as triton would)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert check(repo, "--rev", "v3_triton").exit_code == 3


def test_a_failing_case_names_its_case_first_bad_element_and_seed_and_the_seed_repeats_it(repo):
    first = check(repo, "--rev", "v2_off")  # a fresh seed: new inputs each run, named where a case fails
    assert first.exit_code == 3, first.output
    case = first.stdout.splitlines()[1].strip()
    # v2_off is off at [1, 4] (by 0.5) and [2, 0] (by 3): the line names the first, expected against got
    m = re.fullmatch(r"v2_off 3x5 fp32 random: FAIL error \S+ over tolerance 1e-04; first bad element \[1, 4\]: "
                     r"expected (\S+), got (\S+); seed (\d+) \(rel err \S+\)", case)
    assert m and float(m[2]) - float(m[1]) == pytest.approx(0.5, abs=1e-5), case
    seed = m[3]
    again = f"the same inputs again: kernlog check myop --rev v2_off --device cpu --seed {seed}"
    assert first.stdout.splitlines()[2].strip() == again
    assert check(repo, "--rev", "v2_off", "--seed", seed).stdout == first.stdout  # its seed: the same inputs again
    assert check(repo, "--rev", "v2_off").stdout != first.stdout  # no seed: another fresh draw

    other = check(repo, "--rev", "v2_off", "--seed", "12345")
    assert other.exit_code == 3 and "seed 12345 (rel err" in other.stdout
    assert other.stdout.splitlines()[1] != first.stdout.splitlines()[1]  # other inputs, other values
    assert check(repo, "--rev", "v2_off", "--seed", "12345").stdout == other.stdout


def test_the_gate_draws_from_its_seed_and_names_it(repo):
    kernel = load_kernel(repo, "myop")
    rev = kernel.revision("v2_off")
    default = gate.check_revision(kernel, rev, "cpu")
    (seed,) = {r.seed for r in default}  # one fresh seed for every case, named on each result
    assert default == gate.check_revision(kernel, rev, "cpu", seed=seed)
    assert [r.line() for r in gate.check_revision(kernel, rev, "cpu", seed=7)] != [r.line() for r in default]


@pytest.mark.parametrize("edit, said", [
    (("    make_output=lambda inputs: torch.empty_like(inputs[0]),\n", ""),
     r"ops/myop/__init__\.py:\d+: TypeError: Kernel\.__init__\(\) missing 1 required positional argument: "
     r"'make_output'"),
    (("check_shapes=((3, 5), (7, 33))", "check_shapes=(3, 5)"),
     r"ops/myop/__init__\.py: check_shapes=\(3, 5\): a tuple of shapes, each a tuple of positive ints: "),
    (("profile_shape=(7, 33)", 'profile_shape="7x33"'),
     r"ops/myop/__init__\.py: profile_shape='7x33': a tuple of positive ints"),
    (('dtypes=("fp32", "bf16")', 'dtypes=("fp64",)'), r"ops/myop/__init__\.py: dtypes=\('fp64',\): fp64 is not one of"),
    (('    "myop",\n', '    "my_op",\n'), r"ops/myop/__init__\.py: Kernel\(name='my_op'\) in the folder 'myop'"),
    (("def _needs_mypkg():", "def _needs_mypkg()"), r"ops/myop/__init__\.py:\d+: syntax error: "),
    (("IMPORTED = 1", "IMPORTED = 1 / 0"), r"ops/myop/__init__\.py:\d+: ZeroDivisionError: division by zero"),
    (("IMPORTED = 1", "IMPORTED = int('x')"), r"ops/myop/__init__\.py:\d+: ValueError: invalid literal for int"),
    (('Revision("v0_naive", "torch"', 'Revision("v0_naive", "torchy"'),
     r"ops/myop/__init__\.py:\d+: revision v0_naive: kind='torchy' is not one of cuda, triton, torch"),  # spec's
    (('_times2("v4_after"), "x * 2, checked last")', '_times2("v4_after"), "x * 2, checked last", role="refrence")'),
     r"ops/myop/__init__\.py:\d+: revision v4_after: role='refrence' is not one of step, reference"),
    (('Revision("v4_after", "torch"', 'Revision("v0_naive", "torch"'),
     r"ops/myop/__init__\.py:\d+: kernel myop: two revisions named 'v0_naive': a revision's name is its own"),
    (('(HERE / "v3_triton.py",)', '(HERE / "v3_trtion.py",)'),
     r"ops/myop/__init__\.py: Revision\('v3_triton'\) names the source ops/myop/v3_trtion\.py, which is no file"),
    (('(HERE / "v3_triton.py",)', '(Path("v3_triton.py"),)'),
     r"ops/myop/__init__\.py: Revision\('v3_triton'\) names the source v3_triton\.py, a relative path: write it from "
     r"the operator's folder, HERE / 'v3_triton\.py'"),
    (("profile_shape=(7, 33)", "profile_shape=(4096,)"),
     r"ops/myop/__init__\.py: the kernel's shapes differ in rank: profile_shape=\(4096,\) has 1 dimensions, "
     r"check_shapes' \(3, 5\) 2; a kernel's shapes share one rank"),
    (('_times2("v4_after"), "x * 2, checked last")', '_times2("v4_after"), "x * 2", check_shapes=(3, 5))'),
     r"ops/myop/__init__\.py: Revision\('v4_after', check_shapes=\(3, 5\)\): a tuple of shapes, each a tuple of "
     r"positive ints: check_shapes=\(\(3, 5\),\)"),
    (('_times2("v4_after"), "x * 2, checked last")', '_times2("v4_after"), "x * 2", check_shapes=((3, 5, 7),))'),
     r"ops/myop/__init__\.py: Revision\('v4_after', check_shapes=\.\.\.\): \(3, 5, 7\) has 3 dimensions, the kernel's "
     r"shapes 2"),
])
@pytest.mark.parametrize("inside", [True, False], ids=["run-inside", "run-outside"])
def test_a_declaration_mistake_is_one_line_naming_the_file_not_a_traceback(repo, edit, said, inside, monkeypatch):
    """What a team gets wrong first in its operator's __init__.py (a field left out, a shape not
    nested, a dtype kernlog does not know, a name that is not the folder's, a syntax error, any
    error its own code raises): one line with the file (and line), exit 2, for every command. Run from inside
    the repository, as a team does: a dataclass's generated __init__ ("<string>") is no line of theirs."""
    if inside:
        monkeypatch.chdir(repo)
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text() + "IMPORTED = 1\n"
    assert edit[0] in text
    init.write_text(text.replace(edit[0], edit[1]))
    for args in (["list"], ["check", "myop", "--device", "cpu"], ["report", "--check"]):
        _forget_ops()
        got = CliRunner().invoke(main, ["--root", str(repo), *args])
        assert got.exit_code == 2 and "Traceback" not in got.output, (args, got.output)
        assert len(got.stderr.splitlines()) == 1 and re.match("kernlog: " + said, got.stderr), (args, got.stderr)
    assert got.stdout == "" and CliRunner().invoke(main, ["--root", str(repo), "list"]).stdout == \
        "myop  CANNOT LOAD (below)\n"  # list names it among the others (none here), report --check stops


def test_the_same_inputs_command_runs_where_the_failure_ran(repo):
    """Pasted as printed it runs: on the CPU with --device cpu, and a Triton revision under the
    interpreter (bare, it would stop at "no GPU"); on the GPU as it was."""
    from kernlog.hints import check_command

    kernel = load_kernel(repo, "myop")  # the failure line's command is check_command(kernel, rev, device, seed)
    assert check_command("myop", kernel.revision("v3_triton"), "cpu", 9) == \
        "TRITON_INTERPRET=1 kernlog check myop --rev v3_triton --device cpu --seed 9"
    plain = "kernlog check myop --rev v0_naive --device cpu --seed 9"
    assert check_command("myop", kernel.revision("v0_naive"), "cpu", 9) == plain
    on_gpu = "kernlog check myop --rev v3_triton --seed 9"
    assert check_command("myop", kernel.revision("v3_triton"), "cuda", 9) == on_gpu


def test_an_error_in_a_module_the_operator_imports_names_that_module_and_the_others_are_listed(repo):
    """The line names the innermost place in the team's own code (a helper module the operator
    imports, not the operator's import line), says the first line of a message of several, keeps
    kernlog's own errors as they are (their exit status too), and `list` still lists the others."""
    (repo / "ops" / "common").mkdir()
    (repo / "ops" / "common" / "__init__.py").write_text("")
    (repo / "ops" / "common" / "helper.py").write_text('X = 1\nraise RuntimeError("bad table\\nsecond line")\n')
    init = repo / "ops" / "myop" / "__init__.py"
    init.write_text("from ops.common import helper  # noqa: F401\n" + init.read_text())
    shutil.copytree(repo / "ops" / "myop", repo / "ops" / "zop")  # listed after it, and fine
    (repo / "ops" / "zop" / "__init__.py").write_text(OP.replace('"myop"', '"zop"'))
    _forget_ops()
    got = CliRunner().invoke(main, ["--root", str(repo), "list"])
    assert got.exit_code == 2 and "Traceback" not in got.output
    assert got.stderr == "kernlog: ops/common/helper.py:2: RuntimeError: bad table\n", got.stderr
    assert got.stdout.startswith("myop  CANNOT LOAD (below)\nzop  (profile shape 7x33"), got.stdout

    (repo / "ops" / "common" / "helper.py").write_text(
        "from kernlog.errors import NoGpu\nraise NoGpu('this machine has no GPU for the table')\n")
    _forget_ops()
    got = CliRunner().invoke(main, ["--root", str(repo), "check", "myop", "--device", "cpu"])
    assert got.exit_code == 4 and got.stderr == "kernlog: this machine has no GPU for the table\n", got.stderr


def test_shapes_as_lists_numpy_ints_and_no_bench_shapes_are_declarations_kernlog_takes(repo):
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text().replace("check_shapes=((3, 5), (7, 33)), bench_shapes=((7, 33),)",
                                    "check_shapes=[(3, 5), [7, numpy.int64(33)]], bench_shapes=()")
    init.write_text("import numpy\n" + text)
    _forget_ops()
    assert load_kernel(repo, "myop").name == "myop"
    init.write_text("import numpy\n" + text.replace("check_shapes=[(3, 5), [7, numpy.int64(33)]]", "check_shapes=()"))
    _forget_ops()
    got = CliRunner().invoke(main, ["--root", str(repo), "list"])
    assert got.exit_code == 2 and "check_shapes=(): the gate needs at least one shape" in got.stderr


def test_a_suggested_check_runs_where_it_is_read():
    """kernlog.hints: on a page or in `show`, read anywhere, a check is written in its CPU form, but
    a CUDA C revision's, which runs on a GPU alone; torch's needs no interpreter."""
    from kernlog.hints import check_command
    from kernlog.spec import Revision

    def rev(name, kind):
        return Revision(name, kind, (), lambda: None, "a revision")
    assert check_command("op", rev("v1", "triton")) == "TRITON_INTERPRET=1 kernlog check op --rev v1 --device cpu"
    assert check_command("op", rev("cu8", "cuda")) == "kernlog check op --rev cu8"
    assert check_command("op", rev("torch", "torch")) == "kernlog check op --rev torch --device cpu"
    assert check_command("op", rev("v1", "triton"), "cuda", 3) == "kernlog check op --rev v1 --seed 3"


def test_a_missing_library_is_named_with_its_install_command_not_as_the_users_package():
    """A revision whose import needs torch (or triton, cupy...) where this environment lacks it is told the
    library's install command (torch's CPU build: plain pip pulls the CUDA one); the user's own package keeps
    the install-your-package hint."""
    from kernlog.registry import find_root, load_kernel
    from kernlog.run.loading import import_problem

    k = load_kernel(find_root(), "vector_add")
    rev = k.revisions[0]
    torch_line = import_problem(k, rev, ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert torch_line.endswith("; a library this environment lacks: pip install torch --index-url "
                               "https://download.pytorch.org/whl/cpu (a GPU machine: its CUDA build)"), torch_line
    assert "pip install triton" in import_problem(k, rev, ModuleNotFoundError("x", name="triton.language"))
    own = import_problem(k, rev, ModuleNotFoundError("No module named 'mypkg'", name="mypkg"))
    assert own.endswith("; install your package (pip install -e .) or put it on PYTHONPATH"), own
    assert "install" not in import_problem(k, rev, ImportError("cannot import name 'x' from 'y'", name="y"))


def test_the_operators_own_code_raising_is_said_once_with_its_line_not_as_every_revisions_failure(repo):
    """make_inputs, make_output or the reference raising is no revision's fault: one line naming the operator's
    line and the shape, exit 2, and no revision reported failed."""
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text()
    for old, new, what in (
            ("make_inputs=lambda shape, dtype, gen, device, case: (",
             "make_inputs=lambda shape, dtype, gen, device, case: (shape[2],",
             "make_inputs raised IndexError: tuple index out of range (shape (3, 5), fp32)"),
            ("make_output=lambda inputs: torch.empty_like(inputs[0]),", "make_output=lambda inputs: inputs[1],",
             "make_output raised IndexError: tuple index out of range (shape (3, 5), fp32)"),
            ("reference=lambda inputs, out=None: inputs[0].double() * 2,",
             "reference=lambda inputs, out=None: inputs[0].double() * undefined,",
             "reference raised NameError: name 'undefined' is not defined (shape (3, 5), fp32)")):
        assert old in text
        init.write_text(text.replace(old, new))
        _forget_ops()
        got = check(repo, "--rev", "v0_naive", "--rev", "v4_after")
        assert got.exit_code == 2 and "Traceback" not in got.output, got.output
        assert re.fullmatch(rf"kernlog: ops/myop/__init__\.py:\d+: myop's {re.escape(what)}: the operator's code, "
                            r"not a revision's; fix it, then run the same check again\n", got.stderr), got.stderr
        assert "FAIL" not in got.stdout and "failed the correctness gate" not in got.output
    # raised inside the standard library (json here): the line is still the operator's, not json/decoder.py's
    init.write_text(text.replace("make_inputs=lambda shape, dtype, gen, device, case: (",
                                 "make_inputs=lambda shape, dtype, gen, device, case: (__import__('json').loads('{'),"))
    _forget_ops()
    got = check(repo, "--rev", "v0_naive")
    assert re.match(r"kernlog: ops/myop/__init__\.py:\d+: myop's make_inputs raised JSONDecodeError: ", got.stderr), \
        got.stderr


BROKEN = '''def _broken():
    from .v5_broken import launch
    return launch


def _typo():
    from .v6_tpyo import launch
    return launch


KERNEL = Kernel('''
MORE = '''     Revision("v5_broken", "torch", (HERE / "v0_naive.py",), _broken, "does not compile"),
     Revision("v6_typo", "torch", (HERE / "v0_naive.py",), _typo, "imports a misspelt module"),
     Revision("v4_after",'''


def test_a_revision_module_that_does_not_compile_or_imports_a_misspelt_module_is_one_line_naming_its_line(repo):
    """A syntax error in a revision's own module, or an import of a module of the team's package that is no file,
    is that revision's one line with the file and line (not the revision's first source, not "install your
    package"), and the other revisions are still checked."""
    (repo / "ops" / "myop" / "v5_broken.py").write_text("def launch(inputs, out)\n    return out\n")
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text().replace('     Revision("v4_after",', MORE).replace("KERNEL = Kernel(", BROKEN, 1)
    init.write_text(text)
    _forget_ops()
    got = check(repo, "--rev", "v5_broken", "--rev", "v6_typo", "--rev", "v4_after")
    assert got.exit_code == 2 and "Traceback" not in got.output, got.output
    assert re.search(r"^v4_after: ok ", got.stdout, re.M), got.stdout
    lines = got.stderr.splitlines()
    assert lines[0] == ("kernlog: myop/v5_broken: ops/myop/v5_broken.py:1: syntax error: expected ':'; "
                        "`python -m py_compile ops/myop/v5_broken.py` shows it"), lines
    assert re.fullmatch(r"kernlog: myop/v6_typo: no module ops\.myop\.v6_tpyo, imported at ops/myop/__init__\.py:\d+: "
                        r"ops/myop/v6_tpyo\.py is no file of this repository \(a typo in the import, a file not "
                        r"written yet, or an extension not built: pip install -e \.\)", lines[1]), lines


def test_a_missing_kernels_folder_stops_every_command_and_report_drops_no_page(repo):
    """A [tool.kernlog] kernels folder that is not there (renamed, misspelt) is one line for list and report as for
    check: report would otherwise render a log of no operators and delete every page."""
    assert CliRunner().invoke(main, ["--root", str(repo), "report"]).exit_code == 0
    pages = sorted(p.name for p in (repo / "reports").iterdir())
    assert "myop.md" in pages
    (repo / "pyproject.toml").write_text('[tool.kernlog]\nkernels = "opz"\n')
    for args in (["list"], ["report"], ["report", "--check"], ["misses"], ["check", "myop", "--device", "cpu"]):
        _forget_ops()
        got = CliRunner().invoke(main, ["--root", str(repo), *args])
        assert got.exit_code == 2 and got.stderr.startswith("kernlog: no opz/ folder in "), (args, got.output)
    assert sorted(p.name for p in (repo / "reports").iterdir()) == pages


def test_an_operator_folder_without_its_init_or_its_kernel_is_named_as_such(repo):
    (repo / "ops" / "mine").mkdir()
    got = CliRunner().invoke(main, ["--root", str(repo), "check", "mine", "--device", "cpu"])
    assert got.exit_code == 2 and got.stderr == ("kernlog: unknown kernel 'mine' (ops/mine/ has no __init__.py: an "
                                                 "operator's folder declares KERNEL = Kernel(...) there); known: "
                                                 "myop\n"), got.stderr
    (repo / "ops" / "mine" / "__init__.py").write_text("X = 1\n")
    got = CliRunner().invoke(main, ["--root", str(repo), "check", "mine", "--device", "cpu"])
    assert got.stderr == ("kernlog: unknown kernel 'mine' (ops/mine/__init__.py binds no KERNEL = Kernel(...) at "
                          "its top level); known: myop\n"), got.stderr


def test_a_revision_that_raises_names_its_line_and_no_error_figure(repo):
    """A crash is the revision's failure with the place in the team's code it raised at; no "rel err inf", which
    reads as a measured error, on its line or in the revision's count."""
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text()
    old = "            out.copy_(inputs[0] * 2)\n"
    assert old in text
    init.write_text(text.replace(old, '            out.copy_(inputs[0] * (undefined if name == "v4_after" else 2))\n'))
    _forget_ops()
    got = check(repo, "--rev", "v0_naive", "--rev", "v4_after")
    assert got.exit_code == 3 and "Traceback" not in got.output, got.output
    assert re.search(r"^v0_naive: ok \(\d+ cases, worst rel err ", got.stdout, re.M), got.stdout
    assert re.search(r"^v4_after: FAIL \(\d+ cases\)$", got.stdout, re.M), got.stdout
    assert re.search(r"^  v4_after 3x5 fp32 random: FAIL raised NameError: name 'undefined' is not defined "
                     r"\(at ops/myop/__init__\.py:\d+\); seed \d+$", got.stdout, re.M), got.stdout


def test_an_answer_the_reference_cannot_read_is_the_revisions_failure_not_the_operators(repo):
    """The operator is blamed for its reference only where the reference raises on the operator's own output buffer
    too: a revision returning a numpy array (right shape, wrong type) that the reference cannot read fails the gate
    as that revision, and the others are judged."""
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text()
    old = "            return out\n        return launch\n    return load\n"
    assert old in text
    init.write_text(text.replace(old, '            return out.numpy() if name == "v4_after" else out\n'
                                      "        return launch\n    return load\n", 1).replace(
        "reference=lambda inputs, out=None: inputs[0].double() * 2,",
        "reference=lambda inputs, out=None: inputs[0].double() * 2 + 0 * out.to(inputs[0].device).double(),"))
    _forget_ops()
    got = check(repo, "--rev", "v0_naive", "--rev", "v4_after")
    assert got.exit_code == 3 and "the operator's code" not in got.output, got.output
    assert re.search(r"^v0_naive: ok ", got.stdout, re.M) and re.search(r"^v4_after: FAIL ", got.stdout, re.M)
    assert "raised AttributeError" in got.stdout, got.stdout


def test_the_operators_own_code_raising_under_profile_is_one_line_and_no_revisions_verdict(repo, monkeypatch):
    """In `profile`'s and `bench`'s gate processes too: the operator's make_inputs raising comes back as its own
    outcome, said once (exit 2), and no revision's gate outcome is kept as failed."""
    from kernlog.run import target

    init = repo / "ops" / "myop" / "__init__.py"
    init.write_text(init.read_text().replace("make_inputs=lambda shape, dtype, gen, device, case: (",
                                             "make_inputs=lambda shape, dtype, gen, device, case: (shape[2],"))
    _forget_ops()
    out = repo / "verdict.json"
    target.gate_revision(str(out), str(repo), "myop", "cpu", "v0_naive")
    import json

    told = json.loads(out.read_text())
    assert told["outcome"] == "operator" and "myop's make_inputs raised IndexError" in told["detail"], told


LOOPED = '''def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):  # a loop over a runtime scalar: Triton 3.6's interpreter needs the shim
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, tl.maximum(x + y, 0.0).to(out_ptr.dtype.element_ty), mask=mask)
'''


def test_a_triton_kernel_looping_over_a_runtime_scalar_passes_check_under_the_interpreter(tmp_path):
    """A correct kernel with `for start in range(0, n, BLOCK)` failed `check --device cpu` with an interpreter error
    unless its launcher applied kernlog.triton_interpreter itself (which only this repository's docs named): check
    applies the shim to every Triton revision it runs under the interpreter. In a process of its own, as a team
    runs it (the shim, once applied, stays for the process)."""
    import os
    import subprocess

    from .helpers import git

    repo = tmp_path / "team"
    repo.mkdir()
    git(repo, "init", "-q")
    kernlog = [sys.executable, "-c", "from kernlog.commands.main import main; main()"]
    subprocess.run([*kernlog, "init"], cwd=repo, check=True, capture_output=True)
    src = repo / "kernels" / "add_relu" / "v1_fused.py"
    text = src.read_text()
    start = text.index("def add_relu_kernel(")
    end = text.index("\n\n", start)
    src.write_text(text[:start] + LOOPED + text[end + 1:]
                   .replace('grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)', "grid = lambda meta: (1,)"))
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([*kernlog, "check", "add_relu", "--rev", "v1_fused", "--device", "cpu"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "v1_fused: ok" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("returned, said", [
    ("out.double()", r"FAIL did not write into the output buffer it was given \(torch\.float32 \(3, 5\)\) but returned "
                     r"another \(torch\.float64 \(3, 5\)\)"),
    ("None", r"FAIL raised TypeError: returned None: a launch returns the output it wrote \(return out\)"),
])
def test_a_revision_returning_another_tensor_or_none_is_told_what_it_returned(repo, returned, said,
                                                                              monkeypatch):
    """A launch that computes right but returns another tensor (a copy, another dtype) is told what it returned and
    what the buffer was, not only that it "did not write"; one returning None is told to return out, not handed
    an AttributeError from kernlog's own code."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a Triton revision on the CPU (its launch is torch's here)
    init = repo / "ops" / "myop" / "__init__.py"
    text = init.read_text()
    old = "            return out\n        return launch\n    return load\n"
    init.write_text(text.replace(old, f'            return {returned} if name == "v4_after" else out\n'
                                      "        return launch\n    return load\n", 1)
                    .replace('Revision("v4_after", "torch"', 'Revision("v4_after", "triton"'))
    _forget_ops()
    got = check(repo, "--rev", "v4_after")
    assert got.exit_code == 3 and re.search(r"^  v4_after 3x5 fp32 random: " + said, got.stdout, re.M), got.stdout
    assert re.search(r"^v4_after: FAIL \(\d+ cases\)$", got.stdout, re.M), got.stdout
