"""Provenance is the tool's: a revision's hash covers every file it executes (its sources, the
files they #include, its launcher module, kernlog's own CUDA code), and git's state is
recorded as "unknown" wherever git cannot tell it."""
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernlog import cuda, identity
from kernlog.capture import provenance
from kernlog.capture.provenance import git_state
from kernlog.errors import KernlogError
from kernlog.identity import executed_files
from kernlog.registry import find_root, load_kernel
from kernlog.spec import Revision

SOFTMAX = Path(find_root()) / "kernels" / "softmax"


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"kl_test_{path.stem}_{abs(hash(str(path)))}", path)
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def ladder(tmp_path, monkeypatch):
    """A copy of the CUDA C softmax ladder's files: v6 (which includes v5, which includes
    kl_cuda.cuh), its launcher module, the common header and kernlog/cuda.py, all in tmp_path
    so that a byte of each may change. Returns (files by role, a function making v6's Revision)."""
    common = tmp_path / "include"
    common.mkdir()
    shutil.copy(cuda.COMMON_INCLUDE / "kl_cuda.cuh", common)
    for name in ("v5_tuned.cu", "v6_autotuned.cu", "cuda_launch.py"):
        shutil.copy(SOFTMAX / name, tmp_path)
    shutil.copy(cuda.__file__, tmp_path / "cuda.py")
    monkeypatch.setattr(cuda, "COMMON_INCLUDE", common)
    monkeypatch.setitem(identity.KIND_FILES, "cuda", (tmp_path / "cuda.py",))
    launcher = _import(tmp_path / "cuda_launch.py")
    files = {"the revision's .cu": tmp_path / "v6_autotuned.cu", "an included .cu": tmp_path / "v5_tuned.cu",
             "the common header": common / "kl_cuda.cuh", "the launcher module": tmp_path / "cuda_launch.py",
             "kernlog/cuda.py": tmp_path / "cuda.py"}

    def revision():
        source = tmp_path / "v6_autotuned.cu"
        return Revision("v6_autotuned", "cuda", (source,), launcher.loader(source, "v6_autotuned"), "c")

    return files, revision


@pytest.mark.parametrize("role", ["the revision's .cu", "an included .cu", "the common header",
                                  "the launcher module", "kernlog/cuda.py"])
def test_a_changed_byte_in_any_executed_file_changes_the_hash(ladder, role):
    files, revision = ladder
    before = revision().sha256()
    path = files[role]
    path.write_bytes(path.read_bytes() + b" ")
    assert revision().sha256() != before, f"{role} ({path.name}) is not in the hash"


def test_a_local_header_beside_the_source_wins_over_the_common_one_and_is_hashed(ladder):
    files, revision = ladder
    local = files["the revision's .cu"].parent / "kl_cuda.cuh"
    shutil.copy(files["the common header"], local)
    assert local in executed_files(revision()) and files["the common header"] not in executed_files(revision())
    before = revision().sha256()
    local.write_text(local.read_text() + "// edited\n")
    assert revision().sha256() != before


def test_an_include_found_nowhere_is_an_error_naming_it(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text('#include "missing.cuh"\n')
    with pytest.raises(KernlogError, match='k.cu: #include "missing.cuh" is neither beside it'):
        Revision("k", "cuda", (cu,), lambda: None, "c").sha256()


def test_includes_that_include_each_other_are_followed_once(tmp_path):
    (tmp_path / "a.cuh").write_text('#pragma once\n#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text('#pragma once\n#include "a.cuh"\n')
    (tmp_path / "k.cu").write_text('#include "a.cuh"\n// #include "commented.cuh" is not an include\n')
    assert cuda.includes(tmp_path / "k.cu") == (tmp_path / "a.cuh", tmp_path / "b.cuh")


LADDER = '''def load():
    return lambda inputs, out: inputs[0] + 1
'''


def test_a_loader_in_the_ladder_file_counts_with_its_code_only(tmp_path):
    """A Triton revision's loader written in its operator's __init__.py: editing it marks the
    revision stale, adding a shape or a rung to the file does not."""
    init, kern = tmp_path / "__init__.py", tmp_path / "k.py"
    kern.write_text("# kernel\n")

    def sha(text):
        init.write_text(text)
        return Revision("k", "triton", (kern,), _import(init).load, "c").sha256()

    before = sha(LADDER)
    assert sha(LADDER + "SHAPES = ((1, 2),)\n") == before
    assert sha(LADDER.replace("+ 1", "+ 2")) != before


def test_the_real_ladders_hash_their_launcher_header_and_kernlog_cuda():
    softmax = load_kernel(find_root(), "softmax")
    for rev in (r for r in softmax.revisions if r.kind == "cuda"):
        files = executed_files(rev)
        assert {SOFTMAX / "cuda_launch.py", cuda.COMMON_INCLUDE / "kl_cuda.cuh",
                Path(cuda.__file__).resolve()} <= set(files), rev.name
    v7 = executed_files(softmax.revision("v7_bf16_packed"))
    assert {SOFTMAX / "v6_autotuned.cu", SOFTMAX / "v5_tuned.cu"} <= set(v7)
    v1_vec = load_kernel(find_root(), "vector_add").revision("v1_vec")
    assert v1_vec.sources[0].parent / "bf16.cuh" in executed_files(v1_vec)


def test_framework_references_hash_only_their_function():
    for name in ("softmax", "vector_add"):
        kernel = load_kernel(find_root(), name)
        assert [p.name for p in executed_files(kernel.revision("torch"))] == ["__init__.py"]


# ---- git state
def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


@pytest.fixture
def no_repo(tmp_path, monkeypatch):
    """A folder that no repository contains, and no KERNLOG_COMMIT."""
    monkeypatch.delenv("KERNLOG_COMMIT", raising=False)
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    return tmp_path


def test_without_git_history_commit_and_dirty_are_unknown(no_repo):
    assert git_state(no_repo) == {"commit": "unknown", "dirty": "unknown"}


def test_without_a_git_program_commit_and_dirty_are_unknown(no_repo, monkeypatch):
    monkeypatch.setenv("PATH", str(no_repo))
    assert git_state(no_repo) == {"commit": "unknown", "dirty": "unknown"}


def test_a_named_commit_without_git_has_an_unknown_dirty_state(no_repo, monkeypatch):
    monkeypatch.setenv("KERNLOG_COMMIT", "ab" * 20)
    assert git_state(no_repo) == {"commit": "ab" * 20, "dirty": "unknown"}
    monkeypatch.setenv("PATH", str(no_repo))
    assert git_state(no_repo) == {"commit": "ab" * 20, "dirty": "unknown"}


def test_a_bad_kernlog_commit_is_an_error(no_repo, monkeypatch):
    monkeypatch.setenv("KERNLOG_COMMIT", "HEAD")
    with pytest.raises(KernlogError, match="KERNLOG_COMMIT='head' is not a commit"):
        git_state(no_repo)


def test_in_a_repository_dirty_is_read_from_git(no_repo, monkeypatch):
    (no_repo / "k.cu").write_text("// v1\n")
    _git(no_repo, "init", "-q")
    _git(no_repo, "add", "k.cu")
    _git(no_repo, "commit", "-q", "-m", "v1")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=no_repo, capture_output=True, text=True).stdout.strip()
    assert git_state(no_repo) == {"commit": head, "dirty": False}
    (no_repo / "k.cu").write_text("// v2\n")
    assert git_state(no_repo) == {"commit": head, "dirty": True}
    monkeypatch.setenv("KERNLOG_COMMIT", head)
    assert git_state(no_repo) == {"commit": head, "dirty": True}
    monkeypatch.setenv("KERNLOG_COMMIT", "ab" * 20)  # another commit than the checkout's
    assert git_state(no_repo) == {"commit": "ab" * 20, "dirty": "unknown"}


def test_gpu_info_names_the_gpu_its_memory_driver_and_uuid(monkeypatch):
    """gpu_info from the CUDA properties and nvidia-smi, faked: what a profile records of its GPU."""
    import types

    import torch

    from kernlog.cuda import DeviceCaps

    from .helpers import fake_gpu

    fake_gpu(monkeypatch, DeviceCaps("NVIDIA H100 80GB HBM3", (9, 0), 132, 232448, True))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(total_memory=80 * 2 ** 30, uuid="5e1f-00"))
    asked = []
    smi = {("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"): "580.159.04\n580.159.04"}
    monkeypatch.setattr(provenance, "_run", lambda cmd, cwd=None: asked.append(cmd) or smi.get(tuple(cmd), ""))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    info = provenance.gpu_info()
    assert info["name"] == "NVIDIA H100 80GB HBM3" and info["slug"] == "nvidia-h100-80gb-hbm3"
    assert info["memory_gib"] == 80.0 and info["capability"] == "9.0" and info["sm_count"] == 132
    assert info["driver"] == "580.159.04" and info["uuid"] == "GPU-5e1f-00" and info["visible_devices"] == "3"
    smi.clear()  # nvidia-smi missing or silent
    assert provenance.gpu_info()["driver"] == "unknown"


H200, A100, OFF = "NVIDIA H200, Disabled\n", "NVIDIA A100-SXM4-80GB, Disabled\n", "[N/A]"


@pytest.mark.parametrize("visible, order, out, code, slug, asked", [
    (None, None, f"NVIDIA H100 80GB HBM3, {OFF}\n", 0, "nvidia-h100-80gb-hbm3", []),  # no MIG on this model
    ("3,1", None, H200 * 4, 0, "nvidia-h200", []),  # a host of one model
    ("7", None, H200 * 4, 0, None, []),  # no such GPU: torch says so
    ("4", None, H200 * 4, 0, None, []),
    # two models: CUDA's default order puts the fastest first, so an index tells nothing ...
    (None, None, H200 + A100, 0, None, []),
    ("1", None, H200 + A100, 0, None, []),
    # ... but in PCI bus order it is nvidia-smi's
    ("1,0", "PCI_BUS_ID", H200 + A100, 0, "nvidia-a100-sxm4-80gb", []),
    (None, "PCI_BUS_ID", H200 + A100, 0, "nvidia-h200", []),
    ("5", "PCI_BUS_ID", H200 + A100, 0, None, []),
    ("GPU-0a1b", None, A100, 0, "nvidia-a100-sxm4-80gb", ["-i", "GPU-0a1b"]),  # a UUID
    # MIG: nvidia-smi names the parent GPU, torch the slice: never told here
    (None, None, "NVIDIA H100 80GB HBM3, Enabled\n", 0, None, []),
    ("MIG-5c1d", None, H200, 0, None, None),
    ("", None, H200, 0, None, None),  # every GPU hidden: nvidia-smi is not asked
    ("-1", None, H200, 0, None, None),
    (None, None, "No devices were found\n", 6, None, []),
])
def test_the_gpu_a_process_would_run_on_is_named_by_nvidia_smi_without_cuda(monkeypatch, visible, order, out, code,
                                                                             slug, asked):
    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, code, out, "")

    monkeypatch.setattr(provenance.subprocess, "run", run)
    for name, value in (("CUDA_VISIBLE_DEVICES", visible), ("CUDA_DEVICE_ORDER", order)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert provenance.quick_gpu_slug() == slug
    assert seen == ([] if asked is None else [["nvidia-smi", *asked, "--query-gpu=name,mig.mode.current",
                                                          "--format=csv,noheader"]])


def test_no_nvidia_smi_names_no_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    def run(cmd, **kw):
        raise FileNotFoundError(cmd[0])

    monkeypatch.setattr(provenance.subprocess, "run", run)
    assert provenance.quick_gpu_slug() is None
