"""Known-wrong softmaxes kept on purpose: the gate must reject each, for the right reason."""
import torch

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

KERNEL = load_kernel(find_root(), "softmax")


def _no_max_subtraction(inputs, out):
    e = torch.exp(inputs[0].float())  # overflows to inf at |x| ~ 89: inf / inf = NaN
    return out.copy_(e / e.sum(-1, keepdim=True))


def _skips_last_row(inputs, out):
    out[:-1] = torch.softmax(inputs[0][:-1].float(), dim=-1)
    return out


def _never_writes_output(inputs, out):
    return torch.softmax(inputs[0], dim=-1)  # right values, in a buffer of its own


def _zeros_for_rows_of_neg_inf(inputs, out):
    return out.copy_(torch.softmax(inputs[0].float(), dim=-1).nan_to_num(0.0))  # F.softmax gives NaN there


def _wrong(name, fn):
    # kind "triton": held to the custom-kernel contract of writing into `out`.
    return Revision(name, "triton", (), lambda: fn, "known wrong", role="step")


def _first_failure(fn, **kw):
    rev = _wrong(fn.__name__.strip("_"), fn)
    return gate.first_failure(gate.check_revision(KERNEL, rev, "cpu", **kw))


def test_gate_rejects_missing_max_subtraction():
    fail = _first_failure(_no_max_subtraction, shapes=((7, 33), (5, 1000)))
    assert fail is not None and fail.case == "large" and "non-finite" in fail.problem


def test_gate_rejects_a_skipped_row():
    fail = _first_failure(_skips_last_row, shapes=((257, 64),))
    assert fail is not None and f"{64} elements non-finite or unwritten" in fail.problem


def test_gate_rejects_a_kernel_that_never_writes_its_output():
    fail = _first_failure(_never_writes_output, shapes=((5, 1000),))
    assert fail is not None and "did not write into the output buffer" in fail.problem


def test_gate_rejects_zeros_where_the_reference_is_nan():
    """Only the NaN rule sees this: every other check leaves out the reference's NaN."""
    results = gate.check_revision(KERNEL, _wrong("zeros_for_nan", _zeros_for_rows_of_neg_inf), "cpu",
                                  shapes=((7, 33), (5, 1000)))
    failed = {r.case for r in results if not r.ok}
    assert failed == {"neg_inf", "nan"}
    assert all("NaN in the reference missing from the output" in r.problem for r in results if not r.ok)


def test_a_correct_softmax_passes_the_same_gate():
    def _correct(inputs, out):
        return out.copy_(torch.softmax(inputs[0].double(), -1))

    assert _first_failure(_correct, shapes=((7, 33), (5, 1000), (257, 64))) is None
