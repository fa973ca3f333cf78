"""Typed errors: the CLI turns each into one line on stderr and a non-zero exit."""


class KernlogError(Exception):
    """A problem the user can fix; its message is the whole story."""
    exit_code = 2


class GateFailure(KernlogError):
    """A revision computed the wrong answer or crashed."""
    exit_code = 3


class CannotRun(KernlogError):
    """A revision this machine cannot run as it is set up -- its import fails (the user's own
    package not on the path), or it is a Triton kernel with neither a GPU nor Triton's
    interpreter: nothing is known of its answers, so it is not a gate failure. Said in one line
    naming what to do; `kernlog check` still checks the other revisions."""
    exit_code = 2


class OperatorError(KernlogError):
    """The operator's own code (its make_inputs, make_output or reference) raised while the gate ran a
    revision: no revision's fault, so said once, with the operator's line, and not as every revision's failure."""
    exit_code = 2


class NoGpu(KernlogError):
    exit_code = 4


class Unsupported(KernlogError):
    """A revision needs what this GPU lacks (thread-block clusters, TMA, more shared memory per
    block): the harness skips it with this line ("skipped: needs ...") rather than failing it."""
    exit_code = 5


def said(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__
