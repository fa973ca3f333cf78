"""kernlog dispatch"""
from __future__ import annotations

from pathlib import Path

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.argument("kernels", nargs=-1, required=True, metavar="KERNEL...")
@click.option("--gpu", default=None, metavar="SLUG",
              help="The GPU whose sweep makes the table (default: the only one that swept the kernel, "
                   "else [tool.kernlog] primary_gpu); another GPU's table is dispatch.SLUG.json, read on "
                   "that GPU first.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The table's file instead of <kernels>/KERNEL/dispatch.json (one KERNEL only).")
@click.option("--check", "check_only", is_flag=True,
              help="Write nothing; exit 1 where a table is not what the sweep makes now.")
@click.pass_context
@handled
def dispatch(ctx, kernels, gpu, out, check_only):
    """Make each KERNEL's dispatch table from its committed sweep (bench.csv): per shape class and
    dtype, the revision the library runs, the runner-up and the margin (docs/dispatch.md)."""
    from kernlog.render.dispatch import check, generate, summary

    if out is not None and len(kernels) > 1:
        raise click.UsageError("--out takes one KERNEL")
    root = root_of(ctx)
    if check_only:
        said = [line for name in kernels if (line := check(root, name, gpu, out))]
        click.echo("\n".join(said) if said else f"current: {', '.join(kernels)}")
        ctx.exit(1 if said else 0)
    for name in kernels:
        path, table = generate(root, name, gpu, out)
        click.echo("\n".join(summary(path, table, root)))
