"""kernlog report"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.option("--check", "check_only", is_flag=True,
              help="Exit non-zero if the log (KERNEL_LOG.md, or [tool.kernlog] log) or a page or plot it links "
                   "differs from what the stored profiles render (plots by the digest of their data: nothing is "
                   "drawn).")
@click.option("--redraw", is_flag=True,
              help="Draw every plot again, not only those whose data changed (a plot carries the digest of its data).")
@click.pass_context
@handled
def report(ctx, check_only, redraw):
    """Render the log and a page per kernel with its plots (KERNEL_LOG.md and reports/, or where
    [tool.kernlog] log and reports say) from the stored profiles alone."""
    from kernlog.render.publish import publish

    status = publish(root_of(ctx), check_only, click.echo, redraw)
    if status:
        ctx.exit(status)
