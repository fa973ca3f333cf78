"""Figures in the log's hand-written prose: live values, or dated history, never silent.

A figure in the prose outside the generated blocks is written as a marker that `kernlog
report` fills from the stored profiles:

    v5 reaches <!--fig softmax/v5_tuned@8192x4096.fp32 tbps .2f-->2.88<!--/fig--> TB/s

(KERNEL/REV[@SELECTOR] as diff names a profile; a quantity: us, ms, tbps, gbps, pct_copy,
tflops, pct_roof, speedup:REV (REV's wall time over this one's), share:REGEX (% of the
launch's GPU time in kernels whose names match, from its CUPTI kernel_times), launches
(kernels per launch, from the same), or any metric
of the profile; a format, default .3g). A value drawn from a profile taken on an older source of
its revision carries the stale mark, STALE_MARK, after it. Re-rendering rewrites the value, so `report --check`
fails as soon as a stored figure moves and the prose has not been re-rendered.

A figure that is a record of its time (what a dead end measured, a sweep of an older
commit) sits inside `<!--history DATE COMMIT-->...<!--/history-->`, which says when it was
true. Any other number with a unit in the prose is unsourced: `report --check` names each
and fails.
"""
from __future__ import annotations

import re
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.judge.roofline import place
from kernlog.judge.verdicts import of_copy, rate, stale
from kernlog.store.record import Profile

FIG = re.compile(r"<!--fig (?P<spec>[^>]*?)-->(?P<value>.*?)<!--/fig-->", re.S)
HISTORY = re.compile(r"<!--history (?P<when>[^>]*?)-->.*?<!--/history-->", re.S)
BLOCK = re.compile(r"<!-- kernlog:begin (\S+) -->.*?<!-- kernlog:end \1 -->", re.S)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
# A number followed by a unit a measurement carries (not a shape like 8192x4096: no digit after the x).
FIGURE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:%|x(?![\w\d])|us\b|µs|ms\b|TB/s|GB/s|TFLOP/s|MB\b)")
MAX_LISTED = 8
STALE_MARK = "†"


def quantity(root: Path, prof: Profile, what: str, resolve) -> float:
    m = prof.metrics
    ms = m["wall_ms"]
    r = rate(prof)
    simple = {"us": r["us"], "ms": ms, "tbps": r["gbps"] / 1e3, "gbps": r["gbps"], "tflops": r.get("tflops")}
    if what in simple:
        value = simple[what]
    elif what == "pct_copy":  # the log's one % of copy: over a same-size copy timed in the sweep
        value = of_copy(r["gbps"], same_size_copy(root, prof))
    elif what == "pct_roof":
        from kernlog.registry import load_kernel

        pct = place(prof, load_kernel(root, prof.kernel))["pct_of_roof"]
        value = None if pct is None else 100 * pct
    elif what.startswith("speedup:"):
        value = resolve(what.split(":", 1)[1]).metrics["wall_ms"] / ms
    elif what == "launches":  # kernels one launch runs, from its CUPTI kernel_times
        value = (prof.kernel_times or {}).get("launches")
    elif what.startswith("share:"):  # % of the launch's GPU time in kernels whose names match a regex
        kt = prof.kernel_times or {}
        pattern = re.compile(what.split(":", 1)[1], re.I)
        value = (100.0 * sum(k["us"] for k in kt["kernels"] if pattern.search(k["name"])) / kt["total_us"]
                 if kt.get("total_us") else None)
    else:
        value = m.get(what)
    if value is None:
        raise KernlogError(f"the figure {what!r} of {prof.kernel}/{prof.revision} is not in its profile")
    return value


def same_size_copy(root: Path, prof: Profile) -> float | None:
    """The copy GB/s bench.csv timed at the profile's shape and dtype on its GPU, if any."""
    from kernlog.spec import COPY, format_shape
    from kernlog.store import profiles as store
    from kernlog.store.keys import bench_csv

    path = bench_csv(root, prof.gpu.slug, prof.kernel)
    if not path.exists():
        return None
    df = store.read_bench(root, path)
    hit = df[(df["revision"] == COPY) & (df["metric"] == "gbps") & (df["dtype"] == prof.dtype)
             & (df["shape"] == format_shape(tuple(prof.shape)))]
    return float(hit["value"].iloc[0]) if len(hit) else None


def fill(root: Path, text: str, missing: str | None = None) -> str:
    """`text` with every figure marker's value rendered from the stored profiles; a marker
    that names no profile or quantity is an error naming it, unless `missing` is given: then
    it renders as that text, its marker dropped (an author's note beside a revision, whose
    kernel folder may travel to a repository that has not stored every profile it cites)."""
    from kernlog.registry import load_kernel
    from kernlog.store.lookup import parse_side, resolve_one

    sources: dict = {}

    def is_stale(prof) -> bool:
        if prof.kernel not in sources:
            sources[prof.kernel] = {r.name: r.sha256() for r in load_kernel(root, prof.kernel).revisions}
        return stale(prof.source_sha256, sources[prof.kernel], prof.revision)

    def sub(match):
        spec = match.group("spec").split()
        if len(spec) not in (2, 3):
            raise KernlogError(f"figure marker <!--fig {match.group('spec')}-->: expected KERNEL/REV[@SELECTOR] "
                               "QUANTITY [FORMAT]")
        side = parse_side(spec[0])
        sel = spec[0].partition("@")[2]

        def other(rev):
            return resolve_one(root, parse_side(f"{side.kernel}/{rev}" + (f"@{sel}" if sel else "")))

        try:
            prof = resolve_one(root, side)
            value = format(quantity(root, prof, spec[1], other), spec[2] if len(spec) == 3 else ".3g")
        except KernlogError:
            if missing is None:
                raise
            return missing
        return f"<!--fig {match.group('spec')}-->{value}{STALE_MARK if is_stale(prof) else ''}<!--/fig-->"

    return FIG.sub(sub, text)


def unsourced(text: str) -> list[tuple[int, str]]:
    """(line, figure) of every measured-looking figure in the prose that is neither a marker's
    value nor inside a dated history region (generated blocks and code are not prose)."""
    def blank(m):  # keep the line count
        return re.sub(r"[^\n]", " ", m.group(0))

    for pattern in (BLOCK, HISTORY, FIG, CODE):
        text = pattern.sub(blank, text)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in FIGURE.finditer(text)]


def check(text: str) -> None:
    """Raise naming the unsourced figures of the prose, if any."""
    found = unsourced(text)
    if found:
        listed = "; ".join(f"line {n}: {fig!r}" for n, fig in found[:MAX_LISTED])
        more = f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
        raise KernlogError(f"{len(found)} figure(s) in the log's prose come from no profile: {listed}{more}; "
                           "write each as <!--fig KERNEL/REV QUANTITY-->value<!--/fig--> or inside a dated "
                           "<!--history DATE COMMIT-->...<!--/history--> region (README: Prose)")
