"""Reading results never imports torch or triton: `kernlog list` loads every operator folder,
and importing torch took 1.8 s of its 3-5 s on the 2-core CPU machine."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernlog.registry import kernel_names

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "triton", "cupy")
# sys.modules, not -X importtime: importlib.import_module (the registry's, and LazyModule's)
# bypasses the import statement's timing log.
RUN = """
import json, sys
from kernlog.commands.main import main
try:
    main(sys.argv[2:], prog_name="kernlog")
except SystemExit as e:
    code = e.code
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def run(tmp_path, args, check=True, cwd=ROOT):
    """The modules `kernlog ARGS` imported in `cwd`, and its stdout; with `check`, it must exit 0."""
    report = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", RUN, str(report), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    result = json.loads(report.read_text())
    assert result["code"] in (0, None) or not check, proc.stderr[-2000:]
    return set(result["modules"]), proc.stdout


def heavy(modules):
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_list_loads_every_kernel_without_torch_or_triton(tmp_path):
    # A bad profile makes list exit 1 after listing everything; what matters here is that it
    # loaded every operator folder.
    modules, out = run(tmp_path, ["list"], check=False)
    for kernel in kernel_names(ROOT):
        assert f"kernels.{kernel}" in modules
        assert f"\n{kernel}  (" in f"\n{out}"
    assert heavy(modules) == []
    assert "pandas" not in modules  # 0.45 s of a list of ~1 s (the bench files are read with csv)


def test_the_example_operator_of_kernlog_init_keeps_torch_out_of_list(tmp_path):
    """A new repository's operator (`kernlog init`'s add_relu) imports torch where it uses it:
    its `kernlog list` loads the operator without torch, as this repository's does."""
    repo = tmp_path / "team"
    repo.mkdir()
    run(tmp_path, ["init"], cwd=repo)
    modules, out = run(tmp_path, ["list"], cwd=repo)
    assert "kernels.add_relu" in modules and "add_relu  (" in out
    assert heavy(modules) == []


@pytest.mark.parametrize("args", [["show", "softmax/v4_vectorized@nvidia-h100-80gb-hbm3"],
                                  ["diff", "softmax/v3_online@nvidia-h100-80gb-hbm3",
                                   "softmax/v4_vectorized@nvidia-h100-80gb-hbm3"]])
def test_show_and_diff_without_torch_or_triton(tmp_path, args):
    modules, out = run(tmp_path, args)
    assert "v4_vectorized" in out
    assert heavy(modules) == []


def test_lazy_torch_becomes_the_module_on_first_use():
    """Once an operator's inputs exist, its globals hold the real modules: torch.compile traces
    the references' lambdas over plain modules, not over the stand-in."""
    import torch
    import torch.nn.functional as F

    from kernels import layernorm

    layernorm.KERNEL.make_inputs((3, 5), "fp32", torch.Generator().manual_seed(0), "cpu")
    assert layernorm.torch is torch and layernorm.F is F
