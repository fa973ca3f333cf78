"""kernlog compress"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.option("--limit", "limit_mb", type=click.FloatRange(min=0), default=None, metavar="MB",
              help="Convert reports, largest first, until this many MB of plain reports are done (default: all).")
@click.pass_context
@handled
def compress(ctx, limit_mb):
    """Store the plain .ncu-rep reports under profiles/ compressed (.ncu-rep.xz), each verified
    before its plain file goes, and record each .xz's own size and sha256 in the profiles' JSONs
    (ncu.report_xz, what `report --check` hashes); reports compressed before kernlog recorded
    that get it too, once each decompresses to its recorded report. `kernlog open` gives a
    report back decompressed."""
    from kernlog.store.reports import compress_reports, record_xz_hashes

    root = root_of(ctx)
    done = compress_reports(root, None if limit_mb is None else int(limit_mb * 1e6),
                            progress=lambda line: click.echo(line, err=True))
    before, after = sum(b for _, b, _ in done), sum(a for _, _, a in done)
    click.echo(f"compressed {len(done)} report(s): {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    written, bad = record_xz_hashes(root, progress=lambda line: click.echo(line, err=True))
    if written:
        click.echo(f"recorded the sha256 of compressed reports in {written} profile(s)")
    for line in bad:
        click.echo(f"kernlog: {line}", err=True)
    if bad:
        ctx.exit(2)
