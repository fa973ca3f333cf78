"""kernlog diff"""
from __future__ import annotations

import click

from kernlog.commands.common import handled, lookup_options, root_of, warn_skipped


@click.command()
@click.argument("rev_a", metavar="REV1")
@click.argument("rev_b", metavar="REV2")
@lookup_options
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text")
@click.option("--all", "all_rows", is_flag=True, help="Also list metrics that did not move.")
@click.option("--retime", is_flag=True, help="Time both sides again, interleaved, on this GPU, and judge on that.")
@click.option("--rounds", type=click.IntRange(2, 1000), default=20, show_default=True,
              help="--retime: rounds of A then B, each a batch of launches with L2 flushed.")
@click.pass_context
@handled
def diff(ctx, rev_a, rev_b, shape, dtype, gpu, fmt, all_rows, retime, rounds):
    """What moved from REV1 to REV2, judged against noise.

    REV is [COMMIT:]KERNEL/REVISION[@SHAPE.DTYPE.GPU] (any part optional, any order), e.g.
    softmax/v7_bf16_packed@8192x4096.bf16, HEAD~3:softmax/v5_tuned (as that commit stored it),
    or a profile's .json path."""
    from kernlog.capture.retime import diff_retimed
    from kernlog.judge.diff import run
    from kernlog.render.diff import render
    from kernlog.store.lookup import parse_side

    sides = (root_of(ctx), parse_side(rev_a, shape, dtype, gpu), parse_side(rev_b, shape, dtype, gpu))
    d = diff_retimed(*sides, rounds) if retime else run(*sides)
    click.echo(render(d, fmt, all_rows))
    for side in (d["a"], d["b"]):
        warn_skipped(side["_skipped"])
