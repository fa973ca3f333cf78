"""`kernlog diff`: what moved between two stored profiles, and whether a timing change is real."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from .metrics import CATALOG, metric

SAME_BAND = 0.02  # a change whose 95% interval lies inside +-2% counts as 'same'
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None
    pct: float | None
    judgement: str  # better / worse / changed / same / not collected


@dataclass(frozen=True)
class Verdict:
    verdict: str  # faster / slower / same / ambiguous
    ratio: float  # median(b) / median(a)
    low: float  # 95% bootstrap interval of the ratio
    high: float
    n_a: int
    n_b: int


def timing_verdict(a: list[float], b: list[float], band: float = SAME_BAND, seed: int = 0) -> Verdict:
    """Bootstrap the ratio of medians (b over a) from the stored samples of each run. Faster
    or slower when the whole 95% interval lies past the `band`; same when it lies inside it;
    ambiguous otherwise. Seeded, so the same profiles always give the same verdict."""
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    ra = np.median(rng.choice(xa, (BOOTSTRAP, xa.size)), axis=1)
    rb = np.median(rng.choice(xb, (BOOTSTRAP, xb.size)), axis=1)
    ratios = rb / ra
    low, high = (float(v) for v in np.quantile(ratios, [0.025, 0.975]))
    ratio = float(np.median(xb) / np.median(xa))
    if high < 1 - band:
        verdict = "faster"
    elif low > 1 + band:
        verdict = "slower"
    elif low >= 1 - band and high <= 1 + band:
        verdict = "same"
    else:
        verdict = "ambiguous"
    return Verdict(verdict, ratio, low, high, xa.size, xb.size)


def judge(m, a, b) -> str:
    if a is None or b is None:
        return "not collected"
    if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
        return "same"
    if m.better is None:
        return "changed"
    return "better" if (b < a) == (m.better == "lower") else "worse"


def metric_rows(a: dict, b: dict) -> list[Row]:
    keys = [m.key for m in CATALOG] + sorted({k for k in (*a, *b) if k.startswith("stall_")})
    rows = []
    for key in keys:
        m = metric(key)
        va, vb = a.get(key), b.get(key)
        delta = None if va is None or vb is None else vb - va
        pct = None if delta is None or va == 0 else 100.0 * delta / abs(va)
        rows.append(Row(key, m.label, m.unit, va, vb, delta, pct, judge(m, va, vb)))
    return rows


def finding_changes(a: list[dict], b: list[dict]) -> tuple[list[dict], list[dict]]:
    ka = {(f["rule"], f["title"]) for f in a}
    kb = {(f["rule"], f["title"]) for f in b}
    return ([f for f in b if (f["rule"], f["title"]) not in ka],
            [f for f in a if (f["rule"], f["title"]) not in kb])


def label(rec: dict) -> str:
    return f"{rec['kernel']}/{rec['revision']}"


def diff(a: dict, b: dict) -> dict:
    appeared, gone = finding_changes(a.get("findings", []), b.get("findings", []))
    verdict = timing_verdict(a["timing"]["samples_ms"], b["timing"]["samples_ms"])
    warnings = []
    for field in ("shape", "dtype"):
        if a[field] != b[field]:
            warnings.append(f"{field} differs: {a[field]} vs {b[field]}")
    if a["gpu"]["name"] != b["gpu"]["name"]:
        warnings.append(f"different GPUs: {a['gpu']['name']} vs {b['gpu']['name']}; timings do not compare")
    return {"a": label(a), "b": label(b), "shape": a["shape"], "dtype": a["dtype"], "gpu": a["gpu"]["name"],
            "timing": asdict(verdict), "metrics": [asdict(r) for r in metric_rows(a["metrics"], b["metrics"])],
            "findings_appeared": appeared, "findings_gone": gone, "warnings": warnings}


def _num(v: float | None) -> str:
    if v is None:
        return "not collected"
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.1f}%"


def render(d: dict, fmt: str = "text", all_rows: bool = False) -> str:
    if fmt == "json":
        return json.dumps(d, indent=1, sort_keys=True)
    t = d["timing"]
    head = (f"{d['a']} -> {d['b']}  ({'x'.join(map(str, d['shape']))} {d['dtype']}, {d['gpu']})\n"
            f"wall time: {t['verdict'].upper()}: median ratio {t['ratio']:.3f} "
            f"(95% interval {t['low']:.3f}-{t['high']:.3f}, {t['n_a']} vs {t['n_b']} samples)")
    rows = [r for r in d["metrics"] if all_rows or r["judgement"] not in ("same",)]
    out = []
    if fmt == "md":
        out += [f"**{d['a']} → {d['b']}** ({'x'.join(map(str, d['shape']))} {d['dtype']}, {d['gpu']})", "",
                f"Wall time: **{t['verdict']}**, median ratio {t['ratio']:.3f} "
                f"(95% interval {t['low']:.3f}–{t['high']:.3f}, {t['n_a']} vs {t['n_b']} samples)", "",
                "| metric | before | after | delta | change | |", "| --- | ---: | ---: | ---: | ---: | --- |"]
        out += [f"| {r['label']} ({r['unit']}) | {_num(r['a'])} | {_num(r['b'])} | {_num(r['delta'])} | "
                f"{_pct(r['pct'])} | {r['judgement']} |" for r in rows]
        for title, items in (("Findings that appeared", d["findings_appeared"]),
                             ("Findings that went away", d["findings_gone"])):
            if items:
                out += ["", f"{title}:", ""] + [f"- {f['title']} ({f['rule']})" for f in items]
    else:
        out.append(head)
        w = max([len(r["label"]) for r in rows] + [6])
        out.append(f"{'metric':<{w}}  {'before':>13}  {'after':>13}  {'delta':>11}  {'change':>8}  judgement")
        out += [f"{r['label']:<{w}}  {_num(r['a']):>13}  {_num(r['b']):>13}  {_num(r['delta']):>11}  "
                f"{_pct(r['pct']):>8}  {r['judgement']}" for r in rows]
        for title, items in (("findings appeared", d["findings_appeared"]), ("findings gone", d["findings_gone"])):
            out += [f"{title}: {f['title']} ({f['rule']})" for f in items]
    out += [f"warning: {w_}" for w_ in d["warnings"]]
    return "\n".join(out)
