"""Profiles from two machines merge in git with no conflict: one file per profile, named by
what it is, in a folder per GPU, and no index that every run rewrites. Two branches each add
profiles of another GPU (as two CI runners would), the merge is clean, and the log renders
both."""
import copy
import subprocess

from click.testing import CliRunner

from kernlog.commands.main import main

from .helpers import GPU, make_record, put, scratch_repo


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def on_gpu(rec, name, slug):
    rec = copy.deepcopy(rec)
    rec["gpu"] = dict(GPU, name=name, slug=slug)
    return rec


def test_two_branches_adding_profiles_of_two_gpus_merge_cleanly_and_render(tmp_path):
    root = scratch_repo(tmp_path)
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@example.com"), ("config", "user.name", "t")):
        git(root, *args)
    put(root, make_record("torch"))
    (root / ".gitignore").write_text("kernels\n")
    git(root, "add", "-A")
    assert git(root, "commit", "-qm", "base: H100 torch").returncode == 0
    git(root, "branch", "h200")
    put(root, make_record("torch_compile", seed=1))  # the H100 runner: another revision
    git(root, "add", "-A")
    git(root, "commit", "-qm", "h100 runner")
    git(root, "checkout", "-q", "h200")
    for rev in ("torch", "torch_compile"):  # the H200 runner: the same revisions, its own GPU
        put(root, on_gpu(make_record(rev, median_ms=0.08), "NVIDIA H200", "nvidia-h200"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "h200 runner")
    git(root, "checkout", "-q", "main")
    merged = git(root, "merge", "--no-edit", "h200")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "CONFLICT" not in merged.stdout
    assert git(root, "status", "--porcelain").stdout == ""
    listed = CliRunner().invoke(main, ["--root", str(root), "list"])
    assert listed.exit_code == 0, listed.output
    assert "nvidia-h100-80gb-hbm3: 8192x4096 fp32; nvidia-h200: 8192x4096 fp32" in listed.stdout
    (root / "KERNEL_LOG.md").write_text("# log\n")
    r = CliRunner().invoke(main, ["--root", str(root), "report"])
    assert r.exit_code == 0, r.output
    page = (root / "reports" / "softmax.md").read_text()
    across = page.split("### Across GPUs")[1]  # both branches' profiles, side by side
    assert "NVIDIA H100 80GB HBM3 us" in across and "NVIDIA H200 us" in across, page
