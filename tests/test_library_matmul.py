"""matmul_relu: every autotune config is right when K is not a multiple of its BLOCK_K (and M,
N not multiples of the tile), through the interpreter; the gate rejects a kernel that drops
the K tail and one that forgets the ReLU."""
import pytest
import torch

from kernels.matmul_relu import v0_tiled
from kernlog import gate
from kernlog.registry import find_root, load_kernel
from kernlog.spec import Revision

KERNEL = load_kernel(find_root(), "matmul_relu")
TOL = gate.TOLERANCE["bf16"]


def _inputs(shape, seed=0):
    return KERNEL.make_inputs(shape, "bf16", torch.Generator().manual_seed(seed), "cpu", "random")


@pytest.mark.parametrize("config", v0_tiled.CONFIGS, ids=lambda c: "x".join(
    str(c.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + f"_s{c.num_stages}_w{c.num_warps}")
def test_every_config_handles_k_tail_and_edges(config):
    shape = (130, 260, 70)  # K = 70: a partial BLOCK_K of 64 or 128; M, N cross a tile edge
    inputs = _inputs(shape)
    out = KERNEL.make_output(inputs)
    gate.poison(out)
    v0_tiled.matmul_relu(*inputs, out, config=config.kwargs)
    err, problem = gate.compare(out, KERNEL.reference(inputs), TOL)
    assert not problem, problem


def test_k_tail_is_not_silently_zero():
    """K = 65 with BLOCK_K = 64: the tail step carries one column of A; drop it and C moves."""
    inputs = _inputs((16, 16, 65))
    out = v0_tiled.matmul_relu(*inputs, KERNEL.make_output(inputs), config=v0_tiled.CONFIGS[3].kwargs)
    a, b = (t.double() for t in inputs)
    without_tail = torch.relu(a[:, :64] @ b[:64])
    assert gate.compare(out, KERNEL.reference(inputs), TOL)[1] == ""
    assert gate.compare(out, without_tail, TOL)[1] != ""


def _wrong(fn):
    return Revision("wrong", "triton", (), lambda: fn, "known wrong")


def test_gate_rejects_a_matmul_that_drops_the_k_tail():
    def drop_tail(inputs, out):
        a, b = inputs
        k = a.shape[1] // 32 * 32
        return out.copy_(torch.relu(a[:, :k].float() @ b[:k].float()))

    results = gate.check_revision(KERNEL, _wrong(drop_tail), "cpu", shapes=[(33, 47, 70)])
    assert not any(r.ok for r in results)


def test_gate_rejects_a_matmul_without_relu():
    results = gate.check_revision(KERNEL, _wrong(lambda inputs, out: out.copy_(inputs[0] @ inputs[1])),
                                  "cpu", shapes=[(33, 47, 70)])
    assert not any(r.ok for r in results)
