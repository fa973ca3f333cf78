"""kernlog misses"""
from __future__ import annotations

import json

import click

from kernlog.commands.common import handled, root_of


@click.command()
@click.argument("kernel_name", metavar="[KERNEL]", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.option("--allow-empty", is_flag=True,
              help="Pass (exit 0, with a note) where the sweeps judge nothing; by default that exits 2.")
@click.pass_context
@handled
def misses(ctx, kernel_name, fmt, allow_empty):
    """The sweeps' missed bars (the log's ✗): each with its figure, whether its two points were
    timed in one run, and whether ncu profiles of both sides exist there; then the profile
    commands that take the missing evidence. A profile that fails verification is named on
    stderr and the exit is non-zero.

    Nothing judged is never a pass: where the kernel(s) asked have no sweep at all, or sweeps
    whose points judge no bar, the command says so on stderr and exits 2 unless --allow-empty
    (then it says so and exits 0). Sweeps that judge bars and miss none: "no missed bars", exit 0."""
    from kernlog.registry import kernel_names, load_kernel
    from kernlog.render import misses as m

    root = root_of(ctx)
    kernels = [load_kernel(root, n) for n in ([kernel_name] if kernel_name else kernel_names(root))]
    found = m.judge(root, kernels)
    empty = m.nothing_judged(found, kernels, allow_empty)
    passing = not empty or allow_empty  # something judged, or nothing judged and let through
    if passing:
        click.echo(json.dumps(m.as_json(found.misses), indent=1) if fmt == "json" else empty or m.text(found.misses))
    for err in found.bad:  # left out of the evidence: named, and the exit says so
        click.echo(f"kernlog: left out: {err}", err=True)
    if empty and not (passing and fmt == "text"):  # the line, where stdout does not carry it
        click.echo(f"kernlog: {'note: ' if allow_empty else ''}{empty}", err=True)
    if found.bad:
        ctx.exit(found.bad[0].exit_code)
    if not passing:
        ctx.exit(2)
