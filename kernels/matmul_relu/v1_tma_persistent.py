"""v1_tma_persistent: v0's tiles loaded by TMA, one persistent program per SM.

Change: A, B and C move through TMA descriptors that each program builds on the device
(tl.make_tensor_descriptor), so the copy engine does address generation, bounds and
zero-fill of the K / M / N tails instead of ~BM*BK/threads pointer computations per
stage; a grid of one program per SM walks the tiles in v0's grouped order. The launcher
passes plain pointers (no host descriptors built and encoded per call, no pre-hook) and
picks its config as v0 does.
Per config: the persistent loop flattened into the K loop (the next tile's loads overlap
this tile's epilogue), and the C store split in two column halves (half the epilogue's
shared memory, one more pipeline stage).
Predicts: >= cuBLAS (torch) at 2048^3-8192^3: ~30 us at 2048^3 (>= 550 TFLOP/s, the
128x256 tile's single wave of 128 tiles on 132 SMs), ~700+ TFLOP/s at 4096^3; fewer
issued instructions per tile than v0. TMA needs 16-byte-aligned bases and row strides
(K and N multiples of 8 in bf16): other shapes fall back to v0's kernel. A GPU without TMA
(compute capability < 9.0) skips the revision (NEEDS).
"""

import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning
from kernlog import cuda

from . import v0_tiled

NEEDS = ("tma",)  # kernlog.cuda.FEATURES


def _config(bm, bn, bk, stages, warps, split=1, flatten=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                          "EPILOGUE_SPLIT": split, "FLATTEN": flatten},
                         num_stages=stages, num_warps=warps)


# smem: stages x (BM + BN) x BK x 2 bytes for A and B, plus the BM x BN/split bf16 C tile the
# TMA store reads; the H100 has 227 KiB per block, and a GPU with less tries only the configs
# that fit it (v0_tiled.fitting). Compiled sizes (sm_90, 2048^3) in the comments.
CONFIGS = [
    _config(128, 256, 64, 3, 8),                            # 144 + 64 = 208 KiB
    _config(128, 256, 64, 3, 8, flatten=True),              # 208 KiB
    _config(128, 256, 64, 4, 8, split=2),                   # 192 + 32 = 224 KiB
    _config(128, 256, 64, 4, 8, split=2, flatten=True),     # 224 KiB
    _config(256, 128, 64, 3, 8),                            # 208 KiB
    _config(128, 128, 64, 4, 8),                            # 128 + 32 = 160 KiB
    _config(128, 128, 64, 4, 8, flatten=True),              # 160 KiB
    _config(128, 128, 64, 5, 8, split=2, flatten=True),     # 160 + 16 = 176 KiB
    _config(128, 128, 64, 4, 4),                            # 160 KiB
    _config(128, 128, 128, 3, 8),                           # 192 + 32 = 224 KiB
    _config(64, 256, 64, 4, 4, flatten=True),               # 160 + 32 = 192 KiB
    _config(64, 128, 64, 4, 4),                             # 112 KiB; small problems
]
CPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "EPILOGUE_SPLIT": 1, "FLATTEN": False}


@triton.jit
def _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr):
    """(row, column) of tile `tile`'s corner in C, in v0's grouped order."""
    group_size = GROUP_M * num_pid_n
    first_pid_m = (tile // group_size) * GROUP_M
    group_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    return (first_pid_m + (tile % group_size) % group_m) * BLOCK_M, ((tile % group_size) // group_m) * BLOCK_N


def smem_bytes(config, capability: tuple[int, int] = (9, 0)) -> int:
    """Shared memory `config` takes on sm_90: its stages of A and B tiles, the C tile and an
    8-byte barrier a stage (Triton 3.6's compiled sizes, to the byte)."""
    kw = config.kwargs
    stage = (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * 2 + 8
    return config.num_stages * stage + kw["BLOCK_M"] * kw["BLOCK_N"] // kw["EPILOGUE_SPLIT"] * 2


def _prune(configs, named_args, **kwargs):
    return v0_tiled.fitting(configs, named_args["a_ptr"].device, smem_bytes)


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def matmul_relu_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr, FLATTEN: tl.constexpr,
                           NUM_SMS: tl.constexpr):
    # TMA zero-fills reads past K, M and N and clips the stores at M and N.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // EPILOGUE_SPLIT])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # The epilogue recomputes its tile from a counter of its own, so that with FLATTEN the
    # pipelined loads of the next tile and this tile's store share no value.
    tile_c = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN):
        off_m, off_n = _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([k, off_n]), acc)
        tile_c += NUM_SMS
        off_m, off_n = _tile_origin(tile_c, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.maximum(acc, 0.0)
        if EPILOGUE_SPLIT == 2:  # two BM x BN/2 stores: half the C staging buffer in shared memory
            left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([off_m, off_n], left.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def _scratch(size: int, alignment: int, stream):
    """Global memory for the device-built descriptors (128 bytes each, 3 per program)."""
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator():
    """tl.make_tensor_descriptor needs a Triton allocator; keep one set elsewhere. It is a
    ContextVar (per thread), hence checked on every call rather than once at import."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_scratch)


def tma_ok(a, b, c) -> bool:
    """TMA's rules: 16-byte-aligned bases and row strides, unit inner stride."""
    return all(t.data_ptr() % 16 == 0 and t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0
               for t in (a, b, c))


def matmul_relu(a, b, c, config=None, num_sms=None):
    """relu(a @ b) into c; `config` skips the autotuner (CPU_CONFIG on the CPU by default)."""
    if a.is_cuda:  # on any shape: a GPU without TMA would time v0's kernel under v1's name
        cuda.require(a.device, NEEDS)
    if not tma_ok(a, b, c):
        v0_config = config and {k: v for k, v in config.items() if k in v0_tiled.CPU_CONFIG}
        return v0_tiled.matmul_relu(a, b, c, config=v0_config)
    M, K = a.shape
    N = b.shape[1]
    if a.is_cuda:
        _ensure_allocator()
        num_sms = num_sms or tuning.sm_count(a.device)
    else:
        triton_interpreter.apply()
        a, b = a.float(), b.float()  # see v0_tiled: the interpreter's tl.dot cannot take bf16
        config = config or CPU_CONFIG
        num_sms = num_sms or 4
    grid = lambda meta: (min(num_sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    args = (a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
    if config is None:
        tuning.launch_tuned(matmul_relu_tma_kernel, grid, args, (M, N, K, a.dtype, b.dtype, c.dtype), a.device,
                            NUM_SMS=num_sms)
    else:
        matmul_relu_tma_kernel.fn[grid](*args, NUM_SMS=num_sms, **config)
    return c
