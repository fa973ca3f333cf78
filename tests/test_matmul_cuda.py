"""The CUDA C matmul+ReLU ladder (kernels/matmul_relu/cuda_ladder.py), checked on the CPU: every
.cu compiles with nvcc for sm_90a (and cu0-cu6 for sm_90, what NVRTC through CuPy builds on the
H100) with kernlog/include on the include path, exports exactly the kernels its plan can pick,
spills nothing; the plans take the scalar kernels for unaligned K or N and stay within the grid
limits on every family shape. GPU-marked tests gate every rung and path against float64."""
import re
import shutil
from functools import lru_cache

import pytest
import torch

from kernels.matmul_relu import (
    cuda_gsplit,
    cuda_launch,
    cuda_multicast,
    cuda_persistent,
    cuda_splitk,
    cuda_stages,
    cuda_waves,
)
from kernels.matmul_relu.cuda_ladder import CUDA_REVISIONS
from kernlog import cuda
from kernlog.cuda import DeviceCaps
from kernlog.errors import Unsupported
from kernlog.identity import executed_files
from kernlog.registry import find_root, load_kernel

from .helpers import A100, compile_report, fake_gpu
from .helpers import ptxas_entries as entries

KERNEL = load_kernel(find_root(), "matmul_relu")
REVS = {r.name: r for r in CUDA_REVISIONS}
NAMES = list(REVS)
# rung -> (file, plan, kernels)
PLANS = {**cuda_launch.PLANS, **cuda_persistent.PLANS, **cuda_waves.PLANS, **cuda_splitk.PLANS,
         **cuda_stages.PLANS, **cuda_multicast.PLANS, **cuda_gsplit.PLANS}
SM90A = (*cuda_launch.SM90A, *cuda_persistent.PLANS, *cuda_waves.PLANS, *cuda_splitk.PLANS, *cuda_stages.PLANS,
         *cuda_multicast.PLANS, *cuda_gsplit.PLANS)
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on the PATH")

# Issue 20's family members plus the brief's: LM heads, squares, decode, large K, unaligned.
FAMILY_SHAPES = tuple(s for f in KERNEL.families for s in f.shapes + f.check) + (
    (4096, 50257, 768), (4096, 128256, 4096), (4096, 151936, 4096), (4096, 151936, 768),
    (3072, 3072, 3072), (4096, 4096, 4096), (1, 4096, 4096), (16, 151936, 4096), (512, 512, 16384),
    (2047, 2049, 2048), (3000, 5000, 4000))
# Shapes reaching both paths of every plan at small sizes (the GPU gate runs them all).
PATH_SHAPES = ((1, 1, 1), (5, 3, 70), (33, 47, 70), (64, 65, 129), (48, 88, 136), (130, 264, 72),
               (257, 136, 200), (129, 130, 131), (1, 264, 136), (16, 16, 2056), (200, 384, 4104),
               (2304, 1920, 8))  # the last: one wave of cu10's 192x192 tile, two of cu9's, so cu10 runs its own


@lru_cache(maxsize=None)
def ptxas(name: str, arch: str = "sm_90a") -> str:
    return compile_report(cuda_launch.CUDA_DIR / PLANS[name][0], arch=arch)


def test_every_rung_is_a_cuda_step_with_a_prediction():
    assert len(CUDA_REVISIONS) >= 7 and set(NAMES) == set(PLANS)
    for rev in CUDA_REVISIONS:
        assert rev.kind == "cuda" and rev.role == "step" and rev.change and rev.predicts, rev.name
    names = [r.name for r in KERNEL.revisions]
    assert len(names) == len(set(names)), "two revisions share a name"
    # the CUDA C ladder opens the kernel's ladder, in order, ahead of the Triton revisions
    assert names[:len(CUDA_REVISIONS)] == [r.name for r in CUDA_REVISIONS]


@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm90a_and_exports_exactly_the_planned_kernels(name):
    _, _, names = PLANS[name]
    assert set(entries(ptxas(name))) == set(names)


@needs_nvcc
@pytest.mark.parametrize("name", [n for n in NAMES if n not in SM90A])
def test_nvrtc_rungs_compile_for_plain_sm90(name):
    """cu0-cu6 go through NVRTC, which CuPy gives -arch=sm_90 on the H100: no sm_90a-only code."""
    _, _, names = PLANS[name]
    assert set(entries(ptxas(name, "sm_90"))) == set(names)


@needs_nvcc
@pytest.mark.parametrize("name", SM90A)
def test_wgmma_rung_needs_sm90a(name):
    with pytest.raises(RuntimeError, match="wgmma"):  # hence nvcc -gencode ...sm_90a in the launcher
        cuda.compile_report(cuda_launch.CUDA_DIR / PLANS[name][0], arch="sm_90")


@needs_nvcc
@pytest.mark.parametrize("name", SM90A)
def test_wgmma_rungs_keep_their_groups_asynchronous(name):
    """ptxas serializes wgmma (a warning, and the overlap cu8 is built for gone) when it cannot
    prove the accumulators untouched between issue and wait."""
    assert "serialized" not in ptxas(name), ptxas(name)


@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_no_spills_and_registers_fit_the_block(name):
    for kernel, res in entries(ptxas(name)).items():
        assert "0 bytes spill stores" in res and "0 bytes spill loads" in res, (kernel, res)
        assert "0 bytes stack frame" in res, (kernel, res)
        regs = int(re.search(r"Used (\d+) registers", res).group(1))
        assert regs <= 255, (kernel, regs)


def test_sources_need_no_system_headers_and_includes_are_hashed():
    for rev in CUDA_REVISIONS:
        src = rev.sources[0]
        assert not re.search(r"#include\s*<", src.read_text()), rev.name
        included = cuda.includes(src)
        assert cuda.COMMON_INCLUDE / "kl_cuda.cuh" in included, rev.name
        assert set(included) <= set(executed_files(rev)), rev.name
        assert (cuda_launch.HERE / "cuda_launch.py") in executed_files(rev), rev.name


def test_the_extern_c_entry_points_match_the_plans():
    """Without nvcc: the source's extern "C" __global__ names are the plan's."""
    for name, (file, _, names) in PLANS.items():
        text, todo = "", [file]
        while todo:  # a rung built on another's kernels includes it (cu11 includes cu10, which includes cu9)
            part = (cuda_launch.CUDA_DIR / todo.pop()).read_text()
            text += part
            todo += re.findall(r'#include "(\w+\.cu)"', part)
        found = set(re.findall(r'extern "C" __global__ void(?: \w+\([^)]*\))*\s+(\w+)\s*\(', text))
        assert found == set(names), name


@pytest.mark.parametrize("name", NAMES)
def test_unaligned_k_or_n_takes_the_scalar_kernel(name):
    plan, names = PLANS[name][1:]
    vec = {n for n in names if not n.endswith("_scalar")}
    for M, N, K in ((2047, 2049, 2048), (3000, 5000, 4001), (4096, 50257, 768), (31, 49, 77), (5, 3, 70)):
        aligned = K % 8 == 0 and N % 8 == 0
        assert not aligned
        step = plan(M, N, K, aligned)
        if len(names) > 1:
            assert step.kernel.endswith("_scalar") and not step.tma and step.smem == 0, (name, step)
        assert step.kernel in names
    if len(names) > 1:
        assert plan(4096, 4096, 4096, True).kernel in vec


@pytest.mark.parametrize("name", NAMES)
def test_family_shapes_stay_within_grid_limits(name):
    plan = PLANS[name][1]
    for M, N, K in FAMILY_SHAPES + PATH_SHAPES:
        for aligned in (True, False):
            step = plan(M, N, K, aligned)
            assert cuda_launch.grid_problem(step) == "", (name, (M, N, K), step)
            gx, gy, _ = step.grid
            assert gx * gy * step.block[0] * step.block[1] >= 1
        assert REVS[name].refusal((M, N, K)) == ""
    assert REVS[name].refusal((2**24, 2**24, 8)) != ""  # over 65535 blocks along y: declared, not launched


@pytest.mark.parametrize("name", NAMES)
def test_grids_cover_the_output(name):
    """The tile each plan implies covers C: grid x block tile >= (M, N) on both paths."""
    tile = {"mm_naive": (32, 8, "mn"), "mm_coalesced": (32, 8, "nm"), "mm_smem": (32, 32, "nm")}
    plan = PLANS[name][1]
    for M, N, K in PATH_SHAPES + FAMILY_SHAPES:
        for aligned in (True, False):
            step = plan(M, N, K, aligned)
            gx, gy, _ = step.grid
            if step.kernel == "mm_wgmma_wide":  # one block per 128x256 tile along x, in grouped order
                tm, tn = -(-M // 128), -(-N // 256)
                assert (gx, gy) == (tm * tn, 1), (step, (M, N, K))
                continue
            if step.kernel == "mm_waves":  # cu10's 192x192 tile, persistent
                assert (gx, gy) == (min(cuda_persistent.SMS, -(-M // 192) * -(-N // 192)), 1), (step, (M, N, K))
                continue
            if step.kernel in ("mm_persistent", "mm_stages"):  # a block per SM (at most one per tile)
                assert (gx, gy) == (min(cuda_persistent.SMS, -(-M // 128) * -(-N // 256)), 1), (step, (M, N, K))
                continue
            if step.kernel == "mm_stages_mc":  # cu13: a cluster of two blocks a pair of row tiles, one an SM
                pairs = -(-M // 256) * -(-N // 256)
                assert (gx, gy) == (2 * min(cuda_splitk.CLUSTERS[2], pairs), 1), (step, (M, N, K))
                continue
            if step.kernel.startswith("mm_gsplit_n"):  # cu14: a 128 x BN tile along x, its K-slices along y
                bn = int(step.kernel.removeprefix("mm_gsplit_n"))
                assert gx == -(-M // 128) * -(-N // bn) and 2 <= gy <= cuda_gsplit.GSPLIT_MAX_S, (step, (M, N, K))
                continue
            if step.kernel.startswith("mm_splitk_n"):  # cu11: a 128 x BN tile along x, its S K-slices along y
                bn, s = map(int, re.fullmatch(r"mm_splitk_n(\d+)_s(\d+)", step.kernel).groups())
                assert (gx, gy) == (-(-M // 128) * -(-N // bn), s) and s in cuda_splitk.SPLITS[bn], (step, (M, N, K))
                continue
            tx, ty, order = tile.get(step.kernel, (128, 128, "nm"))
            cov = (gx * tx, gy * ty) if order == "nm" else (gy * ty, gx * tx)  # (N, M) covered
            assert cov[0] >= N and cov[1] >= M, (name, step, (M, N, K))


def test_dynamic_smem_matches_the_sources():
    mma = (cuda_launch.CUDA_DIR / "mm_mma.cuh").read_text()
    assert "#define MMA_BK 32" in mma and "#define MMA_A_LD (MMA_BK + 8)" in mma
    assert "#define CP_STAGES 3" in (cuda_launch.CUDA_DIR / "cu6_cp_async.cu").read_text()
    wg = (cuda_launch.CUDA_DIR / "cu7_wgmma.cu").read_text()
    assert f"#define WG_STAGES {cuda_launch.WG_STAGES}" in wg and f"#define WG_THREADS {cuda_launch.WG_THREADS}" in wg
    assert cuda_launch.WG_SMEM_BYTES <= 227 * 1024 and cuda_launch.CP_STAGES * cuda_launch.MMA_STAGE_BYTES == 56832
    w8 = (cuda_launch.CUDA_DIR / "cu8_wgmma_wide.cu").read_text()
    for define, value in (("W8_BM", cuda_launch.W8_TILE[0]), ("W8_BN", cuda_launch.W8_TILE[1]), ("W8_BK", 64),
                          ("W8_STAGES", cuda_launch.W8_STAGES), ("W8_GROUP_M", cuda_launch.W8_GROUP_M),
                          ("W8_THREADS", cuda_launch.W8_THREADS)):
        assert re.search(rf"#define {define} {value}\b", w8), define
    assert 200 * 1024 > cuda_launch.W8_SMEM_BYTES > 4 * 48 * 1024  # four 48 KB stages, under the 227 KB opt-in
    assert cuda_launch.A_BOX == (64, 128) and cuda_launch.B_BOX == (64, 64)  # BK 64: one 128-byte swizzle row


@pytest.mark.parametrize("M, N, blocks", [(4096, 4096, 132), (128, 256, 132), (3000, 5000, 132), (300, 264, 5),
                                         (8192, 8192, 78), (129, 520, 1)])
def test_persistent_blocks_compute_every_tile_once(M, N, blocks):
    """cu9's blocks stride over the tiles in cu8's grouped order: together every tile once, none twice."""
    tiles = [t for blk in range(blocks) for t in cuda_persistent.tiles_of_block(blk, blocks, M, N)]
    tm, tn = -(-M // 128), -(-N // 256)
    assert sorted(tiles) == [(m, n) for m in range(tm) for n in range(tn)]
    step = cuda_persistent.plan_persistent(M, N, 64, True, blocks)
    assert step.grid[0] == min(blocks, tm * tn) and step.tma and step.smem == cuda_persistent.P9_SMEM_BYTES


def test_persistent_rung_matches_its_source():
    """cu9's launcher and .cu agree on the tile, stages, order, threads and shared memory (209 KB)."""
    text = (cuda_launch.CUDA_DIR / "cu9_persistent.cu").read_text()
    for define, value in (("P9_BM", cuda_persistent.P9_TILE[0]), ("P9_BN", cuda_persistent.P9_TILE[1]),
                          ("P9_BK", 64), ("P9_STAGES", cuda_persistent.P9_STAGES),
                          ("P9_GROUP_M", cuda_persistent.P9_GROUP_M), ("P9_THREADS", cuda_persistent.P9_THREADS)):
        assert re.search(rf"#define {define} {value}\b", text), define
    assert 227 * 1024 >= cuda_persistent.P9_SMEM_BYTES > 200 * 1024
    dims, strides, box = cuda_persistent.c_map_spec(3000, 5000)
    assert dims == (5000, 3000) and strides == (10000,) and box[0] * 2 == 128  # one swizzle row per box row
    # the consumers store four 64-column boxes a warpgroup: a box is as wide as the staging's slice
    assert 4 * box[0] == cuda_persistent.P9_TILE[1] and box[1] * 2 == cuda_persistent.P9_TILE[0]


@pytest.mark.parametrize("shape, kernel", [((3072, 3072), "mm_waves"), ((2880, 2880), "mm_waves"),
                                           ((5120, 13824), "mm_waves"), ((4096, 4096), "mm_persistent"),
                                           ((8192, 8192), "mm_persistent"), ((4096, 151936), "mm_persistent"),
                                           ((3000, 5000), "mm_persistent"), ((2048, 2048), "mm_persistent")])
def test_cu10_takes_the_tile_whose_waves_are_fullest(shape, kernel):
    """The picks the H200 measured (cu10's 192x192 kernel beside cu9's, three interleaved runs): the
    192x192 tile at 3072^3 (256 tiles, 1.94 waves of 132: 88 us against cu9's 115), 2880^3 and
    5120x13824; cu9's 128x256 wherever its waves are fuller (4096^3: 512 tiles, 3.88 waves)."""
    M, N = shape
    assert cuda_waves.plan_waves(M, N, 1024, True).kernel == kernel
    assert cuda_waves.plan_waves(*PATH_SHAPES[-1], True).kernel == "mm_waves"  # the GPU gate test reaches it
    assert cuda_waves.plan_waves(M, N, 1024, False).kernel == "mm_persistent_scalar"
    assert cuda_waves.fill(3072, 3072, (192, 192)) == 3072 * 3072 / (2 * 132 * 192 * 192)
    assert cuda_waves.fill(3072, 3072, (128, 256)) == 3072 * 3072 / (3 * 132 * 128 * 256)


@pytest.mark.parametrize("shape", [(0, 8, 8), (8, 0, 8), (0, 0, 0), (8, 8, 0)])
def test_cu10_takes_an_empty_output_without_dividing_by_zero(shape):
    assert cuda_waves.fill(shape[0], shape[1], (192, 192)) in (0.0, 8 * 8 / (132 * 192 * 192))
    assert cuda_waves.refuses(shape) == ""  # the launch returns an empty C as it is (cu9's launch: GPU test)


def test_cu10_launcher_matches_its_source():
    text = (cuda_launch.CUDA_DIR / "cu10_waves.cu").read_text()
    for define, value in (("Q_BM", cuda_waves.Q_TILE[0]), ("Q_BN", cuda_waves.Q_TILE[1]), ("Q_BK", 64),
                          ("Q_STAGES", cuda_waves.Q_STAGES), ("Q_CONSUMERS", cuda_waves.Q_CONSUMERS)):
        assert re.search(rf"#define {define} {value}\b", text), define
    assert cuda_waves.Q_THREADS == 512 and 227 * 1024 >= cuda_waves.Q_SMEM_BYTES > 210 * 1024
    # the loader's registers go to the consumers: what they take fits what it gives back
    dec = int(re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+)", text).group(1))
    inc = int(re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+)", text).group(1))
    assert 128 * dec + 3 * 128 * inc <= 65536 and dec % 8 == inc % 8 == 0
    (a, b, c) = cuda_waves.map_specs(3072, 3072, 3072)
    assert a[2] == (64, 192) and b[2] == (64, 64) and c[2] == (64, 64) and all(x[1][0] % 16 == 0 for x in (a, b, c))


# (M, N, K) -> the (BN, S) the H200 measured fastest of cu11's ten kernels (three interleaved runs).
CU11_MEASURED = {(512, 512, 16384): "n192_s8", (256, 256, 65536): "n128_s16", (128, 1024, 32768): "n128_s8",
                 (1000, 1000, 1000): "n128_s2", (1024, 1024, 1024): "n128_s2", (64, 4096, 11008): "n192_s4",
                 (32, 4096, 11008): "n192_s4", (8, 11008, 4096): "n192_s4", (1, 4096, 4096): "n192_s4",
                 (768, 768, 4096): "n192_s4"}


def test_the_gate_reaches_every_kernel_cu10_and_cu11_pick():
    """Their own check shapes (Revision.check_shapes) reach what the kernel's do not: cu10's 192x192 kernel,
    and every (BN, S) cu11's plan picks at some shape."""
    for name, plan in (("cu10_waves", cuda_waves.plan_waves), ("cu11_splitk", cuda_splitk.plan_splitk)):
        gated = {plan(*s, True).kernel for s in KERNEL.gate_shapes_of(REVS[name]) if s[1] % 8 == s[2] % 8 == 0}
        assert "mm_waves" in gated, name
    picked = {"mm_splitk_n128_s2", "mm_splitk_n128_s4", "mm_splitk_n128_s8", "mm_splitk_n128_s16",
              "mm_splitk_n192_s4", "mm_splitk_n192_s8", "mm_waves", "mm_persistent"}
    assert picked <= gated


@pytest.mark.parametrize("shape, best", CU11_MEASURED.items())
def test_cu11_plan_picks_the_split_the_h200_measured_fastest(shape, best):
    assert cuda_splitk.plan_splitk(*shape, True).kernel == f"mm_splitk_{best}"


@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1536, 1536, 1536), (3072, 3072, 3072), (4096, 4096, 4096),
                                   (3000, 5000, 4000), (4096, 50257, 768), (2304, 1920, 8)])
def test_cu11_keeps_cu10s_plan_where_the_tiles_fill_the_gpu(shape):
    """Where cu10 ran faster than every split (2048^3, 1536^3), or its tiles fill a wave, cu10's plan as is."""
    assert cuda_splitk.plan_splitk(*shape, True) == cuda_waves.plan_waves(*shape, True)
    assert cuda_splitk.plan_splitk(*shape, False) == cuda_waves.plan_waves(*shape, False)


def test_cu11_counts_waves_of_resident_clusters():
    """16 tiles of 128x128 in clusters of 8: 15 resident at once on the H200, so two waves; a cluster size
    the device cannot hold (0 resident) is never picked; an empty or unaligned C is cu10's."""
    one = cuda_splitk.split_cost(512, 512, 16384, 128, 8, {8: 16})
    assert cuda_splitk.split_cost(512, 512, 16384, 128, 8) == 2 * one
    assert cuda_splitk.split_cost(512, 512, 16384, 128, 8, {8: 0}) == float("inf")
    only4 = {2: 0, 4: 30, 8: 0, 16: 0}
    assert cuda_splitk.plan_splitk(512, 512, 16384, True, 132, only4).kernel.endswith("_s4")
    assert cuda_splitk.plan_splitk(512, 512, 16384, True, 132, {}) == cuda_waves.plan_waves(512, 512, 16384, True)
    assert cuda_splitk.plan_splitk(512, 512, 0, True).kernel == cuda_waves.plan_waves(512, 512, 0, True).kernel
    assert cuda_splitk.refuses((0, 8, 8)) == "" and cuda_splitk.refuses((512, 512, 16384)) == ""


@pytest.mark.parametrize("shape", [(8, 8, 8), (8, 72, 64), (33, 72, 200), (512, 512, 520), (1000, 1024, 256)])
def test_cu11_gives_every_slice_a_k_tile(shape):
    """A split of K into more slices than it has 64-wide k-tiles leaves blocks with nothing to add (correct,
    and wasted): the model prices it out and the plan never picks it."""
    M, N, K = shape
    tiles = cuda_launch._cdiv(K, 64)
    for bn, splits in cuda_splitk.SPLITS.items():
        for s in splits:
            priced_out = cuda_splitk.split_cost(M, N, K, bn, s) == float("inf")
            assert priced_out == (tiles < s or s not in cuda_splitk.CLUSTERS)
    kernel = cuda_splitk.plan_splitk(M, N, K, True).kernel
    assert "splitk" not in kernel or int(kernel.rsplit("_s", 1)[1]) <= tiles


def test_cu11_launcher_matches_its_source():
    """Every (BN, S) the plan can pick is a kernel of cu11_splitk.cu with the launcher's stages, threads and
    cluster size; each fits the 227 KB opt-in and holds the fp32 partial tile (128 x (BN + 8) floats)."""
    text = (cuda_launch.CUDA_DIR / "cu11_splitk.cu").read_text()
    assert re.search(rf"#define S11_THREADS {cuda_splitk.S11_THREADS}\b", text)
    found = re.findall(r"__cluster_dims__\(1, (\d+), 1\)[^\n]*\n(mm_splitk_n(\d+)_s(\d+))\(.*\n"
                       r"\s*s11_body<(\d+), (\d+), (\d+)>", text)
    assert {name for _, name, *_ in found} == set(cuda_splitk.NAMES) - set(cuda_waves.NAMES)
    for cluster, _, bn, s, bn2, s2, stages in found:
        bn, s = int(bn), int(s)
        assert cluster == str(s) == s2 and str(bn) == bn2 and int(stages) == cuda_splitk.S11_STAGES[bn]
        assert s in cuda_splitk.SPLITS[bn] and 128 % s == 0
        assert 128 * (bn + 8) * 4 <= int(stages) * (128 * 64 * 2 + 64 * bn * 2) < cuda_splitk.smem_bytes(bn)
        assert cuda_splitk.smem_bytes(bn) <= 227 * 1024


# (M, N, K) -> cu12's kernel: its own wherever cu11 ran cu9's (4096^3: 1.066x cu9 on the H200, 8192^3 1.065x,
# 2048^3 1.08x, three interleaved runs), and in place of cu10's 192x192 tile where its waves cost no more
# (5120x13824x5120: 1056 us against 1102); cu10's tile where its fewer waves pay (3072^3: 90 us against 108);
# cu11's splits; the scalar path off alignment.
CU12_PICKS = {(4096, 4096, 4096): "mm_stages", (8192, 8192, 8192): "mm_stages", (2048, 2048, 2048): "mm_stages",
              (5120, 13824, 5120): "mm_stages", (1536, 2816, 8): "mm_stages", (3072, 3072, 3072): "mm_waves",
              (2880, 2880, 2880): "mm_waves", (2304, 1920, 8): "mm_waves", (512, 512, 16384): "mm_splitk_n192_s8",
              (1000, 1000, 1000): "mm_splitk_n128_s2", (1, 4096, 4096): "mm_splitk_n192_s4"}


@pytest.mark.parametrize("shape, kernel", CU12_PICKS.items())
def test_cu12_takes_its_kernel_where_cu11_ran_cu9s_or_its_waves_cost_no_more(shape, kernel):
    step = cuda_stages.plan_stages(*shape, True)
    assert step.kernel == kernel
    cu11 = cuda_splitk.plan_splitk(*shape, True)
    if kernel == "mm_stages":
        assert cu11.kernel in ("mm_persistent", "mm_waves") and step.smem == cuda_stages.P12_SMEM_BYTES
        assert step.grid == (min(132, -(-shape[0] // 128) * -(-shape[1] // 256)), 1, 1) and step.tma
    else:
        assert step == cu11
    assert cuda_stages.plan_stages(*shape, False) == cuda_splitk.plan_splitk(*shape, False)
    assert cuda_stages.plan_stages(shape[0], shape[1], 0, True).kernel != "mm_stages"  # no k-tile for its ring
    assert cuda_stages.waves(5120, 13824, (128, 256), 132) == 17
    assert cuda_stages.waves(5120, 13824, (192, 192), 132) == 15


@pytest.mark.parametrize("sms, clusters", [(132, cuda_splitk.CLUSTERS), (132, {2: 66, 4: 33, 8: 16, 16: 8}),
                                            (114, {2: 57, 4: 28, 8: 14, 16: 0}), (78, {2: 39, 4: 19, 8: 9, 16: 0})])
def test_cu12_takes_its_kernel_only_where_cu11_would_not_split(sms, clusters):
    """With the same SM count and resident clusters, cu12's plan runs its kernel only where cu11's runs cu9's
    or cu10's, and is cu11's plan everywhere else."""
    for shape in (*FAMILY_SHAPES, *PATH_SHAPES, (896, 4096, 16384), (1024, 3584, 16384), (1408, 2560, 16384)):
        cu11 = cuda_splitk.plan_splitk(*shape, True, sms, clusters)
        step = cuda_stages.plan_stages(*shape, True, sms, clusters)
        assert step == cu11 or (step.kernel == "mm_stages" and cu11.kernel in ("mm_persistent", "mm_waves")), shape


def test_cu12_launcher_matches_its_source():
    """cu12's launcher and .cu agree on the stages and the shared memory (four 48 KB stages and two 16 KB
    stagings, under the 227 KB opt-in), and its kernel stores C in two halves of two 64-column boxes."""
    text = (cuda_launch.CUDA_DIR / "cu12_stages.cu").read_text()
    assert re.search(rf"#define P12_STAGES {cuda_stages.P12_STAGES}\b", text)
    assert re.search(r"#define P12_C_BYTES \(64 \* 128 \* 2\)", text) and cuda_stages.P12_C_BYTES == 64 * 128 * 2
    assert 227 * 1024 >= cuda_stages.P12_SMEM_BYTES > cuda_persistent.P9_SMEM_BYTES
    # the kernel's own formula, evaluated with its defines: the launcher's bytes hold its mbarriers too
    formula = re.search(r"#define P12_SMEM_BYTES (.+)", text).group(1)
    values = {"P12_STAGES": cuda_stages.P12_STAGES, "P12_C_BYTES": cuda_stages.P12_C_BYTES,
              "P9_STAGE_BYTES": 128 * 64 * 2 + 64 * 256 * 2}
    assert eval(re.sub(r"\b[A-Z0-9_]+\b", lambda m: str(values.get(m.group(0), m.group(0))), formula)) \
        == cuda_stages.P12_SMEM_BYTES
    assert "for (int half = 0; half < 2; ++half)" in text and "for (int j = 0; j < 2; ++j)" in text
    gated = {cuda_stages.plan_stages(*s, True).kernel for s in KERNEL.gate_shapes_of(REVS["cu12_stages"])
             if s[1] % 8 == s[2] % 8 == 0}
    assert {"mm_stages", "mm_waves", "mm_splitk_n128_s2"} <= gated  # the gate reaches its kernel and cu11's
    # and reaches it where a block takes a second tile (the staging reused) and the ring wraps
    deep = [s for s in KERNEL.gate_shapes_of(REVS["cu12_stages"]) if s[1] % 8 == s[2] % 8 == 0
            and cuda_stages.plan_stages(*s, True).kernel == "mm_stages"
            and -(-s[0] // 128) * -(-s[1] // 256) > 132 and -(-s[2] // 64) > cuda_stages.P12_STAGES]
    assert deep and any(s[0] % 128 and s[1] % 256 and s[2] % 64 for s in deep)  # with tails in M, N and K


@pytest.mark.parametrize("sms, clusters", [(132, cuda_splitk.CLUSTERS), (114, {2: 57, 4: 28, 8: 14, 16: 0})])
def test_cu13_takes_its_kernel_only_where_cu12_runs_its_own_and_bs_stride_is_slow(sms, clusters):
    """cu13's plan is cu12's except where that takes cu12's kernel and N = 8 mod 16 (B's rows 16 mod 32 bytes):
    there a cluster of two blocks a pair of row tiles, as many pairs as are resident or as there are."""
    taken = set()
    for shape in (*FAMILY_SHAPES, *PATH_SHAPES, *CU12_PICKS, (1544, 2824, 1000), (2056, 2824, 520), (3000, 4992, 4000),
                  (3000, 5056, 4000), (4096, 4088, 4096)):
        cu12 = cuda_stages.plan_stages(*shape, True, sms, clusters)
        step = cuda_multicast.plan_multicast(*shape, True, sms, clusters)
        assert cuda_multicast.plan_multicast(*shape, False, sms, clusters) == cuda_stages.plan_stages(
            *shape, False, sms, clusters)
        if cu12.kernel == "mm_stages" and (2 * shape[1]) % 32 == 16:
            pairs = -(-shape[0] // 256) * -(-shape[1] // 256)
            assert step == cuda_launch.Launch("mm_stages_mc", (2 * min(clusters[2], pairs), 1, 1), (384, 1, 1),
                                              cuda_stages.P12_SMEM_BYTES, tma=True), shape
            taken.add(shape)
        else:
            assert step == cu12, shape
    assert {(1544, 2824, 1000), (2056, 2824, 520), (4096, 4088, 4096)} <= taken
    assert ((3000, 5000, 4000) in taken) == (sms == 132)  # 114 SMs: cu12's plan takes cu10's tile there
    assert not taken & {(3000, 4992, 4000), (3000, 5056, 4000), (4096, 4096, 4096)}
    assert [n for n in range(4980, 5020) if cuda_multicast.slow_stride(n)] == [4984, 5000, 5016]



def test_cu13_keeps_cu12s_plan_where_no_pair_of_blocks_is_resident():
    """A GPU where no two-block cluster fits at once (clusters[2] == 0) would get a grid of none: cu12's plan."""
    none = {2: 0, 4: 0, 8: 0, 16: 0}
    for shape in ((3000, 5000, 4000), (4096, 4088, 4096), (1544, 2824, 1000)):
        assert cuda_multicast.plan_multicast(*shape, True, 132, none) == cuda_stages.plan_stages(
            *shape, True, 132, none), shape


def test_cu13_checks_alignment_after_its_contiguous_copy(monkeypatch):
    """A non-contiguous A whose view starts off a 16-byte boundary is copied first; the copy starts aligned,
    so the slow-stride shape reaches cu13's own path (its module loaded) rather than cu12's launch."""
    fake_gpu(monkeypatch, DeviceCaps("NVIDIA H100 80GB HBM3", (9, 0), 132, 227 * 1024, True))
    to_cu12 = []
    monkeypatch.setattr(cuda_stages, "loader", lambda: lambda: lambda inputs, out: to_cu12.append(inputs))

    class Reached(Exception):
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(cuda_launch, "load_sm90a", reached)

    class Fake:  # a CUDA bf16 tensor as the launcher's checks see it
        def __init__(self, *shape, ptr=1 << 20, contiguous=True):
            self.shape, self.dtype, self.is_cuda, self.device = shape, torch.bfloat16, True, "cuda:0"
            self.ptr, self.contig = ptr, contiguous

        def data_ptr(self):
            return self.ptr

        def dim(self):
            return len(self.shape)

        def is_contiguous(self):
            return self.contig

        def contiguous(self):
            return self if self.contig else Fake(*self.shape)

    launch = REVS["cu13_multicast"].load()
    M, N, K = 3000, 5000, 4000
    with pytest.raises(Reached):
        launch((Fake(M, K, ptr=(1 << 20) + 2, contiguous=False), Fake(K, N)), Fake(M, N))
    assert not to_cu12
    launch((Fake(M, K, ptr=(1 << 20) + 2), Fake(K, N)), Fake(M, N))  # contiguous and misaligned: cu12's launch
    assert len(to_cu12) == 1

# (M, N, K) -> cu14's slices of 128x64 tiles: the most that fill one wave of 132 with 8 k-tiles each (512x512x16384:
# cuBLAS's four; the experiment on the H200: 27.7 us to cu11's 30.3, and 35.0 to 37.2 at 128x1024x32768 in eight)
CU14_SLICES = {(512, 512, 16384): 4, (128, 1024, 32768): 8, (256, 256, 65536): 16, (300, 264, 9000): 8,
               (136, 200, 8200): 16}


@pytest.mark.parametrize("shape, slices", CU14_SLICES.items())
def test_cu14_splits_long_k_without_clusters_where_cu11_splits(shape, slices):
    step = cuda_gsplit.plan_gsplit(*shape, True)
    tiles = -(-shape[0] // 128) * -(-shape[1] // 64)
    assert step == cuda_launch.Launch("mm_gsplit_n64", (tiles, slices, 1), (288, 1, 1), cuda_gsplit.smem_bytes(64),
                                      tma=True)
    ktiles = -(-shape[2] // 64)
    assert tiles * slices <= 132 and (tiles * 2 * slices > 132 or slices == 32 or -(-ktiles // (2 * slices)) < 8)
    assert cuda_splitk.plan_splitk(*shape, True).kernel.startswith("mm_splitk")
    assert cuda_gsplit.plan_gsplit(*shape, False) == cuda_multicast.plan_multicast(*shape, False)


def test_cu14_keeps_cu13s_plan_off_long_k_and_the_decode_rows():
    """K under GSPLIT_MIN_K (a guess: the experiment timed K of 16384 and more; 200x384x4104 would take 8 slices
    without the bound), decode's few rows and every shape that cu11 does not split keep cu13's plan."""
    for shape in (*FAMILY_SHAPES, *PATH_SHAPES, (1000, 1000, 1000), (32, 4096, 11008), (64, 1024, 65536)):
        step = cuda_gsplit.plan_gsplit(*shape, True)
        M, N, K = shape
        if step.kernel.startswith("mm_gsplit"):
            assert K >= cuda_gsplit.GSPLIT_MIN_K and min(M, N) >= 128, shape
        else:
            assert step == cuda_multicast.plan_multicast(*shape, True), shape
    assert not cuda_gsplit.plan_gsplit(200, 384, 4104, True).kernel.startswith("mm_gsplit")
    assert cuda_gsplit.gsplit_slices(200, 384, 4104, 132) == 8  # what the bound keeps it from
    assert not cuda_gsplit.plan_gsplit(64, 1024, 65536, True).kernel.startswith("mm_gsplit")


def test_cu14_launcher_matches_its_source():
    """cu14's kernels: no cluster, the slice from blockIdx.y, the partial stored to ws[slice][M][N], the reduce
    summing the slices in order four elements a thread; shared memory as the launcher counts it; the gate reaches
    its split with tails in M, N and K and a slice past K."""
    text = (cuda_launch.CUDA_DIR / "cu14_gsplit.cu").read_text()
    assert '#include "cu13_multicast.cu"' in text and "__cluster_dims__" not in text.split("#include")[-1]
    for bn, stages in cuda_gsplit.GSPLIT_STAGES.items():
        assert f"gs_body<{bn}, {stages}>(tmaps, ws, M, N, K);" in text
        assert cuda_gsplit.smem_bytes(bn) <= 227 * 1024
    assert "const int S = gridDim.y, slice = blockIdx.y;" in text
    assert "float* part = ws + (long long)slice * M * N;" in text
    assert "for (int s = 1; s < S; ++s) {" in text and "__launch_bounds__(256)" in text
    assert cuda_gsplit.REDUCE_THREADS == 256
    gated = [s for s in KERNEL.gate_shapes_of(REVS["cu14_gsplit"])
             if cuda_gsplit.plan_gsplit(*s, True).kernel.startswith("mm_gsplit")]
    assert any(s[0] % 128 and s[1] % 64 and s[2] % 64 for s in gated), gated
    def empty_slice(shape):  # the kernel's split: per = cdiv(ktiles, S), slice S - 1 starts at (S - 1) per
        ktiles, slices = -(-shape[2] // 64), cuda_gsplit.plan_gsplit(*shape, True).grid[1]
        return (slices - 1) * -(-ktiles // slices) >= ktiles

    assert any(empty_slice(s) for s in gated), "no gated shape leaves a slice past K"


def _cu13_tiles_of_block(block: int, blocks: int, M: int, N: int) -> list[tuple[int, int]]:
    """cu13's walk, as its kernel writes it: cluster block // 2 strides over the pairs of row tiles in cu9's
    grouped order (pairs_m x tiles_n), its block of rank block % 2 taking row tile 2 pm + rank."""
    tiles_m, tiles_n = -(-M // 128), -(-N // 256)
    pairs_m = -(-tiles_m // 2)
    out = []
    for p in range(block // 2, pairs_m * tiles_n, blocks // 2):
        pm, tn = cuda_launch.grouped_tile(p, pairs_m, tiles_n, cuda_persistent.P9_GROUP_M)
        out.append((2 * pm + block % 2, tn))
    return out


@pytest.mark.parametrize("M, N, K", [(3000, 5000, 4000), (1544, 2824, 1000), (2056, 2824, 520), (1000, 2824, 1000),
                                     (4096, 4088, 4096), (128, 264, 64)])
def test_cu13s_clusters_walk_every_tile_once_in_step(M, N, K):
    """The plan's clusters, walking as the kernel does: every real tile once; the two blocks of a cluster the same
    count of tiles (each waits on the other's half of B), on the same column tile each time, in adjacent rows; a
    tile past M only as the second of the last pair, where the count of row tiles is odd."""
    step = cuda_multicast.plan_multicast(M, N, K, True)
    assert step.kernel == "mm_stages_mc"
    blocks = step.grid[0]
    walks = [_cu13_tiles_of_block(b, blocks, M, N) for b in range(blocks)]
    tiles_m, tiles_n = -(-M // 128), -(-N // 256)
    real = sorted(t for w in walks for t in w if t[0] < tiles_m)
    assert real == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    for c in range(blocks // 2):
        lo, hi = walks[2 * c], walks[2 * c + 1]
        assert len(lo) == len(hi) and all(a[1] == b[1] and b[0] == a[0] + 1 for a, b in zip(lo, hi, strict=True))
    phantoms = [t for w in walks for t in w if t[0] >= tiles_m]
    assert sorted(phantoms) == ([(tiles_m, n) for n in range(tiles_n)] if tiles_m % 2 else [])
    text = (cuda_launch.CUDA_DIR / "cu13_multicast.cu").read_text()
    assert text.count("for (int tile = first; tile < tiles; tile += step) {") == 2  # producer and consumers alike
    assert text.count("p9_tile(tile, pairs_m, tiles_n, tm, tn);") == 2 and text.count("tm = 2 * tm + (int)rank;") == 2
    assert "const int first = blockIdx.x / 2, step = gridDim.x / 2;" in text
    assert "const int pairs_m = (tiles_m + 1) / 2, tiles = pairs_m * tiles_n;" in text


def test_cu13_launcher_matches_its_source():
    """cu13's kernel: cu12's tile and shared memory in clusters of (2, 1, 1), B's four boxes split two a block
    and multicast to both (mask 0b11), a stage freed by 16 arrivals (8 consumer warps, here and in the peer)
    with no cluster-scope release; the gate reaches its kernel with an odd count of row tiles, a second pair
    a cluster and the ring wrapping."""
    text = (cuda_launch.CUDA_DIR / "cu13_multicast.cu").read_text()
    assert '#include "cu12_stages.cu"' in text and "__cluster_dims__(2, 1, 1) __launch_bounds__(P9_THREADS, 1)" in text
    assert "mbar_init(empty0 + 8 * s, 16);" in text and "mbarrier.arrive.shared::cluster.b64" in text
    assert ".release.cluster.shared::cluster" not in text  # a fence a stage: 0.56-0.67x cu12
    assert "for (int j = 2 * (int)rank; j < 2 * (int)rank + 2; ++j)" in text and "kt * P9_BK, 3);" in text
    assert "mbar_expect_tx(full, P9_STAGE_BYTES);" in text  # each block's barrier still counts a whole stage
    gated = [s for s in KERNEL.gate_shapes_of(REVS["cu13_multicast"]) if s[1] % 8 == s[2] % 8 == 0
             and cuda_multicast.plan_multicast(*s, True).kernel == "mm_stages_mc"]
    assert any(-(-s[0] // 128) % 2 and -(-s[0] // 256) * -(-s[1] // 256) > cuda_splitk.CLUSTERS[2]
               and -(-s[2] // 64) > cuda_stages.P12_STAGES for s in gated), gated


@pytest.mark.parametrize("name", ["cu12_stages", "cu13_multicast", "cu14_gsplit"])
@pytest.mark.parametrize("caps", [A100, DeviceCaps("NVIDIA B200", (10, 0), 148, 227 * 1024, True)])
def test_cu12_to_cu14_refuse_a_gpu_other_than_sm90_before_loading_sm90a_code(caps, name, monkeypatch):
    """The first launch on a device checks for compute capability 9.0 exactly before the plan reads
    its clusters from cu12's sm_90a module: another GPU (with TMA or without) gets one Unsupported line."""
    fake_gpu(monkeypatch, caps)

    def no_sm90a(*args, **kwargs):
        raise AssertionError("sm_90a code loaded on a GPU that cannot run it")

    monkeypatch.setattr(cuda_launch, "load_sm90a", no_sm90a)

    class Fake:  # a CUDA bf16 tensor as the launcher's checks see it
        def __init__(self, *shape):
            self.shape, self.dtype, self.is_cuda, self.device = shape, torch.bfloat16, True, "cuda:0"

        def data_ptr(self):
            return 1 << 20

        def dim(self):
            return len(self.shape)

        def is_contiguous(self):
            return True

        def contiguous(self):
            return self

    launch = REVS[name].load()
    m, n, k = {"cu12_stages": (4096, 4096, 4096), "cu13_multicast": (4096, 5000, 4096),  # B 16 mod 32 bytes
               "cu14_gsplit": (512, 512, 16384)}[name]  # cu14's split
    with pytest.raises(Unsupported) as exc:
        launch((Fake(m, k), Fake(k, n)), Fake(m, n))
    assert str(exc.value).startswith("needs ") and f"this GPU ({caps.name}) is {caps.capability[0]}." in str(exc.value)


@pytest.mark.parametrize("tiles_m, tiles_n", [(32, 16), (1, 1), (17, 3), (40, 1), (1, 593), (33, 7)])
def test_cu8s_grouped_order_visits_every_tile_once(tiles_m, tiles_n):
    seen = [cuda_launch.grouped_tile(p, tiles_m, tiles_n) for p in range(tiles_m * tiles_n)]
    assert sorted(seen) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]


def test_cu8s_first_wave_stays_within_a_few_row_tiles():
    """At 4096^3 the 132 blocks resident at once cover 16 row-tiles x 9 column-tiles (~35 MB of A
    and B), not 32 row-tiles' worth: the point of the grouped order."""
    wave = {cuda_launch.grouped_tile(p, 32, 16) for p in range(132)}
    assert {m for m, _ in wave} == set(range(16)) and {n for _, n in wave} == set(range(9))


def test_tensor_map_specs_meet_tma_rules():
    for M, N, K in ((4096, 4096, 4096), (3000, 5000, 4000), (1, 4096, 4096), (16, 16, 2056)):
        for _dims, strides, box in cuda_launch.tensor_map_specs(M, N, K):
            assert all(s % 16 == 0 for s in strides) and all(b <= 256 for b in box)
            assert box[0] * 2 == 128  # the inner box is one 128-byte swizzle row


def _emulate(step, a, b):
    """Python emulation of a tile kernel's indexing: which (m, n) each block writes."""
    M, K = a.shape
    N = b.shape[1]
    out = torch.full((M, N), float("nan"))
    gx, gy, _ = step.grid
    for by in range(gy):
        for bx in range(gx):
            m0, n0 = by * 128, bx * 128
            tile = torch.relu(a[m0:m0 + 128].double() @ b[:, n0:n0 + 128].double())
            out[m0:m0 + 128, n0:n0 + 128] = tile.float()
    return out


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("cu0_naive", "cu1_coalesced", "cu2_smem")])
def test_tile_grids_write_every_output_once(name):
    plan = PLANS[name][1]
    for M, N, K in ((33, 47, 70), (130, 264, 72), (257, 136, 200)):
        a, b = torch.randn(M, K), torch.randn(K, N)
        out = _emulate(plan(M, N, K, False), a, b)
        assert not out.isnan().any()
        torch.testing.assert_close(out, torch.relu(a.double() @ b.double()).float(), rtol=1e-4, atol=1e-4)


# ---- on the GPU (pytest -m gpu): every rung and both paths against float64, with kernlog's gate.
@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_every_rung_passes_the_gate_on_gpu(name):
    from kernlog.run import gate

    shapes = PATH_SHAPES + KERNEL.gate_shapes_of(REVS[name])
    results = gate.check_revision(KERNEL, REVS[name], "cuda", shapes=shapes)
    failed = [r.line() for r in results if not r.ok]
    assert results and not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in NAMES if len(PLANS[n][2]) > 1])
def test_misaligned_base_pointers_take_the_scalar_path_on_gpu(name):
    """A starts 1 element past a 16-byte boundary with K, N aligned: the plan must go scalar."""
    M, N, K = 130, 264, 136
    ab = torch.randn(M * K + 8, device="cuda").to(torch.bfloat16)
    a = ab[1:1 + M * K].view(M, K)
    b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    assert not cuda_launch.is_aligned(a, b, out)
    REVS[name].load()((a, b), out)
    ref = torch.relu(a.double() @ b.double())
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cu9_persistent", "cu10_waves", "cu11_splitk", "cu12_stages", "cu13_multicast",
                                  "cu14_gsplit"])
def test_persistent_rungs_take_empty_shapes_on_gpu(name):
    """An empty C is returned as it is and K = 0 gives relu(0) = 0: what cu10's refuses promises."""
    launch = REVS[name].load()
    for M, N, K in ((0, 8, 8), (8, 0, 8), (8, 8, 0)):
        a = torch.ones(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.ones(K, N, device="cuda", dtype=torch.bfloat16)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        assert launch((a, b), out) is out
        assert out.numel() == 0 or bool((out == 0).all()), (name, M, N, K)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [n for n in cuda_splitk.NAMES if n.startswith("mm_splitk")])
def test_every_cu11_kernel_matches_float64_on_gpu(kernel, monkeypatch):
    """The plan reaches few (BN, S) at the gate's small shapes: each kernel forced through cu11's launch at
    edges in M, N and K, a K shorter than its slices (empty slices add zeros) and a K of many k-tiles."""
    bn, s = map(int, re.fullmatch(r"mm_splitk_n(\d+)_s(\d+)", kernel).groups())

    def forced(M, N, K, aligned, sms=132, clusters=None):
        assert aligned
        return cuda_launch.Launch(kernel, (-(-M // 128) * -(-N // bn), s, 1), (cuda_splitk.S11_THREADS, 1, 1),
                                  cuda_splitk.smem_bytes(bn), tma=True)

    monkeypatch.setattr(cuda_splitk, "plan_splitk", forced)
    launch = REVS["cu11_splitk"].load()
    for M, N, K in ((300, 264, 5000), (128, 128, 64), (136, 72, 1000), (200, 384, 4104), (1, 520, 64 * s + 8)):
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch((a, b), out)
        ref = torch.relu(a.double() @ b.double())
        bad = ((out.double() - ref).abs() > 1.6e-2 * ref.abs() + 1e-2 * ref.abs().mean() + 1e-6) | out.isnan()
        assert not bad.any(), (kernel, (M, N, K), bad.nonzero()[:4].tolist())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4096, 50257, 768), (3000, 5000, 4000), (1, 4096, 4096),
                                   (512, 512, 16384)])
def test_fast_rungs_at_family_sizes_on_gpu(shape):
    M, N, K = shape
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    ref = torch.relu(a.float() @ b.float())
    for name in ("cu5_mma", "cu6_cp_async", "cu7_wgmma", "cu8_wgmma_wide", "cu9_persistent", "cu10_waves",
                 "cu11_splitk", "cu12_stages", "cu13_multicast", "cu14_gsplit"):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        REVS[name].load()((a, b), out)
        torch.cuda.synchronize()
        err = ((out.float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2 and not out.isnan().any(), (name, shape, err)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 2824, 1000), (1544, 2824, 136), (3000, 5000, 4000), (256, 5000, 8)])
def test_cu13s_kernel_matches_float64_elementwise_and_repeats_bit_for_bit_on_gpu(shape):
    """cu13's own kernel (N = 8 mod 16) at an even and an odd count of row tiles, a K of fewer k-tiles than its
    ring, 3000x5000x4000 and one k-tile: every element within the gate's bound of float64, and five launches
    bit-identical (a race on a stage or the staging would move some element in some launch)."""
    M, N, K = shape
    assert cuda_multicast.plan_multicast(M, N, K, True).kernel == "mm_stages_mc"
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    ref = torch.relu(a.double() @ b.double())
    tol = 1.6e-2 * ref.abs() + 8e-3 * ref.abs().mean(dim=1, keepdim=True) + 1e-6
    launch = REVS["cu13_multicast"].load()
    first = None
    for _ in range(5):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch((a, b), out)
        torch.cuda.synchronize()
        bad = ((out.double() - ref).abs() > tol) | out.isnan()
        assert not bad.any(), (shape, bad.nonzero()[:4].tolist())
        if first is None:
            first = out.clone()
        assert torch.equal(out, first), shape


@pytest.mark.gpu
@pytest.mark.parametrize("slices", [2, 4, 8, 16, 32])
def test_cu14s_split_matches_float64_elementwise_at_every_slice_count_on_gpu(slices, monkeypatch):
    """cu14's split forced to each slice count at tails in M, N and K and a K whose last slices hold no k-tile
    (their partials must be stored as zeros: the workspace is poisoned through torch's caching allocator first),
    every element against float64, three launches bit-identical; then a misaligned A, which must leave the split."""
    def forced(M, N, K, aligned, sms=132, clusters=None):
        assert aligned
        return cuda_launch.Launch("mm_gsplit_n64", (-(-M // 128) * -(-N // 64), slices, 1), (288, 1, 1),
                                  cuda_gsplit.smem_bytes(64), tma=True)

    monkeypatch.setattr(cuda_gsplit, "plan_gsplit", forced)
    launch = REVS["cu14_gsplit"].load()
    for M, N, K in ((136, 200, 8200), (300, 264, 9000), (256, 256, 8192 + 64 * slices - 64)):
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
        ref = torch.relu(a.double() @ b.double())
        tol = 1.6e-2 * ref.abs() + 8e-3 * ref.abs().mean(dim=1, keepdim=True) + 1e-6
        first = None
        for _ in range(3):
            junk = torch.full((slices * M * N,), float("nan"), device="cuda")
            del junk  # the split's workspace is likely this block again, NaN where a slice stores nothing
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            launch((a, b), out)
            torch.cuda.synchronize()
            bad = ((out.double() - ref).abs() > tol) | out.isnan()
            assert not bad.any(), (slices, (M, N, K), bad.nonzero()[:4].tolist())
            first = out.clone() if first is None else first
            assert torch.equal(out, first), (slices, (M, N, K))
    M, N, K = 300, 264, 9000
    ab = torch.randn(M * K + 8, device="cuda").to(torch.bfloat16)
    a = ab[1:1 + M * K].view(M, K)  # one element past a 16-byte boundary: no TMA, cu13's scalar path
    b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch((a, b), out)
    ref = torch.relu(a.double() @ b.double())
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2 and not out.isnan().any()


def test_rungs_over_48_kb_of_shared_memory_can_be_opted_in():
    """kernlog.cuda.launch records the opt-in it set on the kernel object; CuPy's RawKernel has no
    instance dict, so the launcher wraps it (cu6 and cu7 failed their gate on the H100 without)."""
    class Slotted:  # stands for cupy's RawKernel: attributes it does not declare cannot be set
        __slots__ = ("max_dynamic_shared_size_bytes", "calls")

        def __call__(self, *args, **kwargs):
            self.calls.append((args, kwargs))

    raw = Slotted()
    raw.calls = []
    with pytest.raises(AttributeError):
        raw._kl_smem = 1
    k = cuda_launch.OptIn(raw)
    assert getattr(k, "_kl_smem", 0) == 0
    k.max_dynamic_shared_size_bytes, k._kl_smem = cuda_launch.WG_SMEM_BYTES, cuda_launch.WG_SMEM_BYTES
    assert raw.max_dynamic_shared_size_bytes == cuda_launch.WG_SMEM_BYTES > 48 * 1024
    k((1, 1, 1), (32, 1, 1), (), shared_mem=5)
    assert raw.calls == [(((1, 1, 1), (32, 1, 1), ()), {"shared_mem": 5})]
