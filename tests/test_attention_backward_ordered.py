"""attention_backward's v3_ordered: its programs, ordered across groups of heads, compute what
v2_split's compute, bit for bit, in both loop forms and at every group size (one head, a group
that leaves a smaller last one, every head); the dq kernel's delta is the preprocess's; its picker
is offered v2's candidates at each group size. In the Triton interpreter, on the CPU."""
import pytest
import torch

from kernels.attention_backward import v0_fused as v0
from kernels.attention_backward import v2_split as v2
from kernels.attention_backward import v3_ordered as v3
from kernels.attention_backward.v1_tuned import CANDIDATES


def _inputs(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(shape, generator=gen) for _ in range(4))
    return q, k, v, do, shape[-1] ** -0.5


def _v2(shape, form):
    q, k, v, do, scale = _inputs(shape)
    B, H, T, D = shape
    out = torch.full((B, H, T, 3 * D), float("nan"))
    o, lse = v2.forward(q, k, v, scale)
    delta = v0.preprocess(o, do, out)
    dkdv, dq = v2._launches(q, k, v, do, scale, lse, delta, out)
    dkdv((form, v0.CPU_CONFIG[0]))
    dq((form, v0.CPU_CONFIG[1]))
    return out, delta


@pytest.mark.parametrize("shape", [(1, 3, 45, 16), (2, 1, 70, 32)])
@pytest.mark.parametrize("form", [v3.SPLIT, v3.WHOLE])
@pytest.mark.parametrize("group", [1, 2, None])
def test_every_order_computes_v2s_gradients(shape, form, group):
    want, want_delta = _v2(shape, form)
    q, k, v, do, scale = _inputs(shape)
    B, H, T, D = shape
    out = torch.full((B, H, T, 3 * D), float("nan"))
    o, lse = v2.forward(q, k, v, scale)
    delta = torch.full((B, H, T), float("nan"))  # written by the dq kernel, read by the dk/dv kernel
    dq, dkdv = v3._launches(q, k, v, do, o, scale, lse, delta, out)
    dq((form, group, v0.CPU_CONFIG[1]))
    dkdv((form, group, v0.CPU_CONFIG[0]))
    assert not out.isnan().any()
    assert torch.equal(out, want)
    assert torch.allclose(delta, want_delta, rtol=1e-6, atol=1e-6)


def test_the_picker_times_v2s_candidates_at_each_group_size():
    layouts = CANDIDATES["bf16"][0]
    got = v3.candidates(layouts)
    assert len(got) == 3 * 2 * len(layouts)
    assert {g for _, g, _ in got} == {1, 4, None}
    assert [(f, c) for f, g, c in got if g == 4] == v2.candidates(layouts)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dtype", [((2, 5, 300, 64), torch.bfloat16), ((1, 1, 200, 128), torch.float32),
                                         ((1, 5, 300, 128), torch.bfloat16)])
def test_on_the_gpu_every_candidate_computes_v2s_gradients(shape, dtype):
    """On the GPU, each (form, group, layout) v3's picker is offered, one that fits run against
    v2_split's same (form, layout): the same sums in another grid order, so fp32 rounding apart
    (bf16 outputs: one rounding of the same fp32 value); delta from the dq kernel as from the
    preprocess. Five heads: groups of 4 leave a last group of one; head dim 128 in bf16 is where the
    kernels hold the most registers."""
    from triton.runtime.errors import OutOfResources

    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v, do = (torch.randn(shape, generator=gen, device="cuda").to(dtype) for _ in range(4))
    scale = shape[-1] ** -0.5
    B, H, T, D = shape
    o, lse = v2.forward(q, k, v, scale)
    dkdv_layouts, dq_layouts = CANDIDATES[v0.dtype_name(q)]
    ran = set()
    for (form, group, dq_c), (_, _, dkdv_c) in zip(v3.candidates(dq_layouts), v3.candidates(dkdv_layouts), strict=True):
        want = torch.full((B, H, T, 3 * D), float("nan"), device="cuda", dtype=dtype)
        want_delta = v0.preprocess(o, do, want)
        v2_dkdv, v2_dq = v2._launches(q, k, v, do, scale, lse, want_delta, want)
        out = torch.full_like(want, float("nan"))
        delta = torch.full((B, H, T), float("nan"), device="cuda")
        dq, dkdv = v3._launches(q, k, v, do, o, scale, lse, delta, out)
        try:
            v2_dkdv((form, dkdv_c))
            v2_dq((form, dq_c))
            dq((form, group, dq_c))
            dkdv((form, group, dkdv_c))
        except OutOfResources:
            continue
        ran.add(group)
        assert not out.isnan().any()
        assert torch.allclose(out.float(), want.float(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-3)
        assert torch.allclose(delta, want_delta, rtol=1e-5, atol=1e-5)
    assert ran == set(v3.GROUPS)  # a layout of each group size ran
