"""Every Triton kernel the CPU gate launches also compiles for the H100 (sm_90), here on the
CPU: the interpreter accepts code the compiler rejects (seen on the H100: module-level
float constants that were not tl.constexpr failed only there). Each interpreted launch is
recorded, and its kernel is compiled to a cubin with the types of the recorded arguments."""
import pytest

from kernlog.registry import find_root, kernel_names, load_kernel
from kernlog.run import gate

from .helpers import without_interpreter

ROOT = find_root()
# The gate before the compile runs the last two check shapes through the interpreter: for these
# it took 5-16 s each on the 2-core CPU machine (softmax's 131072-long rows, the norms' 8-wide
# loop over 4097 columns, a Philox call per element), so they run in the slow suite; the other
# revisions, the norms' v0 and the matmuls included, take about a second each.
# minigpt's library revision launches the library's own kernels, each compiled by its kernel's case
# here; through the model it took 36 s. (Launches are now recorded without being interpreted, see
# _record: on --run-slow these take 1-12 s each, softmax's the most.)
SLOW = {("softmax", "triton"), ("layernorm", "v1_looped"), ("rmsnorm", "v1_looped"), ("dropout", "v0_rand"),
        ("dropout", "v1_rand4x"), ("minigpt", "library")}
TRITON_REVS = [pytest.param(k, r.name, marks=[pytest.mark.slow] * ((k, r.name) in SLOW), id=f"{k}-{r.name}")
               for k in kernel_names(ROOT) for r in load_kernel(ROOT, k).revisions if r.kind == "triton"]
TYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.int32": "i32",
         "torch.int64": "i64", "torch.uint8": "u8", "torch.int8": "i8", "torch.bool": "i1"}
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _type(value):
    if hasattr(value, "block_shape") and hasattr(value, "base"):  # a host-side TMA descriptor
        return f"tensordesc<{TYPES[str(value.base.dtype)]}[{', '.join(map(str, value.block_shape))}]>"
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return "*" + TYPES[str(value.dtype)]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def _record(monkeypatch, execute: bool = True):
    """The Triton launches made from here on, each (its function, args, kwargs); with `execute`
    false they are recorded and not interpreted: the launchers' host code picks the same kernels,
    types and constexprs either way (checked for every revision, 2026-11-28), and interpreting
    them was most of this test's time (dropout v2_tail 8.5 s of CPU at the last two check shapes,
    0.5 s recorded alone). The outputs are then left unwritten, which the caller ignores."""
    from triton.runtime import interpreter

    calls = []
    original = interpreter.InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        calls.append((self.fn, args, kwargs))
        if execute:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        return None

    monkeypatch.setattr(interpreter.InterpretedFunction, "run", run)
    return calls


def _spec(fn, args, kwargs):
    """(what to compile, or None and why not): module, name, signature, constexprs, options."""
    import inspect

    params = inspect.signature(fn).parameters
    values = dict(zip(params, args, strict=False))
    values.update({k: v for k, v in kwargs.items() if k in params})
    signature, constexprs = {}, {}
    for name, p in params.items():
        if "constexpr" in str(p.annotation):
            signature[name] = "constexpr"
            constexprs[name] = values.get(name, p.default)
        else:
            kind = _type(values[name])
            if kind is None:
                return None, f"{fn.__name__}: argument {name} ({type(values[name]).__name__}) not compiled here"
            signature[name] = kind
    options = {k: kwargs[k] for k in LAUNCH_OPTIONS if k in kwargs}
    return {"module": fn.__module__, "name": fn.__name__, "signature": signature, "constexprs": constexprs,
            "options": options}, None


# Runs in a fresh interpreter without TRITON_INTERPRET: the interpreter patches triton.language
# in its own process, and the real compiler cannot run beside it.
COMPILER = """
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
failed = []
for spec in json.load(sys.stdin):
    obj = getattr(importlib.import_module(spec["module"]), spec["name"])
    while not isinstance(obj, JITFunction):
        obj = obj.fn
    try:
        triton.compile(ASTSource(fn=obj, signature=spec["signature"], constexprs=spec["constexprs"]),
                       target=GPUTarget("cuda", 90, 32), options=spec["options"])
    except Exception as exc:
        failed.append(spec["name"] + ": " + " ".join(str(exc).split())[-400:])
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _compile_all(specs):
    import json

    done = without_interpreter(COMPILER, stdin=json.dumps(specs))
    return done.returncode, (done.stdout + done.stderr).strip()


@pytest.mark.parametrize("kernel_name,rev_name", TRITON_REVS)
def test_triton_revision_compiles_for_sm90(kernel_name, rev_name, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU the gate tests compile and run these kernels for real")
    kernel = load_kernel(ROOT, kernel_name)
    calls = _record(monkeypatch, execute=False)
    results = gate.check_revision(kernel, kernel.revision(rev_name), "cpu", shapes=kernel.check_shapes[-2:])
    if any(r.problem and r.problem.startswith("raised ") for r in results):
        # a launcher whose host code needs its kernels' results: record them interpreted, as the gate runs them
        monkeypatch.undo()
        calls = _record(monkeypatch)
        gate.check_revision(kernel, kernel.revision(rev_name), "cpu", shapes=kernel.check_shapes[-2:])
    assert calls, "the revision launched no Triton kernel"
    specs, skipped = [], []
    for fn, args, kwargs in calls:
        spec, why = _spec(fn, args, kwargs)
        if spec is None:
            skipped.append(why)
        elif spec not in specs:
            specs.append(spec)
    assert specs, "no launch could be compiled here:\n" + "\n".join(skipped)
    code, out = _compile_all(specs)
    assert code == 0, out


VECTOR_PTX = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.dropout import v1_rand4x, v2_tail as drop_v2
from kernels.gelu import v1_fused, v2_tail
d16 = [["tt.divisibility", 16]]  # what Triton's launcher marks on pointers and on ints divisible by 16
drop = {"p": "fp32", "scale": "fp32", "seed": "i32", "BLOCK": "constexpr"}
out = {}
for name, fn, ints, rest, consts in (
        ("gelu v1", v1_fused.gelu_kernel.fn, ["n"], {"BLOCK": "constexpr", "TANH": "constexpr"}, {"TANH": True}),
        ("gelu v2", v2_tail.gelu_kernel.fn, ["n_body", "n"], {"BLOCK": "constexpr", "TANH": "constexpr"},
         {"TANH": True}),
        ("dropout v1", v1_rand4x.dropout_kernel.fn, ["n"], drop, {}),
        ("dropout v2", drop_v2.dropout_kernel.fn, ["n_body", "n"], drop, {})):
    sig = {"x_ptr": "*bf16", "out_ptr": "*bf16", **{i: "i32" for i in ints}, **rest}
    attrs = {(0,): d16, (1,): d16, **({(2,): d16} if len(ints) == 2 else {})}  # n odd; v2's n_body divisible
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={"BLOCK": 1024, **consts}, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    out[name] = sorted(set(re.findall(r"ld\\.global[.\\w]*", k.asm["ptx"])))
# the norms at 1000 columns (a row stride of 1000): v0's kernel, and v2's with the sizes passed / 8
from kernels.common import rownorm_aligned
from kernels.layernorm import v0_triton
ptrs = {(i,): d16 for i in range(4)}
rows = {"n_rows": "i32", "BLOCK_N": "constexpr", "ROWS": "constexpr"}
for name, fn, sig, consts in (
        ("norm v0", v0_triton.layernorm_kernel.fn,
         {"n_cols": "i32", "stride_x": "i32", "stride_out": "i32", "eps": "fp32"}, {}),
        ("norm v2", rownorm_aligned.rows_kernel.fn,
         {"n_q": "i32", "stride_xq": "i32", "stride_oq": "i32", "eps": "fp32", "Q": "constexpr", "RMS": "constexpr"},
         {"Q": 8, "RMS": False})):
    sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16", "out_ptr": "*bf16", "n_rows": "i32", **sig,
           "BLOCK_N": "constexpr", "ROWS": "constexpr"}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={"BLOCK_N": 1024, "ROWS": 1, **consts},
                                 attrs=ptrs), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    out[name] = sorted(set(re.findall(r"[ls][dt]\\.global[.\\w]*", k.asm["ptx"])))
# the Triton softmax's short rows (bf16 rows of 8): the row length and stride passed / Q
from kernels.softmax import softmax_triton
for q in (1, 8):
    sig = {"x_ptr": "*bf16", "y_ptr": "*bf16", "rows": "i32", "cols_q": "i32", "x_stride_q": "i32",
           "BLOCK": "constexpr", "ROWS": "constexpr", "Q": "constexpr"}
    k = triton.compile(ASTSource(fn=softmax_triton._rows_kernel, signature=sig,
                                 constexprs={"BLOCK": 8, "ROWS": 64, "Q": q}, attrs={(0,): d16, (1,): d16}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    out[f"softmax rows q{q}"] = sorted(set(re.findall(r"[ls][dt]\\.global[.\\w]*", k.asm["ptx"])))
print(json.dumps(out))
"""


def test_v2_vectorizes_lengths_that_v1_reads_element_by_element():
    """The claims behind gelu's and dropout's v2_tail, the norms' v2_aligned and the Triton softmax's row
    quantum, checked in the
    PTX for sm_90: with n odd, v1's masked loads are 2-byte scalars (on the H100 at 6291457 bf16:
    gelu 975 GB/s against F.gelu's 1864, dropout 56% of copy); v2's body, masked against a length
    divisible by 16, loads 16-byte vectors, and only its tail is scalar. LayerNorm's rows of 1000
    (0.84x torch.compile in bf16): scalar in v0, vectors once the sizes are known multiples of 8."""
    import json

    done = without_interpreter(VECTOR_PTX, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loads = json.loads(done.stdout.strip().splitlines()[-1])
    for op in ("gelu", "dropout"):
        assert loads[f"{op} v1"] == ["ld.global.b16"], op
        assert "ld.global.v4.b32" in loads[f"{op} v2"] and "ld.global.b16" in loads[f"{op} v2"], op
    # LayerNorm at 1000 columns: v0 moves x and y two bytes at a time; v2 (sizes passed / 8) 16 bytes
    assert "ld.global.v4.b32" not in loads["norm v0"] and "st.global.b16" in loads["norm v0"]
    assert "ld.global.v4.b32" in loads["norm v2"] and "st.global.v4.b32" in loads["norm v2"]
    # The Triton softmax at bf16 rows of 8 (1048576x8 on the H100: 0.37x torch.compile with a
    # runtime stride of 8, 2 sectors a request): 2-byte moves, and 8-byte ones with the quantum.
    assert loads["softmax rows q1"] == ["ld.global.b16", "st.global.b16"]
    assert loads["softmax rows q8"] == ["ld.global.v2.b32", "st.global.v2.b32"]


EARLY_PTX = """
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.layernorm import v3_early
d16 = [["tt.divisibility", 16]]
out = {}
for dt, block, warps in (("bf16", 4096, 16), ("fp32", 4096, 8), ("fp32", 32768, 32)):
    sig = {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "b_ptr": f"*{dt}", "out_ptr": f"*{dt}", "n_rows": "i32",
           "n_q": "i32", "stride_xq": "i32", "stride_oq": "i32", "eps": "fp32", "Q": "constexpr",
           "BLOCK_N": "constexpr", "ROWS": "constexpr", "EARLY": "constexpr"}
    early = v3_early.early(block, warps)
    k = triton.compile(ASTSource(fn=v3_early.rows_kernel.fn, signature=sig,
                                 constexprs={"Q": 8, "BLOCK_N": block, "ROWS": 1, "EARLY": early},
                                 attrs={(i,): d16 for i in range(4)}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    seq = re.findall(r"ld\\.global|bar\\.sync", k.asm["ptx"])
    first = seq.index("bar.sync")
    out[f"{dt} {block} {warps}"] = [early, seq[first:].count("ld.global")]
print(json.dumps(out))
"""


def test_layernorm_v3_issues_every_load_before_the_first_barrier_where_it_fits():
    """v3's claim, in the PTX for sm_90: at a decode row (4096 columns) no global load follows the
    statistics' first barrier (v2 loads b after them, v0 w and b: a DRAM round trip each on a
    lone row); at 32768 fp32 over 32 warps (32 a thread) w and b stay after it (registers)."""
    import json

    done = without_interpreter(EARLY_PTX, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after == {"bf16 4096 16": [True, 0], "fp32 4096 8": [True, 0], "fp32 32768 32": [False, 16]}
