"""The process that ncu profiles. It warms each revision up outside any NVTX range (module
load, NVRTC compile and Triton autotuning stay out of the report), then launches it once
inside a push/pop range named RANGE_PREFIX + revision, which ncu's --nvtx-include selects.

Run as: python -m kernlog.target ROOT KERNEL SHAPE DTYPE REV [REV ...]

With `--time OUT.json` first, it runs each revision's timing pass instead (as `kernlog
profile` does, clocks read while it runs) and writes {rev: {"samples_ms", "clocks", "config"}} to
OUT.json, with the config each picked: `kernlog noise` times each run in a fresh process, as a
re-profile would (KERNLOG_PINNED, if set, names the picks to take).

With `--gate OUT.json ROOT KERNEL DTYPE DEVICE REV` it runs one revision's correctness gate
(gate.verdict) and writes {"outcome", "detail", "seconds"} to OUT.json: `kernlog profile` gates
the revisions of a ladder in processes like this one, several at once (profiler.parallel_gates).
"""
from __future__ import annotations

import sys
from pathlib import Path

RANGE_PREFIX = "kl."
WARMUP = 3


def time_revisions(out_path: str, root: str, kernel_name: str, shape: str, dtype: str, revs: list[str]) -> None:
    import functools
    import json

    import torch

    from .clocks import Clocks
    from .registry import load_kernel
    from .spec import parse_shape
    from .store import dump_json, write_atomic
    from .timing import Timer

    kernel = load_kernel(Path(root), kernel_name)
    timer = Timer()
    results = {}
    for name in revs:
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = kernel.make_inputs(parse_shape(shape), dtype, gen, "cuda", kernel.cases[0])
        out = kernel.make_output(inputs)
        launch = kernel.revision(name).load()
        timer.clocks = Clocks()
        tuning = sys.modules.get("kernels.common.tuning")
        if hasattr(tuning, "USED"):
            tuning.USED.clear()
        samples = timer.samples(functools.partial(launch, inputs, out))
        tuning = sys.modules.get("kernels.common.tuning")
        config = tuning.used_config() if hasattr(tuning, "used_config") else {}
        results[name] = {"samples_ms": samples, "clocks": timer.clocks.summary(), "config": config}
        del inputs, out
        torch.cuda.empty_cache()
    write_atomic(Path(out_path), dump_json(json.loads(json.dumps(results))))


def gate_revision(out_path: str, root: str, kernel_name: str, dtype: str, device: str, name: str) -> None:
    import time

    from .errors import Unsupported
    from .gate import verdict
    from .registry import load_kernel
    from .store import dump_json, write_atomic

    kernel = load_kernel(Path(root), kernel_name)
    t0 = time.perf_counter()
    try:
        outcome, detail = verdict(kernel, kernel.revision(name), device, dtype)
    except Unsupported as exc:
        outcome, detail = "unsupported", str(exc)
    write_atomic(Path(out_path), dump_json({"outcome": outcome, "detail": detail,
                                            "seconds": round(time.perf_counter() - t0, 2)}))


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--gate":
        gate_revision(*argv[1:7])
        return 0

    import torch

    if argv and argv[0] == "--time":
        time_revisions(*argv[1:6], argv[6:])
        return 0

    from .registry import load_kernel
    from .spec import parse_shape

    root, kernel_name, shape, dtype, *revs = argv
    kernel = load_kernel(Path(root), kernel_name)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = kernel.make_inputs(parse_shape(shape), dtype, gen, "cuda", kernel.cases[0])
    out = kernel.make_output(inputs)
    for name in revs:
        launch = kernel.revision(name).load()
        for _ in range(WARMUP):
            launch(inputs, out)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE_PREFIX + name)
        launch(inputs, out)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
