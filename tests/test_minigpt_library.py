"""MiniGPT on kernlog's library (issue 21, point 3), on the CPU: the four ops routed through the
Triton revisions under the interpreter, the logits within fp32 rounding of the PyTorch-ops
model's, greedy generation the same tokens, and a wrong kernel caught by the same check."""
import pytest
import torch

from models.minigpt import TINY, init_params
from models.minigpt.library_ops import library_ops
from models.minigpt.torch_model import TORCH_OPS, MiniGPT

from .helpers import ROOT


def models():
    params = init_params(TINY, 0)
    ref = MiniGPT(TINY, TORCH_OPS, dtype=torch.float32).load_numpy(params).eval()
    lib = MiniGPT(TINY, library_ops(ROOT), dtype=torch.float32).load_numpy(params).eval()
    return ref, lib


def test_library_logits_match_torch_ops_and_greedy_tokens_agree():
    ref, lib = models()
    idx = torch.tensor([[1, 5, 2, 7, 3], [4, 4, 0, 9, 10]])
    with torch.no_grad():
        a, b = ref(idx), lib(idx)
    err = (a - b).abs().max().item()
    assert err <= 1e-5 * a.abs().max().item(), err  # fp32: the ops differ in summation order only
    assert torch.equal(ref.generate(idx[:, :2], 4), lib.generate(idx[:, :2], 4))


def test_a_wrong_library_op_is_caught_by_the_same_comparison():
    ref, lib = models()
    right = lib.ops.layer_norm
    lib.ops = lib.ops.__class__(softmax=lib.ops.softmax, layer_norm=lambda x, w, b, eps: right(x, w, b, eps) * 1.001,
                                gelu=lib.ops.gelu, dropout=lib.ops.dropout)
    idx = torch.tensor([[1, 5, 2, 7, 3]])
    with torch.no_grad():
        a, b = ref(idx), lib(idx)
    assert (a - b).abs().max().item() > 1e-5 * a.abs().max().item()


def test_dropout_is_the_identity_at_inference_and_the_library_kernel_in_training():
    ops = library_ops(ROOT)
    x = torch.randn(4, 64)
    assert ops.dropout(x, 0.1, False) is x and ops.dropout(x, 0.0, True) is x
    y = ops.dropout(x, 0.5, True)
    kept = y != 0
    assert 0.3 < kept.float().mean().item() < 0.7
    assert torch.allclose(y[kept], x[kept] * 2.0)
    with pytest.raises(ValueError, match="last dimension"):
        ops.softmax(x, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_library_model_on_the_gpu(dtype, rel):
    """The same comparison on the GPU, fp32 and bf16 (bf16: the ops round their outputs to 8
    bits of mantissa, so the logits may move by a few of the largest's 2^-8), softmax through
    the CUDA C v7 as well as Triton; greedy tokens agree in fp32."""
    params = init_params(TINY, 0)
    ref = MiniGPT(TINY, TORCH_OPS, dtype=dtype).load_numpy(params).eval().cuda()
    idx = torch.randint(0, TINY.vocab_size, (4, TINY.context), device="cuda")
    for softmax in ("triton", "v7_bf16_packed"):
        lib = MiniGPT(TINY, library_ops(ROOT, {"softmax": softmax}), dtype=dtype).load_numpy(params).eval().cuda()
        with torch.no_grad():
            a, b = ref(idx).float(), lib(idx).float()
        assert (a - b).abs().max().item() <= rel * a.abs().max().item(), softmax
        if dtype == torch.float32:
            assert torch.equal(ref.generate(idx[:, :2], 6), lib.generate(idx[:, :2], 6))
