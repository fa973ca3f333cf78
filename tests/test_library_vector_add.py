"""vector_add: the CUDA C compiles for sm_90 without spills; the gate rejects a kernel that
skips the tail or one that ignores pointer misalignment.

Not tested here because the gate cannot see it: rounding bf16 by truncation instead of to
nearest-even lands at ~3e-3 relative L2 error, inside the bf16 tolerance of 1e-2."""
import re
import shutil

import pytest
import torch

import kernels.vector_add as MODULE
from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

from .helpers import compile_report

KERNEL = load_kernel(find_root(), "vector_add")
CUDA_REVS = [r for r in KERNEL.revisions if r.kind == "cuda"]


def wrong(fn):
    return Revision("wrong", "triton", (), lambda: fn, "known wrong")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("rev", CUDA_REVS, ids=[r.name for r in CUDA_REVS])
def test_cuda_compiles_for_sm90_without_spills(rev):
    report = compile_report(rev.sources[0], arch="sm_90")
    assert "add_fp32" in report and "add_bf16" in report
    assert report.count("0 bytes spill stores, 0 bytes spill loads") == 2, report


def _defines(rev):
    return {k: int(v) for k, v in re.findall(r"^#define (\w+) (\d+)\s*$", rev.sources[0].read_text(), re.M)}


def test_launcher_constants_match_the_cuda_sources():
    """The launcher sizes block and grid from Python copies of the kernels' #defines: a
    mismatch would launch more blocks than fit in one wave, or leave chunks unvisited."""
    v1, v2 = _defines(KERNEL.revision("v1_vec")), _defines(KERNEL.revision("v2_chunks"))
    assert v1["THREADS"] == v2["THREADS"] == MODULE.THREADS
    assert v1["BLOCKS_PER_SM"] == MODULE.BLOCKS_PER_SM
    assert (v2["BLOCKS_PER_SM"], v2["UNROLL"]) == (MODULE.V2_BLOCKS_PER_SM, MODULE.V2_UNROLL)


def test_gate_rejects_a_kernel_that_skips_the_tail():
    def skip_tail(inputs, out):
        x, y = inputs
        body = x.numel() // 4 * 4
        torch.add(x[:body], y[:body], out=out[:body])
        return out

    rev = wrong(skip_tail)
    results = gate.check_revision(KERNEL, rev, "cpu", shapes=[(1029,)], dtypes=["fp32"])
    assert all(not r.ok and "unwritten" in r.problem for r in results)
    # ...and the same kernel passes where there is no tail: the gate is not rejecting everything.
    assert all(r.ok for r in gate.check_revision(KERNEL, rev, "cpu", shapes=[(1024,)], dtypes=["fp32"]))


def test_gate_rejects_a_kernel_that_rounds_misaligned_pointers_down():
    """What a vectorized kernel without the scalar fallback does: 16-byte loads from the
    16-byte boundary below the pointer it was given."""

    def aligned_down(inputs, out):
        def down(t):
            per_16b = 16 // t.element_size()
            return t.as_strided(t.shape, t.stride(), t.storage_offset() // per_16b * per_16b)

        return torch.add(down(inputs[0]), down(inputs[1]), out=out)

    results = gate.check_revision(KERNEL, wrong(aligned_down), "cpu", shapes=[(4099,)])
    assert {r.case for r in results if not r.ok} == {"offset"}  # aligned inputs are unaffected
