"""kernlog compare"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.argument("base", metavar="BASE")
@click.argument("head", metavar="[HEAD]", required=False)
@click.option("--threshold", type=float, default=0.03, show_default=True, metavar="FRACTION",
              help="A slower pair regresses only beyond the noise band and by more than this (0.05: 5%).")
@click.option("--allow-different-setup", is_flag=True,
              help="Judge pairs whose GPU, driver or ncu differ (refused by default); the header says so.")
@click.option("--allow-empty", is_flag=True,
              help="Pass (exit 0, with a note) where neither side stores a profile; by default that exits 2.")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md")
@click.option("--all", "all_rows", is_flag=True, help="List every pair, also those judged same (default: counted).")
@click.pass_context
@handled
def compare(ctx, base, head, threshold, allow_different_setup, allow_empty, fmt, all_rows):
    """Every profile stored at git ref BASE against HEAD (a ref, or the work tree's profiles/),
    judged as diff judges: the CI gate. Exit 0: no regression; 1: a revision is slower beyond
    the noise band (and --threshold); 2: bad input (unknown ref, a profile failing verification)
    or nothing to compare.

    Nothing to compare is never a pass: where neither BASE nor HEAD stores a profile, the exit is
    2 unless --allow-empty. Profiles only one side has are listed, not failed, and are something
    to compare: a branch that adds the first profiles passes."""
    from kernlog.judge.compare import run
    from kernlog.render.compare import render

    c, status, notes = run(root_of(ctx), base, head, threshold, allow_different_setup, allow_empty)
    click.echo(render(c, fmt, all_rows))
    for line in notes:  # the work tree's lost or damaged reports
        click.echo(f"kernlog: {line}", err=True)
    ctx.exit(status)
