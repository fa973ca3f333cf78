"""The arc chart each kernel page opens with: time per revision of a ladder, steps as a line in
ladder order, references as horizontal lines (kernlog.render.plots draws and digests it)."""
from __future__ import annotations


def _arc(plt, s: dict, lad: dict):
    rows = lad["arc_rows"]
    steps = [r for r in rows if r["role"] != "reference"]
    refs = [r for r in rows if r["role"] == "reference"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = list(range(len(steps)))
    ax.plot(xs, [r["us"] for r in steps], marker="o", color="C0", linewidth=1.5, label="steps")
    for x, r in zip(xs, steps, strict=True):
        if r["verdict"] and r["verdict"].startswith("same kernel"):
            ax.plot(x, r["us"], marker="o", markerfacecolor="white", color="C0", linestyle="none")
    for i, r in enumerate(refs):
        ax.axhline(r["us"], color=f"C{i + 1}", linestyle=("--", ":", "-.")[i % 3], linewidth=1,
                   label=f"{r['revision']} {r['us']:.1f} us")
    floor = ceiling_us(lad)
    if floor is not None:
        ceiling = "cuBLAS rate" if lad.get("matmul") else "copy"
        ax.axhline(floor, color="black", linestyle="-", linewidth=0.8,
                   label=f"roofline {floor:.1f} us (the GPU's measured {ceiling})")
    ax.set_xticks(xs, [r["revision"] + ("†" if r["stale"] else "") for r in steps], rotation=30, ha="right",
                  fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median time (us, log)")
    ax.set_title(f"{s['kernel'].name} {lad['shape']} {lad['dtype']} ({lad['gpu']['name']}); hollow: same kernel "
                 "as the step before", fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    return fig


def ceiling_us(lad: dict) -> float | None:
    """The time the ladder's shape takes at its roofline (the GPU's stored copy bandwidth, or
    its cuBLAS rate for a matmul, at the op's minimum bytes and FLOPs): a step's time times its
    % of roofline, the same for every step of one shape."""
    for r in lad["arc_rows"]:
        if r["roof"] is not None and r["role"] == "step":
            return r["us"] * r["roof"] / 100.0
    return None


def arc_figures(sections: list[dict]):
    """(path, data, draw) of each arc chart: one per arc a kernel page shows."""
    for s in sections:
        for lad in s.get("arcs", []):
            lad["matmul"] = s["kernel"].ceiling == "matmul"
            floor = ceiling_us(lad)
            data = {"title": [s["kernel"].name, lad["shape"], lad["dtype"], lad["gpu"]["name"]],
                    "ceiling_us": None if floor is None else round(floor, 6),
                    "rows": [[r["revision"], r["role"], round(r["us"], 6), r["verdict"], r["stale"]]
                             for r in lad["arc_rows"]]}
            yield lad["arc_plot"], data, lambda plt, s=s, lad=lad: _arc(plt, s, lad)
