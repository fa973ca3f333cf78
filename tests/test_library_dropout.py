"""dropout: determinism in the seed, the edge probabilities, exact scaling and the kept
fraction, for both Triton revisions (through the interpreter); and the gate rejects a
dropout that forgets to rescale or drops at the wrong rate."""
import math

import pytest
import torch
import torch.nn.functional as F

from kernels.dropout import v0_rand, v1_rand4x, v2_tail
from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

KERNEL = load_kernel(find_root(), "dropout")
DROPOUTS = [v0_rand.dropout, v1_rand4x.dropout, v2_tail.dropout]
IDS = ["v0_rand", "v1_rand4x", "v2_tail"]
N = 20011  # not a multiple of any BLOCK or of 4


def _x(dtype=torch.float32, n=N):
    x = torch.randn(n, generator=torch.Generator().manual_seed(1)).to(dtype)
    x[x == 0] = 1.0
    return x


def _run(dropout, x, p, seed):
    return dropout(x, p, seed, torch.full_like(x, float("nan")))


@pytest.mark.parametrize("dropout", DROPOUTS, ids=IDS)
def test_same_seed_same_output_other_seed_other_mask(dropout):
    x = _x()
    a, b, c = _run(dropout, x, 0.3, 1234), _run(dropout, x, 0.3, 1234), _run(dropout, x, 0.3, 1235)
    assert torch.equal(a, b)
    assert not torch.equal(a != 0, c != 0)


@pytest.mark.parametrize("dropout", DROPOUTS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_p0_is_identity_and_p1_is_zeros_as_f_dropout(dropout, dtype):
    x = _x(dtype, 4099)
    assert torch.equal(_run(dropout, x, 0.0, 7), x)
    ours = _run(dropout, x, 1.0, 7)
    assert torch.equal(ours, F.dropout(x, 1.0, training=True))
    assert torch.equal(ours, torch.zeros_like(x))


def _check_scaling(dropout, dtype, device, exact):
    p = 0.3
    x = _x(dtype).to(device)
    out = _run(dropout, x, p, 99).cpu()
    x = x.cpu()
    kept = out != 0
    assert not torch.isnan(out).any()
    # The kernel multiplies in fp32 by the fp32 scale and rounds once to the output dtype.
    want = x[kept].float() * torch.tensor(1.0 / (1.0 - p), dtype=torch.float32)
    if exact:
        assert torch.equal(out[kept], want.to(dtype))
    else:  # within one bf16 step of the fp32 product
        assert ((out[kept].float() - want).abs() <= want.abs() * 2.0**-7).all()


@pytest.mark.parametrize("dropout", DROPOUTS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kept_values_scaled_by_exactly_one_over_keep_probability(dropout, dtype):
    # Triton 3.6's interpreter rounds fp32 -> bf16 toward zero (the GPU rounds to nearest
    # even), so on the CPU bf16 is held to one step; the GPU test below holds it exactly.
    _check_scaling(dropout, dtype, "cpu", exact=dtype == torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dropout", DROPOUTS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kept_values_scaled_exactly_on_gpu(dropout, dtype):
    _check_scaling(dropout, dtype, "cuda", exact=True)


@pytest.mark.parametrize("dropout", DROPOUTS, ids=IDS)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction_near_one_minus_p(dropout, p):
    out = _run(dropout, _x(), p, 2024)
    kept = (out != 0).float().mean().item()
    assert abs(kept - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / N)
    assert KERNEL.extra_check((_x(), p, 2024), out) == ""


def _failures(fn):
    rev = Revision("wrong", "triton", (), lambda: fn, "known wrong")
    return [r for r in gate.check_revision(KERNEL, rev, "cpu", shapes=[(4099,)]) if not r.ok]


def test_gate_rejects_a_dropout_that_does_not_rescale():
    def unscaled(inputs, out):
        x, p, _ = inputs
        return out.copy_(x * (torch.rand(x.shape) >= p))

    assert len(_failures(unscaled)) == 4  # both dtypes, both probabilities


def test_gate_rejects_a_dropout_at_the_wrong_rate():
    def half_rate(inputs, out):
        x, p, _ = inputs
        return out.copy_(F.dropout(x, p / 2, training=True) * (1 - p / 2) / (1 - p))  # right scale

    failed = _failures(half_rate)
    assert len(failed) == 4 and all("kept fraction" in r.problem for r in failed)


@pytest.mark.parametrize("n", [1, 15, 16, 17, N, 1024 * 3 + 5])
def test_v2_drops_exactly_what_v1_drops_for_one_seed_whatever_the_tail(n):
    """v2 draws its tail's uniforms from v1's counters: the same output bit for bit, so the
    split into body and tail changes the speed and nothing else."""
    x = _x(n=n)
    for p in (0.1, 0.5):
        assert torch.equal(_run(v2_tail.dropout, x, p, 1234), _run(v1_rand4x.dropout, x, p, 1234))
