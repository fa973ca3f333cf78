"""v0_tiled: C = relu(A @ B), bf16 in, fp32 accumulate, bf16 out; one program per C tile.

Change: tiled tl.dot with grouped ("swizzled") program order: GROUP_M row-tiles share each
column panel of B while it is in L2; ReLU and the bf16 cast in the epilogue, so C is written
once. Tile sizes and pipeline depth picked per (M, N, K) over Hopper-sized configs by
kernels.common.tuning (interleaved timing; Triton's autotuner only holds the configs), and
later calls go straight to the JIT function with the pick.
Predicts: ~90-100% of cuBLAS (torch) at 4096^3: ~580-650 TFLOP/s; tensor-pipe utilization
the metric to watch; DRAM traffic near the compulsory A + B + C.
"""
import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning
from kernlog import cuda


def _config(bm, bn, bk, stages, warps):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                         num_stages=stages, num_warps=warps)


# smem per stage is (BM + BN) x BK x 2 bytes: 128x256x64 x 4 stages = 192 KiB of the H100's 227.
# A GPU with less shared memory per block tries only the configs that fit it (`fitting`).
CONFIGS = [
    _config(128, 256, 64, 3, 8),
    _config(128, 256, 64, 4, 8),
    _config(256, 128, 64, 3, 8),
    _config(128, 128, 64, 4, 8),
    _config(128, 128, 64, 4, 4),
    _config(128, 128, 128, 3, 8),
    _config(64, 128, 64, 4, 4),  # small problems: more tiles than SMs
]
# The autotuner benchmarks through the GPU driver, which the CPU interpreter lacks.
CPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2}


def smem_bytes(config, capability: tuple[int, int]) -> int:
    """Shared memory `config` takes: a (BM + BN) x BK bf16 tile pair per buffered stage. Triton
    3.6 keeps num_stages of them on sm_90 and num_stages - 1 before it (cp.async): compiled
    sizes match to the byte (tests/test_library_matmul.py)."""
    kw = config.kwargs
    buffers = config.num_stages if capability >= (9, 0) else config.num_stages - 1
    return buffers * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * 2


def fitting(configs, device, smem=smem_bytes):
    """The configs whose shared memory, smem(config, capability), fits a block on `device`;
    Unsupported if none does."""
    caps = cuda.device_caps(device)
    kept = [c for c in configs if smem(c, caps.capability) <= caps.smem_per_block_optin]
    if not kept:
        cuda.require(device, smem=min(smem(c, caps.capability) for c in configs))
    return kept


def _prune(configs, named_args, **kwargs):
    return fitting(configs, named_args["a_ptr"].device)


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def matmul_relu_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_pid_m = (pid // group_size) * GROUP_M
    group_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % group_size) % group_m
    pid_n = (pid % group_size) // group_m

    # Rows and columns past the edge wrap around (% M, % N): loads stay in bounds without a
    # mask, and the store below drops them.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:  # the last K step reads zeros past K
            k_left = K - k
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = tl.maximum(acc, 0.0).to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def matmul_relu(a, b, c, config=None):
    """relu(a @ b) into c. `config` (a dict of the constexprs) skips the autotuner; on the CPU
    CPU_CONFIG is used unless one is given."""
    M, K = a.shape
    N = b.shape[1]
    assert M * K < 2**31 and K * N < 2**31 and M * N < 2**31, "int32 offsets"
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    if not a.is_cuda:
        triton_interpreter.apply()
        # The interpreter holds bf16 as uint16 and its tl.dot would multiply the bit patterns;
        # fp32 copies are exact and give the same fp32-accumulated products.
        a, b = a.float(), b.float()
        config = config or CPU_CONFIG
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if config is None:
        tuning.launch_tuned(matmul_relu_kernel, grid, args, (M, N, K, a.dtype, b.dtype, c.dtype), a.device)
    else:
        matmul_relu_kernel.fn[grid](*args, **config)
    return c
