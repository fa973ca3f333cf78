"""The log's plots (matplotlib, headless): a sweep per kernel and GPU, a roofline per ladder, a
history per kernel; each SVG carries the digest of the data it was drawn from, so `report
--check` tells a stale plot from a current one without drawing."""
from __future__ import annotations

import io
import re
from pathlib import Path

from kernlog.render import paths as where
from kernlog.render.charts import arc_figures


def _pyplot():
    """matplotlib's pyplot, headless, its SVG ids salted so a re-render writes the same bytes (and
    renamed by order when saved: _save)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "kernlog"
    import matplotlib.pyplot as plt

    return plt


# Each SVG carries a digest of the data it was drawn from (its <dc:description>), so `report
# --check` can tell a stale plot from a current one without drawing. PLOT_VERSION is part of the
# digest: bump it when a plot's drawing changes, and every committed plot reads as out of date.
PLOT_VERSION = 3  # 3: matplotlib's hashed ids renamed by order (stable_ids)
_DIGEST = re.compile(r"kernlog-data ([0-9a-f]{64})")


def plot_digest(data) -> str:
    """sha256 of a plot's data (JSON, keys sorted; anything else by its repr) and PLOT_VERSION."""
    import hashlib
    import json

    blob = json.dumps([PLOT_VERSION, data], sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# matplotlib names a clip path, marker or hatch by a hash of its geometry at full float precision
# (its "p", "m" or "h" and 10 hex digits): two machines whose floating point rounds a layout's last
# bit apart (another CPU's vector paths) drew the same picture under other names, and a fresh clone
# read as modified. stable_ids names them by order of first appearance instead.
_HASHED_ID = re.compile(r'(id="|#)([pmh][0-9a-f]{10})\b')


def stable_ids(svg: str) -> str:
    """`svg` with matplotlib's hashed ids renamed p0, m1, ... in order of first appearance."""
    names: dict[str, str] = {}

    def name(m: re.Match) -> str:
        h = m.group(2)
        if h not in names:
            names[h] = f"{h[0]}{len(names)}"
        return m.group(1) + names[h]

    return _HASHED_ID.sub(name, svg)


def _save(plt, fig, path: Path, digest: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # tight_layout leaves a placeholder layout engine, for which savefig lays the figure out once
    # more before drawing it (a quarter of the drawing time, the same bytes): none is left
    fig.set_layout_engine(None)
    # no date: the same data, the same file; drawn to text first, its ids renamed, written once
    svg = io.StringIO()
    fig.savefig(svg, format="svg", metadata={"Date": None, "Description": f"kernlog-data {digest}"})
    plt.close(fig)
    path.write_text(stable_ids(svg.getvalue()))


def _style(i: int) -> dict:
    """Series i's colour (tab20: 20 distinct), marker and line style: no two of 20+ alike."""
    import matplotlib

    return {"color": matplotlib.colormaps["tab20"](i % 20), "marker": MARKERS[i % len(MARKERS)],
            "linestyle": ("-", "--", "-.", ":")[i // 5 % 4]}


def _sweep_lines(ax, sw: dict, xs, rows: list[dict], categorical: bool = False) -> None:
    """A series per revision of the sweep at each row it was measured at, and the ceiling; on a
    categorical axis (shapes of a family) points only, each series dodged sideways, no lines."""
    n = len(sw["revisions"])
    for i, rev in enumerate(sw["revisions"]):
        pts = sorted((x, r["values"][rev]) for x, r in zip(xs, rows, strict=True) if r["values"][rev] is not None)
        if pts:
            style = _style(i)
            if categorical:
                style["linestyle"] = "none"
                pts = [(x + 0.5 * (i - (n - 1) / 2) / n, y) for x, y in pts]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=rev, **style)
    ax.axhline(sw["ceiling"], color="grey", linestyle="--", label="ceiling")


def _plot_families(plt, s: dict, sw: dict):
    """A kernel with shape families: a panel per family and dtype, its members side by side (a
    line through 1x50257, 64x50257 and 4096x50257 at one row length would say nothing)."""
    dtypes = sorted({r["dtype"] for r in sw["rows"]})
    groups = [g for g in sw["groups"] if g["rows"]]
    fig, axes = plt.subplots(len(groups), len(dtypes), figsize=(6 * len(dtypes), 3.8 * len(groups)), squeeze=False)
    for axrow, g in zip(axes, groups, strict=True):
        for ax, dtype in zip(axrow, dtypes, strict=True):
            rows = [r for r in g["rows"] if r["dtype"] == dtype]
            _sweep_lines(ax, sw, range(len(rows)), rows, categorical=True)
            ax.set_xticks(range(len(rows)), [r["shape"] for r in rows], rotation=20, fontsize=7)
            ax.set_ylabel(sw["unit"])
            ax.set_title(f"{s['kernel'].name} {g['name'] or 'bench shapes'} {dtype} ({sw['gpu']})", fontsize=9)
    axes[0][-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _plot_sizes(plt, s: dict, sw: dict):
    """A kernel without shape families: a panel per dtype, throughput against size (log 2)."""
    dtypes = sorted({r["dtype"] for r in sw["rows"]})
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes, strict=False):
        rows = [r for r in sw["rows"] if r["dtype"] == dtype]  # by size: each shape at its own x, labelled
        _sweep_lines(ax, sw, range(len(rows)), rows, categorical=True)
        ax.set_xticks(range(len(rows)), [r["shape"] for r in rows], rotation=35, ha="right", fontsize=6)
        ax.set_xlabel("shape, by size")
        ax.set_ylabel(sw["unit"])
        ax.set_title(f"{s['kernel'].name} {dtype} ({sw['gpu']})")
        ax.legend(fontsize=7)
    return fig


def _sweep_figures(sections: list[dict]):
    """(path under the root, the data drawn, draw(plt) -> figure) of each sweep plot: one SVG per
    kernel and GPU, throughput against size, a line per revision (with shape families: a panel
    per family)."""
    for s in sections:
        for sw in s["sweeps"]:
            families = any(g["family"] and g["rows"] for g in sw["groups"])
            data = {"kernel": s["kernel"].name, "axis": s["kernel"].sweep_axis, "gpu": sw["gpu"], "unit": sw["unit"],
                    "ceiling": sw["ceiling"], "revisions": list(sw["revisions"]),
                    "rows": [[r["dtype"], r["shape"], r["values"]] for r in sw["rows"]],
                    "groups": [[g["name"], bool(g["family"]), [[r["dtype"], r["shape"]] for r in g["rows"]]]
                               for g in sw["groups"]] if families else None}
            draw = _plot_families if families else _plot_sizes
            yield sw["plot"], data, lambda plt, s=s, sw=sw, draw=draw: draw(plt, s, sw)


def _drawn_from(path: Path) -> str | None:
    """The data digest an SVG kernlog drew carries (in its metadata, near the top), or None."""
    try:
        with path.open("rb") as f:
            found = _DIGEST.search(f.read(8192).decode(errors="replace"))
    except OSError:
        return None
    return found and found.group(1)


def _draw(root: Path, figures, redraw: bool = True) -> list[Path]:
    """Draw each figure; without `redraw`, only those whose file is missing or carries another
    data digest (the same data draws the same bytes: tests/test_log_gate.py redraws one of each
    kind on a fresh clone). The paths drawn."""
    plt = None
    written = []
    for rel, data, draw in figures:
        digest = plot_digest(data)
        if not redraw and _drawn_from(root / rel) == digest:
            continue
        plt = plt or _pyplot()
        _save(plt, draw(plt), root / rel, digest)
        written.append(root / rel)
    return written


def plot_sweeps(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _sweep_figures(sections))


MARKERS = "osD^vP*Xh<>p"


def _roofline(plt, s: dict, lad: dict, rows: list[dict]):
    """Each revision a point (achieved TFLOP/s at its FLOP per DRAM byte), the ladder's steps
    joined by arrows in ladder order, references hollow, under the measured bandwidth slope and
    the compute ceiling."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["roof"]["intensity"] for r in rows]
    bw, peak = rows[0]["roof"]["bandwidth_gbps"], rows[0]["roof"]["peak_tflops"]
    lo, hi = min(xs) / 4, max(max(xs) * 4, (peak * 1e3 / bw * 2) if peak else 0)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof = [min(x * bw / 1e3, peak) if peak else x * bw / 1e3 for x in grid]
    ax.plot(grid, roof, color="black", linewidth=1.5,
            label=f"roof: copy {bw:.0f} GB/s" + (f", {rows[0]['roof']['peak_name']} {peak:.0f} TFLOP/s"
                                                 if peak else ""))
    steps = []
    for i, r in enumerate(rows):
        prof, pt = r["rec"], (r["roof"]["intensity"], r["roof"]["achieved"])
        ref = prof.role == "reference"
        ax.plot(*pt, linestyle="none", marker=MARKERS[i % len(MARKERS)], markersize=8, color=f"C{i % 10}",
                markerfacecolor="none" if ref else f"C{i % 10}",
                label=f"{prof.revision} ({100 * r['roof']['pct_of_roof']:.0f}% of roof)")
        ax.annotate(prof.revision.split("_")[0] if prof.role == "step" else prof.revision, pt,
                    xytext=(6, (-1) ** i * (4 + 3 * (i % 4))), textcoords="offset points", fontsize=6)
        if prof.role == "step":
            steps.append(pt)
    for a, b in zip(steps, steps[1:], strict=False):
        ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "->", "color": "grey", "lw": 0.8})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOP per byte (the op's minimum bytes)")
    ax.set_ylabel("TFLOP/s achieved (wall time)")
    ax.set_title(f"{s['kernel'].name} {lad['shape']} {lad['dtype']} on {lad['gpu']['name']}")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def _roofline_figures(sections: list[dict]):
    """One roofline per ladder whose revisions have an intensity (see _roofline)."""
    for s in sections:
        for lad in s["ladders"]:
            if not lad["roofline"]:
                continue
            rows = [r for r in lad["rows"] if r["roof"]["intensity"] is not None]
            data = {"title": [s["kernel"].name, lad["shape"], lad["dtype"], lad["gpu"]["name"]],
                    "roof": [rows[0]["roof"][k] for k in ("bandwidth_gbps", "peak_tflops", "peak_name")],
                    "points": [[r["rec"].revision, r["rec"].role, r["roof"]["intensity"], r["roof"]["achieved"],
                                r["roof"]["pct_of_roof"]] for r in rows]}
            yield lad["roofline"], data, lambda plt, s=s, lad=lad, rows=rows: _roofline(plt, s, lad, rows)


def plot_rooflines(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _roofline_figures(sections))


def _history(plt, s: dict, lad: dict, hist: dict):
    """Small multiples: one panel per revision, its median time at the kernel's profile shape
    across the commits that stored or profiled it (kernlog history), steps beyond noise ringed."""
    import datetime

    revs = list(hist["revisions"].items())
    cols = min(4, len(revs))
    nrows = -(-len(revs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.3 * nrows + 0.6), squeeze=False)
    for ax in axes.flat[len(revs):]:
        ax.set_visible(False)
    for ax, (rev, points) in zip(axes.flat, revs, strict=False):
        xs = [datetime.datetime.fromisoformat(w) for w, _, _ in points]
        ys = [ms * 1e3 for _, ms, _ in points]
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1, color="C0")
        for x, y, (_, _, step) in zip(xs, ys, points, strict=True):
            if step:
                ax.plot(x, y, marker="o", markersize=9, markerfacecolor="none", color="red")
        ax.set_title(rev, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.set_ylabel("us", fontsize=7)
        for label in ax.get_xticklabels():
            label.set_rotation(30)
    fig.suptitle(f"{s['kernel'].name} {lad['shape']} {lad['dtype']} ({lad['gpu']['name']}): median time per "
                 "commit; red rings: steps beyond noise", fontsize=9)
    return fig


def _history_figures(sections: list[dict]):
    """One history plot per kernel, at its first ladder (see _history)."""
    for s in sections:
        hist = s["ladders"][0].get("history") if s["ladders"] else None
        if not hist:
            continue
        lad = s["ladders"][0]
        data = {"title": [s["kernel"].name, lad["shape"], lad["dtype"], lad["gpu"]["name"]],
                "revisions": hist["revisions"]}
        yield hist["plot"], data, lambda plt, s=s, lad=lad, hist=hist: _history(plt, s, lad, hist)


def plot_histories(root: Path, sections: list[dict]) -> list[Path]:
    return _draw(root, _history_figures(sections))


def _figures(sections: list[dict]):
    yield from arc_figures(sections)
    yield from _sweep_figures(sections)
    yield from _roofline_figures(sections)
    yield from _history_figures(sections)


def stale_plots(root: Path, sections: list[dict]) -> list[str]:
    """Each plot the log links that is missing, or whose digest is not that of the data
    profiles/ and git hold now (drawn from other data, or by an older PLOT_VERSION)."""
    profiles = where.of(root).profiles
    out = []
    for rel, data, _ in _figures(sections):
        path = root / rel
        if not path.exists():
            out.append(f"{rel} is missing")
            continue
        found = _drawn_from(path)
        if found != plot_digest(data):
            out.append(f"{rel} was drawn from other data than {profiles}/ holds"
                       if found else f"{rel} carries no data digest")
    return out


def plot_all(root: Path, sections: list[dict], redraw: bool = False) -> list[Path]:
    """Every plot the log links whose file is missing or drawn from other data (all of them with
    `redraw`); the paths drawn."""
    return _draw(root, _figures(sections), redraw)


def orphans(root: Path, sections: list[dict]) -> list[str]:
    """The SVGs kernlog drew (they carry a data digest) in the reports folder that no page links (no
    figure of the sections draws them). An image of the repository's own there is left alone."""
    linked = {rel for rel, _, _ in _figures(sections)}
    paths = where.of(root)
    return sorted(rel for rel, p in ((paths.under_reports(p.name), p) for p in (root / paths.reports).glob("*.svg"))
                  if rel not in linked and "kernlog-data " in p.read_text(errors="replace"))
