"""`kernlog bench`: the timing sweep over a kernel's bench shapes, every revision side by
side in one run, merged long-format into profiles/<gpu>/<kernel>/bench.csv (each row stamped
with its run, so the log can say when a table comes from several)."""
from __future__ import annotations

import functools
import io
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from . import gate, provenance, store, timing
from .errors import GateFailure, Unsupported
from .profiler import ceilings, require_gpu
from .spec import COPY, Kernel, Revision, Shape, format_shape

KEY = ["kernel", "revision", "shape", "dtype"]
# spec.COPY is the sweep's column for the roofline at each point's size: a device-to-device
# copy moving the kernel's fewest bytes (half read, half written), timed in the same run. A
# 1 GiB copy sets the log's ceiling; at 64 MB a copy is already a few percent under it.
# bench shapes are too large for a float64 CPU reference: there each revision is compared
# with the first reference revision's output, in fp32 on the GPU, with this tolerance.
AGREE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 4e-3}


def agree(out, ref) -> float:
    """Relative L2 distance of `out` from `ref` where `ref` is finite; inf if `out` is not
    finite there (an unwritten, still-poisoned element)."""
    out, ref = out.float(), ref.float()
    finite = ref.isfinite()
    if not out[finite].isfinite().all():
        return float("inf")
    num = (out[finite] - ref[finite]).norm().item()
    return num / max(ref[finite].norm().item(), 1e-30)


def _write(root: Path, gpu: dict, kernel: Kernel, rows: list[dict]) -> Path:
    """Merge this run's rows into bench.csv, replacing the (revision, shape, dtype) points it
    re-measured and keeping the rest."""
    import pandas as pd

    path = store.kernel_dir(root, gpu["slug"], kernel.name) / "bench.csv"
    new = pd.DataFrame(rows)
    if path.exists() and len(new):
        old = pd.read_csv(path, dtype={"shape": str})
        keys = set(map(tuple, new[KEY].astype(str).values))
        old = old[[tuple(k) not in keys for k in old[KEY].astype(str).values]]
        new = pd.concat([old, new], ignore_index=True)
    if len(new):
        buf = io.StringIO()
        new.sort_values(KEY + ["metric"], kind="stable").to_csv(buf, index=False, float_format="%.6g")
        store.write_atomic(path, buf.getvalue().encode())
    return path


def bench(root: Path, kernel: Kernel, revs: list[Revision], shapes: list[Shape], dtypes: list[str],
          budget_s: float = 0.5, progress: Callable[[str], None] = print) -> Path:
    require_gpu()
    import torch

    gpu = provenance.gpu_info()
    timer = timing.Timer()
    ceil = ceilings(root, gpu["slug"], timer, force=False)
    vers = provenance.versions()
    git = provenance.git_state(root)
    run = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # tells this run's points from a merged file's
    launchers, failed = {}, []
    for rev in revs:
        try:
            launchers[rev.name] = rev.load()
            bad = gate.first_failure(gate.check_revision(kernel, rev, "cuda", dtypes=dtypes,
                                                         launch=launchers[rev.name]))
        except Unsupported as exc:
            progress(f"{rev.name}: skipped: {exc}")
            failed.append(rev.name)
            continue
        if bad is not None:
            progress(f"{rev.name}: FAILED the gate, left out of the sweep: {bad.line()}")
            failed.append(rev.name)
    refs = [r.name for r in revs if r.role == "reference" and r.name not in failed]
    rows = []

    def point(name, sha, shape, dtype, s):
        nbytes, flops = kernel.bytes_moved(shape, dtype), kernel.flops(shape)
        values = {"median_ms": s["median_ms"], "p05_ms": s["p05_ms"], "p95_ms": s["p95_ms"],
                  "gbps": nbytes / s["median_ms"] / 1e6}
        if flops:
            values["tflops"] = flops / s["median_ms"] / 1e9
        for metric, value in values.items():
            rows.append({"kernel": kernel.name, "revision": name, "shape": format_shape(shape),
                         "dtype": dtype, "metric": metric, "value": value, "samples": s["n"],
                         "gpu": gpu["name"], "torch": vers["torch"], "triton": vers["triton"],
                         "commit": git["commit"], "run": run, "source_sha256": sha,
                         "copy_gbps": ceil["copy_gbps"], "matmul_tflops": ceil["matmul_bf16_tflops"]})
        progress(f"{kernel.name} {format_shape(shape):>13} {dtype} {name:<16} "
                 f"{s['median_ms'] * 1e3:9.1f} us {values['gbps']:8.0f} GB/s"
                 + (f" {values['tflops']:6.0f} TFLOP/s" if flops else ""))
    for shape in shapes:
        for dtype in dtypes:
            gen = torch.Generator(device="cuda").manual_seed(0)
            inputs = kernel.make_inputs(shape, dtype, gen, "cuda", kernel.cases[0])
            baseline = None
            # the reference runs first, so every other revision is compared with its output
            for rev in sorted(revs, key=lambda r: r.name != (refs[0] if refs else None)):
                if rev.name in failed:
                    continue
                launch = launchers[rev.name]
                out = kernel.make_output(inputs)
                gate.poison(out)
                result = launch(inputs, out)
                if refs and kernel.extra_check is None:
                    if rev.name == refs[0]:
                        baseline = result.clone()
                    elif baseline is not None and agree(result, baseline) > max(AGREE[dtype],
                                                                                gate.tolerance(kernel, dtype).l2):
                        progress(f"{rev.name} {format_shape(shape)} {dtype}: disagrees with {refs[0]} "
                                 f"({agree(result, baseline):.1e}); left out")
                        continue
                s = timing.summary(timer.samples(functools.partial(launch, inputs, out), budget_s=budget_s))
                point(rev.name, rev.sha256(), shape, dtype, s)
            if kernel.ceiling == "copy":
                src, dst = copy_buffers(kernel.bytes_moved(shape, dtype))
                copy_ms = timer.samples(lambda: dst.copy_(src), budget_s=budget_s)  # noqa: B023 (called here)
                point(COPY, None, shape, dtype, timing.summary(copy_ms))
                del src, dst
            del inputs
            torch.cuda.empty_cache()
            path = _write(root, gpu, kernel, rows)  # after every point: a cut-off sweep keeps what it measured
    path = _write(root, gpu, kernel, rows)
    if failed:
        raise GateFailure(f"{len(failed)} revision(s) failed the correctness gate: {', '.join(failed)}")
    return path


def copy_buffers(nbytes: int):
    """A random source of nbytes / 2 and a destination of the same size, on the GPU: copying
    one into the other moves `nbytes`, as many as the kernel's fewest."""
    import torch

    n = max(1, nbytes // 8)  # fp32 elements in each half
    return torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
