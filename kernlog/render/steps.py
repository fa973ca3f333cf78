"""A kernel page told as a worklog: one short section per step of its headline ladder, and the
page's first screen (where it stands, what to try next).

Each step after the first answers, from the stored facts alone:
- *why*: where the previous step sat in its profile (roofline position, top stall, DRAM over
  the minimum), the bottleneck this step goes after;
- *what changed*: the revision's `change`, whole;
- *the code that carries it*: kernlog.render.excerpts' hunks, chosen by the step's hot lines
  and new instructions;
- *what it bought*: against the previous step (the verdict over both steps' samples) and
  against the ceiling (% of roofline; % of copy or of cuBLAS);
- *prediction*: the judged claims of predictions.toml, one line;
- the author's note beside it (kernlog.render.notes).

"Best" has one definition, `best(lad)`: the fastest revision of the ladder that is not a
reference and passes the gate, a "same kernel as" resolved to the first step that has that
kernel; every page line and the front page's profile-only line use it.
"""
from __future__ import annotations

from kernlog.judge import predictions
from kernlog.metrics import ranked_stalls
from kernlog.render import limits
from kernlog.spec import parse_shape

AT_CEILING = 0.9  # of its roofline: at or above it, a step is at its ceiling


def best(lad: dict) -> dict | None:
    """The ladder's best row: its arc's fastest (kernlog.render.facts._arc), resolved through
    "same kernel as" to the first step with that kernel; None where nothing is rated."""
    arc = lad.get("arc")
    if not arc:
        return None
    row = arc["best"]
    first = row.get("same_as")
    if first and first in arc.get("ties", ()):  # the same kernel, and as fast within noise
        row = next((r for r in lad["rows"] if r["rec"].revision == first), row)
    return row


def tied_with(lad: dict, name: str) -> list[str]:
    """The revisions within noise of the best step `name`, in ladder order: the arc's fastest and its ties,
    less `name` (where "same kernel as" resolved the fastest to `name`, the fastest is one of them)."""
    arc = lad.get("arc") or {}
    near = {arc["best"]["rec"].revision, *arc.get("ties", ())} if arc.get("best") else set(arc.get("ties", ()))
    return [r["rec"].revision for r in lad["rows"] if r["rec"].revision in near and r["rec"].revision != name]


def _arc_row(lad: dict, revision: str) -> dict | None:
    return next((r for r in lad.get("arc_rows", []) if r["revision"] == revision), None)


def position(row: dict) -> str:
    """Where a profile sits, in one clause: its roofline label, its top stall and its DRAM
    traffic over the minimum where the label does not already say them."""
    label = row["bottleneck"]
    stalls = ranked_stalls(row["rec"].metrics)
    extra = []
    if stalls and "top stall" not in label:
        extra.append(f"top stall {stalls[0][0].replace('_', ' ')} ({stalls[0][1]:.1f} cycles/inst)")
    excess = row["roof"].get("excess")
    if excess is not None and "the minimum" not in label:
        extra.append(f"DRAM {excess:.2f}x the minimum")
    return label + (f"; {', '.join(extra)}" if extra else "")


def _claim_lines(judged: dict | None, at: str = "", measured_only: bool = False) -> list[tuple[str, bool | None]]:
    out = []
    for c in (judged or {}).get("claims", []):
        v = c["value"]
        if v is None and measured_only:  # in another ladder: said where it could be judged, not where it could not
            continue
        value = (f"not measured ({c['why']})" if c.get("why") else "not measured") if v is None else \
            v if isinstance(v, str) else format(v, ".3g")
        ok = "" if c["ok"] is None else ("met, a tie" if c["tie"] else "met") if c["ok"] else "missed"
        if c.get("clocks"):
            here, there, name = c["clocks"]
            ok += (f"{'; ' if ok else ''}timed at an SM clock of {here:.0f} MHz, {name} at {there:.0f}: "
                   "part of the ratio is the clock")
        out.append((f"{c['text']}{at}: {value}" + (f" ({ok})" if ok else ""), c["ok"]))
    return out


def _prediction(row: dict, others: list[tuple[str, dict]] = (), here: str = "") -> dict | None:
    """The step's prediction with each claim judged: at this ladder's shape (`here` names it
    where the page's ladder is another), then at `others` ((where, the row of the same revision
    in another ladder)), so a claim about another shape is shown where the prediction is, and
    counts in its verdict."""
    r = row["rec"]
    text = row.get("predicts_text") or r.predicts
    if not text:
        return None
    lines = _claim_lines(row.get("judged"), here)
    for where, other in others:
        lines += _claim_lines(other.get("judged"), f" at {where}", measured_only=True)
    return {"text": text, "verdict": predictions.verdict([ok for _, ok in lines]) if lines else None,
            "claims": [line for line, _ in lines], "unchecked": (row.get("unchecked") or "").rstrip(". ")}


def _other_rows(ladders: list[dict], lad: dict) -> dict[str, list[tuple[str, dict]]]:
    """revision -> (where, its row) in each of `ladders` but `lad`, where: shape, dtype and GPU."""
    out: dict[str, list] = {}
    for o in ladders:
        if o is not lad:
            for row in o["rows"]:
                out.setdefault(row["rec"].revision, []).append((f"{o['shape']} {o['dtype']} on {o['gpu']['name']}",
                                                                row))
    return out


def of_ladder(lad: dict, notes: dict[str, str], others: list[dict] = ()) -> list[dict]:
    """One section per revision of the ladder that is not a reference, in ladder order; a
    prediction's claims about the shapes of `others` (the kernel's other ladders) judged there."""
    elsewhere_rows = _other_rows(others, lad)
    out, prev = [], None
    for row in lad["rows"]:
        r = row["rec"]
        if r.role == "reference":
            continue
        arc_row = _arc_row(lad, r.revision) or {}
        base = next((x for x in lad["rows"] if x["rec"].revision == row.get("base")), None)
        why_row = base or (prev if r.role == "step" else None)
        out.append({
            "revision": r.revision, "role": r.role, "change": " ".join((r.change or "").split()),
            "stale": row["stale"], "fails_gate": row["fails_gate"], "imported": r.imported,
            "why": {"revision": why_row["rec"].revision, "text": position(why_row)} if why_row else None,
            "excerpt": lad.get("excerpts", {}).get(r.revision),
            "same_as": row.get("same_as"), "main_kernel": r.facts.get("main_kernel"),
            "base": row.get("base"), "speedup": row.get("speedup"), "verdict": row.get("verdict"),
            "us": row["rate"]["us"], "rate": arc_row.get("rate"), "pct": arc_row.get("pct"),
            "roof": arc_row.get("roof"), "launch_bound": arc_row.get("launch_bound"),
            "where": position(row), "hot": row["hot"][:1], "shares": row["shares"],
            "hot_samples": (r.hotspots or {}).get("samples"),
            "prediction": _prediction(row, elsewhere_rows.get(r.revision, [])), "note": notes.get(r.revision)})
        if r.role == "step":
            prev = row
    return out


PLACES_IN_HEADING = 6  # a step profiled elsewhere names up to this many places in its heading, else a list


def places(at: list[str]) -> str:
    """Places ("SHAPE DTYPE on GPU", maybe " (stale)") in one phrase, those on one GPU named once, in
    the order first met: "4096x4096x4096 bf16, 1000x1000x1000 bf16 on NVIDIA H200; 3072x3072x3072 bf16
    on NVIDIA H100 80GB HBM3"."""
    by_gpu: dict[str, list[str]] = {}
    for where in at:
        head, _, gpu = where.partition(" on ")
        stale = " (stale)" if gpu.endswith(" (stale)") else ""
        by_gpu.setdefault(gpu.removesuffix(" (stale)"), []).append(head + stale)
    return "; ".join(f"{', '.join(heads)} on {gpu}" for gpu, heads in by_gpu.items())


def elsewhere(s: dict, main: dict, notes: dict[str, str]) -> list[dict]:
    """The kernel's steps and counterparts that the main ladder lacks but another ladder holds
    (profiled at other shapes or on another GPU only), in the kernel's order: what changed,
    where each is profiled (a profile of an older source marked stale there, as on the main
    ladder), and the author's note, so no step or note goes unshown."""
    there = {row["rec"].revision for row in main["rows"]}
    at = _other_rows(s["ladders"], main)
    marked = {name: [where + (" (stale)" if row["stale"] else "") for where, row in rows] for name, rows in at.items()}
    return [{"revision": r.name, "role": r.role, "change": " ".join((r.change or "").split()),
             "at": marked[r.name], "places": places(marked[r.name]),
             "note": notes.get(r.name),
             "bought": [f"{row['speedup']:.2f}x{'†' if row['stale'] else ''} vs {row['base']} ({row['verdict']}) "
                        f"at {where}"
                        for where, row in at[r.name] if row.get("base") and row.get("speedup") is not None],
             "prediction": _prediction(at[r.name][0][1], at[r.name][1:], f" at {at[r.name][0][0]}")}
            for r in s["kernel"].revisions
            if r.role in ("step", "counterpart") and r.name not in there and r.name in at]


def references(lad: dict) -> list[dict]:
    """The ladder's references, each with what it runs (the backend read from its longest
    kernel's name) and where it sits."""
    out = []
    for row in lad["rows"]:
        r = row["rec"]
        if r.role == "reference":
            kernel = r.facts.get("main_kernel")
            out.append({"revision": r.revision, "change": " ".join((r.change or "").split()), "kernel": kernel,
                        "backend": backend(kernel), "where": position(row), "stale": row["stale"],
                        "shares": row["shares"]})
    return out


def next_line(s: dict, lad: dict | None) -> str | None:
    """What limits the page's best step now, in one or two sentences from its profile and the
    sweep's misses; None where nothing is profiled."""
    if lad is None:
        return None
    row = best(lad)
    if row is None:
        return None
    name = row["rec"].revision
    pct = row["roof"].get("pct_of_roof")
    where = position(row)
    launches = (row["rec"].kernel_times or {}).get("launches")
    if pct is None and len(row["rec"].facts.get("kernels") or []) > 1:
        text = (f"{name} runs {launches or len(row['rec'].facts['kernels'])} kernels a call at {lad['shape']} "
                f"{lad['dtype']}, with no one roofline: `kernlog triage {s['kernel'].name}` ranks which of them "
                "to write next")
    elif away := profiled_elsewhere(s.get("ladders", []), s["kernel"], lad):  # rungs to profile here first
        names = [n for n, _ in away]
        gpus = sorted({g for _, gs in away for g in gs})
        text = (f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} profiled only on {' and '.join(gpus)}: "
                f"`kernlog profile {s['kernel'].name} {' '.join('--rev ' + n for n in names)} --shape {lad['shape']} "
                f"--dtype {lad['dtype']}` on the {lad['gpu']['name']} puts them in this ladder, past {name}")
    elif pct is not None and pct >= AT_CEILING:
        text = f"{name} is {where} at {lad['shape']} {lad['dtype']}: little is left at this shape"
    else:
        text = f"go after the limit {name} meets at {lad['shape']} {lad['dtype']}, where it is {where}"
    missed = [sw for sw in s.get("sweeps", []) if sw.get("missed")]
    for i, sw in enumerate(missed):
        pts = [f"{r['shape']} {r['dtype']}" for r in sw["missed"]]
        shown = ", ".join(pts[:3]) + (f" and {len(pts) - 3} more" if len(pts) > 3 else "")
        text += (f"; {len(pts)} of {len(sw['rows'])} swept points on {sw['gpu']} miss a bar ({shown})" if i == 0
                 else f", {len(pts)} of {len(sw['rows'])} on {sw['gpu']} ({shown})")
    if not missed:
        text += ("; every swept point meets its bars" if s.get("sweeps") else "")
    return text + "."


def profiled_elsewhere(ladders: list[dict], kernel, lad: dict) -> list[tuple[str, list[str]]]:
    """(step, the GPUs it was profiled on) for each step after `lad`'s best in the kernel's order,
    profiled on another GPU and at no shape on `lad`'s, that the kernel still declares a step and that
    takes `lad`'s shape: the rungs its arc cannot show yet, and profiling would add (the Next line's
    command; the page's second arc, kernlog.render.arc.beyond)."""
    gpu = lad["gpu"]["name"]
    here = {r["rec"].revision for lo in ladders if lo["gpu"]["name"] == gpu for r in lo["rows"]}
    away: dict[str, set] = {}
    for lo in ladders:
        for r in lo["rows"]:
            if lo["gpu"]["name"] != gpu and r["rec"].revision not in here:
                away.setdefault(r["rec"].revision, set()).add(lo["gpu"]["name"])
    revs = {r.name: r for r in kernel.revisions}
    order = list(revs)
    top = best(lad)
    if top is None or top["rec"].revision not in revs:
        return []
    shape = parse_shape(lad["shape"])
    return [(n, sorted(away[n])) for n in order[order.index(top["rec"].revision) + 1:]
            if n in away and revs[n].role == "step" and not revs[n].refusal(shape)]


def sweep_standing(s: dict, lad: dict, best_name: str | None = None) -> str:
    """A sentence per sweep on a GPU other than the headline ladder's, or on its GPU where a step
    other than `best_name` (the ladder's best) is best at most points: which step that is, at how
    many of its points, and how many miss a bar. The arc table shows neither."""
    out = []
    for sw in s.get("sweeps", []):
        names = [r["bars"][0]["name"] for r in sw["rows"] if r.get("bars") and r["bars"][0]["name"]]
        if not names:
            continue
        top = max(dict.fromkeys(names), key=names.count)  # the most often best, the first met on a tie
        if sw["gpu"] == lad["gpu"]["name"] and top == best_name:
            continue
        miss = len(sw["missed"])
        out.append(f" On {sw['gpu']}'s sweep, {top} is the best step at {names.count(top)} of {len(sw['rows'])} "
                   f"points; " + (f"{miss} {'misses' if miss == 1 else 'miss'} a bar." if miss
                                          else "every point meets its bars."))
    return "".join(out)


def stands(s: dict, lad: dict | None) -> str | None:
    """The page's best step in one sentence: its time and rates at the headline shape, against
    the first step and the fastest reference, and the steps tied with it."""
    row = best(lad) if lad else None
    if row is None:
        return None
    name = row["rec"].revision
    a = _arc_row(lad, name) or {}
    matmul = s["kernel"].ceiling == "matmul"
    rate = ("launch-bound" if a.get("launch_bound") else
            f"{a['rate']:.0f} {'TFLOP/s' if matmul else 'GB/s'}" if a.get("rate") is not None else None)
    parts = [f"{row['rate']['us']:.1f} us"] + ([rate] if rate else [])
    if a.get("roof") is not None:
        parts.append(f"{a['roof']:.0f}% of its roofline")
    arc = lad["arc"]
    against = []
    if arc.get("naive") and arc["naive"] != name and row.get("vs_naive"):
        against.append(f"{row['vs_naive']:.1f}x {arc['naive']}")
    if a.get("vs_ref") is not None and a.get("best_ref"):
        against.append(f"{a['vs_ref']:.2f}x {a['best_ref']}, the fastest reference")
    text = (f"{name}{'†' if row['stale'] else ''} is the best step at {lad['shape']} {lad['dtype']} on "
            f"{lad['gpu']['name']}, in its profile: {', '.join(parts)}"
            + (f"; {', '.join(against)}" if against else ""))
    ties = tied_with(lad, name)
    if ties:
        text += f". Within noise of it: {', '.join(ties)}"
    return text + "." + _in_sweep(s, lad, name) + sweep_standing(s, lad, name)


def _in_sweep(s: dict, lad: dict, name: str) -> str:
    """The front page's figures of the same step at the same point, where its sweep has them:
    the profile and the sweep are two measurements, and the page says both with their source."""
    p = (s.get("front") or {}).get("point")
    if not p or p.get("best") not in (name, *tied_with(lad, name)) or (p["shape"], p["dtype"], p.get("gpu")) != (
            lad["shape"], lad["dtype"], lad["gpu"]["name"]) or p.get("rate") is None:
        return ""
    vs = f"{p['vs_ref']:.2f}x" if p.get("vs_ref") is not None and p.get("best_ref") else ""
    ref = f", {limits.cross_run(vs) if p.get('apart_ref') else vs} {p['best_ref']}" if vs else ""
    who = "" if p["best"] == name else f" {p['best']} ran fastest"
    return f" In its sweep{who} (the front page's figures): {p['rate']:.0f} {p['unit']}{ref}."


def others(s: dict) -> list[dict]:
    """The best step of every ladder after the headline one, a row each."""
    out = []
    for lad in s["ladders"][1:]:
        row = best(lad)
        if row is None:
            continue
        name = row["rec"].revision
        a = _arc_row(lad, name) or {}
        ref = next((r for r in lad["rows"] if r["rec"].revision == a.get("best_ref")), None)
        out.append({"shape": lad["shape"], "dtype": lad["dtype"], "gpu": lad["gpu"]["name"], "best": name,
                    "ties": tied_with(lad, name)[:3], "stale": row["stale"],
                    "us": row["rate"]["us"], "rate": a.get("rate"), "launch_bound": a.get("launch_bound"),
                    "roof": a.get("roof"), "vs_ref": a.get("vs_ref"), "best_ref": a.get("best_ref"),
                    "clocks": predictions.clock_gap(row, ref, lad.get("wall_band", 0.0)),
                    # the two profiles the ratio divides, where the sweep measured either apart (agree.py)
                    # (launch-bound points aside: their launch overhead moves between sessions)
                    "disagree": [d for d in lad.get("disagree", []) if d["revision"] in (name, a.get("best_ref"))
                                 and not d["launch_bound"]]})
    return out


BACKENDS = (("cudnn", "cuDNN"), ("flash", "FlashAttention"), ("nvjet", "cuBLAS"), ("cutlass", "CUTLASS"),
            ("sm90_xmma", "cuBLAS"), ("gemm", "cuBLAS"), ("triton_", "Inductor's Triton"))


def backend(kernel_name: str | None) -> str | None:
    """What a reference runs, read from its profiled kernel's name; None where the name says
    nothing kernlog knows."""
    low = (kernel_name or "").lower()
    return next((label for key, label in BACKENDS if key in low), None)
