"""A known-wrong revision is gated to prove the gate rejects it; `kernlog profile` does not gate it
again while that rejection stands: kept with its key on this GPU, at the same source, check plan
and gate code (capture/todo.py's rejected_here). A pass, an older source, another GPU, a changed
gate, no key, --regate or --force: gated again."""
import dataclasses
from types import SimpleNamespace

import pytest

from kernlog.capture import gate_runs, todo
from kernlog.run import gatekey
from kernlog.store import gates

from .helpers import GPU
from .test_gate_reuse import _common, toy  # noqa: F401 -- the fixture

SLUG = GPU["slug"]
REJECTED = ("failed", "bf16_wrong 3x5 bf16 random: error 5e-2 over tolerance 1e-2")


@pytest.fixture
def wrong(toy):  # noqa: F811 -- the fixture imported above
    root, kernel, extra = toy
    rev = dataclasses.replace(kernel.revision("bf16_wrong"), role="wrong", bug="one row 5% high in bf16")
    kernel = dataclasses.replace(kernel, revisions=tuple(rev if r.name == "bf16_wrong" else r
                                                         for r in kernel.revisions))
    return root, kernel, rev


def _todo(root, kernel, rev, **opts):
    said = []
    got = todo.todo_revisions(root, kernel, [rev], (7, 33), "fp32",
                              SimpleNamespace(**{"force": False, "regate": False, **opts}), SLUG, said.append)
    return [r.name for r in got], said


def test_a_standing_rejection_is_not_gated_again(wrong):
    root, kernel, rev = wrong
    assert _todo(root, kernel, rev)[0] == ["bf16_wrong"]  # never gated here: gated
    gate_runs.note_verdict(root, kernel, rev, _common(), REJECTED, 1.0)
    got, said = _todo(root, kernel, rev)
    assert got == [] and said == [f"skip toy/bf16_wrong: known wrong, and rejected by the gate on {SLUG} "
                                  f"({gates.load(root, SLUG, 'toy')['bf16_wrong']['checked_at'][:10]}) at this source, "
                                  "check plan and gate code; --regate gates it again"]
    assert _todo(root, kernel, rev, regate=True)[0] == ["bf16_wrong"]
    assert _todo(root, kernel, rev, force=True)[0] == ["bf16_wrong"]


def test_a_pass_or_a_rejection_of_something_else_is_gated_again(wrong, monkeypatch):
    root, kernel, rev = wrong
    gate_runs.note_verdict(root, kernel, rev, _common(), ("ok", {"cases": 1, "worst_rel_error": 0.0}), 1.0)
    assert _todo(root, kernel, rev)[0] == ["bf16_wrong"]  # it passed: seen again, so the rejection is proved
    gate_runs.note_verdict(root, kernel, rev, _common(gpu={"name": "NVIDIA H200"}), REJECTED, 1.0)
    assert _todo(root, kernel, rev)[0] == ["bf16_wrong"]  # kept under another GPU's name
    gate_runs.note_verdict(root, kernel, rev, _common(), REJECTED, 1.0)
    assert _todo(root, kernel, rev)[0] == []
    monkeypatch.setattr(gatekey, "gate_code_sha256", lambda: "0" * 64)
    assert _todo(root, kernel, rev)[0] == ["bf16_wrong"]  # the gate changed
    monkeypatch.undo()
    older = dataclasses.replace(rev, change=rev.change)
    monkeypatch.setattr(type(older), "sha256", lambda self: "1" * 64)
    assert _todo(root, kernel, older)[0] == ["bf16_wrong"]  # another source


def test_a_rejection_kept_without_a_key_is_gated_again(wrong):
    root, kernel, rev = wrong
    gate_runs.note(root, SLUG, kernel, [(rev, REJECTED[1])], "bench")  # as bench kept one before keys
    assert "key" not in gates.load(root, SLUG, "toy")["bf16_wrong"]
    assert _todo(root, kernel, rev)[0] == ["bf16_wrong"]


def test_a_revision_that_is_not_known_wrong_is_never_skipped_for_failing(toy):  # noqa: F811
    root, kernel, _ = toy
    rev = kernel.revision("bf16_wrong")  # a step that fails the gate: profiled again, and so gated
    gate_runs.note_verdict(root, kernel, rev, _common(), REJECTED, 1.0)
    assert _todo(root, kernel, rev)[0] == ["bf16_wrong"]
