"""The CLI through click's CliRunner: happy paths and every bad input -> one line, non-zero."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlog.commands.main import main

from .helpers import SECTIONS_REP, make_record, put, scratch_repo


@pytest.fixture
def repo(tmp_path):
    root = scratch_repo(tmp_path)
    put(root, make_record("torch", median_ms=0.12))
    put(root, make_record("torch_compile", report=SECTIONS_REP, median_ms=0.09, seed=1))
    return root


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def one_line_error(result, code, fragment):
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert fragment in lines[0], lines[0]


def test_list_shows_profiled_and_unprofiled(repo):
    r = run(repo, "list")
    assert r.exit_code == 0
    assert "torch" in r.output and "nvidia-h100-80gb-hbm3: 8192x4096 fp32" in r.output
    assert "not profiled" in r.output


def test_list_names_each_gpu_once_per_revision(repo):
    put(repo, make_record("torch", shape=(4, 64), median_ms=0.01))
    h200 = make_record("torch", median_ms=0.1)
    h200["gpu"] = dict(h200["gpu"], name="NVIDIA H200", slug="nvidia-h200")
    put(repo, h200)
    softmax = run(repo, "list").output.split("\nsoftmax ")[1]
    line = next(ln for ln in softmax.splitlines() if ln.split()[:1] == ["torch"])
    assert line.count("nvidia-h100-80gb-hbm3") == 1 and line.count("nvidia-h200") == 1
    assert "nvidia-h100-80gb-hbm3: 4x64 fp32, 8192x4096 fp32; nvidia-h200: 8192x4096 fp32" in line


def test_list_marks_stale_profiles(repo):
    path = next((repo / "profiles").rglob("torch.8192x4096.fp32.json"))
    rec = json.loads(path.read_text())
    rec["source_sha256"] = "0" * 64
    path.write_text(json.dumps(rec))
    assert "STALE" in run(repo, "list").output


def test_show_marks_stale_as_list_does(repo):
    assert "STALE" not in run(repo, "show", "softmax/torch").output.splitlines()[0]
    path = next((repo / "profiles").rglob("torch.8192x4096.fp32.json"))
    rec = json.loads(path.read_text())
    rec["source_sha256"] = "0" * 64
    path.write_text(json.dumps(rec))
    softmax = run(repo, "list").output.split("\nsoftmax ")[1]
    listed = next(ln for ln in softmax.splitlines() if ln.split()[:1] == ["torch"])
    first = run(repo, "show", "softmax/torch").output.splitlines()[0]
    assert "8192x4096 fp32 STALE" in listed and "8192x4096 fp32 STALE" in first
    assert "`kernlog profile softmax --rev torch --shape 8192x4096 --dtype fp32 --force`" in run(
        repo, "show", "softmax/torch").output


def test_list_counts_stale_sweep_points_and_report_warns(repo):
    import pandas as pd

    from kernlog.registry import load_kernel

    today = load_kernel(repo, "softmax").revision("torch").sha256()
    pd.DataFrame([{"kernel": "softmax", "revision": "torch", "shape": s, "dtype": "fp32", "metric": m, "value": 1.0,
                   "gpu": "NVIDIA H100 80GB HBM3", "copy_gbps": 3000.0, "matmul_tflops": 700.0, "source_sha256": sha}
                  for s, sha in (("4096x1024", today), ("1024x131072", "0" * 64)) for m in ("gbps", "median_ms")]
                 ).to_csv(repo / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv", index=False)
    softmax = run(repo, "list").output.split("\nsoftmax ")[1]
    line = next(ln for ln in softmax.splitlines() if ln.strip().startswith("torch "))
    assert line.endswith("swept: nvidia-h100-80gb-hbm3 2 points (1 STALE)"), line
    r = run(repo, "report")
    assert r.exit_code == 0 and ("warning: softmax: sweep points of torch (on NVIDIA H100 80GB HBM3) were measured "
                                 "on an older source") in r.output
    assert run(repo, "report", "--check").exit_code == 0  # marked in the log, which is up to date


@pytest.mark.parametrize("text", ["a,b\n1,2\n", "revision,metric,source_sha256\ntorch,gbps,\n",
                                  "revision,shape,dtype,metric,value,gpu,copy_gbps,matmul_tflops\n"
                                  "torch,abc,fp32,gbps,1.0,H100,3000,700\n", ""])
def test_a_bench_file_kernlog_cannot_read_is_one_line(repo, text):
    (repo / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv").write_text(text)
    one_line_error(run(repo, "list"), 2, "not a kernlog bench file")
    one_line_error(run(repo, "report"), 2, "not a kernlog bench file")


def test_sweep_points_without_a_hash_are_not_judged(repo):
    path = repo / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv"
    path.write_text("revision,shape,dtype,metric,value,gpu,copy_gbps,matmul_tflops,source_sha256\n"
                    "torch,4096x1024,fp32,gbps,1.0,H100,3000,700,\n")
    softmax = run(repo, "list").output.split("\nsoftmax ")[1]
    line = next(ln for ln in softmax.splitlines() if ln.strip().startswith("torch "))
    assert line.endswith("swept: nvidia-h100-80gb-hbm3 1 point"), line
    r = run(repo, "report")
    # the front page's legend defines †; no figure on the kernel's page carries it
    assert r.exit_code == 0 and "warning" not in r.output and "†" not in (repo / "reports" / "softmax.md").read_text()


def test_show_and_diff(repo):
    r = run(repo, "show", "softmax/torch")
    assert r.exit_code == 0 and "ncu duration" in r.output and "85.12" in r.output
    r = run(repo, "diff", "softmax/torch", "softmax/torch_compile")
    assert r.exit_code == 0 and "FASTER" in r.output
    r = run(repo, "diff", "softmax/torch", "softmax/torch_compile", "--format", "json")
    assert json.loads(r.output)["timing"]["verdict"] == "faster"
    assert run(repo, "diff", "softmax/torch", "softmax/torch_compile", "--format", "md").output.startswith("**")


def test_report_then_check(repo):
    assert run(repo, "report", "--check").exit_code != 0  # no KERNEL_LOG.md yet
    r = run(repo, "report")
    assert r.exit_code == 0 and (repo / "KERNEL_LOG.md").exists()
    r = run(repo, "report", "--check")
    assert r.exit_code == 0, r.output
    put(repo, make_record("torch", median_ms=0.5))
    one_line_error(run(repo, "report", "--check"), 2, "out of date")


def test_report_check_fails_on_a_plot_missing_stale_or_without_its_digest(repo, monkeypatch):
    """--check compares each linked plot's data digest with what profiles/ holds, drawing nothing:
    a plot deleted, left from other data (the log itself up to date), stripped of its digest, or
    drawn by an older PLOT_VERSION fails in one line naming it; `kernlog report` mends each."""
    from kernlog.registry import kernel_names, load_kernel
    from kernlog.render import plots
    from kernlog.render import report as rpt

    assert run(repo, "report").exit_code == 0
    name = "reports/softmax_roofline_nvidia-h100-80gb-hbm3_8192x4096_fp32.svg"
    svg = repo / name
    assert "kernlog-data " in svg.read_text() and run(repo, "report", "--check").exit_code == 0
    svg.unlink()
    one_line_error(run(repo, "report", "--check"), 2,
                   f"the log's pages and plots disagree with profiles/ ({name} is missing)")
    assert run(repo, "report").exit_code == 0 and run(repo, "report", "--check").exit_code == 0
    put(repo, make_record("torch", median_ms=0.5))  # the plot's data moves; the log is re-rendered alone
    (repo / rpt.LOG).write_text(rpt.render(repo, [load_kernel(repo, n) for n in kernel_names(repo)]))
    one_line_error(run(repo, "report", "--check"), 2, f"{name} was drawn from other data than profiles/ holds")
    assert run(repo, "report").exit_code == 0 and run(repo, "report", "--check").exit_code == 0
    svg.write_text(svg.read_text().replace("kernlog-data ", "kernlog-nodata "))
    one_line_error(run(repo, "report", "--check"), 2, f"{name} carries no data digest")
    assert run(repo, "report").exit_code == 0
    monkeypatch.setattr(plots, "PLOT_VERSION", plots.PLOT_VERSION + 1)
    one_line_error(run(repo, "report", "--check"), 2, "was drawn from other data")
    assert run(repo, "report").exit_code == 0 and run(repo, "report", "--check").exit_code == 0


@pytest.mark.parametrize("args,code,fragment", [
    (["show", "nosuch/torch"], 2, "no kernel 'nosuch'; kernels: "),
    (["show", "softmax/v9_nothing"], 2, "no revision 'v9_nothing' in softmax; revisions: v0_naive, "),
    (["show", "softmax/v0_naive"], 2, "softmax/v0_naive has no stored profile: run `kernlog profile softmax"),
    (["show", "attention_backward/wrong_no_delta"], 2, "attention_backward/wrong_no_delta is a known-wrong revision, "
     "never profiled: `TRITON_INTERPRET=1 kernlog check attention_backward --rev wrong_no_delta --device cpu` shows "
     "the gate rejecting it"),
    (["show", "softmax/torch@4096x1024"], 2, "no profile of softmax/torch@4096x1024; stored: softmax/torch@"),
    (["show", "softmax/torch@fp33"], 2, "no profile of softmax/torch@fp33; stored: "),
    (["show", "softmax/torch@8192x4096.fp3!"], 2, "bad selector part 'fp3!'"),
    (["show", "../../etc/passwd"], 2, "bad revision"),
    (["show", "softmax/../../x"], 2, "bad revision"),
    (["diff", "softmax/torch", "softmax/nope"], 2, "no revision 'nope' in softmax"),
    (["check", "nosuch"], 2, "unknown kernel"),
    (["check", "softmax", "--rev", "nope"], 2, "unknown revision"),
])
def test_bad_input_is_one_line_and_nonzero(repo, args, code, fragment):
    one_line_error(run(repo, *args), code, fragment)


def test_bad_shape_is_rejected(repo):
    r = run(repo, "profile", "softmax", "--shape", "12xab")
    assert r.exit_code == 2 and "bad shape" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("command", [("profile", "softmax"), ("noise", "softmax"), ("show", "softmax/torch"),
                                     ("import", "r.ncu-rep", "--kernel", "softmax", "--rev", "mine")])
def test_a_shape_given_twice_is_refused_not_the_last_taken(repo, command):
    """A one-shape command given --shape twice once profiled the last alone, saying nothing."""
    r = run(repo, *command, "--shape", "8x8", "--shape", "16x16")
    assert r.exit_code == 2 and "given 2 times (8x8, 16x16)" in r.output and "once per shape" in r.output, r.output
    assert "Traceback" not in r.output


def test_corrupt_profile_json_is_one_line(repo):
    path = next((repo / "profiles").rglob("torch.8192x4096.fp32.json"))
    path.write_text("{not json")
    one_line_error(run(repo, "show", "softmax/torch"), 2, "cannot read profile")


def test_profile_without_gpu_is_one_line(repo, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    one_line_error(run(repo, "profile", "softmax"), 4, "no CUDA GPU")
    one_line_error(run(repo, "bench", "softmax"), 4, "no CUDA GPU")


def test_outside_a_repository(tmp_path):
    one_line_error(run(tmp_path, "list"), 2, "no kernels/ folder")


def test_ambiguous_revision_asks_for_shape(repo):
    put(repo, make_record("torch", shape=(4096, 1024)))
    put(repo, make_record("torch", shape=(1024, 4096)))
    r = run(repo, "show", "softmax/torch")  # the kernel's declared profile shape
    assert r.exit_code == 0 and "8192x4096" in r.output.splitlines()[0]
    for path in (repo / "profiles").rglob("torch.8192x4096.fp32.*"):
        path.unlink()
    one_line_error(run(repo, "show", "softmax/torch@fp32"), 2, "softmax/torch@fp32 has 2 profiles; name one: "
                   "softmax/torch@1024x4096.fp32.nvidia-h100-80gb-hbm3  softmax/torch@4096x1024")
    r = run(repo, "show", "softmax/torch", "--shape", "4096x1024")
    assert r.exit_code == 0 and "4096x1024" in r.output
    assert run(repo, "show", "softmax/torch@4096x1024").output == r.output


def test_list_flags_a_missing_ncu_report(repo):
    assert "ncu report missing" not in run(repo, "list").output
    for path in (repo / "profiles").rglob("*.ncu-rep"):
        path.unlink()
    assert "ncu report missing" in run(repo, "list").output


def test_bench_names_an_unknown_family_in_one_line(tmp_path):
    from .helpers import scratch_repo

    root = scratch_repo(tmp_path)
    r = CliRunner().invoke(main, ["--root", str(root), "bench", "softmax", "--family", "nope"])
    assert r.exit_code == 2 and "softmax has no family 'nope'; families: vocab" in r.output
    assert "Traceback" not in r.output


def test_a_bench_file_missing_columns_names_them(repo):
    """The line says what to fix: which columns the file lacks."""
    (repo / "profiles" / "nvidia-h100-80gb-hbm3" / "softmax" / "bench.csv").write_text("a,b\n1,2\n")
    for command in ("list", "report"):  # each reads it its own way (csv, pandas)
        r = run(repo, command)
        assert r.exit_code == 2 and "(missing revision, shape, dtype, metric, value, gpu" in r.output, command


@pytest.mark.parametrize("command", ["misses", "prune"])
def test_an_optional_kernel_shows_as_optional_in_help(command):
    """misses and prune run over every kernel without one: their usage line says so."""
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    assert f"Usage: main {command} [OPTIONS] [KERNEL]\n" in result.output


def test_every_command_is_registered_once_with_its_name():
    assert sorted(main.commands) == ["bench", "check", "compare", "compress", "diff", "dispatch", "history", "import",
                                     "init", "list", "misses", "noise", "open", "profile", "prune", "report", "show",
                                     "triage"]
    # each imported on first use (kernlog.commands.main): the command found under a name is that name's
    assert all(main.commands[name].name == name for name in main.commands)


def test_check_on_the_cpu_skips_cuda_revisions_and_says_so(repo):
    result = run(repo, "check", "softmax", "--rev", "v0_naive", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert result.output == "v0_naive: skipped on the CPU\n"


def test_only_cuda_and_torch_compile_revisions_are_skipped_on_the_cpu():
    """A Triton revision whose name says compile is gated on the CPU like any other (a wrong one
    named so passed `check` unseen); torch.compile's references, by name and kind, are skipped."""
    from kernlog.run.ladder import skipped_on_cpu
    from kernlog.spec import Revision

    def rev(name, kind):
        return Revision(name, kind, (), lambda: None, "a revision")
    assert skipped_on_cpu(rev("v0_naive", "cuda")) and skipped_on_cpu(rev("torch_compile", "torch"))
    assert not skipped_on_cpu(rev("v4_compile", "triton")) and not skipped_on_cpu(rev("v3_precompiled", "triton"))
    assert not skipped_on_cpu(rev("torch", "torch"))


def test_compress_then_open_gives_the_recorded_report_back(repo):
    """`kernlog compress` stores every plain report as .xz (the JSONs untouched); `kernlog open`
    gives a path to bytes with the recorded size and sha256, from a cache git ignores."""
    import hashlib

    jsons = {p: p.read_bytes() for p in (repo / "profiles").rglob("*.json")}
    rec = json.loads(next(p for p in jsons if p.name.startswith("torch.")).read_text())
    plain = sorted((repo / "profiles").rglob("*.ncu-rep"))  # the two profiles share one report's bytes
    r = run(repo, "compress")
    assert r.exit_code == 0 and r.stdout.startswith(f"compressed {len(plain)} report(s):"), r.output
    assert not list((repo / "profiles").rglob("*.ncu-rep"))
    assert sorted((repo / "profiles").rglob("*.xz")) == [p.with_name(p.name + ".xz") for p in plain]
    for p, body in jsons.items():  # each JSON gains its .xz's own size and sha256, nothing else
        data = json.loads(body)
        xz = p.parent / (data["ncu"]["report"] + ".xz")
        data["ncu"]["report_xz"] = {"bytes": xz.stat().st_size, "sha256": hashlib.sha256(xz.read_bytes()).hexdigest()}
        assert p.read_bytes() == (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
    assert run(repo, "list").exit_code == 0 and "softmax/torch" in run(repo, "show", "softmax/torch").output
    opened = run(repo, "open", "softmax/torch")
    path = Path(opened.stdout.strip())
    assert opened.exit_code == 0 and path.is_relative_to(repo / ".cache")
    body = path.read_bytes()
    assert len(body) == rec["ncu"]["report_bytes"] and hashlib.sha256(body).hexdigest() == rec["ncu"]["report_sha256"]
    assert run(repo, "compress").stdout.startswith("compressed 0 report(s)")  # nothing left to do


def test_open_names_a_corrupt_compressed_report_in_one_line(repo):
    run(repo, "compress")
    xz = next((repo / "profiles").rglob("*.xz"))
    xz.write_bytes(xz.read_bytes()[:200])
    r = run(repo, "open", "softmax/torch")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "ncu report truncated or replaced" in r.stderr and "is 200 bytes" in r.stderr
