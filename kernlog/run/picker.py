"""kernlog's side of the launchers' picker (kernlog.tuning: a launcher asks it for a config per
shape and it times the candidates): which picks a timing pass made, to record them and pin the
ncu pass to them; and gates whose picks are not timed.

The module is the one kernlog.registry names (registry.PICKER, registry.picker, which also finds
an older commit's own picker). It is found as before: in sys.modules, where a revision imported it (a
revision that picks imports it when it loads); only `untimed` and `take` have it imported
first: a target process enters `untimed` before loading the revisions it warms up (a picker
imported inside would time their picks and keep them), and `take` puts the pins in place before
the first pick (registry.picker(load=True))."""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from pathlib import Path

from kernlog import registry

PIN_ENV = "KERNLOG_PINNED"  # the picker takes the picks named in this JSON file instead of measuring


def module():
    """The picker, where a revision imported one that records its picks (an older commit's,
    profiled with --at, may not: None then)."""
    mod = registry.picker()
    return mod if hasattr(mod, "USED") and hasattr(mod, "used_config") else None


def forget_used() -> None:
    """Start a new record of the picks launched (before a timing pass)."""
    mod = module()
    if mod is not None:
        mod.USED.clear()


def used_config() -> dict:
    """{key: pick} of the picks launched since forget_used(); {} without a picker."""
    mod = module()
    return mod.used_config() if mod is not None else {}


def pins() -> dict | None:
    """The picks this process was told to take (PIN_ENV's file), or None where it was told none."""
    path = os.environ.get(PIN_ENV)
    return json.loads(Path(path).read_text()) if path else None


ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # repr()'s "<... object at 0x7f...>": another in every process


def strays(pinned: dict | None) -> dict:
    """The picks launched since forget_used() that `pinned` does not name as they are. A tuning
    key with an object named by its address (an autotune object over a heuristics object, in
    kernlog.tuning.key_text) is another text in this process, so the launcher tuned on
    its own instead of taking the timing pass's pick: the same pick, found under the key with
    the address left out (AddressFreePins, as the picker looked it up), is no stray; another pick
    is, and so is any pick under a key whose pins clash once addresses are left out."""
    if pinned is None:
        return {}
    plain = AddressFreePins(pinned)
    return {k: v for k, v in used_config().items() if plain.get(k) != v}


class AddressFreePins(dict):
    """Pins looked up by key text with object addresses left out (see `strays`): the timing
    pass's key for an autotune object over a heuristics object names that object's address in
    its own process, so the ncu process would find no pin under its own text and tune again
    (seen: matmul_relu v0_tiled picked 256x128 under ncu where its timing pass pinned 128x256,
    and the whole ladder's ncu pass fell back to a process per revision). Two pins whose keys
    differ only by an address and whose picks differ are dropped: such a pick is measured, and
    `strays` stops it."""

    def __init__(self, picks: dict):
        plain: dict = {}
        clash = set()
        for key, value in picks.items():
            k = ADDRESS.sub("", key)
            if k in plain and plain[k] != value:
                clash.add(k)
            plain[k] = value
        super().__init__({k: v for k, v in plain.items() if k not in clash})

    def get(self, key, default=None):
        return super().get(ADDRESS.sub("", key), default)

    def __contains__(self, key) -> bool:
        return super().__contains__(ADDRESS.sub("", key))

    def __getitem__(self, key):
        return super().__getitem__(ADDRESS.sub("", key))


def take(picks: dict) -> None:
    """Have the picker look `picks` up as AddressFreePins from its next pick on (where it keeps
    its pins as kernlog.tuning does: a one-item list, filled on first use). Imported
    here where no revision has yet: the pins must be in place before the first pick."""
    mod = registry.picker(load=True)
    if isinstance(getattr(mod, "_PINS", None), list):
        mod._PINS[:] = [AddressFreePins(picks)]


def pin(picks: dict, path: Path) -> None:
    """From now on take `picks` ({key: pick}, as used_config gave them) instead of measuring,
    through the picker's own PIN_ENV (written to `path`), also where it has read PIN_ENV before:
    the ncu pass runs the configs its timing pass picked."""
    path.write_text(json.dumps(picks))
    os.environ[PIN_ENV] = str(path)
    take(picks)


@contextlib.contextmanager
def untimed(start: int = 0):
    """Inside, a pick among several candidates is not timed: the picks take the candidates in
    turn (the first pick the first candidate, the next the second, ...; each part of a gate
    split into parts starts at its own `start`, so the parts do not all take the first ones), so
    a gate's shapes run most candidates, not only the fastest, and compile one each. The picks
    made inside are forgotten on the way out, so a timing pass after a gate in the same process
    picks by time. Timing them was most of a gate's GPU time: on the H100, 5.5 s of v9_peeled's 7.6 s (warm
    caches), and 161 Triton compiles of the softmax counterpart's 23 picks; with the ladder's
    gates side by side, that timing slowed every other gate."""
    mod = registry.picker(load=True)  # None: a project without the picker
    if mod is None or not callable(getattr(mod, "fastest", None)) or not isinstance(getattr(mod, "PICKED", None), dict):
        yield
        return
    turn = itertools.count(start)
    timed, before = mod.fastest, set(mod.PICKED)
    mod.fastest = lambda run, candidates, device: candidates[next(turn) % len(candidates)]
    try:
        yield
    finally:
        mod.fastest = timed
        for key in set(mod.PICKED) - before:
            del mod.PICKED[key]
