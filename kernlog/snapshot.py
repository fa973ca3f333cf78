"""The repository held still for a command that only reads it (`kernlog report`, `list`): what
is derived from files it reads again and again -- a revision's source hash, the operator
folders, the layout -- is derived once inside `held()`, not hundreds of times (the log's pages
ask for every revision's hash once per figure marker). Outside `held()` nothing is kept, so
a file edited between two commands (or two calls in one process) is always read afresh.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

T = TypeVar("T")

_memo: dict | None = None


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within: once() computes each key once. Nested, the outermost one holds."""
    global _memo
    if _memo is not None:
        yield
        return
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def holding() -> bool:
    """Whether a held() is open: a command that only reads the repository is running."""
    return _memo is not None


def once(key: Hashable, compute: Callable[[], T]) -> T:
    """compute(), kept under `key` while held() lasts; computed each time outside it."""
    if _memo is None:
        return compute()
    try:
        return _memo[key]
    except KeyError:
        value = _memo[key] = compute()
        return value
