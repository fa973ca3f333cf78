"""The attention backward: v0_fused against float64 autograd through the gate (fp32 at its
rounding; its whole gate is tests/test_gate_all_kernels.py's), its known-wrong revision and source
mutants of it rejected, odd lengths under other block sizes, the declared refusal of other head
dims, why the output puts dq | dk | dv side by side, the GPU's layouts compiled for sm_90, and the
trainable autograd function. All on the CPU, Triton through its interpreter."""
import importlib.util
import math

import pytest
import torch

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

from .helpers import without_interpreter
from .test_gate_all_kernels import _cpu_shapes

ROOT = find_root()
KERNEL = load_kernel(ROOT, "attention_backward")
SOURCE = ROOT / "kernels" / "attention_backward" / "v0_fused.py"
SMALL = ((1, 2, 40, 16), (2, 1, 33, 32))


def _v0():
    from kernels.attention_backward import v0_fused

    return v0_fused


def _failures(launch, shapes=SMALL):
    rev = Revision("mutant", "triton", (), lambda: launch, "known wrong")
    return [r for r in gate.check_revision(KERNEL, rev, "cpu", shapes=shapes, seed=0) if not r.ok]


def test_the_fused_backward_in_fp32_is_off_by_fp32_rounding_alone():
    # its whole gate, every check shape in both dtypes: tests/test_gate_all_kernels.py. Here: fp32
    # products are IEEE ones, so the error is fp32's rounding, far under the 1e-4 allowed
    shapes = [(2, 3, 33, 64), (1, 1, 40, 128)]
    results = gate.check_revision(KERNEL, KERNEL.revision("v0_fused"), "cpu", shapes=shapes, dtypes=["fp32"], seed=11)
    assert len(results) == 2 and all(r.ok for r in results), [r.line() for r in results if not r.ok]
    assert max(r.rel_error for r in results) < 1e-6


def test_every_check_shape_runs_in_the_default_cpu_gate():
    assert _cpu_shapes(KERNEL) == list(KERNEL.gate_shapes)


def test_the_known_wrong_revision_is_rejected_everywhere_and_by_far():
    """delta dropped: every case fails, at 0.45-0.85 of the whole output, 45x the bf16 l2 allowed."""
    rev = KERNEL.revision("wrong_no_delta")
    assert rev.known_wrong and "delta" in rev.bug
    # rejected in every case of both dtypes: tests/test_gate_all_kernels.py; here, by how far in bf16
    results = gate.check_revision(KERNEL, rev, "cpu", dtypes=["bf16"], seed=3)
    assert len(results) == 4 and not any(r.ok for r in results)
    assert min(r.rel_error for r in results) > 0.3


# Each a real mistake in v0_fused's source; the gate must reject all of them, in both dtypes.
MUTANTS = {
    "the causal mask off": [("pt = tl.where(cols[:, None] <= rows[None, :], pt, 0.0)", "pt = pt"),
                            ("p = tl.where(rows[:, None] >= cols[None, :], p, 0.0)", "p = p")],
    "dk missing its scale": [("dk = dk * scale", "dk = dk")],
    "dq's loop stops before the diagonal": [("hi = tl.minimum(start_m + BLOCK_M, T)", "hi = start_m")],
    "dk, dv start a query block late": [("lo = (start_n // BLOCK_M) * BLOCK_M",
                                         "lo = (start_n // BLOCK_M + 1) * BLOCK_M")],
    "lse taken as base 2": [("other=float(\"inf\")) * 1.4426950408889634", "other=float(\"inf\"))")],
}


def _mutant(tmp_path, name, edits):
    text = SOURCE.read_text()
    for old, new in edits:
        assert old in text, f"the mutant {name!r} no longer applies: v0_fused.py changed"
        text = text.replace(old, new)
    path = tmp_path / f"mutant_{abs(hash(name))}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", MUTANTS)
def test_gate_rejects_a_mutant_of_the_fused_kernel(tmp_path, name):
    module = _mutant(tmp_path, name, MUTANTS[name])
    failed = _failures(lambda inputs, out: module.attention_backward(*inputs, out))
    assert len(failed) == 2 * len(SMALL), [r.line() for r in failed]
    assert all(r.rel_error > 5e-2 for r in failed), [r.line() for r in failed]


def _inputs(shape, dtype="fp32", seed=0):
    return KERNEL.make_inputs(shape, dtype, torch.Generator().manual_seed(seed), "cpu")


# ((BLOCK_M, BLOCK_N, warps, stages) of the dk/dv kernel, the same of dq): equal blocks, a key block
# spanning two query blocks and the reverse (the CPU's default)
CONFIGS = [((16, 16, 1, 1), (16, 16, 1, 1)), ((16, 32, 1, 1), (32, 16, 1, 1)), ((32, 16, 1, 1), (16, 32, 1, 1))]


@pytest.mark.parametrize("T", [1, 15, 47])
@pytest.mark.parametrize("config", CONFIGS, ids=["16-16", "16x32", "32x16"])
def test_odd_lengths_under_other_blocks(T, config):
    """T no multiple of any block: rows past T (lse +inf, p 0) add nothing, keys past T are
    masked on the diagonal; T = 1 is a lone diagonal block."""
    v0 = _v0()
    inputs = _inputs((2, 1, T, 32), seed=T)
    out = KERNEL.make_output(inputs)
    gate.poison(out)
    q, k, v, do, scale = v0.on_device(*inputs[:4], out) + (inputs[4],)
    o, lse = v0.forward(q, k, v, scale, out)
    v0.backward(q, k, v, do, scale, lse, v0.preprocess(o, do, out), out, config)
    err, problem = gate.compare(out, KERNEL.reference(inputs), gate.tolerance(KERNEL, "fp32"))
    assert not problem


def test_other_head_dims_are_declined_with_one_line():
    rev = KERNEL.revision("v0_fused")
    assert rev.refusal((1, 1, 8, 48)) == "head dim 48 not one of 16, 32, 64, 128"
    assert all(not rev.refusal((1, 1, 8, d)) for d in (16, 32, 64, 128))
    inputs = _inputs((1, 1, 8, 48))
    with pytest.raises(ValueError, match="head dim 48 not one of 16, 32, 64, 128"):
        _v0().attention_backward(*inputs, KERNEL.make_output(inputs))
    assert gate.check_revision(KERNEL, rev, "cpu", shapes=[(1, 1, 8, 48)]) == []  # declined, not failed


def test_a_wrong_output_shape_is_refused():
    inputs = _inputs((1, 1, 8, 16))
    with pytest.raises(ValueError, match=r"out must be \(B, H, T, 3 D\)"):
        _v0().attention_backward(*inputs, torch.empty((3, 1, 1, 8, 16)))


def test_dq_dk_dv_side_by_side_keep_the_zero_dq_of_query_0_inside_a_row():
    """Query 0 sees key 0 alone: its dq is exactly 0 in float64. Stacked (3, B, H, T, D), that row
    is all zero and the gate holds it to exact zeros, which a backward computing delta =
    rowsum(do * o) (SDPA's, FlashAttention-2's) misses by ~1e-8; beside the token's dk and dv it is
    a third of a row, and the same 1e-8 passes."""
    inputs = _inputs((2, 2, 9, 16))
    ref = KERNEL.reference(inputs)
    D = 16
    assert ref.shape == (2, 2, 9, 3 * D) and KERNEL.make_output(inputs).shape == ref.shape
    assert not ref[..., 0, :D].any() and ref[..., 0, D:].abs().min() > 0
    nudged = ref.clone()
    nudged[..., 0, :D] += 6e-8
    assert not gate.compare(nudged, ref, gate.tolerance(KERNEL, "fp32"))[1]
    stacked = torch.stack(ref.split(D, dim=-1))
    assert "expected 0" in gate.first_bad(torch.stack(nudged.split(D, dim=-1)), stacked, 1e-4)
    assert gate.compare(torch.stack(nudged.split(D, dim=-1)), stacked, gate.tolerance(KERNEL, "fp32"))[1]


def test_flops_and_bytes():
    assert KERNEL.flops((1, 12, 1024, 64)) == 7 * 12 * 1024 * 1024 * 64
    assert KERNEL.bytes_moved((1, 12, 1024, 64), "bf16") == 7 * 12 * 1024 * 64 * 2
    assert math.isclose(_inputs((1, 1, 4, 64))[4], 1 / 8)


# A fresh interpreter without TRITON_INTERPRET compiles v0_fused's GPU layouts for sm_90 and prints
# each launch's shared memory (the interpreter takes code the compiler rejects).
COMPILE = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.attention_backward import v0_fused as m
out = []
for dt, d in json.load(sys.stdin):
    strides = {f"s{t}_{a}": "i32" for t in "qkvdg" for a in "bht"}
    for fn, cfg, ptrs in ((m._bwd_dkdv_kernel, m.GPU_CONFIGS[(dt, d)][0], ["dk_ptr", "dv_ptr"]),
                          (m._bwd_dq_kernel, m.GPU_CONFIGS[(dt, d)][1], ["dq_ptr"])):
        sig = {p: "*" + dt for p in ["q_ptr", "k_ptr", "v_ptr", "do_ptr"]}
        sig.update({"lse_ptr": "*fp32", "delta_ptr": "*fp32", **{p: "*" + dt for p in ptrs}})
        sig.update({"T": "i32", "H": "i32", "qk_scale": "fp32", "scale": "fp32", **strides})
        bm, bn, warps, stages = cfg
        consts = {"D": d, "BLOCK_M": bm, "BLOCK_N": bn, "PRECISION": "ieee" if dt == "fp32" else "tf32"}
        sig.update(dict.fromkeys(consts, "constexpr"))
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": warps, "num_stages": stages})
        out.append([dt, d, fn.__name__, k.metadata.shared])
pre = {"o_ptr": "*fp32", "do_ptr": "*bf16", "delta_ptr": "*fp32", "T": "i32", "H": "i32",
       **{f"s{t}_{a}": "i32" for t in "od" for a in "bht"}, "D": "constexpr", "BLOCK_M": "constexpr"}
triton.compile(ASTSource(fn=m._bwd_preprocess, signature=pre, constexprs={"D": 64, "BLOCK_M": m.PRE_BLOCK}),
               target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
print(json.dumps(out))
"""
SMEM_SM90 = 227 * 1024  # the most shared memory a block may have on the H100 and H200


@pytest.mark.parametrize("profile_only", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_gpu_layouts_compile_for_sm90_within_shared_memory(profile_only):
    """The CPU gate runs 16- and 32-row blocks; the GPU table's layouts compile here (about 1-4 s
    each: the profile shape's by default, every one in the slow suite)."""
    import json

    if torch.cuda.is_available():
        pytest.skip("on a GPU the gate compiles and runs them")
    which = [("bf16", 64)] if profile_only else sorted(_v0().GPU_CONFIGS)
    done = without_interpreter(COMPILE, stdin=json.dumps(which))
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.splitlines()[-1])
    assert len(compiled) == 2 * len(which)
    assert all(smem <= SMEM_SM90 for *_, smem in compiled), compiled


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_the_trainable_attention_gives_autograd_the_float64_gradients(dtype, tol, monkeypatch):
    """kernels/attention_backward/trainable.py: a training step's forward and backward, the
    backward taking the forward's saved o and log-sum-exp, against float64 autograd; through
    v2_split's kernels (v1_tuned's forward and launches refused), its backward once."""
    from kernels.attention_backward import v1_tuned, v2_split
    from kernels.attention_backward.trainable import attention

    def refused(*args, **kwargs):
        raise AssertionError("trainable took v1_tuned's kernels")
    monkeypatch.setattr(v1_tuned, "forward", refused)
    monkeypatch.setattr(v1_tuned, "_launches", refused)
    forwards, calls, forward, backward = [], [], v2_split.forward, v2_split.backward
    monkeypatch.setattr(v2_split, "forward", lambda *args: forwards.append(forward(*args)) or forwards[-1])
    monkeypatch.setattr(v2_split, "backward", lambda *args: calls.append(args[5]) or backward(*args))

    gen = torch.Generator().manual_seed(5)
    shape = (1, 2, 37, 32)  # T crosses the CPU blocks and their diagonal
    q, k, v, do = (torch.randn(shape, generator=gen) for _ in range(4))
    leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    o = attention(*leaves)
    o.backward(do.to(dtype))
    want = KERNEL.reference((*(t.detach() for t in leaves), do.to(dtype), 32 ** -0.5))
    got = torch.cat([t.grad.double() for t in leaves], dim=-1)
    assert o.dtype == dtype and all(t.grad.dtype == dtype for t in leaves)
    assert ((got - want).norm() / want.norm()).item() < tol
    assert len(forwards) == 1 and len(calls) == 1  # the backward from the saved o: no second forward
    assert calls[0].data_ptr() == forwards[0][0].data_ptr()
    # the forward's o too, against the attention operator's float64 reference
    o64 = load_kernel(ROOT, "attention").reference((*(t.detach() for t in leaves), 32 ** -0.5))
    assert ((o.double() - o64).norm() / o64.norm()).item() < (1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 3, 300, 64), (1, 2, 257, 128)])
def test_the_trainable_attention_on_the_gpu_takes_the_kernels_and_gives_the_float64_gradients(shape):
    """On the GPU, under bf16 autocast as MiniGPT's training step runs it: the forward through
    v2_split's (attention's v5_persistent, its kernel picked per shape), the backward through
    v2_split's picks, at odd lengths."""
    from kernels.attention_backward.trainable import attention

    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, do = (torch.randn(shape, generator=gen, device="cuda") for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        o = attention(*leaves)
    o.backward(do.to(o.dtype))
    want = KERNEL.reference((*(t.detach().bfloat16() for t in leaves), do.bfloat16(), shape[-1] ** -0.5))
    got = torch.cat([t.grad.double() for t in leaves], dim=-1)
    assert o.dtype == torch.bfloat16 and all(t.grad.dtype == torch.float32 for t in leaves)
    assert ((got - want).norm() / want.norm()).item() < 3e-2


def test_the_compiled_reference_compiles_its_graph_and_takes_the_eager_gradients(monkeypatch):
    """torch_compile's function, loaded as the revision loads it, compiles the forward into one
    graph with no break (compiled whole, the eager math with its autograd.grad compiled nothing
    and ran eagerly), and its gradients are eager_grads'. aot_eager traces as Inductor's compile
    does, without code generation; the revision is identified by that function's code."""
    from torch._dynamo.utils import counters

    import kernels.attention_backward as ab
    from kernlog import frameworks

    monkeypatch.setattr(frameworks, "compiled", lambda fn, dynamic=False: torch.compile(fn, backend="aot_eager",
                                                                                       dynamic=dynamic))
    torch._dynamo.reset()
    counters.clear()
    compiled = next(r for r in ab.KERNEL.revisions if r.name == "torch_compile")
    assert compiled.code is ab.compiled_grads
    gen = torch.Generator().manual_seed(5)
    inputs = (*(torch.randn((1, 2, 33, 16), generator=gen) for _ in range(4)), 0.25)
    got = compiled.load()(inputs, None)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert torch.equal(got, ab.eager_grads(*inputs))
    torch._dynamo.reset()
