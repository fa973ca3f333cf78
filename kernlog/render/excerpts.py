"""What changed, per step: a short excerpt of a step's source against the previous step's, as
the kernel page prints it under the step ("**What changed**").

Each revision's code is its first declared source (kernlog.spec.Revision.sources, read now from
disk: the excerpt always shows the current source, stale profile or not), or where that is an
operator's __init__.py or a file the previous step shares, the function that is the revision
(`code`, else `load`, found by name with `ast`). The two are set against each other with difflib
on their code lines alone: comment-only and blank lines are left out and whitespace is
collapsed before lines are compared, so a reworded comment or a re-indented argument is no
change. The largest hunks are kept up to CAP changed lines; a note names the rest and the
command that prints them all. References, counterparts and the first step get no excerpt, nor
a step whose previous one is written in another kind (a torch step before a Triton one).

Pure string work on the declared files; rendering stays deterministic (same files, same bytes).
"""
from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from pathlib import Path

from kernlog.identity import CUDA_SUFFIXES, LADDER_FILE
from kernlog.registry import find_root

CAP = 6  # changed lines an excerpt shows
CONTEXT = 1  # unchanged lines around each hunk


def of_ladder(lad: dict, kernel) -> dict[str, dict]:
    """revision -> its excerpt against the ladder's previous step, for each step after the
    first (the `#### revision` blocks of the kernel page)."""
    revs = {r.name: r for r in kernel.revisions}
    out, prev, printed = {}, None, {}  # printed: hot lines a step's section prints -> that step
    for row in lad["rows"]:
        rec = row["rec"]
        if rec.role != "step":
            continue
        name = rec.revision
        if prev is not None and name in revs and prev in revs:
            out[name] = excerpt(revs[prev], revs[name], [h["where"] for h in row.get("hot", [])])
            hot = out[name].get("hot_code")
            key = hot and tuple(sorted(hot.items()))
            if key in printed:  # the same lines an earlier step showed: named, not printed again
                out[name]["hot_code"] = dict(hot, code=None, shown_at=printed[key])
            elif key and not row.get("same_as"):  # a step that runs an earlier one's kernel prints none
                printed[key] = name
        prev = name
    return out


def excerpt(before, after, hot: list[str] = ()) -> dict:
    """The excerpt of revision `after` against `before` (`hot`: its profile's hottest source
    lines, "path:line", which pick the hunks shown): "title" (what is set against what),
    "diff" (unified-diff text, "" where none is shown), "more" (changed lines left out),
    "command" (what prints the whole diff) and "note" (said instead of or beside the diff)."""
    a_path, b_path = _primary(before), _primary(after)
    a_rel, b_rel = _rel(a_path), _rel(b_path)
    base = {"before": before.name, "diff": "", "more": 0, "note": "",
            "command": f"git diff --no-index {a_rel} {b_rel}", "title": f"`{b_rel}` against `{a_rel}`"}
    if before.kind != after.kind or a_path.suffix != b_path.suffix:
        return dict(base, command="", note=f"a {after.kind} revision in `{b_rel}` after the {before.kind} "
                    f"code of {before.name} in `{a_rel}`: no line-by-line diff")
    try:
        a_text, b_text = a_path.read_text(), b_path.read_text()
    except OSError as e:
        return dict(base, command="", note=f"source not readable ({e.strerror}: {_rel(Path(e.filename or ''))})")
    fa = fb = None
    if a_path == b_path or a_path.name == LADDER_FILE or b_path.name == LADDER_FILE:
        fa, fb = _function(before, a_path, a_text), _function(after, b_path, b_text)
        if a_path == b_path and (fa is None or fb is None or fa[0] == fb[0]):
            return dict(base, command="", note=f"the same file as {before.name}, `{b_rel}`, and no function of "
                        "its own in it to set against another")
    if fa is not None and fb is not None:
        a_text, b_text = fa[1], fb[1]
        base["title"] = (f"same file `{b_rel}`, function `{fb[0]}` against `{fa[0]}`" if a_path == b_path
                         else f"`{b_rel}` function `{fb[0]}` against `{a_rel}` function `{fa[0]}`")
        base["command"] = ""
        first_a, first_b = fa[2], fb[2]
    else:
        first_a = first_b = 1
    on = fa is None and _builds_on(b_text, a_path)
    if on:
        base["title"] += f" (it {on} `{a_rel}`: the lines it adds)"
    elsewhere = _hot_code(hot, b_rel, b_path)
    if elsewhere:
        base["hot_code"] = elsewhere
    focus = {int(w.rpartition(":")[2]) - first_b for w in hot
             if w.rpartition(":")[0] == b_rel and w.rpartition(":")[2].isdigit()}
    diff, shown, total = unified(a_text, b_text, a_path.suffix, first_a, first_b, added_only=bool(on), focus=focus)
    if total == 0:
        return dict(base, command="", note="the code is the same; comments and whitespace differ at most")
    return dict(base, diff=diff, more=total - shown)


HOT_BEFORE, HOT_AFTER = 4, 1  # lines around a hot line shown from another file (a statement ends on it)


def _hot_code(hot: list[str], b_rel: str, b_path: Path) -> dict | None:
    """The step's hottest line where it lives in another file than its primary source (a
    header it includes: the mma or wgmma code of a tensor-core rung): {"where", "lang",
    "code"} of the lines around it; None where the hottest line is in the primary source."""
    if not hot or hot[0].rpartition(":")[0] == b_rel:
        return None
    rel, _, num = hot[0].rpartition(":")
    if not num.isdigit():
        return None
    try:
        lines = (find_root(b_path.parent) / rel).read_text().splitlines()
    except Exception:  # unreadable, or outside any kernlog repository
        return None
    at = int(num) - 1
    lo, hi = max(0, at - HOT_BEFORE), min(len(lines), at + HOT_AFTER + 1)
    lang = "cuda" if Path(rel).suffix in CUDA_SUFFIXES else "python"
    return {"where": hot[0], "lang": lang, "code": "\n".join(line.rstrip() for line in lines[lo:hi])}


def _builds_on(text: str, before: Path) -> str:
    """How `text` uses the file `before` whole ("#includes", "imports"), "" where it does not."""
    if before.suffix in CUDA_SUFFIXES and re.search(rf'^\s*#\s*include\s+"{re.escape(before.name)}"', text, re.M):
        return "#includes"
    stem = re.escape(before.stem)
    if before.suffix == ".py" and re.search(rf"^\s*(from\s+[\w.]*\b{stem}\s+import|import\s+[\w.]*\b{stem}\b"
                                            rf"|from\s+[\w.]+\s+import\s+[^\n]*\b{stem}\b)", text, re.M):
        return "imports"
    return ""


def _primary(rev) -> Path:
    return Path(rev.sources[0]).resolve()


def _rel(path: Path) -> str:
    """A path as the repository names it (kernels/softmax/v3_online.cu)."""
    try:
        return path.relative_to(find_root(path.parent)).as_posix()
    except Exception:  # outside any kernlog repository: its name
        return path.name


def _function(rev, path: Path, text: str) -> tuple[str, str, int] | None:
    """(name, source, first line) of the function in `text` that is `rev`: its `code` or `load`
    where defined in `path`, else a top-level function whose name holds the revision's name."""
    names = []
    for fn in (rev.code, rev.load):
        code = getattr(fn, "__code__", None)
        if code is not None and fn.__name__ != "<lambda>" and Path(code.co_filename).resolve() == path:
            names.append(fn.__name__)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    node = next((n for name in names for n in defs if n.name == name), None)
    if node is None:
        node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and rev.name in n.name), None)
    if node is None:
        return None
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines()[first - 1:node.end_lineno]
    return node.name, "\n".join(lines) + "\n", first


# --- code lines --------------------------------------------------------------------------------

def code_keys(text: str, suffix: str) -> list[str]:
    """Each line's code, comments (and Python docstrings) removed, whitespace collapsed: ""
    for a line with no code."""
    if suffix == ".py":
        keys = _python_keys(text)
        if keys is not None:
            return keys
        return [" ".join(line.split("#", 1)[0].split()) for line in text.splitlines()]
    if suffix in CUDA_SUFFIXES or suffix in (".c", ".cpp", ".cc"):
        return _c_keys(text)
    return [" ".join(line.split()) for line in text.splitlines()]


def _c_keys(text: str) -> list[str]:
    """C-family lines without // and /* */ comments (string and character literals kept)."""
    out, cur, i, n = [], [], 0, len(text)
    block = quote = None
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(" ".join("".join(cur).split()))
            cur = []
            if quote:  # an unterminated literal ends with its line
                quote = None
        elif block:
            if text.startswith("*/", i):
                block, i = None, i + 1
        elif quote:
            cur.append(c)
            if c == "\\" and i + 1 < n and text[i + 1] != "\n":
                cur.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            block, i = True, i + 1
            cur.append(" ")
        else:
            if c in "\"'":
                quote = c
            cur.append(c)
        i += 1
    if cur or not text.endswith("\n"):
        out.append(" ".join("".join(cur).split()))
    return out


def _python_keys(text: str) -> list[str] | None:
    """Python lines as their tokens, comments and docstrings dropped; None where the text does
    not tokenize."""
    lines = text.splitlines()
    try:
        tree = ast.parse(text)
        docs = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    docs.add((first.lineno, first.col_offset))
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, IndentationError, ValueError):
        return None
    parts: list[list[str]] = [[] for _ in lines]
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokens:
        if tok.type in skip or (tok.type == tokenize.STRING and tok.start in docs):
            continue
        row = tok.start[0] - 1
        if 0 <= row < len(parts):
            parts[row].append(tok.string)
    return [" ".join(p) for p in parts]


# --- the diff ----------------------------------------------------------------------------------

def _rank(lines: list, changed: int, focus: set[int]) -> tuple:
    """How much a hunk tells of the step, most first: it holds one of the step's hot lines
    (`focus`, 0-based lines of `b`), it adds one of the instructions a step is about (KEY), it
    changes more than #include/#define/import lines; then its size."""
    added = [text for tag, text, _, _ in lines if tag == "+"]
    moved = [text for tag, text, _, _ in lines if tag != " "]
    hot = any(rb in focus for _, _, _, rb in lines if rb is not None)
    key = any(KEY.search(text) for text in added)
    plumbing = bool(moved) and all(PLUMBING.match(text) for text in moved)
    return (not hot, not key, plumbing, not added, -changed)


# The instructions and intrinsics a step is usually about: tensor-core MMA, async copies, TMA,
# warp shuffles, clusters, Triton's dot and its descriptors.
KEY = re.compile(r"(?<![A-Za-z])(w?gmma|mma|ldmatrix|stmatrix|cp\.async|cp_async|tma|TMA|mbarrier|__shfl\w*|"
                 r"cluster\w*|tl\.dot|make_tensor_descriptor|setmaxnreg|fence\.proxy)(?![A-Za-z])")
PLUMBING = re.compile(r"^\s*(#\s*(include|define|undef|if|ifdef|ifndef|endif|pragma)\b"
                      r"|import\s|from\s+\S+\s+import\s|$)")


def unified(a: str, b: str, suffix: str, first_a: int = 1, first_b: int = 1, cap: int = CAP,
            context: int = CONTEXT, added_only: bool = False, focus: set[int] = frozenset()) -> tuple[str, int, int]:
    """(diff text, changed lines shown, changed lines in all) of `b` against `a`, code lines
    alone compared (code_keys); the hunks that tell most of the step first (_rank: its hot
    lines, its new instructions, never #include/#define/import lines alone), up to `cap`
    changed lines, printed in file order with their original lines and line numbers (from
    `first_a`, `first_b`); a hunk too long for the cap is cut around its hot or key line.
    `added_only`: `b` builds on `a` (includes or imports it), so the lines it drops from `a`
    live on there: only its added lines count and show."""
    la, lb = a.splitlines(), b.splitlines()
    ka, kb = code_keys(a, suffix), code_keys(b, suffix)
    ia = [i for i, k in enumerate(ka) if k and i < len(la)]
    ib = [i for i, k in enumerate(kb) if k and i < len(lb)]
    sm = difflib.SequenceMatcher(None, [ka[i] for i in ia], [kb[i] for i in ib], autojunk=False)
    hunks = []
    for group in sm.get_grouped_opcodes(context):
        lines, changed = [], 0
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [(" ", lb[ib[j]], ia[i1 + j - j1], ib[j]) for j in range(j1, j2)]
                continue
            if not added_only:
                lines += [("-", la[ia[i]], ia[i], None) for i in range(i1, i2)]
                changed += i2 - i1
            lines += [("+", lb[ib[j]], None, ib[j]) for j in range(j1, j2)]
            changed += j2 - j1
        if changed:
            hunks.append((group[0][1], lines, changed))
    total = sum(h[2] for h in hunks)
    picked, room = [], cap
    for i, h in enumerate(sorted(hunks, key=lambda h: (_rank(h[1], h[2], focus), h[0]))):
        if i == 0 and h[2] > cap:  # the first hunk alone passes the cap: `cap` changed lines around its focus
            picked.append((h[0], _cut(h[1], cap, _focus_at(h[1], focus)), cap))
            break
        if h[2] <= room:
            picked.append(h)
            room -= h[2]
    out = []
    for _, lines, _ in sorted(picked, key=lambda h: h[0]):
        out.append(_header(lines, first_a, first_b))
        out += [f"{tag}{text}".rstrip() for tag, text, _, _ in lines]
    return "\n".join(out), sum(h[2] for h in picked), total


def _focus_at(lines: list, focus: set[int]) -> int:
    """The index in a hunk of its first hot line, else of its first added key line, else 0."""
    for i, (_, _, _, rb) in enumerate(lines):
        if rb is not None and rb in focus:
            return i
    return next((i for i, (tag, text, _, _) in enumerate(lines) if tag == "+" and KEY.search(text)), 0)


def _cut(lines: list, cap: int, at: int = 0) -> list:
    """A hunk's lines from a little before index `at` up to its `cap`-th changed line."""
    start = max(0, at - 3)
    kept, n = [], 0
    for line in lines[start:]:
        if line[0] != " ":
            if n == cap:
                break
            n += 1
        kept.append(line)
    return kept


def _header(lines: list, first_a: int, first_b: int) -> str:
    """@@ -a,n +b,m @@ over the original lines a hunk spans on each side (left-out comment
    lines inside it count in the span)."""

    def span(rows, first):
        if not rows:
            return "0,0"
        lo, hi = min(rows), max(rows)
        return f"{lo + first}" if lo == hi else f"{lo + first},{hi - lo + 1}"

    return (f"@@ -{span([r for _, _, r, _ in lines if r is not None], first_a)} "
            f"+{span([r for _, _, _, r in lines if r is not None], first_b)} @@")
