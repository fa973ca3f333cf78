"""`kernlog compare` as a person reads it: the judged comparison of kernlog.judge.compare as a
markdown table (the rows that moved, regressed or changed source; `--all`: every row) or JSON."""
from __future__ import annotations

import json


def _f(v, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


QUIET = ("same",)  # a row judged so is counted, not listed, unless --all


def shown(row: dict) -> bool:
    """Whether the table lists a row by default: a regression, a move, a refusal or a profile only one
    side has; a row judged "same" with an unchanged source is counted in one line instead."""
    return row["regression"] or row["judgement"] not in QUIET or row["source_changed"]


def render(c: dict, fmt: str = "md", all_rows: bool = False) -> str:
    if fmt == "json":
        return json.dumps(c, indent=1, sort_keys=True)
    head = c["head"] + (f" ({c['head_commit'][:10]})" if c["head_commit"] else "")
    out = [f"kernlog compare {c['base']} ({c['base_commit'][:10]}) -> {head}: "
           f"{c['regressions']} regression(s): slower beyond the noise band at p < {c['alpha']}"
           + (f" and by more than {c['threshold']:.1%}" if c["threshold"] else ""),
           ""]
    if c.get("nothing_to_compare"):
        out += [f"note: nothing to compare: {c['nothing_to_compare']}; passed under --allow-empty"]
    if c["allow_different_setup"]:
        out += ["**Profiles of another GPU, driver or ncu are compared (--allow-different-setup).**", ""]
    rows = [r for r in c["rows"] if all_rows or shown(r)]
    quiet = len(c["rows"]) - len(rows)
    if rows:
        out += ["| gpu | kernel/revision | shape | dtype | base (ms) | head (ms) | ratio | p | band | judgement |",
                "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        judged = ("**REGRESSION** " if r["regression"] else "") + r["judgement"] + (
            "; source changed" if r["source_changed"] else "")
        band = "" if r["band"] is None else f"±{100 * r['band']:.1f}%"
        out.append(f"| {r['gpu']} | {r['kernel']}/{r['revision']} | {r['shape']} | {r['dtype']} | "
                   f"{_f(r['base_ms'], '.4f')} | {_f(r['head_ms'], '.4f')} | {_f(r['ratio'], '.3f')} | "
                   f"{_f(r['p_value'], '.2g')} | {band} | {judged} |")
    if quiet:
        out += ["" if rows else None,
                f"{quiet} of {len(c['rows'])} pair{'s' * (len(c['rows']) != 1)} judged same, source unchanged"
                + (" (all of them)" if not rows else "") + ": `--all` lists them"]
    return "\n".join(line for line in out if line is not None)
