"""Predictions judged: claims read from kernels/<op>/predictions.toml, each checked against
a ladder row, a speed claim met within the noise band (a tie), dtype-limited claims, and the
verdict met / partly / missed / not checkable; dtype- and shape-limited claims."""
from types import SimpleNamespace

import pytest

from kernlog.errors import KernlogError
from kernlog.judge import predictions

from .helpers import ROOT


def row(rev, wall_ms, base=None, speedup=None, **metrics):
    # the parts of a Profile predictions read
    prof = SimpleNamespace(revision=rev, shape=(8192, 4096), metrics=dict(wall_ms=wall_ms, **metrics))
    return {"rec": prof, "base": base,
            "speedup": speedup,
            "rate": {"gbps": 2800.0, "pct_copy": 93.0}, "roof": {"pct_of_roof": 0.9}}


def ladder():
    rows = [row("v1", 1.0, stall_barrier=10.0, stall_long_scoreboard=3.0, ld_sectors=300.0),
            row("v2", 0.5, base="v1", speedup=2.0, stall_barrier=2.0, stall_long_scoreboard=4.0, ld_sectors=100.0),
            row("torch", 0.51)]
    return rows, {r["rec"].revision: r for r in rows}


def test_every_claim_met_is_met_and_values_are_the_measured_ones():
    rows, by = ladder()
    claims = [{"what": "speedup", "at_least": 1.9}, {"what": "ratio_vs_previous:stall_barrier", "at_most": 0.3},
              {"what": "tbps", "at_least": 2.7}, {"what": "leading_stall", "is": "long_scoreboard"},
              {"what": "pct_copy", "at_least": 90, "at_most": 95}]
    j = predictions.judge(claims, rows[1], by, "fp32", 0.02)
    assert j["verdict"] == "met"
    assert [c["value"] for c in j["claims"]] == [2.0, 0.2, 2.8, "long_scoreboard", 93.0]


def test_a_speed_claim_inside_the_noise_band_is_a_tie_not_a_miss():
    rows, by = ladder()
    (c,) = predictions.judge([{"what": "speed_vs:torch", "at_least": 1.03}], rows[1], by, "fp32", 0.02)["claims"]
    assert c["ok"] and c["tie"] and c["value"] == pytest.approx(1.02)
    (c,) = predictions.judge([{"what": "speed_vs:torch", "at_least": 1.05}], rows[1], by, "fp32", 0.02)["claims"]
    assert not c["ok"]
    (c,) = predictions.judge([{"what": "pct_copy", "at_least": 94}], rows[1], by, "fp32", 0.02)["claims"]
    assert not c["ok"]  # not a speed: no slack


def test_partly_missed_not_checkable_and_dtype_limits():
    rows, by = ladder()
    half = [{"what": "speedup", "at_least": 1.5}, {"what": "speedup", "at_least": 3}]
    assert predictions.judge(half, rows[1], by, "fp32", 0.02)["verdict"] == "partly"
    assert predictions.judge(half[1:], rows[1], by, "fp32", 0.02)["verdict"] == "missed"
    bf16_only = [{"what": "speedup", "at_least": 1.5, "dtype": "bf16"}]
    assert predictions.judge(bf16_only, rows[1], by, "fp32", 0.02) == {"verdict": "not checkable here", "claims": []}
    other_shape = [{"what": "speedup", "at_least": 3, "shape": "8192x40960"}]  # holds "8192x4096" as text only
    assert predictions.judge(other_shape, rows[1], by, "fp32", 0.02) == {"verdict": "not checkable here", "claims": []}
    this_shape = [{"what": "speedup", "at_least": 3, "shape": "8192x4096"}]
    assert predictions.judge(this_shape, rows[1], by, "fp32", 0.02)["verdict"] == "missed"
    either = [{"what": "speedup", "at_least": 3, "shape": ["1x4096", "8192x4096"]}]
    assert predictions.judge(either, rows[1], by, "fp32", 0.02)["verdict"] == "missed"
    assert predictions.judge([{**either[0], "shape": ["1x4096"]}], rows[1], by, "fp32", 0.02)["claims"] == []
    missing = predictions.judge([{"what": "dram_pct", "at_least": 5}], rows[1], by, "fp32", 0.02)
    assert missing["verdict"] == "not checkable here" and missing["claims"][0]["value"] is None
    assert predictions.judge(None, rows[1], by, "fp32", 0.02) is None


def test_every_kernels_claims_load_and_a_bad_file_is_one_line(tmp_path):
    for kernel in ("softmax", "vector_add", "dropout", "gelu", "layernorm", "rmsnorm", "matmul_relu"):
        assert predictions.load(ROOT, kernel), kernel
    (tmp_path / "kernels" / "k").mkdir(parents=True)
    (tmp_path / "kernels" / "k" / "predictions.toml").write_text("[v1]\nclaims = [{what = 'speedup'}]\n")
    with pytest.raises(KernlogError, match="needs `what` and a bound"):
        predictions.load(tmp_path, "k")
    (tmp_path / "kernels" / "k" / "predictions.toml").write_text("[v1\n")
    with pytest.raises(KernlogError, match="not valid TOML"):
        predictions.load(tmp_path, "k")


def test_a_claim_nothing_here_measures_says_why():
    rows, by = ladder()
    first = predictions.judge([{"what": "speedup", "at_least": 1}], rows[0], by, "fp32", 0.02)
    assert first["verdict"] == "not checkable here"
    assert first["claims"][0]["why"] == "no earlier step profiled here"
    same = dict(rows[1], same_as="v1", base=None, speedup=None)
    (c,) = predictions.judge([{"what": "speedup", "at_least": 1}], same, by, "fp32", 0.02)["claims"]
    assert c["value"] is None and c["why"] == "it runs v1's compiled kernel here"
    gone = dict(rows[1], base="v0")  # a base this ladder has no row of
    (c,) = predictions.judge([{"what": "ratio_vs_previous:stall_barrier", "at_most": 1}], gone, by, "fp32",
                             0.02)["claims"]
    assert c["why"] == "no profile of v0 here"
    (c,) = predictions.judge([{"what": "speed_vs:liger", "at_least": 1}], rows[1], by, "fp32", 0.02)["claims"]
    assert c["why"] == "no profile of liger here"
    (c,) = predictions.judge([{"what": "no_such_metric", "at_least": 1}], rows[1], by, "fp32", 0.02)["claims"]
    assert c["why"] == "the profile has no no_such_metric"


def test_a_claim_of_no_change_reads_as_equal_within_noise():
    rows, by = ladder()
    (c,) = predictions.judge([{"what": "speed_vs:torch", "at_least": 1.0, "at_most": 1.0}], rows[1], by, "fp32",
                             0.05)["claims"]
    assert c["text"] == "speed_vs:torch = 1 within noise" and c["ok"] and c["tie"]
    (c,) = predictions.judge([{"what": "pct_copy", "at_least": 90, "at_most": 95}], rows[1], by, "fp32", 0.02)["claims"]
    assert c["text"] == "pct_copy >= 90 and <= 95"


def test_a_speed_claim_between_profiles_timed_at_clocks_apart_says_so():
    rows, by = ladder()

    def clocked(r, mhz):
        r["rec"].timing = SimpleNamespace(clocks={"sm_mhz": {"median": mhz}})
    clocked(rows[0], 1965.0)
    clocked(rows[1], 1845.0)  # 6.1% apart: outside a 3.5% band
    clocked(rows[2], 1950.0)  # 5.4% apart from v2, inside a 6% band
    claims = [{"what": "speedup", "at_least": 1.9}, {"what": "speed_vs:torch", "at_least": 1.0},
              {"what": "tbps", "at_least": 2.7}]
    c = predictions.judge(claims, rows[1], by, "fp32", 0.035)["claims"]
    assert c[0]["clocks"] == (1845.0, 1965.0, "v1") and c[1]["clocks"] == (1845.0, 1950.0, "torch")
    assert c[2]["clocks"] is None  # not a speed
    c = predictions.judge(claims, rows[1], by, "fp32", 0.06)["claims"]
    assert c[0]["clocks"] == (1845.0, 1965.0, "v1") and c[1]["clocks"] is None
    clocked(rows[0], None)  # a clock not recorded: nothing said
    assert predictions.judge(claims[:1], rows[1], by, "fp32", 0.035)["claims"][0]["clocks"] is None


def test_the_step_page_says_the_clock_beside_the_claim():
    from kernlog.render import steps

    judged = {"claims": [{"text": "speed_vs:v1 >= 1.05", "value": 1.04, "ok": True, "tie": True,
                          "clocks": (1845.0, 1965.0, "v1")},
                         {"text": "speedup >= 1", "value": 1.2, "ok": True, "tie": False, "clocks": None}]}
    (a, ok_a), (b, _) = steps._claim_lines(judged)
    assert a == ("speed_vs:v1 >= 1.05: 1.04 (met, a tie; timed at an SM clock of 1845 MHz, v1 at 1965: "
                 "part of the ratio is the clock)") and ok_a
    assert b == "speedup >= 1: 1.2 (met)"


@pytest.mark.parametrize("toml, said", [
    ("[v9]\nclaims = [{what = 'speedup', at_least = 1.1}]\n", "[v9] names no revision of k (v0, v1)"),
    ("[v1]\nclaims = [{what = 'speedupp', at_least = 1.1}]\n", "[v1]: 'speedupp' is no quantity kernlog measures"),
    ("[v1]\nclaims = [{what = 'speed_vs:torhc', at_least = 1}]\n", "[v1]: speed_vs:torhc names no revision (v0, v1)"),
    ("[v1]\nclaims = [{what = 'ratio_vs_previous:dram_mbb', at_most = 1}]\n", "'ratio_vs_previous:dram_mbb' is no "),
])
def test_a_claim_or_table_naming_nothing_of_the_kernel_is_one_line(tmp_path, toml, said):
    """Given the kernel's revisions (as report passes them), a typo in predictions.toml is said where it is
    written, not left to judge nothing on the GPU later."""
    (tmp_path / "kernels" / "k").mkdir(parents=True)
    (tmp_path / "kernels" / "k" / "predictions.toml").write_text(toml)
    with pytest.raises(KernlogError) as e:
        predictions.load(tmp_path, "k", ["v0", "v1"])
    assert str(e.value).startswith("kernels/k/predictions.toml: ") and said in str(e.value), str(e.value)
    ok = "[v1]\nclaims = [{what = 'speed_vs:v0', at_least = 1}, {what = 'stall_barrier', at_most = 2}, " \
         "{what = 'ratio_vs_previous:dram_mb', at_most = 1}, {what = 'pct_copy', at_least = 80}]\n"
    (tmp_path / "kernels" / "k" / "predictions.toml").write_text(ok)
    assert predictions.load(tmp_path, "k", ["v0", "v1"])["v1"]["claims"][0]["what"] == "speed_vs:v0"


def test_a_claim_on_a_stored_revision_the_kernel_no_longer_declares_still_loads(tmp_path):
    """A profile imported as a revision outside the ladder (`kernlog import --rev mine`), or a retired rung's, shows
    on the page; a table and a speed_vs claim naming it are the kernel's to make, not typos."""
    from .helpers import kernel_page, make_record, put, scratch_repo

    root = scratch_repo(tmp_path)
    rec = make_record("torch")
    rec["revision"] = "mine"
    put(root, rec)
    toml = root / "kernels" / "softmax" / "predictions.toml"
    text = toml.read_text()
    toml.unlink()  # a link to this repository's file: the copy is the test's own
    toml.write_text(text + "\n[mine]\nclaims = [{what = 'speed_vs:torch', at_least = 0.5}]\n")
    assert "| mine" in kernel_page(root, "softmax")
    toml.write_text(text + "\n[mien]\nclaims = [{what = 'speed_vs:torch', at_least = 0.5}]\n")
    with pytest.raises(KernlogError, match=r"\[mien\] names no revision of softmax"):
        kernel_page(root, "softmax")


def test_a_typo_in_predictions_shows_before_anything_is_profiled(tmp_path):
    """A team writes its claims before its first GPU run: `report` (and so `report --check` in CI's CPU job) reads
    them for an operator nothing was stored for yet, so a typo stops there, not after the GPU job pushed."""
    from kernlog.registry import load_kernel
    from kernlog.render import report

    from .helpers import scratch_repo

    root = scratch_repo(tmp_path)
    toml = root / "kernels" / "softmax" / "predictions.toml"
    text = toml.read_text()
    toml.unlink()
    toml.write_text(text + "\n[v1_block_smem_]\nclaims = [{what = 'speedup', at_least = 2}]\n")
    with pytest.raises(KernlogError, match=r"\[v1_block_smem_\] names no revision of softmax"):
        report.collect(root, [load_kernel(root, "softmax")])
