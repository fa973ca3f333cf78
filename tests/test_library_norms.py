"""layernorm / rmsnorm: known-wrong kernels the gate must reject, each for its own mistake;
v1's rows longer than v0 holds, on the GPU."""
import pytest
import torch
import torch.nn.functional as F

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

ROOT = find_root()
LAYERNORM = load_kernel(ROOT, "layernorm")
RMSNORM = load_kernel(ROOT, "rmsnorm")
SHAPES = [(7, 33), (5, 1000)]


def _failures(kernel, fn, **kw):
    rev = Revision("wrong", "triton", (), lambda: fn, "known wrong")
    return [r for r in gate.check_revision(kernel, rev, "cpu", shapes=SHAPES, **kw) if not r.ok]


def test_layernorm_that_forgets_the_bias_is_rejected():
    def no_bias(inputs, out):
        x, w, _, eps = inputs
        return out.copy_(F.layer_norm(x.float(), (x.shape[-1],), w.float(), None, eps))

    assert len(_failures(LAYERNORM, no_bias)) == len(SHAPES) * 2 * 2  # every shape, dtype, case


def test_layernorm_with_one_pass_variance_fails_on_shifted_rows():
    """E[x^2] - mean^2 in fp32 cancels at mean 300: the "shifted" case exists to catch it."""

    def one_pass(inputs, out):
        x, w, b, eps = (t.float() if torch.is_tensor(t) else t for t in inputs)
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        return out.copy_((x - mean) * torch.rsqrt(var.clamp_min(0) + eps) * w + b)

    failed = _failures(LAYERNORM, one_pass, dtypes=["fp32"])
    assert failed and {r.case for r in failed} == {"shifted"}


def test_rmsnorm_that_forgets_the_weight_is_rejected():
    def no_weight(inputs, out):
        x, _, eps = inputs
        return out.copy_(F.rms_norm(x.float(), (x.shape[-1],), None, eps))

    assert len(_failures(RMSNORM, no_weight)) == len(SHAPES) * 2 * 2


def test_rmsnorm_that_divides_by_the_std_is_rejected():
    """Subtracting the mean turns RMSNorm into LayerNorm without bias: close, but not it."""

    def centred(inputs, out):
        x, w, eps = inputs
        return out.copy_(F.layer_norm(x.float(), (x.shape[-1],), w.float(), None, eps))

    assert _failures(RMSNORM, centred, dtypes=["fp32"])


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [LAYERNORM, RMSNORM], ids=lambda k: k.name)
def test_looped_revision_normalizes_rows_longer_than_v0_holds(kernel):
    """v0 stops at MAX_COLS columns (whole rows in registers); v1's loop takes any length,
    on every case (shifted LayerNorm rows, large RMSNorm ones) and an odd tail."""
    from kernels.common.rownorm import MAX_COLS

    rev = kernel.revision("v1_looped")
    shapes = [(3, MAX_COLS + 5), (2, 4 * MAX_COLS)]
    failed = [r.line() for r in gate.check_revision(kernel, rev, "cuda", shapes=shapes) if not r.ok]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("kernel", [LAYERNORM, RMSNORM], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("shape,case", [((5, 1000), "random"), ((3, 1001), "random"), ((4, 1000), "strided")])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_aligned_whole_row_kernel_matches_the_reference(kernel, shape, case, dtype):
    """v2's whole-row kernel, which on the CPU the launcher never picks (it runs the loop there),
    through the interpreter: sizes passed divided by 8 where they allow (1000), whole (1001, a
    row stride of 1003)."""
    import triton

    from kernels.common import rownorm, rownorm_aligned

    x, w, *rest = kernel.make_inputs(shape, dtype, torch.Generator().manual_seed(3), "cpu", "random")
    if case == "strided":
        wide = torch.zeros(shape[0], shape[1] + 3, dtype=x.dtype)
        wide[:, :shape[1]] = x
        x = wide[:, :shape[1]]
    inputs = (x, w, *rest)
    bias, eps = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    out = torch.full(shape, float("nan"), dtype=x.dtype)
    args = rownorm_aligned.rows_args(x, w, bias, eps, out)
    assert args[9] == (8 if shape[1] == 1000 and case == "random" else 1)  # Q
    block = triton.next_power_of_2(shape[1])
    rownorm_aligned.rows_kernel.fn[(triton.cdiv(shape[0], rownorm.CPU_ROW_CONFIG["ROWS"]),)](
        *args, BLOCK_N=block, **rownorm.CPU_ROW_CONFIG)
    err, problem = gate.compare(out, kernel.reference(inputs), gate.tolerance(kernel, dtype))
    assert not problem, problem


@pytest.mark.parametrize("shape,warps", [((5, 1000), 4), ((5, 1000), 1), ((3, 1001), 4), ((1, 4096), 32)])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_layernorm_v3_loads_w_and_b_early_or_late_and_matches_the_reference(shape, warps, dtype):
    """v3's whole-row kernel, which the CPU launcher never picks, through the interpreter on both
    of its paths: w and b loaded before the statistics (a thread's share <= EARLY_MAX) and after
    them (one warp over 1024 columns: 32 a thread); shifted rows, and a length (1001) that
    takes no quantum."""
    import triton

    from kernels.layernorm import v3_early

    block = triton.next_power_of_2(shape[1])
    assert v3_early.early(block, warps) == (warps != 1)
    inputs = LAYERNORM.make_inputs(shape, dtype, torch.Generator().manual_seed(5), "cpu", "shifted")
    x, w, b, eps = inputs
    out = torch.full(shape, float("nan"), dtype=x.dtype)
    args = v3_early.rows_args(x, w, b, eps, out)
    assert args[-1] == (8 if shape[1] % 8 == 0 else 1)  # Q
    v3_early.rows_kernel.fn[(triton.cdiv(shape[0], 2),)](*args, BLOCK_N=block, ROWS=2, num_warps=warps,
                                                         EARLY=v3_early.early(block, warps))
    err, problem = gate.compare(out, LAYERNORM.reference(inputs), gate.tolerance(LAYERNORM, dtype))
    assert not problem, problem


@pytest.mark.parametrize("module", ["kernels.layernorm.v3_early", "kernels.rmsnorm.v3_wide"])
def test_v3_offers_one_row_at_32_warps_where_a_thread_holds_4_to_64_elements(module):
    """The norms' v3 add one config to v2's whole-row candidates: a row over 1024 threads, at 32768
    columns (32 a thread: at 1024x32768 fp32, LayerNorm from 0.80x to 0.99x torch.compile on the H100)
    and 4096, and not at 1024 (1 a thread), where v2's candidates stay as they were."""
    import importlib

    from kernels.common import rownorm

    kernel = importlib.import_module(module).rows_kernel
    picked = {b: kernel.early_config_prune(kernel.configs, {}, BLOCK_N=b) for b in (1024, 4096, 32768)}
    warps = {b: sorted({c.num_warps for c in cs}) for b, cs in picked.items()}
    v2 = {b: sorted({c.num_warps for c in rownorm.prune_rows(rownorm.ROW_CONFIGS, {}, BLOCK_N=b)})
          for b in (1024, 4096, 32768)}
    assert warps == {1024: v2[1024], 4096: v2[4096] + [32], 32768: v2[32768] + [32]}
    if "EARLY" in kernel.configs[0].kwargs:  # LayerNorm's: one load order a config, the one its share allows
        for b, cs in picked.items():
            assert len(cs) == len({(c.kwargs["ROWS"], c.num_warps) for c in cs}), b
            assert all(c.kwargs["EARLY"] == (b // (32 * c.num_warps) <= 16) for c in cs), b
