"""The attention kernel: wrong kernels the gate must reject (the causal mask off, the online
softmax's rescale dropped, the diagonal block left unmasked), the fused kernel's causal block
skipping (keys past a query block are never read), odd lengths with the diagonal inside and
across key blocks, strided inputs, and the declared refusal of other head dims. All on the CPU,
Triton through its interpreter."""
import math

import pytest
import torch

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

from .test_gate_all_kernels import _cpu_shapes

KERNEL = load_kernel(find_root(), "attention")
BLOCK = 16


def _blockwise(q, k, v, scale, rescale=True, causal=True, mask_diagonal=True):
    """Flash attention's loop in torch, fp32, key blocks of BLOCK up to each query block's
    diagonal; the flags drop one piece each, as a wrong kernel would."""
    B, H, T, D = q.shape
    q, k, v = q.float(), k.float(), v.float()
    out = torch.empty((B, H, T, D))
    for m0 in range(0, T, BLOCK):
        rows = torch.arange(m0, min(m0 + BLOCK, T))
        m = torch.full((B, H, len(rows)), float("-inf"))
        total = torch.zeros((B, H, len(rows)))
        acc = torch.zeros((B, H, len(rows), D))
        for n0 in range(0, min(m0 + BLOCK, T) if causal else T, BLOCK):
            cols = torch.arange(n0, min(n0 + BLOCK, T))
            s = q[:, :, rows] @ k[:, :, cols].transpose(-2, -1) * scale
            if causal and mask_diagonal:
                s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new) if rescale else torch.ones_like(m)
            p = torch.exp(s - m_new[..., None])
            total = total * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + p @ v[:, :, cols]
            m = m_new
        out[:, :, rows] = acc / total[..., None]
    return out


def _launcher(**flags):
    return lambda inputs, out: out.copy_(_blockwise(*inputs, **flags))


def _failures(launch, shapes=((1, 2, 40, 16), (2, 1, 33, 32))):
    rev = Revision("wrong", "triton", (), lambda: launch, "known wrong")
    return [r for r in gate.check_revision(KERNEL, rev, "cpu", shapes=shapes, seed=0) if not r.ok]


def test_the_blockwise_model_itself_passes_the_gate():
    assert not _failures(_launcher())


@pytest.mark.parametrize("flaw", ["causal", "rescale", "mask_diagonal"])
def test_gate_rejects_a_wrong_flash_kernel(flaw):
    """Each flaw fails every dtype at every shape, and by far (over 10 seeds the least error was
    7.5e-2, against the bf16 tolerance of 1e-2): the mask off mixes in the future, the rescale
    dropped weights early blocks by a stale max, the unmasked diagonal lets a query see the
    later keys of its own block."""
    failed = _failures(_launcher(**{flaw: False}))
    assert len(failed) == 4, [r.line() for r in failed]
    assert all(r.rel_error > 5e-2 for r in failed), [r.line() for r in failed]


def test_every_check_shape_runs_in_the_default_cpu_gate():
    """tests/test_gate_all_kernels.py gates every revision on the CPU at the shapes _cpu_shapes
    keeps: for attention that must be all of them, both dtypes."""
    assert _cpu_shapes(KERNEL) == list(KERNEL.gate_shapes)
    assert set(KERNEL.dtypes) == {"fp32", "bf16"}


def _inputs(shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).to(dtype) for _ in range(3)]


def _ok(out, q, k, v, scale):
    err, problem = gate.compare(out, KERNEL.reference((q, k, v, scale)), gate.tolerance(KERNEL, "fp32"))
    return problem


def _flash(rev):
    import importlib

    return importlib.import_module(f"kernels.attention.{rev}").attention


# v2 and v3 take BLOCK_M multiples of BLOCK_N only
CONFIGS = [("v1_flash", (16, 16, 1, 1)), ("v1_flash", (32, 16, 1, 1)), ("v1_flash", (16, 32, 1, 1)),
           ("v2_tuned", (16, 16, 1, 1)), ("v2_tuned", (32, 16, 1, 1)), ("v2_tuned", None),
           ("v3_fma", (16, 16, 1, 1)), ("v3_fma", (32, 16, 1, 1)), ("v3_fma", None)]
FUSED = ["v1_flash", "v2_tuned", "v3_fma"]


@pytest.mark.parametrize("rev,config", CONFIGS)
def test_flash_never_reads_keys_past_its_query_block(rev, config):
    """k and v NaN from key 32 on: a query block that ends at or before 32 reads none of them
    (a NaN v under a zero probability still makes the product NaN), so rows 0-31 come out
    finite and right. With BLOCK_N over BLOCK_M the last key block reaches past the query
    block, so the poison starts at a multiple of both."""
    attention = _flash(rev)
    q, k, v = _inputs((1, 2, 50, 16))
    scale = 0.25
    k[:, :, 32:], v[:, :, 32:] = float("nan"), float("nan")
    out = attention(q, k, v, scale, torch.empty_like(q), config=config)
    assert torch.isfinite(out[:, :, :32]).all()
    assert not _ok(out[:, :, :32], q[:, :, :32], k[:, :, :32], v[:, :, :32], scale)
    assert torch.isnan(out[:, :, 32:]).all()  # and the later rows did read them


@pytest.mark.parametrize("T", [1, 15, 47, 65])
@pytest.mark.parametrize("rev,config", CONFIGS)
def test_flash_takes_odd_lengths(T, rev, config):
    """T no multiple of either block: the last query block's rows past T, and the keys past T
    in the diagonal block, are masked; a diagonal that spans two key blocks (BLOCK_M 32 over
    BLOCK_N 16) masks both."""
    attention = _flash(rev)
    q, k, v = _inputs((2, 1, T, 32), seed=T)
    out = attention(q, k, v, 32 ** -0.5, torch.empty_like(q), config=config)
    assert not _ok(out, q, k, v, 32 ** -0.5)


@pytest.mark.parametrize("rev", FUSED)
def test_flash_reads_strided_views(rev):
    """MiniGPT's q, k, v: (B, T, H, D) slices of one qkv tensor, transposed to (B, H, T, D);
    the kernel reads them through their strides, no copy."""
    attention = _flash(rev)
    B, T, H, D = 2, 21, 3, 16
    qkv = torch.randn((B, T, 3 * H * D), generator=torch.Generator().manual_seed(1))
    q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in qkv.split(H * D, dim=-1))
    assert not q.is_contiguous()
    out = attention(q, k, v, D ** -0.5, torch.empty((B, H, T, D)))
    assert not _ok(out, q, k, v, D ** -0.5)


@pytest.mark.parametrize("name", FUSED)
def test_other_head_dims_are_declined_with_one_line(name):
    attention = _flash(name)
    rev = KERNEL.revision(name)
    assert rev.refusal((1, 1, 8, 48)) == "head dim 48 not one of 16, 32, 64, 128"
    assert all(not rev.refusal((1, 1, 8, d)) for d in (16, 32, 64, 128))
    q, k, v = _inputs((1, 1, 8, 48))
    with pytest.raises(ValueError, match="head dim 48 not one of 16, 32, 64, 128"):
        attention(q, k, v, 0.1, torch.empty_like(q))
    assert gate.check_revision(KERNEL, rev, "cpu", shapes=[(1, 1, 8, 48)]) == []  # declined, not failed


def test_flops_and_bytes():
    assert KERNEL.flops((1, 12, 1024, 64)) == 2 * 12 * 1024 * 1024 * 64
    assert KERNEL.bytes_moved((1, 12, 1024, 64), "bf16") == 4 * 12 * 1024 * 64 * 2
    assert math.isclose(KERNEL.make_inputs((1, 1, 4, 64), "fp32", torch.Generator(), "cpu")[3], 1 / 8)


@pytest.mark.parametrize("rev", FUSED)
def test_flash_writes_each_rows_log_sum_exp_where_asked(rev):
    attention = _flash(rev)
    q, k, v = _inputs((2, 2, 37, 16))
    lse = torch.empty((2, 2, 37))
    attention(q, k, v, 0.25, torch.empty_like(q), lse=lse)
    s = (q.double() @ k.double().transpose(-2, -1)) * 0.25
    s = s.masked_fill(torch.ones((37, 37), dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(lse.double(), torch.logsumexp(s, -1), rtol=0, atol=1e-5)


def test_the_training_wrapper_has_the_eager_gradients():
    """models.triage_examples.kernlog_attention: v1_flash's forward, the eager math's backward
    from its output and log-sum-exp; against float64 autograd through the eager math."""
    from kernels.attention import eager
    from models.triage_examples import kernlog_attention

    q, k, v = (t.requires_grad_() for t in _inputs((2, 3, 37, 16), seed=3))
    out = kernlog_attention()(q, k, v, 0.25)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    got = torch.autograd.grad(out, (q, k, v), grad)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(eager(q64, k64, v64, 0.25), (q64, k64, v64), grad.double())
    for g, w in zip(got, want, strict=True):
        assert (g.double() - w).norm() / w.norm() < 1e-5


def test_the_training_backward_under_bf16_autocast_recomputes_the_scores_in_fp32():
    """In a custom backward autocast is on again: bf16 scores put exp(s - lse) rows off 1 at large
    logits (gradients 1.3e-2 off float64 here); the scores in fp32 keep them at bf16's own 4.5e-3."""
    from kernels.attention import eager
    from models.triage_examples import _attention_backward

    g = torch.Generator().manual_seed(0)
    T, D, scale = 256, 64, 64 ** -0.5
    q, k, v = (torch.randn(1, 2, T, D, generator=g).mul(1.7).bfloat16() for _ in range(3))
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    out = eager(q64, k64, v64, scale)
    grad = torch.randn(out.shape, generator=g)
    want = torch.autograd.grad(out, (q64, k64, v64), grad.double())
    s = (q64.detach() @ k64.detach().transpose(-2, -1)) * scale
    lse = torch.logsumexp(s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")), -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _attention_backward(q, k, v, out.detach().bfloat16(), lse.float(), grad.bfloat16(), scale)
    for gr, w in zip(got, want, strict=True):
        assert (gr.double() - w).norm() / w.norm() < 8e-3


@pytest.mark.parametrize("attention", ["eager", "sdpa", "kernlog", "kernlog_fused"])
def test_minigpt_train_steps_a_tiny_model(attention):
    from models.triage_examples import minigpt_train

    step = minigpt_train(attention, batch=2, layers=1, width=32, tokens=19, vocab=31)
    first = step().item()
    assert math.isfinite(first) and abs(first - math.log(31)) < 0.5  # near-uniform logits at init
    assert math.isfinite(step().item())


def _gpu_specs(profile_only: bool):
    """The launches the GPU makes, as tests/test_triton_compiles.py compiles them: v1's table
    and v2's and v3's candidates, each dtype and head dim (profile_only: bf16 at D = 64, the first
    candidate)."""
    from kernels.attention import v1_flash, v2_tuned, v3_fma

    def spec(module, name, dtype, d, config):
        bm, bn, warps, stages = config
        ptr = "*" + dtype
        sig = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": ptr, "lse_ptr": "*fp32", "T": "i32", "H": "i32",
               "qk_scale": "fp32"}
        sig.update({f"s{t}_{a}": "i32" for t in "qkvo" for a in "bht"})
        consts = {"D": d, "BLOCK_M": bm, "BLOCK_N": bn, "PRECISION": "ieee" if dtype == "fp32" else "tf32",
                  "STORE_LSE": False}
        sig.update(dict.fromkeys(consts, "constexpr"))
        return {"module": module, "name": name, "signature": sig, "constexprs": consts,
                "options": {"num_warps": warps, "num_stages": stages}}

    v1 = {k: c for k, c in v1_flash.GPU_CONFIGS.items() if not profile_only or k == ("bf16", 64)}
    out = [spec("kernels.attention.v1_flash", "_attn_fwd_kernel", dt, d, c) for (dt, d), c in v1.items()]
    for dt, d in ([("bf16", 64)] if profile_only else [(dt, d) for dt in ("bf16", "fp32") for d in (64, 128)]):
        out += [spec("kernels.attention.v2_tuned", "_attn_fwd_split_kernel", dt, d, c)
                for c in v2_tuned.candidates(dt, d)[:1 if profile_only else None]]
        out += [spec("kernels.attention.v3_fma", "_attn_fwd_fma_kernel", dt, d, c)  # v2's loop compiled above
                for loop, c in v3_fma.candidates(dt, d)[:1 if profile_only else None] if loop == v3_fma.FMA]
    return out


@pytest.mark.parametrize("profile_only", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_gpu_layouts_compile_for_sm90(profile_only):
    """The CPU gate runs 16-row blocks; the GPU's 64-128-row layouts compile here for sm_90
    (about 1-4 s each: the profile shape's by default, every one in the slow suite)."""
    from .test_triton_compiles import _compile_all

    if torch.cuda.is_available():
        pytest.skip("on a GPU the gate compiles and runs them")
    code, out = _compile_all(_gpu_specs(profile_only))
    assert code == 0, out


def test_the_log_has_no_line_for_a_kernel_nothing_was_stored_for(tmp_path):
    """Registered and never profiled or swept, a kernel has no section (a row of dashes and an
    empty page would be generated files to commit before any GPU ran it); once something of it
    is stored (here: its committed profiles) it has one."""
    import shutil

    from kernlog.render.facts import collect

    from .helpers import scratch_repo

    root = scratch_repo(tmp_path)
    assert collect(root, [KERNEL], histories=False) == []
    for src in (find_root() / "profiles").glob("*/attention"):
        shutil.copytree(src, root / "profiles" / src.parent.name / "attention")
    shutil.copy(find_root() / "profiles" / "nvidia-h100-80gb-hbm3" / "ceilings.json",
                root / "profiles" / "nvidia-h100-80gb-hbm3" / "ceilings.json")
    assert [s["kernel"].name for s in collect(root, [KERNEL], histories=False)] == ["attention"]


def test_a_training_step_through_the_fused_backward_moves_the_model_as_eager_attention_does():
    """minigpt_train("kernlog_fused"): the same start (seeded), four steps, each loss the eager
    attention's: the fused backward's gradients made the same AdamW updates. The two stay within
    5e-7 (fp32, the CPU); with dk dropped from the backward they part by 1.2e-5 at the second
    step and 3.6e-5 at the fourth."""
    from models.triage_examples import minigpt_train

    losses = {}
    for attention in ("eager", "kernlog_fused"):
        torch.manual_seed(0)
        step = minigpt_train(attention, batch=2, layers=1, width=32, tokens=19, vocab=31)
        losses[attention] = [step().item() for _ in range(4)]
    assert losses["eager"][3] < losses["eager"][0] - 0.05  # the steps moved the model
    assert max(abs(a - b) for a, b in zip(losses["kernlog_fused"], losses["eager"], strict=True)) < 4e-6
