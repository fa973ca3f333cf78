"""softmax/triton_peeled: rows off the 16-byte boundary in 16-byte moves, every other row through
triton's kernels. Each path passes the gate where it is taken (a refused path would fail it), the
body's loads and stores are 16-byte vectors in the PTX for sm_90, and on the GPU every config the
picker times passes the gate, met, mixed and fallen back."""
import json
from functools import lru_cache

import pytest

from kernlog.registry import find_root, load_kernel

from .helpers import Refused, gate_failures, without_interpreter

ROOT = find_root()
KERNEL = load_kernel(ROOT, "softmax")


@pytest.fixture
def sp():
    from kernels.softmax import softmax_triton_peeled

    return softmax_triton_peeled


def _gate(launch, shapes, dtypes=None, device="cpu", cases=None):
    return gate_failures(KERNEL, "triton_peeled", launch, shapes, dtypes, cases, device)


def test_rows_off_the_boundary_take_the_peeled_kernel(sp, monkeypatch):
    """Odd lengths (every row but the first off the boundary, each at another offset) in chunks of
    256: rows of 5 chunks with a head and a tail each, a last chunk that holds only a tail (1025
    columns), rows whose body ends a vector short of a chunk's end, in bf16 the chunk after it empty (1277:
    row 0's body ends at 1272 in bf16, 1276 in fp32, and its fifth chunk must mask), rows of -inf
    and NaN; triton's kernels refused."""
    monkeypatch.setattr(sp.base, "softmax", lambda *a, **k: (_ for _ in ()).throw(AssertionError("wrong path")))
    launch = lambda inputs, out: sp.softmax(inputs[0], out, block=256)  # noqa: E731
    assert not _gate(launch, ((5, 1037), (4, 1025), (3, 1277)), cases=("random", "neg_inf", "nan"))


def test_rows_on_the_boundary_take_triton(sp, monkeypatch):
    """Aligned rows, and strided rows whose input and output sit at different offsets from the
    boundary (no single shift serves both), go to triton's kernels: the peeled one refused."""
    monkeypatch.setattr(sp, "_peeled_kernel", Refused())
    launch = lambda inputs, out: sp.softmax(inputs[0], out, block=256)  # noqa: E731
    assert not _gate(launch, ((3, 2048), (2, 1024 + 16)), cases=("random", "strided"))


def test_a_refused_peeled_path_fails_the_gate(sp, monkeypatch):
    monkeypatch.setattr(sp, "_peeled_kernel", Refused())
    failed = _gate(lambda inputs, out: sp.softmax(inputs[0], out, block=256), ((3, 1037),), dtypes=("fp32",),
                   cases=("random",))
    assert failed and "wrong path taken" in failed[0]


@pytest.mark.parametrize("cols,stride,elem,block,takes", [
    (50257, 50257, 2, None, True),     # GPT-2's vocabulary, contiguous
    (50257, 50260, 2, None, False),    # input rows 3 elements further apart than output rows
    (50264, 50264, 2, None, False),    # on the boundary: triton's kernels
    (1024, 1024, 4, None, False),      # short rows: several a program (triton's)
    (1025, 1025, 4, None, True),
    (131073, 131073, 2, 1024, False),  # 129 chunks of 1024: past SPLIT_CAP
    (131073, 131073, 2, None, True),   # 5 chunks of 32768
])
def test_peels_takes_long_rows_off_the_boundary_in_at_most_split_cap_chunks(sp, cols, stride, elem, block, takes):
    import torch

    rows = torch.empty((4, stride), dtype=torch.bfloat16 if elem == 2 else torch.float32, device="meta")[:, :cols]
    assert sp.peels(rows, None, block) is takes


def test_configs_cut_every_row_into_at_most_split_cap_chunks(sp):
    for cols in (1025, 5003, 30001, 50257, 100277, 32 * 16384 - 9):
        kept = sp.configs(cols, 8)
        assert kept, cols
        for c in kept:
            assert 1 <= -(-(cols + 7) // c["BLOCK"]) <= sp.base.SPLIT_CAP
            assert set(c) == {"BLOCK", "num_warps"}  # the meeting's width is a warp's, whatever the warps


VECTORS = """
import collections, json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.softmax import softmax_triton as st, softmax_triton_peeled as sp
d16 = [["tt.divisibility", 16]]
out = {}
for dt, q in (("bf16", 8), ("fp32", 4)):
    sig = {"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "slots_ptr": "*i64", "cols": "i32", "x_stride": "i32",
           "polls": "i32", "BLOCK": "constexpr"}
    attrs = {(0,): d16, (1,): d16, (2,): d16}  # cols and the stride odd: no hint on them
    for name, fn, consts in (("triton", st._split_kernel, {"SUB": 128}), ("peeled", sp._peeled_kernel,
                                                                         sp.constants(q, gpu=True))):
        s = dict(sig, **{k: "constexpr" for k in consts})
        k = triton.compile(ASTSource(fn=fn, signature=s, constexprs={"BLOCK": 4096, **consts}, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        ptx = k.asm["ptx"]
        out[f"{name} {dt}"] = dict(collections.Counter(re.findall(r"[ls][dt]\\.global[.\\w]*|bar\\.sync|ex2[.\\w]*",
                                                             ptx)))
# every config the picker may time at GPT-2's bf16 rows: the barriers after the chunk publishes
sig = dict(sig, x_ptr="*bf16", y_ptr="*bf16", Q="constexpr", TILE="constexpr")
out["after publishing"] = {}
for c in sp.configs(50257, 8):
    k = triton.compile(ASTSource(fn=sp._peeled_kernel, signature=sig, attrs=attrs,
                                 constexprs={"BLOCK": c["BLOCK"], **sp.constants(8, gpu=True)}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": c["num_warps"]})
    after = k.asm["ptx"][k.asm["ptx"].index("atom.global"):]
    out["after publishing"][f"{c['BLOCK']}/{c['num_warps']}"] = len(re.findall(r"bar\\.sync", after))
print(json.dumps(out))
"""


@lru_cache(maxsize=None)
def _ptx() -> dict:
    """VECTORS' counts, compiled once for the tests that read them."""
    done = without_interpreter(VECTORS, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_body_moves_in_16_byte_vectors_where_triton_moves_elements():
    """The claims behind the revision, in the PTX for sm_90 at an odd length and stride: triton's
    split kernel loads and stores element by element (2 bytes in bf16); the peeled kernel's body
    moves 16 bytes at a time (32 elements a thread at 4096 x 4 warps: 4 bf16 vectors, 8 fp32, in
    each of its two paths),
    and only the head and tail, two elements a thread at most, are scalars; its meeting holds
    no barrier of its own (a warp polls every slot)."""
    got = _ptx()
    for dt, scalar, vectors in (("bf16", "b16", 4), ("fp32", "b32", 8)):
        assert "ld.global.v4.b32" not in got[f"triton {dt}"] and got[f"triton {dt}"][f"ld.global.{scalar}"] >= 32
        peeled = got[f"peeled {dt}"]
        # twice: a chunk inside the row's body and one at its edge each have their own loads and stores
        assert peeled["ld.global.v4.b32"] == peeled["st.global.v4.b32"] == 2 * vectors, peeled
        assert peeled[f"ld.global.{scalar}"] <= 2 and peeled[f"st.global.{scalar}"] <= 2, peeled
        # the meeting a warp's: only the chunk's own max and sum cross warps (5 barriers at 4096 x 4
        # warps), where triton's split kernel, its slots spread over the program, crosses them at each poll
        assert peeled["bar.sync"] <= 5 < got[f"triton {dt}"]["bar.sync"], (peeled, got[f"triton {dt}"])
        # each of a thread's 32 elements takes one ex2.approx.ftz (no denormal range fix around it);
        # only the meeting's and the fallback's few exps are tl.exp's
        assert peeled["ex2.approx.ftz.f32"] >= 32 and peeled.get("ex2.approx.f32", 0) <= 5, peeled


def test_no_config_meets_at_a_barrier_after_it_publishes():
    """After a chunk publishes its (max, sum) (the slot's atomic exchange), nothing crosses warps in
    any config the picker may time, 4 to 32 warps: the polls, the pairs' reduction and the fallback
    are each warp's own, so warps that decide apart never wait at a barrier another warp skips."""
    got = _ptx()["after publishing"]
    assert len(got) >= 10 and set(got.values()) == {0}, got


@pytest.mark.gpu
def test_every_peeled_config_passes_the_gate_on_gpu(sp):
    """Each config the picker may time (every chunk and warp count its configs give, rows of 1501 to
    524279 columns), at rows of 2 and 4 chunks (a ragged last one), met through
    the slots, with every program falling back (no polls), and mixed (two polls)."""
    failed = []
    every = {(c["BLOCK"], c["num_warps"]) for cols in (1501, 5003, 20001, 40001, 32 * 16384 - 9) for q in (4, 8)
             for c in sp.configs(cols, q)}
    for block, warps in sorted(every):
        cfg = {"BLOCK": block, "num_warps": warps}
        for polls in (sp.base.GPU_POLLS, 0, 2):
            def launch(inputs, out, c=cfg, p=polls):
                sp.launch(inputs[0].contiguous(), out, p, **c)
                return out
            # (3, 2 * block - 3): rows whose last chunk holds nothing but -inf padding
            shapes = [(s, c) for s, c in ((5, 3 * block + 5), (3, block + 1), (3, 2 * block - 3))
                      if -(-(c + 7) // block) <= 32]
            failed += [f"{cfg} polls={polls}: {line}" for line in
                       _gate(launch, shapes, device="cuda", cases=("random", "neg_inf", "nan"))]
    assert not failed, "\n".join(failed)
