"""The launcher of cu12_stages: cu9's 128x256 persistent kernel with a ring of four stages
(cu12_stages.cu's mm_stages) wherever cu11's plan would run cu9's kernel, and where it would run
cu10's 192x192 kernel but this one's waves cost no more; cu11's launch everywhere else (its splits,
cu10's tile where that tile's fewer waves pay, the scalar path and the edge cases). Its own file:
cuda_splitk.py, cuda_waves.py and cuda_persistent.py are hashed by cu9-cu11's profiles.
"""
from __future__ import annotations

from collections.abc import Callable

from . import cuda_launch as cl
from . import cuda_persistent as cp
from . import cuda_splitk as cs

P12_STAGES = 4
P12_C_BYTES = 64 * 128 * 2  # a consumer warpgroup's staging of C: half its tile, two 64x64 boxes
P12_SMEM_BYTES = 1024 + P12_STAGES * (128 * 64 * 2 + 64 * 256 * 2) + 2 * P12_C_BYTES + 2 * P12_STAGES * 8
# A 192x192 tile (cu10's kernel) against a 128x256 one of this kernel, per tile: 1.125x the products at
# 1.05x the time per product (the H200, 5120x13824x5120, three interleaved runs, where both run many waves).
WIDE_TILE_COST = 1.18
NAMES = ("mm_stages", *cs.NAMES)


def waves(M: int, N: int, tile: tuple[int, int], sms: int) -> int:
    """Waves of one tile an SM: a persistent kernel's blocks each take a tile of every wave."""
    return cl._cdiv(cl._cdiv(M, tile[0]) * cl._cdiv(N, tile[1]), sms)


def plan_stages(M, N, K, aligned, sms: int = cp.SMS, clusters: dict[int, int] = cs.CLUSTERS):
    """cu11's plan, with this kernel where that plan takes cu9's, or cu10's 192x192 tile but this
    kernel's waves cost no more than WIDE_TILE_COST times that tile's."""
    step = cs.plan_splitk(M, N, K, aligned, sms, clusters)
    if step.kernel == "mm_waves" and waves(M, N, (128, 256), sms) > WIDE_TILE_COST * waves(M, N, (192, 192), sms):
        return step
    if step.kernel not in ("mm_persistent", "mm_waves") or not K:  # K = 0: no k-tile for the ring
        return step
    tiles = cl._cdiv(M, 128) * cl._cdiv(N, 256)
    return cl.Launch("mm_stages", (min(sms, tiles), 1, 1), (cp.P9_THREADS, 1, 1), P12_SMEM_BYTES, tma=True)


PLANS = {"cu12_stages": ("cu12_stages.cu", plan_stages, NAMES)}


def loader() -> Callable[[], Callable]:
    """Revision.load for cu12_stages: cu11's launch (its checks, splits, edges and scalar path) unless
    the plan takes this kernel."""
    src = cl.CUDA_DIR / PLANS["cu12_stages"][0]

    def load():
        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        splitk = cs.loader()()
        state: dict = {}  # device -> (SM count, resident clusters by size); "kernel" once built
        maps: dict = {}  # (device, A, B, C pointers, M, N, K) -> device tensor of the three maps
        steps: dict = {}  # (device, M, N, K, aligned) -> the plan's Launch: no model on the hot path

        def device_plan(device):
            """(SM count, clusters resident at once by size) as cu11's launcher reads them: its split
            kernels are in this module too (cu12_stages.cu includes cu11_splitk.cu)."""
            import ctypes

            split_names = cs.NAMES[:-len(cs.cw.NAMES)]
            built = cl.load_sm90a(src, split_names)
            clusters = {}
            for s in sorted({s for ss in cs.SPLITS.values() for s in ss}):
                bn = max(b_ for b_, ss in cs.SPLITS.items() if s in ss)
                fn = built[f"mm_splitk_n{bn}_s{s}"]
                if s == 16:
                    ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(fn.kernel.ptr),
                                                                   cs.NON_PORTABLE_CLUSTER, 1)
                kernel = cl.OptIn(fn)
                kernel.max_dynamic_shared_size_bytes = cs.smem_bytes(bn)  # the query needs the opt-in
                clusters[s] = cs.resident_clusters(kernel.fn, cs.smem_bytes(bn), s)
            return torch.cuda.get_device_properties(device).multi_processor_count, clusters

        def launch(inputs, out):
            a, b = inputs
            plain = (a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0] and out.is_contiguous()
                     and {a.dtype, b.dtype, out.dtype} == {torch.bfloat16} and a.is_cuda
                     and b.device == out.device == a.device
                     and tuple(out.shape) == (a.shape[0], b.shape[1]) and min(*a.shape, b.shape[1]) > 0)
            if not plain:  # cu11's launch (cu9's checks) takes the edge cases
                return splitk(inputs, out)
            a, b = a.contiguous(), b.contiguous()
            (M, K), N = a.shape, b.shape[1]
            if a.device not in state:  # the GPU checked before its clusters are read from sm_90a code
                caps = cuda.require(a.device, ("tma",))
                if caps.capability != (9, 0):
                    raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), this GPU "
                                      f"({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                state[a.device] = device_plan(a.device)
            at = (a.device, M, N, K, cl.is_aligned(a, b, out))
            step = steps.get(at)
            if step is None:
                if len(steps) > 256:
                    steps.clear()
                step = steps[at] = plan_stages(M, N, K, at[-1], *state[a.device])
            if step.kernel != "mm_stages":
                return splitk((a, b), out)
            if "kernel" not in state:
                state["kernel"] = cl.OptIn(cl.load_sm90a(src, ("mm_stages",))["mm_stages"])
            key = (a.device, a.data_ptr(), b.data_ptr(), out.data_ptr(), M, N, K)
            if key not in maps:
                if len(maps) > 64:
                    maps.clear()
                maps[key] = torch.frombuffer(bytearray(cp.encode_maps(a, b, out)), dtype=torch.uint8).to(a.device)
            cuda.launch(state["kernel"], step.grid, step.block,
                        (cuda.ptr(maps[key]), numpy.int32(M), numpy.int32(N), numpy.int32(K)), shared_mem=step.smem)
            return out

        return launch

    return load


def refuses(shape) -> str:
    """Revision.refuses: a grid over the hardware limits, on either path; an empty C is returned as it is."""
    M, N, K = shape
    if not (M and N):
        return ""
    return cl.grid_problem(plan_stages(M, N, K, True)) or cl.grid_problem(plan_stages(M, N, K, False))
