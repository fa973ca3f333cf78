"""The published pages' own rules, which `kernlog report --check` enforces on the log and every
Markdown page it links (`check`), each broken rule named with its page and line:

- ceiling: a ceiling quoted in prose says what profiles/<gpu>/ceilings.json stores, to the
  precision it is written in ("3.0 TB/s" holds for a stored 3001 GB/s, "795" does not for 776).
  Prose is what prose.unsourced reads: not the generated blocks, code, or a dated
  `<!--history DATE COMMIT-->` region; a kernel's notes.md, rendered into its page's generated
  steps, is read where it is written. A figure marker is read as its value, unless its quantity
  is a ceiling itself (CEILING_QUANTITIES). Only these phrasings are read as a ceiling
  (case-insensitive; N a number, 3,001 or 3.0):
    copy:   "copy [bandwidth] ceiling|roof|peak [of|is|=|:] N GB/s|TB/s", "N GB/s|TB/s copy
            [bandwidth] ceiling", "Ceiling: N GB/s" opening a line or sentence, and "ceiling(s) ...
            copy N GB/s" within a sentence; a bandwidth figure needs its unit to count;
    matmul: "cuBLAS['s] [bf16] [matmul] roof|ceiling|rate|peak [of|is|=|:] N [TFLOP/s]",
            "cuBLAS [bf16] N [TFLOP/s]", "cuBLAS, N TFLOP/s", "matmul ceiling [of|is|:] N TFLOP/s"
            (or "Ceiling: N TFLOP/s" opening a line or sentence) and "N TFLOP/s cuBLAS|matmul ceiling".
  Other ceilings (an "fp32 FMA ceiling", a "DRAM bandwidth ceiling" from the datasheet) are not
  the stored ones and are not read.
  A bare N (no unit) counts only where no word, unit or shape follows it ("cuBLAS 744)" is read,
  "cuBLAS 449.9 us" and "cuBLAS 3 stages" are not); a figure followed by "at SHAPE" other than
  the ceiling's own (8192^3 for cuBLAS, the 2 GiB copy) is a per-shape rate, not the ceiling.
  The GPU is the one the paragraph names (H100, nvidia-h200: a slug or its model), else those the
  page names, else any stored; the figure must match one of them.
- cross-run: a figure the renderer marks as computed over two runs (`cross_run`, which writes
  MARK then the invisible XRUN after the value) carries MARK, the § the legend defines; an XRUN
  with no § beside it is a template that dropped the mark. `runs_apart` is the one test of
  whether a figure needs it.
- size: a page holds at most MAX_BYTES bytes and MAX_LINES lines.
- paragraph: a rendered paragraph (a blank-line-separated block of prose, or one list item; not
  tables or code) holds at most MAX_PARAGRAPH visible characters: HTML comments dropped, figure
  markers read as their value, links as their text, Markdown emphasis and backticks not counted.
- table: a table has at most MAX_COLUMNS columns.
- link: a relative link or image (outside code and comments) names a file of the repository,
  resolved from the page's folder as a viewer does (a kernel's notes render into reports/).

Pure string work but for `stored_ceilings`, `violations` and `check`, which read the repository.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from kernlog.config import layout
from kernlog.errors import KernlogError
from kernlog.render import paths as where
from kernlog.render.notes import NOTES
from kernlog.render.prose import BLOCK, CODE, FIG, HISTORY
from kernlog.store import keys

MAX_BYTES = 60 * 1024
MAX_LINES = 450
MAX_PARAGRAPH = 800
MAX_COLUMNS = 12
MAX_LISTED = 8
MARK = "§"  # the legend's mark of a figure over two runs
XRUN = "<!--xrun-->"  # what the renderer writes after such a figure's MARK, for this check
# A figure marker with one of these quantities renders the stored ceiling itself.
CEILING_QUANTITIES = ("copy_gbps", "matmul_bf16_tflops", "ceiling")


@dataclass(frozen=True)
class Violation:
    path: str  # as the repository names it
    line: int
    rule: str  # ceiling, cross-run, size, paragraph, table, link
    message: str

    def __str__(self) -> str:
        return f"{self.path} line {self.line}: {self.rule}: {self.message}"


def cross_run(value_text: str) -> str:
    """A rendered figure computed over two runs, as every page writes it: the value, MARK, XRUN."""
    return f"{value_text}{MARK}{XRUN}"


def runs_apart(*runs: str | None) -> bool:
    """Whether a figure over these runs' values (a ratio: its two figures' bench.csv run ids)
    needs MARK: two known runs differ. An unknown run (None) says nothing either way."""
    return len({r for r in runs if r is not None}) > 1


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def _blank(m: re.Match) -> str:  # drop a match, keeping its line breaks
    return "\n" * m.group(0).count("\n")


# --- size, paragraphs, tables ---------------------------------------------------------------

def over_size(text: str) -> list[tuple[int, str]]:
    """(line, message) where the page passes MAX_LINES lines or MAX_BYTES bytes: the first line
    over each."""
    out = []
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_LINES:
        out.append((MAX_LINES + 1, f"{lines} lines (at most {MAX_LINES})"))
    data = text.encode()
    if len(data) > MAX_BYTES:
        out.append((data[:MAX_BYTES].count(b"\n") + 1, f"{len(data)} bytes (at most {MAX_BYTES})"))
    return out


def _without_comments(text: str) -> str:
    """`text` with figure markers read as their values and every other HTML comment dropped,
    line breaks kept."""
    text = FIG.sub(lambda m: m.group("value") + "\n" * (m.group(0).count("\n") - m.group("value").count("\n")), text)
    return re.sub(r"<!--.*?-->", _blank, text, flags=re.S)


_FENCE = re.compile(r"(`{3,}|~{3,})")
_HEADING = re.compile(r"#{1,6}\s")
_ITEM = re.compile(r"(?:[-*+]|\d+[.)])\s+")
_DELIMITER = re.compile(r"\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?")


def _outside_fences(text: str):
    """(line number, stripped line) of every line outside fenced code, fences excluded."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if fence:
            if s.startswith(fence):
                fence = None
            yield n, None  # breaks a paragraph like a blank line
            continue
        m = _FENCE.match(s)
        if m:
            fence = m.group(1)[0] * 3
            yield n, None
            continue
        yield n, s


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each rendered paragraph: blank-line-separated prose, each list item
    and heading its own; tables and fenced code are none. Comments are dropped first."""
    out: list[tuple[int, list[str]]] = []
    cur = None
    for n, s in _outside_fences(_without_comments(text)):
        if s is not None and s.startswith(">"):
            s = s.lstrip(">").strip()
        if not s or s.startswith("|"):
            cur = None
        elif _HEADING.match(s):
            out.append((n, [s]))
            cur = None
        elif cur is None or _ITEM.match(s):
            cur = (n, [s])
            out.append(cur)
        else:
            cur[1].append(s)
    return [(n, " ".join(lines)) for n, lines in out]


def visible(paragraph: str) -> str:
    """What a reader sees of a paragraph's Markdown (comments already dropped): links as their
    text, no HTML tags, emphasis or backticks, runs of spaces as one."""
    s = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", paragraph)
    s = re.sub(r"</?[A-Za-z][^>]*>", "", s)
    s = s.replace("`", "").replace("**", "").replace("__", "")
    return " ".join(s.split())


def long_paragraphs(text: str) -> list[tuple[int, str]]:
    """(line, message) of each paragraph over MAX_PARAGRAPH visible characters."""
    out = []
    for n, para in paragraphs(text):
        size = len(visible(para))
        if size > MAX_PARAGRAPH:
            out.append((n, f"a paragraph of {size} visible characters (at most {MAX_PARAGRAPH}): split it"))
    return out


def _cells(row: str) -> list[str]:
    s = row.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    return re.split(r"(?<!\\)\|", s)


def tables(text: str) -> list[tuple[int, int]]:
    """(header line, columns) of each Markdown table outside fenced code (a row of `|` cells
    followed by a delimiter row)."""
    rows = list(_outside_fences(_without_comments(text)))
    out = []
    for i, (n, s) in enumerate(rows[:-1]):
        below = rows[i + 1][1]
        if s and s.startswith("|") and below and _DELIMITER.fullmatch(below) and "-" in below:
            if i == 0 or not (rows[i - 1][1] or "").startswith("|"):
                out.append((n, len(_cells(s))))
    return out


def wide_tables(text: str) -> list[tuple[int, str]]:
    """(line, message) of each table over MAX_COLUMNS columns."""
    return [(n, f"a table of {cols} columns (at most {MAX_COLUMNS}): split it or move columns into rows")
            for n, cols in tables(text) if cols > MAX_COLUMNS]


# --- cross-run marks -----------------------------------------------------------------------

def unmarked_cross_runs(text: str) -> list[tuple[int, str]]:
    """(line, message) of each XRUN with no MARK right beside it (before or after)."""
    text = re.sub(r"```.*?```", _blank, text, flags=re.S)
    out = []
    for m in re.finditer(re.escape(XRUN), text):
        if not (text[:m.start()].endswith(MARK) or text[m.end():].startswith(MARK)):
            start = text.rfind("\n", 0, m.start()) + 1
            cell = text[start:m.start()].rsplit("|", 1)[-1].strip()
            out.append((_line(text, m.start()), f"the figure {cell[-24:]!r} is over two runs but lacks {MARK}: "
                                                f"render it with kernlog.render.limits.cross_run"))
    return out


# --- ceilings quoted in prose --------------------------------------------------------------

_NUM = r"~?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\d.,]\d)"
_BW = r"\s*(?P<unit>[GT]B/s)"
_FLOP = r"(?:\s*(?P<unit>TFLOPS?(?:/s)?))"
_JOIN = r"\s*(?:\s(?:of|is)\s|[=:(])?\s*"
_START = r"(?:^|[.:;]\s+)"  # "Ceiling: 776 TFLOP/s" opening a line or sentence
_COPY = [
    rf"\bcopy(?:\s+bandwidth)?\s+(?:ceiling|roof|peak){_JOIN}{_NUM}{_BW}",
    rf"{_START}ceiling{_JOIN}{_NUM}{_BW}",
    rf"{_NUM}{_BW}\s+copy(?:\s+bandwidth)?\s+ceiling",
    rf"\bceilings?\b[^.]{{0,80}}?\bcopy\s+{_NUM}{_BW}",
]
_MATMUL = [
    rf"\bcuBLAS(?:'s)?(?:\s+bf16)?(?:\s+matmul)?\s+(?:roof|ceiling|rate|peak){_JOIN}{_NUM}{_FLOP}?",
    rf"\bcuBLAS(?:\s+bf16)?\s+{_NUM}{_FLOP}?",
    rf"\bcuBLAS(?:\s+bf16)?[,:]\s+{_NUM}{_FLOP}",
    rf"(?:\bmatmul\s+|{_START})ceiling{_JOIN}{_NUM}{_FLOP}",
    rf"{_NUM}{_FLOP}\s+(?:cuBLAS|matmul)\s+ceiling",
]
PATTERNS = {"copy_gbps": [re.compile(p, re.I | re.M) for p in _COPY],
            "matmul_bf16_tflops": [re.compile(p, re.I | re.M) for p in _MATMUL]}
NAMES = {"copy_gbps": "copy ceiling", "matmul_bf16_tflops": "cuBLAS bf16 ceiling"}
_AT = re.compile(r"\s+at\s+(?P<what>\d[\d,.]*(?:\s*[x×]\s*\d+)*(?:\^\d|³|²)?(?:\s*[KMGT]i?B\b)?)")
_AFTER_BARE = re.compile(r"\s*(?:[A-Za-z%µ×^³²]|\d)|x\d")
_SIZES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KI": 2 ** 10, "MI": 2 ** 20, "GI": 2 ** 30, "TI": 2 ** 40}


def _is_ceiling_point(what: str, quantity: str, ceiling: dict) -> bool:
    """Whether "at WHAT" names the point the ceiling was measured at (its matmul shape, its copy size)."""
    w = re.sub(r"\s", "", what).replace("×", "x").replace(",", "")
    if quantity == "matmul_bf16_tflops":
        shape = [int(d) for d in ceiling.get("matmul_shape") or []]
        m = re.fullmatch(r"(\d+)(?:\^3|³)", w)
        dims = [int(m.group(1))] * 3 if m else [int(d) for d in w.split("x") if d.isdigit()]
        return bool(shape) and dims == shape
    m = re.fullmatch(r"([\d.]+)([KMGT]i?)B", w, re.I)
    return bool(m) and ceiling.get("copy_bytes") is not None and \
        abs(float(m.group(1)) * _SIZES[m.group(2).upper()] - ceiling["copy_bytes"]) < 1


def _gpu_words(slug: str) -> list[str]:
    """How prose names a GPU: its slug and its model (nvidia-h100-80gb-hbm3: h100)."""
    parts = slug.split("-")
    model = next((p for p in parts[1:] if any(c.isdigit() for c in p)), None) if len(parts) > 1 else None
    return [slug] + ([model] if model else [])


def _named(text: str, gpus) -> list[str]:
    return [g for g in gpus if any(re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", text, re.I)
                                   for w in _gpu_words(g))]


def _prose_only(text: str, generated: bool) -> str:
    """The prose a ceiling is checked in, line breaks kept: a ceiling's own figure marker
    dropped, any other read as its value; generated blocks (unless `generated`), history,
    code and other comments dropped."""
    def fig(m):
        spec = m.group("spec").split()
        if len(spec) > 1 and (spec[1] in CEILING_QUANTITIES or spec[1].startswith("ceiling")):
            return "∎" + _blank(m)
        return m.group("value") + "\n" * (m.group(0).count("\n") - m.group("value").count("\n"))

    for pattern in (HISTORY, *(() if generated else (BLOCK,)), CODE):
        text = pattern.sub(_blank, text)
    text = FIG.sub(fig, text)
    return re.sub(r"<!--.*?-->", _blank, text, flags=re.S)


def ceiling_mismatches(text: str, ceilings: dict[str, dict], files: dict[str, str] | None = None,
                       generated: bool = False) -> list[tuple[int, str]]:
    """(line, message) of each ceiling quoted in `text`'s prose (the phrasings in this module's
    docstring) that no stored ceiling of the GPUs it speaks of matches at its written precision.
    `ceilings`: GPU slug -> its ceilings.json; `files`: slug -> that file as the repository
    names it (for the message); `generated`: read generated blocks too."""
    prose = _prose_only(text, generated)
    page_gpus = _named(text, ceilings)
    seen, out = set(), []
    for quantity, patterns in PATTERNS.items():
        for pattern in patterns:
            for m in pattern.finditer(prose):
                if m.start("num") in seen:
                    continue
                tail = prose[m.end():]
                if m.group("unit") is None and _AFTER_BARE.match(tail) and not _AT.match(tail):
                    continue  # a bare number with a word or unit after it: not a rate
                at = _AT.match(tail)
                start = prose.rfind("\n\n", 0, m.start()) + 1
                end = prose.find("\n\n", m.end())
                paragraph = prose[start:end if end >= 0 else len(prose)]
                gpus = _named(paragraph, ceilings) or page_gpus or list(ceilings)
                stored = {g: ceilings[g] for g in gpus if ceilings[g].get(quantity) is not None}
                if at:
                    stored = {g: c for g, c in stored.items() if _is_ceiling_point(at.group("what"), quantity, c)}
                if not stored:
                    continue
                seen.add(m.start("num"))
                written = m.group("num").lstrip("~")
                value = float(written.replace(",", ""))
                places = len(written.partition(".")[2])
                scale = 1e-3 if (m.group("unit") or "").upper() == "TB/S" else 1.0
                if any(abs(c[quantity] * scale - value) <= 0.5 * 10 ** -places + 1e-9 for c in stored.values()):
                    continue
                unit = "GB/s" if quantity == "copy_gbps" else "TFLOP/s"
                said = "; ".join(f"{c[quantity]:.0f} {unit} ({(files or {}).get(g, g)})" for g, c in stored.items())
                quoted = " ".join(m.group(0).lstrip(".:;").split())
                out.append((_line(prose, m.start("num")),
                            f"{quoted!r} differs from the stored {NAMES[quantity]}, {said}: "
                            "write the stored figure, or date the sentence in <!--history DATE COMMIT-->"))
    return sorted(out)


_LINK = re.compile(r"\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:|//")


def broken_links(page: str, text: str, exists) -> list[tuple[int, str]]:
    """(line, message) for each relative link target on `page` (the repository's name for it,
    titles and <brackets> allowed, %-escapes read) that `exists` (a repository-relative path ->
    bool) denies, or that leaves the repository; URLs, anchors and links from the root pass."""
    out = []
    for n, line in _outside_fences(_without_comments(text)):
        for target in _LINK.findall(CODE.sub("", line or "")):
            path = unquote(target.strip("<>").split("#")[0])
            if not path or _SCHEME.match(path):
                continue
            rel = path.lstrip("/") if path.startswith("/") else where.Paths.resolve(path, page)
            if rel == ".." or rel.startswith("../"):
                out.append((n, f"link to {target}: outside the repository"))
            elif not exists(rel):
                out.append((n, f"link to {target}: no file {rel}"))
    return out


# --- the repository ------------------------------------------------------------------------

def stored_ceilings(root: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """(GPU slug -> its ceilings.json, slug -> that file as the repository names it)."""
    lay = layout(root)
    found = sorted(keys.profiles_dir(root).glob("*/ceilings.json"))
    return ({p.parent.name: json.loads(p.read_text()) for p in found},
            {p.parent.name: lay.rel(p) for p in found})


def page_violations(path: str, text: str, ceilings: dict[str, dict] | None = None,
                    files: dict[str, str] | None = None, generated: bool = False) -> list[Violation]:
    """Every rule this module holds, on one page's text (`path` names it in the messages);
    `generated`: read ceilings in the generated blocks too (ceiling_mismatches)."""
    found = [*(("size", n, msg) for n, msg in over_size(text)),
             *(("ceiling", n, msg) for n, msg in ceiling_mismatches(text, ceilings or {}, files, generated)),
             *(("cross-run", n, msg) for n, msg in unmarked_cross_runs(text)),
             *(("paragraph", n, msg) for n, msg in long_paragraphs(text)),
             *(("table", n, msg) for n, msg in wide_tables(text))]
    return sorted((Violation(path, n, rule, msg) for rule, n, msg in found), key=lambda v: v.line)


def violations(root: Path, generated: bool = False) -> list[Violation]:
    """Every broken rule on the published pages, and every mismatched ceiling in a kernel's notes;
    `generated`: read ceilings in the pages' generated blocks too."""
    ceilings, files = stored_ceilings(root)
    out = []
    for rel, text in where.published(root).items():
        out += page_violations(rel, text, ceilings, files, generated)
        out += [Violation(rel, n, "link", msg) for n, msg in broken_links(rel, text, lambda p: (root / p).exists())]
    lay = layout(root)
    for path in sorted(lay.kernels.glob(f"*/{NOTES}")):
        out += [Violation(lay.rel(path), n, "ceiling", msg)
                for n, msg in ceiling_mismatches(path.read_text(), ceilings, files)]
    return out


def check(root: Path) -> None:
    """Raise naming every broken rule (the first MAX_LISTED, then how many more); a ceiling is
    checked in the generated blocks too (a prediction's text quoting a rate since re-measured)."""
    found = violations(root, generated=True)
    if found:
        listed = "; ".join(str(v) for v in found[:MAX_LISTED])
        more = f"; and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
        raise KernlogError(f"{len(found)} page rule(s) broken: {listed}{more}; fix the prose or the template "
                           "that renders it, then run `kernlog report` (the rules: kernlog.render.limits)")
