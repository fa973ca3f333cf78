"""Whether a stored profile's revision fails the correctness gate now, and whether a stored pass
stands for a gate about to run (its key matches: kernlog.run.gatekey): pure, from the gate
outcomes stored for the GPU (kernlog.store.gates)."""
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


# The parts of a gate's key (kernlog.run.gatekey) in the words a line says them.
KEY_WORDS = (("source_sha256", "source"), ("plan_sha256", "plan"), ("gpu", "GPU"))
GATE_CODE = "kernlog_gate"  # the libraries' entry that is the hash of kernlog's gate code


def changed(entry: dict | None, key: dict) -> list[str]:
    """What differs between `key` and the key the stored outcome `entry` was gated under, in
    words ("source", "plan", "GPU", "torch 2.11.0 -> 2.12.0"); ["no key kept with it"] for an
    entry kept before outcomes had keys, or none at all: it matches nothing."""
    old = (entry or {}).get("key")
    if not isinstance(old, dict):
        return ["no key kept with it"]
    said = [word for part, word in KEY_WORDS if old.get(part) != key.get(part)]
    libs, now = old.get("libraries") or {}, key.get("libraries") or {}
    said += ["kernlog's gate code" if name == GATE_CODE else f"{name} {libs.get(name)} -> {now.get(name)}"
             for name in sorted(set(libs) | set(now)) if libs.get(name) != now.get(name)]
    return said


def reusable(entry: dict | None, key: dict) -> bool:
    """Whether the stored outcome `entry` stands for a gate under `key`: it passed, under the very
    same key. A failure is never reused: a revision that failed is gated again."""
    return bool(entry) and entry.get("passed") is True and isinstance(entry.get("check"), dict) \
        and not changed(entry, key)


def reused_line(entry: dict) -> str:
    """The line `kernlog profile` says for a gate it took from a stored pass."""
    return f"gate: reused (passed {str(entry.get('checked_at', ''))[:10]}, same source, plan, GPU, libraries)"
