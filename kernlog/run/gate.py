"""The correctness gate: every revision against a float64 reference, output poisoned first.

One relative L2 error over the whole output misses a local mistake: the last 8 of a 131072-long
softmax row doubled, or one bad row among thousands. So each output also passes per row (the
row's own relative L2 error) and per element (|out - ref| <= rtol |ref| + atol x the row's mean
|ref|), and a second launch into the poisoned buffer must repeat the first.

Inputs are drawn from a seed, a fresh one each run unless one is given (`kernlog check --seed
N`): every run meets new inputs, and the same seed draws the same inputs, so a failing case,
which names its seed and its first bad element, fails again the same way.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace

from kernlog.errors import CannotRun, OperatorError, Unsupported
from kernlog.run import picker
from kernlog.run.loading import blamed, import_problem, load, operators_own, own_line, runnable
from kernlog.run.loading import gist as _gist
from kernlog.spec import Kernel, Revision, Shape, format_shape, torch_dtype


def fresh_seed() -> int:
    """A seed for a run given none: fresh random inputs each run (a gate that always drew the
    same ones would stop finding anything new); the failing case names it to draw them again."""
    import secrets

    return secrets.randbelow(2**31)


@dataclass(frozen=True)
class Tolerance:
    l2: float  # relative L2 error ||out - ref|| / ||ref|| of the whole output
    row: float  # ... of each row of a 2-D output (the last dimension), relative to the row's norm
    rtol: float  # element-wise: |out - ref| <= rtol * |ref| + atol * (mean |ref| of its row)
    # atol is relative to the row's mean |ref|, not absolute: a 131072-long softmax row's
    # elements average 7.6e-6 (half of them under 1e-7), LayerNorm's and GeLU's near 1.
    atol: float


# Per output dtype, against float64. l2: F.softmax itself lands at 1.1e-5 in fp32 on a 131073-long
# row (CPU). row: a bf16 or fp16 row's error is its elements' rounding, which l2 bounds row by row
# too (one element truncated by Triton's interpreter: 2^-7 < 1e-2); an fp32 row's is computation,
# and each row has its own conditioning: LayerNorm's "shifted" 3x5 rows (mean 300, the spread of 5
# draws, at times 0.1) exceed 1e-4 in 1 draw of 80 and reach 3.6e-4 in 20000 (torch, CPU).
# rtol: fp32 rounds at 2^-24, but exp(a) taken as exp2(a log2 e) is off by |a| 2^-24, 2^-17.4 at
# |a| ~ 100 where fp32 runs out; bf16 rounds at 2^-8 (fp16 2^-11), and Triton's interpreter
# truncates (7.7e-3 ~ 2^-7 on its bf16 matmul, vector_add, rmsnorm). atol: cancellation, where an
# element is a small difference of large terms: GeLU's tanh form as bf16 ops (v0_unfused) loses
# 2.9e-3 at 1 + tanh(u) ~ 0, 2.5e-3 of its mean |ref|; those LayerNorm rows lose 6.4e-4 of theirs
# in fp32 (20000 draws; one lost 1.2e-3 and failed l2 too, as 14 do). fp16 has no kernel yet.
TOLERANCE = {
    "fp32": Tolerance(l2=1e-4, row=4e-4, rtol=2**-16, atol=2**-10),
    "fp16": Tolerance(l2=2e-3, row=2e-3, rtol=2**-9, atol=2**-10),
    "bf16": Tolerance(l2=1e-2, row=1e-2, rtol=2**-6, atol=2**-7),
}


def tolerance(kernel: Kernel, dtype: str) -> Tolerance:
    """TOLERANCE[dtype] with the kernel's override: a Tolerance, a dict of some of its fields, or
    a bare number, the relative-L2 tolerance (the format kernels have used), which also raises
    row and rtol to it: the error it allows, spread evenly (a row's sum off by that much scales
    every element of the row by it), must pass row by row and element by element too."""
    return _resolve(kernel.tolerance.get(dtype), dtype)


def _resolve(over, dtype: str) -> Tolerance:
    base = TOLERANCE[dtype]
    if over is None or isinstance(over, Tolerance):
        return over or base
    if isinstance(over, dict):
        return replace(base, **over)
    return replace(base, l2=over, row=max(base.row, over), rtol=max(base.rtol, over))


@dataclass(frozen=True)
class CheckResult:
    revision: str
    shape: Shape
    dtype: str
    case: str
    rel_error: float
    ok: bool
    problem: str = ""
    seed: int | None = None  # the seed given to the gate (check_revision's), which draws these inputs again

    def line(self) -> str:
        where = f"{self.revision} {format_shape(self.shape)} {self.dtype} {self.case}"
        seed = "" if self.ok or self.seed is None else f"; seed {self.seed}"
        err = f" (rel err {self.rel_error:.2e})" if self.has_error_figure() else ""
        return f"{where}: {'ok' if self.ok else 'FAIL ' + self.problem}{seed}{err}"

    def has_error_figure(self) -> bool:
        """Whether its error says something: not where it raised, or wrote an answer it was not asked for."""
        return math.isfinite(self.rel_error) and (self.ok or not self.problem.startswith(("raised ", "did not write")))


def compare(out, ref, tol: Tolerance | float | None = None) -> tuple[float, str]:
    """(relative L2 error of the whole, problem or ''). NaN in the reference must be NaN in the
    output, an infinity the same infinity; everywhere else the output must be finite and close:
    as a whole, row by row (the last dimension), and element by element. `tol` is a Tolerance,
    a bare relative-L2 number as in Kernel.tolerance, or None: TOLERANCE of the output's dtype.
    The problem says what is wrong and how much; `first_bad` says where to look first."""
    import torch

    out, ref, tol = _float64(out, ref, tol)
    if out.shape != ref.shape:
        return float("inf"), f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    ref_nan = torch.isnan(ref)
    if not torch.equal(torch.isnan(out) & ref_nan, ref_nan):
        return float("inf"), f"{int((ref_nan & ~torch.isnan(out)).sum())} NaN in the reference missing from the output"
    missed = torch.isinf(ref) & (out != ref)
    if missed.any():
        return float("inf"), f"{int(missed.sum())} infinities in the reference not in the output"
    finite = torch.isfinite(ref)
    bad = ~torch.isfinite(out) & finite
    if bad.any():
        return float("inf"), f"{int(bad.sum())} elements non-finite or unwritten"
    diff = torch.where(finite, out - ref, 0.0)
    zeroed = torch.where(finite, ref, 0.0)
    err = _rel_l2(diff, zeroed).item()
    if err > tol.l2:
        return err, f"error {err:.2e} over tolerance {tol.l2:.0e}"
    return err, _row_problem(diff, zeroed, tol.row) or _element_problem(out, diff, ref, finite, tol)


def first_bad(out, ref, tol: Tolerance | float | None = None) -> str:
    """Where to look first in an output `compare` fails: its first element wrong on its own (a NaN
    or an infinity of the reference lost, a value not finite, or one over the element tolerance),
    as the output's index, with what the reference expects and what came out; where there is none
    (an error spread thin over a row or the whole), the largest error. "" where the shapes differ."""
    import torch

    out, ref, tol = _float64(out, ref, tol)
    if out.shape != ref.shape or not out.numel():
        return ""
    finite = torch.isfinite(ref)
    diff = torch.where(finite, out - ref, 0.0)
    wrong = ((torch.isnan(ref) & ~torch.isnan(out)) | (torch.isinf(ref) & (out != ref))
             | (finite & ~torch.isfinite(out)) | (_ratio(diff, torch.where(finite, ref, 0.0), finite, tol) > 1))
    if wrong.any():
        return f"first bad element {_at(_first(wrong), out, ref)}"
    return f"largest error {_at(int(diff.abs().argmax()), out, ref)}"


def _first(mask) -> int:
    """The flat index of the first True of `mask` (argmax of bytes: no list of every index, which
    for a wrong 1024x131072 output would take a gigabyte)."""
    import torch

    return int(torch.argmax(mask.reshape(-1).to(torch.uint8)))


def _float64(out, ref, tol):
    """Output and reference in float64 on the reference's device (on the GPU a float64 reference of
    a model-sized tensor, 4096 rows of a 151936-token vocabulary, is compared in milliseconds, on
    the CPU in seconds), and the Tolerance `tol` stands for."""
    import torch

    if not isinstance(tol, Tolerance):
        tol = _resolve(tol, next((n for n in TOLERANCE if torch_dtype(n) == out.dtype), "fp32"))
    ref = ref.detach().to(torch.float64)
    return out.detach().to(ref.device, torch.float64), ref, tol


def _at(i: int, out, ref) -> str:
    """Element `i` (flat) as the output's index, with what the reference expects and what came out."""
    return f"{_unravel(i, ref.shape)}: expected {ref.flatten()[i].item():.6g}, got {out.flatten()[i].item():.6g}"


def _rel_l2(diff, ref, dim=None):
    import torch

    norm = torch.linalg.vector_norm(ref, dim=dim)
    return torch.linalg.vector_norm(diff, dim=dim) / torch.where(norm > 0, norm, 1.0)


def _rows(t):
    return t.reshape(-1, t.shape[-1]) if t.dim() else t.reshape(1, 1)


def _row_problem(diff, ref, tol: float) -> str:
    """Each row within `tol` of its own norm: the first row over it named (and the worst, where
    another). A row whose reference is all zero (NaN and inf left out) has no norm to be relative
    to: the element check holds it to zeros."""
    if diff.dim() < 2:
        return ""
    errs = _rel_l2(_rows(diff), _rows(ref), dim=1)
    over = errs > tol
    if not over.any():
        return ""
    i, w = _first(over), int(errs.argmax())

    def row(r: int):  # a row as the output's index: its number in 2-D, else its index but the last
        return r if diff.dim() == 2 else _unravel(r, ref.shape[:-1])

    worst = "" if w == i else f"; the worst, row {row(w)}, {errs[w].item():.2e}"
    return (f"row {row(i)} error {errs[i].item():.2e} over tolerance {tol:.0e} ({int(over.sum())} of {len(errs)} "
            f"rows{worst})")


def _ratio(diff, ref, finite, tol: Tolerance):
    """|out - ref| over what the element check allows there, rtol |ref| + atol x the row's mean |ref|
    (`ref` with its NaN and infinities zeroed, `finite` where they were not)."""
    rows, counted = _rows(ref).abs(), _rows(finite).sum(1, keepdim=True)
    scale = rows.sum(1, keepdim=True) / counted.clamp_min(1)  # the row's mean |ref|
    limit = (tol.rtol * rows + tol.atol * scale).reshape(ref.shape)
    return diff.abs() / limit  # 0/0 (an exact zero where zero is due) is NaN: not over


def _element_problem(out, diff, ref, finite, tol: Tolerance) -> str:
    import torch

    ratio = _ratio(diff, torch.where(finite, ref, 0.0), finite, tol)
    over = ratio > 1
    if not over.any():
        return ""
    i = int(torch.where(over, ratio, 0.0).argmax())
    return (f"{int(over.sum())} of {ref.numel()} elements over {tol.rtol:.1e}|ref| + {tol.atol:.1e} x row mean |ref|;"
            f" worst {_at(i, out, ref)}")


def poison(out) -> None:
    import torch

    out.fill_(float("nan") if out.is_floating_point() else -1)
    if out.is_cuda:
        torch.cuda.synchronize()


def check_one(kernel: Kernel, rev: Revision, launch, shape: Shape, dtype: str, case: str,
              device: str, seed: int, again: bool = True) -> CheckResult:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    inputs = operators_own(kernel, "make_inputs", shape, dtype, kernel.make_inputs, shape, dtype, gen, device, case)
    out = operators_own(kernel, "make_output", shape, dtype, kernel.make_output, inputs)
    poison(out)
    tol, first = tolerance(kernel, dtype), _launch(launch, inputs, out)
    try:
        err, problem = _judge(kernel, rev, inputs, out, first, tol)
    except Exception as exc:  # noqa: BLE001 -- the operator's where its reference raises on its own buffer too
        raise blamed(kernel, inputs, out, shape, dtype, exc) from None
    if again and not problem:
        problem = _second_launch(kernel, rev, launch, inputs, out, first.clone(), tol)
    return CheckResult(rev.name, shape, dtype, case, err, not problem, problem)


def _launch(launch, inputs, out):
    """launch(inputs, out), torch's generator put back after (framework dropout draws from it: one draw a input)."""
    import torch

    with torch.random.fork_rng(devices=[out.device] if out.is_cuda else []):
        result = launch(inputs, out)
        if result is None:  # a revision's own mistake, said as one (the reference would fail on it)
            raise TypeError("returned None: a launch returns the output it wrote (return out)")
        if out.is_cuda:
            torch.cuda.synchronize()
    return result


def _judge(kernel: Kernel, rev: Revision, inputs, out, result, tol: Tolerance) -> tuple[float, str]:
    """compare's verdict on `result`, where it fails with the first bad element (first_bad)."""
    ref = kernel.reference(inputs, result)
    err, problem = compare(result, ref, tol)
    where = first_bad(result, ref, tol) if problem else ""
    problem = f"{problem}; {where}" if where else problem
    if rev.kind != "torch" and result.data_ptr() != out.data_ptr():
        problem = (f"did not write into the output buffer it was given ({out.dtype} {tuple(out.shape)}) but "
                   f"returned another ({result.dtype} {tuple(result.shape)})")
    if not problem and kernel.extra_check is not None:
        problem = kernel.extra_check(inputs, result) or ""
    return err, problem


def _second_launch(kernel: Kernel, rev: Revision, launch, inputs, out, first, tol: Tolerance) -> str:
    """Launched again into the poisoned buffer, a revision must repeat its first output bit for
    bit (a stochastic one draws from the seed in its inputs), or, where it says it is not
    deterministic (atomics), pass the gate again on its own."""
    poison(out)
    second = _launch(launch, inputs, out)
    if not rev.deterministic:
        problem = _judge(kernel, rev, inputs, out, second, tol)[1]
        return problem and f"second launch: {problem}"
    if second.shape != first.shape:
        return f"second launch gave shape {tuple(second.shape)}, the first {tuple(first.shape)}"
    differ = _bits(first) != _bits(second)
    if not differ.any():
        return ""
    i = int(differ.nonzero()[0])
    return (f"second launch differs from the first in {int(differ.sum())} of {differ.numel()} elements; first at "
            f"{_unravel(i, first.shape)}: {first.flatten()[i].item():.6g} then {second.flatten()[i].item():.6g}")


def _bits(t):
    import torch

    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().reshape(-1).view(ints).cpu()


def _unravel(i: int, shape) -> list[int]:
    import torch

    return [int(j) for j in torch.unravel_index(torch.tensor(i), tuple(shape))]


def recheck(kernel: Kernel, rev: Revision, launch, inputs, out, dtype: str, shape: Shape | None = None,
            case: str | None = None) -> CheckResult:
    """A timing pass's output checked again after its many launches (the gate saw two; a workspace,
    a cache or an epoch a launch leaves behind can go wrong later). `out` is the buffer the pass
    launched into -- poison it before the pass, so an element no launch writes shows here -- and
    the reference is computed again from `inputs`. A framework reference (kind "torch") returns a
    tensor of its own instead: it is launched once more and that is checked. `shape` and `case`
    only label the result (default: out's shape, the kernel's first case)."""
    result = _launch(launch, inputs, out) if rev.kind == "torch" else out
    err, problem = _judge(kernel, rev, inputs, out, result, tolerance(kernel, dtype))
    return CheckResult(rev.name, tuple(shape or out.shape), dtype, case or kernel.cases[0], err, not problem,
                       problem and f"after the timing pass: {problem}")


@dataclass(frozen=True)
class Part:
    """A share of one revision's gate for a process of its own (kernlog.run.parts): its dtypes and
    its shapes (their places in the gate's shapes, which also seed their inputs), every case of
    each; `turn`: where its untimed picks start their rotation (picker.untimed)."""
    dtypes: tuple[str, ...]
    shapes: tuple[int, ...]
    turn: int = 0


def check_revision(kernel: Kernel, rev: Revision, device: str, shapes=None, dtypes=None,
                   seed: int | None = None, launch=None, part: Part | None = None) -> list[CheckResult]:
    """Run `rev` on every (shape, dtype, case) with random inputs drawn from `seed` (default
    a fresh_seed(); each case's inputs from the seed, the shape's place and the case's name, so
    `kernlog check --seed N` draws a failing case's inputs again); a crash is a failed check,
    not an exception. A revision this machine cannot run as set up (an import that fails, a
    Triton kernel with no GPU and no interpreter) raises CannotRun instead: nothing is known of
    its answers. On the CPU only the first case launches twice: Triton's interpreter runs a
    launch's programs one after another, so launches differ there only by state one leaves
    behind, not by a race (twice on every case took the Triton softmax's CPU gate from 89 s to 132 s).
    A launcher that picks its config per shape (kernlog/tuning.py) takes its candidates in turn here,
    untimed (picker.untimed): the gate checks what it runs, the timing pass's pick is checked again
    after that pass (recheck), and each sweep point after its own. `part`: only its dtypes and shapes."""
    seed = fresh_seed() if seed is None else seed
    if launch is None:
        runnable(kernel, rev, device)
        launch = load(kernel, rev, for_gate=True)
    if part is not None:
        dtypes = list(part.dtypes)
    with picker.untimed(part.turn if part else 0):  # a launcher's picks take its candidates in turn here
        return _check_cases(kernel, rev, launch, device, shapes, dtypes, seed, part and set(part.shapes))


def _check_cases(kernel: Kernel, rev: Revision, launch, device: str, shapes, dtypes, seed: int,
                 only: set[int] | None = None) -> list[CheckResult]:
    results = []
    for i, shape in enumerate(shapes or kernel.gate_shapes_of(rev)):
        if rev.refusal(shape) or (only is not None and i not in only):  # declined, declared: not the gate's
            continue
        for dtype in dtypes or kernel.dtypes:
            for case in kernel.cases:
                try:
                    result = check_one(kernel, rev, launch, shape, dtype, case, device,
                                       seed + 1000 * i + zlib.crc32(case.encode()) % 997,
                                       again=device != "cpu" or case == kernel.cases[0])
                except (Unsupported, OperatorError):  # skipped by the caller; the operator's code, said once
                    raise
                except ImportError as exc:  # a launcher importing lazily: not run, so not judged
                    raise CannotRun(import_problem(kernel, rev, exc)) from None
                except Exception as exc:  # a crashing revision fails the gate with its reason, and its line
                    at = own_line(exc)
                    result = CheckResult(rev.name, shape, dtype, case, float("inf"), False,
                                         f"raised {type(exc).__name__}: {_gist(exc)}" + (f" (at {at})" if at else ""))
                results.append(replace(result, seed=seed))
    return results


def first_failure(results: list[CheckResult]) -> CheckResult | None:
    return next((r for r in results if not r.ok), None)


def summary(results: list[CheckResult]) -> tuple:
    """("ok", {"cases", "worst_rel_error"}) or ("failed", the first failure's line, which names
    its shape, dtype and case)."""
    bad = first_failure(results)
    if bad is not None:
        return ("failed", bad.line())
    return ("ok", {"cases": len(results), "worst_rel_error": max((r.rel_error for r in results), default=0.0)})


def verdict(kernel: Kernel, rev: Revision, device: str, part: Part | None = None, seed: int | None = None) -> tuple:
    """The whole gate of one revision for `kernlog profile`, before any of it is timed: every
    dtype the kernel declares and every case, whichever dtype is profiled (a kernel wrong in
    bf16 alone must not be profiled, and ranked, in fp32); `summary` of its results. `part`:
    that share of it alone (kernlog.run.parts puts the shares back together). Raises
    Unsupported where the GPU lacks what it needs."""
    return summary(check_revision(kernel, rev, device, dtypes=list(kernel.dtypes), seed=seed, part=part))
