"""kernels.common.tuning: the pick is made once per key, over the pruned configs, and then
launched with the caller's extras; ties go to the earlier candidate."""
import pytest
import torch
import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning


def test_a_tie_goes_to_the_earlier_candidate_and_a_clear_win_to_the_fastest():
    assert tuning.choose([1.004, 1.0, 1.5]) == 0
    assert tuning.choose([1.5, 1.0, 1.004]) == 1
    assert tuning.choose([1.01, 1.0]) == 1  # 1% is no tie: a 2% tie cost the norms their best config


def _prune(configs, named_args, **kwargs):
    assert named_args["n"] == 40 and kwargs["FACTOR"] == 3.0  # the kernel's arguments by name, extras as keywords
    return [c for c in configs if c.kwargs["BLOCK"] <= 32]


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=2) for b in (8, 16, 64)], key=["n"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _scale(x_ptr, y_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * FACTOR, mask=offs < n)


def test_launch_tuned_picks_once_per_key_among_the_pruned_configs(monkeypatch):
    triton_interpreter.apply()
    picks = []

    def fake_fastest(run, candidates, device):  # CUDA events need a GPU: pick the last one
        picks.append([c["BLOCK"] for c in candidates])
        return candidates[-1]

    monkeypatch.setattr(tuning, "fastest", fake_fastest)
    monkeypatch.setattr(tuning, "PICKED", {})
    x = torch.arange(40, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(40, meta["BLOCK"]),)  # noqa: E731
    for _ in range(2):
        y = torch.full_like(x, float("nan"))
        tuning.launch_tuned(_scale, grid, (x, y, 40), ("k",), "cpu", FACTOR=3.0)
        assert torch.equal(y, 3 * x)
    assert picks == [[8, 16]]  # once, and never the pruned BLOCK=64
    assert tuning.PICKED[(_scale, "k")]["BLOCK"] == 16


@pytest.mark.gpu
def test_fastest_keeps_the_faster_of_two_launches():
    x = torch.zeros(1 << 24, device="cuda")

    def run(repeats):
        for _ in range(repeats):
            x.add_(1.0)

    assert tuning.fastest(run, [8, 1], x.device) == 1


@pytest.mark.gpu
def test_fastest_times_the_gpu_not_the_host():
    """A launcher with slow Python must not lose to a slower kernel: the GPU is kept busy with
    flushes while the host queues, so no timed window holds host time. On the H100 the first
    picker let the GPU catch up (104 us of host a launch against 84 of GPU), and five picks
    of one softmax shape read 1.4-2.7 TB/s for the same config."""
    import time

    x = torch.zeros(1 << 24, device="cuda")

    def run(candidate):
        host_s, repeats = candidate
        time.sleep(host_s)
        for _ in range(repeats):
            x.add_(1.0)

    assert tuning.fastest(run, [(0.0, 4), (0.002, 1)], x.device) == (0.002, 1)


def test_candidates_built_by_a_function_are_built_on_the_first_call_only(monkeypatch):
    monkeypatch.setattr(tuning, "PICKED", {})  # no pick left by an earlier test or run
    built, ran = [], []

    def candidates():
        built.append(1)
        return ["only"]

    for _ in range(3):
        tuning.launch_fastest(("test_built_once",), candidates, ran.append, device=None)
    assert len(built) == 1 and ran == ["only"] * 3


def test_the_profile_records_the_pick_and_the_ncu_pass_is_pinned_to_it(monkeypatch, tmp_path):
    """The timing pass's pick is recorded (used_config) and, handed over through PIN_ENV, taken
    by another process without timing: the ncu pass profiles the config that was timed."""
    triton_interpreter.apply()
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[-1])
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "USED", {})
    monkeypatch.setattr(tuning, "_PINS", [])
    x = torch.arange(40, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(40, meta["BLOCK"]),)  # noqa: E731
    y = torch.empty_like(x)
    tuning.launch_tuned(_scale, grid, (x, y, 40), ("k",), "cpu", FACTOR=3.0)
    config = tuning.used_config()
    assert config == {"_scale|'k'": repr(tuning.PICKED[(_scale, "k")])} and "'BLOCK': 16" in config["_scale|'k'"]

    # the ncu pass: a fresh process (fresh PICKED) whose fastest() would pick BLOCK=8
    pins = tmp_path / "pins.json"
    pins.write_text(__import__("json").dumps(config))
    monkeypatch.setenv(tuning.PIN_ENV, str(pins))
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "_PINS", [])
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[0])
    tuning.launch_tuned(_scale, grid, (x, y, 40), ("k",), "cpu", FACTOR=3.0)
    assert tuning.PICKED[(_scale, "k")]["BLOCK"] == 16
    assert torch.equal(y, 3 * x)


def test_a_pin_that_matches_no_candidate_is_an_error(monkeypatch, tmp_path):
    from kernlog.errors import KernlogError

    pins = tmp_path / "pins.json"
    pins.write_text('{"f|1": "999"}')
    monkeypatch.setenv(tuning.PIN_ENV, str(pins))
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "_PINS", [])

    def f():
        pass

    with pytest.raises(KernlogError, match="pinned config 999 of f|1 is not among"):
        tuning.pick((f, 1), [1, 2, 3], lambda c: None, "cpu")
