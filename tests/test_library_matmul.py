"""matmul_relu: every autotune config of both revisions is right when K is not a multiple of
its BLOCK_K (and M, N not multiples of the tile), through the interpreter; the gate rejects a
kernel that drops the K tail and one that forgets the ReLU."""
import pytest
import torch

from kernels.matmul_relu import v0_tiled, v1_tma_persistent
from kernlog import gate
from kernlog.registry import find_root, load_kernel
from kernlog.spec import Revision

KERNEL = load_kernel(find_root(), "matmul_relu")
TOL = gate.TOLERANCE["bf16"]


def _inputs(shape, seed=0):
    return KERNEL.make_inputs(shape, "bf16", torch.Generator().manual_seed(seed), "cpu", "random")


def _config_id(c):
    return "x".join(str(c.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + f"_s{c.num_stages}_w{c.num_warps}"


# K = 70 / 72: a partial BLOCK_K of 64 or 128; M, N cross a tile edge. v1 needs K, N % 8 == 0
# for TMA, so it gets (130, 264, 72); with num_sms=2 each persistent program takes several tiles.
CONFIG_CASES = ([(v0_tiled.matmul_relu, c, (130, 260, 70), {}) for c in v0_tiled.CONFIGS]
                + [(v1_tma_persistent.matmul_relu, c, (130, 264, 72), {"num_sms": 2})
                   for c in v1_tma_persistent.CONFIGS])


@pytest.mark.parametrize("fn,config,shape,kw", CONFIG_CASES,
                         ids=[f"{f.__module__.rsplit('.', 1)[1]}-{_config_id(c)}" for f, c, _, _ in CONFIG_CASES])
def test_every_config_handles_k_tail_and_edges(fn, config, shape, kw):
    inputs = _inputs(shape)
    out = KERNEL.make_output(inputs)
    gate.poison(out)
    fn(*inputs, out, config=config.kwargs, **kw)
    err, problem = gate.compare(out, KERNEL.reference(inputs), TOL)
    assert not problem, problem


def test_v1_takes_tma_only_where_tma_can():
    assert v1_tma_persistent.tma_ok(*_inputs((130, 264, 72)), torch.empty(130, 264, dtype=torch.bfloat16))
    assert not v1_tma_persistent.tma_ok(*_inputs((33, 47, 70)), torch.empty(33, 47, dtype=torch.bfloat16))


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
