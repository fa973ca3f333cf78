"""`kernlog init`: what a repository needs to start a worklog, written where it is missing.

The `[tool.kernlog]` section (pyproject.toml made where there is none), one example operator (a
naive Triton revision, a fused one, the torch references and their predictions), the
.gitignore lines for kernlog's caches, KERNEL_LOG.md with its pages rendered as `kernlog report`
renders them, and a GitHub Actions workflow (a CPU job: gate, log check, compare; a GPU job per
runner label, each committing its own profiles/<gpu>/). A file that exists is kept unless
`force`; every file is named as written or kept.
"""
from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jinja2

from kernlog import config
from kernlog.errors import KernlogError
from kernlog.spec import NAME_RE

EXAMPLE = "add_relu"
WORKFLOW = ".github/workflows/kernlog.yml"
# kernlog's caches: decompressed reports (.cache/reports) and a profile's scratch folder while it is
# written (<profiles>/.kernlog-*, removed after)
IGNORED = (".cache/", ".kernlog-*", "__pycache__/")
SECTION = re.compile(r"^\[tool\.kernlog\]\s*$.*?(?=^\[|\Z)", re.MULTILINE | re.DOTALL)
OPERATOR_FILES = {"__init__.py": "op_init.py.j2", "v0_two_kernels.py": "v0_two_kernels.py.j2",
                  "v1_fused.py": "v1_fused.py.j2", "predictions.toml": "predictions.toml.j2"}


@dataclass(frozen=True)
class Said:
    """One file's outcome: written, kept (it existed), or updated (a section added to it)."""
    path: str
    what: str


def repository_root(start: Path) -> Path:
    """The git work tree's top holding `start`, else `start` itself."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return start.resolve()
    return Path(top.stdout.strip()).resolve() if top.returncode == 0 and top.stdout.strip() else start.resolve()


def section(kernels: str) -> str:
    return ("[tool.kernlog]\n"
            "# Where kernlog finds the operators and keeps what it writes (kernlog's docs: \"Use kernlog in\n"
            "# your repository\"). Every key is optional: profiles, reports and log below are the defaults,\n"
            "# and kernels is the folder `kernlog init` wrote the operators into (by default kernels).\n"
            f'kernels = "{kernels}"\n'
            'profiles = "profiles"\n'
            'reports = "reports"\n'
            'log = "KERNEL_LOG.md"\n')


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("kernlog.render", "templates/init"),
                              keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def _kernels_dir(root: Path, existing: dict | None, wanted: str | None, force: bool) -> str:
    """The kernels folder, relative and posix: --kernels-dir, else the configured one, else the default."""
    configured = existing.get("kernels") if existing else None
    if wanted is not None:
        rel = Path(wanted)
        if rel.is_absolute():
            try:
                rel = rel.resolve().relative_to(root)
            except ValueError:
                raise KernlogError(f"--kernels-dir {wanted}: not inside the repository {root}") from None
        wanted = rel.as_posix().strip("/")
        if not wanted or wanted.startswith("..") or wanted == ".":
            raise KernlogError(f"--kernels-dir {wanted or '.'}: name a folder inside the repository, e.g. kernels")
        if configured not in (None, wanted) and not force:
            raise KernlogError(f"pyproject.toml already names kernels = {configured!r}: drop --kernels-dir, or "
                               f"`kernlog init --kernels-dir {wanted} --force` to rewrite [tool.kernlog]")
        return wanted
    return configured or config.DEFAULTS["kernels"]


def init(start: Path, kernels_dir: str | None, kernel: str, force: bool,
         echo: Callable[..., None]) -> list[Said]:
    """Write what is missing (all of it with `force`); say each file's outcome through echo."""
    if not NAME_RE.match(kernel):
        raise KernlogError(f"--kernel {kernel!r}: an operator's name is lower case letters, digits and _, "
                           "starting with a letter or digit (e.g. add_relu)")
    root = repository_root(start)
    pyproject = root / config.PYPROJECT
    existing = config.table(root)
    kernels = _kernels_dir(root, existing, kernels_dir, force)
    said: list[Said] = []

    def write(rel: str, text: str) -> None:
        path = root / rel
        if path.exists() and not force:
            said.append(Said(rel, "kept (exists; --force replaces it)"))
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        what = "replaced" if path.exists() else "wrote"
        path.write_text(text)
        said.append(Said(rel, what))

    # [tool.kernlog]: appended to a pyproject.toml that lacks it, rewritten only with force
    if not pyproject.exists():
        pyproject.write_text(section(kernels))
        said.append(Said(config.PYPROJECT, "wrote ([tool.kernlog])"))
    elif existing is None:
        text = pyproject.read_text()
        pyproject.write_text(text.rstrip("\n") + ("\n\n" if text.strip() else "") + section(kernels))
        said.append(Said(config.PYPROJECT, "added [tool.kernlog]"))
    elif force:
        pyproject.write_text(SECTION.sub(lambda m: section(kernels) + "\n", pyproject.read_text(), count=1))
        said.append(Said(config.PYPROJECT, "rewrote [tool.kernlog]"))
    else:
        said.append(Said(config.PYPROJECT, "kept [tool.kernlog] (exists; --force rewrites it)"))
    lay = config.layout(root)
    kernels = lay.rel(lay.kernels)

    env = _env()
    package_init = lay.kernels / "__init__.py"
    if not package_init.exists():  # a regular package: its operators import as <kernels>.<op>
        write(f"{kernels}/__init__.py", '"""Operator folders: one per kernel, each with its ladder of revisions."""\n')
    for name, template in OPERATOR_FILES.items():
        write(f"{kernels}/{kernel}/{name}", env.get_template(template).render(name=kernel))

    ignore = root / ".gitignore"
    have = ignore.read_text().splitlines() if ignore.exists() else []
    missing = [line for line in IGNORED if line not in have]
    if missing:
        body = "\n".join(have).rstrip("\n")
        ignore.write_text((body + "\n\n" if body else "") + "# kernlog's caches\n" + "\n".join(missing) + "\n")
        said.append(Said(".gitignore", f"added {', '.join(missing)}"))
    else:
        said.append(Said(".gitignore", "kept (has kernlog's lines)"))

    write(WORKFLOW, env.get_template("workflow.yml.j2").render(
        kernels=kernels, profiles=lay.rel(lay.profiles), reports=lay.rel(lay.reports), log=lay.rel(lay.log)))

    log_rel = lay.rel(lay.log)
    if lay.log.exists() and not force:
        said.append(Said(log_rel, "kept (exists; `kernlog report` fills its generated blocks)"))
    else:
        from kernlog.render.publish import publish

        lay.log.unlink(missing_ok=True)
        publish(root, False, lambda *a, **k: None)
        said.append(Said(log_rel, f"wrote (with a page per operator in {lay.rel(lay.reports)}/)"))
    for s in said:
        echo(f"{s.path}: {s.what}")
    if not (root / ".git").exists():
        echo(f"note: {root} is not a git repository: `git init` it for `kernlog compare` and `history`")
    if '\n  KERNLOG: ""\n' in (root / WORKFLOW).read_text():
        echo(f"note: set KERNLOG at the top of {WORKFLOW} to a wheel or git URL your CI installs kernlog from "
             "(it is not on PyPI): its jobs stop until then")
    echo(f"next: TRITON_INTERPRET=1 kernlog check {kernel} --device cpu   (on a GPU machine: kernlog profile {kernel})")
    return said
