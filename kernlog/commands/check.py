"""kernlog check"""
from __future__ import annotations

import click

from kernlog.commands.common import DTYPE, REVS, handled, revisions, root_of


@click.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to run (default: cuda if a GPU is visible, else cpu; cpu skips CUDA C revisions).")
@click.option("--dtype", type=DTYPE, multiple=True)
@click.pass_context
@handled
def check(ctx, kernel_name, revs, device, dtype):
    """Run the correctness gate only: each revision against float64 on fresh random inputs.
    On a GPU each revision's outcome is kept (profiles/GPU/KERNEL/gate/): a failure marks its
    stored profiles of the same source in list, show and the log; a pass clears the mark."""
    from kernlog.capture import checked
    from kernlog.registry import load_kernel

    root = root_of(ctx)
    kernel = load_kernel(root, kernel_name)
    for line in checked.check(root, kernel, revisions(kernel, revs), device, list(dtype)):
        click.echo(line)
