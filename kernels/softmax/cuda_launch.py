"""One launcher for every CUDA C softmax revision; each revision only contributes a plan.

A plan maps (rows, cols, dtype, aligned) to the extern "C" kernel to launch and its grid
and block; `names` lists every kernel the plan can pick (the tests check that these are
exactly the file's entry points). Nothing compiles until the first launch, which first checks
the GPU has what the revision NEEDS. Every CUDA C softmax revision hashes this whole file.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernels.common import tuning

ELEMS = 32  # row elements each thread holds in registers in v4/v5 (v5_tuned.cu's ELEMS)
DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: int
    block: int
    capacity: int = 0  # longest row the kernel holds in registers; 0: it loops over the row
    then: str = ""  # a second kernel launched after the first on the same grid (v8's split rows)


Plan = Callable[[int, int, str, bool], "Launch | list[Launch]"]


def vector_width(dtype: str) -> int:
    return 4 if dtype == "fp32" else 8  # elements per 16-byte access


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- v0..v3: one kernel per dtype.
def plan_thread_per_row(rows, cols, dtype, aligned):
    return Launch(f"softmax_{dtype}", _cdiv(rows, 128), 128)


def plan_block_per_row(rows, cols, dtype, aligned):
    return Launch(f"softmax_{dtype}", rows, 256)


SIMPLE_NAMES = tuple(f"softmax_{dt}" for dt in DTYPES)


# ---- v4: a block of 256 threads per row, VPT 16-byte vectors per thread (<= 32 elements).
V4_VPT = {"fp32": (1, 2, 4, 8), "bf16": (1, 2, 4)}


def plan_v4(rows, cols, dtype, aligned):
    if not aligned:
        return Launch(f"softmax_{dtype}_scalar", rows, 256)
    vw = vector_width(dtype)
    for vpt in V4_VPT[dtype]:
        if 256 * vpt * vw >= cols:
            return Launch(f"softmax_{dtype}_regs{vpt}", rows, 256, 256 * vpt * vw)
    return Launch(f"softmax_{dtype}_stream", rows, 256)


V4_NAMES = tuple([f"softmax_{dt}_regs{v}" for dt in DTYPES for v in V4_VPT[dt]]
                 + [f"softmax_{dt}_{k}" for dt in DTYPES for k in ("stream", "scalar")])

# ---- v5: by row length. Same choices on the vector and the scalar (misaligned) path.
WARP_ROWS = 4  # rows (warps) per 128-thread block on the short-row path
WARP_ELEMS = (8, 16, 32)  # elements per lane: rows of <= 256, 512, 1024
# (threads per block, blocks per cluster), smallest capacity first; capacity = T * C * ELEMS.
# Blocks stay at <= 256 threads where possible so several share an SM and one block's
# reduction overlaps another's loads; 64 registers per thread allow 1024 threads per SM.
ROW_CONFIGS = ((64, 1), (128, 1), (256, 1), (256, 2), (256, 4), (256, 8), (512, 8))
STREAM_THREADS = 512


def plan_v5(rows, cols, dtype, aligned):
    path = "vec" if aligned else "scalar"
    for e in WARP_ELEMS:
        if 32 * e >= cols:
            return Launch(f"softmax_{dtype}_warp_{path}_e{e}", _cdiv(rows, WARP_ROWS), 32 * WARP_ROWS, 32 * e)
    for threads, cluster in ROW_CONFIGS:
        if threads * cluster * ELEMS >= cols:
            return Launch(f"softmax_{dtype}_row_{path}_t{threads}_c{cluster}", rows * cluster, threads,
                          threads * cluster * ELEMS)
    return Launch(f"softmax_{dtype}_stream_{path}", rows, STREAM_THREADS)


V5_NAMES = tuple(
    name
    for dt in DTYPES
    for p in ("vec", "scalar")
    for name in ([f"softmax_{dt}_warp_{p}_e{e}" for e in WARP_ELEMS]
                 + [f"softmax_{dt}_row_{p}_t{t}_c{c}" for t, c in ROW_CONFIGS]
                 + [f"softmax_{dt}_stream_{p}"])
)

# ---- v6: for rows > 1024, every layout that holds the row is a candidate; the launcher
# keeps the fastest. Shorter rows keep v5's warp per row: timing candidates there, on kernels
# of ~15 us, picked layouts 1.2-2.4x slower than it on the H100.
V6_ROW_CONFIGS = ROW_CONFIGS + ((512, 1), (1024, 1), (512, 2), (512, 4))


def plan_v6(rows, cols, dtype, aligned):
    if cols <= 32 * WARP_ELEMS[-1]:  # rows of <= 1024: v5's warp per row, no candidates
        return [plan_v5(rows, cols, dtype, aligned)]
    path = "vec" if aligned else "scalar"
    out = [Launch(f"softmax_{dtype}_row_{path}_t{t}_c{c}", rows * c, t, t * c * ELEMS)
           for t, c in V6_ROW_CONFIGS if t * c * ELEMS >= cols]
    return out or [Launch(f"softmax_{dtype}_stream_{path}", rows, STREAM_THREADS)]


V6_NAMES = V5_NAMES + tuple(f"softmax_{dt}_row_{p}_t{t}_c{c}" for dt in DTYPES for p in ("vec", "scalar")
                            for t, c in V6_ROW_CONFIGS[len(ROW_CONFIGS):])

# ---- v7: v6's candidates, plus for aligned bf16 the packed layouts (64 bf16 per thread).
PACKED_ELEMS = 64
PACKED_CONFIGS = ((64, 1), (128, 1), (256, 1), (512, 1), (1024, 1), (256, 2), (512, 2), (256, 4), (512, 4),
                  (256, 8), (512, 8))


def plan_v7(rows, cols, dtype, aligned):
    out = plan_v6(rows, cols, dtype, aligned)
    if dtype == "bf16" and aligned and cols > 32 * WARP_ELEMS[-1]:  # warp rows stay v6's
        out = out + [Launch(f"softmax_bf16_packed_t{t}_c{c}", rows * c, t, t * c * PACKED_ELEMS)
                     for t, c in PACKED_CONFIGS if t * c * PACKED_ELEMS >= cols]
    return out


V7_NAMES = V6_NAMES + tuple(f"softmax_bf16_packed_t{t}_c{c}" for t, c in PACKED_CONFIGS)

# ---- v8: v7's plan, plus a group of lanes per short row and rows split across blocks.
GROUP_COLS = 128  # the group path's longest row
GROUP_THREADS = 256
GROUP_SIZES = (1, 2, 4, 8, 16, 32)  # lanes per row, each holding 16 bytes of it (v8_split.cu)
SPLIT_THREADS = 512
# Blocks a split launch aims for, whatever the rows: each a candidate, timed per shape. A row
# splits into at most one chunk per 2 vectors of each of its block's threads.
SPLIT_BLOCKS = (256, 512, 1024)


def _group(rows, cols, dtype, aligned):
    elems = vector_width(dtype)  # 16 bytes of row per lane: one vector, or as many elements (scalar)
    g = next(g for g in GROUP_SIZES if g * elems >= cols)
    return Launch(f"softmax_{dtype}_group_{'vec' if aligned else 'scalar'}_g{g}", _cdiv(rows * g, GROUP_THREADS),
                  GROUP_THREADS, g * elems)


def _splits(rows, cols, dtype, aligned):
    path, vw = ("vec", vector_width(dtype)) if aligned else ("scalar", 1)
    most = cols // vw // (2 * SPLIT_THREADS)
    counts = sorted({min(_cdiv(blocks, rows), most) for blocks in SPLIT_BLOCKS})
    return [Launch(f"softmax_{dtype}_split_stats_{path}", rows * n, SPLIT_THREADS,
                   then=f"softmax_{dtype}_split_write_{path}") for n in counts if n >= 2]


def plan_v8(rows, cols, dtype, aligned):
    if cols <= GROUP_COLS:  # a group per row, no candidates (v6's reason for warp rows)
        return _group(rows, cols, dtype, aligned)
    out = plan_v7(rows, cols, dtype, aligned)
    if cols <= 32 * WARP_ELEMS[-1]:
        return out
    return out + _splits(rows, cols, dtype, aligned)


V8_NAMES = V7_NAMES + tuple(f"softmax_{dt}_group_{p}_g{g}" for dt in DTYPES for p in ("vec", "scalar")
                            for g in GROUP_SIZES if g * vector_width(dt) <= GROUP_COLS) + tuple(
    f"softmax_{dt}_split_{k}_{p}" for dt in DTYPES for p in ("vec", "scalar") for k in ("stats", "write"))

# revision name -> (plan, every kernel name the plan can return)
PLANS: dict[str, tuple[Plan, Sequence[str]]] = {
    "v0_naive": (plan_thread_per_row, SIMPLE_NAMES),
    "v1_block_smem": (plan_block_per_row, SIMPLE_NAMES),
    "v2_warp_shuffle": (plan_block_per_row, SIMPLE_NAMES),
    "v3_online": (plan_block_per_row, SIMPLE_NAMES),
    "v4_vectorized": (plan_v4, V4_NAMES),
    "v5_tuned": (plan_v5, V5_NAMES),
    "v6_autotuned": (plan_v6, V6_NAMES),  # a list of candidates: the launcher times them
    "v7_bf16_packed": (plan_v7, V7_NAMES),
    "v8_split": (plan_v8, V8_NAMES),
}

# revisions whose kernels take a trailing float2 workspace pointer
WORKSPACE_REVISIONS = ("v5_tuned", "v6_autotuned", "v7_bf16_packed", "v8_split")
# revision -> what its file needs beyond compute capability 8.0 (kernlog.cuda.FEATURES): v5's
# cluster rows use __cluster_dims__ and barrier.cluster PTX, which v6 and v7 include; without
# them the file does not compile, so a GPU without clusters skips the revision.
NEEDS = {"v5_tuned": ("clusters",), "v6_autotuned": ("clusters",), "v7_bf16_packed": ("clusters",),
         "v8_split": ("clusters",)}


def is_aligned(x, out) -> bool:
    """Whether every row of x and out starts on a 16-byte boundary and holds whole vectors."""
    vw = 16 // x.element_size()
    cols = x.shape[1]
    return (cols % vw == 0 and x.stride(0) % vw == 0
            and x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0)


def loader(source: Path, revision: str) -> Callable[[], Callable]:
    """Revision.load for the CUDA C file `source`, planned by PLANS[revision]."""
    plan, names = PLANS[revision]

    def load():
        import numpy
        import torch

        from kernlog import cuda

        dtypes = {torch.float32: "fp32", torch.bfloat16: "bf16"}
        kernels = {}  # compiled on the first launch, then reused: no per-call file reads
        workspace = [None]
        def launch(inputs, out):
            (x,) = inputs
            if x.dim() != 2 or x.dtype not in dtypes or out.shape != x.shape or out.dtype != x.dtype:
                raise ValueError(f"softmax wants a 2-D fp32/bf16 x and a like-shaped out, got "
                                 f"{tuple(x.shape)} {x.dtype} -> {tuple(out.shape)} {out.dtype}")
            if not out.is_contiguous():
                raise ValueError("softmax writes a contiguous output")
            if x.stride(1) != 1:
                x = x.contiguous()
            rows, cols = x.shape
            if rows == 0 or cols == 0:
                return out
            key = (rows, cols, dtypes[x.dtype], is_aligned(x, out))
            if not kernels:
                cuda.require(x.device, NEEDS.get(revision, ()))
                kernels.update(cuda.load_module(source, names))

            def run(step):
                args = (cuda.ptr(x), cuda.ptr(out), numpy.int32(rows), numpy.int32(cols), numpy.int64(x.stride(0)))
                if revision in WORKSPACE_REVISIONS:  # a (max, sum) pair per block, for cluster rows
                    ws = workspace[0]
                    if ws is None or ws.numel() < 2 * step.grid or ws.device != x.device:
                        ws = workspace[0] = torch.empty(2 * step.grid, dtype=torch.float32, device=x.device)
                    args += (cuda.ptr(ws),)
                cuda.launch(kernels[step.kernel], (step.grid, 1, 1), (step.block, 1, 1), args)
                if step.then:  # the split path's second kernel, ordered after the first by the stream
                    cuda.launch(kernels[step.then], (step.grid, 1, 1), (step.block, 1, 1), args)

            # A tuned shape goes through tuning.pick on every launch: it records which pick ran
            # (the profile stores it; the ncu pass is pinned to it).
            step = None if (revision, *key) in tuning.PICKED else plan(*key)
            if step is None or isinstance(step, list):
                step = tuning.pick((revision, *key), step, run, x.device)
            run(step)
            return out

        return launch

    return load
