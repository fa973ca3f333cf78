"""The launcher of cu9_persistent, the CUDA C ladder's persistent rung: a block per SM (at most one per
tile), three tensor maps (A and B as cu8's, C for the TMA stores), cu5's scalar mma.sync kernel where
TMA cannot take the shape. Its own file: cuda_launch.py is hashed by every rung from cu0 to cu8, and
their profiles would go stale with it; it lends its helpers here (nvcc for sm_90a, the A and B maps,
the launch checks).
"""
from __future__ import annotations

from collections.abc import Callable

from . import cuda_launch as cl

P9_TILE = (128, 256)  # cu9_persistent.cu's P9_BM x P9_BN, cu8's tile
P9_STAGES = 3
P9_GROUP_M = 16
P9_THREADS = 384
P9_C_BYTES = 64 * 256 * 2  # a consumer warpgroup's staging of C: four 64x64 boxes
P9_SMEM_BYTES = 1024 + P9_STAGES * (128 * 64 * 2 + 64 * 256 * 2) + 2 * P9_C_BYTES + 2 * P9_STAGES * 8
C_BOX = (64, 64)  # (N, M): 128 bytes of a row (one swizzle row) x 64 rows; four boxes a warpgroup
SMS = 132  # the H100's and H200's SMs; the launch passes the device's own count
NAMES = ("mm_persistent", "mm_persistent_scalar")


def plan_persistent(M, N, K, aligned, sms: int = SMS):
    if not aligned:
        return cl.Launch("mm_persistent_scalar", cl._tiles128(M, N), (128, 1, 1))
    tiles = cl._cdiv(M, P9_TILE[0]) * cl._cdiv(N, P9_TILE[1])
    return cl.Launch("mm_persistent", (min(sms, tiles), 1, 1), (P9_THREADS, 1, 1), P9_SMEM_BYTES, tma=True)


def tiles_of_block(block: int, blocks: int, M: int, N: int) -> list[tuple[int, int]]:
    """The (row-tile, column-tile)s block `block` of `blocks` computes, as the kernel walks them."""
    tm, tn = cl._cdiv(M, P9_TILE[0]), cl._cdiv(N, P9_TILE[1])
    return [cl.grouped_tile(t, tm, tn, P9_GROUP_M) for t in range(block, tm * tn, blocks)]


PLANS = {"cu9_persistent": ("cu9_persistent.cu", plan_persistent, NAMES)}


def c_map_spec(M: int, N: int):
    """(globalDim, globalStrides in bytes, boxDim) of C's map, innermost dimension first."""
    return (N, M), (N * 2,), C_BOX


def encode_maps(a, b, c) -> bytes:
    """A's, B's (cu8's) and C's 128-byte CUtensorMaps, in that order."""
    import ctypes

    M, N = c.shape
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled  # encode_tensor_maps has loaded it (or said why)
    head = cl.encode_tensor_maps(a, b)
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(128 + 64)
    base = (ctypes.addressof(buf) + 63) & ~63
    dims, strides, box = c_map_spec(M, N)
    status = fn(base, cl.TMAP_BFLOAT16, 2, c.data_ptr(), (ctypes.c_uint64 * 2)(*dims), (ctypes.c_uint64 * 1)(*strides),
                (ctypes.c_uint32 * 2)(*box), (ctypes.c_uint32 * 2)(1, 1), cl.TMAP_INTERLEAVE_NONE,
                cl.TMAP_SWIZZLE_128B, cl.TMAP_L2_PROMOTION_128B, cl.TMAP_OOB_FILL_ZEROS)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for C dims {dims} strides {strides}")
    return head + ctypes.string_at(base, 128)


def loader() -> Callable[[], Callable]:
    """Revision.load for cu9_persistent."""
    src = cl.CUDA_DIR / PLANS["cu9_persistent"][0]

    def load():
        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        kernels: dict = {}
        maps: dict = {}  # (device, A, B, C pointers, M, N, K) -> device tensor of the three maps

        def launch(inputs, out):
            a, b = inputs
            if (a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or {a.dtype, b.dtype, out.dtype} !=
                    {torch.bfloat16} or tuple(out.shape) != (a.shape[0], b.shape[1]) or not out.is_contiguous()):
                raise ValueError(f"matmul_relu wants bf16 A (M, K), B (K, N) and a contiguous out (M, N), got "
                                 f"{tuple(a.shape)} {a.dtype} x {tuple(b.shape)} {b.dtype} -> "
                                 f"{tuple(out.shape)} {out.dtype}")
            a, b = a.contiguous(), b.contiguous()
            (M, K), N = a.shape, b.shape[1]
            if M == 0 or N == 0:
                return out
            if K == 0:
                return out.zero_()
            if not kernels:
                caps = cuda.require(a.device, ("tma",))
                if caps.capability != (9, 0):
                    raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), this GPU "
                                      f"({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                kernels.update({n: cl.OptIn(f) for n, f in cl.load_sm90a(src, NAMES).items()})
                kernels["sms"] = torch.cuda.get_device_properties(a.device).multi_processor_count
            step = plan_persistent(M, N, K, cl.is_aligned(a, b, out), kernels["sms"])
            problem = cl.grid_problem(step)
            if problem:
                raise Unsupported(problem)
            dims = (numpy.int32(M), numpy.int32(N), numpy.int32(K))
            if step.tma:
                key = (a.device, a.data_ptr(), b.data_ptr(), out.data_ptr(), M, N, K)
                if key not in maps:
                    if len(maps) > 64:
                        maps.clear()
                    raw = encode_maps(a, b, out)
                    maps[key] = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(a.device)
                args = (cuda.ptr(maps[key]), *dims)
            else:
                args = (cuda.ptr(a), cuda.ptr(b), cuda.ptr(out), *dims)
            cuda.launch(kernels[step.kernel], step.grid, step.block, args, shared_mem=step.smem)
            return out

        return launch

    return load


def refuses(shape) -> str:
    """Revision.refuses: a grid over the hardware limits, on either path."""
    M, N, K = shape
    return cl.grid_problem(plan_persistent(M, N, K, True)) or cl.grid_problem(plan_persistent(M, N, K, False))
