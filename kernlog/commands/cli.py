"""The click CLI: each command parses, makes one library call, and turns kernlog's typed
errors into one line on stderr and a non-zero exit."""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from kernlog.errors import KernlogError
from kernlog.spec import format_shape, parse_shape


def _root(ctx) -> Path:
    from kernlog.registry import find_root

    return find_root(ctx.obj.get("root"))


def handled(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KernlogError as exc:
            click.echo(f"kernlog: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("kernlog: interrupted; nothing partial was kept", err=True)
            sys.exit(130)
    return wrapper


def _shape(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_shape(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _revisions(kernel, names):
    if not names:
        return list(kernel.revisions)
    known = {r.name: r for r in kernel.revisions}
    bad = [n for n in names if n not in known]
    if bad:
        raise KernlogError(f"unknown revision {bad[0]!r} of {kernel.name}; known: {', '.join(known)}")
    return [known[n] for n in names]


DTYPE = click.Choice(["fp32", "bf16", "fp16"])
SHAPE = click.option("--shape", callback=_shape, metavar="ROWSxCOLS", help="Shape, e.g. 8192x4096.")
REVS = click.option("--rev", "revs", multiple=True, metavar="R", help="Only this revision (repeatable).")


@click.group()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Repository root (default: the nearest folder above holding kernels/).")
@click.version_option(package_name="kernlog")
@click.pass_context
def main(ctx, root):
    """A kernel worklog: profile every revision under ncu, diff them, render KERNEL_LOG.md."""
    ctx.ensure_object(dict)["root"] = root


@main.command("list")
@click.pass_context
@handled
def list_cmd(ctx):
    """Kernels, their revisions, and which are profiled (and stale) on which GPU. A profile
    that fails verification is marked, named on stderr with its fix, and the exit is non-zero."""
    from kernlog.judge.verdicts import stale
    from kernlog.registry import kernel_names, load_kernel
    from kernlog.store.profiles import ProfileError, bench_hashes, iter_profiles, report_hashed

    root = _root(ctx)
    stored, lines, bad, unhashed = {}, [], [], 0
    for rec in iter_profiles(root, bad="yield"):
        if isinstance(rec, ProfileError):
            bad.append(rec)
            if rec.ident:
                gpu, kernel_name, rev_name, shape, dtype = rec.ident
                stored.setdefault((kernel_name, rev_name), []).append(
                    f"{gpu} {format_shape(shape)} {dtype} UNREADABLE ({rec.short})")
            continue
        unhashed += not report_hashed(rec)
        stored.setdefault((rec["kernel"], rec["revision"]), []).append(rec)
    for name in kernel_names(root):
        kernel = load_kernel(root, name)
        lines.append(f"{name}  (profile shape {format_shape(kernel.profile_shape)}, dtypes {', '.join(kernel.dtypes)})")
        swept = bench_hashes(root, name)
        current = {rev.name: rev.sha256() for rev in kernel.revisions}
        for rev in kernel.revisions:
            recs = stored.get((name, rev.name), [])
            where = ", ".join(sorted(r if isinstance(r, str) else  # str: a bad file, marked above
                                     f"{r['gpu']['slug']} {format_shape(tuple(r['shape']))} {r['dtype']}"
                                     + (" STALE" if stale(r["source_sha256"], current, rev.name) else "")
                                     + (" (report under its staged name: a save was interrupted)"
                                        if r["ncu"]["report"].startswith(".") else "")
                                     for r in recs))
            points = []
            for gpu, hashes in sorted((g, h) for (g, r), h in swept.items() if r == rev.name):
                old = sum(stale(h, current, rev.name) for h in hashes)
                points.append(f"{gpu} {len(hashes)} point{'s' * (len(hashes) != 1)}"
                              + (f" ({old} STALE)" if old else ""))
            lines.append(f"  {rev.name:<18} {rev.kind:<6} {rev.role:<11} {where or 'not profiled'}"
                         + (f"; swept: {', '.join(points)}" if points else ""))
    if unhashed:
        lines.append(f"note: {unhashed} profile(s) predate report hashes: their .ncu-rep is checked by size only "
                     "until re-profiled")
    click.echo("\n".join(lines))
    for err in bad:
        click.echo(f"kernlog: {err}", err=True)
    if bad:
        ctx.exit(bad[0].exit_code)


@main.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to run (default: cuda if a GPU is visible, else cpu; cpu skips CUDA C revisions).")
@click.option("--dtype", type=DTYPE, multiple=True)
@click.pass_context
@handled
def check(ctx, kernel_name, revs, device, dtype):
    """Run the correctness gate only: each revision against float64 on fresh random inputs."""
    from kernlog.errors import GateFailure, Unsupported
    from kernlog.registry import load_kernel
    from kernlog.run import gate

    root = _root(ctx)
    kernel = load_kernel(root, kernel_name)
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    failed = []
    for rev in _revisions(kernel, revs):
        if device == "cpu" and (rev.kind == "cuda" or "compile" in rev.name):
            click.echo(f"{rev.name}: skipped on the CPU")
            continue
        try:
            results = gate.check_revision(kernel, rev, device, dtypes=list(dtype) or None)
        except Unsupported as exc:
            click.echo(f"{rev.name}: skipped: {exc}")
            continue
        bad = gate.first_failure(results)
        worst = max(r.rel_error for r in results)
        click.echo(f"{rev.name}: {'ok' if bad is None else 'FAIL'} ({len(results)} cases, worst rel err {worst:.1e})"
                   + ("" if bad is None else f"\n  {bad.line()}"))
        if bad is not None:
            failed.append(rev.name)
    if failed:
        raise GateFailure(f"failed the correctness gate: {', '.join(failed)}")


@main.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@SHAPE
@click.option("--dtype", type=DTYPE, default=None, help="Default: the kernel's first dtype.")
@click.option("--force", is_flag=True, help="Re-profile and replace existing profiles.")
@click.option("--clock-control", type=click.Choice(["base", "none", "reset"]), default="none", show_default=True,
              help="As ncu's --clock-control; 'none' leaves clocks as the timing pass sees them.")
@click.option("--cache-control", type=click.Choice(["all", "none"]), default="all", show_default=True,
              help="As ncu's --cache-control.")
@click.option("--section", "sections", multiple=True, help="ncu section (repeatable; default: kernlog's list).")
@click.option("--at", "at", metavar="REF", help="The revisions as commit REF had them (into .../<kernel>/at/).")
@click.option("--range", "range_", metavar="A..B", help="--at each commit of A..B, oldest first.")
@click.option("--gpus", type=click.IntRange(min=1), default=None, metavar="N",
              help="Spread the revisions (or --range's commits) over N of the host's GPUs, a process each "
                   "(default 1).")
@click.option("--gate-workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Gate N revisions at once, a process each (default: half the cores, at most 8; 1: one by one).")
@click.pass_context
@handled
def profile(ctx, kernel_name, revs, shape, dtype, force, clock_control, cache_control, sections, at, range_, gpus,
            gate_workers):
    """Gate, time and ncu-profile a kernel's revisions into profiles/ (needs a GPU and ncu).

    With --at or --range, each commit's tree is exported (the work tree is never touched) and
    profiled by a process of its own; a revision whose source hash is already profiled on this
    GPU is skipped, and a commit that fails is recorded in at/<commit>/failed.json and skipped.
    --range visits only commits that change kernels/.

    With --gpus N the revisions (or the commits) are dealt out to N GPUs, a process per
    GPU, and each profile names the GPU it ran on."""
    from kernlog.capture.profiler import Options, profile_on_gpus
    from kernlog.registry import load_kernel

    root = _root(ctx)
    if at or range_:
        from kernlog.capture.at_commit import profile_commits

        opts = dict(revs=revs, shape=shape, dtype=dtype, force=force, clock_control=clock_control,
                    cache_control=cache_control, sections=sections)
        gpu_list = None
        if gpus is not None:
            from kernlog.run.fanout import visible_gpus

            gpu_list = (visible_gpus() or ["0"])[:gpus]
        for path in profile_commits(root, kernel_name, at, range_, opts, progress=lambda s: click.echo(s, err=True),
                                    gpus=gpu_list):
            click.echo(str(path.relative_to(root)))
        return
    kernel = load_kernel(root, kernel_name)
    opts = Options(shape=shape, dtype=dtype, force=force, clock_control=clock_control, cache_control=cache_control,
                   gate_workers=gate_workers)
    if sections or kernel.sections:
        opts.sections = tuple(sections or kernel.sections)
    written = profile_on_gpus(root, kernel, _revisions(kernel, revs), opts, gpus,
                              progress=lambda s: click.echo(s, err=True))
    for path in written:
        click.echo(str(path.relative_to(root)))


@main.command()
@click.argument("kernel_name", metavar="KERNEL", required=False)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
@click.pass_context
@handled
def prune(ctx, kernel_name, dry_run):
    """Remove the .ncu-rep reports of --at entries (profiles/<gpu>/<kernel>/at/), keeping their
    JSONs: metrics, samples and hot spots stay, each JSON says the report was pruned and how
    to make it again. Today's profiles keep their reports."""
    from kernlog.store.profiles import prune_reports

    root = _root(ctx)
    removed, freed = prune_reports(root, kernel_name, dry_run)
    for path in removed:
        click.echo(str(path.relative_to(root)))
    click.echo(f"{'would free' if dry_run else 'freed'} {freed / 1e6:.1f} MB in {len(removed)} report(s)", err=True)


@main.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@click.option("--shape", "shapes", callback=lambda c, p, v: [_shape(c, p, s) for s in v], multiple=True,
              metavar="ROWSxCOLS", help="Only this shape (repeatable; default: the kernel's bench shapes).")
@click.option("--family", "families", multiple=True, metavar="NAME",
              help="The members of this shape family (repeatable; 'all': every family the kernel declares).")
@click.option("--dtype", type=DTYPE, multiple=True)
@click.option("--budget", type=float, default=0.5, show_default=True, help="Seconds of timing per point.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Interleaved runs per point (3+: the log judges a gap inside their spread a tie).")
@click.pass_context
@handled
def bench(ctx, kernel_name, revs, shapes, families, dtype, budget, repeat):
    """Time every revision side by side over the kernel's bench shapes (needs a GPU)."""
    from kernlog.capture.bench import bench as run
    from kernlog.registry import load_kernel

    root = _root(ctx)
    kernel = load_kernel(root, kernel_name)
    if families:
        try:
            shapes = [*shapes, *(s for s in kernel.family_shapes(families) if s not in shapes)]
        except KeyError as exc:
            raise KernlogError(exc.args[0]) from None
    shapes = list(shapes) or list(kernel.bench_shapes)
    path = run(root, kernel, _revisions(kernel, revs), shapes, list(dtype) or list(kernel.dtypes), budget,
               progress=click.echo, repeat=repeat)
    click.echo(str(path.relative_to(root)))


def _lookup(root, rev, shape, dtype, gpu):
    from kernlog.store.lookup import parse_side, resolve_one

    return resolve_one(root, parse_side(rev, shape, dtype, gpu))


LOOKUP = [SHAPE, click.option("--dtype", type=DTYPE, default=None),
          click.option("--gpu", default=None, metavar="SLUG", help="GPU slug, e.g. nvidia-h100-80gb-hbm3.")]


def lookup_options(fn):
    for opt in reversed(LOOKUP):
        fn = opt(fn)
    return fn


def one_profile_command(fn):
    """A command on one stored revision: KERNEL/REVISION[@SELECTOR], --shape/--dtype/--gpu, --format."""
    fn = handled(fn)
    fn = click.pass_context(fn)
    fn = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")(fn)
    fn = lookup_options(fn)
    fn = click.argument("rev", metavar="KERNEL/REVISION[@SELECTOR]")(fn)
    return main.command()(fn)


@one_profile_command
def show(ctx, rev, shape, dtype, gpu, fmt):
    """One stored revision's metrics and ncu findings."""
    from kernlog.render.show import render

    click.echo(render(_root(ctx), _lookup(_root(ctx), rev, shape, dtype, gpu), fmt))


@one_profile_command
def history(ctx, rev, shape, dtype, gpu, fmt):
    """A revision's profiles across the commits that stored them, each judged against the one
    before (steps: faster or slower beyond the noise band). Any entry is a diff side:
    `kernlog diff COMMIT:KERNEL/REVISION KERNEL/REVISION`."""
    from kernlog.judge.history import render, timelines
    from kernlog.store.lookup import parse_side

    found = timelines(_root(ctx), parse_side(rev, shape, dtype, gpu))
    if fmt == "json":
        click.echo(json.dumps(found[0] if len(found) == 1 else found, indent=1, sort_keys=True))
    else:
        click.echo("\n\n".join(render(t, fmt) for t in found))


@main.command()
@click.argument("rev_a", metavar="REV1")
@click.argument("rev_b", metavar="REV2")
@lookup_options
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text")
@click.option("--all", "all_rows", is_flag=True, help="Also list metrics that did not move.")
@click.option("--retime", is_flag=True, help="Time both sides again, interleaved, on this GPU, and judge on that.")
@click.option("--rounds", type=click.IntRange(2, 1000), default=20, show_default=True,
              help="--retime: rounds of A then B, each a batch of launches with L2 flushed.")
@click.pass_context
@handled
def diff(ctx, rev_a, rev_b, shape, dtype, gpu, fmt, all_rows, retime, rounds):
    """What moved from REV1 to REV2, judged against noise.

    REV is [COMMIT:]KERNEL/REVISION[@SHAPE.DTYPE.GPU] (any part optional, any order), e.g.
    softmax/v7_bf16_packed@8192x4096.bf16, HEAD~3:softmax/v5_tuned (as that commit stored it),
    or a profile's .json path."""
    from kernlog.judge.diff import render, run
    from kernlog.store.lookup import parse_side

    root = _root(ctx)
    d = run(root, parse_side(rev_a, shape, dtype, gpu), parse_side(rev_b, shape, dtype, gpu),
            retime_rounds=rounds if retime else 0)
    click.echo(render(d, fmt, all_rows))


@main.command()
@click.argument("base", metavar="BASE")
@click.argument("head", metavar="[HEAD]", required=False)
@click.option("--threshold", type=float, default=0.03, show_default=True, metavar="FRACTION",
              help="A slower pair regresses only beyond the noise band and by more than this (0.05: 5%).")
@click.option("--allow-different-setup", is_flag=True,
              help="Judge pairs whose GPU, driver or ncu differ (refused by default); the header says so.")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md")
@click.pass_context
@handled
def compare(ctx, base, head, threshold, allow_different_setup, fmt):
    """Every profile stored at git ref BASE against HEAD (a ref, or the work tree's profiles/),
    judged as diff judges: the CI gate. Exit 0: no regression; 1: a revision is slower beyond
    the noise band (and --threshold); 2: bad input (unknown ref, a profile failing verification)."""
    from kernlog.judge.compare import run

    text, status = run(_root(ctx), base, head, threshold, allow_different_setup, fmt)
    click.echo(text)
    ctx.exit(status)


@main.command("import")
@click.argument("report_path", metavar="REPORT.ncu-rep", type=click.Path(path_type=Path))
@click.option("--kernel", "kernel_name", required=True, metavar="K", help="The kernel it belongs to.")
@click.option("--rev", "rev_name", required=True, metavar="R", help="Its revision name (need not be in the ladder).")
@click.option("--shape", metavar="ROWSxCOLS", help="Default: the kernel's profile shape.")
@click.option("--dtype", metavar="DTYPE", help="Default: the kernel's first dtype.")
@click.option("--range", "range_name", metavar="NAME", help="Only the kernels inside this NVTX push/pop range.")
@click.option("--force", is_flag=True, help="Replace a stored profile of that name.")
@click.pass_context
@handled
def import_cmd(ctx, report_path, kernel_name, rev_name, shape, dtype, range_name, force):
    """Bring in an ncu report kernlog did not capture (plain `ncu -o`, another machine)."""
    from kernlog.capture.importer import import_report

    root = _root(ctx)
    path = import_report(root, report_path, kernel_name, rev_name, shape, dtype, range_name, force,
                         progress=lambda s: click.echo(s, err=True))
    click.echo(str(path.relative_to(root)))


@main.command()
@click.argument("revs", nargs=-1, required=True, metavar="KERNEL/REVISION...")
@SHAPE
@click.option("--dtype", type=DTYPE, default=None, help="Default: each kernel's first dtype.")
@click.option("--runs", type=click.IntRange(3, 50), default=5, show_default=True,
              help="Times each revision is timed and profiled (A/A), interleaved.")
@click.pass_context
@handled
def noise(ctx, revs, shape, dtype, runs):
    """Measure run-to-run noise of each metric (needs a GPU and ncu); stored for diff's bands."""
    from kernlog.capture.noise_runs import calibrate

    root = _root(ctx)
    for path in calibrate(root, list(revs), shape, dtype, runs, progress=lambda s: click.echo(s, err=True)):
        click.echo(str(path.relative_to(root)))


@main.command()
@click.option("--check", "check_only", is_flag=True,
              help="Exit non-zero if KERNEL_LOG.md or a plot it links differs from what profiles/ renders "
                   "(plots by the digest of their data: nothing is drawn).")
@click.pass_context
@handled
def report(ctx, check_only):
    """Render KERNEL_LOG.md (and reports/*.svg) from profiles/ alone."""
    from kernlog.registry import kernel_names, load_kernel
    from kernlog.render import prose
    from kernlog.render import report as rpt
    from kernlog.store.profiles import write_atomic

    root = _root(ctx)
    kernels = [load_kernel(root, n) for n in kernel_names(root)]
    sections = rpt.collect(root, kernels)
    bad = rpt.unreadable(sections)
    text = rpt.render(root, kernels, sections)
    path = root / rpt.LOG
    if check_only:
        if not bad and (not path.exists() or path.read_text() != text):
            raise KernlogError(f"{rpt.LOG} is out of date: run `kernlog report` and commit the result")
        prose.check(text)
        stale_plots = [] if bad else rpt.stale_plots(root, sections)
        if stale_plots:
            raise KernlogError(f"{len(stale_plots)} plot(s) out of date ({'; '.join(stale_plots)}): "
                               "run `kernlog report` and commit the result")
        if not bad:
            click.echo(f"{rpt.LOG} and its plots are up to date")
    else:
        # Written even with bad files: the log names each where its figures would be, and the
        # exit below is non-zero, so the gap is never silent.
        write_atomic(path, text.encode())
        plots = rpt.plot_all(root, sections)
        for n, fig in prose.unsourced(text):
            click.echo(f"warning: {rpt.LOG} line {n}: the figure {fig!r} comes from no profile "
                       "(`report --check` fails on it)", err=True)
        click.echo(f"wrote {rpt.LOG}" + (f" and {len(plots)} plot(s) in reports/" if plots else ""))
    for line in rpt.stale_figures(sections):
        click.echo(f"warning: {line} (marked stale in the log)", err=True)
    for err in bad:
        click.echo(f"kernlog: {'' if check_only else f'left out of {rpt.LOG}: '}{err}", err=True)
    if bad:
        ctx.exit(bad[0].exit_code)


@main.command()
@click.argument("kernel_name", metavar="KERNEL", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.pass_context
@handled
def misses(ctx, kernel_name, fmt):
    """The sweeps' missed bars (the log's ✗): each with its figure, whether its two points were
    timed in one run, and whether ncu profiles of both sides exist there; then the profile
    commands that take the missing evidence. A profile that fails verification is named on
    stderr and the exit is non-zero."""
    import json

    from kernlog.registry import kernel_names, load_kernel
    from kernlog.render import misses as m

    root = _root(ctx)
    kernels = [load_kernel(root, n) for n in ([kernel_name] if kernel_name else kernel_names(root))]
    found, bad = m.find(root, kernels)
    click.echo(json.dumps(m.as_json(found), indent=1) if fmt == "json" else m.text(found))
    for err in bad:  # left out of the evidence: named, and the exit says so
        click.echo(f"kernlog: left out: {err}", err=True)
    if bad:
        ctx.exit(bad[0].exit_code)
