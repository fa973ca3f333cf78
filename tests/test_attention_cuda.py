"""attention's CUDA C rung, v4_wgmma (kernels/attention/cuda/v4_wgmma.cu), checked on the CPU: it
compiles with nvcc for sm_90a only, exports exactly the launcher's entry points, spills nothing and
keeps its wgmma groups asynchronous (the overlap it is built for); the launcher's shared memory,
tile and box sizes match the source; its hash follows its includes; on the CPU and for what the
kernel does not take it runs v3_fma. GPU-marked tests check the kernel itself against float64
(outputs and log-sum-exp, odd lengths, both head dims) and the calls it must pass to v3_fma."""
import re
import shutil
from functools import lru_cache

import pytest
import torch

from kernels.attention import v3_fma, v4_wgmma
from kernlog import cuda
from kernlog.identity import executed_files
from kernlog.registry import find_root, load_kernel

from .helpers import compile_report
from .helpers import ptxas_entries as entries

KERNEL = load_kernel(find_root(), "attention")
REV = KERNEL.revision("v4_wgmma")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on the PATH")
gpu = pytest.mark.gpu
needs_sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs a compute capability 9.0 GPU (sm_90a)")


@lru_cache(maxsize=None)
def ptxas(arch: str = "sm_90a") -> str:
    return compile_report(v4_wgmma.SOURCE, arch=arch)


def test_a_cuda_step_after_v3_with_a_prediction():
    names = [r.name for r in KERNEL.revisions]
    assert REV.kind == "cuda" and REV.role == "step" and REV.change and REV.predicts
    assert names.index("v4_wgmma") == names.index("v3_fma") + 1


@needs_nvcc
def test_compiles_for_sm90a_and_exports_exactly_the_launchers_entries():
    assert set(entries(ptxas())) == set(v4_wgmma.ENTRIES.values())


@needs_nvcc
def test_needs_sm90a():
    with pytest.raises(RuntimeError, match="wgmma|setmaxnreg"):
        cuda.compile_report(v4_wgmma.SOURCE, arch="sm_90")


@needs_nvcc
def test_wgmma_groups_stay_asynchronous_and_nothing_spills():
    """ptxas serializes wgmma (a warning) when a register an in-flight product reads or writes is
    written before its wait: the softmax's P written over the P of the product in flight did."""
    report = ptxas()
    assert "serialized" not in report, report
    for kernel, res in entries(report).items():
        assert "0 bytes spill stores" in res and "0 bytes stack frame" in res, (kernel, res)


def test_shared_memory_tiles_and_boxes_match_the_source():
    src = v4_wgmma.SOURCE.read_text()
    for define, value in (("FA_BM", v4_wgmma.BLOCK_M), ("FA_BN", v4_wgmma.BLOCK_N), ("FA_STAGES", v4_wgmma.STAGES),
                          ("FA_THREADS", v4_wgmma.THREADS)):
        assert re.search(rf"#define {define} {value}\b", src), define
    # Q: BLOCK_M rows x D, each stage K and V of BLOCK_N x D, bf16; 1024 bytes of alignment slack;
    # a barrier for Q and three per stage
    assert v4_wgmma.smem_bytes(64) == 1024 + 128 * 64 * 2 + 3 * 2 * 128 * 64 * 2 + 10 * 8
    assert v4_wgmma.smem_bytes(128) <= 227 * 1024  # the opt-in ceiling of one block on sm_90
    assert "static constexpr int BYTES = 1024 + BAR_OFF + (1 + 3 * FA_STAGES) * 8;" in src
    # a TMA box row is 128 bytes (the swizzle's width): 64 bf16 columns; Q's box is a warpgroup's 64 rows
    assert v4_wgmma.Q_BOX == (64, 64) and v4_wgmma.KV_BOX == (64, v4_wgmma.BLOCK_N)


def test_its_hash_follows_the_includes_and_the_launchers():
    files = executed_files(REV)
    for f in (v4_wgmma.SOURCE, v4_wgmma.SOURCE.parents[2] / "matmul_relu" / "cuda" / "mm_wgmma.cuh",
              cuda.COMMON_INCLUDE / "kl_cuda.cuh", v4_wgmma.SOURCE.parents[2] / "matmul_relu" / "cuda_launch.py",
              v4_wgmma.SOURCE.parents[1] / "v3_fma.py", v4_wgmma.SOURCE.parents[1] / "v4_wgmma.py"):
        assert f.resolve() in files, f
    assert not re.search(r"#include\s*<", v4_wgmma.SOURCE.read_text())


def test_the_cpu_runs_v3s_kernel():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((1, 2, 40, 64), generator=gen) for _ in range(3))
    assert v4_wgmma.takes(q, k, v, torch.empty_like(q)) == "not on a GPU"
    assert v4_wgmma.WGMMA not in v4_wgmma.candidates(q, k, v, torch.empty_like(q))
    got = v4_wgmma.attention(q, k, v, 0.125, torch.full_like(q, float("nan")))
    want = v3_fma.attention(q, k, v, 0.125, torch.empty_like(q))
    assert torch.equal(got, want)


def test_the_cuda_kernel_asked_for_where_it_cannot_run_is_an_error():
    q = torch.zeros((1, 1, 8, 64))
    with pytest.raises(ValueError, match="cannot run this call: not on a GPU"):
        v4_wgmma.attention(q, q, q, 0.125, torch.empty_like(q), config=v4_wgmma.WGMMA)


def _reference(q, k, v, scale):
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                                            scale=scale)


@gpu
@needs_sm90
@pytest.mark.parametrize("shape", [(1, 1, 17, 64), (2, 3, 256, 64), (1, 2, 300, 64), (1, 1, 200, 128),
                                   (2, 2, 1000, 128), (1, 4, 2048, 128), (3, 1, 129, 64)])
def test_the_cuda_kernel_against_float64_on_gpu(shape):
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    q, k, v = (torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    scale = shape[-1] ** -0.5
    out = torch.full_like(q, float("nan"))
    lse = torch.full(shape[:3], float("nan"), device="cuda")
    v4_wgmma.attention(q, k, v, scale, out, config=v4_wgmma.WGMMA, lse=lse)
    want = _reference(q, k, v, scale)
    assert (out.double() - want).abs().max().item() < 3e-2
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(torch.ones(shape[2], shape[2], dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    assert (lse.double() - torch.logsumexp(s, -1)).abs().max().item() < 1e-3


@gpu
@needs_sm90
def test_what_the_kernel_does_not_take_runs_v3_on_gpu():
    q32 = torch.randn((1, 2, 64, 64), device="cuda")
    assert v4_wgmma.takes(q32, q32, q32, torch.empty_like(q32)) == "bf16 only"
    wide = torch.randn((1, 2, 64, 2, 64), device="cuda", dtype=torch.bfloat16)[:, :, :, 0]  # strided rows
    assert "contiguous" in v4_wgmma.takes(wide, wide, wide, torch.empty_like(wide))
    out = torch.full_like(wide, float("nan"))
    v4_wgmma.attention(wide, wide, wide, 0.125, out)
    assert (out.double() - _reference(wide, wide, wide, 0.125)).abs().max().item() < 3e-2
