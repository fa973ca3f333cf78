"""The gate's comparison on made-up outputs: each check rejects what the others let through,
its message says where, and the tolerance table's overrides keep their meaning."""
import dataclasses
import re

import torch

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate

BF16 = gate.TOLERANCE["bf16"]


def _ref(rows=3000, cols=64):
    return torch.softmax(3 * torch.randn(rows, cols, generator=torch.Generator().manual_seed(0),
                                         dtype=torch.float64), -1)


def test_a_row_off_by_more_than_the_l2_tolerance_fails_though_each_element_passes():
    ref = _ref()
    out = ref.clone()
    out[1234] *= 1 + 1.2e-2  # per element under rtol = 1.6e-2, over l2 = 1e-2 for the row
    assert gate.compare(out, ref, BF16)[1].startswith("row 1234 error 1.20e-02 over tolerance 1e-02 (1 of 3000 rows)")
    assert gate.compare(out.reshape(-1), ref.reshape(-1), BF16)[1] == ""  # one row among 3000: not seen as a whole
    assert gate.compare(ref.clone(), ref, BF16) == (0.0, "")


def test_element_failure_names_the_worst_element_and_how_many_failed():
    ref = torch.ones(4, 100000, dtype=torch.float64)
    out = ref.clone()
    out[1, 7], out[2, 50], out[3, 99] = 1.5, 3.0, 2.0  # each row and the whole within l2
    err, problem = gate.compare(out, ref, BF16)
    assert err <= BF16.l2
    assert problem.startswith("3 of 400000 elements over") and problem.endswith("worst [2, 50]: expected 1, got 3")
    assert gate.first_bad(out, ref, BF16) == "first bad element [1, 7]: expected 1, got 1.5"


def test_a_row_or_whole_failure_names_the_first_bad_row_and_where_to_look():
    """Where the output fails as a whole or row by row, the first row over its tolerance is named
    (not only the worst), and first_bad gives an element to look at, expected against got."""
    ref = _ref()
    out = ref.clone()
    out[17] *= 1.02  # first bad row
    out[900] *= 1.05  # the worst
    assert gate.compare(out, ref, BF16)[1] == ("row 17 error 2.00e-02 over tolerance 1e-02 (2 of 3000 rows; the "
                                               "worst, row 900, 5.00e-02)")
    assert re.fullmatch(r"first bad element \[17, \d+\]: expected \S+, got \S+", gate.first_bad(out, ref, BF16))
    thin = ref.clone()
    thin[5] *= 1.012  # each element under rtol = 1.6e-2: no element is wrong on its own
    assert gate.first_bad(thin, ref, BF16).startswith("largest error [5, ")
    whole = ref.clone()
    whole[2:] *= 1.5
    assert gate.compare(whole, ref, BF16)[1].startswith("error ")
    assert gate.first_bad(whole, ref, BF16).startswith("first bad element [2, 0]: expected ")
    assert gate.first_bad(whole.reshape(2, 1500, 64), ref.reshape(2, 1500, 64), BF16).startswith(
        "first bad element [0, 2, 0]: ")


def test_atol_follows_the_row_mean_not_an_absolute_unit():
    """Rows of one reference 1e6 apart: an error of 1e-3 of a row's mean passes in each, 1e-1 fails."""
    ref = torch.stack([torch.full((1000,), 1e-6), torch.full((1000,), 1.0)]).double()
    ref[:, ::2] = 0  # zeros: nothing for rtol to allow, atol alone
    for row in (0, 1):
        for off, ok in ((1e-3, True), (1e-1, False)):
            out = ref.clone()
            out[row, 0] += off * ref[row].abs().mean()
            assert (gate.compare(out, ref, BF16)[1] == "") == ok, (row, off)


def test_zero_rows_must_be_zeros_and_nan_rows_nan():
    ref = _ref(4, 64)
    ref[1] = 0
    ref[2] = float("nan")  # softmax of a row of -inf
    out = ref.clone()
    assert gate.compare(out, ref, BF16) == (0.0, "")
    out[1, 3] = 1e-30
    assert gate.compare(out, ref, BF16)[1].startswith("1 of 256 elements over")
    out = ref.clone()
    out[2, 5] = 0.0
    assert gate.compare(out, ref, BF16)[1] == "1 NaN in the reference missing from the output"
    assert gate.first_bad(out, ref, BF16) == "first bad element [2, 5]: expected nan, got 0"


def test_infinities_must_match_and_finite_values_be_finite():
    ref = _ref(4, 64)
    ref[0, 0] = float("inf")
    out = ref.clone()
    assert gate.compare(out, ref, BF16)[1] == ""
    out[0, 0] = 1e30
    assert gate.compare(out, ref, BF16)[1] == "1 infinities in the reference not in the output"
    assert gate.first_bad(out, ref, BF16) == "first bad element [0, 0]: expected inf, got 1e+30"
    out[0, 0], out[3, 3] = float("inf"), float("-inf")
    assert gate.compare(out, ref, BF16)[1] == "1 elements non-finite or unwritten"
    assert gate.first_bad(out, ref, BF16).startswith("first bad element [3, 3]: expected ")


def test_compare_takes_a_tolerance_a_bare_l2_number_or_the_output_dtype():
    ref = _ref(8, 64)
    out = (ref * (1 + 5e-3)).to(torch.bfloat16)  # within bf16's, not fp32's
    assert gate.compare(out, ref)[1] == "" and gate.compare(out, ref, 1e-2)[1] == ""
    assert gate.compare(out.float(), ref)[1].startswith("error")
    assert gate.compare(out, ref, 1e-3)[1].startswith("error 5.")


ROOT = find_root()


def test_kernels_bare_number_overrides_stay_relative_l2_and_raise_rtol_only():
    gelu, softmax = (load_kernel(ROOT, name) for name in ("gelu", "softmax"))
    fp32 = gate.TOLERANCE["fp32"]
    assert gate.tolerance(gelu, "fp32") == dataclasses.replace(fp32, l2=2e-5, rtol=2e-5)  # tells tanh from erf
    # v0's sequential sum, which scales a whole row
    assert gate.tolerance(softmax, "fp32") == dataclasses.replace(fp32, l2=5e-4, row=5e-4, rtol=5e-4)
    assert gate.tolerance(softmax, "bf16") == gate.TOLERANCE["bf16"]


def test_override_may_name_some_fields_or_a_whole_tolerance():
    kernel = load_kernel(ROOT, "vector_add")
    some = dataclasses.replace(kernel, tolerance={"bf16": {"atol": 0.5}})
    assert gate.tolerance(some, "bf16") == dataclasses.replace(BF16, atol=0.5)
    assert gate.tolerance(some, "fp32") == gate.TOLERANCE["fp32"]
    whole = gate.Tolerance(l2=1.0, row=1.5, rtol=2.0, atol=3.0)
    assert gate.tolerance(dataclasses.replace(kernel, tolerance={"fp32": whole}), "fp32") is whole


def test_the_gate_skips_only_the_shapes_a_revision_declares_it_declines():
    """A reference that raises past 64 columns passes where it declares so (Revision.refuses,
    as Liger past 65536) and fails where it does not: a raise is a failure unless declared."""
    kernel = load_kernel(find_root(), "softmax")
    launched = []

    def narrow(inputs, out):
        (x,) = inputs
        launched.append(x.shape[1])
        if x.shape[1] > 64:
            raise RuntimeError("n exceeds the blocksize")
        return torch.softmax(x, -1)

    shapes = ((3, 64), (2, 65), (2, 1000))
    declines = dataclasses.replace(kernel.revision("torch"), name="narrow",
                                   refuses=lambda shape: "at most 64 columns" if shape[-1] > 64 else "")
    results = gate.check_revision(kernel, declines, "cpu", shapes=shapes, dtypes=("fp32",), launch=narrow)
    assert results and all(r.ok for r in results) and set(launched) == {64}
    silent = dataclasses.replace(declines, refuses=None)
    failed = [r for r in gate.check_revision(kernel, silent, "cpu", shapes=shapes, dtypes=("fp32",), launch=narrow)
              if not r.ok]
    assert {r.shape for r in failed} == {(2, 65), (2, 1000)} and "raised RuntimeError" in failed[0].problem
