"""kernlog list"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, root_of


@click.command("list")
@click.option("--names", is_flag=True,
              help="Only the operators' names, one a line (for a shell loop: for k in $(kernlog list --names)).")
@click.pass_context
@handled
def list_cmd(ctx, names):
    """Kernels, their revisions, and which are profiled (and stale) on which GPU. A profile
    that fails verification is marked, named on stderr with its fix, and the exit is non-zero."""
    if names:
        from kernlog.registry import kernel_names

        click.echo("\n".join(kernel_names(root_of(ctx))))
        return
    from kernlog.render.listing import listing

    text, bad, notes = listing(root_of(ctx))
    click.echo(text)
    for err in [*bad, *notes]:  # notes: lost or damaged reports, the profiles listed all the same
        click.echo(f"kernlog: {err}", err=True)
    if bad:
        ctx.exit(bad[0].exit_code)
