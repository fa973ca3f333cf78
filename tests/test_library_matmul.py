"""matmul_relu: every autotune config of both revisions is right when K is not a multiple of
its BLOCK_K (and M, N not multiples of the tile), through the interpreter; the gate rejects a
kernel that drops the K tail and one that forgets the ReLU; a GPU with less shared memory
tries only the configs that fit it, and one without TMA skips v1."""
import json
from types import SimpleNamespace

import pytest
import torch

from kernels.matmul_relu import v0_tiled, v1_tma_persistent, v2_split_k, v3_b_pointers
from kernlog.cuda import DeviceCaps
from kernlog.errors import Unsupported
from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

from .helpers import A100, H100, L4, fake_gpu, without_interpreter

KERNEL = load_kernel(find_root(), "matmul_relu")
TOL = gate.TOLERANCE["bf16"]


def _inputs(shape, seed=0):
    return KERNEL.make_inputs(shape, "bf16", torch.Generator().manual_seed(seed), "cpu", "random")


def _config_id(c):
    kw = c.kwargs
    return ("x".join(str(kw[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + f"_s{c.num_stages}_w{c.num_warps}"
            + ("_split" if kw.get("EPILOGUE_SPLIT", 1) > 1 else "") + ("_flat" if kw.get("FLATTEN") else ""))


# K = 70 / 72: a partial BLOCK_K of 64 or 128; M, N cross a tile edge. v1 needs K, N % 8 == 0
# for TMA, so it gets (130, 264, 72); with num_sms=2 each persistent program takes several tiles.
CONFIG_CASES = ([(v0_tiled.matmul_relu, c, (130, 260, 70), {}) for c in v0_tiled.CONFIGS]
                + [(v1_tma_persistent.matmul_relu, c, (130, 264, 72), {"num_sms": 2})
                   for c in v1_tma_persistent.CONFIGS])


@pytest.mark.parametrize("fn,config,shape,kw", CONFIG_CASES,
                         ids=[f"{f.__module__.rsplit('.', 1)[1]}-{_config_id(c)}" for f, c, _, _ in CONFIG_CASES])
def test_every_config_handles_k_tail_and_edges(fn, config, shape, kw):
    inputs = _inputs(shape)
    out = KERNEL.make_output(inputs)
    gate.poison(out)
    fn(*inputs, out, config=config.kwargs, **kw)
    err, problem = gate.compare(out, KERNEL.reference(inputs), TOL)
    assert not problem, problem


def test_v1_takes_tma_only_where_tma_can():
    assert v1_tma_persistent.tma_ok(*_inputs((130, 264, 72)), torch.empty(130, 264, dtype=torch.bfloat16))
    assert not v1_tma_persistent.tma_ok(*_inputs((33, 47, 70)), torch.empty(33, 47, dtype=torch.bfloat16))


def test_k_tail_is_not_silently_zero():
    """K = 65 with BLOCK_K = 64: the tail step carries one column of A; drop it and C moves."""
    inputs = _inputs((16, 16, 65))
    out = v0_tiled.matmul_relu(*inputs, KERNEL.make_output(inputs), config=v0_tiled.CONFIGS[3].kwargs)
    a, b = (t.double() for t in inputs)
    without_tail = torch.relu(a[:, :64] @ b[:64])
    assert gate.compare(out, KERNEL.reference(inputs), TOL)[1] == ""
    assert gate.compare(out, without_tail, TOL)[1] != ""


def _wrong(fn):
    return Revision("wrong", "triton", (), lambda: fn, "known wrong")


def test_gate_rejects_a_matmul_that_drops_the_k_tail():
    def drop_tail(inputs, out):
        a, b = inputs
        k = a.shape[1] // 32 * 32
        return out.copy_(torch.relu(a[:, :k].float() @ b[:k].float()))

    results = gate.check_revision(KERNEL, _wrong(drop_tail), "cpu", shapes=[(33, 47, 70)])
    assert not any(r.ok for r in results)


def test_gate_rejects_a_matmul_without_relu():
    results = gate.check_revision(KERNEL, _wrong(lambda inputs, out: out.copy_(inputs[0] @ inputs[1])),
                                  "cpu", shapes=[(33, 47, 70)])
    assert not any(r.ok for r in results)


def _prune(tuner, caps, monkeypatch):
    fake_gpu(monkeypatch, caps)
    return tuner.early_config_prune(tuner.configs, {"a_ptr": torch.empty(0)})


def test_configs_are_pruned_to_the_gpus_shared_memory(monkeypatch):
    v0, v1 = v0_tiled.matmul_relu_kernel, v1_tma_persistent.matmul_relu_tma_kernel
    assert _prune(v0, H100, monkeypatch) == v0_tiled.CONFIGS and _prune(v1, H100, monkeypatch) == v1.configs
    # sm_80 buffers one stage fewer: v0's largest config takes 144 KiB there, under the A100's 163
    assert _prune(v0, A100, monkeypatch) == v0_tiled.CONFIGS
    kept = _prune(v0, L4, monkeypatch)  # 99 KiB a block
    assert kept and all(v0_tiled.smem_bytes(c, L4.capability) <= 99 * 1024 for c in kept)
    assert [c for c in v0_tiled.CONFIGS if c not in kept] == [
        c for c in v0_tiled.CONFIGS if v0_tiled.smem_bytes(c, L4.capability) > 99 * 1024] != []
    tiny = DeviceCaps("tiny", (8, 0), 4, 48 * 1024, False)
    with pytest.raises(Unsupported, match=r"needs 72 KiB of shared memory per block, this GPU \(tiny\) has 48 KiB"):
        _prune(v0, tiny, monkeypatch)


def test_v1_is_skipped_on_a_gpu_without_tma_whatever_the_shape(monkeypatch):
    fake_gpu(monkeypatch, A100)
    for shape in ((130, 264, 72), (33, 47, 70)):  # the TMA path and the v0 fallback's
        a = SimpleNamespace(is_cuda=True, device="cuda:0", shape=shape[::2])
        with pytest.raises(Unsupported) as exc:
            v1_tma_persistent.matmul_relu(a, None, None)
        assert str(exc.value) == ("needs TMA bulk tensor copies (compute capability 9.0), "
                                  "this GPU (NVIDIA A100-SXM4-80GB) is 8.0")


# Every autotune config, compiled for each GPU below as a launch there would compile it (pointers
# and ints that are multiples of 16 carry tt.divisibility), in a fresh interpreter without
# TRITON_INTERPRET (see tests/test_triton_compiles.py). Prints one line per config; exits 1 if
# any fails or takes more shared memory than its revision's smem_bytes says (the pruning keeps
# what that says fits the GPU), or at 2048^3 less (smem_bytes would prune configs that fit).
# v1 needs TMA: sm_90 only.
_COMPILE_ALL = """
import itertools
import json
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.matmul_relu import v0_tiled
from kernels.matmul_relu import v1_tma_persistent as v1

GPUS = json.loads(sys.argv[1])
V0_ARGS = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
           "stride_cm", "stride_cn")
V1_ARGS = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")
bad = 0
for (cc, sm_count, smem_limit), (M, N, K) in itertools.product(GPUS, ((2048, 2048, 2048), (130, 264, 72))):
    for rev, fn, names, configs, smem in (
            ("v0", v0_tiled.matmul_relu_kernel.fn.fn, V0_ARGS, v0_tiled.CONFIGS, v0_tiled.smem_bytes),
            ("v1", v1.matmul_relu_tma_kernel.fn, V1_ARGS, v1.CONFIGS, v1.smem_bytes)):
        if rev == "v1" and cc < 90:
            continue
        values = dict(zip(names, (16, 16, 16, M, N, K) + ((K, 1, N, 1, N, 1) if rev == "v0" else (K, N, N))))
        for config in configs:
            consts = {k: v for k, v in values.items() if v == 1}  # a launch makes ints equal to 1 constexprs
            consts.update(config.kwargs, **({"EVEN_K": K % config.kwargs["BLOCK_K"] == 0} if rev == "v0"
                                            else {"NUM_SMS": sm_count}))
            order = list(fn.arg_names)
            signature = {k: "constexpr" if k in consts else ("*bf16" if k.endswith("_ptr") else "i32") for k in order}
            attrs = {(order.index(k),): [["tt.divisibility", 16]] for k, v in values.items()
                     if k not in consts and v % 16 == 0}
            name = f"sm_{cc} {rev} {M}x{N}x{K} {config}"
            try:
                kernel = triton.compile(ASTSource(fn, signature, {(order.index(k),): v for k, v in consts.items()},
                                                  attrs), target=GPUTarget("cuda", cc, 32),
                                        options={"num_warps": config.num_warps, "num_stages": config.num_stages})
            except Exception as exc:
                bad += 1
                print("FAIL", name, " ".join(str(exc).split())[-300:])
                continue
            shared, said = kernel.metadata.shared, smem(config, divmod(cc, 10))
            kept = said <= smem_limit
            # Short K loops get fewer stages (130x264x72 on sm_80: 64 of the 144 KiB said)
            problem = ("SHARED MEMORY OVER WHAT smem_bytes SAYS" if shared > said else
                       "SHARED MEMORY UNDER WHAT smem_bytes SAYS" if shared < said and K == 2048 else "")
            bad += bool(problem)
            print(problem or "ok", name, "shared", shared, "kept" if kept else "pruned")
sys.exit(1 if bad else 0)
"""


@pytest.mark.slow
def test_every_config_compiles_and_takes_the_shared_memory_its_pruning_assumes():
    gpus = [(10 * c.capability[0] + c.capability[1], c.sm_count, c.smem_per_block_optin) for c in (H100, A100, L4)]
    done = without_interpreter(_COMPILE_ALL, json.dumps(gpus), timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]



@pytest.mark.parametrize("split", [2, 3, 5])
@pytest.mark.parametrize("shape", [(33, 47, 300), (16, 40, 1032), (1, 72, 200)])
def test_split_k_sums_its_slices_to_the_reference(shape, split):
    """v2's two kernels through the interpreter: SPLIT slices of K (the last one short), the
    partials summed before the ReLU (a ReLU per slice would be wrong wherever they differ in sign)."""
    inputs = _inputs(shape)
    out = torch.full((shape[0], shape[1]), float("nan"), dtype=torch.bfloat16)
    v2_split_k.matmul_relu(*inputs, out, config=dict(v2_split_k.CPU_CONFIG, SPLIT=split))
    err, problem = gate.compare(out, KERNEL.reference(inputs), TOL)
    assert not problem, problem


def test_split_k_is_a_candidate_only_where_v1_leaves_the_gpu_idle():
    sms = 132
    assert v2_split_k.candidates(4096, 4096, 4096, sms) == [("v1", None)]  # 256+ tiles: nothing to split
    for shape in ((256, 256, 65536), (1, 4096, 4096), (512, 512, 16384)):
        cands = v2_split_k.candidates(*shape, sms)
        splits = [kw for kind, kw in cands if kind == "split"]
        assert cands[0] == ("v1", None) and splits and len(cands) == len({repr(c) for c in cands})
        for kw in splits:
            tiles = -(-shape[0] // kw["BLOCK_M"]) * -(-shape[1] // kw["BLOCK_N"])
            assert kw["SPLIT"] >= 2 and kw["SPLIT"] * v2_split_k.MIN_K_STEPS * kw["BLOCK_K"] <= shape[2]
            assert tiles * kw["SPLIT"] <= max(v2_split_k.WAVES) * sms + tiles  # no more programs than asked


V3_CASES = [v3_b_pointers.CPU_CONFIG] + [{k: v for k, v in c.items() if k not in ("num_stages", "num_warps")}
                                        for c in v3_b_pointers.CONFIGS]


@pytest.mark.parametrize("config", V3_CASES, ids=lambda c: f"{c['BLOCK_M']}x{c['BLOCK_N']}_e{c['EPILOGUE_SPLIT']}")
@pytest.mark.parametrize("shape", [(130, 264, 72), (33, 136, 76)])
def test_b_pointer_kernel_handles_k_and_n_tails(shape, config):
    """v3's kernel through the interpreter: K a partial BLOCK_K, N past a tile edge by 8 (the N
    mask, constant over Q lanes), several tiles a persistent program (4 programs)."""
    inputs = _inputs(shape)
    out = torch.full((shape[0], shape[1]), float("nan"), dtype=torch.bfloat16)
    v3_b_pointers.matmul_relu(*inputs, out, config=config)
    err, problem = gate.compare(out, KERNEL.reference(inputs), TOL)
    assert not problem, problem


def test_b_pointer_kernel_is_a_candidate_only_where_b_defeats_tma():
    """Built where B's row stride is 16 mod 32 bytes (N = 136 bf16: 272 bytes), not at N = 128 or
    where C cannot take TMA (N odd)."""
    def kinds(n):
        a, b = _inputs((64, n, 72))
        c = torch.empty(64, n, dtype=torch.bfloat16)
        return {kind for kind, _ in v3_b_pointers.candidates(a, b, c, 132)}

    assert "bptr" in kinds(136) and "v1" in kinds(136)
    assert "bptr" not in kinds(128)
    assert "bptr" not in kinds(135)


def test_b_quantum_is_the_widest_vector_that_divides():
    q = v3_b_pointers.quantum
    assert (q(5000, 5000, 2), q(136, 136, 2), q(5000, 5002, 2), q(135, 135, 2), q(264, 264, 4)) == (8, 8, 2, 1, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("config", v3_b_pointers.CONFIGS,
                         ids=lambda c: f"{c['BLOCK_M']}x{c['BLOCK_N']}_s{c['num_stages']}")
@pytest.mark.parametrize("shape", [(3000, 5000, 4000), (130, 264, 72), (33, 136, 72)])
def test_every_b_pointer_config_passes_the_gate_on_gpu(shape, config):
    """Each of v3's configs forced on the GPU, poisoned output, against float64: the picker
    gates only the candidate it keeps (N = 5000 and 136: B's stride 16 mod 32 bytes)."""
    inputs = tuple(t.cuda() for t in KERNEL.make_inputs(shape, "bf16", torch.Generator().manual_seed(1), "cpu"))
    out = KERNEL.make_output(inputs)
    gate.poison(out)
    v3_b_pointers.matmul_relu(*inputs, out, config=config)
    err, problem = gate.compare(out.cpu(), KERNEL.reference(tuple(t.cpu() for t in inputs)), TOL)
    assert not problem, problem
