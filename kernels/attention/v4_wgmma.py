"""v4_wgmma: the forward in CUDA C on Hopper's wgmma, picked per shape against v3_fma's loop.

Change: v3_fma's Triton loop holds 0.77-0.88x of SDPA at head dim 128 on the H200's family
members: within a warp, the products and the softmax take turns. cuda/v4_wgmma.cu is built as
cuDNN's fused kernel and the matmul ladder's cu8: a warpgroup loads Q once and K, V per key block
by TMA into a 3-stage ring, two warpgroups of 64 query rows each run S = Q K^T and O += P V on
wgmma (P from registers), and each issues the next block's S product before the P V product of the
one before, so its softmax runs while that product is in flight. It takes bf16 at head dims 64 and
128 on a compute capability 9.0 GPU. The picker times it beside v3_fma's candidates at each shape
and keeps the faster; fp32, other head dims, other GPUs and the CPU run v3_fma.
Predicts: >= v3_fma on every family member (the picker keeps v3's loop where it is faster), and
>= 1.1x v3_fma at the head-dim-128 members of 2048 tokens and more.
"""
from __future__ import annotations

import functools
from pathlib import Path

from kernels.common import tuning

from . import v1_flash, v3_fma

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "cuda" / "v4_wgmma.cu"
ENTRIES = {64: "fa_fwd_d64", 128: "fa_fwd_d128"}
BLOCK_M, BLOCK_N, STAGES, THREADS = 128, 128, 3, 384  # fa_wgmma.cuh's FA_BM, FA_BN, FA_STAGES, FA_THREADS
WGMMA = "wgmma"  # the picker's candidate for the CUDA C kernel, beside v3_fma's (loop, layout) pairs
MAX_GRID_Y = 65535
LOG2E = 1.4426950408889634
Q_BOX, KV_BOX = (64, 64), (64, BLOCK_N)  # (columns, rows) of a TMA box: 128 bytes by 64 or BLOCK_N rows


def smem_bytes(head_dim: int) -> int:
    """fa_wgmma.cuh's FaSmem<D, 1>::BYTES: alignment slack, Q, the K/V stages, the barriers."""
    return 1024 + BLOCK_M * head_dim * 2 + STAGES * 2 * BLOCK_N * head_dim * 2 + (1 + 3 * STAGES) * 8


def takes(q, k, v, out) -> str:
    """Why the CUDA C kernel cannot run this call ("" where it can)."""
    import torch

    B, H, T, D = q.shape
    if not out.is_cuda:
        return "not on a GPU"
    if _capability(out.device.index) != (9, 0):
        return "needs sm_90a (wgmma: compute capability 9.0)"
    if q.dtype != torch.bfloat16:
        return "bf16 only"
    if D not in ENTRIES:
        return f"head dim {D} not 64 or 128"
    if B * H > MAX_GRID_Y:
        return f"B x H = {B * H} past the grid's {MAX_GRID_Y}"
    if not all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v, out)):
        return "q, k, v and out must be contiguous and 16-byte aligned"
    return ""


@functools.lru_cache(maxsize=None)
def _capability(index) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(index)


_KERNELS: dict = {}
_MAPS: dict = {}


def _kernel(head_dim: int):
    if not _KERNELS:
        from kernels.matmul_relu.cuda_launch import OptIn, load_sm90a

        _KERNELS.update({d: OptIn(f) for d, f in zip(ENTRIES, load_sm90a(SOURCE, tuple(ENTRIES.values())).values(),
                                                     strict=True)})
    return _KERNELS[head_dim]


def tensor_maps(q, k, v):
    """Q's, K's and V's 128-byte CUtensorMaps over their (B H T, D) views (128-byte swizzle, zeros
    past the end), on the device; kept per (pointers, shape)."""
    import ctypes

    import torch

    from kernels.matmul_relu import cuda_launch as cl

    key = (q.device, q.data_ptr(), k.data_ptr(), v.data_ptr(), *q.shape)
    got = _MAPS.get(key)
    if got is not None:
        return got
    B, H, T, D = q.shape
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(3 * 128 + 64)
    base = (ctypes.addressof(buf) + 63) & ~63  # CUtensorMap is alignas(64)
    for i, (t, box) in enumerate(((q, Q_BOX), (k, KV_BOX), (v, KV_BOX))):
        status = fn(base + 128 * i, cl.TMAP_BFLOAT16, 2, t.data_ptr(), (ctypes.c_uint64 * 2)(D, B * H * T),
                    (ctypes.c_uint64 * 1)(D * 2), (ctypes.c_uint32 * 2)(*box), (ctypes.c_uint32 * 2)(1, 1),
                    cl.TMAP_INTERLEAVE_NONE, cl.TMAP_SWIZZLE_128B, cl.TMAP_L2_PROMOTION_128B, cl.TMAP_OOB_FILL_ZEROS)
        if status != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for {'qkv'[i]} of {tuple(q.shape)}")
    if len(_MAPS) > 64:
        _MAPS.clear()
    got = _MAPS[key] = torch.frombuffer(bytearray(ctypes.string_at(base, 3 * 128)), dtype=torch.uint8).to(q.device)
    return got


def launch_wgmma(q, k, v, scale, out, lse=None):
    """The CUDA C kernel on (B, H, T, D) bf16 tensors that `takes` accepts."""
    import numpy

    from kernlog import cuda

    B, H, T, D = q.shape
    args = (cuda.ptr(tensor_maps(q, k, v)), cuda.ptr(out), numpy.uint64(0 if lse is None else lse.data_ptr()),
            numpy.int32(T), numpy.float32(scale * LOG2E))
    cuda.launch(_kernel(D), (-(-T // BLOCK_M), B * H, 1), (THREADS, 1, 1), args, shared_mem=smem_bytes(D))
    return out


def candidates(q, k, v, out) -> list:
    """The CUDA C kernel where it runs, then v3_fma's candidates."""
    dtype = "fp32" if q.dtype.itemsize == 4 else "bf16"
    return ([WGMMA] if not takes(q, k, v, out) else []) + v3_fma.candidates(dtype, q.shape[-1])


def attention(q, k, v, scale, out, config=None, lse=None):
    """v1_flash.attention's contract; `config`: WGMMA (the CUDA C kernel), or a layout that
    v3_fma.attention takes, skips the pick."""
    v1_flash.check_args(q, k, v, out)
    if config == WGMMA:
        why = takes(q, k, v, out)
        if why:
            raise ValueError(f"attention v4_wgmma: the CUDA C kernel cannot run this call: {why}")
        return launch_wgmma(q, k, v, scale, out, lse)
    if config is not None or not out.is_cuda:
        return v3_fma.attention(q, k, v, scale, out, config, lse)
    B, H, T, D = q.shape
    tuning.launch_fastest(("attention.v4_wgmma", B, H, T, D, q.dtype), lambda: candidates(q, k, v, out),
                          lambda pick: launch_pick(pick, q, k, v, scale, out, lse), q.device)
    return out


def launch_pick(pick, q, k, v, scale, out, lse=None):
    """One of `candidates`: WGMMA, or one of v3_fma's (loop, layout) pairs."""
    if pick != WGMMA:
        loop, layout = pick
        v1_flash.launch(v3_fma.KERNELS[loop], q, k, v, scale, out, layout, lse)
    elif takes(q, k, v, out):  # picked for this shape on tensors it could take; these it cannot
        v3_fma.attention(q, k, v, scale, out, None, lse)
    else:
        launch_wgmma(q, k, v, scale, out, lse)
