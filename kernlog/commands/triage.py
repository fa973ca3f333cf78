"""`kernlog triage TARGET`: a standalone click command (attached to the CLI group at merge)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kernlog.errors import KernlogError


@click.command("triage")
@click.argument("target")
@click.option("--verify", is_flag=True, help="Re-measure TARGET (GPU) and judge its speedup against the prediction.")
@click.option("--baseline", metavar="TARGET", default=None,
              help="With --verify: the triaged program, timed in turn with TARGET (its prediction is judged).")
@click.option("--candidate", type=click.IntRange(min=1), default=None,
              help="With --verify: which ranked candidate was implemented (default: the first kernel candidate; with "
                   "--graph, the CUDA-graph one).")
@click.option("--graph", is_flag=True,
              help="With --verify: time TARGET captured in a CUDA graph against itself called eagerly.")
@click.option("--rejudge", is_flag=True,
              help="No GPU: rank the stored triage again from its stored trace and ncu figures (after a judge change).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def triage(ctx, target, verify, baseline, candidate, graph, rejudge, fmt):
    """Where TARGET's GPU time goes and what fixing it would buy. TARGET: module:function (returns a
    zero-argument callable) or a kernel such as minigpt[/REVISION][@SHAPE][.DTYPE]. Without a GPU:
    the stored triage."""
    from kernlog.capture import triage as lib
    from kernlog.registry import find_root
    from kernlog.render.triage import table

    try:
        given = ctx.obj.get("root") if isinstance(ctx.obj, dict) else None  # the CLI group's --root
        root = find_root(Path(given) if given else None)
        progress = (lambda s: click.echo(s, err=True)) if fmt == "text" else (lambda s: None)
        if verify:
            v = lib.verify(root, target, baseline, candidate, progress=progress, graph=graph)
            click.echo(json.dumps(v.__dict__, indent=1) if fmt == "json" else v.line())
            sys.exit(1 if v.outcome == "missed" else 0)
        if baseline or graph:
            raise KernlogError(f"{'--baseline' if baseline else '--graph'} goes with --verify")
        records = lib.rejudge(root, target) if rejudge else lib.triage(root, target, progress=progress)
        if fmt == "json":
            click.echo(json.dumps([r.to_dict() for r in records], indent=1))
        else:
            click.echo("\n\n".join(table(r) for r in records))
    except KernlogError as exc:
        click.echo(f"kernlog: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    triage(obj={"root": Path.cwd()})
