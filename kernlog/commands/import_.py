"""kernlog import"""
from __future__ import annotations

from pathlib import Path

import click

from kernlog.commands.common import echo_err, handled, root_of, shape_once


@click.command("import")
@click.argument("report_path", metavar="REPORT.ncu-rep", type=click.Path(path_type=Path))
@click.option("--kernel", "kernel_name", required=True, metavar="K", help="The kernel it belongs to.")
@click.option("--rev", "rev_name", required=True, metavar="R", help="Its revision name (need not be in the ladder).")
@click.option("--shape", callback=shape_once, multiple=True, metavar="DIMxDIM...",
              help="Default: the kernel's profile shape.")
@click.option("--dtype", metavar="DTYPE", help="Default: the kernel's first sweep dtype, else its first dtype.")
@click.option("--range", "range_name", metavar="NAME",
              help="Only the kernels inside this NVTX range (push/pop or start/end).")
@click.option("--force", is_flag=True, help="Replace a stored profile of that name.")
@click.pass_context
@handled
def import_cmd(ctx, report_path, kernel_name, rev_name, shape, dtype, range_name, force):
    """Bring in an ncu report kernlog did not capture (plain `ncu -o`, another machine)."""
    from kernlog.capture.importer import import_report

    root = root_of(ctx)
    path = import_report(root, report_path, kernel_name, rev_name, shape, dtype, range_name, force,
                         progress=echo_err)
    click.echo(str(path.relative_to(root)))
