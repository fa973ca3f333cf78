"""gelu: both forms are reachable through the inputs, and the gate tells them apart."""
import torch
import torch.nn.functional as F

from kernels.gelu.v1_fused import gelu
from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

KERNEL = load_kernel(find_root(), "gelu")


def _failures(fn, **kw):
    rev = Revision("wrong", "triton", (), lambda: fn, "known wrong")
    return [r for r in gate.check_revision(KERNEL, rev, "cpu", shapes=[(4099,)], **kw) if not r.ok]


def test_cases_select_the_approximation():
    gen = torch.Generator().manual_seed(0)
    assert [KERNEL.make_inputs((8,), "fp32", gen, "cpu", c)[1] for c in KERNEL.cases] == ["tanh", "none"]


def test_fused_kernel_follows_the_requested_form():
    x = torch.linspace(-6, 6, 4099)
    for approximate in ("tanh", "none"):
        out = gelu(x, approximate, torch.empty_like(x))
        other = F.gelu(x.double(), approximate="none" if approximate == "tanh" else "tanh")
        assert torch.allclose(out.double(), F.gelu(x.double(), approximate=approximate), rtol=1e-6, atol=1e-6)
        assert not torch.allclose(out.double(), other, rtol=1e-6, atol=1e-6)


def test_gate_rejects_the_tanh_form_where_erf_was_asked_for():
    """The forms differ by ~1e-4 relative L2: visible at gelu's fp32 tolerance of 2e-5, not in bf16."""
    failed = _failures(lambda inputs, out: out.copy_(F.gelu(inputs[0], approximate="tanh")), dtypes=["fp32"])
    assert {r.case for r in failed} == {"erf"}


def test_gate_rejects_a_gelu_without_the_half():
    def no_half(inputs, out):
        return out.copy_(2 * F.gelu(inputs[0].float(), approximate=inputs[1]))

    assert len(_failures(no_half)) == 4  # both dtypes, both forms
