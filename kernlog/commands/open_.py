"""kernlog open"""
from __future__ import annotations

import click

from kernlog.commands.common import one_profile_command, root_of, warn_skipped


@one_profile_command
def open_cmd(ctx, rev, shape, dtype, gpu, fmt):
    """The path of one stored profile's ncu report, for ncu-ui (`ncu-ui "$(kernlog open REV)"`).
    A report stored compressed is decompressed, checked against its recorded size and sha256,
    into a cache git ignores (.cache/reports/), and reused from there."""
    from kernlog.store.lookup import parse_side, resolve_one
    from kernlog.store.reports import open_report

    root = root_of(ctx)
    rec = resolve_one(root, parse_side(rev, shape, dtype, gpu))
    path = open_report(root, rec)
    click.echo(str(path) if fmt == "text" else f'{{"report": "{path}"}}')
    warn_skipped(rec.skipped)


open_cmd.name = "open"
