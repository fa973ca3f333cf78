"""softmax/triton_met: long rows on the 16-byte boundary through triton_peeled's kernel, timed beside
triton's own candidates; rows off it as triton_peeled, short rows as triton. Each path passes the gate
where it is taken (a refused path would fail it), and each candidate kind launches its own kernel."""
import pytest

from kernlog.registry import find_root, load_kernel

from .helpers import gate_failures, refuse

ROOT = find_root()
KERNEL = load_kernel(ROOT, "softmax")


@pytest.fixture
def sm():
    from kernels.softmax import softmax_triton_met

    return softmax_triton_met


def _gate(launch, shapes, dtypes=None, cases=None, device="cpu"):
    return gate_failures(KERNEL, "triton_met", launch, shapes, dtypes, cases, device)


def test_rows_on_the_boundary_take_the_peeled_kernel(sm, monkeypatch):
    """Aligned rows in chunks of 256: 5 chunks and an empty sixth (1280 columns: the kernel's span is a
    vector longer than the row), 5 chunks with a short last one (1040), rows of -inf and NaN; triton's
    kernels and triton_peeled's own path refused."""
    monkeypatch.setattr(sm.base, "softmax", refuse)
    monkeypatch.setattr(sm.peeled, "softmax", refuse)
    launch = lambda inputs, out: sm.softmax(inputs[0], out, block=256)  # noqa: E731
    assert not _gate(launch, ((3, 1280), (4, 1040)), cases=("random", "neg_inf", "nan"))


def test_aligned_rows_of_a_wider_buffer_take_the_peeled_kernel(sm, monkeypatch):
    """Rows on the boundary read out of a buffer a vector wider (x's stride cols + Q, out contiguous):
    the kernel addresses x by its stride and out by the row length; triton's kernels refused."""
    import torch

    monkeypatch.setattr(sm.base, "softmax", refuse)
    monkeypatch.setattr(sm.peeled, "softmax", refuse)

    def launch(inputs, out):
        x = inputs[0]
        q = 16 // x.element_size()
        wide = torch.full((x.shape[0], x.shape[1] + q), float("nan"), dtype=x.dtype)
        wide[:, :x.shape[1]] = x
        return sm.softmax(wide[:, :x.shape[1]], out, block=256)
    assert not _gate(launch, ((3, 1280), (2, 1040)), cases=("random", "neg_inf"))


def test_rows_of_split_cap_chunks_and_a_vector_more_go_to_triton(sm, monkeypatch):
    """32 chunks of 256 columns exactly: the kernel's span (a vector more) would need a 33rd chunk
    and a slot past the row's 32, so such rows go to triton (which splits them in 32); a vector
    fewer and this revision takes them, its own kernel meeting in all 32 slots."""
    seen = []
    real = sm.peeled.softmax
    monkeypatch.setattr(sm.peeled, "softmax", lambda x, out, **kw: seen.append(x.shape[1]) or real(x, out, **kw))
    launch = lambda inputs, out: sm.softmax(inputs[0], out, block=256)  # noqa: E731
    assert not _gate(launch, ((2, 32 * 256), (2, 32 * 256 - 8)), dtypes=("fp32",), cases=("random",))
    assert set(seen) == {32 * 256}, seen


def test_a_refused_met_path_fails_the_gate(sm, monkeypatch):
    monkeypatch.setattr(sm.peeled, "launch", refuse)
    failed = _gate(lambda inputs, out: sm.softmax(inputs[0], out, block=256), ((3, 1280),), dtypes=("fp32",),
                   cases=("random",))
    assert failed and "wrong path taken" in failed[0]


def test_rows_off_the_boundary_and_short_rows_take_triton_peeled(sm, monkeypatch):
    """Odd lengths and short rows go to triton_peeled's launcher (which sends short rows on to
    triton's), with the chunk asked for."""
    seen = []
    real = sm.peeled.softmax
    monkeypatch.setattr(sm.peeled, "softmax", lambda x, out, **kw: seen.append((x.shape[1], kw)) or real(x, out, **kw))
    launch = lambda inputs, out: sm.softmax(inputs[0], out, block=256)  # noqa: E731
    assert not _gate(launch, ((3, 1037), (5, 100)), dtypes=("fp32",), cases=("random",))
    assert {cols for cols, _ in seen} == {1037, 100} and all(kw["block"] == 256 for _, kw in seen), seen


@pytest.mark.parametrize("cols,stride,elem,block,takes", [
    (128256, 128256, 2, None, True),   # Llama 3's vocabulary, contiguous
    (151936, 151936, 4, None, True),   # Qwen 2's
    (50257, 50257, 2, None, False),    # off the boundary: triton_peeled's
    (50264, 50267, 2, None, False),    # a row length on it, the stride not
    (1024, 1024, 4, None, False),      # short rows: several a program (triton's)
    (1028, 1028, 4, None, True),
    (131072, 131072, 2, 1024, False),  # 129 chunks of 1024 (the span is a vector longer): past SPLIT_CAP
    (32 * 32768 - 8, 32 * 32768 - 8, 2, None, True),  # 32 chunks of 32768
    (32 * 32768, 32 * 32768, 2, None, False),  # its span a vector longer: 33 chunks, one past the row's slots
    (32 * 1024, 32 * 1024, 4, 1024, False),
])
def test_takes_long_rows_on_the_boundary_in_at_most_split_cap_chunks(sm, cols, stride, elem, block, takes):
    import torch

    rows = torch.empty((4, stride), dtype=torch.bfloat16 if elem == 2 else torch.float32, device="meta")[:, :cols]
    assert sm.takes(rows, None, block) is takes


def test_candidates_are_the_peeled_kernels_then_triton_s_own(sm, monkeypatch):
    """At a long aligned row (bf16 128256: chunks only) and one short enough for one program a row
    (bf16 30000: the pipelined rows too), every config of the peeled kernel and of triton's split and
    pipe is there, the peeled kernel's first."""
    import torch

    monkeypatch.setattr(sm.base, "pipe_smem", lambda device: sm.base.PIPE_SMEM)
    for cols in (128256, 30000):
        x = torch.empty((4, cols), dtype=torch.bfloat16, device="meta")
        got = sm.candidates(x)
        met = [c for k, _, c in got if k == "met"]
        split = [c for k, _, c in got if k == "split"]
        pipe = [c for k, _, c in got if k == "pipe"]
        assert met == sm.peeled.configs(cols, 8) and met and got[0][0] == "met"
        assert split == [c.all_kwargs() for c in sm.base._split_configs(sm.base._split_tuned.configs, {"cols": cols})]
        assert split and len(got) == len(met) + len(split) + len(pipe)
        assert bool(pipe) is (cols <= sm.base.MAX_FUSED), (cols, pipe)


def test_each_candidate_kind_launches_its_own_kernel(sm, monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(sm.peeled, "launch", lambda x, out, polls, **kw: calls.append(("met", polls, kw)))
    monkeypatch.setattr(sm.base, "launch_split", lambda x, out, polls, **kw: calls.append(("split", polls, kw)))

    class Pipe:
        def __getitem__(self, grid):
            return lambda *args, **kw: calls.append(("pipe", grid, kw))

    monkeypatch.setattr(sm.base, "_pipe_kernel", Pipe())
    monkeypatch.setattr(sm.tuning, "sm_count", lambda device: 132)
    x = torch.empty((1000, 30000), dtype=torch.bfloat16, device="meta")
    sm.run(x, None, 7, ("met", 0, {"BLOCK": 8192, "num_warps": 4}))
    sm.run(x, None, 7, ("split", 0, {"BLOCK": 4096, "SUB": 128, "num_warps": 4}))
    sm.run(x, None, 7, ("pipe", 2, {"BLOCK": 32768, "STAGES": 3, "num_warps": 16}))
    assert calls == [("met", 7, {"BLOCK": 8192, "num_warps": 4}),
                     ("split", 7, {"BLOCK": 4096, "SUB": 128, "num_warps": 4}),
                     ("pipe", (264,), {"BLOCK": 32768, "STAGES": 3, "num_warps": 16})]


@pytest.mark.gpu
def test_every_met_config_passes_the_gate_on_aligned_rows_on_gpu(sm):
    """Each peeled-kernel config the picker may time on rows on the boundary (every chunk and warp count
    its configs give, rows of 1500 to 524272 columns), at 2 to 4 chunks (the
    last ragged, or empty where the row fills its chunks: the span is a vector longer), met through
    the slots, every program falling back (no polls), and mixed (two polls); then the picked path."""
    failed = []
    every = {(c["BLOCK"], c["num_warps"]) for cols in (1500, 5000, 20000, 40000, 32 * 16384 - 16) for q in (4, 8)
             for c in sm.peeled.configs(cols, q)}
    for block, warps in sorted(every):
        cfg = {"BLOCK": block, "num_warps": warps}
        for polls in (sm.base.GPU_POLLS, 0, 2):
            def launch(inputs, out, c=cfg, p=polls):
                sm.peeled.launch(inputs[0].contiguous(), out, p, **c)
                return out
            shapes = [(s, c) for s, c in ((5, 3 * block + 8), (3, 2 * block), (3, 2 * block - 8))
                      if -(-(c + 7) // block) <= 32]
            failed += [f"{cfg} polls={polls}: {line}" for line in
                       _gate(launch, shapes, device="cuda", cases=("random", "neg_inf", "nan"))]
    failed += _gate(lambda inputs, out: sm.softmax(inputs[0], out), ((64, 128256), (8, 30000)), device="cuda")
    assert not failed, "\n".join(failed)
