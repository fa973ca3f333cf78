"""attention_backward's v2_split: the split loops compute what v0's whole loops compute (the same
blocks in the same order, the diagonal's masked), at odd lengths and both block orders, and its
picker is offered both loop forms at every layout. In the Triton interpreter, on the CPU."""
import pytest
import torch

from kernels.attention_backward import v0_fused as v0
from kernels.attention_backward import v2_split as v2
from kernels.attention_backward.v1_tuned import CANDIDATES


def _grads(shape, form, config, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(shape, generator=gen) for _ in range(4))
    scale = shape[-1] ** -0.5
    B, H, T, D = shape
    out = torch.full((B, H, T, 3 * D), float("nan"))
    q, k, v, do = v0.on_device(q, k, v, do, out)
    o, lse = v2.forward(q, k, v, scale)
    delta = v0.preprocess(o, do, out)
    dkdv, dq = v2._launches(q, k, v, do, scale, lse, delta, out)
    dkdv((form, config[0]))
    dq((form, config[1]))
    return out


@pytest.mark.parametrize("shape", [(1, 2, 130, 32), (2, 1, 47, 16)])
@pytest.mark.parametrize("config", [v0.CPU_CONFIG, ((32, 16, 1, 1), (16, 32, 1, 1))])
def test_the_split_loops_are_the_whole_loops(shape, config):
    split = _grads(shape, v2.SPLIT, config)
    whole = _grads(shape, v2.WHOLE, config)
    assert not split.isnan().any()
    assert torch.equal(split, whole)


def test_the_picker_times_both_loop_forms_at_every_layout():
    layouts = CANDIDATES["bf16"][0]
    got = v2.candidates(layouts)
    assert got == [(v2.SPLIT, c) for c in layouts] + [(v2.WHOLE, c) for c in layouts]
