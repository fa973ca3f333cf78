"""kernlog noise"""
from __future__ import annotations

import click

from kernlog.commands.common import DTYPE, SHAPE, echo_err, handled, paths, root_of


@click.command()
@click.argument("revs", nargs=-1, required=True, metavar="KERNEL/REVISION...")
@SHAPE
@click.option("--dtype", type=DTYPE, default=None,
              help="Default: each kernel's first sweep dtype, else its first dtype.")
@click.option("--runs", type=click.IntRange(3, 50), default=5, show_default=True,
              help="Times each revision is timed and profiled (A/A), interleaved.")
@click.pass_context
@handled
def noise(ctx, revs, shape, dtype, runs):
    """Measure run-to-run noise of each metric (needs a GPU and ncu); stored for diff's bands."""
    from kernlog.capture.noise_runs import calibrate

    root = root_of(ctx)
    paths(root, calibrate(root, list(revs), shape, dtype, runs, progress=echo_err))
