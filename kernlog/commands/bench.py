"""kernlog bench"""
from __future__ import annotations

import click

from kernlog.commands.common import DTYPE, REVS, handled, revisions, root_of, shape_arg
from kernlog.errors import KernlogError


@click.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@click.option("--shape", "shapes", callback=lambda c, p, v: [shape_arg(c, p, s) for s in v], multiple=True,
              metavar="DIMxDIM...", help="Only this shape (repeatable; default: the kernel's bench shapes).")
@click.option("--family", "families", multiple=True, metavar="NAME",
              help="The members of this shape family (repeatable; 'all': every family the kernel declares).")
@click.option("--dtype", type=DTYPE, multiple=True,
              help="Only this dtype (repeatable; default: the kernel's sweep_dtypes, else every dtype it declares).")
@click.option("--budget", type=float, default=0.5, show_default=True, help="Seconds of timing per point.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Interleaved runs per point (3+: the log judges a gap inside their spread a tie).")
@click.option("--regate", is_flag=True,
              help="Gate every revision again, even one whose stored pass has the same source, check plan, "
                   "GPU and libraries (reused otherwise).")
@click.option("--gate-workers", "workers", type=click.IntRange(min=1), metavar="N",
              help="Gate N revisions at once, a process each, as profile does (default: half the cores, at most 8; "
                   "1: one by one in this process).")
@click.pass_context
@handled
def bench(ctx, kernel_name, revs, shapes, families, dtype, budget, repeat, regate, workers):
    """Time every revision side by side over the kernel's bench shapes (needs a GPU).

    Each revision is gated first, side by side in processes of their own (one by one in this
    process with --gate-workers 1, on a host of fewer than four cores, or where the GPU admits one
    process), or its stored pass taken where nothing it depends on changed (one line says
    "gate: reused"), as `kernlog profile` does; a known-wrong one (role="wrong")
    is always gated, only to prove the gate rejects it, and never swept. Exit status 3 where a
    revision failed the gate or a known-wrong one passed it; else 2 where one could not be gated
    here (its import fails), the others swept."""
    from kernlog.capture.bench import bench as run
    from kernlog.registry import load_kernel

    root = root_of(ctx)
    kernel = load_kernel(root, kernel_name)
    if families:
        try:
            shapes = [*shapes, *(s for s in kernel.family_shapes(families) if s not in shapes)]
        except KeyError as exc:
            raise KernlogError(exc.args[0]) from None
    shapes = list(shapes) or list(kernel.bench_shapes)
    dtypes = list(dtype) or list(kernel.sweep_dtypes or kernel.dtypes)
    path = run(root, kernel, revisions(kernel, revs), shapes, dtypes, budget, progress=click.echo, repeat=repeat,
               regate=regate, workers=workers)
    click.echo(str(path.relative_to(root)))
