"""Hand mutants of kernlog: mistakes of the kinds that matter (a flipped comparison, the wrong
field, a dropped condition, an off-by-one, a wrong default), each applied alone to a copy of the
repository and run against the tests that should catch it.

    .venv/bin/python scripts/mutants.py              # every mutant, two at a time (about 11 minutes)
    .venv/bin/python scripts/mutants.py --list       # the mutants, and whether each still applies
    .venv/bin/python scripts/mutants.py -k gate -j 1 # those whose id contains "gate", one at a time

The repository itself is never touched: the files git tracks or would track (`git ls-files -co
--exclude-standard`) are copied to a temporary folder, one copy per job, and each mutant is written
into its copy, run, then undone. Each copy's tests import its own kernlog (PYTHONPATH, no bytecode
written, so an undone mutant never runs from a stale .pyc). The tests that fail without any mutant
(the baseline) are deselected from every mutant's run, so a test broken by work in progress is no
false kill.

A mutant is killed when a test fails on it (or it does not import), survives when every test
passes, and times out after --timeout seconds (counted apart: rerun it by hand). A mutant marked
equivalent changes nothing a test can observe; it runs all the same, and one that is killed after
all is reported. Exit status: 0 where at least --goal of the non-equivalent mutants are killed,
1 where fewer, 2 where a mutant no longer applies (its text changed: update it) or the baseline
cannot run.
"""
from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The tests each area's mutants run, the most pointed first (pytest -x stops at the first failure).
JUDGE = ("tests/test_judge_behaviours.py", "tests/test_diff.py", "tests/test_mutants.py")
COMPARE = ("tests/test_judge_behaviours.py", "tests/test_compare.py")
GATING = ("tests/test_gate_outcomes.py",)
STORE = ("tests/test_capture_behaviours.py", "tests/test_store.py", "tests/test_mutants.py")
LOOKUP = ("tests/test_judge_behaviours.py", "tests/test_lookup.py", "tests/test_diff.py")
GATE = ("tests/test_capture_behaviours.py", "tests/test_gate_checks.py", "tests/test_mutants.py")
CAPTURE = ("tests/test_capture_behaviours.py", "tests/test_mutants.py")
RENDER = ("tests/test_render_behaviours.py", "tests/test_report.py", "tests/test_mutants.py")
PROSE = ("tests/test_render_behaviours.py", "tests/test_prose.py")
ROOF = ("tests/test_judge_behaviours.py", "tests/test_roofline.py", "tests/test_report.py")
STALE_TEST = "tests/test_profiler.py::test_a_current_profile_is_skipped_and_a_stale_one_profiled_again_without_a_flag"


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    old: str  # exact text, found once in `file`
    new: str
    why: str  # the mistake it stands for
    tests: tuple[str, ...]
    equivalent: str = ""  # why no test can tell it from the original, where none can


MUTANTS = [
    # --- judge/verdicts.py: bands, the timing verdict, one metric's judgement ----------------------
    Mutant("band-holds-min", "kernlog/judge/verdicts.py",
           "self.rel * max(abs(a), abs(b))", "self.rel * min(abs(a), abs(b))",
           "a band relative to the smaller side, not the larger", JUDGE),
    Mutant("band-holds-strict", "kernlog/judge/verdicts.py",
           "<= self.rel * max(abs(a), abs(b)) + self.abs + 1e-12",
           "< self.rel * max(abs(a), abs(b)) + self.abs + 1e-12",
           "a move exactly the band's width judged a move", JUDGE,
           equivalent="the two differ only where |b - a| equals the band plus 1e-12 to the last bit: no two "
                      "measured values meet that (the 1e-12 is there to absorb rounding, and launch "
                      "configurations, the one zero-width band, are whole numbers)"),
    Mutant("band-no-root-2", "kernlog/judge/verdicts.py",
           "rel = max(Z99 * math.sqrt(2) * max(sigmas)", "rel = max(Z99 * max(sigmas)",
           "the band of one run's noise, not of the difference of two runs", JUDGE),
    Mutant("band-narrowest-calibration", "kernlog/judge/verdicts.py",
           "Z99 * math.sqrt(2) * max(sigmas)", "Z99 * math.sqrt(2) * min(sigmas)",
           "the narrowest calibration of the GPU sets the band", JUDGE),
    Mutant("band-no-floor", "kernlog/judge/verdicts.py",
           "rel = max(Z99 * math.sqrt(2) * max(sigmas), FLOOR.get(kind, 0.0))",
           "rel = Z99 * math.sqrt(2) * max(sigmas)",
           "a calibrated band under the 2% floor", JUDGE),
    Mutant("band-near-zero-median", "kernlog/judge/verdicts.py",
           'abs(s["median"]) > 10 * base.abs', 'abs(s["median"]) < 10 * base.abs',
           "a spread measured on values near zero taken as a relative band", JUDGE),
    Mutant("spread-d2-off-by-one", "kernlog/judge/verdicts.py",
           "D2.get(len(vals), 3.078)", "D2.get(len(vals) - 1, 3.078)",
           "d2 of one run fewer than the group holds", JUDGE),
    Mutant("spread-of-one-run", "kernlog/judge/verdicts.py",
           "            if len(vals) < 2:\n                continue",
           "            if len(vals) < 1:\n                continue",
           "a lone run taken as a spread of zero", JUDGE),
    Mutant("verdict-direction", "kernlog/judge/verdicts.py",
           '("faster" if ratio < 1 else "slower")', '("faster" if ratio > 1 else "slower")',
           "faster and slower swapped", JUDGE),
    Mutant("verdict-min-samples", "kernlog/judge/verdicts.py",
           "MIN_SAMPLES = 8", "MIN_SAMPLES = 7",
           "a rank test on too few samples to reach ALPHA", JUDGE),
    Mutant("regression-any-verdict", "kernlog/judge/verdicts.py",
           'return v.verdict == "slower" and v.ratio - 1 > threshold', "return v.ratio - 1 > threshold",
           "an inconclusive pair counted a regression", (*COMPARE, "tests/test_diff.py")),
    Mutant("judge-direction", "kernlog/judge/verdicts.py",
           '"better" if (b < a) == (m.better == "lower")', '"better" if (b > a) == (m.better == "lower")',
           "a metric judged against its good direction", JUDGE),
    Mutant("judge-ignores-given", "kernlog/judge/verdicts.py",
           "if m.better is None or not given_same:", "if m.better is None:",
           "a rate judged better while its bytes moved too", JUDGE),
    Mutant("same-kernel-ignores-config", "kernlog/judge/verdicts.py",
           "if not ka or ka != kb or config_of(a.metrics) != config_of(b.metrics):", "if not ka or ka != kb:",
           "two launches of one kernel name in different configs called the same kernel",
           ("tests/test_judge_behaviours.py", *RENDER)),
    Mutant("rate-unit", "kernlog/judge/verdicts.py",
           "gbps = prof.bytes_moved / ms / 1e6", "gbps = prof.bytes_moved / ms / 1e3",
           "GB/s off by a thousand", RENDER),
    Mutant("stale-flipped", "kernlog/judge/verdicts.py",
           "and source_sha256 != current[revision]", "and source_sha256 == current[revision]",
           "a current figure marked stale and a stale one not", RENDER),
    # --- judge/compare.py ----------------------------------------------------------------------------
    Mutant("compare-ignores-ncu", "kernlog/judge/compare.py",
           'return prof.gpu.name, prof.gpu.driver, prof.versions.get("ncu")',
           "return prof.gpu.name, prof.gpu.driver, None",
           "a pair measured under two ncu versions judged", COMPARE),
    Mutant("compare-hides-changed-source", "kernlog/render/compare.py",
           'return row["regression"] or row["judgement"] not in QUIET or row["source_changed"]',
           'return row["regression"] or row["judgement"] not in QUIET',
           "a pair judged same whose source changed counted, not listed", COMPARE),
    Mutant("compare-key-without-shape", "kernlog/judge/compare.py",
           "return prof.gpu.slug, prof.kernel, prof.revision, format_shape(tuple(prof.shape)), prof.dtype",
           'return prof.gpu.slug, prof.kernel, prof.revision, "", prof.dtype',
           "profiles of two shapes paired as one", COMPARE),
    Mutant("compare-source-changed-flipped", "kernlog/judge/compare.py",
           '"source_changed": bool(ra and rb and ra.source_sha256 != rb.source_sha256)',
           '"source_changed": bool(ra and rb and ra.source_sha256 == rb.source_sha256)',
           "an unchanged source said to have changed", COMPARE),
    Mutant("compare-no-threshold", "kernlog/judge/compare.py",
           "regression=regression(v, threshold)", "regression=regression(v, 0.0)",
           "--threshold ignored", COMPARE),
    # --- judge/bands.py, judge/diff.py ---------------------------------------------------------------
    Mutant("bands-across-gpus", "kernlog/judge/bands.py",
           "    if ga != gb:\n        return Bands([], None)\n", "",
           "one GPU's calibration applied to a pair across two GPUs", JUDGE),
    Mutant("per-element-b-by-a-shape", "kernlog/judge/diff.py",
           "vb = None if vb is None else vb * f / numel(shape_b)",
           "vb = None if vb is None else vb * f / numel(shape_a)",
           "b's amount per element of a's shape", JUDGE),
    Mutant("per-element-given-by-a-shape", "kernlog/judge/diff.py",
           "gb / (numel(shape_b) if per_elem else 1)", "gb / (numel(shape_a) if per_elem else 1)",
           "a rate's bytes compared per element of the wrong shape", JUDGE),
    Mutant("per-element-time-inverted", "kernlog/judge/diff.py",
           "scale = numel(a.shape) / numel(b.shape)", "scale = numel(b.shape) / numel(a.shape)",
           "b's samples scaled by the inverse of the element ratio", JUDGE),
    Mutant("per-element-never", "kernlog/judge/diff.py",
           "and tuple(shape_a) != tuple(shape_b)", "and tuple(shape_a) == tuple(shape_b)",
           "two shapes compared per run, one shape per element", JUDGE),
    Mutant("diff-ratio-inverted", "kernlog/judge/diff.py",
           "ratio = None if delta is None or va == 0 else vb / va",
           "ratio = None if delta is None or va == 0 else va / vb",
           "a metric's ratio upside down", JUDGE),
    Mutant("diff-unknown-driver-differs", "kernlog/judge/diff.py",
           'if key == "driver" and "unknown" in (va, vb):', 'if key == "driver" and "unknown" in (va,):',
           "an imported report's unknown driver called a difference", JUDGE),
    Mutant("findings-appeared-against-b", "kernlog/judge/diff.py",
           'return ([f for f in b if (f["rule"], f["title"]) not in ka],',
           'return ([f for f in b if (f["rule"], f["title"]) not in kb],',
           "no finding ever appears", JUDGE),
    # --- judge/gate_marks.py, plausible.py, roofline.py, history.py, predictions.py ----------------------
    Mutant("fails-gate-flipped", "kernlog/judge/gate_marks.py",
           'if not entry or entry.get("passed") is not False or not source_sha256:',
           'if not entry or entry.get("passed") is False or not source_sha256:',
           "a profile marked failing where its gate passed", GATING),
    Mutant("fails-gate-any-source", "kernlog/judge/gate_marks.py",
           '    if entry.get("source_sha256") != source_sha256:\n        return None\n', "",
           "a failure of another source marks this one", GATING),
    Mutant("gate-failure-reused", "kernlog/judge/gate_marks.py",
           'return bool(entry) and entry.get("passed") is True and',
           'return bool(entry) and entry.get("passed") is not None and',
           "a stored failure taken as a pass", ("tests/test_gate_reuse.py",)),
    Mutant("plausible-ncu-timed-bounded-by-copy", "kernlog/judge/plausible.py",
           "elif copy and v > copy * (1 + rel_band) and not ncu_timed:", "elif copy and v > copy * (1 + rel_band):",
           "an imported report's ncu duration held to the event-timed copy", JUDGE),
    Mutant("plausible-gpu-prefix-reversed", "kernlog/judge/plausible.py",
           "if gpu_name.startswith(name):", "if name.startswith(gpu_name):",
           "a GPU's longer name (H200 NVL) given no spec peak", JUDGE),
    Mutant("roofline-side-flipped", "kernlog/judge/roofline.py",
           'side = "compute" if ridge is not None and ai >= ridge else "memory"',
           'side = "compute" if ridge is not None and ai <= ridge else "memory"',
           "compute- and memory-bound swapped", ROOF),
    Mutant("roofline-attainable-max", "kernlog/judge/roofline.py",
           "attainable = min(peak, roof) if peak else roof", "attainable = max(peak, roof) if peak else roof",
           "the higher roof taken as attainable", ROOF),
    Mutant("roofline-bound-threshold", "kernlog/judge/roofline.py",
           "    if pct >= BOUND:", "    if pct >= 1 - BOUND:",
           "bound at 40% of the roof", ROOF),
    Mutant("history-source-changed-flipped", "kernlog/judge/history.py",
           "source = prev.source_sha256 != prof.source_sha256", "source = prev.source_sha256 == prof.source_sha256",
           "a step said to come with a source change where none was", ("tests/test_history.py",)),
    Mutant("prediction-any-dtype", "kernlog/judge/predictions.py",
           'if c.get("dtype", dtype) != dtype or not _at(c.get("shape"), row):', 'if not _at(c.get("shape"), row):',
           "a bf16 claim judged on an fp32 profile", ("tests/test_predictions.py",)),
    # --- store/ ---------------------------------------------------------------------------------------
    Mutant("record-zero-sample", "kernlog/store/record.py",
           "type(v) is float and 0.0 < v < math.inf", "type(v) is float and 0.0 <= v < math.inf",
           "a timing sample of zero stored", STORE),
    Mutant("record-zero-sample-slow-path", "kernlog/store/record.py",
           "math.isfinite(v) and v > 0)), None)", "math.isfinite(v) and v >= 0)), None)",
           "a timing sample of zero stored where another sample is an int", STORE),
    Mutant("record-zero-dimension", "kernlog/store/record.py",
           "all(type(n) is int and n > 0 for n in shape)", "all(type(n) is int and n >= 0 for n in shape)",
           "a shape with a zero dimension stored", STORE),
    Mutant("load-misplaced-ignores-folder", "kernlog/store/profiles.py",
           '.{said[4]}.json" or ident not in (None, said):', '.{said[4]}.json":',
           "a profile in another GPU's or kernel's folder read as that one", STORE),
    Mutant("save-overwrites-without-force", "kernlog/store/profiles.py",
           "if json_path.exists() and not force:", "if json_path.exists() and force:",
           "a stored profile replaced without --force",
           ("tests/test_profiler.py::test_save_refuses_to_overwrite_without_force",)),
    Mutant("side-ignores-shape", "kernlog/store/keys.py",
           "return ((self.shape is None or k.shape == self.shape)", "return ((True)",
           "a side settled by GPU and dtype, its shape ignored", LOOKUP),
    Mutant("side-ignores-dtype", "kernlog/store/keys.py",
           "and (self.dtype is None or k.dtype == self.dtype)", "and (True)",
           "a side settled by GPU and shape, its dtype ignored", LOOKUP),
    Mutant("settle-by-gpu-alone", "kernlog/store/lookup.py",
           "for i in range(3, 0, -1):", "for i in range(1, 0, -1):",
           "an open side follows the settled one on its GPU alone", LOOKUP),
    Mutant("declared-last-dtype", "kernlog/store/lookup.py",
           "r.key.dtype == kernel.profile_dtype]", "r.key.dtype == kernel.dtypes[-1]]",
           "the kernel's last dtype preferred, not its profile dtype", LOOKUP),
    Mutant("primary-gpu-least-profiled", "kernlog/store/lookup.py",
           "min(counts, key=lambda g: (-counts[g], g))", "min(counts, key=lambda g: (counts[g], g))",
           "the GPU with the fewest profiles taken as primary", LOOKUP),
    Mutant("gates-record-drops-others", "kernlog/store/gates.py",
           "revs = dict(load(root, gpu, kernel), **outcomes)", "revs = dict(outcomes)",
           "a gate's outcome erases the other revisions'", GATING),
    Mutant("key-from-path-off-by-one", "kernlog/store/keys.py",
           "or len(names) != 3:", "or len(names) != 4:",
           "no stored path spells a key", LOOKUP),
    # --- run/gate.py ------------------------------------------------------------------------------------
    Mutant("gate-verdict-first-dtype", "kernlog/run/gate.py",
           "dtypes=list(kernel.dtypes), seed=seed", "dtypes=list(kernel.dtypes)[:1], seed=seed",
           "the pre-timing gate of the first declared dtype alone", GATE),
    Mutant("gate-cases-first-dtype", "kernlog/run/gate.py",
           "        for dtype in dtypes or kernel.dtypes:", "        for dtype in (dtypes or kernel.dtypes)[:1]:",
           "every gate of its first dtype alone", GATE),
    Mutant("gate-l2-tolerance", "kernlog/run/gate.py",
           "    if err > tol.l2:", "    if err > 10 * tol.l2:",
           "ten times the whole-output tolerance", GATE),
    Mutant("gate-row-tolerance", "kernlog/run/gate.py",
           "    over = errs > tol\n", "    over = errs > 10 * tol\n",
           "one bad row among many let through", GATE),
    Mutant("gate-lost-infinity", "kernlog/run/gate.py",
           "missed = torch.isinf(ref) & (out != ref)", "missed = torch.isinf(ref) & torch.isnan(out)",
           "an infinity of the reference written as a finite number", GATE),
    Mutant("gate-bare-tolerance-row", "kernlog/run/gate.py",
           "return replace(base, l2=over, row=max(base.row, over), rtol=max(base.rtol, over))",
           "return replace(base, l2=over, rtol=max(base.rtol, over))",
           "a kernel's looser tolerance not raised row by row", GATE),
    Mutant("gate-summary-cases-off-by-one", "kernlog/run/gate.py",
           '{"cases": len(results), "worst_rel_error"', '{"cases": len(results) - 1, "worst_rel_error"',
           "one case fewer reported than ran", GATE),
    Mutant("gate-never-launches-twice", "kernlog/run/gate.py",
           'again=device != "cpu" or case == kernel.cases[0]', "again=False",
           "a revision whose second launch differs passes", ("tests/test_gate_wrong.py", "tests/test_gate_checks.py")),
    # --- capture/extract.py -------------------------------------------------------------------------
    Mutant("extract-wall-is-p95", "kernlog/capture/extract.py",
           'values["wall_ms"] = summary["median_ms"]', 'values["wall_ms"] = summary["p95_ms"]',
           "the stored wall time the 95th percentile", CAPTURE),
    Mutant("extract-zero-sample", "kernlog/capture/extract.py",
           "math.isfinite(x) and x > 0 for x in samples", "math.isfinite(x) and x >= 0 for x in samples",
           "a timing pass with a zero sample stored", CAPTURE),
    Mutant("extract-stale-is-current", "kernlog/capture/todo.py",
           '"current" if prof.source_sha256 == rev.sha256() else "stale"',
           '"current" if prof.source_sha256 != rev.sha256() else "stale"',
           "an edited revision skipped, an unchanged one profiled again", (STALE_TEST,)),
    Mutant("extract-stale-not-todo", "kernlog/capture/todo.py",
           'if state in ("missing", "stale"):', 'if state == "missing":',
           "an edited revision not profiled again without --force", (STALE_TEST,)),
    Mutant("runnable-keeps-lacking", "kernlog/capture/todo.py",
           "        why = r.lacks()\n", "        why = ''\n",
           "a revision whose package is missing profiled (and the unchanged ladder starts the GPU)",
           ("tests/test_profiler.py",)),
    Mutant("runnable-refuses-any-lacking", "kernlog/capture/todo.py",
           "if lacking and (named or len(lacking) == len(revs)):", "if lacking:",
           "an unchanged ladder without Liger-Kernel refused, not ended", ("tests/test_profiler.py",)),
    Mutant("quick-slug-any-model", "kernlog/capture/provenance.py",
           "    if len(set(names)) == 1:\n", "    if names:\n",
           "a host of two GPU models named after its first", ("tests/test_provenance.py",)),
    Mutant("quick-slug-index-in-cuda-order", "kernlog/capture/provenance.py",
           'gpu_slug(names[index]) if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" else None',
           "gpu_slug(names[index])",
           "a GPU index read in nvidia-smi's order where CUDA puts the fastest first", ("tests/test_provenance.py",)),
    Mutant("quick-slug-mig-parent", "kernlog/capture/provenance.py",
           'any(len(r) != 2 or r[1] == "Enabled" for r in rows)', "any(len(r) != 2 for r in rows)",
           "a MIG slice judged by its parent GPU's profiles", ("tests/test_provenance.py",)),
    Mutant("quick-slug-index-past-end", "kernlog/capture/provenance.py",
           "if index >= len(names):", "if index > len(names):",
           "CUDA_VISIBLE_DEVICES naming one GPU past the last", ("tests/test_provenance.py",)),
    Mutant("quick-slug-ignores-visible", "kernlog/capture/provenance.py",
           '*(["-i", first] if by_id else [])', "*[]",
           "the GPU named without CUDA_VISIBLE_DEVICES' first", ("tests/test_provenance.py",)),
    Mutant("one-gate-in-process", "kernlog/capture/profiler.py",
           "        if workers > 1 and apart:", "        if workers > 1 and len(apart) > 1:",
           "the edit loop's one gate run here, its ncu process started only after it", ("tests/test_profiler.py",)),
    Mutant("decide-no-quick-skip", "kernlog/capture/todo.py",
           "quick, said = provenance.quick_gpu_slug(), []", "quick, said = None, []",
           "an unchanged ladder starts torch and CUDA to find nothing to do", ("tests/test_profiler.py",)),
    Mutant("decide-trusts-quick-slug", "kernlog/capture/todo.py",
           'if gpu["slug"] == quick:', "if True:",
           "the skips kept from nvidia-smi's name where torch names another GPU", ("tests/test_profiler.py",)),
    Mutant("runnable-named-lacking-ends-quietly", "kernlog/capture/todo.py",
           "if lacking and (named or len(lacking) == len(revs)):", "if lacking and len(lacking) == len(revs):",
           "`--rev torch --rev liger` without Liger-Kernel ends with exit 0, liger unprofiled",
           ("tests/test_profiler.py",)),
    # --- render/ ------------------------------------------------------------------------------------------
    Mutant("sweep-pages-never", "kernlog/render/facts.py",
           'sw["page"] = paths.under_reports(f"{kernel.name}_sweep_{g}.md") if sweeps else None',
           'sw["page"] = None',
           "every GPU's sweep on the kernel's page, which outgrows its size", ("tests/test_page_once.py",)),
    Mutant("sweep-page-orphan-kept", "kernlog/render/report.py",
           "text.startswith((PAGE.split(\"\\n\")[0], SWEEP_PAGE.split(\"\\n\")[0])))",
           "text.startswith(PAGE.split(\"\\n\")[0]))",
           "a GPU's sweep page kept after its sweep is gone", ("tests/test_page_once.py",)),
    Mutant("sweep-page-unchecked", "kernlog/render/paths.py",
           '            if posixpath.normpath(posixpath.dirname(rel) or ".") == reports:', "            if False:",
           "a sweep page left out of the published pages, so no page rule reads it",
           ("tests/test_page_once.py",)),
    Mutant("shape-twice-last-wins", "kernlog/commands/common.py",
           "    if len(values) > 1:", "    if len(values) > 2:",
           "a second --shape silently overrides the first", ("tests/test_cli.py",)),
    Mutant("waves-pick-inverted", "kernels/matmul_relu/cuda_waves.py",
           "if not aligned or fill(M, N, Q_TILE, sms) <= fill(M, N, cp.P9_TILE, sms):",
           "if not aligned or fill(M, N, Q_TILE, sms) >= fill(M, N, cp.P9_TILE, sms):",
           "cu10 takes the tile whose waves are emptier", ("tests/test_matmul_cuda.py",)),
    Mutant("persistent-grid-every-sm", "kernels/matmul_relu/cuda_persistent.py",
           '"mm_persistent", (min(sms, tiles), 1, 1)', '"mm_persistent", (sms, 1, 1)',
           "a persistent grid of a block per SM where there are fewer tiles (idle blocks launched)",
           ("tests/test_matmul_cuda.py",)),
    Mutant("rev-check-shapes-ungated", "kernlog/run/gate.py",
           "    for i, shape in enumerate(shapes or kernel.gate_shapes_of(rev)):",
           "    for i, shape in enumerate(shapes or kernel.gate_shapes):",
           "a revision's own check shapes never reach its gate", ("tests/test_gate_reuse.py",)),
    Mutant("rev-check-shapes-not-plan", "kernlog/run/gatekey.py",
           "for s in kernel.gate_shapes_of(rev)],", "for s in kernel.gate_shapes],",
           "a revision's own check shapes left out of its gate's key: adding one reuses the old pass",
           ("tests/test_gate_reuse.py",)),
    Mutant("rev-check-shapes-no-part", "kernlog/run/parts.py",
           "enumerate(kernel.gate_shapes_of(rev)) if not rev.refusal(s))",
           "enumerate(kernel.gate_shapes) if not rev.refusal(s))",
           "a gate split in parts drops the revision's own check shapes", ("tests/test_gate_reuse.py",)),
    Mutant("rev-check-shapes-any-arity", "kernlog/registry.py",
           "        wrong = [s for s in shapes if len(s) != len(kernel.profile_shape)]", "        wrong = []",
           "a revision's check shape of the wrong rank passes the declaration check (fails later, a traceback)",
           ("tests/test_check_errors.py",)),
    Mutant("half-octave-off-by-one", "kernlog/library.py",
           "int(n) <= 3 << (e - 2) else 0)", "int(n) < 3 << (e - 2) else 0)",
           "3072 rounds up to 4096 under half octaves: the matmul's 3072^3 shares 4096^3's pick again",
           ("tests/test_dispatch.py",)),
    Mutant("rule-forgets-half-octaves", "kernlog/library.py",
           '                   int(d.get("per_octave", 1)))', "                   1)",
           "a table's half-octave rule read back as whole octaves: calls classed otherwise than the sweep",
           ("tests/test_dispatch.py",)),
    Mutant("half-octave-range-in-buckets", "kernlog/library.py",
           "        if not lo - octave <= b <= hi + octave:", "        if not lo - 1 <= b <= hi + 1:",
           "under half octaves a call one octave past the sweep takes the fallback, not the nearest class",
           ("tests/test_dispatch.py",)),
    Mutant("gpu-table-ties-named", "kernlog/render/dispatch.py",
           '        if c["margin"] is None or c["margin"] > c["noise"]:', "        if True:",
           "a GPU table's picks that tie with the runner-up are named as wins over the table above",
           ("tests/test_dispatch_gpus.py",)),
    Mutant("splitk-where-tiles-fill", "kernels/matmul_relu/cuda_splitk.py",
           "if aligned and M and N and K and cl._cdiv(M, 128) * cl._cdiv(N, 256) < sms:",
           "if aligned and M and N and K:",
           "cu11 splits K where cu10's tiles already fill the SMs (3072^3)", ("tests/test_matmul_cuda.py",)),
    Mutant("ties-drop-fastest", "kernlog/render/steps.py",
           "    near = {arc[\"best\"][\"rec\"].revision, *arc.get(\"ties\", ())} if arc.get(\"best\") else",
           "    near = set(arc.get(\"ties\", ())) if arc.get(\"best\") else",
           "\"within noise\" leaves out the fastest step where \"same kernel as\" named an earlier one best",
           ("tests/test_page_shape.py",)),
    Mutant("front-page-best-over-sweep", "kernlog/render/arc.py",
           "    if mine and bar[\"name\"] in tied:", "    if False:",
           "the front page quotes the page's best step at a point whose sweep ran a step within noise of it faster "
           "(matmul at 4096^3: 753 TFLOP/s where the sweep table says 762)", ("tests/test_log_gate.py",)),
    Mutant("front-tie-slower-taken", "kernlog/render/arc.py",
           "        mine = vals[bar[\"name\"]] < vals[best] or", "        mine = False or",
           "the front page swaps the page's best for a tie its sweep ran slower (a counterpart best, a step behind it)",
           ("tests/test_front_points.py",)),
    Mutant("front-tie-stale-taken", "kernlog/render/arc.py",
           " or (bar[\"name\"] in row[\"stale\"] and best not in row[\"stale\"])", "",
           "the front page swaps the page's current best for a tie's figure of an older source (†)",
           ("tests/test_front_points.py",)),
    Mutant("head-credits-the-tie", "kernlog/render/steps.py",
           "    who = \"\" if p[\"best\"] == name else f\" {p['best']} ran fastest\"", "    who = \"\"",
           "the page's head gives the tie's sweep figures to its own best step",
           ("tests/test_log_gate.py",)),
    Mutant("next-ignores-rungs-elsewhere", "kernlog/render/steps.py",
           "    elif away := profiled_elsewhere(s.get(\"ladders\", []), s[\"kernel\"], lad):", "    elif away := []:",
           "Next tells how to tune a best step that later rungs, profiled only on another GPU, already passed",
           ("tests/test_log_gate.py",)),
    Mutant("next-rungs-before-the-best", "kernlog/render/steps.py",
           "for n in order[order.index(top[\"rec\"].revision) + 1:]",
           "for n in order",
           "Next calls rungs that come before the best step (matmul's cu9-cu11) the ones past it",
           ("tests/test_log_gate.py",)),
    Mutant("next-command-default-dtype", "kernlog/render/steps.py",
           "{' '.join('--rev ' + n for n in names)} --shape {lad['shape']} \"\n",
           "{' '.join('--rev ' + n for n in names)} \"\n",
           "Next's command profiles the kernel's first dtype and profile shape, not the headline ladder's",
           ("tests/test_log_gate.py",)),
    Mutant("next-names-a-wrong-rung", "kernlog/render/steps.py",
           "            if n in away and revs[n].role == \"step\" and not revs[n].refusal(shape)]",
           "            if n in away]",
           "Next asks to profile a rung the kernel now declares known-wrong (or that refuses the shape)",
           ("tests/test_log_gate.py",)),
    Mutant("no-arc-beyond", "kernlog/render/arc.py",
           "    return (same or past or [None])[0]", "    return None",
           "a page's first screen shows only its headline GPU's arc, though later rungs ran only on another GPU",
           ("tests/test_log_gate.py",)),
    Mutant("arc-beyond-any-shape", "kernlog/render/arc.py",
           "    return (same or past or [None])[0]", "    return (past or [None])[0]",
           "the other GPU's arc at whichever shape sorts first, not the headline's own shape",
           ("tests/test_front_points.py", "tests/test_log_gate.py")),
    Mutant("front-one-gpu", "kernlog/render/arc.py",
           "        if sw is main_sw:\n            continue\n        dtype = swept_dtype",
           "        if True:\n            continue\n        dtype = swept_dtype",
           "the front page shows a kernel on its first GPU only (the H200's rungs missing from the log's first screen)",
           ("tests/test_log_gate.py", "tests/test_front_points.py")),
    Mutant("front-other-gpu-first-dtype", "kernlog/render/arc.py",
           "        dtype = swept_dtype(sw, dtypes, steps)\n", "        dtype = dtypes[0]\n",
           "another GPU's front line looks for the kernel's first dtype, and vanishes where that GPU swept another",
           ("tests/test_front_points.py",)),
    Mutant("front-shape-reference-only", "kernlog/render/arc.py",
           " and r[\"bars\"] and r[\"bars\"][0][\"name\"]]", "]",
           "the front point lands on a shape where only references ran, and the line vanishes",
           ("tests/test_front_points.py",)),
    Mutant("front-elsewhere-unchecked", "kernlog/render/arc.py",
           "for q in front.get(\"elsewhere\") or []]", "for q in []]",
           "report --check no longer compares the other GPUs' front lines with their sweeps",
           ("tests/test_log_gate.py",)),
    Mutant("splitk-empty-slices", "kernels/matmul_relu/cuda_splitk.py",
           "    if clusters.get(s, 0) <= 0 or cl._cdiv(K, 64) < s:", "    if clusters.get(s, 0) <= 0:",
           "cu11 splits K into more slices than it has k-tiles (blocks with nothing to add)",
           ("tests/test_matmul_cuda.py",)),
    Mutant("splitk-one-wave", "kernels/matmul_relu/cuda_splitk.py",
           "    waves = cl._cdiv(tiles, clusters[s])", "    waves = 1",
           "cu11's model forgets that clusters past those resident at once wait for a second wave",
           ("tests/test_matmul_cuda.py",)),
    Mutant("splitk-wide-cluster-free", "kernels/matmul_relu/cuda_splitk.py",
           "WIDE_CLUSTER = 1.4", "WIDE_CLUSTER = 1.0",
           "16-block clusters costed as the portable ones (128x1024x32768 picks them and runs slower)",
           ("tests/test_matmul_cuda.py",)),
    Mutant("splitk-empty-refused", "kernels/matmul_relu/cuda_splitk.py",
           "    if not (M and N):\n        return \"\"\n    return cl.grid_problem(plan_splitk",
           "    return cl.grid_problem(plan_splitk",
           "an empty C declared refused (a grid of no blocks) though the launch returns it",
           ("tests/test_matmul_cuda.py",)),
    Mutant("waves-empty-divides", "kernels/matmul_relu/cuda_waves.py",
           "tile[0] * tile[1]) if tiles else 0.0", "tile[0] * tile[1])",
           "cu10's fill divides by zero for an empty C", ("tests/test_matmul_cuda.py",)),
    Mutant("library-first-launch-uncaught", "kernlog/library.py",
           "            except (Unsupported, CannotRun) as e:\n                # a revision that learns",
           "            except ImportError as e:\n                # a revision that learns",
           "a pick that finds at its first launch it cannot run here fails the call", ("tests/test_dispatch.py",)),
    Mutant("library-ran-before-passed-over", "kernlog/library.py",
           "if got.revision in self._ran.get(device, ()):", "if False:",
           "a revision that ran before and then fails is silently passed over", ("tests/test_dispatch.py",)),
    Mutant("sweep-page-alphabetical", "kernlog/render/facts.py",
           "key=lambda g: (g != primary, g))", "key=lambda g: g)",
           "the GPU that sorts first, not the primary one, keeps its sweep on the kernel page",
           ("tests/test_page_once.py",)),
    Mutant("sweep-page-figures-unfilled", "kernlog/render/report.py",
           'out[sw["page"]] = prose.fill(root, splice(text, {"sweep": sweep_block(s, sw, paths)}))',
           'out[sw["page"]] = splice(text, {"sweep": sweep_block(s, sw, paths)})',
           "a figure marker on a sweep page never filled or checked", ("tests/test_page_once.py",)),
    Mutant("gate-footnotes-apart", "kernlog/render/sweeps.py",
           'alike.setdefault((row["shape"], row["dtype"], why), []).append(r)',
           'alike.setdefault((row["shape"], row["dtype"], why, r), []).append(r)',
           "references failing alike get a footnote each", ("tests/test_page_once.py",)),
    Mutant("claims-elsewhere-unmeasured-listed", "kernlog/render/steps.py",
           'lines += _claim_lines(other.get("judged"), f" at {where}", measured_only=True)',
           'lines += _claim_lines(other.get("judged"), f" at {where}")',
           "a claim listed as not measured on every other ladder", ("tests/test_page_once.py",)),
    Mutant("hot-lines-twice", "kernlog/render/excerpts.py",
           'if key in printed:', 'if key in printed and False:',
           "the same hot lines printed under two steps", ("tests/test_page_once.py",)),
    Mutant("arc-inconclusive-tie", "kernlog/render/facts.py",
           'band).verdict == "same"]', 'band).verdict != "slower"]',
           "an inconclusive step shown tied with the fastest", RENDER),
    Mutant("arc-failing-gate-fastest", "kernlog/render/facts.py",
           'mine = [r for r in rows if r["rec"].role != "reference" and not r["fails_gate"]]',
           'mine = [r for r in rows if r["rec"].role != "reference"]',
           "a revision failing the gate now named the fastest",
           ("tests/test_render_behaviours.py", "tests/test_gate_outcomes.py")),
    Mutant("ladder-vs-ref-inverted", "kernlog/render/facts.py",
           'row["vs_ref"] = 100.0 * ref.metrics["wall_ms"] / wall if ref else None',
           'row["vs_ref"] = 100.0 * wall / ref.metrics["wall_ms"] if ref else None',
           "the speed against the reference upside down", RENDER),
    Mutant("deltas-smallest-first", "kernlog/render/facts.py",
           'out.sort(key=lambda r: (-r["weight"], r["label"]))', 'out.sort(key=lambda r: (r["weight"], r["label"]))',
           "the smallest moves listed first", RENDER),
    Mutant("counterpart-beside-first-step", "kernlog/render/facts.py",
           '(prev_cp or (steps[-1] if steps else None))', '(prev_cp or (steps[0] if steps else None))',
           "the counterpart compared with the first step, not the last", RENDER),
    Mutant("counterpart-beside-last-step-only", "kernlog/render/facts.py",
           '(prev_cp or (steps[-1] if steps else None))', '(steps[-1] if steps else None)',
           "a second counterpart compared with the last step, not the counterpart before it", RENDER),
    Mutant("prediction-other-ladders-dropped", "kernlog/render/steps.py",
           'lines += _claim_lines(other.get("judged"), f" at {where}", measured_only=True)', 'pass',
           "a claim judged in another ladder of the revision left off the step's line and verdict",
           ("tests/test_page_shape.py",)),
    Mutant("sweep-first-counterpart", "kernlog/render/sweeps.py",
           'best("counterpart") or next(', 'next(',
           "the sweep's counterpart cell takes the first counterpart, not the fastest", ("tests/test_bench.py",)),
    Mutant("prose-gbps-unit", "kernlog/render/prose.py",
           '"gbps": r["gbps"],', '"gbps": r["gbps"] / 1e3,',
           "a GB/s figure in the prose filled in TB/s", PROSE),
    Mutant("prose-gbps-unchecked", "kernlog/render/prose.py",
           "|TB/s|GB/s|", "|TB/s|",
           "a bare GB/s figure in the prose passes the check", PROSE),
    Mutant("prose-no-stale-mark", "kernlog/render/prose.py",
           "{STALE_MARK if is_stale(prof) else ''}", "",
           "a figure of an older source unmarked", PROSE),
    Mutant("prose-speedup-inverted", "kernlog/render/prose.py",
           'value = resolve(what.split(":", 1)[1]).metrics["wall_ms"] / ms',
           'value = ms / resolve(what.split(":", 1)[1]).metrics["wall_ms"]',
           "a speedup figure upside down", PROSE),
    Mutant("arc-best-ref-slowest", "kernlog/render/arc.py",
           'best_ref = min(refs, key=lambda r: r["rec"].metrics["wall_ms"]) if refs else None',
           'best_ref = max(refs, key=lambda r: r["rec"].metrics["wall_ms"]) if refs else None',
           "the slowest reference called the best", RENDER),
    Mutant("sweep-best-ref-slowest", "kernlog/render/sweeps.py",
           "best_ref = max(theirs, key=theirs.get) if theirs else None",
           "best_ref = min(theirs, key=theirs.get) if theirs else None",
           "the sweep's slowest reference called the best", (*RENDER, "tests/test_bench.py")),
    Mutant("sweep-failing-step-best", "kernlog/render/sweeps.py",
           '            and r not in row.get("fails_now", {})}', "            }",
           "a step failing the gate now named the sweep's best",
           ("tests/test_render_behaviours.py", "tests/test_gate_outcomes.py")),
    Mutant("time-shares-counts-kernels", "kernlog/metrics.py",
           '"count": sum(r["count"] for r in tail)', '"count": len(tail)',
           "the row of the kernels past the top ones counts kernels, not launches", RENDER),
    Mutant("memo-stamp-no-ctime", "kernlog/memo.py",
           "return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]",
           "return [st.st_size, st.st_mtime_ns, st.st_ino]",
           "a kept value trusted over an edit that kept the file's size and mtime", ("tests/test_memo.py",)),
    Mutant("memo-keeps-racy", "kernlog/memo.py",
           "all(s is not None and max(s[1], s[2]) < recent for _, s in stamps)",
           "all(s is not None and s[1] < recent for _, s in stamps)",
           "recency judged by the mtime alone: a file replaced with its old mtime kept (cp -p) is kept stale",
           ("tests/test_memo.py",)),
    Mutant("memo-source-folders-dropped", "kernlog/identity.py",
           "return _source_sha256(rev, files), [*files, *sorted(folders)]", "return _source_sha256(rev, files), files",
           "a header added where an #include finds it first leaves the kept source hash", ("tests/test_memo.py",)),
    Mutant("bench-never-reuses", "kernlog/capture/bench.py",
           "reused = {} if regate else gate_runs.reused(root, kernel, revs, common, progress)", "reused = {}",
           "bench gates an unchanged revision again", ("tests/test_gate_reuse.py",)),
    Mutant("bench-pass-unkeyed", "kernlog/capture/bench.py",
           'verdicts, "bench", git["commit"], keyed)', 'verdicts, "bench", git["commit"])',
           "bench keeps its passes with no key, so nothing takes them after", ("tests/test_gate_reuse.py",)),
    Mutant("bench-apart-verdict-ignored", "kernlog/capture/bench.py",
           'bad, check = (None, detail) if outcome == "ok" else (detail, None)', "bad, check = None, detail",
           "bench sweeps a revision whose gate failed, in a process of its own or in bench's",
           ("tests/test_bench.py",)),
    Mutant("bench-gates-in-process", "kernlog/capture/bench.py",
           "if workers > 1 and apart else {}", "if False else {}",
           "bench gates one by one in its own process whatever the workers", ("tests/test_bench.py",)),
    Mutant("peeled-fallback-crosses-warps", "kernels/softmax/softmax_triton_peeled.py",
           "GPU_TILE = 32", "GPU_TILE = 128",
           "the peeled softmax's fallback reads the row over all warps, a barrier a warp may never reach",
           ("tests/test_softmax_triton_peeled.py",)),
    Mutant("peeled-exp-keeps-denormals", "kernels/softmax/softmax_triton_peeled.py",
           "e = tl.exp2((x - m) * LOG2E)", "e = tl.exp(x - m)",
           "the peeled softmax's chunk takes tl.exp, a denormal range fix around every element's ex2",
           ("tests/test_softmax_triton_peeled.py",)),
    Mutant("peeled-inside-past-the-body", "kernels/softmax/softmax_triton_peeled.py",
           "(k * BLOCK + BLOCK <= hi)  # the whole", "(k * BLOCK + BLOCK <= hi + Q)  # the whole",
           "a chunk that reaches up to Q elements past the row's body loads and stores them without a mask",
           ("tests/test_softmax_triton_peeled.py", "tests/test_softmax_triton.py")),
    Mutant("met-takes-rows-off-the-boundary", "kernels/softmax/softmax_triton_met.py",
           "cols > base.SHORT and not (cols % q or x.stride(0) % q)", "cols > base.SHORT",
           "triton_met sends rows off the 16-byte boundary to the peeled kernel's launch with no offset check",
           ("tests/test_softmax_triton_met.py",)),
    Mutant("met-span-without-the-vector", "kernels/softmax/softmax_triton_met.py",
           "triton.cdiv(cols + q - 1, block", "triton.cdiv(cols, block",
           "triton_met counts a row's chunks without the kernel's span, so a row of SPLIT_CAP chunks exactly "
           "launches one more and meets in a slot past its own", ("tests/test_softmax_triton_met.py",)),
    Mutant("met-drops-triton-s-candidates", "kernels/softmax/softmax_triton_met.py",
           "return met + split + base.pipe_configs", "return met + base.pipe_configs",
           "triton_met's picker stops timing triton's split chunks, so a shape may run slower than triton",
           ("tests/test_softmax_triton_met.py",)),
    Mutant("met-split-launches-met", "kernels/softmax/softmax_triton_met.py",
           'if kind == "met":', 'if kind in ("met", "split"):',
           "a split candidate of triton's is launched as the peeled kernel", ("tests/test_softmax_triton_met.py",)),
    Mutant("others-disagree-launch-bound", "kernlog/render/steps.py",
           "                                 and not d[\"launch_bound\"]]})", "                                 ]})",
           "the other shapes' table marks launch-bound points whose launch overhead moved between sessions",
           ("tests/test_agree.py",)),
    Mutant("others-disagree-unmarked", "kernlog/render/templates/kernel.md.j2",
           "{% if o.disagree %}≠{% endif %}", "{% if false %}≠{% endif %}",
           "the other shapes' table leaves a ratio unmarked whose profile the sweep timed apart",
           ("tests/test_agree.py",)),
    Mutant("page-links-from-the-root", "kernlog/render/limits.py",
           "else where.Paths.resolve(path, page)",
           "else path",
           "report --check resolves a page's links from the repository's root, not the page's folder",
           ("tests/test_page_limits.py",)),
    Mutant("bench-sweeps-every-dtype", "kernlog/commands/bench.py",
           "list(dtype) or list(kernel.sweep_dtypes or kernel.dtypes)", "list(dtype) or list(kernel.dtypes)",
           "bench with no --dtype sweeps dtypes the kernel's tables do not judge", ("tests/test_bench.py",)),
    Mutant("v5-wide-o-dropped", "kernels/attention/v5_persistent.py",
           "cuda.launch(_kernel(D, wide_o),", "cuda.launch(_kernel(D),",
           "v5 times its 16-byte O store under that name but launches v4's store", ("tests/test_attention_cuda.py",)),
    Mutant("bench-picks-carried", "kernlog/capture/bench.py",
           "                picker.forget_used()\n", "",
           "a point's note names the picks of the points before it", ("tests/test_bench.py",)),
    Mutant("notes-figures-unchecked", "kernlog/render/report.py",
           "for n, fig in prose.unsourced(path.read_text())]", "for n, fig in []]",
           "a note's unsourced figure passes report --check", ("tests/test_prose.py",)),
    Mutant("memo-bench-file-undepended", "kernlog/store/benchfile.py",
           "lambda path=path: (_points(root, path), [path])", "lambda path=path: (_points(root, path), [])",
           "a bench.csv's points kept after the file changed", ("tests/test_memo.py",)),
    Mutant("summary-report-unglanced", "kernlog/store/summaries.py",
           "reportfiles.glance(path.parent, ncu) is not None)", "False)",
           "a report lost after its profile was summarised goes unsaid by list", ("tests/test_memo.py",)),
    Mutant("front-line-gpu-unnamed", "kernlog/render/arc.py",
           '"unit": sw["unit"], "gpu": sw["gpu"],', '"unit": sw["unit"], "gpu": None,',
           "a front-page line measured on one GPU names none", ("tests/test_bench.py",)),
    Mutant("dispatch-window-wider", "kernlog/library.py",
           "if not lo - octave <= b <= hi + octave:", "if not lo - 2 * octave <= b <= hi + 2 * octave:",
           "a call two octaves past the sweep takes a class, not the fallback", ("tests/test_dispatch.py",)),
    Mutant("dispatch-empty-class-nearest", "kernlog/library.py",
           'c["align"] == how and c["revision"]]', 'c["align"] == how]',
           "a class nothing qualifies in is taken as the call's, so it falls back past a nearer pick",
           ("tests/test_dispatch.py",)),
    Mutant("dispatch-distance-linear", "kernlog/library.py",
           "sum((x - y) ** 2 for x, y", "sum(abs(x - y) for x, y",
           "the nearest class by octaves summed, not squared", ("tests/test_dispatch.py",)),
    Mutant("dispatch-fallback-any-first", "kernlog/library.py",
           'table["fallback"].get(dtype) or table["fallback"].get(ANY, [])',
           'table["fallback"].get(ANY) or table["fallback"].get(dtype, [])',
           "the fallback ranks over every dtype before the call's own", ("tests/test_dispatch.py",)),
    Mutant("dispatch-wrong-qualifies", "kernlog/judge/dispatch.py",
           "    if role not in QUALIFY:", '    if role == "reference":',
           "a known-wrong revision can be a pick", ("tests/test_dispatch.py",)),
    Mutant("dispatch-check-classes-only", "kernlog/render/dispatch.py",
           "if store.text(kept) == store.text(fresh):", 'if kept["classes"] == fresh["classes"]:',
           "--check passes a table whose fallback or notes are stale", ("tests/test_dispatch.py",)),
    Mutant("dispatch-page-moved-inverted", "kernlog/render/dispatch.py",
           "    if moved:  # made from another", "    if not moved:  # made from another",
           "the page calls a current table one made from another sweep", ("tests/test_dispatch.py",)),
    Mutant("dispatch-pick-device-blind", "kernlog/library.py",
           "key = (tuple(shape), dtype, device, gpu)", "key = (tuple(shape), dtype, gpu)",
           "a pick made for the CPU is reused on the GPU", ("tests/test_dispatch.py",)),
    Mutant("dispatch-interpreter-unchecked", "kernlog/library.py",
           'os.environ.get("TRITON_INTERPRET") != "1"', 'os.environ.get("TRITON_INTERPRET") == "0"',
           "a Triton pick on the CPU without the interpreter is not passed over", ("tests/test_dispatch.py",)),
    Mutant("dispatch-stale-point-ranked", "kernlog/judge/dispatch.py",
           "    kept = {pt: revs for pt, revs in kept.items() if pt not in unranked}\n", "",
           "a point where a qualifying revision is stale still makes a class of what is left",
           ("tests/test_dispatch.py",)),
    Mutant("dispatch-any-stale-unranks", "kernlog/judge/dispatch.py",
           "        if name not in contenders:\n            continue\n", "",
           "a revision that qualifies nowhere unranks the points where it is stale", ("tests/test_dispatch.py",)),
    Mutant("dispatch-gpu-nearest", "kernlog/library.py",
           '    if mine is not None and how == "class":\n', "    if mine is not None:\n",
           "a GPU's own table also serves calls outside its classes (its nearest class)",
           ("tests/test_dispatch_gpus.py",)),
    Mutant("dispatch-gpu-on-cpu", "kernlog/library.py",
           '        own = self.gpu_tables.get(gpu) if device != "cpu" else None\n',
           "        own = self.gpu_tables.get(gpu)\n",
           "a GPU's own table read for a call on the CPU", ("tests/test_dispatch_gpus.py",)),
    Mutant("dispatch-gpu-primary-own", "kernlog/render/dispatch.py",
           "    return None if gpu == default else gpu\n", "    return gpu\n",
           "the GPU that makes dispatch.json named with --gpu writes a per-GPU table instead",
           ("tests/test_dispatch_gpus.py",)),
    Mutant("wrong-seen-ignores-regate", "kernlog/capture/todo.py",
           '        seen = r.known_wrong and not (opts.force or getattr(opts, "regate", False)) and \\\n',
           "        seen = r.known_wrong and \\\n",
           "--regate and --force no longer gate a known-wrong revision whose rejection stands",
           ("tests/test_known_wrong_seen.py",)),
    Mutant("wrong-seen-pass-counts", "kernlog/capture/todo.py",
           '    if entry.get("passed") is not False or not isinstance(key, dict):\n',
           '    if entry.get("passed") is None or not isinstance(key, dict):\n',
           "a stored pass of a known-wrong revision taken as its rejection", ("tests/test_known_wrong_seen.py",)),
    Mutant("wrong-seen-any-gate", "kernlog/capture/todo.py",
           '            and (key.get("libraries") or {}).get("kernlog_gate") == gatekey.gate_code_sha256()\n', "",
           "a rejection under older gate code taken as standing", ("tests/test_known_wrong_seen.py",)),
    Mutant("standing-own-gpu", "kernlog/render/steps.py",
           'if sw["gpu"] == lad["gpu"]["name"] and top == best_name:', 'if top == best_name:',
           "the first screen repeats the headline GPU's own sweep as another GPU's standing",
           ("tests/test_page_shape.py",)),
    Mutant("ties-across-runs", "kernlog/render/sweeps.py",
           ' and runs.get(r) == runs.get(best)\n', "\n",
           "a step timed in another run named a tie of the best step", ("tests/test_render_behaviours.py",)),
    Mutant("elsewhere-stale-unmarked", "kernlog/render/steps.py",
           """[where + (" (stale)" if row["stale"] else "") for where, row in rows] for name, rows in at.items()}""",
           """[where for where, row in rows] for name, rows in at.items()}""",
           "a step profiled elsewhere on an older source shown as current", ("tests/test_page_shape.py",)),
    # --- kernels: attention's rungs (the launchers' arithmetic and the backward's loop bounds) -----------
    Mutant("v2-split-dq-mid-late", "kernels/attention_backward/v2_split.py",
           "    mid = (start_m // BLOCK_N) * BLOCK_N\n", "    mid = (start_m // BLOCK_N + 1) * BLOCK_N\n",
           "the dq kernel's unmasked loop runs into the diagonal block", ("tests/test_attention_backward_split.py",)),
    Mutant("v2-split-dkdv-mid-early", "kernels/attention_backward/v2_split.py",
           "    mid = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, T)",
           "    mid = tl.minimum((start_n + BLOCK_N) // BLOCK_M * BLOCK_M, T)",
           "the dk/dv kernel's masked loop stops before the last query block that crosses the diagonal",
           ("tests/test_attention_backward_split.py",)),
    Mutant("v5-grid-tiles", "kernels/attention/v5_persistent.py",
           "return min(_sms(q.device.index), -(-T // v4_wgmma.BLOCK_M) * B * H)",
           "return min(_sms(q.device.index), T // v4_wgmma.BLOCK_M * B * H)",
           "the persistent grid counts whole tiles only, none for a partial last one",
           ("tests/test_attention_cuda.py",)),
    Mutant("legend-both-bars-always", "kernlog/render/templates/sweep.md.j2",
           "Every point meets {% if sw.has_copy %}both bars{% else %}its bar{% endif %}.",
           "Every point meets both bars.",
           "a sweep with no copy column says its points meet two bars",
           ("tests/test_report.py",)),
    Mutant("v5-round-group-unclamped", "kernels/attention/v5_persistent.py",
           "return min(B * H, max(1, sms // -(-T // v4_wgmma.BLOCK_M)))",
           "return max(1, sms // -(-T // v4_wgmma.BLOCK_M))",
           "a round's group counts more heads than there are, another candidate timed for the same order",
           ("tests/test_attention_cuda.py",)),
    Mutant("v5-orders-repeated", "kernels/attention/v5_persistent.py",
           "seen.setdefault(group(order, shape, sms), order)",
           "seen[order] = order",
           "v5's picker times one tile order twice where two orders make the same group",
           ("tests/test_attention_cuda.py",)),
    Mutant("v5-group-argument-late", "kernels/attention/v5_persistent.py",
           "numpy.int32(group(order, q.shape, _sms(q.device.index))), numpy.float32(scale * v4_wgmma.LOG2E))",
           "numpy.float32(scale * v4_wgmma.LOG2E), numpy.int32(group(order, q.shape, _sms(q.device.index))))",
           "the launcher passes the scale where the kernel reads the group, and the group as the scale",
           ("tests/test_attention_cuda.py",)),
    Mutant("compiled-op-ignored", "kernlog/frameworks.py",
           "build = compiled_op or (lambda compile_: compile_(op))",
           "build = lambda compile_: compile_(op)  # noqa: E731",
           "torch_compile compiles the op whole where its operator gave a compiled_op: a graph break, eager",
           ("tests/test_attention_backward.py",)),
    Mutant("compiled-grads-uncompiled", "kernels/attention_backward/__init__.py",
           "    fn = compile(forward)\n",
           "    fn = forward\n",
           "attention_backward's torch_compile reference runs its forward eagerly",
           ("tests/test_attention_backward.py",)),
    # --- a team's own repository: what the loader, check, show and report say -----------------------
    Mutant("cpu-skips-by-name", "kernlog/run/ladder.py",
           'return rev.kind == "cuda" or (rev.kind == "torch" and "compile" in rev.name)',
           'return rev.kind == "cuda" or "compile" in rev.name',
           "a Triton revision whose name says compile is skipped on the CPU: a wrong one passes check unseen",
           ("tests/test_cli.py",)),
    Mutant("again-without-interpreter", "kernlog/hints.py",
           'interp = "TRITON_INTERPRET=1 " if cpu and rev.kind == "triton" else ""',
           'interp = ""',
           "the same-inputs command of a Triton failure on the CPU stops at 'no GPU' when pasted",
           ("tests/test_check_errors.py",)),
    Mutant("declared-name-unchecked", "kernlog/registry.py",
           "    if kernel.name != folder:\n",
           "    if False:\n",
           "an operator named apart from its folder: list shows one name, check uses the other",
           ("tests/test_check_errors.py",)),
    Mutant("declared-profile-shape-unchecked", "kernlog/registry.py",
           "    if not _shape_ok(kernel.profile_shape):\n",
           "    if not kernel.profile_shape:\n",
           "profile_shape='8192x4096' accepted, and list shows it one character a dimension",
           ("tests/test_check_errors.py",)),
    Mutant("orphan-page-any-md", "kernlog/render/report.py",
           "if rel not in mine and text.startswith((PAGE.split(\"\\n\")[0], SWEEP_PAGE.split(\"\\n\")[0])))",
           "if rel not in mine)",
           "report deletes a page of the team's own in the reports folder as if kernlog wrote it",
           ("tests/test_render_layout.py",)),
    Mutant("orphan-page-prose-deleted", "kernlog/render/report.py",
           "return sorted((rel, not BLOCK.sub(\"\", text).strip()) for rel, text in found",
           "return sorted((rel, True) for rel, text in found",
           "report deletes a gone operator's page with the prose the team wrote on it",
           ("tests/test_render_layout.py",)),
    Mutant("where-the-operator-line-only", "kernlog/registry.py",
           "    mine = [f for f in frames if own(f)]\n",
           "    mine = [f for f in frames if own(f) and f.filename.endswith(\"__init__.py\")]\n",
           "an error in a helper module the operator imports is blamed on the operator's import line",
           ("tests/test_check_errors.py",)),
    Mutant("wrong-revision-told-to-profile", "kernlog/store/lookup.py",
           "    if not recs and side.revision in names and kernel.revision(side.revision).known_wrong:\n",
           "    if False:\n",
           "show tells a user to profile a known-wrong revision, which kernlog never profiles",
           ("tests/test_cli.py",)),
    Mutant("list-stops-at-a-broken-operator", "kernlog/render/listing.py",
           "        except KernlogError as exc:  # its folder's own mistake: named below, the others listed\n"
           "            lines.append(f\"{name}  CANNOT LOAD (below)\")\n"
           "            bad.append(exc)\n            continue\n",
           "        except KernlogError:  # its folder's own mistake\n            raise\n",
           "one operator's mistake hides every other operator from `kernlog list`",
           ("tests/test_check_errors.py",)),
    Mutant("notes-only-once-profiled", "kernlog/render/templates/kernel.md.j2",
           "{% if story %}\n{{ story }}\n\n{% endif %}\nNothing stored yet.",
           "Nothing stored yet.",
           "a team's notes stay off its page until its first GPU profile",
           ("tests/test_init.py",)),
    Mutant("kept-page-passes-check", "kernlog/render/publish.py",
           "        if kept:\n            raise KernlogError(kept[0])\n",
           "        if False:\n            raise KernlogError(kept[0])\n",
           "report --check passes while a gone operator's page with the team's prose is left behind",
           ("tests/test_render_layout.py",)),
    Mutant("spec-value-error-generic", "kernlog/registry.py",
           'if isinstance(e, ValueError) and inner.startswith("spec.py:"):',
           "if isinstance(e, ValueError):",
           "any ValueError in the team's code is read as spec's and loses its type",
           ("tests/test_check_errors.py",)),
    Mutant("trainable-forward-again", "kernels/attention_backward/trainable.py",
           "        v2_split.backward(q, k, v, do, ctx.scale, o, lse, out)\n",
           "        v2_split.attention_backward(q, k, v, do, ctx.scale, out)\n",
           "the training step's backward runs the forward again where autograd saved its o and lse",
           ("tests/test_attention_backward.py",)),
    Mutant("v5-no-v4-candidate", "kernels/attention/v5_persistent.py",
           "return mine + v4_wgmma.candidates(q, k, v, out)",
           "return mine + v3_fma.candidates(\"bf16\", q.shape[-1])",
           "v5's picker never offered v4's kernel, so it could not keep the rung before it",
           ("tests/test_attention_cuda.py",)),
    Mutant("nvtx-push-pop-only", "kernlog/capture/ncu.py",
           "        spans.extend(info.start_end_ranges())\n",
           "",
           "a kernel another thread launched inside kernlog's range (autograd's backward) is left out of the profile",
           ("tests/test_metrics.py",)),
    Mutant("nvtx-process-range-first", "kernlog/capture/ncu.py",
           "for name in [*reversed(stack), *reversed(spans)]:",
           "for name in [*reversed(spans), *reversed(stack)]:",
           "an imported report's kernels grouped by a start/end range around the push/pop range named",
           ("tests/test_metrics.py",)),
    Mutant("target-no-process-range", "kernlog/run/target.py",
           "    whole = nvtx.range_start(name)\n",
           "    whole = None\n",
           "the measured launch is in its thread's range alone: autograd's backward falls outside it again",
           ("tests/test_metrics.py",)),
    Mutant("ncu-include-push-pop-only", "kernlog/capture/ncurun.py",
           'cmd += ["--nvtx-include", f"{RANGE_PREFIX}{r}/", "--nvtx-include", f"{RANGE_PREFIX}{r}"]',
           'cmd += ["--nvtx-include", f"{RANGE_PREFIX}{r}/"]',
           "ncu selects the launching thread's range alone: a reference's autograd backward is never profiled",
           ("tests/test_profiler.py",)),
    Mutant("front-unswept-silent", "kernlog/render/arc.py",
           '"unswept": best if best and best != bar["name"] and vals.get(best) is None else None}',
           '"unswept": None}',
           "the front page passes an older step off as the page's best where the best was never swept there",
           ("tests/test_front_points.py",)),
    Mutant("profile-dtype-first-declared", "kernlog/spec.py",
           "return self.sweep_dtypes[0] if self.sweep_dtypes else self.dtypes[0]",
           "return self.dtypes[0]",
           "`kernlog profile attention` with no --dtype profiles fp32, a ladder its page never shows",
           ("tests/test_bench.py", "tests/test_report.py")),
    Mutant("front-unswept-when-swept", "kernlog/render/arc.py",
           '"unswept": best if best and best != bar["name"] and vals.get(best) is None else None}',
           '"unswept": best if best and best != bar["name"] else None}',
           "the front page calls the page's best not swept where the line quotes a faster tie of it instead",
           ("tests/test_front_points.py",)),
    Mutant("prediction-clock-unsaid", "kernlog/judge/predictions.py",
           '"clocks": clocks_apart(c["what"], row, rows, time_band) if slack else None})',
           '"clocks": None})',
           "a speed claim between profiles timed at SM clocks far apart reads as the code's ratio alone",
           ("tests/test_predictions.py",)),
    Mutant("prediction-clock-own", "kernlog/judge/predictions.py",
           "return (here, there) if here and there and apart(here, there, band) else None",
           "return (here, there) if here and there and apart(here, here, band) else None",
           "the clock check compares a profile's clock with itself",
           ("tests/test_predictions.py",)),
    Mutant("cu12-wide-tile-inverted", "kernels/matmul_relu/cuda_stages.py",
           'waves(M, N, (128, 256), sms) > WIDE_TILE_COST * waves(M, N, (192, 192), sms)',
           'waves(M, N, (128, 256), sms) < WIDE_TILE_COST * waves(M, N, (192, 192), sms)',
           "cu12 takes its own tile where cu10's fewer waves pay (3072^3), and cu10's where its own cost less",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu12-ring-without-k", "kernels/matmul_relu/cuda_stages.py",
           'if step.kernel not in ("mm_persistent", "mm_waves") or not K:',
           'if step.kernel not in ("mm_persistent", "mm_waves"):',
           "cu12's plan sends K = 0 to a kernel whose ring needs a k-tile",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu12-any-hopper-capability", "kernels/matmul_relu/cuda_stages.py",
           "if caps.capability != (9, 0):", "if caps.capability < (9, 0):",
           "a GPU past Hopper (TMA, no wgmma) reads cu12's clusters from sm_90a code instead of one skip line",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu13-every-aligned-stride", "kernels/matmul_relu/cuda_multicast.py",
           "return (2 * N) % 32 == 16", "return (2 * N) % 16 == 0",
           "cu13 multicasts B at every aligned N, where it ran 0.83x cu12 at 3072^3 and gains nothing elsewhere",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu13-clusters-past-resident", "kernels/matmul_relu/cuda_multicast.py",
           "(2 * min(clusters[2], pairs), 1, 1)", "(2 * pairs, 1, 1)",
           "cu13 launches a cluster a pair of tiles, more than are resident at once: a second wave of clusters",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu13-no-pair-resident", "kernels/matmul_relu/cuda_multicast.py",
           "or not slow_stride(N) or not clusters.get(2):", "or not slow_stride(N):",
           "a GPU where no pair of blocks is resident gets cu13's kernel on a grid of none",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu13-aligned-before-copy", "kernels/matmul_relu/cuda_multicast.py",
           "if not plain or not slow_stride(b.shape[1]):",
           "if not plain or not slow_stride(b.shape[1]) or not cl.is_aligned(a, b, out):",
           "a non-contiguous A off a 16-byte boundary takes cu12's slower kernel though its copy would be aligned",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu13-release-cluster", "kernels/matmul_relu/cuda/cu13_multicast.cu",
           'asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];',
           'asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];',
           "every stage's remote release fences at cluster scope: the form that ran 0.56-0.67x cu12",
           ("tests/test_matmul_cuda.py",)),
    Mutant("places-stale-own-gpu", "kernlog/render/steps.py",
           'by_gpu.setdefault(gpu.removesuffix(" (stale)"), []).append(head + stale)',
           "by_gpu.setdefault(gpu, []).append(head + stale)",
           "a stale profile's place is named under a GPU of its own, the mark doubled",
           ("tests/test_render_behaviours.py",)),
    Mutant("cu13-pair-rows-overlap", "kernels/matmul_relu/cuda/cu13_multicast.cu",
           "tm = 2 * tm + (int)rank;  // past M: zeros loaded, nothing stored", "tm = tm + (int)rank;",
           "the producer loads A for row tiles that overlap from pair to pair, so half the tiles get another's A",
           ("tests/test_matmul_cuda.py",)),
    Mutant("show-unknown-commit-as-a-commit", "kernlog/render/show.py",
           'if commit in (None, "unknown"):', "if commit is None:",
           "a profile taken before the first commit reads \"at commit unknown\" again, the fix unsaid",
           ("tests/test_mutants.py",)),
    Mutant("missing-library-as-own-package", "kernlog/run/loading.py",
           'library = LIBRARIES.get((exc.name or "").split(".")[0]) if missing else None',
           'library = LIBRARIES.get(exc.name or "") if missing else None',
           "a missing triton.language is told to install the user's own package",
           ("tests/test_check_errors.py",)),
    Mutant("kernels-folder-missing-is-empty", "kernlog/registry.py",
           "    lay = config.layout(root)\n    config.require_kernels(lay)\n    return lay.operators()",
           "    lay = config.layout(root)\n    return lay.operators()",
           "a misspelt or renamed kernels folder lists nothing, and report drops every page",
           ("tests/test_check_errors.py",)),
    Mutant("generated-frame-as-users-line", "kernlog/registry.py",
           'if f.filename.startswith("<"):  # code made at run time', "if False:  # code made at run time",
           "a declaration mistake run from inside the repository is placed at <string>:17, a dataclass's __init__",
           ("tests/test_check_errors.py",)),
    Mutant("source-missing-unsaid", "kernlog/registry.py",
           "why = declared_wrongly(kernel, name) or sources_missing(kernel, lay)",
           "why = declared_wrongly(kernel, name)",
           "a misspelt source path is a traceback in list and hashes nothing in check",
           ("tests/test_check_errors.py",)),
    Mutant("shape-ranks-unchecked", "kernlog/registry.py",
           "        if other is not None:\n            return (f\"the kernel's shapes differ in rank",
           "        if False:\n            return (f\"the kernel's shapes differ in rank",
           "a profile_shape of another rank than the check shapes is taken, to fail on the GPU later",
           ("tests/test_check_errors.py",)),
    Mutant("operator-error-as-revision-failure", "kernlog/run/gate.py",
           "except (Unsupported, OperatorError):", "except Unsupported:",
           "make_inputs raising is reported as every revision's failure, a seed replay suggested",
           ("tests/test_check_errors.py",)),
    Mutant("revision-syntax-error-traceback", "kernlog/run/loading.py",
           "    except SyntaxError as exc:  # a revision's module",
           "    except ZeroDivisionError as exc:  # a revision's module",
           "a revision's module that does not compile is a traceback, and the revisions after it go unchecked",
           ("tests/test_check_errors.py",)),
    Mutant("own-module-typo-as-package", "kernlog/run/loading.py",
           "if missing and exc.name and own and exc.name.split(\".\")[0] == own.split(\".\")[0]:",
           "if False:",
           "a misspelt import of the team's own module names the revision's first source and says install your package",
           ("tests/test_check_errors.py",)),
    Mutant("no-repository-as-typo", "kernlog/store/gitrefs.py",
           'if git_or_none(root, "rev-parse", "--git-dir") is None:', "if False:",
           "outside any git repository HEAD is called a ref of no commit of this repository",
           ("tests/test_compare.py",)),
    Mutant("raised-without-its-line", "kernlog/run/gate.py",
           '+ (f" (at {at})" if at else ""))', ")",
           "a crashing revision's line names no place in the team's code",
           ("tests/test_check_errors.py",)),
    Mutant("raised-error-figure-shown", "kernlog/run/gate.py",
           "return math.isfinite(self.rel_error) and (self.ok or not",
           "return True or (self.ok or not",
           "a revision that raised reads \"rel err inf\", a measured figure it never had",
           ("tests/test_check_errors.py",)),
    Mutant("diff-second-typo-late", "kernlog/store/lookup.py",
           "    for side in (a, b):  # both sides' names first", "    for side in ():  # both sides' names first",
           "a typo in diff's second side is reported as the first side's missing profile",
           ("tests/test_diff.py",)),
    Mutant("prediction-typo-taken", "kernlog/judge/predictions.py",
           'why = unknown_quantity(c["what"], revisions) if revisions is not None else ""', 'why = ""',
           "a claim on `speedupp` loads, to be judged \"not checkable\" on the GPU, the typo never said",
           ("tests/test_predictions.py",)),
    Mutant("shape-rank-of-side-unchecked", "kernlog/store/lookup.py",
           "if side.shape is not None and len(side.shape) != len(kernel.profile_shape):", "if False:",
           "show --shape 4096x4096x2 on a 2-D kernel says there is no such profile, not that the shape has one "
           "dimension too many",
           ("tests/test_diff.py",)),
    Mutant("bench-clock-of-every-batch", "kernlog/capture/bench.py",
           "sm_of.setdefault(fn, []).extend(timer.clocks.sm[before:])",
           "sm_of.setdefault(fn, []).extend(timer.clocks.sm)",
           "a revision's stored SM clock is every batch's so far, its neighbours' too",
           ("tests/test_bench.py",)),
    Mutant("bench-throttle-unsaid", "kernlog/capture/bench.py",
           "        if slow:\n            progress(f\"  {name}: {slow}\")",
           "        if False:\n            progress(f\"  {name}: {slow}\")",
           "a revision timed at a throttled clock in a sweep is not said",
           ("tests/test_bench.py",)),
    Mutant("sweep-clocks-apart-unmarked", "kernlog/render/sweeps.py",
           "clocks = clocks if all(clocks) and clocks_apart(*clocks, band) else None", "clocks = None",
           "a sweep ratio between a throttled step and a reference at full clock reads as the code's",
           ("tests/test_bench.py",)),
    Mutant("sweep-clocks-any-gap-marked", "kernlog/render/sweeps.py",
           "clocks = clocks if all(clocks) and clocks_apart(*clocks, band) else None",
           "clocks = clocks if all(clocks) and clocks_apart(*clocks, 0.0) else None",
           "every clock difference, however small, marks the ratio as partly the clock",
           ("tests/test_bench.py",)),
    Mutant("reference-always-the-operators", "kernlog/run/loading.py",
           "    try:\n        kernel.reference(inputs, out)\n    except Exception as again:",
           "    try:\n        raise ValueError(\"x\")\n    except Exception as again:",
           "a revision's answer the reference cannot read (a numpy array) is blamed on the operator, the revision "
           "never failed", ("tests/test_check_errors.py",)),
    Mutant("gate-process-operator-as-crash", "kernlog/run/target.py",
           "    except OperatorError as exc:  # the operator's own code",
           "    except ZeroDivisionError as exc:  # the operator's own code",
           "under profile the operator's make_inputs raising crashes each revision's gate process, kept as its failure",
           ("tests/test_check_errors.py",)),
    Mutant("own-line-in-the-stdlib", "kernlog/run/loading.py",
           "or p.resolve().is_relative_to(stdlib) or", "or",
           "an error raised inside json.loads is placed at json/decoder.py, not the team's line",
           ("tests/test_check_errors.py",)),
    Mutant("prediction-of-a-stored-revision-refused", "kernlog/render/facts.py",
           "claims = predictions.load(root, kernel.name, [*order, *sorted({r.revision for r in recs} - set(order))])",
           "claims = predictions.load(root, kernel.name, order)",
           "a claim on an imported revision outside the ladder stops report, as if a typo",
           ("tests/test_predictions.py",)),
    Mutant("report-in-a-shallow-clone", "kernlog/render/publish.py",
           'if gitrefs.git_or_none(root, "rev-parse", "--is-shallow-repository") == "true":', "if False:",
           "report in a depth-1 CI checkout redraws every history plot from one commit, and the job commits the loss",
           ("tests/test_history.py",)),
    Mutant("interpreter-shim-not-applied", "kernlog/run/loading.py",
           "            triton_interpreter.apply()\n", "            pass\n",
           "a correct Triton kernel looping over a runtime scalar fails check on the CPU with an interpreter error",
           ("tests/test_check_errors.py",)),
    Mutant("returned-none-unsaid", "kernlog/run/gate.py",
           "        if result is None:  # a revision's own mistake", "        if False:  # a revision's own mistake",
           "a launch returning None fails inside kernlog's reference call, an AttributeError blamed on nothing useful",
           ("tests/test_check_errors.py",)),
    Mutant("predictions-read-after-profiles", "kernlog/render/facts.py",
           "        claims = predictions.load(root, kernel.name, [*order,",
           "        claims = {} if not recs else predictions.load(root, kernel.name, [*order,",
           "a typo in predictions.toml passes report --check until the first profile is pushed",
           ("tests/test_predictions.py",)),
    Mutant("cu14-short-k", "kernels/matmul_relu/cuda_gsplit.py",
           "or K < GSPLIT_MIN_K or min(M, N) < 128:", "or min(M, N) < 128:",
           "cu14 splits K under 8192 too (200x384x4104 in 8 slices), where no split of its was ever timed",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu14-decode-rows", "kernels/matmul_relu/cuda_gsplit.py",
           "or K < GSPLIT_MIN_K or min(M, N) < 128:", "or K < GSPLIT_MIN_K:",
           "cu14 splits the decode rows (32 of them) into 128-row tiles, three quarters zeros",
           ("tests/test_matmul_cuda.py",)),
    Mutant("cu14-slices-past-wave", "kernels/matmul_relu/cuda_gsplit.py",
           "and tiles * 2 * s <= sms and", "and tiles * s <= sms and",
           "cu14 doubles its slices once past one wave of blocks: a second wave at 512x512x16384",
           ("tests/test_matmul_cuda.py",)),
    Mutant("other-shape-clock-unsaid", "kernlog/render/steps.py",
           '"clocks": predictions.clock_gap(row, ref, lad.get("wall_band", 0.0)),',
           '"clocks": None,',
           "another shape's ratio to the best reference between profiles timed at clocks far apart goes unmarked",
           ("tests/test_report.py",)),
    Mutant("throttle-band-inverted", "kernlog/judge/verdicts.py",
           "if not median or not top or median >= top * (1 - band):",
           "if not median or not top or median >= top * (1 + band):",
           "every timing pass under the GPU's boost clock is called throttled, however little",
           ("tests/test_clocks.py",)),
    Mutant("throttle-max-unread", "kernlog/run/clocks.py",
           '"sm_max_mhz": self.sm_max,', '"sm_max_mhz": None,',
           "the GPU's highest SM clock is never stored, so no throttled pass is ever said",
           ("tests/test_clocks.py",)),
    Mutant("fit-launches-on-hopper", "kernels/attention_backward/v1_tuned.py",
           "if caps.capability[0] == 9 and caps.smem_per_block_optin >= FITS_SM90:",
           "if caps.capability[0] == 9 and caps.smem_per_block_optin > FITS_SM90:",
           "the H100 and H200 launch every candidate to test its fit again, the cold gate's cost",
           ("tests/test_attention_backward_fit.py",)),
]


# --- running them -------------------------------------------------------------------------------------

def copy_tree(dest: Path) -> None:
    """The files git tracks or would track (not .venv, caches, mutants/) copied to `dest`."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, target)


def env_for(copy: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")


def pytest_cmd(tests, deselect=(), stop=True) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-rf",
           "-m", "not slow and not gpu and not ncu"]
    cmd += ["-x"] if stop else []
    for node in deselect:
        cmd += ["--deselect", node]
    return cmd + list(tests)


FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def baseline(copy: Path, tests: list[str], timeout: float) -> set[str]:
    """The tests that fail in the unmutated copy (work in progress elsewhere): left out of every run."""
    done = subprocess.run(pytest_cmd(tests, stop=False), cwd=copy, env=env_for(copy), capture_output=True,
                          text=True, timeout=timeout * 3)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mutants: the baseline run failed to run (exit {done.returncode}):\n"
                         f"{(done.stdout + done.stderr)[-3000:]}")
    return set(FAILED_LINE.findall(done.stdout))


def run_one(m: Mutant, copy: Path, deselect: set[str], timeout: float) -> tuple[str, float, str]:
    """(outcome, seconds, the first failing test or what went wrong)."""
    path = copy / m.file
    original = path.read_text()
    if original.count(m.old) != 1:
        return "stale", 0.0, f"its text is found {original.count(m.old)} times in {m.file}"
    path.write_text(original.replace(m.old, m.new))
    t0 = time.perf_counter()
    try:
        mine = sorted(d for d in deselect if any(d == t or d.startswith(t + "::") for t in m.tests))
        done = subprocess.run(pytest_cmd(m.tests, mine),
                              cwd=copy, env=env_for(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0, ""
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - t0
    if done.returncode == 0:
        return "survived", seconds, ""
    if done.returncode in (1, 2):  # a test failed, or the mutant broke collection (an import)
        first = FAILED_LINE.findall(done.stdout)
        return "killed", seconds, first[0] if first else "collection failed"
    return "error", seconds, (done.stdout + done.stderr)[-500:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-j", "--jobs", type=int, default=2, help="mutants run at once, each in its own copy")
    ap.add_argument("-k", dest="pattern", default="",
                    help="only the mutants whose id contains this (or one of these, comma-separated)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one mutant's tests may take")
    ap.add_argument("--goal", type=float, default=0.9, help="the share of non-equivalent mutants to kill")
    ap.add_argument("--list", action="store_true", help="list the mutants and whether each applies; run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the copies (their paths are printed)")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if any(p in m.id for p in args.pattern.split(","))]
    ids = [m.id for m in MUTANTS]
    assert len(set(ids)) == len(ids), "mutant ids must be unique"

    if args.list:
        stale = 0
        for m in chosen:
            n = (ROOT / m.file).read_text().count(m.old)
            stale += n != 1
            print(f"{'ok   ' if n == 1 else 'STALE'} {m.id:38} {m.file:32} {m.why}"
                  + (" [equivalent]" if m.equivalent else ""))
        print(f"{len(chosen)} mutants, {stale} stale")
        return 2 if stale else 0

    work = Path(tempfile.mkdtemp(prefix="kernlog-mutants-"))
    t_start = time.perf_counter()
    try:
        copies = [work / f"copy{i}" for i in range(max(1, args.jobs))]
        copy_tree(copies[0])
        for c in copies[1:]:
            shutil.copytree(copies[0], c, symlinks=True)
        probe = subprocess.run([sys.executable, "-c", "import kernlog; print(kernlog.__file__)"], cwd=copies[0],
                               env=env_for(copies[0]), capture_output=True, text=True)
        if not probe.stdout.strip().startswith(str(copies[0])):
            print(f"mutants: the copy imports kernlog from {probe.stdout.strip() or probe.stderr}, not itself",
                  file=sys.stderr)
            return 2
        tests = sorted({t for m in chosen for t in m.tests})
        print(f"baseline: {len(tests)} test files in {copies[0]}", flush=True)
        deselect = baseline(copies[0], tests, args.timeout)
        for node in sorted(deselect):
            print(f"  fails without any mutant, left out: {node}")

        todo: queue.Queue = queue.Queue()
        for m in chosen:
            todo.put(m)
        results: dict[str, tuple] = {}
        lock = threading.Lock()

        def worker(copy: Path):
            while True:
                try:
                    m = todo.get_nowait()
                except queue.Empty:
                    return
                outcome = run_one(m, copy, deselect, args.timeout)
                with lock:
                    results[m.id] = outcome
                    print(f"{outcome[0]:8} {outcome[1]:6.1f}s  {m.id:38} {outcome[2]}", flush=True)

        threads = [threading.Thread(target=worker, args=(c,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if args.keep:
            print(f"copies kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    by = {m.id: m for m in chosen}
    equivalent = [i for i, r in results.items() if by[i].equivalent]
    counted = [i for i in results if not by[i].equivalent]
    killed = [i for i in counted if results[i][0] == "killed"]
    survived = [i for i in counted if results[i][0] == "survived"]
    timeouts = [i for i in counted if results[i][0] == "timeout"]
    stale = [i for i in results if results[i][0] in ("stale", "error")]
    print(f"\n{len(results)} mutants in {time.perf_counter() - t_start:.0f} s: {len(killed)} killed, "
          f"{len(survived)} survived, {len(timeouts)} timed out, {len(equivalent)} equivalent, "
          f"{len(stale)} stale or broken")
    for i in survived:
        print(f"  SURVIVED {i}: {by[i].file}: {by[i].why}")
    for i in timeouts:
        print(f"  TIMEOUT {i}: rerun by hand with a longer --timeout")
    for i in equivalent:
        said = "KILLED, so not equivalent" if results[i][0] == "killed" else "equivalent"
        print(f"  {said} {i}: {by[i].equivalent}")
    for i in stale:
        print(f"  {results[i][0].upper()} {i}: {results[i][2]}")
    rate = len(killed) / len(counted) if counted else 1.0
    print(f"killed {rate:.0%} of the {len(counted)} non-equivalent mutants (goal {args.goal:.0%})")
    if stale:
        return 2
    return 0 if rate >= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
