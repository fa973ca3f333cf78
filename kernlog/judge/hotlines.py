"""Stored hot spots read and compared: where a line is, the lines a reader sees, and which lines'
share of the warp samples moved between two profiles (pure: the hot spots were extracted from an
ncu report when the profile was captured, kernlog.capture.hotspots)."""
from __future__ import annotations


def where(line: dict) -> str:
    """file:line as a hot spot names it; an instruction's offset in its kernel where the kernel
    has no line info."""
    return f"{line['file']}:{line['line']}" if line.get("file") else f"SASS +0x{line['line']:x}"


def lines_table(hot: dict, top: int = 5) -> list[dict]:
    """The `top` lines of stored hot spots as rows for show and the log."""
    return [{"where": where(ln), "share": ln["share"], "stall": ln["stall"], "stall_share": ln["stall_share"],
             "text": ln.get("text") or ln.get("sass") or ""} for ln in hot["lines"][:top]]


def _key(line: dict) -> str:
    """What identifies a line across two profiles: its text where it has one (two revisions are
    two files), else where it is."""
    return " ".join(line["text"].split()) if line.get("text") else where(line)


MOVE_MIN = 0.01  # a line whose share moved less (one point of the samples) has not moved


def moved(a: dict | None, b: dict | None, top: int = 8) -> list[dict]:
    """The lines whose share of the samples moved most from `a` to `b` (stored hot spots of two
    profiles), by at least MOVE_MIN, matched by their text: {text, where_a, where_b, share_a,
    share_b, stall_a, stall_b}; a line only one side holds among its stored lines has None on
    the other."""
    if not a or not b:
        return []
    sides = [{_key(ln): ln for ln in reversed(h["lines"])} for h in (a, b)]  # the hotter of equal texts wins
    rows = []
    for key in dict.fromkeys([*sides[0], *sides[1]]):
        la, lb = sides[0].get(key), sides[1].get(key)
        rows.append({"text": (la or lb).get("text") or (la or lb).get("sass") or "",
                     "where_a": where(la) if la else None, "where_b": where(lb) if lb else None,
                     "share_a": la["share"] if la else None, "share_b": lb["share"] if lb else None,
                     "stall_a": la["stall"] if la else None, "stall_b": lb["stall"] if lb else None})
    rows = [r for r in rows if abs((r["share_b"] or 0) - (r["share_a"] or 0)) >= MOVE_MIN]
    rows.sort(key=lambda r: -abs((r["share_b"] or 0) - (r["share_a"] or 0)))
    return rows[:top]
