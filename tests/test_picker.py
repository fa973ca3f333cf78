"""kernlog.run.picker: gates take a launcher's candidates in turn, untimed, and leave no pick behind."""
import sys
import types

import pytest
import torch

from kernels.common import tuning
from kernlog.registry import load_kernel
from kernlog.run import gate, picker

from .helpers import ROOT


def _never(*_):
    raise AssertionError("a gate timed its candidates")


def test_inside_untimed_the_picks_take_the_candidates_in_turn_and_are_forgotten_after(monkeypatch):
    monkeypatch.setattr(tuning, "PICKED", {("before",): "kept"})
    monkeypatch.setattr(tuning, "fastest", _never)
    ran = []
    with picker.untimed():
        for key in "abcd":
            tuning.launch_fastest((key,), ["x", "y", "z"], ran.append, "cpu")
        tuning.launch_fastest(("a",), ["x", "y", "z"], ran.append, "cpu")  # a key picked before keeps its pick
    assert ran == ["x", "y", "z", "x", "x"]
    assert tuning.PICKED == {("before",): "kept"}
    assert tuning.fastest is _never


def test_untimed_puts_the_timed_picker_back_when_the_gate_raises(monkeypatch):
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "fastest", _never)
    with pytest.raises(RuntimeError), picker.untimed():
        tuning.pick(("k",), [1, 2], lambda c: None, "cpu")
        raise RuntimeError("a crash inside the gate")
    assert tuning.fastest is _never and tuning.PICKED == {}


def test_untimed_without_a_picker_only_runs_the_body(monkeypatch):
    monkeypatch.setitem(sys.modules, picker.MODULE, None)  # import fails: the project has no picker
    with picker.untimed():
        ran = True
    assert ran
    bare = types.ModuleType(picker.MODULE)  # one without fastest/PICKED (an older commit's)
    monkeypatch.setitem(sys.modules, picker.MODULE, bare)
    with picker.untimed():
        pass
    assert not hasattr(bare, "fastest")


def test_the_gate_runs_a_wrong_candidate_the_timing_would_never_pick(monkeypatch):
    """Candidate 1 is wrong but slow: timed, it is never picked; in turn, some gate shape runs it."""
    monkeypatch.setattr(tuning, "PICKED", {})
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[0])  # "timed": the right one
    kernel = load_kernel(ROOT, "softmax")
    rev = kernel.revision("v0_naive")

    def launch(inputs, out):
        x = inputs[0]

        def run(wrong):
            y = torch.softmax(x.float(), -1)
            out.copy_(y * 2 if wrong else y)
        tuning.launch_fastest(("toy", *x.shape), [False, True], run, "cpu")
        return out

    shapes = [(2, 8), (3, 8), (4, 8)]
    results = gate.check_revision(kernel, rev, "cpu", shapes=shapes, dtypes=["fp32"], seed=1, launch=launch)
    bad = gate.first_failure(results)
    assert bad is not None and bad.shape == (3, 8)
    assert tuning.PICKED == {}
    # the same launcher, timed outside a gate, picks the right candidate everywhere
    out = torch.empty(3, 8)
    launch((torch.randn(3, 8),), out)
    assert torch.allclose(out.sum(-1), torch.ones(3))
