"""The Triton softmax's long-row path (online max/sum over column blocks) is taken when a
row outgrows one program, and passes the gate; short rows stay on the fused path."""
import pytest

from kernlog import gate
from kernlog.registry import find_root, load_kernel

KERNEL = load_kernel(find_root(), "softmax")


def _refuse(*args, **kwargs):
    raise AssertionError("wrong path taken")


class _Refused:
    def __getitem__(self, grid):
        return _refuse


@pytest.fixture
def st():
    from kernels.softmax import softmax_triton

    return softmax_triton


def test_long_rows_take_the_online_path_and_pass_the_gate(st, monkeypatch):
    monkeypatch.setattr(st, "_fused_kernel", _Refused())
    monkeypatch.setattr(st, "_fused_tuned", _Refused())
    rev = KERNEL.revision("triton")
    # max_fused=64 sends every row past 64 columns to the online loop, in blocks of 64:
    # rows of several blocks, a ragged last block, and rows shorter than one block.
    launch = lambda inputs, out: st.softmax(inputs[0], out, max_fused=64, interpreter_block=64)  # noqa: E731
    results = gate.check_revision(KERNEL, rev, "cpu", shapes=((3, 65), (5, 1000), (2, 4097)), launch=launch)
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)


def test_short_rows_take_the_fused_path(st, monkeypatch):
    monkeypatch.setattr(st, "_online_kernel", _Refused())
    monkeypatch.setattr(st, "_online_tuned", _Refused())
    results = gate.check_revision(KERNEL, KERNEL.revision("triton"), "cpu", shapes=((4, 300),),
                                  launch=lambda inputs, out: st.softmax(inputs[0], out))
    assert gate.first_failure(results) is None


def test_a_refused_path_would_fail_the_gate(st, monkeypatch):
    monkeypatch.setattr(st, "_online_kernel", _Refused())
    results = gate.check_revision(KERNEL, KERNEL.revision("triton"), "cpu", shapes=((2, 100),), dtypes=("fp32",),
                                  launch=lambda inputs, out: st.softmax(inputs[0], out, max_fused=64))
    assert "wrong path taken" in gate.first_failure(results).problem
