"""The gate's outcomes kept (profiles/<gpu>/<kernel>/gate/outcomes.json): a stored profile whose
source fails the gate now is marked in `kernlog list`, `show` and the log, and never ranked
fastest; a profile of another source is stale instead; a passing re-check clears the mark."""
import json

from click.testing import CliRunner

from kernlog.capture import gate_runs
from kernlog.capture.profiler import build_record
from kernlog.commands.main import main
from kernlog.errors import GateFailure
from kernlog.judge.gate_marks import fails_gate, mark
from kernlog.render import arc, report
from kernlog.render.listing import listing
from kernlog.render.show import render
from kernlog.run import gate
from kernlog.store import gates
from kernlog.store import profiles as store
from kernlog.store.keys import gate_outcomes

from .helpers import CEILINGS, FULL_REP, GPU, kernel_page, put, samples

SLUG = GPU["slug"]


def _toy_record(kernel, name: str, median_ms: float = 0.1, sha: str | None = None) -> dict:
    """A stored-profile record of the toy kernel's revision `name` at 7x33 fp32 (sha: its source
    hash, default the revision's today)."""
    rec = build_record(FULL_REP, kernel.revision(name), samples(median_ms), range_name="kl")
    rec.update(schema=store.SCHEMA, kernel="toy", shape=[7, 33], dtype="fp32", gpu=GPU,
               versions={"ncu": "2025.3.1", "torch": "2.11.0", "triton": "3.6.0"},
               git={"commit": "0" * 40, "dirty": False}, bytes_moved=8 * 7 * 33, flops=0, ceiling="copy",
               ceilings=CEILINGS, captured_at="2026-11-22T00:00:00+00:00", check={"cases": 1, "worst_rel_error": 0.0})
    rec["ncu"].update(report=f"{name}.ncu-rep", clock_control="none", sections=[], command=["ncu"])
    if sha is not None:
        rec["source_sha256"] = sha
    return rec


def _check(root, kernel, names, **kw) -> list[str]:
    lines = []
    try:
        for line in gate_runs.check(root, kernel, [kernel.revision(n) for n in names], "cpu", gpu=SLUG, **kw):
            lines.append(line)
    except GateFailure as exc:
        lines.append(str(exc))
    return lines


def _all_ok(kernel, rev, device, shapes=None, dtypes=None, seed=None, launch=None):
    return [gate.CheckResult(rev.name, (7, 33), d, "random", 1e-9, True) for d in kernel.dtypes]


def test_a_check_keeps_each_outcome_with_the_failing_case_and_the_source_it_checked(toy):
    root, kernel = toy
    lines = _check(root, kernel, ["bf16_wrong", "right"])
    assert lines[0].startswith("bf16_wrong: FAIL") and "failed the correctness gate: bf16_wrong" in lines[-1]
    path = gate_outcomes(root, SLUG, "toy")
    assert path == root / "profiles" / SLUG / "toy" / "gate" / "outcomes.json"
    assert json.loads(path.read_text())["gpu"] == SLUG
    got = gates.load(root, SLUG, "toy")
    wrong, right = got["bf16_wrong"], got["right"]
    assert wrong["passed"] is False and wrong["source_sha256"] == kernel.revision("bf16_wrong").sha256()
    assert wrong["failure"].startswith("3x5 bf16 random: ") and "over tolerance" in wrong["failure"], wrong
    assert "FAIL" not in wrong["failure"] and "rel err" not in wrong["failure"]
    assert wrong["by"] == "check" and wrong["checked_at"].endswith("+00:00")
    assert right == dict(right, passed=True, failure=None, source_sha256=kernel.revision("right").sha256())


def test_a_pass_in_some_dtypes_keeps_the_failure_and_the_cpu_keeps_nothing(toy):
    root, kernel = toy
    _check(root, kernel, ["bf16_wrong"])
    assert _check(root, kernel, ["bf16_wrong"], dtypes=["fp32"])[0].startswith("bf16_wrong: ok")
    assert gates.load(root, SLUG, "toy")["bf16_wrong"]["passed"] is False  # fp32 alone says nothing of bf16
    list(gate_runs.check(root, kernel, [kernel.revision("right")], "cpu"))  # no GPU named: the CPU's own
    assert "right" not in gates.load(root, SLUG, "toy") and not (root / "profiles" / "cpu").exists()


def test_the_check_command_keeps_outcomes_for_the_gpu_it_ran_on(toy, monkeypatch):
    root, kernel = toy
    monkeypatch.setattr(gate_runs, "gpu_of", lambda device: SLUG)
    result = CliRunner().invoke(main, ["--root", str(root), "check", "toy", "--rev", "bf16_wrong", "--device", "cpu"])
    assert result.exit_code == 3, result.output
    assert gates.load(root, SLUG, "toy")["bf16_wrong"]["failure"].startswith("3x5 bf16 random")


def test_a_failed_outcome_marks_the_profile_of_its_source_in_list_show_and_the_page(toy, monkeypatch):
    root, kernel = toy
    put(root, _toy_record(kernel, "bf16_wrong", 0.1))
    put(root, _toy_record(kernel, "right", 0.2))
    put(root, _toy_record(kernel, "one_bad_row", 0.3, sha="0" * 64))  # measured on an older source
    text, *_ = listing(root)
    assert "FAILS GATE" not in text
    _check(root, kernel, ["bf16_wrong", "one_bad_row", "right"])
    why = gates.load(root, SLUG, "toy")["bf16_wrong"]["failure"]
    text, *_ = listing(root)
    line = {ln.split()[0]: ln for ln in text.splitlines()[1:]}
    assert f"{SLUG}: 7x33 fp32 FAILS GATE ({why})" in line["bf16_wrong"]
    assert "STALE" in line["one_bad_row"] and "FAILS GATE" not in line["one_bad_row"]  # another source's outcome
    assert "FAILS GATE" not in line["right"]

    rec = store.load_profile(root, root / "profiles" / SLUG / "toy" / "bf16_wrong.7x33.fp32.json")
    shown = render(root, rec).splitlines()
    assert shown[0].startswith("toy/bf16_wrong  7x33 fp32 FAILS GATE  on ")
    assert shown[1].startswith("FAILS GATE: ") and why in shown[1]
    assert shown[1].endswith("`kernlog check toy --rev bf16_wrong` on that GPU")
    other = store.load_profile(root, root / "profiles" / SLUG / "toy" / "one_bad_row.7x33.fp32.json")
    assert "FAILS GATE" not in render(root, other)
    as_json = json.loads(render(root, rec, "json")), json.loads(render(root, other, "json"))
    assert [(j["fails_gate"], j["stale"]) for j in as_json] == [(why, False), (None, True)]

    sections = report.collect(root, [kernel])
    page = kernel_page(root, "toy", sections)
    assert "### bf16_wrong ‡\n" in page and f"- **Fails the gate now** ‡ on {GPU['name']}" in page
    assert "### right\n" in page and "### one_bad_row (stale)\n" in page
    arc = page.split("**The arc at")[1].split("![arc")[0]
    row = next(ln for ln in arc.splitlines() if ln.startswith("| bf16_wrong "))
    assert "‡" in row and all("‡" not in ln for ln in arc.splitlines() if ln.startswith(("| right ", "| one_bad")))
    # the fastest profile fails the gate now: never named the fastest
    assert sections[0]["ladders"][0]["arc"]["best"]["rec"].revision == "right"
    assert "best profiled: right" in report.render_blocks(sections)["front"]
    assert any("bf16_wrong (7x33 fp32" in w and why in w for w in report.gate_failures(sections))

    # a passing re-check of the same source clears every mark
    monkeypatch.setattr(gate, "check_revision", _all_ok)
    assert _check(root, kernel, ["bf16_wrong"]) == ["bf16_wrong: ok (2 cases, worst rel err 1.0e-09)"]
    assert "FAILS GATE" not in listing(root)[0] and "FAILS GATE" not in render(root, rec)
    sections = report.collect(root, [kernel])
    assert "‡" not in kernel_page(root, "toy", sections) and not report.gate_failures(sections)
    assert sections[0]["ladders"][0]["arc"]["best"]["rec"].revision == "bf16_wrong"


def test_a_reference_failing_the_gate_is_not_the_arc_best_reference(toy):
    root, kernel = toy
    put(root, _toy_record(kernel, "right", 0.2))
    put(root, _toy_record(kernel, "ref", 0.1))
    gates.record(root, SLUG, "toy", {"ref": gates.outcome(kernel.revision("ref").sha256(), "3x5 bf16 random: x",
                                                          None, "check")})
    rows = report.collect(root, [kernel])[0]["ladders"][0]["arc_rows"]
    assert [r["best_ref"] for r in rows] == [None, None] and rows[1]["fails_gate"] == "3x5 bf16 random: x"


def test_the_judgement_needs_a_failure_of_the_very_source_measured():
    failed = {"v1": {"source_sha256": "a" * 64, "passed": False, "failure": "3x5 bf16 random: err"}}
    assert fails_gate("a" * 64, "v1", failed) == "3x5 bf16 random: err"
    assert fails_gate("b" * 64, "v1", failed) is None  # another source: stale, not failing
    assert fails_gate("a" * 64, "v2", failed) is None and fails_gate("a" * 64, "v1", None) is None
    assert fails_gate(None, "v1", failed) is None  # an imported profile has no source
    assert fails_gate("a" * 64, "v1", {"v1": dict(failed["v1"], passed=True)}) is None
    assert fails_gate("a" * 64, "v1", {"v1": dict(failed["v1"], failure=None)}) == "failed"
    assert mark("x") == " FAILS GATE (x)" and mark(None) == ""


def test_an_unreadable_outcomes_file_is_no_outcome(toy):
    root, kernel = toy
    path = gate_outcomes(root, SLUG, "toy")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert gates.load(root, SLUG, "toy") == {}
    path.write_text(json.dumps({"schema": 1, "revisions": {"v1": {"passed": "no"}, "v2": []}}))
    assert gates.load(root, SLUG, "toy") == {}
    assert gates.load(root, "nvidia-nothing", "toy") == {}


def test_the_outcomes_file_is_not_read_as_a_profile(toy):
    root, kernel = toy
    put(root, _toy_record(kernel, "right", 0.2))
    _check(root, kernel, ["right"])
    assert [r for r in store.iter_profiles(root, bad="yield") if isinstance(r, store.ProfileError)] == []
    assert listing(root)[1] == []


def test_a_sweep_point_of_a_source_failing_the_gate_now_is_marked_and_never_the_best_step(toy, monkeypatch):
    import pandas as pd

    from kernlog.capture import bench

    from .test_profiler import _cpu_bench

    root, kernel = toy
    _cpu_bench(monkeypatch)
    path = bench.bench(root, kernel, [kernel.revision(n) for n in ("right", "declines", "ref")], [(3, 5)], ["fp32"],
                       budget_s=0.01, progress=lambda s: None)
    df = pd.read_csv(path, dtype={"shape": str})
    df.loc[(df["revision"] == "right") & (df["metric"] == "gbps"), "value"] *= 2  # the fastest step
    df.to_csv(path, index=False)

    def front(sections):
        return sections[0]["front"]["point"]["best"]

    assert front(report.collect(root, [kernel])) == "right"
    gates.record(root, SLUG, "toy", {"right": gates.outcome(kernel.revision("right").sha256(), "3x5 bf16 random: x",
                                                            None, "check")})
    sections = report.collect(root, [kernel])
    assert front(sections) == "declines" and arc.contradictions(sections) == []
    page = kernel_page(root, "toy", sections)
    row = next(ln for ln in page.splitlines() if ln.startswith("| fp32 | 3x5 |"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[3] == "declines", row  # the best step there: right, faster, fails the gate now
    assert "‡ right: its source fails kernlog's gate now on this GPU (3x5 bf16 random: x)" in page
    assert any("sweep points of right (on NVIDIA H100 80GB HBM3: 3x5 bf16 random: x)" in w
               for w in report.gate_failures(sections))
