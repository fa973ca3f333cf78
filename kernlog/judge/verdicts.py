"""Every judgement kernlog makes, in one pure module: no file or git I/O, nothing of kernlog but
the metric catalogue.

Wall time is judged from the stored samples: a Mann-Whitney U test and the noise band, so a
move must be both significant and larger than run-to-run noise (`timing_verdict`). Every other
metric is judged against its band (`judge`): inside it "same", outside it better or worse by
the metric's good direction, "changed" where no direction is good in itself (occupancy, launch
configuration) or where the direction needs an amount that moved (a rate with more bytes, a
stall per instruction with fewer instructions).

Noise bands: how far a metric moves between two profiles of the same code on one GPU.
`kernlog noise` measures it (A/A: the same revisions timed and profiled several times,
interleaved, each time in fresh processes as `kernlog profile` would) and stores one
calibration per revision (kernlog.store.calibrations). A change is "same" while
|b - a| <= rel * max(|a|, |b|) + abs.

From a calibration's runs (`band_of_runs`): the runs are grouped by launch configuration (a
launcher that picks by timing may pick differently from run to run; a different config is a
change, not noise); within each group of two or more runs, sigma = range / d2(n) (the expected
range of n normal draws is d2(n) sigma); the band is 2.576 * sqrt(2) * the largest sigma: 99%
of the differences between two runs of one config fall inside it. For times, rates and
utilisations the band is never under FLOOR: every device call may land on another board, which
runs inside one call cannot see (on the H100, an A/A of softmax v0_naive across two leases
moved 1.4% where its four same-lease runs spanned 0.6%).

Without a calibration for the GPU, DEFAULT_BANDS apply, per metric kind (see
kernlog.metrics): time and rates 3.5%, the 90th percentile of run-to-run spread measured on
the H100 (shared/GPU.md: 0.7% median, 2-3.5% p90 over 26 cells); amounts 1%; stalls 10% or
0.05 cycles per instruction; utilisations 3.5% or half a point; hit rates 2% or half a point;
launch configuration exactly.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kernlog.metrics import metric

MIN_SAMPLES = 8  # below this a rank test cannot reach ALPHA; no verdict
ALPHA = 0.01
JUDGEMENTS = ("better", "worse", "same", "changed", "not collected")
VERDICT_ROW = {"faster": "better", "slower": "worse", "same": "same"}
STEPS = ("faster", "slower")  # the timing verdicts that are a step beyond noise

Z99 = 2.576  # two-sided 99%
D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
FLOOR = {"time": 0.02, "rate": 0.02, "util": 0.02}  # a calibrated band is never narrower (see above)
DEFAULT_BANDS = {
    "time": (0.035, 0.0), "rate": (0.035, 0.0), "amount": (0.01, 0.0), "util": (0.035, 0.5),
    "stall": (0.10, 0.05), "ratio": (0.02, 0.5), "config": (0.0, 0.0),
}

# The log's bar on the share of the copy (issue 20): where the tensor holds 64 MB or more, at
# least 90% of the same run's copy.
COPY_BAR, COPY_BAR_BYTES = 0.90, 64e6


# --- bands -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Band:
    rel: float
    abs: float
    source: str  # "default (time)", "calibrated: nvidia-h100-80gb-hbm3, 3 revisions x 5 runs"

    def holds(self, a: float, b: float) -> bool:
        return abs(b - a) <= self.rel * max(abs(a), abs(b)) + self.abs + 1e-12

    def as_dict(self) -> dict:
        return {"rel": round(self.rel, 6), "abs": self.abs, "source": self.source}


def default_band(key: str) -> Band:
    kind = metric(key).kind
    rel, ab = DEFAULT_BANDS[kind]
    return Band(rel, ab, f"default ({kind})")


def config_of(run: dict) -> tuple:
    """The launch configuration a run's metrics show (block, grid, registers, shared memory...)."""
    return tuple(sorted((k, v) for k, v in run.items() if metric(k).kind == "config"))


def band_of_runs(runs: list[dict]) -> dict[str, dict]:
    """A calibration's statistic, per metric over the runs' values, within groups of one launch
    configuration: median, max - min, (max - min) / |median| and sigma / |median| (range /
    d2(n)), each the widest of the groups of two or more runs; `n` counts the runs those groups
    hold, `configs` the groups."""
    groups: dict = {}
    for r in runs:
        groups.setdefault(config_of(r), []).append(r)
    out: dict = {}
    for group in groups.values():
        for key in sorted({k for r in group for k in r}):
            vals = [r.get(key) for r in group]
            vals = [v for v in vals if v is not None and math.isfinite(v)]
            if len(vals) < 2:
                continue
            med = statistics.median(vals)
            width = max(vals) - min(vals)
            rel = width / abs(med) if med else (0.0 if width == 0 else None)
            sigma = None if rel is None else rel / D2.get(len(vals), 3.078)
            prev = out.get(key)
            if prev is None or (sigma or 0) > (prev["sigma_rel"] or 0):
                out[key] = {"median": med, "abs": width, "rel": rel, "sigma_rel": sigma, "n": len(vals),
                            "configs": len(groups)}
    return out


class Bands:
    """The band of each metric for one comparison: the widest that any calibration of the GPU
    both sides ran on gives (a few runs of one revision estimate its spread loosely, so no
    revision's own calibration narrows the band); defaults where none applies. Each
    calibration carries its runs' statistic under "spread" (band_of_runs)."""

    def __init__(self, calibrations: list[dict], gpu: str | None):
        self.gpu = gpu
        self.cals = calibrations
        names = sorted(f"{c['kernel']}/{c['revision']}" for c in calibrations)
        self.what = f"calibrated on {gpu}: {', '.join(names)}" if calibrations else None
        self._cache: dict[str, Band] = {}

    def __call__(self, key: str) -> Band:
        if key not in self._cache:
            self._cache[key] = self._band(key)
        return self._cache[key]

    def _band(self, key: str) -> Band:
        base = default_band(key)
        kind = metric(key).kind
        sigmas = []
        for c in self.cals:
            s = c["spread"].get(key)
            # A value near zero (a stall of 0.01 cycles) says nothing about relative spread.
            if s and s.get("sigma_rel") is not None and abs(s["median"]) > 10 * base.abs:
                sigmas.append(s["sigma_rel"])
        if not sigmas:
            return base
        rel = max(Z99 * math.sqrt(2) * max(sigmas), FLOOR.get(kind, 0.0))
        return Band(rel, base.abs, self.what)

    def describe(self) -> str:
        return self.what or "default bands (no noise calibration for this GPU; `kernlog noise` measures one)"


# --- ratios against a bound ----------------------------------------------------------------------

def at_least(value: float, bound: float, band: float = 0.0) -> bool:
    """`value` meets a lower `bound`, a shortfall inside the relative `band` a tie."""
    return value >= bound * (1 - band)


def at_most(value: float, bound: float, band: float = 0.0) -> bool:
    """`value` meets an upper `bound`, an excess inside the relative `band` a tie."""
    return value <= bound * (1 + band)


def apart(a: float, b: float, band: float) -> bool:
    """Two readings (clocks) further apart than the relative `band` of the larger."""
    return abs(b - a) > band * max(a, b)


def throttled(summary: dict, band: float | None = None) -> str:
    """One line where a timing pass's median SM clock lies more than `band` (default: the default
    wall-time band) under the GPU's highest (it throttled: a ratio to a profile timed at full clock
    is then partly the clock), else ""."""
    band = DEFAULT_BANDS["time"][0] if band is None else band
    median = (summary.get("sm_mhz") or {}).get("median")
    top = summary.get("sm_max_mhz")
    if not median or not top or median >= top * (1 - band):
        return ""
    return (f"timed at an SM clock of {median:.0f} MHz, {100 * (1 - median / top):.0f}% under this GPU's "
            f"{top:.0f}: it throttled, so a ratio to a profile timed at full clock is partly the clock "
            "(a sweep's interleaved runs judge it; --force times it again)")


# --- wall time -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    verdict: str  # faster / slower / same / inconclusive / too few samples
    ratio: float | None  # median(b) / median(a), per element where the shapes differ
    p_value: float | None  # two-sided Mann-Whitney U
    band: float
    band_source: str
    n_a: int
    n_b: int
    reason: str = ""

    @property
    def step(self) -> bool:
        """Faster or slower beyond noise."""
        return self.verdict in STEPS

    def line(self) -> str:
        if self.verdict == "too few samples":
            return f"wall time: too few samples (n={self.n_a} vs {self.n_b}; at least {MIN_SAMPLES} each): no verdict"
        p = f"p={self.p_value:.2g}" if self.p_value is not None else "p n/a"
        return (f"wall time: {self.verdict.upper()}: median ratio {self.ratio:.3f} ({p}, band +-{100 * self.band:.1f}%"
                f" {self.band_source}, {self.n_a} vs {self.n_b} samples){'; ' + self.reason if self.reason else ''}")


def rank_test(x: list[float], y: list[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test, normal approximation with tie and
    continuity corrections (sound from about 8 samples a side): scipy.stats.mannwhitneyu's
    method="asymptotic", use_continuity=True, to 1e-13 relative on the stored samples, without
    importing scipy.stats (1.3 s of CPU, most of a `kernlog diff`). Samples all equal (no spread
    to rank) give 1."""
    if len(set(x) | set(y)) < 2:
        return 1.0
    n1, n2 = len(x), len(y)
    n = n1 + n2
    pooled = sorted([(v, True) for v in x] + [(v, False) for v in y])
    r1 = ties = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        t = j - i + 1
        ties += t ** 3 - t
        r1 += (i + j + 2) / 2 * sum(1 for k in range(i, j + 1) if pooled[k][1])  # mean rank of the tie
        i = j + 1
    u1 = r1 - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    z = (u - n1 * n2 / 2 - 0.5) / sd
    return min(1.0, math.erfc(z / math.sqrt(2)))  # twice the normal survival function at z


def timing_verdict(a: list[float], b: list[float], band: float | Band = 0.035, scale_b: float = 1.0) -> Verdict:
    """b against a: faster or slower when the rank test says the samples differ (p < ALPHA)
    and the ratio of medians lies outside the band; same inside the band; inconclusive when
    outside it but not significant. `scale_b` rescales b's samples (per element across shapes)."""
    b_band = band if isinstance(band, Band) else Band(band, 0.0, "given")
    xa = [v for v in a if v is not None and math.isfinite(v)]
    xb = [v * scale_b for v in b if v is not None and math.isfinite(v)]
    if len(xa) < MIN_SAMPLES or len(xb) < MIN_SAMPLES:
        return Verdict("too few samples", None, None, b_band.rel, b_band.source, len(xa), len(xb))
    ratio = float(statistics.median(xb) / statistics.median(xa))
    p = rank_test(xa, xb)
    if abs(ratio - 1) <= b_band.rel:
        verdict, reason = "same", ""
    elif p < ALPHA:
        verdict, reason = ("faster" if ratio < 1 else "slower"), ""
    else:
        verdict, reason = "inconclusive", f"outside the band but not significant (p >= {ALPHA})"
    return Verdict(verdict, ratio, p, b_band.rel, b_band.source, len(xa), len(xb), reason)


def regression(v: Verdict, threshold: float) -> bool:
    """A regression for `kernlog compare`: slower beyond noise, and by more than `threshold`."""
    return v.verdict == "slower" and v.ratio - 1 > threshold


# --- one metric ----------------------------------------------------------------------------------

def judge(m, a, b, band: Band | None = None, given_same: bool = True) -> str:
    """One metric's judgement (see the module docstring)."""
    if a is None or b is None:
        return "not collected"
    band = band or default_band(m.key)
    if band.holds(a, b):
        return "same"
    if m.better is None or not given_same:
        return "changed"
    return "better" if (b < a) == (m.better == "lower") else "worse"


# --- facts of one profile ------------------------------------------------------------------------

def stale(source_sha256, current: dict, revision: str) -> bool:
    """A figure measured on a source of `revision` other than today's (`current`: revision ->
    source hash). A revision no longer in the kernel, or a record without a hash, is not
    judged."""
    return revision in current and isinstance(source_sha256, str) and source_sha256 != current[revision]


def rate(prof) -> dict:
    """A profile's rates (a kernlog.store.record.Profile: this module imports no store): time in us,
    achieved GB/s (the bytes the operator must move over the median wall time) and its % of the
    GPU's copy; TFLOP/s and % of the matmul ceiling where the kernel has a FLOP model."""
    ms = prof.metrics["wall_ms"]
    gbps = prof.bytes_moved / ms / 1e6
    copy, matmul = prof.ceilings["copy_gbps"], prof.ceilings["matmul_bf16_tflops"]  # null: not measured
    out = {"us": ms * 1e3, "gbps": gbps, "pct_copy": 100.0 * gbps / copy if copy else None}
    if prof.flops:
        out["tflops"] = prof.flops / ms / 1e9
        out["pct_matmul"] = 100.0 * out["tflops"] / matmul if matmul else None
    return out


# --- the log's single definitions (issue 38) -------------------------------------------------------

# Below this median time a launch is launch-bound: the log judges it in time, not in GB/s or % of
# a ceiling (at 1x4096 a copy's own rate is a few % of the 2 GiB copy's).
LAUNCH_BOUND_US = 10.0
# A hot source line is shown where it holds this many warp samples or more (fewer say nothing
# about where the time goes: a 1-2 sample line is a coin toss).
HOT_MIN_SAMPLES = 50
# Two profiles ran the same compiled kernel and launch when their longest kernel's name and launch
# configuration are equal and their executed instructions within this fraction (a persistent
# kernel's tile order moves the count by ~0.03%: matmul v1 and v2, measured).
SAME_INSTRUCTIONS = 0.001


def launch_bound(us: float | None) -> bool:
    return us is not None and us < LAUNCH_BOUND_US


def same_kernel(a, b) -> bool:
    """`b` ran the compiled kernel and launch configuration `a` ran (kernlog.store.record.Profile's)."""
    ka, kb = (p.facts.get("main_kernel") for p in (a, b))
    if not ka or ka != kb or config_of(a.metrics) != config_of(b.metrics):
        return False
    ia, ib = a.metrics.get("instructions"), b.metrics.get("instructions")
    return ia is not None and ib is not None and abs(ia - ib) <= SAME_INSTRUCTIONS * max(abs(ia), abs(ib))


def of_copy(op_rate: float | None, copy_rate: float | None) -> float | None:
    """The one "% of copy": the op's minimum bytes per second over a same-size copy timed in the
    same run (bench.csv's copy column); None where no such copy was timed."""
    return 100.0 * op_rate / copy_rate if op_rate is not None and copy_rate else None


def excess_traffic(dram_bytes: float | None, min_bytes: float | None) -> float | None:
    """Measured DRAM bytes over the op's minimum: 1.0 moves nothing extra."""
    return dram_bytes / min_bytes if dram_bytes and min_bytes else None
