"""The process that ncu profiles. It warms each revision up outside any NVTX range (module
load, NVRTC compile and Triton autotuning stay out of the report), then launches it once
inside an NVTX range named RANGE_PREFIX + revision, which ncu's --nvtx-include selects: a push/pop
range, and a start/end range of the same name around it, which is the process's and not the thread's,
so it also holds kernels that another thread launches for the call (autograd runs a CUDA backward on a
thread of its own: a reference that calls torch.autograd.grad profiled its forward's kernels alone).

Run as: python -m kernlog.run.target [--after GO PID] ROOT KERNEL SHAPE DTYPE REV [REV ...]
(--after: profile_revisions; `kernlog profile` starts its ncu process while the gates run.)

With `--time OUT.json` first, it runs each revision's timing pass instead (as `kernlog
profile` does, clocks read while it runs) and writes {rev: {"samples_ms", "clocks", "config"}} to
OUT.json, with the config each picked: `kernlog noise` times each run in a fresh process, as a
re-profile would (KERNLOG_PINNED, if set, names the picks to take).

With `--gate OUT.json ROOT KERNEL DEVICE REV [PART]` it runs one revision's whole correctness gate,
every declared dtype (gate.verdict), and writes {"outcome", "detail", "seconds"} to OUT.json (outcome "ok",
"failed", "unsupported", or "cannot_run" where its import fails here): `kernlog profile` gates
the revisions of a ladder in processes like this one, several at once (profiler.parallel_gates).
PART, a JSON {"dtypes", "shapes", "turn", "seed"}, runs that part of it alone (kernlog.run.parts).
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

RANGE_PREFIX = "kl."
# starts the line that says why this process stopped (kernlog.capture.profiler reads it)
TARGET_SAYS = "kernlog target: "
WARMUP = 3


def _write_whole(path: str, obj) -> None:
    """A JSON for the profiler that started this process, whole or absent when it reads it:
    written aside, then renamed (a scratch file in its temporary folder, never a profile)."""
    import json
    import os

    aside = Path(f"{path}.part")
    aside.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(aside, path)


def time_revisions(out_path: str, root: str, kernel_name: str, shape: str, dtype: str, revs: list[str]) -> None:
    import functools

    import torch

    from kernlog.registry import load_kernel
    from kernlog.run import picker
    from kernlog.run.clocks import Clocks
    from kernlog.spec import parse_shape
    from kernlog.timing import Timer

    kernel = load_kernel(Path(root), kernel_name)
    timer = Timer()
    results = {}
    for name in revs:
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = kernel.make_inputs(parse_shape(shape), dtype, gen, "cuda", kernel.cases[0])
        out = kernel.make_output(inputs)
        launch = kernel.revision(name).load()
        timer.clocks = Clocks()
        picker.forget_used()
        samples = timer.samples(functools.partial(launch, inputs, out))
        config = picker.used_config()
        results[name] = {"samples_ms": samples, "clocks": timer.clocks.summary(), "config": config}
        del inputs, out
        torch.cuda.empty_cache()
    _write_whole(out_path, results)


def gate_revision(out_path: str, root: str, kernel_name: str, device: str, name: str, part: str | None = None) -> None:
    import json
    import time

    from kernlog.errors import CannotRun, OperatorError, Unsupported
    from kernlog.registry import load_kernel
    from kernlog.run.gate import Part, verdict

    kernel = load_kernel(Path(root), kernel_name)
    told = json.loads(part) if part else {}
    share = Part(tuple(told["dtypes"]), tuple(told["shapes"]), told.get("turn", 0)) if told else None
    t0 = time.perf_counter()
    try:
        outcome, detail = verdict(kernel, kernel.revision(name), device, share, told.get("seed"))
    except Unsupported as exc:
        outcome, detail = "unsupported", str(exc)
    except CannotRun as exc:  # not run, so not judged: the profiler says it in its one line
        outcome, detail = "cannot_run", str(exc)
    except OperatorError as exc:  # the operator's own code: no verdict on the revision, said once by the caller
        outcome, detail = "operator", str(exc)
    _write_whole(out_path, {"outcome": outcome, "detail": detail, "seconds": round(time.perf_counter() - t0, 2)})


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--gate":
        gate_revision(*argv[1:7])
        return 0
    if argv and argv[0] == "--time":
        time_revisions(*argv[1:6], argv[6:])
        return 0

    after = None
    if argv and argv[0] == "--after":
        after, argv = (Path(argv[1]), int(argv[2])), argv[3:]
    profile_revisions(*argv[:4], argv[4:], after)
    return 0


GO_POLL_S = 0.05
# beside GO: {revision: seconds its load and first launch took under ncu, "": the process's start}
WARM_SUFFIX = ".warm.json"
# beside GO: {"passed": [...], "failed": [...]}, the revisions whose gates have ended (NcuRun.judged)
GATED_SUFFIX = ".gated.json"
# beside GO: {"told": when GO was read, "launched": {revision: when its profiled launch ended}}
CLOCK_SUFFIX = ".clock.json"
GO_WAIT_S = 3600.0


def parent_alive(parent: int) -> None:
    """Exit (status 3) if the profiling process `parent` is gone."""
    import os

    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        sys.exit(3)
    except PermissionError:
        pass


def wait_for_go(go: Path, parent: int, limit_s: float = GO_WAIT_S) -> dict:
    """{"revisions": [...], "pins": {...}} from `go` once it appears; exits (status 3) if the
    profiling process `parent` is gone or `limit_s` passes first."""
    import json
    import time

    end = time.monotonic() + limit_s
    while not go.exists():
        parent_alive(parent)
        if time.monotonic() > end:
            sys.exit(3)
        time.sleep(GO_POLL_S)
    return json.loads(go.read_text())


def as_gated(gated: Path, go: Path, parent: int, revs: list[str], first: tuple[str, ...] = ()):
    """`first` (those of `revs` not under test: the references), then each other of `revs` once
    `gated` ({"passed": [...], "failed": [...]}, written by the profiling process `parent` as
    each gate ends) names it passed, in that order; ends once each is named or GO appears.
    Warmed up after its gate, a revision loads from the compile caches the gate filled (NVRTC's,
    Triton's, Inductor's) instead of compiling again beside it; a reference (framework code)
    compiles at once, beside its gate (torch.compile's 8 s warm-up under ncu, after a 20 s gate)."""
    import json
    import time

    yield from (n for n in revs if n in first)
    left = [n for n in revs if n not in first]
    while left and not go.exists():
        parent_alive(parent)
        try:
            said = json.loads(gated.read_text())
        except (OSError, ValueError):  # not yet written
            said = {}
        passed = [n for n in said.get("passed", ()) if n in left]
        left = [n for n in left if n not in passed and n not in said.get("failed", ())]
        yield from passed
        if not passed:
            time.sleep(GO_POLL_S)


def profile_revisions(root: str, kernel_name: str, shape: str, dtype: str, revs: list[str],
                      after: tuple[Path, int] | None = None) -> None:
    """Each of `revs` warmed up, then launched once inside its NVTX range. With `after`
    (GO, PID): started before the gates are done, it loads and warms up the references at once
    and each other revision as its gate passes (as_gated; picks untimed and forgotten,
    kernlog.run.picker), then waits for GO, written by the profiling process PID, to name the
    revisions to profile and the picks to take."""
    import time

    started = time.perf_counter()
    import torch

    from kernlog.registry import load_kernel
    from kernlog.run import picker
    from kernlog.spec import parse_shape

    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: the tests only
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    kernel = load_kernel(Path(root), kernel_name)
    gen = torch.Generator(device=device).manual_seed(0)
    inputs = kernel.make_inputs(parse_shape(shape), dtype, gen, device, kernel.cases[0])
    out = kernel.make_output(inputs)
    loaded: dict = {}
    if after is not None:
        go, parent = after
        if not go.exists():  # the gates are still running: warm each up as its gate passes
            warm = {"": round(time.perf_counter() - started, 2)}  # "": the start (torch, CUDA, inputs)
            with picker.untimed():
                refs = tuple(r.name for r in kernel.revisions if r.role == "reference")
                for name in as_gated(go.with_suffix(GATED_SUFFIX), go, parent, revs, refs):
                    t0 = time.perf_counter()
                    try:
                        loaded[name] = kernel.revision(name).load()
                        loaded[name](inputs, out)
                        sync()
                    except Exception:  # noqa: BLE001 -- its timing pass meets it again
                        pass
                    warm[name] = round(time.perf_counter() - t0, 2)
            if device == "cuda":
                torch.cuda.empty_cache()  # what the warm-ups allocated, while it waits
            _write_whole(str(go.with_suffix(WARM_SUFFIX)), warm)
            go.with_suffix(".ready").touch()  # the profiling process may start its timing passes
        told = wait_for_go(go, parent)
        clock = {"told": time.time(), "launched": {}}
        picker.pin(told["pins"], go.with_suffix(".pins.json"))
        revs = [name for name in revs if name in told["revisions"]]
    pinned = picker.pins()
    if after is None and pinned is not None:  # on the GO path, pin() took them
        picker.take(pinned)
    for name in revs:
        launch = loaded.get(name) or kernel.revision(name).load()
        picker.forget_used()
        for _ in range(WARMUP):
            launch(inputs, out)
        sync()
        stray = picker.strays(pinned)
        if stray:  # it would profile a config its timing pass never timed
            print(f"{TARGET_SAYS}{name} picked configs its timing pass did not pin, so its profile would be of "
                  f"another config: {stray} (pinned: {pinned}); a tuning key must be the same text in every "
                  "process (kernlog.tuning.key_text)", file=sys.stderr)
            sys.exit(4)
        with measured_range(RANGE_PREFIX + name, torch.cuda.nvtx if device == "cuda" else None):
            launch(inputs, out)
            sync()
        if after is not None:
            clock["launched"][name] = time.time()
    if after is not None:  # when each was profiled: where the ncu pass's seconds went (NcuRun.clock)
        _write_whole(str(after[0].with_suffix(CLOCK_SUFFIX)), clock)


@contextlib.contextmanager
def measured_range(name: str, nvtx):
    """The range ncu selects a revision's measured launch by (`nvtx`: torch.cuda.nvtx, None off
    the GPU): a push/pop range of `name`, the launching thread's, inside a start/end range of the
    same name, the process's, which also holds the kernels other threads launch for the call
    (autograd's CUDA backward). Both are closed however the launch ends."""
    if nvtx is None:
        yield
        return
    whole = nvtx.range_start(name)
    nvtx.range_push(name)
    try:
        yield
    finally:
        nvtx.range_pop()
        nvtx.range_end(whole)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
