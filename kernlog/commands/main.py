"""The click CLI: the group `main` and its commands, one module each beside this one. Each
command parses, makes one library call and prints; kernlog's typed errors become one line on
stderr and a non-zero exit (common.handled). A command's module is imported when the command
is first looked up, so `kernlog show` imports show's module alone (`--help` imports them all)."""
from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from pathlib import Path

import click

# name -> (its module beside this one, the command in it)
COMMANDS = {
    "init": ("init", "init"), "list": ("list_", "list_cmd"), "check": ("check", "check"),
    "profile": ("profile", "profile"), "prune": ("prune", "prune"), "bench": ("bench", "bench"),
    "show": ("show", "show"), "history": ("history", "history"), "diff": ("diff", "diff"),
    "compare": ("compare", "compare"), "import": ("import_", "import_cmd"), "noise": ("noise", "noise"),
    "report": ("report", "report"), "misses": ("misses", "misses"), "open": ("open_", "open_cmd"),
    "compress": ("compress", "compress"), "triage": ("triage", "triage"),
    "dispatch": ("dispatch", "dispatch"),
}


class Commands(MutableMapping):
    """The group's commands by name, each imported on first use (a command added later is kept
    as given)."""

    def __init__(self, lazy: dict[str, tuple[str, str]]):
        self._lazy, self._loaded = dict(lazy), {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, attr = self._lazy[name]
            self._loaded[name] = getattr(importlib.import_module(f"kernlog.commands.{module}"), attr)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._lazy.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._lazy and name not in self._loaded:
            raise KeyError(name)
        self._lazy.pop(name, None)
        self._loaded.pop(name, None)

    def __iter__(self):
        return iter(dict.fromkeys([*self._lazy, *self._loaded]))

    def __len__(self) -> int:
        return len(set(self._lazy) | set(self._loaded))


@click.group(commands=Commands(COMMANDS))
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Repository root (default: the nearest folder at or above this one whose pyproject.toml "
                   "has [tool.kernlog], else that holds kernels/).")
@click.version_option(package_name="kernlog")
@click.pass_context
def main(ctx, root):
    """A kernel worklog: profile every revision under ncu, diff them, render KERNEL_LOG.md."""
    ctx.ensure_object(dict)["root"] = root
