"""The click CLI: the group `main` and its commands, one module each beside this one. Each
command parses, makes one library call and prints; kernlog's typed errors become one line on
stderr and a non-zero exit (common.handled)."""
from __future__ import annotations

from pathlib import Path

import click

from kernlog.commands import (
    bench,
    check,
    compare,
    compress,
    diff,
    history,
    import_,
    init,
    list_,
    misses,
    noise,
    open_,
    profile,
    prune,
    report,
    show,
    triage,
)


@click.group()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Repository root (default: the nearest folder at or above this one whose pyproject.toml "
                   "has [tool.kernlog], else that holds kernels/).")
@click.version_option(package_name="kernlog")
@click.pass_context
def main(ctx, root):
    """A kernel worklog: profile every revision under ncu, diff them, render KERNEL_LOG.md."""
    ctx.ensure_object(dict)["root"] = root


for command in (init.init, list_.list_cmd, check.check, profile.profile, prune.prune, bench.bench, show.show,
                history.history, diff.diff, compare.compare, import_.import_cmd, noise.noise, report.report,
                misses.misses, open_.open_cmd, compress.compress, triage.triage):
    main.add_command(command)
