"""[tool.kernlog]: where the kernels, profiles and reports are is configuration, read in one place
(kernlog.config), and this repository runs on the same path as anyone's."""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog import config, registry
from kernlog.commands.main import main
from kernlog.errors import KernlogError
from kernlog.store import keys

ROOT = Path(__file__).resolve().parent.parent

OPERATOR = '''
import torch

from kernlog.spec import Kernel, Revision

KERNEL = Kernel(
    name="{name}",
    revisions=(Revision("v0", "torch", (__file__,), lambda: lambda inputs, out: inputs[0] * 2, "x * 2"),),
    make_inputs=lambda shape, dtype, gen, device, case="random": (torch.randn(*shape, generator=gen),),
    make_output=lambda inputs: torch.empty_like(inputs[0]),
    reference=lambda inputs, out=None: inputs[0].double() * 2,
    bytes_moved=lambda shape, dtype: 8 * shape[0],
    check_shapes=((3,),), bench_shapes=((3,),), profile_shape=(3,), dtypes=("fp32",),
)
'''


def repo(tmp_path: Path, section: str | None, ops: dict[str, str]) -> Path:
    """A repository: pyproject.toml with `section` (None: no pyproject.toml), and an operator
    folder for each `ops` entry (relative folder -> operator name)."""
    if section is not None:
        (tmp_path / "pyproject.toml").write_text(section)
    for folder, name in ops.items():
        path = tmp_path / folder / name
        path.mkdir(parents=True)
        (path / "__init__.py").write_text(OPERATOR.format(name=name))
    return tmp_path


@pytest.fixture
def fresh_modules(monkeypatch):
    """Operators imported by a test leave sys.modules and sys.path as they were."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_this_repository_names_its_layout_and_its_operators_are_the_folders_that_bind_kernel():
    section = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["kernlog"]
    assert section["kernels"] == "kernels" and section["profiles"] == "profiles"
    lay = config.layout(ROOT)
    assert lay.configured and lay.kernels == ROOT / "kernels" and lay.log == ROOT / "KERNEL_LOG.md"
    names = registry.kernel_names(ROOT)
    assert "softmax" in names and "common" not in names  # common/ binds no KERNEL: a helper


def test_a_configured_folder_of_any_name_holds_the_operators_and_helpers_beside_them_break_nothing(
        tmp_path, fresh_modules):
    root = repo(tmp_path, '[tool.kernlog]\nkernels = "gpu_ops"\nprofiles = "perf/profiles"\n',
                {"gpu_ops": "scale"})
    (root / "gpu_ops" / "__init__.py").write_text("")
    (root / "gpu_ops" / "utils").mkdir()
    (root / "gpu_ops" / "utils" / "__init__.py").write_text("HELP = 1\n")  # no KERNEL: not an operator
    (root / "gpu_ops" / "_private").mkdir()
    (root / "gpu_ops" / "_private" / "__init__.py").write_text("KERNEL = None\n")  # a leading _: never one
    assert registry.kernel_names(root) == ["scale"]
    assert registry.load_kernel(root, "scale").name == "scale"
    assert keys.profiles_dir(root) == root / "perf" / "profiles"
    out = CliRunner().invoke(main, ["--root", str(root), "list"])
    assert out.exit_code == 0 and "scale" in out.output and "utils" not in out.output, out.output
    names = CliRunner().invoke(main, ["--root", str(root), "list", "--names"])  # what CI loops over
    assert names.exit_code == 0 and names.output == "scale\n"


def test_a_kernels_folder_inside_a_package_imports_under_the_packages_name(tmp_path, fresh_modules):
    """src/teamlib/ops with src/teamlib/__init__.py is teamlib.ops, src on the path: a revision
    can import the rest of teamlib, and one module stands for the operator, not two."""
    root = repo(tmp_path, '[tool.kernlog]\nkernels = "src/teamlib/ops"\n', {"src/teamlib/ops": "scale"})
    (root / "src" / "teamlib" / "__init__.py").write_text("")
    (root / "src" / "teamlib" / "ops" / "__init__.py").write_text("")
    lay = config.layout(root)
    assert lay.package() == (root / "src", "teamlib.ops")
    registry.load_kernel(root, "scale")
    assert "teamlib.ops.scale" in sys.modules and str(root / "src") in sys.path


def test_no_configuration_and_no_kernels_folder_says_to_run_init(tmp_path):
    with pytest.raises(KernlogError, match=r"kernlog init"):
        config.find_root(tmp_path)
    out = CliRunner().invoke(main, ["--root", str(tmp_path), "list"])
    assert out.exit_code == 2 and "kernlog init" in out.output and "Traceback" not in out.output


def test_the_root_is_found_from_a_sub_folder_by_its_section(tmp_path):
    root = repo(tmp_path, '[tool.kernlog]\nkernels = "ops"\n', {})
    (root / "ops" / "deep").mkdir(parents=True)
    assert config.find_root(root / "ops" / "deep") == root.resolve()


def test_a_configured_kernels_folder_that_is_missing_is_one_line_naming_init(tmp_path):
    root = repo(tmp_path, '[tool.kernlog]\nkernels = "gpu_ops"\n', {})
    with pytest.raises(KernlogError, match=r"no gpu_ops/ folder.*kernlog init --kernels-dir gpu_ops"):
        registry.load_kernel(root, "anything")


@pytest.mark.parametrize("section, message", [
    ('[tool.kernlog]\nkernel = "ops"\n', "unknown \\[tool.kernlog\\] key 'kernel'"),
    ('[tool.kernlog]\nkernels = 3\n', "kernels must be a path"),
    ('[tool.kernlog]\nkernels = "../elsewhere"\n', "outside the repository"),
    ('[tool.kernlog\n', "not valid TOML"),
])
def test_a_bad_section_is_one_line(tmp_path, section, message):
    (tmp_path / "pyproject.toml").write_text(section)
    with pytest.raises(KernlogError, match=message):
        config.layout(tmp_path)


def test_an_operator_that_fails_to_import_is_one_line_naming_its_file_and_module(tmp_path, fresh_modules):
    root = repo(tmp_path, '[tool.kernlog]\nkernels = "ops"\n', {"ops": "scale"})
    init = root / "ops" / "scale" / "__init__.py"
    init.write_text("import teamlib_not_installed\n" + init.read_text())
    with pytest.raises(KernlogError, match=r"ops/scale/__init__.py: cannot import teamlib_not_installed"):
        registry.load_kernel(root, "scale")
