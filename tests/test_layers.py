"""kernlog's packages are stages of one data flow, and imports run one way through them: core
(kernlog's top-level modules, what kernels/ import) <- run <- store <- judge <- capture <- render
<- commands. Every import is read, function-level ones too, so a circle cannot hide in a
function; kernels/ import the core alone."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("core", "run", "store", "judge", "capture", "render", "commands")
MAX_LINES = 400


def layer(module: str) -> str | None:
    """The layer of a kernlog module's dotted name (None: not kernlog's)."""
    parts = module.split(".")
    if parts[0] != "kernlog":
        return None
    if parts[1:] == ["__main__"]:
        return "commands"  # `python -m kernlog`: the CLI's entry
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS else "core"


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, at any depth; `from pkg import mod` names pkg.mod
    where that is a module under `root`."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                where = root / Path(*sub.split("."))
                out.append((node.lineno, sub if where.with_suffix(".py").exists() or where.is_dir() else base))
    return out


def upward(path: Path, root: Path = ROOT) -> list[str]:
    mine = layer(".".join(path.relative_to(root).with_suffix("").parts))
    return [f"line {n}: {m} ({layer(m)})" for n, m in imports(path, root)
            if layer(m) and LAYERS.index(layer(m)) > LAYERS.index(mine)]


MODULES = sorted((ROOT / "kernlog").rglob("*.py"))


def test_the_layers_are_the_packages_that_exist():
    packages = {p.name for p in (ROOT / "kernlog").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS) - {"core"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_one_way_through_the_layers(path):
    bad = upward(path)
    assert not bad, f"{path.relative_to(ROOT)} imports a later stage: {'; '.join(bad)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_400_lines(path):
    text = path.read_text()
    if "mutmut.mutation.trampoline" in text:
        pytest.skip("a copy `mutmut run` mutated: its length is mutmut's, not ours")
    assert len(text.splitlines()) <= MAX_LINES


def test_kernels_import_kernlog_s_core_alone():
    bad = [f"{p.relative_to(ROOT)} line {n}: {m}" for p in sorted((ROOT / "kernels").rglob("*.py"))
           for n, m in imports(p) if layer(m) not in (None, "core")]
    assert not bad, bad


def test_an_upward_import_is_caught_even_inside_a_function(tmp_path):
    (tmp_path / "kernlog" / "render").mkdir(parents=True)
    (tmp_path / "kernlog" / "render" / "report.py").write_text("")
    (tmp_path / "kernlog" / "store").mkdir()
    keys = tmp_path / "kernlog" / "store" / "keys.py"
    keys.write_text("from kernlog import spec\n\n\ndef f():\n    from kernlog.render import report\n")
    assert upward(keys, tmp_path) == ["line 5: kernlog.render.report (render)"]
    keys.write_text("from kernlog import spec\nfrom . import keys\n")
    assert upward(keys, tmp_path) == []
