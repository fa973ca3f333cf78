"""kernlog history"""
from __future__ import annotations

import json

import click

from kernlog.commands.common import one_profile_command, root_of


@one_profile_command
def history(ctx, rev, shape, dtype, gpu, fmt):
    """A revision's profiles across the commits that stored them, each judged against the one
    before (steps: faster or slower beyond the noise band). Any entry is a diff side:
    `kernlog diff COMMIT:KERNEL/REVISION KERNEL/REVISION`."""
    from kernlog.judge.history import timelines
    from kernlog.render.history import render
    from kernlog.store.lookup import parse_side

    found = timelines(root_of(ctx), parse_side(rev, shape, dtype, gpu))
    if fmt == "json":
        click.echo(json.dumps(found[0] if len(found) == 1 else found, indent=1, sort_keys=True))
    else:
        click.echo("\n\n".join(render(t, fmt) for t in found))
