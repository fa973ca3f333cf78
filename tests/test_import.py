"""`kernlog import`: a report kernlog did not capture (plain `ncu -o`) becomes a profile that
show, diff, list and the log read like any other; bad input is one line, nothing written.

The shared F.softmax report (--set full) is 7.5 MB, too big for the repository: the tests
use the Triton softmax reports, one with five sections (the rest "not collected") and one
with the full set and an NVTX range "kl".
"""
import hashlib
import json

import pytest
from click.testing import CliRunner

from kernlog.capture import importer
from kernlog.commands.main import main
from kernlog.store import profiles as store

from .helpers import FULL_REP, SECTIONS_REP, make_record, put, scratch_repo

GPU_DIR = "profiles/nvidia-h100-80gb-hbm3/softmax"


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def imp(root, report=SECTIONS_REP, rev="ncu_probe", *extra):
    return run(root, "import", str(report), "--kernel", "softmax", "--rev", rev, *extra)


def files(root):
    return sorted(str(p.relative_to(root)) for p in (root / "profiles").rglob("*"))


@pytest.fixture
def repo(tmp_path):
    return scratch_repo(tmp_path)


def test_import_then_show_says_not_collected_and_provenance_comes_from_the_report(repo):
    r = imp(repo)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"{GPU_DIR}/ncu_probe.8192x4096.fp32.json"
    rec = store.load_profile(repo, repo / r.output.strip())  # the integrity loader every read uses
    assert rec.gpu.name == "NVIDIA H100 80GB HBM3" and rec.gpu.rest["sm_count"] == 132
    assert rec.gpu.rest["capability"] == "9.0" and rec.gpu.rest["cuda"] == "13.0"
    assert rec.gpu.driver == "unknown"  # ncu 2025.3.1 records none
    assert rec.versions["ncu"] == "2025.3.1.0"
    assert rec.captured_at.startswith("2026-11-22T")
    assert rec.ncu.clock_control == "none" and rec.ncu.rest["cache_control"] == "all"
    assert rec.ncu.rest["sections"] == ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats",
                                        "MemoryWorkloadAnalysis"]
    sha = hashlib.sha256(SECTIONS_REP.read_bytes()).hexdigest()
    assert rec.imported["sha256"] == sha == rec.ncu.report_sha256
    assert rec.imported["file"] == SECTIONS_REP.name
    assert rec.source_sha256 is None and rec.role == "reference"
    assert rec.timing.samples_ms == [pytest.approx(0.08464)] and rec.timing.source == "ncu duration"
    assert rec.metrics["dram_mb"] is None and rec.metrics["instructions"] is None
    assert rec.ceilings["copy_gbps"] is None  # this GPU has no ceilings.json here
    out = run(repo, "show", "softmax/ncu_probe")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert any("DRAM bytes read+written" in ln and "not collected" in ln for ln in lines)
    assert any("warp instructions executed" in ln and "not collected" in ln for ln in lines)
    assert "imported from triton_softmax_8192x4096_fp32_sections.ncu-rep" in out.output
    assert "ncu's duration of the profiled launch (no wall-time samples)" in out.output
    assert "84.64 us" in out.output and "wall time (median" not in out.output


def test_a_ladder_revision_imported_has_an_unknown_source_and_is_not_stale(repo):
    r = imp(repo, FULL_REP, "triton", "--range", "kl")
    assert r.exit_code == 0, r.output
    rec = json.loads((repo / r.output.strip()).read_text())
    assert rec["source_sha256"] is None and rec["role"] == "counterpart" and rec["kind"] == "triton"
    assert rec["imported"]["range"] == "kl" and rec["metrics"]["instructions"] is not None
    listing = run(repo, "list")
    assert listing.exit_code == 0, listing.output
    line = next(ln for ln in listing.output.split("\nsoftmax ")[1].splitlines() if ln.strip().startswith("triton "))
    assert "nvidia-h100-80gb-hbm3: 8192x4096 fp32" in line and "STALE" not in line


def test_diff_between_an_import_and_a_profile_says_too_few_samples(repo):
    put(repo, make_record("torch", median_ms=0.11))
    assert imp(repo).exit_code == 0
    r = run(repo, "diff", "softmax/torch", "softmax/ncu_probe")
    assert r.exit_code == 0, r.output
    assert "too few samples (n=60 vs 1" in r.output
    assert "softmax/ncu_probe is an imported ncu report" in r.output
    d = json.loads(run(repo, "diff", "softmax/ncu_probe", "softmax/torch", "--format", "json", "--all").output)
    assert d["timing"]["verdict"] == "too few samples" and d["timing"]["n_a"] == 1
    dram = next(row for row in d["rows"] if row["metric"] == "dram_mb")
    assert dram["a"] is None and dram["judgement"] == "not collected"


def test_the_log_renders_an_import_with_the_gpus_measured_ceilings(repo):
    put(repo, make_record("v0_naive", median_ms=0.3))
    (repo / "profiles/nvidia-h100-80gb-hbm3/ceilings.json").write_text(
        json.dumps({"copy_gbps": 2990.0, "matmul_bf16_tflops": 790.0}))
    r = imp(repo, SECTIONS_REP, "v1_block_smem")
    assert r.exit_code == 0, r.output
    assert json.loads((repo / r.output.strip()).read_text())["ceilings"]["copy_gbps"] == 2990.0
    rep = run(repo, "report")
    assert rep.exit_code == 0, rep.output
    log = (repo / "reports" / "softmax.md").read_text()
    row = next(ln for ln in log.splitlines() if ln.startswith("| v1_block_smem"))
    assert "(imported)" in row and "(stale)" not in row and "too few samples" in row
    # 268 MB / 84.64 us = 3171 GB/s, 106% of the roof the 2990 GB/s copy sets; % of copy needs a
    # same-size copy timed beside it, which an import lacks
    assert "| 84.6 | 3171 | – | 106% |" in row
    assert "- **Imported** from `triton_softmax_8192x4096_fp32_sections.ncu-rep`" in log


def test_the_log_renders_an_import_without_ceilings(repo):
    assert imp(repo).exit_code == 0
    rep = run(repo, "report")
    assert rep.exit_code == 0, rep.output
    log = (repo / "reports" / "softmax.md").read_text()
    row = next(ln for ln in log.splitlines() if ln.startswith("| ncu_probe"))
    assert "| 84.6 | 3171 | – | – |" in row  # no copy measured: neither % of copy nor of roofline


def test_an_existing_profile_is_kept_without_force(repo):
    path = repo / imp(repo).output.strip()
    before = path.read_bytes()
    r = imp(repo, FULL_REP, "ncu_probe", "--range", "kl")
    assert r.exit_code == 2 and r.output.strip().endswith("exists; pass --force to replace it"), r.output
    assert path.read_bytes() == before and len(r.output.strip().splitlines()) == 1
    r = imp(repo, FULL_REP, "ncu_probe", "--range", "kl", "--force")
    assert r.exit_code == 0, r.output
    assert json.loads(path.read_text())["imported"]["file"] == FULL_REP.name
    assert store.load_profile(repo, path).ncu.report_bytes == FULL_REP.stat().st_size


def test_several_launches_without_a_range_are_all_the_revisions_kernels(repo, monkeypatch):
    real = importer.ncurep.read_report
    monkeypatch.setattr(importer.ncurep, "read_report", lambda p: real(p) * 2)
    r = imp(repo)
    assert r.exit_code == 0, r.output
    assert "the report holds 2 kernel launches and no --range was given" in r.output
    rec = json.loads((repo / f"{GPU_DIR}/ncu_probe.8192x4096.fp32.json").read_text())
    assert len(rec["facts"]["kernels"]) == 2 and rec["metrics"]["duration_us"] == pytest.approx(2 * 84.64)


def _bad_inputs(tmp):
    text = tmp / "notes.ncu-rep"
    text.write_text("not a report\n")
    empty = tmp / "empty.ncu-rep"  # the session header blocks alone: a report of no kernel
    empty.write_bytes(SECTIONS_REP.read_bytes()[:145])
    return {
        "missing file": (["import", str(tmp / "nope.ncu-rep"), "--kernel", "softmax", "--rev", "x"], "no such file"),
        "not a report": (["import", str(text), "--kernel", "softmax", "--rev", "x"], "is not an ncu report"),
        "no kernels": (["import", str(empty), "--kernel", "softmax", "--rev", "x"], "holds no profiled kernel"),
        "bad kernel name": (["import", str(SECTIONS_REP), "--kernel", "Soft-max", "--rev", "x"], "bad kernel name"),
        "unknown kernel": (["import", str(SECTIONS_REP), "--kernel", "nope", "--rev", "x"], "no kernel 'nope'"),
        "bad rev name": (["import", str(SECTIONS_REP), "--kernel", "softmax", "--rev", "../x"], "bad revision name"),
        "bad shape": (["import", str(SECTIONS_REP), "--kernel", "softmax", "--rev", "x", "--shape", "8k"], "bad shape"),
        "shape rank": (["import", str(SECTIONS_REP), "--kernel", "softmax", "--rev", "x", "--shape", "4096"],
                       "2 dimension(s)"),
        "dtype": (["import", str(SECTIONS_REP), "--kernel", "softmax", "--rev", "x", "--dtype", "fp16"],
                  "has no fp16 inputs"),
        "range": (["import", str(SECTIONS_REP), "--kernel", "softmax", "--rev", "x", "--range", "nope"],
                  "its ranges: kl"),
    }


@pytest.mark.parametrize("case", ["missing file", "not a report", "no kernels", "bad kernel name", "unknown kernel",
                                  "bad rev name", "bad shape", "shape rank", "dtype", "range"])
def test_bad_input_is_one_line_and_writes_nothing(repo, tmp_path_factory, case):
    args, fragment = _bad_inputs(tmp_path_factory.mktemp("bad"))[case]
    r = CliRunner().invoke(main, ["--root", str(repo), *args])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.output, r.output
    assert fragment in lines[0], lines[0]
    assert files(repo) == []


def test_an_imported_report_reads_the_gpu_s_capabilities_from_its_device_attributes():
    """What `kernlog profile` reads from the GPU (kernlog.cuda.device_caps), an import reads
    from the report: an H100's 132 SMs, compute capability 9.0, 227 KiB per block, clusters."""
    from kernlog.capture import ncu as ncurep

    gpu = importer._gpu(ncurep.read_report(FULL_REP)[0], "13.0")
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["capability"] == "9.0" and gpu["sm_count"] == 132
    assert gpu["smem_per_block_optin"] == 227 * 1024 and gpu["cluster_launch"] is True and gpu["cuda"] == "13.0"
