"""The correctness gate's latest outcome per revision on one GPU, so that a profile stored
earlier whose source now fails the gate (a dtype or a case added to it since, a tolerance
tightened) can be marked where it is shown: profiles/<gpu>/<kernel>/gate/outcomes.json.

Each revision's entry is its last gate there (`kernlog check`, or the gate `kernlog profile`
and `kernlog bench` run before timing): the source hash it checked, whether it passed, the
first failing case in one line where it failed, when (UTC) and the kernlog commit. Whether
that marks a profile is judged in kernlog.judge.gate_marks; a missing or unreadable file is no
outcome at all.

An entry of `kernlog profile` or `kernlog check` also keeps the key it was gated under
(kernlog.run.gatekey: source, check plan, GPU, libraries), what it found ("check": cases and
worst error) and how long it took (seconds): `kernlog profile` takes a pass with the key of the
gate it is about to run instead of gating again, and deals work by those seconds
(kernlog.run.costs). An entry without a key (kept before keys were, or by `kernlog bench`,
which gates other shapes) matches no key.
"""
from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

from kernlog.store.files import dump_json, folder_lock, write_atomic
from kernlog.store.keys import gate_outcomes

SCHEMA = 1
_REL_ERR = re.compile(r" \(rel err [^()]*\)$")


def case_line(line: str, revision: str) -> str:
    """The gate's line of a failed case (gate.CheckResult.line) as an entry keeps it: without
    the revision's name, the word FAIL and the whole output's error ("7x33 bf16 random: error
    5.0e-02 over tolerance 1e-02"); any other reason (a gate process that died) as it is."""
    line = line.strip().splitlines()[0] if line.strip() else "failed"
    if line.startswith(f"{revision} "):
        line = line[len(revision) + 1:]
    return _REL_ERR.sub("", line.replace(": FAIL ", ": ", 1))


def outcome(source_sha256: str, failure: str | None, commit: str | None, by: str, key: dict | None = None,
            check: dict | None = None, seconds: float | None = None) -> dict:
    """One revision's entry: `failure` None where it passed, else its first failing case; `key`
    the gate's (kernlog.run.gatekey.key), `check` what a pass found ({"cases", "worst_rel_error"}),
    `seconds` how long the gate ran (its parts' sum where it ran in parts)."""
    when = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    entry = {"source_sha256": source_sha256, "passed": failure is None, "failure": failure,
             "checked_at": when, "commit": commit if commit and commit != "unknown" else None, "by": by}
    extra = {"key": key, "check": check if failure is None else None,
             "seconds": None if seconds is None else round(seconds, 2)}
    return dict(entry, **{k: v for k, v in extra.items() if v is not None})


def _valid(entry) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("source_sha256"), str)
            and isinstance(entry.get("passed"), bool))


def load(root: Path, gpu: str, kernel: str) -> dict[str, dict]:
    """{revision: its latest outcome} on `gpu`; {} where none is stored (or the file cannot be
    read: an outcome is a mark, never a reason to refuse a listing)."""
    try:
        data = json.loads(gate_outcomes(root, gpu, kernel).read_text())
    except (OSError, ValueError):
        return {}
    revs = data.get("revisions") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    return {name: e for name, e in revs.items() if _valid(e)} if isinstance(revs, dict) else {}


def record(root: Path, gpu: str, kernel: str, outcomes: dict[str, dict]) -> Path:
    """Each revision's outcome in `outcomes` replaces its entry (the others kept), written whole;
    savers of one folder take turns."""
    path = gate_outcomes(root, gpu, kernel)
    with folder_lock(path.parent):
        revs = dict(load(root, gpu, kernel), **outcomes)
        write_atomic(path, dump_json({"schema": SCHEMA, "kernel": kernel, "gpu": gpu,
                                      "revisions": dict(sorted(revs.items()))}))
    return path
