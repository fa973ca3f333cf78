"""kernlog report"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.option("--check", "check_only", is_flag=True,
              help="Exit non-zero if KERNEL_LOG.md or a plot it links differs from what profiles/ renders "
                   "(plots by the digest of their data: nothing is drawn).")
@click.pass_context
@handled
def report(ctx, check_only):
    """Render KERNEL_LOG.md (and reports/*.svg) from profiles/ alone."""
    from kernlog.render.publish import publish

    status = publish(root_of(ctx), check_only, click.echo)
    if status:
        ctx.exit(status)
