"""The launcher of cu11_splitk: cu10's plan and launch, except where splitting K over a cluster is
cheaper by the cost model below; then one of cu11_splitk.cu's kernels (a 128 x BN tile, S blocks a
cluster) with cu7's A and B tensor maps. Its own file: cuda_waves.py and cuda_persistent.py are hashed
by cu9's and cu10's profiles.
"""
from __future__ import annotations

from collections.abc import Callable

from . import cuda_launch as cl
from . import cuda_waves as cw

S11_THREADS = 288
S11_STAGES = {128: 6, 192: 5}  # cu11_splitk.cu's stages for each tile width BN
SPLITS = {128: (2, 4, 8, 16), 192: (4, 8)}  # the (BN, S) kernels it exports
# Clusters resident at once, by size (cuOccupancyMaxActiveClusters for these kernels on the H200, one block
# an SM: 132 SMs); the launcher asks the driver for the device's own.
CLUSTERS = {2: 66, 4: 30, 8: 15, 16: 7}
WAVE_COST = 1000  # a wave's fill, reduction and drain, in the model's units (a k-tile of a 128-wide tile: 128)
WIDE_CLUSTER = 1.4  # 16-block clusters (non-portable) ran 1.4x the model on the H200
NAMES = tuple(f"mm_splitk_n{bn}_s{s}" for bn, ss in SPLITS.items() for s in ss) + cw.NAMES


def smem_bytes(bn: int) -> int:
    stages = S11_STAGES[bn]
    return 1024 + stages * (128 * 64 * 2 + 64 * bn * 2) + 2 * stages * 8


def split_cost(M: int, N: int, K: int, bn: int, s: int, clusters: dict[int, int] = CLUSTERS) -> float:
    """The model: waves of co-resident clusters x (k-tiles a slice x tile width + a wave's overhead).
    On the H200 it ranks first the (BN, S) measured fastest at 13 of 13 shapes (large_k, decode, 1000^3)."""
    if clusters.get(s, 0) <= 0 or cl._cdiv(K, 64) < s:  # none resident, or a slice with no k-tile
        return float("inf")
    tiles = cl._cdiv(M, 128) * cl._cdiv(N, bn)
    waves = cl._cdiv(tiles, clusters[s])
    cost = waves * (cl._cdiv(cl._cdiv(K, 64), s) * bn + WAVE_COST)
    return cost * (WIDE_CLUSTER if s == 16 else 1.0)


def unsplit_cost(M: int, N: int, K: int, sms: int) -> float:
    """The same model for cu10's plan, one 128x256 tile a block (its 192x192 tile costs about as much)."""
    tiles = cl._cdiv(M, 128) * cl._cdiv(N, 256)
    return cl._cdiv(tiles, sms) * (cl._cdiv(K, 64) * 256 + WAVE_COST)


def plan_splitk(M, N, K, aligned, sms: int = cw.cp.SMS, clusters: dict[int, int] = CLUSTERS):
    """cu10's plan, or, where its 128x256 tiles are fewer than the SMs, the split (BN, S) of least cost if it
    costs less than no split."""
    if aligned and M and N and K and cl._cdiv(M, 128) * cl._cdiv(N, 256) < sms:
        cost, bn, s = min((split_cost(M, N, K, bn, s, clusters), bn, s) for bn, ss in SPLITS.items() for s in ss)
        if cost < unsplit_cost(M, N, K, sms):
            tiles = cl._cdiv(M, 128) * cl._cdiv(N, bn)
            return cl.Launch(f"mm_splitk_n{bn}_s{s}", (tiles, s, 1), (S11_THREADS, 1, 1), smem_bytes(bn), tma=True)
    return cw.plan_waves(M, N, K, aligned, sms)


PLANS = {"cu11_splitk": ("cu11_splitk.cu", plan_splitk, NAMES)}
NON_PORTABLE_CLUSTER = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h, CUDA 13.0)


def resident_clusters(fn, smem: int, s: int) -> int:
    """cuOccupancyMaxActiveClusters for kernel `fn` (a cupy RawKernel) with clusters of `s` blocks."""
    import ctypes

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                    ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]

    driver = ctypes.CDLL("libcuda.so.1")
    found = ctypes.c_int(0)
    config = LaunchConfig((ctypes.c_uint * 3)(1, s, 1), (ctypes.c_uint * 3)(S11_THREADS, 1, 1), smem, None, None, 0)
    status = driver.cuOccupancyMaxActiveClusters(ctypes.byref(found), ctypes.c_void_p(fn.kernel.ptr),
                                                 ctypes.byref(config))
    return found.value if status == 0 else 0


def loader() -> Callable[[], Callable]:
    """Revision.load for cu11_splitk."""
    src = cl.CUDA_DIR / PLANS["cu11_splitk"][0]
    split_names = NAMES[:-len(cw.NAMES)]

    def load():
        import ctypes

        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        waves = cw.loader()()
        state: dict = {}  # device -> (SM count, resident clusters by size); "kernels" once built
        maps: dict = {}  # (device, A, B pointers, M, N, K) -> device tensor of the two maps
        steps: dict = {}  # (device, M, N, K, aligned) -> the plan's Launch: no model on the hot path

        def launch(inputs, out):
            a, b = inputs
            plain = (a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0] and out.is_contiguous()
                     and {a.dtype, b.dtype, out.dtype} == {torch.bfloat16} and a.is_cuda
                     and b.device == out.device == a.device
                     and tuple(out.shape) == (a.shape[0], b.shape[1]) and min(*a.shape, b.shape[1]) > 0)
            if not plain:  # cu10's launch (cu9's checks) takes the edge cases
                return waves(inputs, out)
            a, b = a.contiguous(), b.contiguous()
            (M, K), N = a.shape, b.shape[1]
            if "kernels" not in state:
                caps = cuda.require(a.device, ("tma",))
                if caps.capability != (9, 0):
                    raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), this GPU "
                                      f"({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                built = cl.load_sm90a(src, split_names)
                for name, fn in built.items():
                    if name.endswith("_s16"):
                        ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(fn.kernel.ptr),
                                                                       NON_PORTABLE_CLUSTER, 1)
                state["kernels"] = {name: cl.OptIn(fn) for name, fn in built.items()}
            if a.device not in state:
                clusters = {}
                for s in sorted({s for ss in SPLITS.values() for s in ss}):
                    bn = max(b_ for b_, ss in SPLITS.items() if s in ss)
                    kernel = state["kernels"][f"mm_splitk_n{bn}_s{s}"]
                    kernel.max_dynamic_shared_size_bytes = smem_bytes(bn)  # the query needs the opt-in
                    kernel._kl_smem = smem_bytes(bn)
                    clusters[s] = resident_clusters(kernel.fn, smem_bytes(bn), s)
                state[a.device] = (torch.cuda.get_device_properties(a.device).multi_processor_count, clusters)
            at = (a.device, M, N, K, cl.is_aligned(a, b, out))
            step = steps.get(at)
            if step is None:
                if len(steps) > 256:
                    steps.clear()
                step = steps[at] = plan_splitk(M, N, K, at[-1], *state[a.device])
            if not step.kernel.startswith("mm_splitk"):
                return waves((a, b), out)
            key = (a.device, a.data_ptr(), b.data_ptr(), M, N, K)
            if key not in maps:
                if len(maps) > 64:
                    maps.clear()
                maps[key] = torch.frombuffer(bytearray(cl.encode_tensor_maps(a, b)), dtype=torch.uint8).to(a.device)
            cuda.launch(state["kernels"][step.kernel], step.grid, step.block,
                        (cuda.ptr(maps[key]), cuda.ptr(out), numpy.int32(M), numpy.int32(N), numpy.int32(K)),
                        shared_mem=step.smem)
            return out

        return launch

    return load


def refuses(shape) -> str:
    """Revision.refuses: a grid over the hardware limits, on either path; an empty C is returned as it is."""
    M, N, K = shape
    if not (M and N):
        return ""
    return cl.grid_problem(plan_splitk(M, N, K, True)) or cl.grid_problem(plan_splitk(M, N, K, False))
