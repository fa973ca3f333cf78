"""kernlog misses"""
from __future__ import annotations

import json

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.argument("kernel_name", metavar="[KERNEL]", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.pass_context
@handled
def misses(ctx, kernel_name, fmt):
    """The sweeps' missed bars (the log's ✗): each with its figure, whether its two points were
    timed in one run, and whether ncu profiles of both sides exist there; then the profile
    commands that take the missing evidence. A profile that fails verification is named on
    stderr and the exit is non-zero."""
    from kernlog.registry import kernel_names, load_kernel
    from kernlog.render import misses as m

    root = root_of(ctx)
    kernels = [load_kernel(root, n) for n in ([kernel_name] if kernel_name else kernel_names(root))]
    found, bad = m.find(root, kernels)
    click.echo(json.dumps(m.as_json(found), indent=1) if fmt == "json" else m.text(found))
    for err in bad:  # left out of the evidence: named, and the exit says so
        click.echo(f"kernlog: left out: {err}", err=True)
    if bad:
        ctx.exit(bad[0].exit_code)
