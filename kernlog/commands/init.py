"""kernlog init"""
from __future__ import annotations

from pathlib import Path

import click

from kernlog.commands.common import handled


@click.command()
@click.option("--kernels-dir", default=None, metavar="DIR",
              help="The folder of operator folders, relative to the repository root (default: the one "
                   "[tool.kernlog] names, else kernels).")
@click.option("--kernel", "kernel", default="add_relu", show_default=True, metavar="NAME",
              help="The example operator's name (its folder under the kernels folder).")
@click.option("--force", is_flag=True, help="Replace files that exist and rewrite [tool.kernlog].")
@click.pass_context
@handled
def init(ctx, kernels_dir, kernel, force):
    """Start a worklog in this git repository: [tool.kernlog] in pyproject.toml, an example
    operator, .gitignore lines, KERNEL_LOG.md and a GitHub Actions workflow. Keeps every file
    that exists unless --force, and names each file written or kept."""
    from kernlog.render.scaffold import init as scaffold

    scaffold(ctx.obj.get("root") or Path.cwd(), kernels_dir, kernel, force, click.echo)
