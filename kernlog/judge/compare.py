"""`kernlog compare BASE [HEAD]`: every profile stored at two refs, paired and judged; the CI gate.

BASE is a git ref; HEAD a ref too, or, left out, the work tree's profiles/. Profiles pair by
GPU, kernel, revision, shape and dtype; each pair's wall time is judged as `kernlog diff`
judges it (Mann-Whitney on the stored samples, the GPU's noise band). A pair is a
regression when it is slower beyond the band (p < ALPHA) by more than the threshold.
Profiles only one side has are listed, never failed. A pair whose GPU, driver or ncu differ
is refused (listed, not judged) unless asked for, and then the header says so.

Nothing to compare is never a pass: where neither side stores a profile, so that no row at all
is listed (no pair, nothing only one side has), the comparison is empty and exits 2 unless
`allow_empty`. A side with profiles the other lacks is not empty: a branch that adds the first
profiles lists them "only in HEAD" and passes.

Exit status: 0 no regression; 1 at least one; 2 bad input (an unknown ref, a profile that
fails verification at either side) or nothing to compare (unless allow_empty).
"""
from __future__ import annotations

from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.judge.bands import bands_for
from kernlog.judge.plausible import achieved_gbps
from kernlog.judge.verdicts import ALPHA, regression, timing_verdict
from kernlog.spec import format_shape
from kernlog.store import gitrefs
from kernlog.store import profiles as store
from kernlog.store.integrity import notes_of
from kernlog.store.record import Profile

THRESHOLD = 0.03  # and beyond the band: see the README (two H100 leases moved unchanged references by 2.5%)


def _key(prof: Profile) -> tuple:
    return prof.gpu.slug, prof.kernel, prof.revision, format_shape(tuple(prof.shape)), prof.dtype


def at_ref(root: Path, ref: str) -> tuple[str, dict]:
    """(commit, {key: profile}) of the profiles `ref` stored."""
    commit = gitrefs.resolve(root, ref)
    return commit, {_key(rec): rec for rec in gitrefs.profiles_at(root, commit)}


def in_tree(root: Path) -> dict:
    out, bad = {}, []
    for rec in store.iter_profiles(root, bad="yield"):
        if isinstance(rec, store.ProfileError):
            bad.append(rec)
        else:
            out[_key(rec)] = rec
    if bad:
        raise bad[0]
    return out


def _setup(prof: Profile) -> tuple:
    return prof.gpu.name, prof.gpu.driver, prof.versions.get("ncu")


def compare(root: Path, base: str, head: str | None = None, threshold: float = THRESHOLD,
            allow_different_setup: bool = False, tree: dict | None = None) -> dict:
    """`tree`: the work tree's profiles (in_tree) where already loaded, for HEAD None."""
    base_commit, a = at_ref(root, base)
    head_commit, b = at_ref(root, head) if head else (None, tree if tree is not None else in_tree(root))
    rows = []
    for key in sorted(set(a) | set(b)):
        ra, rb = a.get(key), b.get(key)
        row = {"gpu": key[0], "kernel": key[1], "revision": key[2], "shape": key[3], "dtype": key[4],
               "base_ms": ra and ra.timing.median_ms, "head_ms": rb and rb.timing.median_ms,
               "ratio": None, "p_value": None, "band": None, "judgement": None, "regression": False,
               "source_changed": bool(ra and rb and ra.source_sha256 != rb.source_sha256),
               "head_gbps": rb and achieved_gbps(rb)}
        if ra is None or rb is None:
            row["judgement"] = "only in HEAD" if ra is None else "only in BASE"
        elif _setup(ra) != _setup(rb) and not allow_different_setup:
            row["judgement"] = "refused: " + ", ".join(
                f"{what} {x} -> {y}" for what, x, y in zip(("GPU", "driver", "ncu"), _setup(ra), _setup(rb),
                                                           strict=True) if x != y)
        else:
            band = bands_for(root, ra, rb)("wall_ms")
            v = timing_verdict(ra.timing.samples_ms, rb.timing.samples_ms, band)
            row.update(ratio=v.ratio, p_value=v.p_value, band=v.band, judgement=v.verdict,
                       regression=regression(v, threshold))
        rows.append(row)
    return {"base": base, "base_commit": base_commit, "head": head or "work tree", "head_commit": head_commit,
            "threshold": threshold, "alpha": ALPHA, "allow_different_setup": allow_different_setup,
            "regressions": sum(r["regression"] for r in rows), "rows": rows,
            "nothing_to_compare": None if rows else empty_reason(base, head)}


def empty_reason(base: str, head: str | None) -> str:
    """Why a comparison with no row has nothing in it: neither side stores a profile."""
    return f"no profiles at {base} nor " + (f"at {head}" if head else "in the work tree")


EMPTY_HINT = "profile on a GPU machine: kernlog profile KERNEL; or pass --allow-empty to let an empty comparison pass"


def run(root: Path, base: str, head: str | None, threshold: float, allow: bool,
        allow_empty: bool = False) -> tuple[dict, int, list[str]]:
    """(the comparison, the exit status: 1 where a row regressed, else 0, and where HEAD is the
    work tree, a line for each of its reports lost or damaged (integrity.notes_of)); kernlog.render.compare
    writes it out. An empty comparison (no profile at either side) raises KernlogError (exit 2),
    one line naming what to do, unless `allow_empty`: then it passes, and the table's note says so."""
    tree = in_tree(root) if head is None else None  # loaded once: compared, then its reports glanced at
    c = compare(root, base, head, threshold, allow, tree)
    if c["nothing_to_compare"] and not allow_empty:
        raise KernlogError(f"nothing to compare: {c['nothing_to_compare']} ({EMPTY_HINT})")
    return c, 1 if c["regressions"] else 0, notes_of(root, list(tree.values())) if tree is not None else []
