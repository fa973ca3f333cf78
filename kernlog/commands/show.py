"""kernlog show"""
from __future__ import annotations

import click

from kernlog.commands.common import one_profile_command, root_of, warn_skipped


@one_profile_command
def show(ctx, rev, shape, dtype, gpu, fmt):
    """One stored revision's metrics and ncu findings."""
    from kernlog.render.show import render
    from kernlog.store.lookup import parse_side, resolve_one

    root = root_of(ctx)
    rec = resolve_one(root, parse_side(rev, shape, dtype, gpu))
    click.echo(render(root, rec, fmt))
    warn_skipped(rec.skipped)
