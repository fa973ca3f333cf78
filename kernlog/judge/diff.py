"""`kernlog diff`: what moved between two stored profiles, and whether it is real.

Every metric is judged against its noise band, and wall time by a rank test on the stored
samples and the band, as kernlog.judge.verdicts judges them: a move must be both significant
and larger than run-to-run noise.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kernlog.judge import hotlines
from kernlog.judge.bands import bands_for
from kernlog.judge.plausible import impossible
from kernlog.judge.verdicts import VERDICT_ROW, Band, Bands, Verdict, apart, judge, timing_verdict
from kernlog.metrics import CATALOG, metric
from kernlog.spec import format_shape
from kernlog.store.lookup import resolve_pair
from kernlog.store.record import Profile


@dataclass(frozen=True)
class Row:
    metric: str
    label: str
    unit: str
    kind: str
    a: float | None
    b: float | None
    delta: float | None
    ratio: float | None
    judgement: str
    band: dict
    per: str = "run"  # "element" where the shapes differ and the metric scales with size
    share_a: float | None = None  # stalls: share of all stall cycles, %
    share_b: float | None = None


ELEMENT_UNITS = {"ms": ("ps/elem", 1e9), "us": ("ps/elem", 1e6), "MB": ("B/elem", 1e6), "M": ("/elem", 1e6),
                 "": ("/elem", 1.0)}


def numel(shape) -> int:
    return math.prod(int(n) for n in shape)


def _stall_shares(values: dict) -> dict[str, float]:
    stalls = {k: v for k, v in values.items() if k.startswith("stall_") and v is not None}
    total = sum(stalls.values())
    return {k: 100.0 * v / total for k, v in stalls.items()} if total > 0 else {}


def metric_rows(a: dict, b: dict, bands: Bands | None = None, shape_a=None, shape_b=None,
                timing: Verdict | None = None) -> list[Row]:
    """Rows for the catalog's metrics and every stall either side has. Where the two shapes
    differ, times and amounts are compared per element."""
    bands = bands or Bands([], None)
    per_elem = shape_a is not None and shape_b is not None and tuple(shape_a) != tuple(shape_b)
    keys = [m.key for m in CATALOG] + sorted({k for k in (*a, *b) if k.startswith("stall_")})
    sa, sb = _stall_shares(a), _stall_shares(b)
    rows = []
    for key in keys:
        m = metric(key)
        va, vb = a.get(key), b.get(key)
        unit, per = m.unit, "run"
        if per_elem and m.kind in ("time", "amount"):
            unit, f = ELEMENT_UNITS.get(m.unit, (m.unit + "/elem", 1.0))
            va = None if va is None else va * f / numel(shape_a)
            vb = None if vb is None else vb * f / numel(shape_b)
            per = "element"
        band = bands(key)
        given_same = True
        if m.given:
            ga, gb = a.get(m.given), b.get(m.given)
            given_same = ga is not None and gb is not None and bands(m.given).holds(
                ga / (numel(shape_a) if per_elem else 1), gb / (numel(shape_b) if per_elem else 1))
        judgement = judge(m, va, vb, band, given_same)
        if key == "wall_ms" and timing is not None and va is not None and vb is not None:
            judgement = VERDICT_ROW.get(timing.verdict, timing.verdict)  # the row always agrees
            band = Band(timing.band, 0.0, timing.band_source)
        delta = None if va is None or vb is None else vb - va
        ratio = None if delta is None or va == 0 else vb / va
        rows.append(Row(key, m.label, unit, m.kind, va, vb, delta, ratio, judgement, band.as_dict(), per,
                        sa.get(key) if m.kind == "stall" else None, sb.get(key) if m.kind == "stall" else None))
    return rows


def finding_changes(a: list[dict], b: list[dict]) -> tuple[list[dict], list[dict]]:
    ka = {(f["rule"], f["title"]) for f in a}
    kb = {(f["rule"], f["title"]) for f in b}
    return ([f for f in b if (f["rule"], f["title"]) not in ka],
            [f for f in a if (f["rule"], f["title"]) not in kb])


def side(prof: Profile) -> dict:
    clocks = prof.timing.clocks
    stored_in = prof.commit  # read from git: the side is the profile as that commit stored it
    return {"label": (f"{stored_in[:10]}:" if stored_in else "") + f"{prof.kernel}/{prof.revision}",
            "kernel": prof.kernel, "revision": prof.revision, "stored_in": stored_in,
            "gpu_choice": prof.gpu_choice, "_skipped": prof.skipped,
            "shape": list(prof.shape), "dtype": prof.dtype, "gpu": prof.gpu.name,
            "gpu_slug": prof.gpu.slug, "driver": prof.gpu.driver,
            "commit": prof.git.get("commit"), "path": prof.path,
            "selector": prof.key.text(), "sm_mhz": (clocks.get("sm_mhz") or {}).get("median"),
            "mem_mhz": (clocks.get("mem_mhz") or {}).get("median"), "config": prof.config}


def differences(sa: dict, sb: dict, clock_band: float) -> tuple[list[str], list[str]]:
    """(what differs between the sides, warnings about it)."""
    diffs, warns = [], []
    for key, name in (("kernel", "kernel"), ("shape", "shape"), ("dtype", "dtype"), ("gpu", "GPU"),
                      ("driver", "driver")):
        va, vb = sa[key], sb[key]
        if key == "driver" and "unknown" in (va, vb):  # an imported report records none
            continue
        if va != vb:
            show = (lambda v: format_shape(tuple(v))) if key == "shape" else str
            diffs.append(f"{name} {show(va)} vs {show(vb)}")
    if sa.get("config") and sb.get("config") and sa["config"] != sb["config"]:
        changed = sorted(k for k in {**sa["config"], **sb["config"]} if sa["config"].get(k) != sb["config"].get(k))
        diffs.append("tuned config " + "; ".join(f"{k}: {sa['config'].get(k)} vs {sb['config'].get(k)}"
                                                 for k in changed))
        if sa["revision"] == sb["revision"]:
            warns.append("the same revision picked another config: its metrics moved with the config, not noise")
    if sa["kernel"] != sb["kernel"]:
        warns.append("the two sides are different kernels: they compute different things")
    if sa["shape"] != sb["shape"]:
        warns.append("shapes differ: times and amounts are compared per element")
    if sa["gpu"] != sb["gpu"]:
        warns.append("different GPUs: timings compare the hardware as much as the code; default noise bands apply")
    for key, name in (("sm_mhz", "SM clock"), ("mem_mhz", "memory clock")):
        va, vb = sa[key], sb[key]
        if va and vb and apart(va, vb, clock_band):
            diffs.append(f"{name} {va:.0f} vs {vb:.0f} MHz")
            warns.append(f"the sides ran at {name}s {va:.0f} and {vb:.0f} MHz, {100 * abs(vb / va - 1):.1f}% apart "
                         f"(band {100 * clock_band:.1f}%): part of any timing change is the clock")
    return diffs, warns


def diff(a: Profile, b: Profile, bands: Bands | None = None, retimed: dict | None = None) -> dict:
    """The comparison of profile records a and b as a plain dict (the JSON output).
    `retimed`: {"a": samples, "b": samples, ...} from an interleaved re-timing, judged
    instead of the stored samples."""
    bands = bands or Bands([], None)
    sa, sb = side(a), side(b)
    time_band = bands("wall_ms")
    scale = numel(a.shape) / numel(b.shape)
    samples_a = retimed["a"] if retimed else a.timing.samples_ms
    samples_b = retimed["b"] if retimed else b.timing.samples_ms
    verdict = timing_verdict(samples_a, samples_b, time_band, scale_b=scale)
    ma, mb = dict(a.metrics), dict(b.metrics)
    if retimed:
        import statistics

        ma["wall_ms"], mb["wall_ms"] = statistics.median(samples_a), statistics.median(samples_b)
    rows = metric_rows(ma, mb, bands, a.shape, b.shape, verdict)
    appeared, gone = finding_changes(a.findings, b.findings)
    diffs, warns = differences(sa, sb, time_band.rel)
    warns += [f"{x}: its source changed since it was profiled; the re-timing ran today's source"
              for x in (retimed or {}).get("stale", [])]
    warns += [f"{s['label']} is an imported ncu report: its wall time is ncu's duration of one launch"
              for s, prof in ((sa, a), (sb, b)) if prof.timing.source == "ncu duration" and not retimed]
    flags = impossible(a, bands("dram_gbps").rel) + impossible(b, bands("dram_gbps").rel)
    return {"a": sa, "b": sb, "differs": diffs, "bands": bands.describe(),
            "timing": dict(asdict(verdict), source="interleaved re-timing" if retimed else "stored samples",
                           **({k: retimed.get(k) for k in ("rounds", "round_ratios", "clocks")} if retimed else {})),
            "rows": [asdict(r) for r in rows], "findings_appeared": appeared, "findings_gone": gone,
            "hot_lines": hotlines.moved(a.hotspots, b.hotspots),
            "warnings": warns, "flags": flags}


def run(root, side_a, side_b, retimed=None) -> dict:
    """`kernlog diff` of stored profiles: resolve both sides, take the noise bands for them, and
    compare (on samples re-timed by the caller where `retimed(a, b)` is given: capture.retime)."""
    a, b = resolve_pair(root, side_a, side_b)
    return diff(a, b, bands_for(root, a, b), retimed(a, b) if retimed else None)
