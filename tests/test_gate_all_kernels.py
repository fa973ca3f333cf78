"""Every revision of every kernel passes the correctness gate -- the whole output, each row and
each element within its dtype's tolerance, and a second launch that repeats the first bit for
bit: Triton and torch ones on the CPU (Triton through its interpreter), all of them on a GPU. A
known-wrong revision (role="wrong") is the exception: the gate must reject it."""
import math

import pytest

from kernlog.errors import Unsupported
from kernlog.registry import find_root, kernel_names, load_kernel
from kernlog.run import gate

ROOT = find_root()
CASES = [(k, r.name) for k in kernel_names(ROOT) for r in load_kernel(ROOT, k).revisions]
# On the CPU, Triton's interpreter spent 90 of the suite's ~250 s on the softmax's rows of
# 4097-131073 columns; the default run keeps the shapes up to this many elements (every path
# but the longest splits, which tests/test_softmax_triton.py covers at small interpreter blocks),
# the slow suite (and the GPU) all of them.
CPU_NUMEL = 20000
# ... and of at most this many rows: the interpreter's cost follows the programs, so rows, not
# elements. Softmax's (2049, 8) (the CUDA C group path's partial last warp) took 56 s of the
# Triton gate's 124 on a 2-core development machine like CI's (2026-11-25), the other 12 shapes 68 s;
# the slow suite and the GPU keep it. At 1024 rows the Triton gate still took 46 s of `make test`'s
# ~4 min (2026-11-27), at 512 rows 26 s (the three 257-row short-row shapes: 20 s of it); at 256 rows
# 6 s: the short rows of 30, 32 and 64 columns, like the longer ones, go to the slow suite and the GPU
# (the default run keeps 4, 33, 100 and 128 columns and 1000 columns of 5 rows).
CPU_ROWS = 256


def _gate_on_cpu(kernel_name, rev_name, shapes=None):
    kernel = load_kernel(ROOT, kernel_name)
    rev = kernel.revision(rev_name)
    if rev.kind == "cuda" or rev_name == "torch_compile":
        pytest.skip("CUDA C and torch.compile revisions are gated on the GPU")
    shapes = shapes and shapes(kernel)
    if rev.known_wrong and shapes:  # one rejected shape proves the gate sees the bug (every shape: the slow suite)
        shapes = shapes[:1]
    try:
        results = gate.check_revision(kernel, rev, "cpu", shapes=shapes)
    except Unsupported as exc:  # Liger-Kernel: an optional GPU dependency
        pytest.skip(str(exc))
    failed = [r.line() for r in results if not r.ok]
    if rev.known_wrong:  # kept to prove the gate sees its bug: rejected, as `kernlog check` requires
        assert failed, f"{kernel_name}/{rev_name} passed the gate: {rev.bug}"
        return
    assert not failed, "\n".join(failed)


def _cpu_shapes(kernel):
    """The check shapes of at most CPU_NUMEL elements (and CPU_ROWS rows where a shape has rows
    and columns), or else the smallest one (a model's)."""
    small = [s for s in kernel.gate_shapes if math.prod(s[:2] if len(s) == 3 else s) <= CPU_NUMEL
             and not (len(s) == 2 and s[0] > CPU_ROWS)]
    return small or [min(kernel.gate_shapes, key=math.prod)]


def _peeled_runs_only_triton_at(shapes) -> bool:
    """Whether softmax/triton_peeled hands every row of `shapes` to triton's kernels (its `peels`
    false for each, in both dtypes, contiguous and strided as make_inputs builds them)."""
    import torch

    from kernels.softmax import softmax_triton_peeled as sp

    return not any(sp.peels(torch.empty((s[0], s[1] + pad), dtype=dt, device="meta")[:, :s[1]], None, 1024)
                   for s in shapes for pad in (0, 3) for dt in (torch.bfloat16, torch.float32))


# A revision whose default CPU shapes run nothing another revision's default gate does not: its own
# code is gated by its own tests at shapes that reach it, the whole gate in the slow suite and on the GPU.
SAME_AS_ANOTHER = {("softmax", "triton_peeled"): (
    "its default CPU shapes all take triton's kernels (softmax-triton gates them); its peeled path: "
    "tests/test_softmax_triton_peeled.py", _peeled_runs_only_triton_at)}


@pytest.mark.parametrize("kernel_name,rev_name", CASES)
def test_revision_passes_gate_on_cpu(kernel_name, rev_name):
    same = SAME_AS_ANOTHER.get((kernel_name, rev_name))
    if same is not None:
        why, holds = same
        assert holds(_cpu_shapes(load_kernel(ROOT, kernel_name))), f"{kernel_name}/{rev_name}: no longer {why}"
        pytest.skip(why)
    _gate_on_cpu(kernel_name, rev_name, _cpu_shapes)


@pytest.mark.slow
@pytest.mark.parametrize("kernel_name,rev_name", CASES)
def test_revision_passes_gate_on_cpu_at_every_check_shape(kernel_name, rev_name):
    kernel = load_kernel(ROOT, kernel_name)
    if len(_cpu_shapes(kernel)) == len(kernel.gate_shapes):
        pytest.skip("the default run had every check shape")
    _gate_on_cpu(kernel_name, rev_name)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_name,rev_name", CASES)
def test_revision_passes_gate_on_gpu(kernel_name, rev_name):
    kernel = load_kernel(ROOT, kernel_name)
    rev = kernel.revision(rev_name)
    try:
        results = gate.check_revision(kernel, rev, "cuda")
    except Unsupported as exc:
        pytest.skip(str(exc))
    failed = [r.line() for r in results if not r.ok]
    if rev.known_wrong:  # kept to prove the gate sees its bug: rejected, as `kernlog check` requires
        assert failed, f"{kernel_name}/{rev_name} passed the gate: {rev.bug}"
        return
    assert not failed, "\n".join(failed)
