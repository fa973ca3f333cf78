"""kernlog prune"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, paths, root_of


@click.command()
@click.argument("kernel_name", metavar="[KERNEL]", required=False)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
@click.pass_context
@handled
def prune(ctx, kernel_name, dry_run):
    """Remove the .ncu-rep reports of --at entries (profiles/<gpu>/<kernel>/at/), keeping their
    JSONs: metrics, samples and hot spots stay, each JSON says the report was pruned and how
    to make it again. Today's profiles keep their reports; reports no profile names go."""
    from kernlog.store.profiles import prune_reports

    root = root_of(ctx)
    removed, freed = prune_reports(root, kernel_name, dry_run)
    paths(root, removed)
    click.echo(f"{'would free' if dry_run else 'freed'} {freed / 1e6:.1f} MB in {len(removed)} report(s)", err=True)
