"""The dispatch table of a kernel (what kernlog.library reads to pick a call's revision), made
from its committed sweep: pure, from bench.csv's points (kernlog.store.dispatch reads them).

Per shape class and dtype (kernlog.library says what a class is) the table ranks the revisions
that qualify at every point of the class by their geometric-mean time over those points against
the fastest there; the first is the pick, the second the runner-up, and the margin is how much
slower the runner-up is (a margin inside the GPU's noise band, or a point's measured run-to-run
spread, is a tie). The fallback ranks every qualifying revision over the whole sweep.

Qualifying: a step or a counterpart (never a reference, never a known-wrong revision), measured
on its current source (a point of another source hash, or of none, is stale), whose latest gate
on the GPU does not fail on that source (kernlog.judge.gate_marks) and that the sweep did not mark
failing the gate at the point (bench.csv's fails_gate). bench times a step only after its gate
passed, so a point of a step is a gated point.

Same kernel: revisions whose sweep notes name the same pick ("picked ...": the launcher's own
config or kernel) at every point of a class ran the same code there, so they count once, as the
earliest rung among them, the one that brought that kernel: triton_packed sends fp32 rows to
triton_met's launcher, and the two timed alike within noise, which the ranking would otherwise
credit to whichever drew the faster samples. Revisions with no note (no picker) never merge.

Unranked: a point where a revision that qualifies elsewhere in the sweep was timed on an older
source. The sweep ran it there and its figure no longer holds, so the revisions left cannot say
which is fastest: GELU's H100 sweep left v0_unfused alone at three sizes, where the dispatched
op then ran 5-10x slower than the later rungs (on the H200). Such a point makes no class and
counts for no fallback; calls there go where calls outside every class go (the nearest
class, else the fallback: kernlog.library) until `kernlog bench` times it again.
"""
from __future__ import annotations

import math

from kernlog.judge.gate_marks import fails_gate
from kernlog.library import ALIGNS, ANY, SCHEMA, ClassRule, bucket_size, class_key
from kernlog.spec import COPY, parse_shape

QUALIFY = ("step", "counterpart")  # the roles a pick may be; references and known-wrong revisions never
STALE = "stale (measured on another source)"


def class_label(entry: dict, rule: ClassRule) -> str:
    """A class in words: "rows ≤ 4096, cols ≤ 8192, tiled (4096x8192)"."""
    axes = ", ".join(f"{name} ≤ {bucket_size(b, rule.per_octave)}"
                     for name, b in zip(rule.axes, entry["buckets"], strict=True))
    return f"{axes}, {entry['align']} ({', '.join(entry['points'])})"


def _geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def qualifies(point: dict, roles: dict, current: dict, outcomes: dict | None) -> str:
    """"" where a bench.csv point may count for the pick, else why not (a reason in words)."""
    rev = point["revision"]
    role = roles.get(rev)
    if role is None:
        return "not a revision of the kernel now"
    if role not in QUALIFY:
        return f"a {role}"
    if point.get("sha256") != current.get(rev):
        return STALE
    why = point.get("fails_gate") or fails_gate(point.get("sha256"), rev, outcomes)
    return f"fails the gate ({why})" if why else ""


def build(kernel: str, points: list[dict], roles: dict, current: dict, order: list[str],
          rule: ClassRule, outcomes: dict | None = None, band: float = 0.0, source: dict | None = None) -> dict:
    """The dispatch table of `kernel` from its sweep's points: each {"revision", "shape" (text),
    "dtype", "median_ms", "sha256", "spread" (run-to-run, 0 where one run), "fails_gate" (the
    sweep's note, "" where none)}. `current`: revision -> source hash now; `order`: the ladder,
    which breaks ties (the later rung first); `band`: the GPU's wall-time noise band, under
    which a margin is a tie; `source`: what the table names as its sweep. "unserved": the
    sweep's points where no revision qualifies (calls there take the nearest class); "unranked":
    those left out because a revision that qualifies elsewhere is stale there (the module's
    docstring), with those revisions. Deterministic:
    the same points give the same table, whatever their order."""
    rank = {name: i for i, name in enumerate(order)}
    kept: dict = {}  # (dtype, shape) -> {revision: (ms, spread)}
    left: dict = {}  # revision -> {reason: points}
    picked: dict = {}  # (dtype, shape, revision) -> the sweep's note on what it ran there
    for p in points:
        if p["revision"] == COPY:  # the sweep's copy column: no revision
            continue
        why = qualifies(p, roles, current, outcomes)
        if why:
            left.setdefault(p["revision"], {}).setdefault(why, set()).add((p["dtype"], p["shape"]))
            continue
        kept.setdefault((p["dtype"], p["shape"]), {})[p["revision"]] = (float(p["median_ms"]),
                                                                       float(p.get("spread") or 0.0))
        picked[(p["dtype"], p["shape"], p["revision"])] = p.get("note") or ""

    swept = {(p["dtype"], p["shape"]) for p in points if p["revision"] != COPY}
    unserved = swept - set(kept)
    unranked = _unranked(kept, left)
    kept = {pt: revs for pt, revs in kept.items() if pt not in unranked}

    def order_key(name):  # the later rung first where two tie exactly
        return -rank.get(name, -1), name

    groups: dict = {}  # class key -> [(dtype, shape)]
    for dtype, shape in kept:
        groups.setdefault(class_key(parse_shape(shape), dtype, rule), []).append((dtype, shape))
    classes = []
    for key in sorted(groups, key=lambda k: (k[0], k[2], ALIGNS.index(k[1]))):
        dtype, how, buckets = key
        pts = sorted(groups[key], key=_point_order)
        best = {pt: min(ms for ms, _ in kept[pt].values()) for pt in pts}
        everywhere = _distinct(set.intersection(*(set(kept[pt]) for pt in pts)), pts, picked, rank)
        ranking = sorted(((name, _geomean(kept[pt][name][0] / best[pt] for pt in pts)) for name in everywhere),
                         key=lambda nr: (round(nr[1], 9), order_key(nr[0])))
        entry = {"dtype": dtype, "align": how, "buckets": list(buckets),
                 "points": [shape for _, shape in pts],
                 "ranking": [[name, round(rel, 4)] for name, rel in ranking],
                 "revision": ranking[0][0] if ranking else None,
                 "runner_up": ranking[1][0] if len(ranking) > 1 else None, "margin": None, "noise": round(band, 4)}
        if len(ranking) > 1:
            a, b = ranking[0][0], ranking[1][0]
            entry["margin"] = round(_geomean(kept[pt][b][0] / kept[pt][a][0] for pt in pts) - 1, 4)
            # a point's measured run-to-run spread widens the band, as the log's sweep bars do
            entry["noise"] = round(max([band] + [kept[pt][n][1] for pt in pts for n in (a, b)]), 4)
        if ranking:
            entry["worst_point"] = _worst_point({pt: kept[pt] for pt in pts}, ranking[0][0], order_key)
        classes.append(entry)
    return {"schema": SCHEMA, "kernel": kernel, "source": dict(source or {}), "rule": rule.as_dict(),
            "revisions": {name: current[name] for name in sorted({n for v in kept.values() for n in v},
                                                                  key=order_key)},
            "left_out": {name: {why: len(pts) for why, pts in sorted(reasons.items())}
                         for name, reasons in sorted(left.items(), key=lambda kv: order_key(kv[0]))},
            "unserved": [f"{d} {shape}" for d, shape in sorted(unserved, key=_point_order)],
            "unranked": {f"{d} {shape}": sorted(unranked[(d, shape)], key=order_key)
                         for d, shape in sorted(unranked, key=_point_order)},
            "classes": classes, "fallback": _fallback(kept, order_key)}


def _distinct(names: set, pts: list, picked: dict, rank: dict) -> set:
    """`names` less each revision whose notes at every point of `pts` name the same pick as an
    earlier rung's (the module's docstring: same kernel)."""
    def ran(name):
        notes = tuple(picked.get((d, shape, name), "") for d, shape in pts)
        return notes if all(n.startswith("picked ") for n in notes) else (name,)

    first: dict = {}
    for name in sorted(names, key=lambda n: (rank.get(n, len(rank)), n)):
        first.setdefault(ran(name), name)
    return set(first.values())


def _unranked(kept: dict, left: dict) -> dict:
    """(dtype, shape) -> the revisions stale there that qualify at some other point: the points
    the table cannot rank (the module's docstring)."""
    contenders = {name for revs in kept.values() for name in revs}
    out: dict = {}
    for name, reasons in left.items():
        if name not in contenders:
            continue
        for pt in reasons.get(STALE, ()):
            if pt in kept and name not in kept[pt]:
                out.setdefault(pt, set()).add(name)
    return out


def _point_order(point: tuple) -> tuple:
    dtype, shape = point
    return dtype, parse_shape(shape)


def _worst_point(kept: dict, pick: str, order_key) -> list:
    """[shape, how much slower `pick` is than the fastest there, the fastest] at the point of a
    class where its pick loses most: what sharing the class costs (0 at a class of one point)."""
    def loss(pt):
        return kept[pt][pick][0] / min(ms for ms, _ in kept[pt].values()) - 1

    pt = max(kept, key=lambda pt: (round(loss(pt), 9), pt[1]))
    return [pt[1], round(loss(pt), 4), min(kept[pt], key=lambda n: (kept[pt][n][0], order_key(n)))]


def _fallback(kept: dict, order_key) -> dict:
    """dtype -> the revisions, fastest over the whole sweep first: by geometric-mean time against
    the fastest at each point they were measured at, those measured at fewer than half the points
    after the rest (a revision timed only where it shines is no general one); ANY: the same over
    every dtype."""
    def ranked(pts):
        names = {n for pt in pts for n in kept[pt]}
        best = {pt: min(ms for ms, _ in kept[pt].values()) for pt in pts}
        score = {n: (2 * sum(n in kept[pt] for pt in pts) < len(pts),
                     round(_geomean(kept[pt][n][0] / best[pt] for pt in pts if n in kept[pt]), 9)) for n in names}
        return sorted(names, key=lambda n: (score[n], order_key(n)))

    out = {d: ranked([pt for pt in kept if pt[0] == d]) for d in sorted({d for d, _ in kept})}
    out[ANY] = ranked(list(kept))
    return out
