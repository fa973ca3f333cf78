"""kernlog as a team adopting it runs it: the wheel built from this repository, installed into a
folder of its own ahead of this checkout's editable install, driving a fresh git repository
outside this checkout. docs/your-repository.md's commands run in order as written; then a
repository whose operators live in a folder not named `kernels` runs `init`, `list`, `check`
under the interpreter, `report`, `report --check`, and a planted wrong revision is refused
with its element and seed. Nothing of this repository's layout may leak into either."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_readme import examples

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "your-repository.md"

# A wrong revision a user might plant beside the example: one element of the output is off.
WRONG = '''
import triton
import triton.language as tl


@triton.jit
def off_by_one(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    z = tl.maximum(x + y, 0.0) + tl.where(offs == 5, 1.0, 0.0)
    tl.store(out_ptr + offs, z.to(out_ptr.dtype.element_ty), mask=mask)


def add_relu(x, y, out):
    n = out.numel()
    off_by_one[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
'''
PLANT = '''

def _load_wrong():
    from .v2_wrong import add_relu as wrong

    return lambda inputs, out: wrong(*inputs, out)


KERNEL = dataclasses.replace(KERNEL, revisions=KERNEL.revisions + (
    Revision("v2_wrong", "triton", (HERE / "v2_wrong.py",), _load_wrong, "element 5 is off by one", "nothing"),))
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The environment of a process that runs the installed wheel: kernlog from the target folder."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"  # a copy of what the wheel is built from: an in-tree build/ could add stale modules
    shutil.copytree(ROOT / "kernlog", source / "kernlog", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", source)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(base / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (base / "dist").glob("kernlog-*.whl")
    site = base / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                           "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "KERNLOG_PINNED")}
    env.update(PYTHONPATH=str(site), CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
    where = subprocess.run([sys.executable, "-c", "import kernlog; print(kernlog.__file__)"], env=env,
                           cwd=base, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(site), where  # the wheel's kernlog, not this checkout's
    return env


def kernlog(repo: Path, env: dict, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernlog", *args], cwd=repo, env={**env, **extra},
                          capture_output=True, text=True, timeout=600)


def new_repository(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for key, value in (("user.email", "team@example.com"), ("user.name", "team")):
        subprocess.run(["git", "-C", str(path), "config", key, value], check=True)
    assert not path.resolve().is_relative_to(ROOT)
    return path


def test_the_page_runs_as_written_in_a_new_repository(installed, tmp_path):
    """Every command of docs/your-repository.md, in order: kernlog's with the exit status the page
    states, git's for real; pip's are the fixture's install, and GPU lines are test_readme's."""
    repo = new_repository(tmp_path / "team")
    ran = []
    for ex in examples(PAGE.read_text(), "docs/your-repository.md"):
        if ex.gpu or ex.program not in ("kernlog", "git"):
            continue
        if ex.program == "git":
            subprocess.run(shlex.split(ex.line), cwd=repo, check=True, capture_output=True)
            continue
        done = kernlog(repo, installed, *ex.args, **ex.env)
        assert done.returncode == ex.exit, f"{ex.where}: `{ex.line}`: {done.stdout}{done.stderr}"
        ran.append(ex.args[0])
    assert ran[:2] == ["init", "list"] and "check" in ran and "report" in ran, ran
    assert "add_relu" in (repo / "KERNEL_LOG.md").read_text()
    assert (repo / "kernels" / "add_relu" / "v1_fused.py").is_file()


def test_a_new_repository_runs_the_loop_from_the_installed_wheel(installed, tmp_path):
    repo = new_repository(tmp_path / "team")
    done = kernlog(repo, installed, "init", "--kernels-dir", "gpu_ops")
    assert done.returncode == 0, done.stderr
    assert "gpu_ops/add_relu/__init__.py: wrote" in done.stdout
    assert 'kernels = "gpu_ops"' in (repo / "pyproject.toml").read_text()
    assert (repo / ".github" / "workflows" / "kernlog.yml").is_file() and not (repo / "kernels").exists()
    again = kernlog(repo, installed, "init", "--kernels-dir", "gpu_ops")
    assert again.returncode == 0 and "gpu_ops/add_relu/v1_fused.py: kept" in again.stdout  # never overwritten

    (repo / "gpu_ops" / "helpers").mkdir()  # a helper folder beside the operators breaks nothing
    (repo / "gpu_ops" / "helpers" / "__init__.py").write_text("SCALE = 2\n")
    listed = kernlog(repo / "gpu_ops", installed, "list")  # found from a sub-folder too
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^add_relu\b", listed.stdout, re.M) and "v1_fused" in listed.stdout
    assert "helpers" not in listed.stdout

    checked = kernlog(repo, installed, "check", "add_relu", "--device", "cpu", TRITON_INTERPRET="1")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"^v1_fused: ok", checked.stdout, re.M)

    for args in (("report",), ("report", "--check")):
        done = kernlog(repo, installed, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "add_relu" in (repo / "KERNEL_LOG.md").read_text()

    (repo / "gpu_ops" / "add_relu" / "v2_wrong.py").write_text(WRONG)
    with (repo / "gpu_ops" / "add_relu" / "__init__.py").open("a") as f:
        f.write("\nimport dataclasses  # noqa: E402\n" + PLANT)
    refused = kernlog(repo, installed, "check", "add_relu", "--device", "cpu", "--rev", "v2_wrong",
                      TRITON_INTERPRET="1")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "v2_wrong" in said and re.search(r"\bseed\b", said), said
    assert re.search(r"element 5\b|\[5\]", said), said  # the first bad element, where it is
