"""kernlog check"""
from __future__ import annotations

import sys

import click

from kernlog.commands.common import DTYPE, REVS, handled, revisions, root_of
from kernlog.errors import CannotRun


@click.command()
@click.argument("kernel_name", metavar="KERNEL")
@REVS
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to run (default: cuda if a GPU is visible, else cpu; cpu skips CUDA C revisions).")
@click.option("--dtype", type=DTYPE, multiple=True)
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Draw the inputs from this seed (default: a fresh one each run): a failing case names its "
                   "seed, and the same seed draws its inputs again.")
@click.pass_context
@handled
def check(ctx, kernel_name, revs, device, dtype, seed):
    """Run the correctness gate only: each revision against float64 on random inputs drawn from
    --seed. On a GPU each revision's outcome is kept (profiles/GPU/KERNEL/gate/): a failure marks
    its stored profiles of the same source in list, show and the log; a pass clears the mark, and
    `kernlog profile` takes a pass of every dtype instead of gating that revision again while its
    source, check plan, GPU and libraries are the same. `check` itself always gates.

    A known-wrong revision (role="wrong") must fail the gate: "rejected, as expected" is a pass,
    passing is a failure. A revision this machine cannot run as set up (its import fails; a Triton
    kernel with no GPU and TRITON_INTERPRET unset) is one line on stderr, and the others are still
    checked.

    Exit status: 0 all as expected; 3 a revision failed the gate, or a known-wrong one passed it,
    whether or not others could not run (a wrong answer is the finding); 2 none failed but one
    could not run here (or bad input)."""
    from kernlog.capture import gate_runs
    from kernlog.registry import load_kernel
    from kernlog.run.ladder import Unchecked

    root = root_of(ctx)
    kernel = load_kernel(root, kernel_name)
    said = False
    try:
        for line in gate_runs.check(root, kernel, revisions(kernel, revs), device, list(dtype), seed=seed):
            if isinstance(line, Unchecked):  # an error of its own revision: the others go on
                click.echo(f"kernlog: {line}", err=True)
                said = True
            else:
                click.echo(line)
    except CannotRun as exc:
        if not said:
            raise
        sys.exit(exc.exit_code)  # each revision not checked had its line above; nothing to add
