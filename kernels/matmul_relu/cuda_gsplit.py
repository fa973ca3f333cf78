"""The launcher of cu14_gsplit: cu13's launch, except where cu11's plan splits K over clusters and K is long
(GSPLIT_MIN_K or more, both M and N 128 or more); there cu14_gsplit.cu's split without clusters, a block per
(128 x 64 tile, K-slice) writing its fp32 partial to a workspace, then its reducing kernel. Its own file:
cuda_multicast.py is hashed by cu13's profiles.
"""
from __future__ import annotations

from collections.abc import Callable

from . import cuda_launch as cl
from . import cuda_multicast as cm
from . import cuda_persistent as cp
from . import cuda_splitk as cs

GSPLIT_MIN_K = 8192  # a guess: the experiment timed K of 16384 and more (and lost at 1000^3)
GSPLIT_BN = 64  # cuBLAS's tile width at 512x512x16384 (128x64, four slices: 128 blocks)
GSPLIT_MAX_S = 32
GSPLIT_MIN_KTILES = 8  # k-tiles a slice keeps at least, for its ring to fill
GSPLIT_STAGES = {64: 8}  # cu14_gsplit.cu's stages for its tile width
REDUCE_THREADS = 256
NAMES = ("mm_gsplit_n64", "mm_gsplit_reduce", *cm.NAMES)


def smem_bytes(bn: int) -> int:
    stages = GSPLIT_STAGES[bn]
    return 1024 + stages * (128 * 64 * 2 + 64 * bn * 2) + 2 * stages * 8


def gsplit_slices(M: int, N: int, K: int, sms: int, bn: int = GSPLIT_BN) -> int:
    """The most slices, a power of two up to GSPLIT_MAX_S, whose blocks (tiles x slices) fit one wave of one block
    an SM, each slice keeping GSPLIT_MIN_KTILES k-tiles or more; 1 where not even two fit."""
    tiles = cl._cdiv(M, 128) * cl._cdiv(N, bn)
    ktiles = cl._cdiv(K, 64)
    s = 1
    while 2 * s <= GSPLIT_MAX_S and tiles * 2 * s <= sms and cl._cdiv(ktiles, 2 * s) >= GSPLIT_MIN_KTILES:
        s *= 2
    return s


def plan_gsplit(M, N, K, aligned, sms: int = cp.SMS, clusters: dict[int, int] = cs.CLUSTERS):
    """cu13's plan, with this rung's split where cu11's plan splits K over a cluster, K >= GSPLIT_MIN_K and
    M, N >= 128 (not the decode rows), and two slices or more fit one wave."""
    step = cm.plan_multicast(M, N, K, aligned, sms, clusters)
    if not step.kernel.startswith("mm_splitk") or K < GSPLIT_MIN_K or min(M, N) < 128:
        return step
    s = gsplit_slices(M, N, K, sms)
    if s < 2:
        return step
    tiles = cl._cdiv(M, 128) * cl._cdiv(N, GSPLIT_BN)
    return cl.Launch(f"mm_gsplit_n{GSPLIT_BN}", (tiles, s, 1), (cs.S11_THREADS, 1, 1), smem_bytes(GSPLIT_BN), tma=True)


PLANS = {"cu14_gsplit": ("cu14_gsplit.cu", plan_gsplit, NAMES)}


def loader() -> Callable[[], Callable]:
    """Revision.load for cu14_gsplit: cu13's launch (its checks, plans, edges, splits and multicast) unless the
    plan takes this rung's split."""
    src = cl.CUDA_DIR / PLANS["cu14_gsplit"][0]

    def load():
        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        multicast = cm.loader()()
        state: dict = {}  # device -> SM count; "kernels" once built
        maps: dict = {}  # (device, A, B pointers, M, N, K) -> device tensor of A's and B's maps
        steps: dict = {}  # (device, M, N, K) -> the plan's Launch

        def launch(inputs, out):
            a, b = inputs
            plain = (a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0] and out.is_contiguous()
                     and {a.dtype, b.dtype, out.dtype} == {torch.bfloat16} and a.is_cuda
                     and b.device == out.device == a.device
                     and tuple(out.shape) == (a.shape[0], b.shape[1]) and min(*a.shape, b.shape[1]) > 0)
            if not plain or a.shape[1] < GSPLIT_MIN_K or min(a.shape[0], b.shape[1]) < 128:
                return multicast(inputs, out)  # cu13's launch: no shape of this rung's split
            a, b = a.contiguous(), b.contiguous()
            if not cl.is_aligned(a, b, out):
                return multicast((a, b), out)
            (M, K), N = a.shape, b.shape[1]
            if a.device not in state:  # the GPU checked before any sm_90a code is loaded
                caps = cuda.require(a.device, ("tma",))
                if caps.capability != (9, 0):
                    raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), this GPU "
                                      f"({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                state[a.device] = torch.cuda.get_device_properties(a.device).multi_processor_count
            at = (a.device, M, N, K)
            step = steps.get(at)
            if step is None:
                if len(steps) > 256:
                    steps.clear()
                # cu13's plan is consulted with the H200's clusters (cu11's split is the only test made of
                # them here: whether cu11 would split at all)
                step = steps[at] = plan_gsplit(M, N, K, True, state[a.device])
            if not step.kernel.startswith("mm_gsplit"):
                return multicast((a, b), out)
            if "kernels" not in state:
                built = cl.load_sm90a(src, ("mm_gsplit_n64", "mm_gsplit_reduce"))
                state["kernels"] = {n: cl.OptIn(f) for n, f in built.items()}
            key = (a.device, a.data_ptr(), b.data_ptr(), M, N, K)
            if key not in maps:
                if len(maps) > 64:
                    maps.clear()
                maps[key] = torch.frombuffer(bytearray(cl.encode_tensor_maps(a, b)), dtype=torch.uint8).to(a.device)
            s = step.grid[1]
            # a workspace per call, from torch's caching allocator (stream-ordered): two streams never share one
            space = torch.empty(s * M * N, device=a.device, dtype=torch.float32)
            cuda.launch(state["kernels"][step.kernel], step.grid, step.block,
                        (cuda.ptr(maps[key]), cuda.ptr(space), numpy.int32(M), numpy.int32(N), numpy.int32(K)),
                        shared_mem=step.smem)
            cuda.launch(state["kernels"]["mm_gsplit_reduce"], (cl._cdiv(M * N // 4, REDUCE_THREADS), 1, 1),
                        (REDUCE_THREADS, 1, 1), (cuda.ptr(space), cuda.ptr(out), numpy.int32(M * N), numpy.int32(s)),
                        shared_mem=0)
            return out

        return launch

    return load


def refuses(shape) -> str:
    """Revision.refuses: a grid over the hardware limits, on either path; an empty C is returned as it is."""
    M, N, K = shape
    if not (M and N):
        return ""
    return cl.grid_problem(plan_gsplit(M, N, K, True)) or cl.grid_problem(plan_gsplit(M, N, K, False))
