"""The correctness gate: every revision against a float64 reference, output poisoned first."""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from .spec import Kernel, Revision, Shape, format_shape

# Relative L2 error ||out - ref|| / ||ref|| allowed per output dtype. F.softmax itself lands at
# 1.1e-5 in fp32 on a 131073-long row (CPU); bf16 outputs carry ~2^-9 rounding per element.
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-3, "bf16": 1e-2}


@dataclass(frozen=True)
class CheckResult:
    revision: str
    shape: Shape
    dtype: str
    case: str
    rel_error: float
    ok: bool
    problem: str = ""

    def line(self) -> str:
        where = f"{self.revision} {format_shape(self.shape)} {self.dtype} {self.case}"
        return f"{where}: {'ok' if self.ok else 'FAIL ' + self.problem} (rel err {self.rel_error:.2e})"


def compare(out, ref, tol: float) -> tuple[float, str]:
    """(relative error, problem or ''). NaN in the reference must be NaN in the output;
    everywhere else the output must be finite and close."""
    import torch

    out = out.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if out.shape != ref.shape:
        return float("inf"), f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    ref_nan = torch.isnan(ref)
    if not torch.equal(torch.isnan(out) & ref_nan, ref_nan):
        return float("inf"), "NaN in the reference missing from the output"
    out, ref = out[~ref_nan], ref[~ref_nan]
    bad = ~torch.isfinite(out) & torch.isfinite(ref)
    if bad.any():
        return float("inf"), f"{int(bad.sum())} elements non-finite or unwritten"
    denom = torch.linalg.vector_norm(ref).item()
    err = torch.linalg.vector_norm(out - ref).item() / (denom if denom > 0 else 1.0)
    return err, "" if err <= tol else f"error {err:.2e} over tolerance {tol:.0e}"


def poison(out) -> None:
    import torch

    out.fill_(float("nan") if out.is_floating_point() else -1)
    if out.is_cuda:
        torch.cuda.synchronize()


def check_one(kernel: Kernel, rev: Revision, launch, shape: Shape, dtype: str, case: str,
              device: str, seed: int) -> CheckResult:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    inputs = kernel.make_inputs(shape, dtype, gen, device, case)
    out = kernel.make_output(inputs)
    poison(out)
    tol = kernel.tolerance.get(dtype, TOLERANCE[dtype])
    result = launch(inputs, out)
    if out.is_cuda:
        torch.cuda.synchronize()
    problem = ""
    if rev.kind != "torch" and result.data_ptr() != out.data_ptr():
        problem = "did not write into the output buffer it was given"
    err, cmp_problem = compare(result, kernel.reference(inputs, result), tol)
    problem = problem or cmp_problem
    if not problem and kernel.extra_check is not None:
        problem = kernel.extra_check(inputs, result) or ""
    return CheckResult(rev.name, shape, dtype, case, err, not problem, problem)


def _gist(exc: Exception) -> str:
    """First and last lines of an error (a compiler error puts its cause on the last line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1][:300]}"


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def check_revision(kernel: Kernel, rev: Revision, device: str, shapes=None, dtypes=None,
                   seed: int | None = None, launch=None) -> list[CheckResult]:
    """Run `rev` on every (shape, dtype, case) with fresh random inputs (a new seed each
    call unless given); a crash is a failed check, not an exception."""
    seed = fresh_seed() if seed is None else seed
    launch = launch or rev.load()
    results = []
    for i, shape in enumerate(shapes or kernel.check_shapes):
        for dtype in dtypes or kernel.dtypes:
            for case in kernel.cases:
                try:
                    results.append(check_one(kernel, rev, launch, shape, dtype, case, device,
                                             seed + 1000 * i + zlib.crc32(case.encode()) % 997))
                except Exception as exc:  # a crashing revision fails the gate with its reason
                    results.append(CheckResult(rev.name, shape, dtype, case, float("inf"), False,
                                               f"raised {type(exc).__name__}: {_gist(exc)}"))
    return results


def first_failure(results: list[CheckResult]) -> CheckResult | None:
    return next((r for r in results if not r.ok), None)
