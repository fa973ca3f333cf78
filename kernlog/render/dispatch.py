"""A kernel's dispatch table made from its committed sweep and written beside the operator
(`kernlog dispatch`), checked against the file, and said in words: a markdown table for its
page and the lines the command prints."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from kernlog.errors import KernlogError
from kernlog.judge import dispatch as judge
from kernlog.library import ANY, ClassRule, gpu_table_paths, load_table, rule_for, table_path
from kernlog.spec import Kernel
from kernlog.store import dispatch as store


def sweep_gpu(root: Path, kernel: str, gpu: str | None = None) -> str:
    """The GPU whose sweep makes the table: `gpu`, else the only one that swept the kernel, else
    the repository's primary GPU ([tool.kernlog] primary_gpu) where it is one of them."""
    from kernlog import config

    swept = store.swept_gpus(root, kernel)
    if gpu is not None:
        if gpu not in swept:
            raise KernlogError(f"no sweep of {kernel} on {gpu}; swept on: {', '.join(swept) or 'none'}")
        return gpu
    if len(swept) == 1:
        return swept[0]
    primary = config.layout(root).primary_gpu
    if primary in swept:
        return primary
    if not swept:
        raise KernlogError(f"no sweep of {kernel} stored (profiles/<gpu>/{kernel}/bench.csv): `kernlog bench {kernel}` "
                           f"on a GPU makes one")
    raise KernlogError(f"{kernel} is swept on {', '.join(swept)}: name one with --gpu")


def rule_of(root: Path, kernel: Kernel) -> ClassRule:
    """The operator's DISPATCH_CLASSES where its __init__.py declares one, else the rule of its
    shape's rank (kernlog.library.RULES)."""
    from kernlog import config

    own = getattr(config.layout(root).import_operator(kernel.name), "DISPATCH_CLASSES", None)
    return own if isinstance(own, ClassRule) else rule_for(len(kernel.profile_shape))


def make_table(root: Path, name: str, gpu: str | None = None) -> dict:
    """The dispatch table of kernel `name` from its sweep on `gpu` (sweep_gpu), its gate
    outcomes there and its revisions' sources now."""
    from kernlog.judge.bands import bands_of
    from kernlog.registry import load_kernel
    from kernlog.store import gates

    kernel = load_kernel(root, name)
    gpu = sweep_gpu(root, name, gpu)
    points, source = store.sweep_points(root, gpu, name)
    table = judge.build(name, points, {r.name: r.role for r in kernel.revisions},
                        {r.name: r.sha256() for r in kernel.revisions}, [r.name for r in kernel.revisions],
                        rule_of(root, kernel), gates.load(root, gpu, name), bands_of(root, gpu)("wall_ms").rel,
                        source)
    if not any(c["revision"] for c in table["classes"]):
        why = "; ".join(f"{r}: {', '.join(w)}" for r, w in table["left_out"].items())
        raise KernlogError(f"{name}: no revision qualifies at any point of {source['bench_csv']} ({why})")
    return table


def own_gpu(root: Path, name: str, gpu: str | None) -> str | None:
    """Which table `gpu`'s sweep makes: None for the operator's dispatch.json (no GPU named, or
    the one sweep_gpu takes without one), else `gpu`, whose table is dispatch.<gpu>.json."""
    if gpu is None:
        return None
    try:
        default = sweep_gpu(root, name)
    except KernlogError:  # several GPUs swept it and none is the primary one: the named one is the table
        return None
    return None if gpu == default else gpu


def generate(root: Path, name: str, gpu: str | None = None, out: Path | None = None) -> tuple[Path, dict]:
    """Make kernel `name`'s dispatch table (make_table) and write it to `out`, by default
    <kernels>/<name>/dispatch.json, or dispatch.<gpu>.json for another GPU's sweep (own_gpu);
    (the path, the table)."""
    table = make_table(root, name, gpu)
    return store.save(out or table_path(root, name, own_gpu(root, name, gpu)), table), table


def check(root: Path, name: str, gpu: str | None = None, path: Path | None = None) -> str:
    """"" where kernel `name`'s table file (`path`, by default the one `generate` writes for
    `gpu`) is what its sweep makes now, else what differs in one line."""
    path = path or table_path(root, name, own_gpu(root, name, gpu))
    fresh = make_table(root, name, gpu)
    kept = load_table(path)
    if kept is None:
        return f"{name}: no dispatch table at {path}"
    if store.text(kept) == store.text(fresh):
        return ""
    moved = [f"{c['dtype']} {'/'.join(c['points'])}: {c['revision']}" for c in fresh["classes"]
             if c not in kept["classes"]]
    return (f"{name}: {path} is not what the sweep makes now ({len(moved)} class(es) differ"
            f"{': ' + '; '.join(moved[:3]) if moved else ''}{'...' if len(moved) > 3 else ''}); "
            f"`kernlog dispatch {name}{' --gpu ' + gpu if gpu else ''}` writes it again")


def _margin(entry: dict) -> str:
    if entry["margin"] is None:
        return "only one qualifies"
    tie = " (tie: within noise)" if entry["margin"] <= entry["noise"] else ""
    return f"+{100 * entry['margin']:.1f}%{tie}"


def _source(table: dict) -> str:
    src = table["source"]
    commits = sorted({(r["commit"] or "not recorded")[:10] for r in src.get("runs", [])})
    return (f"From {src.get('bench_csv', 'bench.csv')} on {src.get('gpu', 'an unnamed GPU')}: "
            f"{len(src.get('runs', []))} run(s) at commit(s) {', '.join(commits)}")


def _fallbacks(table: dict) -> str:
    return ", ".join(f"{d} {names[0]}" for d, names in table["fallback"].items() if d != ANY and names) or "none"


def _rounding(rule: ClassRule) -> str:
    """How the rule rounds a length, in words."""
    return "a power of two" if rule.per_octave == 1 else "a power of two or three quarters of one"


def table_md(root: Path, kernel) -> str | None:
    """The dispatch table of `kernel` (a Kernel or its name) as markdown: a line naming its sweep,
    one row per shape class (class, dtype, revision, runner-up, margin: how much slower the
    runner-up is there), then the fallback; None where the kernel has no table."""
    table = load_table(table_path(root, getattr(kernel, "name", kernel)))
    if table is None:
        return None
    rule = ClassRule.from_dict(table["rule"])
    lines = [f"{_source(table)}. A shape class is each axis rounded up to {_rounding(rule)} and how the rows "
             f"align (docs/dispatch.md).", "",
             "| class | dtype | revision | runner-up | margin |", "|---|---|---|---|---|"]
    for c in table["classes"]:
        lines.append(f"| {judge.class_label(c, rule)} | {c['dtype']} | {c['revision'] or '(none qualifies)'} | "
                     f"{c['runner_up'] or '-'} | {_margin(c) if c['revision'] else '-'} |")
    lines += ["", f"Outside every class: {_fallbacks(table)} (the fastest over the whole sweep)."]
    return "\n".join(lines) + "\n"


def summary(path: Path, table: dict, root: Path | None = None) -> list[str]:
    """What `kernlog dispatch` says of a table it wrote: its classes, who won how many, the
    fallback, where a class's pick is slower than the fastest at one of its points beyond noise,
    and the revisions left out and why."""
    shown = path.relative_to(root) if root is not None and path.is_relative_to(root) else path
    won = Counter(c["revision"] for c in table["classes"] if c["revision"])
    lines = [f"{table['kernel']}: {len(table['classes'])} shape classes -> {shown}", f"  {_source(table)}",
             "  picks: " + ", ".join(f"{name} {n}" for name, n in sorted(won.items(), key=lambda kv: (-kv[1], kv[0]))),
             f"  fallback: {_fallbacks(table)}"]
    for c in table["classes"]:
        if c.get("worst_point") and c["worst_point"][1] > c["noise"]:
            shape, loss, best = c["worst_point"]
            lines.append(f"  {c['dtype']} {'/'.join(c['points'])}: the pick {c['revision']} is {100 * loss:.1f}% "
                         f"slower than {best} at {shape}")
        elif c["revision"] and c["runner_up"] is None:
            lines.append(f"  {c['dtype']} {'/'.join(c['points'])}: only {c['revision']} qualifies")
    if table.get("unserved"):
        lines.append(f"  no revision qualifies at {len(table['unserved'])} point(s): {', '.join(table['unserved'])}")
    if table.get("unranked"):
        lines.append(f"  not ranked at {len(table['unranked'])} point(s), where a revision that qualifies elsewhere "
                     "is stale (calls there take the nearest class or the fallback; `kernlog bench` times them again): "
                     + ", ".join(f"{pt} ({', '.join(names)})" for pt, names in table["unranked"].items()))
    for name, why in table["left_out"].items():
        lines.append(f"  left out: {name} ({', '.join(f'{w}: {n} point(s)' for w, n in why.items())})")
    return lines


def _unranked_said(table: dict) -> str:
    """The page's sentence on the points the table does not rank ("" where none)."""
    stale = sorted({name for names in table.get("unranked", {}).values() for name in names})
    return (f" {len(table['unranked'])} sweep point(s) are not ranked, where the figure of {', '.join(stale)} is "
            f"stale: calls there take the nearest class or the fallback." if stale else "")


def page_md(root: Path, kernel) -> str | None:
    """The dispatch table as a kernel page shows it, sized for the page: a row per revision the
    library picks (the classes and sweep points it serves, its smallest margin over a runner-up),
    then where every class is listed; None where the kernel has no table."""
    name = getattr(kernel, "name", kernel)
    path = table_path(root, name)
    table = load_table(path)
    if table is None:
        return None
    try:
        moved = check(root, name)
    except KernlogError:  # no sweep here to make the table from
        moved = "no sweep"
    if moved:  # made from another sweep than this repository holds (or its sweep moved since)
        return (f"`{path.relative_to(root).as_posix()}` was made from another sweep than "
                f"`profiles/` holds now: `kernlog dispatch {name}` makes it again.\n")
    won: dict[str, list[dict]] = {}
    for c in table["classes"]:
        if c["revision"]:
            won.setdefault(c["revision"], []).append(c)
    none = sum(1 for c in table["classes"] if not c["revision"])
    rounding = _rounding(ClassRule.from_dict(table["rule"]))
    lines = [f"`kernels.library` picks the revision per shape class (each axis rounded up to {rounding}, "
             f"and how the rows align; [dispatch](../docs/dispatch.md)). {_source(table)}. Every class, with "
             f"its runner-up and margin: `{path.relative_to(root).as_posix()}` (`kernlog dispatch {name}` writes "
             f"it from the sweep). Outside every class: {_fallbacks(table)}."
             + (f" {none} class(es) where no revision qualifies (stale or unswept points)." if none else "")
             + _unranked_said(table), "",
             "| revision | shape classes | sweep points | smallest margin over the runner-up |",
             "| --- | ---: | ---: | --- |"]
    for rev, classes in sorted(won.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        margins = [c for c in classes if c["margin"] is not None]
        least = min(margins, key=lambda c: c["margin"]) if margins else None
        lines.append(f"| {rev} | {len(classes)} | {sum(len(c['points']) for c in classes)} | "
                     f"{_margin(least) + ' over ' + least['runner_up'] if least else 'only one qualifies'} |")
    own = [_gpu_said(root, name, gpu, path, table) for gpu, path in gpu_table_paths(root, name).items()]
    return "\n".join(lines + (["", *own] if own else [])) + "\n"


def _gpu_said(root: Path, name: str, gpu: str, path: Path, primary: dict) -> str:
    """The page's paragraph on a per-GPU table: on that GPU a call takes its own class there
    first, and where that GPU's sweep picks otherwise than the table above (`primary`)."""
    rel = path.relative_to(root).as_posix()
    try:
        moved = check(root, name, gpu)
    except KernlogError:
        moved = "no sweep"
    if moved:
        return (f"`{rel}` was made from another sweep than `profiles/` holds now: "
                f"`kernlog dispatch {name} --gpu {gpu}` makes it again.")
    table = load_table(path)
    theirs = {(c["dtype"], c["align"], tuple(c["buckets"])): c["revision"] for c in primary["classes"]}
    ranked = [c for c in table["classes"] if c["revision"]]
    other = [c for c in ranked if c["revision"] != theirs.get((c["dtype"], c["align"], tuple(c["buckets"])))]
    clear: dict[str, list[str]] = {}  # revision -> the classes it wins beyond the noise, where the table above differs
    for c in other:
        if c["margin"] is None or c["margin"] > c["noise"]:
            clear.setdefault(c["revision"], []).append(f"{'/'.join(c['points'])} {c['dtype']}")
    named = "; ".join(f"{rev} at {', '.join(pts)}" for rev, pts in clear.items())
    ties = len(other) - sum(len(pts) for pts in clear.values())
    said = (f"Its picks differ from the table above's at {len(other)} of them"
            + (f"; beyond the noise: {named}" if named else "")
            + (f"; {ties} {'is a tie' if ties == 1 else 'are ties'} with the runner-up there" if ties else "") + "."
            if other else "Its picks are the table above's.")
    return (f"On {table['source'].get('gpu', gpu)} a call first takes its own class in `{rel}`, made from that "
            f"GPU's own sweep ({len(ranked)} class(es)); a call there outside those classes takes the table above. "
            + said)
