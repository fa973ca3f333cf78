"""Every revision of every kernel passes the correctness gate -- the whole output, each row and
each element within its dtype's tolerance, and a second launch that repeats the first bit for
bit: Triton and torch ones on the CPU (Triton through its interpreter), all of them on a GPU."""
import pytest

from kernlog import gate
from kernlog.registry import find_root, kernel_names, load_kernel

ROOT = find_root()
CASES = [(k, r.name) for k in kernel_names(ROOT) for r in load_kernel(ROOT, k).revisions]


@pytest.mark.parametrize("kernel_name,rev_name", CASES)
def test_revision_passes_gate_on_cpu(kernel_name, rev_name):
    kernel = load_kernel(ROOT, kernel_name)
    rev = kernel.revision(rev_name)
    if rev.kind == "cuda" or rev_name == "torch_compile":
        pytest.skip("CUDA C and torch.compile revisions are gated on the GPU")
    results = gate.check_revision(kernel, rev, "cpu")
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_name,rev_name", CASES)
def test_revision_passes_gate_on_gpu(kernel_name, rev_name):
    kernel = load_kernel(ROOT, kernel_name)
    results = gate.check_revision(kernel, kernel.revision(rev_name), "cuda")
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)
