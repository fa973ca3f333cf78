"""kernlog.snapshot: `report` and `list` derive a revision's source hash and the operator folders
once while they run, and only then: an edit between two commands in one process (a test's,
or a notebook's) is read afresh by the second."""
from click.testing import CliRunner

from kernlog import snapshot
from kernlog.commands.main import main
from kernlog.spec import Revision


def _load():
    return lambda inputs, out: out


def test_a_revision_is_hashed_once_while_held_and_afresh_after(tmp_path):
    source = tmp_path / "kernel.py"
    source.write_text("x = 1\n")
    rev = Revision("v0_naive", "triton", (source,), _load, "the change", "the prediction")
    before = rev.sha256()
    with snapshot.held():
        assert rev.sha256() == before
        source.write_text("x = 2\n")
        assert rev.sha256() == before  # held still: read once
        with snapshot.held():  # nested, the outer one holds
            assert rev.sha256() == before
    edited = rev.sha256()
    assert edited != before  # let go: read again
    with snapshot.held():
        assert rev.sha256() == edited
        source.write_text("x = 3\n")
    assert rev.sha256() not in (before, edited)


def test_an_operator_added_between_two_lists_is_listed_by_the_second(toy):
    root, _ = toy
    first = CliRunner().invoke(main, ["--root", str(root), "list"])
    assert first.exit_code == 0 and first.output.startswith("toy  (") and "\ntwin  (" not in first.output
    (root / "kernels" / "twin").mkdir()
    toy_init = (root / "kernels" / "toy" / "__init__.py").read_text()
    assert toy_init.count('"toy"') == 1  # its name, which must be its folder's
    (root / "kernels" / "twin" / "__init__.py").write_text(toy_init.replace('"toy"', '"twin"'))
    second = CliRunner().invoke(main, ["--root", str(root), "list"])
    assert second.exit_code == 0 and "\ntwin  (" in second.output, second.output
