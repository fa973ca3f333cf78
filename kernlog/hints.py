"""The kernlog commands a line or a page suggests, written so they run where they are read: a
Triton revision's check on the CPU needs Triton's interpreter and --device cpu, and pasted bare on
a machine with no GPU it stops at "no GPU"."""
from __future__ import annotations


def check_command(kernel: str, rev, device: str | None = None, seed: int | None = None) -> str:
    """`kernlog check` of one revision (`rev`: a spec.Revision): on `device` ("cuda" or "cpu"), or,
    where None, on any machine (the CPU form, but for a CUDA C revision, which runs on a GPU only);
    with `seed`, the same inputs again."""
    cpu = device == "cpu" or (device is None and rev.kind != "cuda")
    interp = "TRITON_INTERPRET=1 " if cpu and rev.kind == "triton" else ""
    return (f"{interp}kernlog check {kernel} --rev {rev.name}" + (" --device cpu" if cpu else "")
            + (f" --seed {seed}" if seed is not None else ""))
