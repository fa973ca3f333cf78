"""kernlog.run.picker: gates take a launcher's candidates in turn, untimed, and leave no pick behind."""
import sys
import types

import pytest
import torch

from kernels.common import tuning
from kernlog import registry
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
    monkeypatch.setitem(sys.modules, registry.PICKER, None)  # import fails: the project has no picker
    with picker.untimed():
        ran = True
    assert ran
    bare = types.ModuleType(registry.PICKER)  # one without fastest/PICKED (an older commit's)
    monkeypatch.setitem(sys.modules, registry.PICKER, bare)
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


def test_the_picker_is_the_module_the_registry_names_found_where_a_revision_imported_it(monkeypatch):
    """picker names no module of the project: it asks the registry, which knows the layout."""
    assert not hasattr(picker, "MODULE") and not hasattr(picker, "importlib")
    assert registry.PICKER == tuning.__name__
    other = types.ModuleType("elsewhere.picks")
    other.USED = {"k": None}
    other.used_config = lambda: {"k": "'other'"}
    monkeypatch.setattr(registry, "PICKER", other.__name__)
    assert picker.module() is None and picker.used_config() == {}  # not imported by any revision yet
    monkeypatch.setitem(sys.modules, other.__name__, other)
    assert picker.module() is other and picker.used_config() == {"k": "'other'"}
    picker.forget_used()
    assert other.USED == {}


def test_untimed_imports_the_registrys_picker_before_a_revision_does(tmp_path, monkeypatch):
    """A target process enters untimed before loading the revisions it warms up: the picker
    they import inside is already untimed."""
    (tmp_path / "late_picks.py").write_text("PICKED = {}\ndef fastest(run, candidates, device):\n"
                                            "    raise AssertionError('timed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "PICKER", "late_picks")
    monkeypatch.delitem(sys.modules, "late_picks", raising=False)
    with picker.untimed():
        import late_picks

        assert late_picks.fastest(None, ["a", "b"], "cpu") == "a"
    assert late_picks.PICKED == {}
    monkeypatch.delitem(sys.modules, "late_picks")
