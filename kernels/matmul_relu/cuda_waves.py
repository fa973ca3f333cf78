"""The launcher of cu10_waves: per shape, the persistent tile whose waves are fullest. A persistent grid
runs its tiles in waves of one tile per SM; where the tile count falls just past a multiple of the SMs,
the last wave runs mostly empty (3072^3 in cu9's 128x256 tiles: 288 tiles, 2.18 waves of 132). The plan
computes, for cu9's 128x256 tile and cu10's 192x192, the share of the waves' tile area that is C
(`fill`), and takes the higher: cu9's kernel (its own launcher, cuda_persistent.py) or cu10's. Its own
file, as cu9's: cuda_launch.py and cuda_persistent.py are hashed by the rungs before it.
"""
from __future__ import annotations

from collections.abc import Callable

from . import cuda_launch as cl
from . import cuda_persistent as cp

Q_TILE = (192, 192)  # cu10_waves.cu's Q_BM x Q_BN
Q_STAGES = 3
Q_CONSUMERS = 3
Q_THREADS = 128 * (1 + Q_CONSUMERS)
Q_SMEM_BYTES = 1024 + Q_STAGES * (192 * 64 * 2 + 64 * 192 * 2) + Q_CONSUMERS * (64 * 192 * 2) + 2 * Q_STAGES * 8
A_BOX = (64, 192)  # (K, M): one box a stage
NAMES = ("mm_waves", "mm_persistent", "mm_persistent_scalar")


def fill(M: int, N: int, tile: tuple[int, int], sms: int = cp.SMS) -> float:
    """The share of the waves' tile area that is C: M x N over (waves, rounded up) x SMs x tile area."""
    tiles = cl._cdiv(M, tile[0]) * cl._cdiv(N, tile[1])
    return M * N / (cl._cdiv(tiles, sms) * sms * tile[0] * tile[1]) if tiles else 0.0


def plan_waves(M, N, K, aligned, sms: int = cp.SMS):
    """cu9's plan, or cu10's 192x192 kernel where its waves are fuller (ties go to cu9's tile)."""
    if not aligned or fill(M, N, Q_TILE, sms) <= fill(M, N, cp.P9_TILE, sms):
        return cp.plan_persistent(M, N, K, aligned, sms)
    tiles = cl._cdiv(M, Q_TILE[0]) * cl._cdiv(N, Q_TILE[1])
    return cl.Launch("mm_waves", (min(sms, tiles), 1, 1), (Q_THREADS, 1, 1), Q_SMEM_BYTES, tma=True)


PLANS = {"cu10_waves": ("cu10_waves.cu", plan_waves, NAMES)}


def map_specs(M: int, N: int, K: int):
    """(globalDim, globalStrides in bytes, boxDim) of cu10's A, B and C maps, innermost dimension first."""
    return (((K, M), (K * 2,), A_BOX), ((N, K), (N * 2,), cl.B_BOX), cp.c_map_spec(M, N))


def encode_maps(a, b, c) -> bytes:
    """cu10's three 128-byte CUtensorMaps (A, B, C), from the CUDA driver."""
    import ctypes

    M, K = a.shape
    N = b.shape[1]
    cl.encode_tensor_maps(a, b)  # loads the driver, or says why it cannot (NoGpu)
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(3 * 128 + 64)
    base = (ctypes.addressof(buf) + 63) & ~63
    for i, (t, (dims, strides, box)) in enumerate(zip((a, b, c), map_specs(M, N, K), strict=True)):
        status = fn(base + 128 * i, cl.TMAP_BFLOAT16, 2, t.data_ptr(), (ctypes.c_uint64 * 2)(*dims),
                    (ctypes.c_uint64 * 1)(*strides), (ctypes.c_uint32 * 2)(*box), (ctypes.c_uint32 * 2)(1, 1),
                    cl.TMAP_INTERLEAVE_NONE, cl.TMAP_SWIZZLE_128B, cl.TMAP_L2_PROMOTION_128B, cl.TMAP_OOB_FILL_ZEROS)
        if status != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for {'ABC'[i]} dims {dims} "
                               f"strides {strides} box {box}")
    return ctypes.string_at(base, 3 * 128)


def loader() -> Callable[[], Callable]:
    """Revision.load for cu10_waves: cu9's launch (its checks, edges and scalar path) unless the plan
    takes the 192x192 tile."""
    src = cl.CUDA_DIR / PLANS["cu10_waves"][0]

    def load():
        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        persistent = cp.loader()()
        state: dict = {}  # the 192x192 kernel and the SM count, on the first launch that takes it
        maps: dict = {}  # (device, A, B, C pointers, M, N, K) -> device tensor of the three maps

        def launch(inputs, out):
            a, b = inputs
            plain = (a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0] and out.is_contiguous()
                     and {a.dtype, b.dtype, out.dtype} == {torch.bfloat16} and a.is_cuda
                     and tuple(out.shape) == (a.shape[0], b.shape[1]) and min(*a.shape, b.shape[1]) > 0)
            if not plain:  # cu9's launch checks the inputs and takes the edge cases
                return persistent(inputs, out)
            a, b = a.contiguous(), b.contiguous()
            (M, K), N = a.shape, b.shape[1]
            if a.device not in state:  # the SM count, read once a device
                state[a.device] = torch.cuda.get_device_properties(a.device).multi_processor_count
            sms = state[a.device]
            step = plan_waves(M, N, K, cl.is_aligned(a, b, out), sms)
            if step.kernel != "mm_waves":
                return persistent((a, b), out)
            if "kernel" not in state:
                caps = cuda.require(a.device, ("tma",))
                if caps.capability != (9, 0):
                    raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), this GPU "
                                      f"({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                state["kernel"] = cl.OptIn(cl.load_sm90a(src, ("mm_waves",))["mm_waves"])
            key = (a.device, a.data_ptr(), b.data_ptr(), out.data_ptr(), M, N, K)
            if key not in maps:
                if len(maps) > 64:
                    maps.clear()
                maps[key] = torch.frombuffer(bytearray(encode_maps(a, b, out)), dtype=torch.uint8).to(a.device)
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
    return cl.grid_problem(plan_waves(M, N, K, True)) or cl.grid_problem(plan_waves(M, N, K, False))
