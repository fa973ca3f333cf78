"""kernlog profile"""
from __future__ import annotations

import dataclasses

import click

from kernlog.capture.options import FLAGS, Options
from kernlog.commands.common import REVS, echo_err, handled, one_shape, paths, revisions, root_of

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Options)}


def _click_option(flag):
    """The click option of one of options.FLAGS."""
    kw = {"help": flag.help, "metavar": flag.metavar}
    if flag.kind == "shape":
        kw["callback"], kw["multiple"] = one_shape, True
    elif flag.kind in ("dtype", "choice"):
        kw["type"] = click.Choice(flag.choices)
        kw["default"] = _DEFAULTS[flag.field]
        kw["show_default"] = flag.kind == "choice"
    elif flag.kind == "flag":
        kw["is_flag"] = True
    elif flag.kind == "many":
        kw["multiple"] = True
    elif flag.kind == "count":
        kw["type"] = click.IntRange(min=1)
    return click.option(flag.name, flag.field, **kw)


def profile_options(fn):
    """The options that make an Options (options.FLAGS), in their order."""
    for flag in reversed(FLAGS):
        fn = _click_option(flag)(fn)
    return fn


@click.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@profile_options
@click.option("--at", "at", metavar="REF", help="The revisions as commit REF had them (into .../<kernel>/at/).")
@click.option("--range", "range_", metavar="A..B", help="--at each commit of A..B, oldest first.")
@click.option("--gpus", type=click.IntRange(min=1), default=None, metavar="N",
              help="Spread the revisions (or --range's commits) over N of the host's GPUs, a process each "
                   "(default 1).")
@click.pass_context
@handled
def profile(ctx, kernel_name, revs, at, range_, gpus, **options):
    """Gate, time and ncu-profile a kernel's revisions into profiles/ (needs a GPU and ncu).

    With --at or --range, each commit's tree is exported (the work tree is never touched) and
    profiled by a process of its own; a revision whose source hash is already profiled on this
    GPU is skipped, and a commit that fails is recorded in at/<commit>/failed.json and skipped.
    --range visits only commits that change kernels/.

    With --gpus N the revisions (or the commits) are dealt out to N GPUs by what each costs
    (its last gate's, timing and ncu seconds here), a process per GPU, and each profile names
    the GPU it ran on.

    A revision whose gate passed here before, under the same source, check plan (shapes,
    cases, dtypes, tolerances, reference), GPU and libraries, is not gated again: one line says
    "gate: reused". A failure is always gated again; --regate gates every revision.

    A known-wrong revision (role="wrong") is gated, to prove the gate still rejects it, and
    never timed or profiled; a rejection kept here under the same source, check plan and gate
    code stands (--regate gates it again). Exit status 3 where a revision failed the gate or a known-wrong one
    passed it; else 2 where one could not be gated here (its import fails), the others profiled."""
    from kernlog.capture.profiler import profile_on_gpus
    from kernlog.registry import load_kernel

    root = root_of(ctx)
    if at or range_:
        from kernlog.capture.at_commit import profile_commits
        from kernlog.run.fanout import visible_gpus

        gpu_list = None if gpus is None else (visible_gpus() or ["0"])[:gpus]
        paths(root, profile_commits(root, kernel_name, at, range_, Options.from_cli(**options), revs=revs,
                                    progress=echo_err, gpus=gpu_list))
        return
    kernel = load_kernel(root, kernel_name)
    paths(root, profile_on_gpus(root, kernel, revisions(kernel, revs), Options.from_cli(kernel.sections, **options),
                                gpus, progress=echo_err))
