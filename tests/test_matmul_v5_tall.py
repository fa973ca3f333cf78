"""matmul_relu/v5_tall: v4 picking among its own, beside v1's kernel in 256x128 tiles at four stages
with C stored in halves where every stride suits TMA. The tall layout computes relu(A @ B) under the
interpreter (edges in M, N and K), the candidates follow TMA's rules, and each kind runs its own path."""
import pytest

from kernlog.registry import find_root, load_kernel

ROOT = find_root()


@pytest.fixture
def v5():
    from kernels.matmul_relu import v5_tall

    return v5_tall


def test_the_tall_layout_is_256x128_at_four_stages_with_c_in_halves(v5):
    assert [(c["BLOCK_M"], c["BLOCK_N"], c["num_stages"], c["EPILOGUE_SPLIT"]) for c in v5.CONFIGS] == \
        [(256, 128, 4, 2)] * 2
    assert {c["FLATTEN"] for c in v5.CONFIGS} == {False, True}
    # its stages and C's half fit a Hopper block's 227 KiB of shared memory
    import triton

    from kernels.matmul_relu import v1_tma_persistent as v1

    for c in v5.CONFIGS:
        kw = {k: v for k, v in c.items() if k not in ("num_warps", "num_stages", "num_ctas")}
        assert v1.smem_bytes(triton.Config(kw, num_warps=8, num_stages=4)) <= 227 * 1024


@pytest.mark.parametrize("M,N,K", [(300, 136, 72), (257, 136, 136)])  # TMA-aligned strides: v1's kernel
def test_the_tall_layout_computes_relu_of_the_product_on_the_cpu(v5, M, N, K):
    import torch

    g = torch.Generator().manual_seed(M)
    a = torch.randn((M, K), generator=g).bfloat16()
    b = torch.randn((K, N), generator=g).bfloat16()
    from kernels.matmul_relu import v1_tma_persistent as v1

    assert v1.tma_ok(a, b, torch.empty((M, N), dtype=torch.bfloat16))  # v1's kernel, not v0's fallback
    for config in v5.CONFIGS:
        c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
        v5.matmul_relu(a, b, c, config=config)
        want = torch.relu(a.double() @ b.double())
        assert torch.isfinite(c).all()
        assert torch.allclose(c.double(), want, rtol=1.6e-2, atol=1e-2), (config, (c.double() - want).abs().max())


def test_candidates_add_the_tall_layout_only_where_tma_takes_every_stride(v5):
    import torch

    def mm(M, N, K, b_cols=None):
        a = torch.empty((M, K), dtype=torch.bfloat16, device="meta")
        b = torch.empty((K, b_cols or N), dtype=torch.bfloat16, device="meta")[:, :N]
        return a, b, torch.empty((M, N), dtype=torch.bfloat16, device="meta")

    aligned = v5.candidates(*mm(3000, 5000, 4000))
    assert aligned[0] == ("v4", None) and [kw for kind, kw in aligned[1:]] == list(v5.CONFIGS)
    assert {kind for kind, _ in aligned[1:]} == {"tall"}
    assert v5.candidates(*mm(4096, 50257, 768)) == [("v4", None)]  # C's row stride: 100514 bytes
    assert v5.candidates(*mm(64, 64, 64, b_cols=65)) == [("v4", None)]  # B's: 130 bytes


def test_each_candidate_kind_runs_its_own_path(v5, monkeypatch):
    """On the GPU path: "tall" runs v1's kernel in its config, "v4" v4's own pick; a config given
    skips the picker."""
    import torch

    calls = []
    monkeypatch.setattr(v5.cuda, "require", lambda device, needs: None)
    monkeypatch.setattr(v5.v1, "_ensure_allocator", lambda: None)
    monkeypatch.setattr(v5.v1, "matmul_relu", lambda a, b, c, config=None: calls.append(("v1", config)))
    monkeypatch.setattr(v5.v4, "matmul_relu", lambda a, b, c: calls.append(("v4", None)))

    def fastest(key, candidates, run, device):
        for cand in candidates():
            run(cand)
        calls.append(("key", key[0]))

    monkeypatch.setattr(v5.tuning, "launch_fastest", fastest)

    class Fake:
        is_cuda = True
        device = "cuda:0"
        dtype = torch.bfloat16

        def __init__(self, shape, stride):
            self.shape, self._stride = shape, stride

        def stride(self, i=None):
            return self._stride if i is None else self._stride[i]

        def data_ptr(self):
            return 1024

        def element_size(self):
            return 2

    a, b, c = Fake((3000, 4000), (4000, 1)), Fake((4000, 5000), (5000, 1)), Fake((3000, 5000), (5000, 1))
    v5.matmul_relu(a, b, c)
    assert calls == [("v4", None), ("v1", v5.CONFIGS[0]), ("v1", v5.CONFIGS[1]), ("key", "v5_tall")]
    calls.clear()
    v5.matmul_relu(a, b, c, config=v5.CONFIGS[1])
    assert calls == [("v1", v5.CONFIGS[1])]


@pytest.mark.gpu
def test_every_tall_config_passes_the_gate_on_gpu(v5):
    import dataclasses

    from kernlog.run import gate

    kernel = load_kernel(ROOT, "matmul_relu")
    rev = kernel.revision("v5_tall")
    failed = []
    for config in v5.CONFIGS:
        def launch(inputs, out, c=config):
            return v5.matmul_relu(inputs[0], inputs[1], out, config=c)
        results = gate.check_revision(dataclasses.replace(kernel, cases=("random",)), rev, "cuda",
                                      shapes=((300, 136, 72), (1000, 1000, 1000), (3000, 5000, 4000)), launch=launch)
        failed += [f"{config}: {r.line()}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
