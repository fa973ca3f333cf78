"""`kernlog report`: the log (KERNEL_LOG.md, or `[tool.kernlog] log`) and a page per kernel in the
reports folder (`[tool.kernlog] reports`), from the stored profiles alone (no GPU), deterministic;
every link between them relative (kernlog.render.paths).

Only the blocks between `<!-- kernlog:begin NAME -->` and `<!-- kernlog:end NAME -->`
are generated; prose outside them is kept as written.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import jinja2

from kernlog import hints, snapshot
from kernlog.judge.verdicts import COPY_BAR, HOT_MIN_SAMPLES, LAUNCH_BOUND_US
from kernlog.render import dispatch, facts, limits, notes, plots, prose, steps, triage
from kernlog.render import paths as where
from kernlog.render.arc import contradictions
from kernlog.render.facts import gate_failures, stale_figures, unreadable
from kernlog.store.triages import all_stored

# What `kernlog report` calls beside render: the facts (unreadable, stale_figures) live in
# kernlog.render.facts, collect here adds the kernels not profiled yet; out_of_date and plot_all
# cover every file the front page links (the kernel pages and the plots), so `report --check`
# gates them all; log_path and page_path name the files where the repository keeps them.
__all__ = ["LOG", "HEADER", "collect", "unreadable", "stale_figures", "gate_failures", "render", "render_blocks",
           "splice", "out_of_date", "plot_all", "log_path", "page_path"]

LOG = where.Paths().log  # the default; a repository's own: log_path(root)
BLOCK = re.compile(r"<!-- kernlog:begin (?P<name>[a-z0-9_]+) -->\n.*?<!-- kernlog:end (?P=name) -->\n?", re.DOTALL)


@jinja2.pass_context
def _here(ctx, rel: str) -> str:
    """A plot, named from the root, linked from the page being rendered (its `link_from_page`)."""
    return ctx["link_from_page"](rel)


@functools.cache
def _templates() -> jinja2.Environment:
    """One environment per process, so each template is parsed and compiled once, not once per
    page (compiling them was most of `kernlog report`'s time outside the plots)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("kernlog.render", "templates"), trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["f"] = lambda v, spec=".1f": "–" if v is None else format(v, spec)
    env.filters["cell"] = lambda v: " ".join(str(v or "").split()).replace("|", "\\|")  # one table cell's text
    env.filters["here"] = _here
    env.filters["gpu"] = lambda name: (name or "–").removeprefix("NVIDIA ")  # a table cell's GPU: "H100 80GB HBM3"
    env.filters["lead"] = lead
    env.filters["basename"] = lambda rel: rel.rpartition("/")[2]
    env.globals["check_command"] = hints.check_command  # a revision's check, runnable where the page is read
    return env


def lead(doc: str, most: int = 300) -> str:
    """A kernel's docstring as its page's head shows it: its whole paragraphs up to `most`
    characters, else the first paragraph's whole sentences up to that (at least its first), so
    no word is cut."""
    paras = [" ".join(p.split()) for p in (doc or "").strip().split("\n\n") if p.strip()]
    kept: list[str] = []
    for p in paras:
        if len(" ".join(kept + [p])) > most:
            break
        kept.append(p)
    if kept or not paras:
        return "\n\n".join(kept)
    sentences = re.split(r"(?<=[.!?:])\s+", paras[0])
    out = sentences[0]
    for sentence in sentences[1:]:
        if len(out) + 1 + len(sentence) > most:
            break
        out += " " + sentence
    return out


def _env() -> jinja2.Environment:
    env = _templates()
    env.globals["xrun"] = limits.cross_run("")  # after a figure over two runs
    return env


def collect(root: Path, kernels: list, histories: bool = True) -> list[dict]:
    """The log's sections (kernlog.render.facts.collect): one per kernel, those with nothing
    stored yet included ("not profiled yet", a page listing their revisions)."""
    return facts.collect(root, kernels, histories, unprofiled=True)


def _measured(s: dict) -> bool:
    return bool(s["ladders"] or s["sweeps"])


def render_blocks(sections: list[dict], triaged: bool = False, paths: where.Paths | None = None) -> dict[str, str]:
    """The front page's generated block (`triaged`: the reports folder's triage.md exists, and is
    linked); `paths`: the repository's (kernlog.render.paths.of), the defaults where None. The
    legend speaks only of what the log shows: none where nothing is measured yet, cuBLAS only
    beside a matmul kernel's figures."""
    paths = paths or where.Paths()
    links = {s["kernel"].name: {"text": paths.page(s["kernel"].name),
                                "href": paths.from_log(paths.page(s["kernel"].name))} for s in sections}
    sweep_links = {(s["kernel"].name, sw["gpu"]): {"text": sw["page"], "href": paths.from_log(sw["page"])}
                   for s in sections for sw in s.get("sweeps") or [] if sw.get("page")}  # a GPU's own sweep page
    env = _env()
    best_of = {}
    for s in sections:
        lad = s["arcs"][0] if s.get("arcs") else None
        row = steps.best(lad) if lad else None
        arc_row = next((r for r in (lad or {}).get("arc_rows", []) if row and r["revision"] == row["rec"].revision),
                       None)
        best_of[s["kernel"].name] = None if row is None else {
            "name": row["rec"].revision, "us": row["rate"]["us"], "stale": row["stale"],
            "vs_ref": (arc_row or {}).get("vs_ref"), "best_ref": (arc_row or {}).get("best_ref"),
            "ties": steps.tied_with(lad, row["rec"].revision)}
    return {"front": env.get_template("front.md.j2").render(
        sections=sections, stale=stale_figures(sections), copy_bar=COPY_BAR, launch_bound_us=LAUNCH_BOUND_US,
        hot_min=HOT_MIN_SAMPLES, triaged=triaged, links=links, sweep_links=sweep_links, best_of=best_of,
        ceilings=_ceilings(sections),
        triage={"text": paths.triage, "href": paths.from_log(paths.triage)},
        measured=any(_measured(s) or s["unreadable"] for s in sections),
        matmul=any(_measured(s) and s["kernel"].ceiling == "matmul" for s in sections))}


def _ceilings(sections: list[dict]) -> list[dict]:
    """Each GPU's stored ceilings, once (the legend's line), from the ladders that quote them."""
    out: dict = {}
    for s in sections:
        for lad in s["ladders"]:
            c = lad["ceilings"]
            if lad["gpu"]["name"] not in out and c.get("copy_gbps") is not None:
                shape = c.get("matmul_shape")
                out[lad["gpu"]["name"]] = {
                    "name": lad["gpu"]["name"], "copy_gbps": c["copy_gbps"],
                    "copy_gib": f"{c['copy_bytes'] / 2**30:g}" if c.get("copy_bytes") else "?",
                    "matmul_bf16_tflops": c.get("matmul_bf16_tflops"),
                    "matmul_shape": "x".join(map(str, shape)) if shape else "shape not recorded"}
    return [out[k] for k in sorted(out)]


def page_blocks(s: dict, paths: where.Paths | None = None, root: Path | None = None) -> dict[str, str]:
    """A kernel page's generated blocks: its first screen (where it stands, next, the arc), its
    steps (kernlog.render.steps, with the author's notes beside them) and its evidence; every
    link in them relative to the page (its plots beside it, the front page `paths.front`)."""
    paths = paths or where.Paths()
    page = paths.page(s["kernel"].name)
    env = _env()

    def link_from_page(rel: str) -> str:  # a plot, named from the root, linked from the page (filter `here`)
        return paths.link(rel, page)

    told = ({k: notes.dated(prose.fill(root, v, missing="–")) for k, v in notes.of_kernel(root, s["kernel"]).items()}
            if root is not None else {})
    history = notes.history_page(root, s["kernel"].name) if root is not None else None
    main = s["ladders"][0] if s["ladders"] else None
    for lad in s["arcs"]:
        row = steps.best(lad)
        lad["best_name"] = row["rec"].revision if row else None
    blocks = {"head": env.get_template("head.md.j2").render(
        link_from_page=link_from_page, s=s, front=paths.front,
        history=paths.link(history, page) if history else None, stands=steps.stands(s, main),
        next=steps.next_line(s, main), author_next=told.get("next"))}
    if main is not None:
        blocks["steps"] = env.get_template("steps.md.j2").render(
            link_from_page=link_from_page, s=s, steps=steps.of_ladder(main, told, s["ladders"]),
            refs=steps.references(main),
            elsewhere=steps.elsewhere(s, main, told), places_in_heading=steps.PLACES_IN_HEADING,
            profiles=paths.profiles, story=told.get("story"))
    blocks["evidence"] = env.get_template("kernel.md.j2").render(
        link_from_page=link_from_page, s=s, copy_bar=COPY_BAR, profiles=paths.profiles, others=steps.others(s),
        story=told.get("story"), told=told,
        dispatch=dispatch.page_md(root, s["kernel"]) if root is not None else None)
    return blocks


def sweep_block(s: dict, sw: dict, paths: where.Paths | None = None) -> str:
    """The generated block of the page of `sw`, a sweep on a GPU other than the kernel page's."""
    paths = paths or where.Paths()
    page = paths.page(s["kernel"].name)
    first = next((o["gpu"] for o in s["sweeps"] if not o.get("page")), None)
    return _env().get_template("sweep_page.md.j2").render(
        link_from_page=lambda rel: paths.link(rel, sw["page"]), s=s, sw=sw, copy_bar=COPY_BAR,
        back=paths.link(page, sw["page"]), front=paths.link(paths.log, sw["page"]), first_gpu=first)


def log_path(root: Path | None = None) -> str:
    """The log as the repository at `root` names it (the default where None)."""
    return where.of(root).log


def page_path(kernel: str, root: Path | None = None) -> str:
    """A kernel's page as the repository at `root` names it (the default layout where None)."""
    return where.of(root).page(kernel)


@snapshot.held()  # it only reads (kernlog.snapshot)
def pages(root: Path, sections: list[dict]) -> dict[str, str]:
    """Each kernel's page (REPORTS/KERNEL.md) as it should read: its generated blocks spliced
    into the hand-written prose it holds, figure markers filled."""
    paths = where.of(root)
    out = {}
    for s in sections:
        rel = paths.page(s["kernel"].name)
        path = root / rel
        text = path.read_text() if path.exists() else PAGE
        out[rel] = prose.fill(root, splice(text, page_blocks(s, paths, root)))
        for sw in s["sweeps"]:
            if sw.get("page"):
                path = root / sw["page"]
                text = path.read_text() if path.exists() else SWEEP_PAGE
                out[sw["page"]] = prose.fill(root, splice(text, {"sweep": sweep_block(s, sw, paths)}))
    block = triage.page_block(root)
    if block is not None:
        path = root / paths.triage
        out[paths.triage] = splice(path.read_text() if path.exists() else "", {"triage": block}).lstrip("\n")
    return out


TRIAGE_PAGE = where.Paths().triage  # the default; a repository's own: paths.of(root).triage


def splice(text: str, blocks: dict[str, str]) -> str:
    """Replace each generated block in `text`; append the ones it lacks, in order."""
    seen = set()

    def sub(m):
        name = m.group("name")
        seen.add(name)
        if name not in blocks:
            return m.group(0)
        return f"<!-- kernlog:begin {name} -->\n{blocks[name].rstrip()}\n<!-- kernlog:end {name} -->\n"

    text = BLOCK.sub(sub, text)
    before = None
    for name, body in blocks.items():
        if name not in seen:  # after the block before it in `blocks`, else at the end
            block = f"<!-- kernlog:begin {name} -->\n{body.rstrip()}\n<!-- kernlog:end {name} -->\n"
            end = f"<!-- kernlog:end {before} -->\n" if before else None
            if end and end in text:
                at = text.index(end) + len(end)
                text = text[:at] + "\n" + block + text[at:]
            else:
                text = text.rstrip("\n") + "\n\n" + block
        before = name
    return text


HEADER = """# {title}

The worklog of this repository's kernels, step by step from naive to tuned: this front page, and
one page per kernel under {reports}/. Everything between `kernlog:begin` / `kernlog:end` markers is
generated by `kernlog report` from `{profiles}/`; the prose around them is written by hand.
"""


def header(paths: where.Paths) -> str:
    """A new log's opening (the prose before its generated block), naming the repository's folders."""
    return HEADER.format(title=Path(paths.log).stem, reports=paths.reports, profiles=paths.profiles)


SWEEP_PAGE = "<!-- kernlog:begin sweep -->\n<!-- kernlog:end sweep -->\n"  # a sweep on another GPU than the page's
PAGE = ("<!-- kernlog:begin head -->\n<!-- kernlog:end head -->\n\n"
        "<!-- kernlog:begin steps -->\n<!-- kernlog:end steps -->\n\n"
        "<!-- kernlog:begin evidence -->\n<!-- kernlog:end evidence -->\n")


@snapshot.held()  # it only reads (kernlog.snapshot)
def render(root: Path, kernels: list, sections: list[dict] | None = None) -> str:
    """The log as it should read; pass `sections` (from collect) to reuse them."""
    paths = where.of(root)
    path = root / paths.log
    text = path.read_text() if path.exists() else header(paths)
    sections = collect(root, kernels) if sections is None else sections
    return prose.fill(root, splice(text, render_blocks(sections, triaged=bool(all_stored(root)), paths=paths)))


@snapshot.held()  # it only reads (kernlog.snapshot)
def out_of_date(root: Path, sections: list[dict]) -> list[str]:
    """What `report --check` fails on beside the log: a kernel page out of date or holding an
    unsourced figure, a plot missing or drawn from other data, an SVG in the reports folder
    linked from nowhere, and a contradiction between two renderings of one fact."""
    out = []
    for rel, text in pages(root, sections).items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            out.append(f"{rel} is out of date")
        out += [f"{rel} line {n}: the figure {fig!r} comes from no profile" for n, fig in prose.unsourced(text)]
    for s in sections:  # a note is rendered inside a generated block, where the page's check cannot see it
        path = notes.folder(root, s["kernel"].name) / notes.NOTES
        if path.is_file():
            rel = path.relative_to(root) if path.is_relative_to(root) else path
            out += [f"{rel} line {n}: the figure {fig!r} comes from no profile"
                    for n, fig in prose.unsourced(path.read_text())]
    out += plots.stale_plots(root, sections)
    out += [f"{rel} is linked from nowhere" for rel in plots.orphans(root, sections)]
    out += [f"{rel} is {orphan_what(root, rel)}" for rel, gone in orphan_pages(root, sections) if gone]
    out += [f"contradiction: {c}" for c in contradictions(sections)]
    return out


def plot_all(root: Path, sections: list[dict], redraw: bool = False) -> list[Path]:
    """Write the kernel pages and draw each plot whose data changed (every plot with `redraw`);
    remove the SVGs no page links. The plots drawn."""
    for rel, text in pages(root, sections).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in plots.orphans(root, sections) + [rel for rel, gone in orphan_pages(root, sections) if gone]:
        (root / rel).unlink()
    return plots.plot_all(root, sections, redraw)


def orphan_what(root: Path, rel: str) -> str:
    """What an orphan page (orphan_pages) was: a GPU's sweep page or an operator's page."""
    first = (root / rel).read_text(errors="replace").split("\n", 1)[0]
    return ("a sweep page no sweep is kept apart on (its GPU's bench.csv is gone, or its sweep is the kernel "
            "page's now)" if first == SWEEP_PAGE.split("\n")[0]
            else "the page of no operator (its folder is gone)")


def orphan_pages(root: Path, sections: list[dict]) -> list[tuple[str, bool]]:
    """Kernel pages kernlog wrote (they open with its head block) in the reports folder whose
    operator is no longer one (a folder removed or renamed), each with whether it holds nothing
    but kernlog's blocks: only such a page `report` removes; prose of the team's own is kept."""
    paths = where.of(root)
    mine = {paths.page(s["kernel"].name) for s in sections}  # the pages' names: no page rendered for them
    mine |= {sw["page"] for s in sections for sw in s["sweeps"] if sw.get("page")}
    found = ((paths.under_reports(p.name), p.read_text(errors="replace")) for p in (root / paths.reports).glob("*.md"))
    return sorted((rel, not BLOCK.sub("", text).strip()) for rel, text in found
                  if rel not in mine and text.startswith((PAGE.split("\n")[0], SWEEP_PAGE.split("\n")[0])))
