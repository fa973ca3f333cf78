"""Work dealt by what it costs, not by count: revisions to GPUs longest first by their measured
seconds (gate, timing, ncu: kernlog.capture.costs), and a long gate cut into parts that run side
by side (kernlog.run.parts), every shape, dtype and case of it in exactly one part, drawn as the
whole gate draws it."""
import itertools
import os

from kernlog.capture import costs, gated
from kernlog.registry import load_kernel
from kernlog.run import fanout, gate, parts
from kernlog.store import gates

from .helpers import GPU, ROOT, make_record, put

SOFTMAX = load_kernel(ROOT, "softmax")


def _round_robin(items, n):
    return [list(items[i::n]) for i in range(n)]


def test_lpt_beats_round_robin_on_a_skewed_list_and_deals_each_item_once():
    # a ladder's costs as measured: two compile-heavy gates and many short CUDA C ones
    seconds = {"triton": 84, "torch_compile": 75, **{f"v{i}": 9 for i in range(10)}, "torch": 4, "liger": 3}
    items = list(seconds)
    for n in (2, 3, 4):
        lpt = fanout.deal(items, n, weight=seconds.get)
        rr = _round_robin(items, n)
        assert sorted(x for g in lpt for x in g) == sorted(items)  # every item dealt exactly once
        assert len(lpt) == n and all(lpt)
        assert fanout.makespan(lpt, seconds.get) < fanout.makespan(rr, seconds.get)
        # within 4/3 of the bound no split can beat: the heaviest item, or an even share
        bound = max(max(seconds.values()), sum(seconds.values()) / n)
        assert fanout.makespan(lpt, seconds.get) <= 4 / 3 * bound
    # on 2 GPUs: 129 s against 127, where dealing by count in turn gives 133 against 123
    assert fanout.makespan(fanout.deal(items, 2, weight=seconds.get), seconds.get) == 129
    assert fanout.makespan(_round_robin(items, 2), seconds.get) == 133


def test_lpt_is_the_best_split_on_small_lists():
    for costs_ in ([5, 4, 3, 3, 3], [7, 7, 6, 6, 5, 5], [10, 1, 1, 1, 1, 1, 1]):
        best = min(max(sum(c for c, g in zip(costs_, pick, strict=True) if g == k) for k in (0, 1))
                   for pick in itertools.product((0, 1), repeat=len(costs_)))
        got = fanout.makespan(fanout.deal(list(range(len(costs_))), 2, weight=lambda i: costs_[i]),
                              lambda i: costs_[i])
        assert got <= 4 / 3 * best


def test_a_gate_split_in_parts_holds_every_shape_dtype_and_case_once():
    triton = SOFTMAX.revision("triton")
    whole = {(i, d) for i, s in enumerate(SOFTMAX.gate_shapes) for d in SOFTMAX.dtypes}
    for n in (1, 2, 3, 4, 8):
        got = parts.split(SOFTMAX, triton, n)
        assert len(got) <= n and [p.turn for p in got] == list(range(len(got)))
        held = [(i, d) for p in got for i in p.shapes for d in p.dtypes]
        assert sorted(held) == sorted(whole)  # each once: none left out, none twice
    v0 = SOFTMAX.revision("v0_naive")  # declines rows past 131072 columns: those are no part's
    declined = {i for i, s in enumerate(SOFTMAX.gate_shapes) if v0.refusal(s)}
    assert declined and not declined & {i for p in parts.split(SOFTMAX, v0, 4) for i in p.shapes}


def test_only_a_gate_over_its_fair_share_is_cut_and_the_longest_go_first():
    got = parts.pieces({"triton": 84, "torch_compile": 75, "v0": 9, "v1": 9, "torch": 4}, workers=8)
    assert got["v0"] == got["torch"] == 1  # a part would save less than its process costs
    assert got["triton"] >= 4 and got["torch_compile"] >= 4
    assert parts.pieces({"triton": 84}, workers=1) == {"triton": 1}
    assert parts.pieces({"a": 10, "b": 10}, workers=2) == {"a": 1, "b": 1}  # each its worker already
    revs = [SOFTMAX.revision(n) for n in ("v0_naive", "triton", "torch_compile", "torch")]
    jobs = parts.jobs(SOFTMAX, revs, 8, {"triton": 84, "torch_compile": 75, "v0_naive": 9, "torch": 4})
    assert [j[2] for j in jobs] == sorted((j[2] for j in jobs), reverse=True)  # longest first
    # torch.compile's gate is never split (each part would start Inductor again); Triton's is
    assert {j[0].name for j in jobs if j[1] is None} == {"v0_naive", "torch", "torch_compile"}
    assert jobs[0][0].name == "torch_compile" and max(j[2] for j in jobs if j[0].name == "triton") < 84 / 3
    assert parts.jobs(SOFTMAX, revs[:1], 8, {})[0][2] == parts.estimate(revs[0])  # never measured: estimated


def test_a_cuda_c_gate_never_run_is_estimated_by_what_nvrtc_compiles():
    est = {r.name: parts.estimate(r) for r in SOFTMAX.revisions}
    # v10_meet includes five rungs before it; v0_naive only the shared header
    assert parts.CUDA_S < est["v0_naive"] < est["v5_tuned"] < est["v8_split"] < est["v10_meet"]
    assert est["v10_meet"] > 2 * parts.CUDA_S
    assert est["triton"] == parts.ESTIMATE_S["triton"] and est["torch_compile"] == parts.ESTIMATE_S["compiled"]


def test_merged_parts_say_what_the_whole_would():
    ok = [("ok", {"cases": 10, "worst_rel_error": 1e-6}, 20.0), ("ok", {"cases": 5, "worst_rel_error": 3e-6}, 15.0)]
    # the seconds: what the whole would take in one process, a process less than the parts' sum
    assert parts.merge(ok) == ("ok", {"cases": 15, "worst_rel_error": 3e-6}, 35.0 - parts.PROCESS_S)
    failed = ok + [("failed", "x 3x5 bf16 random: FAIL", 1.0), ("unsupported", "needs clusters", 0.5)]
    assert parts.merge(failed)[:2] == ("failed", "x 3x5 bf16 random: FAIL")  # a wrong answer outranks the rest
    assert parts.merge(ok + [("unsupported", "needs clusters", 0.5)])[0] == "unsupported"
    assert parts.merge(ok + [("cannot_run", "no module", 0.1)])[:2] == ("cannot_run", "no module")


def test_parts_of_a_gate_draw_and_judge_every_case_as_the_whole_does(toy):
    root, kernel = toy
    for name in ("right", "bf16_wrong"):
        rev = kernel.revision(name)
        whole = gate.check_revision(kernel, rev, "cpu", seed=7)
        split = [r for p in parts.split(kernel, rev, 4)
                 for r in gate.check_revision(kernel, rev, "cpu", seed=7, part=p)]
        key = lambda r: (r.shape, r.dtype, r.case)  # noqa: E731
        assert sorted(map(key, split)) == sorted(map(key, whole)) and len(split) == len(whole) == 4
        assert {key(r): (r.ok, r.rel_error) for r in split} == {key(r): (r.ok, r.rel_error) for r in whole}
    assert not all(r.ok for r in whole)  # bf16_wrong: its bf16 part fails, as its whole gate does


def test_a_long_gate_runs_in_parts_in_processes_and_comes_back_whole(toy):
    root, kernel = toy
    said = []
    revs = [kernel.revision(n) for n in ("right", "bf16_wrong")]
    got = gated.side_by_side(root, kernel, revs, 4, said.append, None, {"right": 60.0, "bf16_wrong": 60.0},
                             device="cpu", timeout=300)
    assert said[1] == "in parts side by side: right (2), bf16_wrong (2)"
    assert got["right"][0] == "ok" and got["right"][1]["cases"] == 4
    assert got["bf16_wrong"][0] == "failed" and " bf16 " in got["bf16_wrong"][1]


def test_costs_come_from_the_outcomes_and_the_stored_profiles_else_estimates(tmp_path):
    root = tmp_path
    (root / "profiles").mkdir()
    revs = [SOFTMAX.revision(n) for n in ("v0_naive", "triton", "torch")]
    gates.record(root, GPU["slug"], "softmax", {"triton": dict(gates.outcome("x" * 64, None, None, "profile"),
                                                              seconds=84.0)})
    rec = make_record("v0_naive", shape=(8192, 4096), dtype="fp32")
    rec["ncu"].update(process_seconds=56.0, process_revisions=[f"r{i}" for i in range(8)])
    put(root, rec)
    got = costs.seconds(root, GPU["slug"], SOFTMAX, revs, (8192, 4096), "fp32", 1.0)
    assert got["triton"] == costs.Cost(84.0, 1.0 + costs.TIMING_S + costs.NCU_S)
    assert got["v0_naive"] == costs.Cost(parts.estimate(revs[0]), 1.0 + costs.TIMING_S + 7.0)  # 56 s over 8
    assert got["torch"] == costs.Cost(parts.ESTIMATE_S["torch"], 1.0 + costs.TIMING_S + costs.NCU_S)
    assert got["torch"].total == parts.ESTIMATE_S["torch"] + 1.0 + costs.TIMING_S + costs.NCU_S
    assert costs.seconds(root, GPU["slug"], SOFTMAX, revs, (8192, 4096), "fp32", 1.0, {"triton"})["triton"] == \
        costs.Cost(0.0, 1.0 + costs.TIMING_S + costs.NCU_S)  # a pass reused: no gate to pay for


def test_a_process_spans_its_longest_gate_or_their_share_then_every_pass_one_after_another(monkeypatch):
    monkeypatch.setattr(costs, "gate_workers", lambda n: 8)
    revs = [SOFTMAX.revision(n) for n in ("v0_naive", "v1_block_smem", "torch_compile", "triton")]
    cost = {"v0_naive": costs.Cost(9.0, 2.0), "v1_block_smem": costs.Cost(9.0, 2.0),
            "torch_compile": costs.Cost(32.0, 3.0), "triton": costs.Cost(36.0, 3.0)}
    # torch.compile's gate is never cut: it is the floor; the Triton one is cut in parts below it
    assert costs.span(SOFTMAX, revs, cost) == 32.0 + 10.0
    assert costs.span(SOFTMAX, revs[:2], cost) == 9.0 + 4.0  # side by side, then one after another
    # dealt by span, the unsplittable gate shares its GPU with the passes it can hide, not another long gate
    cheap = [SOFTMAX.revision(n) for n in ("v2_warp_shuffle", "v3_online", "v4_vectorized", "torch")]
    cost.update({r.name: costs.Cost(9.0, 2.0) for r in cheap})
    groups = fanout.deal(revs + cheap, 2, weight=lambda r: cost[r.name].total,
                         span=lambda g: costs.span(SOFTMAX, g, cost))
    spans = sorted(costs.span(SOFTMAX, g, cost) for g in groups)
    assert all(not {"torch_compile", "triton"} <= {r.name for r in g} for g in groups)
    assert spans[-1] <= 32.0 + 3.0 + 5 * 2.0 and spans[-1] - spans[0] <= 12.0


def test_profile_on_gpus_deals_by_cost_and_says_each_gpus_share(tmp_path):
    revs = [SOFTMAX.revision(n) for n in ("v0_naive", "v1_block_smem", "v2_warp_shuffle", "triton", "torch_compile")]
    cost = {"triton": 90.0, "torch_compile": 80.0, "v0_naive": 10.0, "v1_block_smem": 10.0, "v2_warp_shuffle": 10.0}
    seen, said = {}, []

    def runner(cmd, env, timeout, progress, prefix):
        seen[env["CUDA_VISIBLE_DEVICES"]] = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--rev"]
        return 0, ""

    fanout.profile_on_gpus(tmp_path, "softmax", revs, [], ["0", "1"], said.append, runner, cost=cost)
    assert sorted(n for got in seen.values() for n in got) == sorted(r.name for r in revs)
    assert sorted(sum(cost[n] for n in got) for got in seen.values()) == [100, 100]  # by count: 3 (120 s) and 2
    assert {"triton", "torch_compile"} - set(seen["0"]) and {"triton", "torch_compile"} - set(seen["1"])
    assert said[0].count("(~100 s)") == 2, said


def test_a_gate_process_gets_one_cpu_thread_for_torch(toy, tmp_path, monkeypatch):
    """Side by side, each gate's OpenMP threads spin against the others' (gated.GATE_ENV)."""
    import subprocess

    root, kernel = toy
    monkeypatch.setenv("OMP_NUM_THREADS", "32")
    seen = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: seen.append(kw.get("env")) or
                        subprocess.CompletedProcess(cmd, 1, "", "boom"))
    got = gated.in_process(root, kernel, kernel.revision("right"), tmp_path, None, None, "cpu", 10.0)
    assert got[0] == "failed" and "boom" in got[1]
    env = seen[0]
    assert env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1" and env["PATH"] == os.environ["PATH"]
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # Inductor compiles in the gate's process, no pool
