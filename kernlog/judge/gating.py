"""Whether a stored profile's revision fails the correctness gate now: pure, from the profile's
source hash and the gate outcomes stored for its GPU (kernlog.store.gates)."""
from __future__ import annotations


def fails_gate(source_sha256: str | None, revision: str, outcomes: dict | None) -> str | None:
    """The first failing case where the latest gate of `revision` on the profile's GPU failed
    on the very source the profile measured, else None. A later pass clears it; an outcome of
    another source speaks for that source only (a profile of an older one is stale instead)."""
    entry = (outcomes or {}).get(revision)
    if not entry or entry.get("passed") is not False or not source_sha256:
        return None
    if entry.get("source_sha256") != source_sha256:
        return None
    return entry.get("failure") or "failed"


def mark(why: str | None) -> str:
    """How `kernlog list` and `show` mark such a profile: " FAILS GATE (first failing case)"."""
    return f" FAILS GATE ({why})" if why else ""
