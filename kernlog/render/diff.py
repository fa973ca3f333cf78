"""`kernlog diff` as a person reads it: the judged facts of kernlog.judge.diff (a dict) as a
table in text or markdown, or as JSON; the GPU line `show` prints too (gpu_choice_line)."""
from __future__ import annotations

import json

from kernlog import units
from kernlog.judge.verdicts import Verdict
from kernlog.spec import format_shape


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _hot_rows(d: dict) -> list[tuple[str, str, str, str, str]]:
    """(before, after, where, stalls, text) of each source line whose share of the samples moved."""
    out = []
    for h in d.get("hot_lines", []):
        where = h["where_a"] if h["where_a"] == h["where_b"] or not h["where_b"] else (
            h["where_b"] if not h["where_a"] else f"{h['where_a']} -> {h['where_b']}")
        stalls = " -> ".join(dict.fromkeys(s or "issuing" for s, share in ((h["stall_a"], h["share_a"]),
                                                                            (h["stall_b"], h["share_b"]))
                                           if share is not None))
        out.append((_share(h["share_a"]), _share(h["share_b"]), where, stalls, h["text"]))
    return out


def _ratio(r: dict) -> str:
    return "" if r["ratio"] is None else f"{r['ratio']:.3f}x"


def _cells(r: dict) -> tuple[str, str, str, str]:
    ta, tb, unit = units.pair(r["unit"], r["a"], r["b"])
    if r.get("share_a") is not None or r.get("share_b") is not None:
        ta += "" if r.get("share_a") is None else f" ({r['share_a']:.0f}%)"
        tb += "" if r.get("share_b") is None else f" ({r['share_b']:.0f}%)"
    return ta, tb, unit, _ratio(r)


def _title(d: dict) -> str:
    a, b = d["a"], d["b"]
    where = f"{format_shape(tuple(a['shape']))} {a['dtype']}, {a['gpu']}"
    return f"{a['label']} -> {b['label']}  ({where}" + (f"; differs: {'; '.join(d['differs'])})" if d["differs"]
                                                        else ")")


def gpu_choice_line(choice: dict | None) -> str | None:
    """Where a side named no GPU and its revision has profiles on several: which was taken, why,
    and how to name another."""
    if not choice:
        return None
    others = ", ".join(choice["others"])
    return (f"GPU: {choice['chosen']} ({choice['why']}); also profiled on {others}: add @GPU to a side "
            f"(a short name will do, e.g. @{choice['others'][0].split('-')[-1]})")


def _choices(d: dict) -> list[str]:
    seen = []
    for s in (d["a"], d["b"]):
        line = gpu_choice_line(s.get("gpu_choice"))
        if line and line not in seen:
            seen.append(line)
    return seen


def _verdict_line(d: dict) -> str:
    t = d["timing"]
    v = Verdict(**{k: t[k] for k in Verdict.__dataclass_fields__})
    return v.line() + (f" [{t['source']}]" if t.get("source") != "stored samples" else "")


def render(d: dict, fmt: str = "text", all_rows: bool = False) -> str:
    if fmt == "json":
        return json.dumps(d, indent=1, sort_keys=True)
    rows = [r for r in d["rows"] if all_rows or r["judgement"] not in ("same", "not collected")
            or r["metric"] == "wall_ms"]
    hidden = len(d["rows"]) - len(rows)
    out = []
    if fmt == "md":
        out += [f"**{d['a']['label']} → {d['b']['label']}** ({_title(d).split('(', 1)[1]}", *_choices(d), "",
                f"{_verdict_line(d)}", "", f"Noise bands: {d['bands']}.", "",
                "| metric | before | after | unit | ratio | judgement | band |",
                "| --- | ---: | ---: | --- | ---: | --- | --- |"]
        for r in rows:
            ta, tb, unit, ratio = _cells(r)
            band = f"±{100 * r['band']['rel']:.1f}%" + (f" +{r['band']['abs']:g}" if r["band"]["abs"] else "")
            out.append(f"| {r['label']}{' (per element)' if r['per'] == 'element' else ''} | {ta} | {tb} | {unit} | "
                       f"{ratio} | {r['judgement']} | {band} |")
        for title, items in (("Findings that appeared", d["findings_appeared"]),
                             ("Findings that went away", d["findings_gone"])):
            if items:
                out += ["", f"{title}:", ""] + [f"- {f['title']} ({f['rule']})" for f in items]
        if d.get("hot_lines"):
            out += ["", "Source lines whose share of the warp samples moved:", "",
                    "| before | after | line | leading stall | code |", "| ---: | ---: | --- | --- | --- |"]
            out += [f"| {a} | {b} | `{w}` | {st} | `{t.replace('|', chr(92) + '|')}` |"
                    for a, b, w, st, t in _hot_rows(d)]
        out += [""] if d["warnings"] or d["flags"] else []
    else:
        out += [_title(d), *_choices(d), _verdict_line(d), f"noise bands: {d['bands']}"]
        w = max([len(r["label"]) + (14 if r["per"] == "element" else 0) for r in rows] + [6])
        out.append(f"{'metric':<{w}}  {'before':>16}  {'after':>16}  {'unit':<11} {'ratio':>8}  judgement")
        for r in rows:
            ta, tb, unit, ratio = _cells(r)
            name = r["label"] + (" (per element)" if r["per"] == "element" else "")
            out.append(f"{name:<{w}}  {ta:>16}  {tb:>16}  {unit:<11} {ratio:>8}  {r['judgement']}")
        if hidden and not all_rows:
            out.append(f"({hidden} rows same or not collected; --all shows them)")
        for title, items in (("finding appeared", d["findings_appeared"]), ("finding gone", d["findings_gone"])):
            out += [f"{title}: {f['title']} ({f['rule']})" for f in items]
        if d.get("hot_lines"):
            out.append("source lines whose share of the warp samples moved (before -> after, leading stall):")
            out += [f"  {a:>4} -> {b:>4}  {w:<44} {st:<32} {t}" for a, b, w, st, t in _hot_rows(d)]
    out += [f"warning: {w_}" for w_ in d["warnings"]]
    out += [f"IMPOSSIBLE: {f}" for f in d["flags"]]
    return "\n".join(out)
