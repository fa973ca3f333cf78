"""What `kernlog profile` profiles: each revision's stored state on this GPU (missing, current,
stale), less what this machine lacks, decided before torch and CUDA start where nvidia-smi can
name the GPU."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernlog.capture import provenance
from kernlog.errors import Unsupported
from kernlog.spec import Kernel, Revision, Shape
from kernlog.store import profiles as store


def stored_state(root: Path, gpu: str, kernel: Kernel, rev: Revision, shape: Shape, dtype: str) -> str:
    """'missing', 'current' (same source hash) or 'stale'."""
    json_path, _ = store.profile_paths(root, gpu, kernel.name, rev.name, shape, dtype)
    if not json_path.exists():
        return "missing"
    try:
        prof = store.load_profile(root, json_path)
    except store.ProfileError:
        return "broken"
    if prof.imported and prof.source_sha256 is None:
        return "imported"
    return "current" if prof.source_sha256 == rev.sha256() else "stale"


def rejected_here(root: Path, gpu: str, kernel: Kernel, rev: Revision) -> str:
    """When the gate last rejected the known-wrong `rev` on `gpu` under its present source, check
    plan and kernlog gate code (the libraries are not compared: they are asked of torch, which this
    decision runs before); "" where it did not, or kept no key: it is gated again. A rejection is
    what the gate must give it, so one that stands need not be seen again."""
    from kernlog.identity import gpu_slug
    from kernlog.run import gatekey
    from kernlog.store import gates

    entry = gates.load(root, gpu, kernel.name).get(rev.name) or {}
    key = entry.get("key")
    if entry.get("passed") is not False or not isinstance(key, dict):
        return ""
    same = (key.get("source_sha256") == rev.sha256() and gpu_slug(str(key.get("gpu"))) == gpu
            and (key.get("libraries") or {}).get("kernlog_gate") == gatekey.gate_code_sha256()
            and key.get("plan_sha256") == gatekey.plan_sha256(kernel, rev))
    return f"{str(entry.get('checked_at') or '')[:10] or 'before'}" if same else ""


def todo_revisions(root: Path, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, opts, gpu: str,
                   progress) -> list[Revision]:
    """The revisions `kernlog profile` profiles: those with no stored profile of their source on
    this GPU, a stale one included (the edit loop: edit, `profile`, `diff HEAD:K/R K/R` against
    the committed profile); all of them with --force (`opts.force`). A known-wrong revision is
    gated only, and not where its rejection stands (rejected_here; --regate and --force gate it)."""
    todo, why = [], {"current": "at this source hash", "imported": "from an imported report",
                     "broken": "but its stored pair fails verification (`kernlog list` says why)"}
    for r in revs:
        name = f"{kernel.name}/{r.name}"
        seen = r.known_wrong and not (opts.force or getattr(opts, "regate", False)) and \
            rejected_here(root, gpu, kernel, r)
        if seen:
            progress(f"skip {name}: known wrong, and rejected by the gate on {gpu} ({seen}) at this source, check "
                     "plan and gate code; --regate gates it again")
            continue
        state = "missing" if opts.force else stored_state(root, gpu, kernel, r, shape, dtype)
        if state == "stale":
            progress(f"{name}: source changed since its profile on {gpu}: profiled again (git keeps the old: "
                     f"kernlog diff HEAD:{name} {name})")
        if state in ("missing", "stale"):
            todo.append(r)
        else:
            progress(f"skip {name}: profiled on {gpu} {why[state]}; --force replaces it")
    return todo


def to_profile(root: Path, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, opts, gpu: str,
               progress) -> list[Revision]:
    """todo_revisions less what this machine cannot run (`runnable`), each decision a line to `progress`."""
    return runnable(kernel, revs, todo_revisions(root, kernel, revs, shape, dtype, opts, gpu, progress), gpu, progress)


def runnable(kernel: Kernel, revs: list[Revision], todo: list[Revision], gpu: str, progress) -> list[Revision]:
    """`todo` less the revisions this machine lacks something for (Revision.missing), each
    skipped in a line. Where none is left, a line says so; Unsupported where one lacks something
    and revisions were named (`--rev liger` without Liger-Kernel), or every one lacks something."""
    kept, lacking = [], []
    for r in todo:
        why = r.lacks()
        if why:
            progress(f"skip {kernel.name}/{r.name}: {why}")
            lacking.append(r.name)
        else:
            kept.append(r)
    if kept:
        return kept
    named = {r.name for r in revs} != {r.name for r in kernel.revisions}  # `--rev`: what was asked for, not the ladder
    if lacking and (named or len(lacking) == len(revs)):
        raise Unsupported(f"this machine cannot run {', '.join(lacking)}: nothing was profiled")
    progress(f"{kernel.name}: nothing to profile: every revision has a profile of its source on {gpu}"
             + (f" or lacks what it needs ({', '.join(lacking)})" if lacking else "") + "; --force profiles again")
    return []


def decide(root: Path, kernel: Kernel, revs: list[Revision], shape: Shape, dtype: str, opts,
           require_gpu: Callable[[], str], progress) -> tuple[list[Revision], dict, str] | None:
    """(the revisions to profile, gpu_info(), ncu), or None where nothing is left to profile.
    The GPU is named by nvidia-smi first (provenance.quick_gpu_slug), so an unchanged ladder
    ends before torch and CUDA start; where that finds work, `require_gpu` (which returns ncu)
    and torch's name, the one a profile records, decide. Each decision is said once, for the GPU
    that decided."""
    quick, said = provenance.quick_gpu_slug(), []
    if quick is not None:
        try:
            todo = to_profile(root, kernel, revs, shape, dtype, opts, quick, said.append)
        except Unsupported:
            _say(said, progress)
            raise
        if not todo:
            _say(said, progress)
            return None
    ncu = require_gpu()
    gpu = provenance.gpu_info()
    if gpu["slug"] == quick:
        _say(said, progress)
    else:
        todo = to_profile(root, kernel, revs, shape, dtype, opts, gpu["slug"], progress)
    return (todo, gpu, ncu) if todo else None


def _say(lines: list[str], progress) -> None:
    for line in lines:
        progress(line)
