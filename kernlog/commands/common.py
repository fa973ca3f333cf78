"""What the commands share: the error handler, the repository root, and the options several
commands take (SHAPE, REVS, DTYPE, the lookup options of a stored profile)."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from kernlog.errors import KernlogError
from kernlog.spec import parse_shape


def root_of(ctx) -> Path:
    from kernlog.registry import find_root

    return find_root(ctx.obj.get("root"))


def handled(fn):
    """Turn kernlog's typed errors into one line on stderr and their exit code."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KernlogError as exc:
            click.echo(f"kernlog: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("kernlog: interrupted; nothing partial was kept", err=True)
            sys.exit(130)
    return wrapper


def shape_arg(ctx, param, value):
    """click callback: DIMxDIM... -> a shape tuple (None stays None)."""
    if value is None:
        return None
    try:
        return parse_shape(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def shape_once(ctx, param, values):
    """click callback of a --shape taken once (multiple=True, so a repeat is caught, not silently
    the last): its one text, None where not given."""
    if len(values) > 1:
        raise click.BadParameter(f"given {len(values)} times ({', '.join(values)}): this command takes one shape a "
                                 "call; run it once per shape")
    return values[0] if values else None


def one_shape(ctx, param, values):
    """click callback of a --shape taken once (`shape_once`): DIMxDIM... -> a shape tuple, None where not given."""
    return shape_arg(ctx, param, shape_once(ctx, param, values))


def revisions(kernel, names):
    """The kernel's revisions named (all where none are)."""
    if not names:
        return list(kernel.revisions)
    known = {r.name: r for r in kernel.revisions}
    bad = [n for n in names if n not in known]
    if bad:
        raise KernlogError(f"unknown revision {bad[0]!r} of {kernel.name}; known: {', '.join(known)}")
    return [known[n] for n in names]


def echo_err(text: str) -> None:
    click.echo(text, err=True)


def paths(root: Path, written) -> None:
    """Each path written, relative to the root, a line each on stdout."""
    for path in written:
        click.echo(str(path.relative_to(root)))


DTYPE = click.Choice(["fp32", "bf16", "fp16"])
SHAPE = click.option("--shape", callback=one_shape, multiple=True, metavar="DIMxDIM...",
                     help="Shape: the kernel's dimensions joined by x, e.g. 8192x4096 (or 1048576, 4096x4096x4096).")
REVS = click.option("--rev", "revs", multiple=True, metavar="R", help="Only this revision (repeatable).")
LOOKUP = [SHAPE, click.option("--dtype", type=DTYPE, default=None),
          click.option("--gpu", default=None, metavar="SLUG", help="GPU slug, e.g. nvidia-h100-80gb-hbm3.")]


def lookup_options(fn):
    for opt in reversed(LOOKUP):
        fn = opt(fn)
    return fn


def one_profile_command(fn):
    """A command on one stored revision: KERNEL/REVISION[@SELECTOR], --shape/--dtype/--gpu, --format."""
    fn = handled(fn)
    fn = click.pass_context(fn)
    fn = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")(fn)
    fn = lookup_options(fn)
    fn = click.argument("rev", metavar="KERNEL/REVISION[@SELECTOR]")(fn)
    return click.command()(fn)


def warn_skipped(skipped: list[str]) -> None:
    """The stray or broken files passed over while resolving a side (a Profile's `skipped`):
    named on stderr, one line each."""
    for line in skipped or ():
        click.echo(f"kernlog: passed over: {line}", err=True)
