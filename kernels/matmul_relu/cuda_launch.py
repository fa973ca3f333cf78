"""One launcher for the CUDA C matmul+ReLU ladder (kernels/matmul_relu/cuda/*.cu); each rung
contributes a plan.

A plan maps (M, N, K, aligned) to the extern "C" kernel to launch, its grid, block and dynamic
shared memory; `names` lists every kernel the plan can pick (the tests check these are exactly
the file's entry points). `aligned`: K and N are multiples of 8 and A, B, C start on 16-byte
boundaries, so every 8-bf16 vector of a row is whole and aligned (16-byte loads, cp.async, TMA);
otherwise the plan picks the rung's scalar (masked 2-byte load) kernel.

cu0-cu6 compile through kernlog.cuda (NVRTC via CuPy, -arch=sm_90 on the H100). cu7 and cu8 need
sm_90a (wgmma), which CuPy's NVRTC call does not pass (it appends -arch=sm_<cc> itself), so they are built
with nvcc -gencode=arch=compute_90a,code=sm_90a into a cubin cached by content, loaded with
cupy.RawModule(path=...), and launched through kernlog.cuda.launch like the others. Their A and B
tensor maps (the same boxes: cu8 loads four B boxes a stage where cu7 loads two) are encoded on
the host (cuTensorMapEncodeTiled, libcuda through ctypes) and copied to a 256-byte device buffer
whose pointer the kernel takes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUDA_DIR = HERE / "cuda"

MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
MAX_BLOCK_THREADS = 1024


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = 0  # dynamic shared memory, bytes
    tma: bool = False  # takes (tensor maps, C, M, N, K) instead of (A, B, C, M, N, K)


Plan = Callable[[int, int, int, bool], Launch]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan_naive(M, N, K, aligned):  # threadIdx.x walks M, threadIdx.y walks N
    return Launch("mm_naive", (_cdiv(M, 32), _cdiv(N, 8), 1), (32, 8, 1))


def plan_coalesced(M, N, K, aligned):  # threadIdx.x walks N
    return Launch("mm_coalesced", (_cdiv(N, 32), _cdiv(M, 8), 1), (32, 8, 1))


def plan_smem(M, N, K, aligned):  # 32x32 tiles, a thread per output
    return Launch("mm_smem", (_cdiv(N, 32), _cdiv(M, 32), 1), (32, 32, 1))


def _tiles128(M, N):
    return (_cdiv(N, 128), _cdiv(M, 128), 1)


def plan_regblock(M, N, K, aligned):
    return Launch("mm_regblock", _tiles128(M, N), (256, 1, 1))


def plan_vectorized(M, N, K, aligned):
    return Launch("mm_vec" if aligned else "mm_vec_scalar", _tiles128(M, N), (256, 1, 1))


def plan_mma(M, N, K, aligned):
    return Launch("mm_mma" if aligned else "mm_mma_scalar", _tiles128(M, N), (128, 1, 1))


MMA_STAGE_BYTES = (128 * (32 + 8) + 32 * (128 + 8)) * 2  # mm_mma.cuh's MMA_STAGE_ELEMS bf16
CP_STAGES = 3  # cu6_cp_async.cu's CP_STAGES


def plan_cp_async(M, N, K, aligned):
    if not aligned:
        return Launch("mm_cpasync_scalar", _tiles128(M, N), (128, 1, 1))
    return Launch("mm_cpasync", _tiles128(M, N), (128, 1, 1), CP_STAGES * MMA_STAGE_BYTES)


WG_STAGES = 4  # cu7_wgmma.cu's WG_STAGES; WG_SMEM_BYTES below is its formula
WG_SMEM_BYTES = 1024 + WG_STAGES * (128 * 64 * 2 + 64 * 128 * 2) + 2 * WG_STAGES * 8
WG_THREADS = 288


def plan_wgmma(M, N, K, aligned):
    if not aligned:
        return Launch("mm_wgmma_scalar", _tiles128(M, N), (128, 1, 1))
    return Launch("mm_wgmma_tma", _tiles128(M, N), (WG_THREADS, 1, 1), WG_SMEM_BYTES, tma=True)


W8_TILE = (128, 256)  # cu8_wgmma_wide.cu's W8_BM x W8_BN
W8_STAGES = 4
W8_GROUP_M = 16
W8_SMEM_BYTES = 1024 + W8_STAGES * (128 * 64 * 2 + 64 * 256 * 2) + 2 * W8_STAGES * 8
W8_THREADS = 384


def grouped_tile(pid: int, tiles_m: int, tiles_n: int, group: int = W8_GROUP_M) -> tuple[int, int]:
    """cu8's launch order, as its w8_tile: block `pid` -> (row-tile, column-tile), `group`
    row-tiles per group, walked column by column inside a group."""
    width = group * tiles_n
    first = (pid // width) * group
    rows = min(tiles_m - first, group)
    return first + (pid % width) % rows, (pid % width) // rows


def plan_wgmma_wide(M, N, K, aligned):
    if not aligned:
        return Launch("mm_wide_scalar", _tiles128(M, N), (128, 1, 1))
    tiles = _cdiv(M, W8_TILE[0]) * _cdiv(N, W8_TILE[1])  # one block per tile, grouped order along x
    return Launch("mm_wgmma_wide", (tiles, 1, 1), (W8_THREADS, 1, 1), W8_SMEM_BYTES, tma=True)


# revision name -> (its .cu file, its plan, every kernel name the plan can return)
PLANS: dict[str, tuple[str, Plan, Sequence[str]]] = {
    "cu0_naive": ("cu0_naive.cu", plan_naive, ("mm_naive",)),
    "cu1_coalesced": ("cu1_coalesced.cu", plan_coalesced, ("mm_coalesced",)),
    "cu2_smem": ("cu2_smem.cu", plan_smem, ("mm_smem",)),
    "cu3_regblock": ("cu3_regblock.cu", plan_regblock, ("mm_regblock",)),
    "cu4_vectorized": ("cu4_vectorized.cu", plan_vectorized, ("mm_vec", "mm_vec_scalar")),
    "cu5_mma": ("cu5_mma.cu", plan_mma, ("mm_mma", "mm_mma_scalar")),
    "cu6_cp_async": ("cu6_cp_async.cu", plan_cp_async, ("mm_cpasync", "mm_cpasync_scalar")),
    "cu7_wgmma": ("cu7_wgmma.cu", plan_wgmma, ("mm_wgmma_tma", "mm_wgmma_scalar")),
    "cu8_wgmma_wide": ("cu8_wgmma_wide.cu", plan_wgmma_wide, ("mm_wgmma_wide", "mm_wide_scalar")),
}
# revision -> what its file needs beyond compute capability 8.0 (kernlog.cuda.FEATURES); SM90A:
# built for sm_90a by nvcc (wgmma), which runs on compute capability 9.0 exactly.
NEEDS = {"cu7_wgmma": ("tma",), "cu8_wgmma_wide": ("tma",)}
SM90A = ("cu7_wgmma", "cu8_wgmma_wide")
NVCC_SM90A = ("-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-lineinfo", "--std=c++17")


def source(revision: str) -> Path:
    return CUDA_DIR / PLANS[revision][0]


def grid_problem(step: Launch) -> str:
    """Why `step` cannot launch on any CUDA GPU ("" if it can)."""
    gx, gy, gz = step.grid
    if not (1 <= gx <= MAX_GRID_X and 1 <= gy <= MAX_GRID_YZ and 1 <= gz <= MAX_GRID_YZ):
        return f"{step.kernel}: grid {step.grid} is over the limits (x <= 2^31-1, y, z <= 65535)"
    bx, by, bz = step.block
    if bx * by * bz > MAX_BLOCK_THREADS:
        return f"{step.kernel}: block {step.block} has over 1024 threads"
    return ""


def refuses(revision: str) -> Callable[[tuple], str]:
    """Revision.refuses: a shape whose grid would be over the hardware limits (on either path)."""
    plan = PLANS[revision][1]

    def why(shape) -> str:
        M, N, K = shape
        return grid_problem(plan(M, N, K, True)) or grid_problem(plan(M, N, K, False))

    return why


def is_aligned(a, b, out) -> bool:
    """K and N multiples of 8 (every row of A, B, C holds whole 16-byte vectors) and A, B, C
    starting on 16-byte boundaries (TMA and cp.async need both)."""
    K, N = a.shape[1], b.shape[1]
    return (K % 8 == 0 and N % 8 == 0
            and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0)


# ---- cu7 and cu8: nvcc for sm_90a, and tensor maps.
_SM90A_MODULES: dict = {}


def load_sm90a(src: Path, names: Sequence[str]):
    """{name: cupy.RawKernel} for `src` built by nvcc for sm_90a; the cubin is cached on disk by
    the digest of the source, its includes and the options."""
    import hashlib
    import os
    import shutil
    import subprocess
    import tempfile

    from kernlog import cuda
    from kernlog.errors import Unsupported

    src = Path(src).resolve()
    opts = NVCC_SM90A + tuple(f"-I{d}" for d in cuda.include_dirs(src))
    h = hashlib.sha256()
    for f in (src, *cuda.includes(src)):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update("\0".join(opts).encode())
    digest = h.hexdigest()[:16]
    key = (src, digest, tuple(names))
    if key not in _SM90A_MODULES:
        import cupy

        cache = Path(tempfile.gettempdir()) / "kernlog-sm90a"
        cubin = cache / f"{src.stem}-{digest}.cubin"
        if not cubin.is_file():
            nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file()
                                            else None)
            if nvcc is None:
                raise Unsupported("needs nvcc to build sm_90a (wgmma) code: NVRTC through CuPy builds sm_90")
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f".{cubin.name}.{os.getpid()}"
            done = subprocess.run([nvcc, *opts, "-o", str(tmp), str(src)], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"nvcc failed on {src}:\n{done.stderr}")
            os.replace(tmp, cubin)
        module = cupy.RawModule(path=str(cubin))
        _SM90A_MODULES[key] = {n: module.get_function(n) for n in names}
    return _SM90A_MODULES[key]


# cuda.h (CUDA 13.0) enum values
TMAP_BFLOAT16 = 9
TMAP_INTERLEAVE_NONE = 0
TMAP_SWIZZLE_128B = 3
TMAP_L2_PROMOTION_128B = 2
TMAP_OOB_FILL_ZEROS = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as 0
A_BOX = (64, 128)  # (K, M): cu7_wgmma.cu's WG_BK x WG_BM (cu8's W8_BK x W8_BM)
B_BOX = (64, 64)  # (N, K): a 64-column slice of WG_BN x WG_BK, two boxes per stage (cu8: four)


def tensor_map_specs(M: int, N: int, K: int):
    """(globalDim, globalStrides in bytes, boxDim) of A's and B's maps, innermost dimension first."""
    return (((K, M), (K * 2,), A_BOX), ((N, K), (N * 2,), B_BOX))


def encode_tensor_maps(a, b) -> bytes:
    """The two 128-byte CUtensorMaps (A then B) for cu7 and cu8, from the CUDA driver."""
    import ctypes

    from kernlog.errors import NoGpu

    M, K = a.shape
    N = b.shape[1]
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise NoGpu("no CUDA driver (libcuda.so.1): tensor maps are encoded by the driver") from None
    fn = driver.cuTensorMapEncodeTiled
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(256 + 64)
    base = (ctypes.addressof(buf) + 63) & ~63  # CUtensorMap is alignas(64)
    for i, (t, (dims, strides, box)) in enumerate(zip((a, b), tensor_map_specs(M, N, K), strict=True)):
        status = fn(base + 128 * i, TMAP_BFLOAT16, 2, t.data_ptr(), (ctypes.c_uint64 * 2)(*dims),
                    (ctypes.c_uint64 * 1)(*strides), (ctypes.c_uint32 * 2)(*box), (ctypes.c_uint32 * 2)(1, 1),
                    TMAP_INTERLEAVE_NONE, TMAP_SWIZZLE_128B, TMAP_L2_PROMOTION_128B, TMAP_OOB_FILL_ZEROS)
        if status != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for {'AB'[i]} "
                               f"dims {dims} strides {strides} box {box}")
    return ctypes.string_at(base, 256)


class OptIn:
    """A cupy.RawKernel that kernlog.cuda.launch can opt into more than 48 KB of dynamic shared
    memory: launch remembers the size it set as an attribute, which CuPy's RawKernel (a compiled
    class without an instance dict) refuses, so cu6 and cu7 (over 48 KB a block) failed there."""
    __slots__ = ("fn", "_kl_smem")

    def __init__(self, fn):
        self.fn = fn
        self._kl_smem = 0

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.fn.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self.fn.max_dynamic_shared_size_bytes = value

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def loader(revision: str) -> Callable[[], Callable]:
    """Revision.load for the rung `revision`, planned by PLANS[revision]."""
    _, plan, names = PLANS[revision]
    src = source(revision)

    def load():
        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        kernels = {}  # compiled on the first launch, then reused
        maps: dict = {}  # (device, A ptr, B ptr, M, N, K) -> device tensor of the two tensor maps

        def tensor_maps(a, b):
            key = (a.device, a.data_ptr(), b.data_ptr(), *a.shape, b.shape[1])
            t = maps.get(key)
            if t is None:
                if len(maps) > 64:
                    maps.clear()
                raw = encode_tensor_maps(a, b)
                t = maps[key] = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(a.device)
            return t

        def launch(inputs, out):
            a, b = inputs
            if (a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or a.dtype != torch.bfloat16
                    or b.dtype != torch.bfloat16 or out.dtype != torch.bfloat16
                    or tuple(out.shape) != (a.shape[0], b.shape[1])):
                raise ValueError(f"matmul_relu wants bf16 A (M, K), B (K, N) and out (M, N), got "
                                 f"{tuple(a.shape)} {a.dtype} x {tuple(b.shape)} {b.dtype} -> "
                                 f"{tuple(out.shape)} {out.dtype}")
            if not out.is_contiguous():
                raise ValueError("matmul_relu writes a contiguous output")
            a, b = a.contiguous(), b.contiguous()
            M, K = a.shape
            N = b.shape[1]
            if M == 0 or N == 0:
                return out
            if K == 0:
                return out.zero_()
            step = plan(M, N, K, is_aligned(a, b, out))
            problem = grid_problem(step)
            if problem:
                raise Unsupported(problem)
            if not kernels:
                caps = cuda.require(a.device, NEEDS.get(revision, ()))
                if revision in SM90A:
                    if caps.capability != (9, 0):
                        raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), "
                                          f"this GPU ({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                    kernels.update({n: OptIn(f) for n, f in load_sm90a(src, names).items()})
                else:
                    kernels.update({n: OptIn(f) for n, f in cuda.load_module(src, names).items()})
            dims = (numpy.int32(M), numpy.int32(N), numpy.int32(K))
            if step.tma:
                args = (cuda.ptr(tensor_maps(a, b)), cuda.ptr(out), *dims)
            else:
                args = (cuda.ptr(a), cuda.ptr(b), cuda.ptr(out), *dims)
            cuda.launch(kernels[step.kernel], step.grid, step.block, args, shared_mem=step.smem)
            return out

        return launch

    return load
