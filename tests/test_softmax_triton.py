"""The Triton softmax's three paths: several short rows per program, a row split into chunks
that meet through a workspace (under the CPU interpreter, where programs run one after
another, all but a row's last chunk take the fallback), and the online two-pass loop for rows
past SPLIT_CAP chunks. Each passes the gate
where it is taken; a path that is refused would fail it."""
import pytest

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate

from .helpers import Refused, gate_failures
from .test_triton_compiles import _compile_all

KERNEL = load_kernel(find_root(), "softmax")


@pytest.fixture
def st():
    from kernels.softmax import softmax_triton

    return softmax_triton


def _refuse_all_but(st, monkeypatch, kept):
    for name in ("_rows", "_split", "_online"):
        if name != kept:
            monkeypatch.setattr(st, name + "_kernel", Refused())
            monkeypatch.setattr(st, name + "_tuned", Refused())


def _gate(launch, shapes, dtypes=None, device="cpu"):
    return gate_failures(KERNEL, "triton", launch, shapes, dtypes, device=device)


def test_short_rows_take_the_several_rows_path(st, monkeypatch):
    _refuse_all_but(st, monkeypatch, "_rows")
    assert not _gate(lambda inputs, out: st.softmax(inputs[0], out), ((5, 300), (3, 1), (4, 1024)))


@pytest.mark.parametrize("cols,stride,dtype", [(8, 8, "bf16"), (8, 12, "fp32"), (100, 100, "bf16"), (30, 34, "fp32"),
                                                (13, 13, "fp32"), (6, 10, "bf16"), (8, 10, "bf16")])
def test_short_rows_of_any_stride_match_float64(st, cols, stride, dtype):
    """Rows that are a column slice of a wider tensor: the length and stride go to the kernel
    divided by their quantum (8, 4, 4, 2, 1, 2, 2 elements here; the last one's length allows 8, its
    stride 2); a wrong quantum reads the wrong row or the next one. Poisoned output, float64
    reference."""
    import torch

    from kernlog.spec import torch_dtype

    x = torch.randn(37, stride, generator=torch.Generator().manual_seed(cols)).to(torch_dtype(dtype))[:, :cols]
    out = torch.empty(37, cols, dtype=x.dtype)
    gate.poison(out)
    st.softmax(x, out)
    err, problem = gate.compare(out, torch.softmax(x.double(), -1), gate.TOLERANCE[dtype])
    assert not problem, problem


def test_row_quantum_is_the_widest_vector_dividing_length_and_stride(st):
    q = st.row_quantum
    got = [q(8, 8, 2), q(8, 12, 4), q(100, 100, 2), q(30, 34, 4), q(13, 13, 4), q(1024, 1024, 4), q(8, 10, 2)]
    assert got == [8, 4, 4, 2, 1, 4, 2]


# 18-28 s through the interpreter on the 2-core CPU machine; on the CPU the split path is still
# checked against softmax by test_each_launch_leaves_all_of_a_rows_slots_in_its_new_epoch, on the
# GPU by test_every_split_config_passes_the_gate_on_gpu.
@pytest.mark.slow
def test_split_rows_meet_through_the_workspace(st, monkeypatch):
    _refuse_all_but(st, monkeypatch, "_split")
    # short=16 and 64-column chunks: rows of 2, 16 and 32 chunks (the cap), a ragged last
    # chunk, and a row of one chunk.
    launch = lambda inputs, out: st.softmax(inputs[0], out, short=16, split_block=64)  # noqa: E731
    assert not _gate(launch, ((3, 65), (5, 1000), (2, 2048), (3, 40)))


def test_rows_past_the_split_cap_take_the_online_path(st, monkeypatch):
    _refuse_all_but(st, monkeypatch, "_online")
    launch = lambda inputs, out: st.softmax(inputs[0], out, short=16, split_block=8,  # noqa: E731
                                            interpreter_block=64)
    assert not _gate(launch, ((3, 257), (2, 4097)))


def test_a_refused_path_would_fail_the_gate(st, monkeypatch):
    _refuse_all_but(st, monkeypatch, "_rows")
    failed = _gate(lambda inputs, out: st.softmax(inputs[0], out), ((2, 2000),), dtypes=("fp32",))
    assert failed and "wrong path taken" in failed[0]


def test_split_kernel_compiles_for_sm90_in_every_config(st):
    """The interpreter runs the meeting's logic, not its code for the GPU (volatile polls, the
    relaxed atomic): compile each tuned config."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU the gate tests compile and run these kernels for real")
    specs = []
    for cfg in st._split_tuned.configs:
        for dt in ("fp32", "bf16"):
            specs.append({"module": st.__name__, "name": "_split_kernel", "options": {"num_warps": cfg.num_warps},
                          "signature": {"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "slots_ptr": "*i64", "cols": "i32",
                                        "x_stride": "i32", "polls": "i32", "BLOCK": "constexpr", "SUB": "constexpr"},
                          "constexprs": {"BLOCK": cfg.kwargs["BLOCK"], "SUB": cfg.kwargs["SUB"]}})
    code, out = _compile_all(specs)
    assert code == 0, out


def _epochs(st, rows):
    """The epoch bit of each of the first `rows` rows' SPLIT_CAP slots, per row."""
    (slots,) = [s for s in st._WORKSPACE.values() if s.device.type == "cpu"]
    return [sorted({(w >> 31) & 1 for w in row}) for row in slots.view(-1, st.SPLIT_CAP)[:rows].tolist()]


def test_each_launch_leaves_all_of_a_rows_slots_in_its_new_epoch(st):
    """The protocol the meeting rests on: every launch that splits a row flips its epoch and
    leaves all SPLIT_CAP slots in it, whatever split came before (a slot left in the old epoch
    would make a later launch with more chunks take its own slot's stale epoch)."""
    import torch

    st._WORKSPACE.clear()
    x = torch.randn(3, 200)
    seen = []
    for block in (64, 8, 64, 128, 128):  # 4, 25, 4, 2 and 2 chunks, the last one ragged
        out = torch.full_like(x, float("nan"))
        st.softmax(x, out, short=16, split_block=block)
        assert torch.allclose(out, torch.softmax(x.double(), 1).float(), atol=1e-6)
        epochs = _epochs(st, 3)
        assert all(len(e) == 1 for e in epochs), epochs
        seen.append(epochs[0][0])
    assert seen == [1, 0, 1, 0, 1]


@pytest.mark.gpu
def test_every_split_config_passes_the_gate_on_gpu(st):
    """Each chunk size, rows of 1 to 32 chunks, met through the slots; then with the polls cut
    to none, so every program takes the fallback (its row's statistics from x); then to two,
    so some programs of a row meet the others' words and some fall back."""
    failed = []
    for polls in (None, 0, 2):
        for block in sorted({c.kwargs["BLOCK"] for c in st._split_tuned.configs}):
            launch = lambda inputs, out, b=block, p=polls: st.softmax(inputs[0], out, short=16,  # noqa: E731
                                                                      split_block=b, polls=p)
            shapes = ((3, block), (5, 3 * block + 7), (2, st.SPLIT_CAP * block))
            failed += [f"BLOCK={block} polls={polls}: {line}" for line in _gate(launch, shapes, device="cuda")]
    assert not failed, "\n".join(failed)
    for slots in st._WORKSPACE.values():  # every row left in one epoch
        bits = (slots.view(-1, st.SPLIT_CAP) >> 31) & 1
        assert bool((bits == bits[:, :1]).all())


def _config_launch(st, cfg, polls):
    """A launch of `_split_kernel` in one tuned config (its chunk, warps and SUB), through the
    launcher the picker runs."""
    def launch(inputs, out):
        st.launch_split(inputs[0], out, polls, **cfg.all_kwargs())
        return out

    return launch


@pytest.mark.gpu
def test_every_tuned_split_config_passes_the_gate_on_gpu(st):
    """The test above runs 4 warps only; the picker also runs 8 to 32, where the poll vector
    and the fallback's reductions span more warps: each tuned config, met and mixed (two polls)."""
    failed = []
    for cfg in st._split_tuned.configs:
        block = cfg.kwargs["BLOCK"]
        for polls in (st.GPU_POLLS, 2):
            shapes = ((3, 2 * block), (5, 3 * block + 7))
            failed += [f"{cfg}: polls={polls}: {line}"
                       for line in _gate(_config_launch(st, cfg, polls), shapes, device="cuda")]
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
def test_rows_past_the_split_cap_pass_the_gate_on_gpu():
    assert not _gate(None, ((2, 32 * 32768 + 1),), device="cuda")



@pytest.mark.parametrize("cols", [1025, 4096, 4097, 8192, 32000, 32768, 32769, 131072, 32 * 16384])
def test_autotuner_prunes_split_configs_to_rows_that_fit(st, cols):
    """Called as the autotuner calls it (the kernel's arguments by name, constexprs as keywords):
    rows of <= MAX_FUSED keep one chunk per row, rows of more than SPLIT_MIN try chunks too;
    every kept config cuts the row into at most SPLIT_CAP chunks."""
    tuner = st._split_tuned
    args = dict(zip(tuner.arg_names, (None, None, None, cols, cols, 1), strict=False))
    kept = tuner.early_config_prune(tuner.configs, args)
    assert kept
    chunks = [-(-cols // c.kwargs["BLOCK"]) for c in kept]
    assert max(chunks) <= st.SPLIT_CAP
    assert (1 in chunks) == (cols <= st.MAX_FUSED)
    assert (max(chunks) > 1) == (cols > st.SPLIT_MIN)


def test_autotuner_prunes_row_configs_to_4_to_64_elements_per_thread(st):
    tuner = st._rows_tuned
    args = dict(zip(tuner.arg_names, (None, None, 4096, 256, 256), strict=False))
    kept = tuner.early_config_prune(tuner.configs, args, BLOCK=256)
    assert kept and all(4 <= c.kwargs["ROWS"] * 256 // (32 * c.num_warps) <= 64 for c in kept)


def _pipe_launch(st, per_sm_programs, kw):
    import triton

    def launch(inputs, out):
        x = inputs[0]
        rows, cols = x.shape
        st._pipe_kernel[(min(rows, per_sm_programs),)](x, out, rows, cols, x.stride(0),
                                                       **{"BLOCK": triton.next_power_of_2(cols), **kw})
        return out

    return launch


def test_pipelined_rows_kernel_passes_the_gate_under_the_interpreter(st):
    """Persistent programs, fewer than the rows: each takes every 3rd row."""
    from kernels.common import triton_interpreter

    triton_interpreter.apply()
    assert not _gate(_pipe_launch(st, 3, {"STAGES": 1}), ((7, 300), (4, 1), (5, 1000)))


def test_pipelined_candidates_only_for_long_rows_and_within_shared_memory(st):
    assert st.pipe_configs(16384, 2) == [] and st.pipe_configs(32769, 2) == []
    assert st.pipe_configs(32768, 4) == []  # fp32: two 128 KiB rows in flight do not fit
    kept = st.pipe_configs(32000, 2)
    assert kept and all((kw["STAGES"] - 1) * kw["BLOCK"] * 2 <= st.PIPE_SMEM for _, _, kw in kept)


@pytest.mark.gpu
def test_every_pipelined_candidate_passes_the_gate_on_gpu(st):
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    failed = []
    for _, per_sm, kw in st.pipe_configs(32000, 2):
        launch = _pipe_launch(st, per_sm * sms, kw)
        shapes = ((300, 20000), (5, 32768), (2 * per_sm * sms + 3, 16500))
        failed += [f"{kw} x{per_sm}: {line}" for line in _gate(launch, shapes, dtypes=("bf16",), device="cuda")]
    assert not failed, "\n".join(failed)
