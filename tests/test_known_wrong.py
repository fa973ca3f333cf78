"""A known-wrong revision (role="wrong", with the bug it documents) stays in its ladder: the gate
must reject it, and that is a pass ("rejected, as expected"); passing is the failure (its bug is
fixed, or the gate lost its teeth). It is gated by `kernlog profile` and `kernlog bench` to prove
that, and never timed, profiled or swept."""
import json
import re
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from kernlog.capture import bench, profiler
from kernlog.commands.main import main
from kernlog.errors import GateFailure
from kernlog.registry import load_kernel
from kernlog.store import gates

from .helpers import GPU, stored_files
from .test_profiler import _cpu_bench, _cpu_profiler, ncu_running_the_target

OP = '''
import os
from pathlib import Path

import torch

from kernlog.spec import Kernel, Revision

SRC = (Path(__file__),)


def _times2(name, off=None):
    """x * 2, element `off` one too high where the output has it."""
    def load():
        def launch(inputs, out):
            if os.environ.get("TOY_LOG"):  # launches of every process, by pid
                with open(os.environ["TOY_LOG"], "a") as log:
                    log.write(f"{os.getpid()} {name}\\n")
            out.copy_(inputs[0] * 2)
            if off is not None and out.shape[0] > off[0] and out.shape[1] > off[1]:
                out[off] += 1.0
            return out
        return launch
    return load


KERNEL = Kernel(
    "toy",
    (Revision("right", "torch", SRC, _times2("right"), "x * 2"),
     Revision("racy", "torch", SRC, _times2("racy", (2, 1)), "x * 2 with a race", role="wrong",
              bug="a race leaves element [2, 1] one too high"),
     Revision("also_right", "torch", SRC, _times2("also_right"), "x * 2 again")),
    make_inputs=lambda shape, dtype, gen, device, case: (
        torch.randn(*shape, generator=gen, device=device).to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]),),
    make_output=lambda inputs: torch.empty_like(inputs[0]),
    reference=lambda inputs, out=None: inputs[0].double() * 2,
    bytes_moved=lambda shape, dtype: 8 * shape[0] * shape[1],
    check_shapes=((3, 5), (7, 33)), bench_shapes=((7, 33),), profile_shape=(7, 33), dtypes=("fp32", "bf16"),
)
'''
# the same ladder, where the race has been fixed but the revision still says it is wrong
FIXED = OP.replace('_times2("racy", (2, 1))', '_times2("racy")')
PASSED = ("kernlog: toy/racy is known wrong (role='wrong') but passed the gate: its bug is fixed "
          "(drop role='wrong') or the gate lost its teeth")


def _forget_ops() -> None:
    for name in [m for m in sys.modules if m == "ops" or m.startswith("ops.")]:
        del sys.modules[name]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository whose [tool.kernlog] keeps its operators in `ops/`, with the toy ladder; its
    package imported fresh, and forgotten after (sys.path as it was)."""
    root = tmp_path / "team"
    (root / "ops" / "toy").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.kernlog]\nkernels = "ops"\n')
    (root / "ops" / "toy" / "__init__.py").write_text(OP)
    (root / "profiles").mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    _forget_ops()
    yield root
    _forget_ops()


def check(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), "check", "toy", "--device", "cpu", *args])


def test_check_passes_a_ladder_whose_known_wrong_revision_the_gate_rejects(repo):
    got = check(repo)
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    assert lines[0].startswith("right: ok ") and lines[-1].startswith("also_right: ok ")
    assert re.match(r"racy: rejected, as expected: a race leaves element \[2, 1\] one too high \(\d+ cases", lines[1])
    assert lines[2].strip().startswith("racy 3x5 fp32 random: FAIL ") and "[2, 1]" in lines[2]  # where it was caught
    assert got.stderr == ""


def test_check_fails_where_a_known_wrong_revision_passes_the_gate(repo):
    (repo / "ops" / "toy" / "__init__.py").write_text(FIXED)
    got = check(repo)
    assert got.exit_code == 3, got.output
    assert got.stderr.splitlines() == [PASSED]
    assert "racy: PASSED the gate, but it is known wrong: a race leaves element [2, 1] one too high" in got.stdout
    assert check(repo, "--rev", "right").exit_code == 0  # the others are fine on their own


def test_profile_gates_a_known_wrong_revision_but_never_times_or_profiles_it(repo, monkeypatch, tmp_path):
    """Its gate runs in its own process beside the others' and rejects it; the ncu process started
    meanwhile never loads it, nothing of it is timed or stored, and the command ends well."""
    log = tmp_path / "launches.txt"
    monkeypatch.setenv("TOY_LOG", str(log))
    _cpu_profiler(monkeypatch, lambda *a, **k: pytest.fail("an ncu process started after the gates"),
                  ncu=ncu_running_the_target(tmp_path))
    real = profiler.build_record  # FULL_REP's kernels sit in the range "kl"
    monkeypatch.setattr(profiler, "build_record",
                        lambda actions, rev, samples, **kw: real(actions, rev, samples, range_name="kl", **kw))
    timed = []
    real_time = profiler._time
    monkeypatch.setattr(profiler, "_time",
                        lambda k, rev, *a, **kw: timed.append(rev.name) or real_time(k, rev, *a, **kw))
    kernel = load_kernel(repo, "toy")
    said = []
    written = profiler.profile(repo, kernel, list(kernel.revisions), profiler.Options(gate_workers=2), said.append)
    assert sorted(p.name for p in written if p.suffix == ".json") == ["also_right.7x33.fp32.json",
                                                                      "right.7x33.fp32.json"]
    assert not [p for p in stored_files(repo) if "racy" in p.name]
    assert timed == ["right", "also_right"]
    assert any(re.search(r"toy/racy .*: rejected, as expected: a race leaves element \[2, 1\] one too high; "
                         r"never timed or profiled$", s) for s in said), said
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert sorted(seen["go"]["revisions"]) == ["also_right", "right"]
    in_ncu = [ln.split()[1] for ln in log.read_text().splitlines() if ln.split()[0] == str(seen["pid"])]
    assert in_ncu and "racy" not in in_ncu  # not even warmed up under ncu
    kept = gates.load(repo, GPU["slug"], "toy")["racy"]  # its outcome kept as it is: the gate rejects it
    assert kept["passed"] is False and "[2, 1]" in kept["failure"]


def test_profile_fails_a_known_wrong_revision_that_passes_and_still_never_times_it(repo, monkeypatch):
    (repo / "ops" / "toy" / "__init__.py").write_text(FIXED)
    _cpu_profiler(monkeypatch, lambda *a, **k: None)
    batches = []
    monkeypatch.setattr(profiler, "_ncu_pass", lambda root, kernel, batch, *a: batches.append(batch) or [])
    kernel = load_kernel(repo, "toy")
    said = []
    with pytest.raises(GateFailure, match=re.escape(PASSED[len("kernlog: "):])):
        profiler.profile(repo, kernel, list(kernel.revisions), profiler.Options(gate_workers=1), said.append)
    assert [[t.rev.name for t in b] for b in batches] == [["right", "also_right"]]
    assert any(s.endswith("PASSED the gate, but it is known wrong: a race leaves element [2, 1] one too high; "
                          "never timed or profiled") for s in said), said


def test_bench_gates_a_known_wrong_revision_and_never_sweeps_it(repo, monkeypatch):
    _cpu_bench(monkeypatch)
    kernel = load_kernel(repo, "toy")
    said = []
    path = bench.bench(repo, kernel, list(kernel.revisions), [(7, 33)], ["fp32"], budget_s=0.01,
                       progress=said.append)
    swept = set(pd.read_csv(path, dtype={"shape": str})["revision"])
    assert swept == {"right", "also_right", bench.COPY}
    assert "racy: rejected, as expected: a race leaves element [2, 1] one too high; never timed or swept" in said


def test_bench_fails_a_known_wrong_revision_that_passes_and_still_never_sweeps_it(repo, monkeypatch):
    (repo / "ops" / "toy" / "__init__.py").write_text(FIXED)
    _cpu_bench(monkeypatch)
    kernel = load_kernel(repo, "toy")
    with pytest.raises(GateFailure, match=re.escape(PASSED[len("kernlog: "):])):
        bench.bench(repo, kernel, list(kernel.revisions), [(7, 33)], ["fp32"], budget_s=0.01, progress=lambda s: None)
    csv = repo / "profiles" / GPU["slug"] / "toy" / "bench.csv"
    assert set(pd.read_csv(csv, dtype={"shape": str})["revision"]) == {"right", "also_right", bench.COPY}
