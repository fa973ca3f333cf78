"""v2_split_k: shapes with too few output tiles to fill the GPU split K across programs.

Change: beside v1 (still a candidate, and what every shape with enough tiles keeps), the
launcher times split-K layouts: a grid of output tiles x SPLIT slices of K, each program
writing its fp32 partial tile to a workspace, then a second kernel summing the SPLIT partials
of each element in a fixed order (deterministic, no atomics), applying the ReLU and casting
to bf16 once. Small tiles (16-128 rows) for skinny M.
Evidence (H100, kernlog bench matmul_relu --family large_k / decode, v1): 256x256x65536 ran
30 TFLOP/s against cuBLAS's 202: 4 output tiles of 128x128 for 132 SMs, each walking all
65536 of K; 512x512x16384 0.38x, 128x1024x32768 0.32x; 1x4096x4096 0.70x, 32x4096x11008 0.71x.
Predicts: large_k and decode members at >= 0.95x of relu(A @ B) (cuBLAS splits K there too);
every other member as v1 (the picker keeps v1 where no split is faster).
"""
import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning
from kernlog import cuda

from . import v1_tma_persistent

# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps) of the partial products: tiles small enough that
# a few of them and a split of K fill the GPU. tl.dot takes 16 rows at the least.
SPLIT_TILES = ((16, 128, 128, 4, 4), (64, 64, 128, 4, 4), (64, 128, 64, 4, 4), (128, 128, 64, 3, 8))
WAVES = (1, 2, 4)  # programs a split aims for, in multiples of the SM count
MIN_K_STEPS = 2  # BLOCK_K steps per slice at the least
REDUCE_BLOCK = 1024
# The CPU interpreter: 32-wide tiles and two slices wherever K allows, so the tests reach both kernels.
CPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT": 2}


@triton.jit
def partial_kernel(a_ptr, b_ptr, ws_ptr, M, N, K, K_PER,
                   stride_am, stride_ak, stride_bk, stride_bn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (tile, s): the fp32 product of its tile's rows of A and columns of B over K's
    slice [s * K_PER, (s + 1) * K_PER), into slice s of the workspace (SPLIT x M x N)."""
    pid, s = tl.program_id(0), tl.program_id(1)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // num_pid_n, pid % num_pid_n
    # Rows and columns past the edge wrap around (as v0): loads stay in bounds, the store drops them.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    k0 = s * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k0, k_end, BLOCK_K):
        k_left = k_end - k
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ws = ws_ptr + s * M * N + offs_cm[:, None] * N + offs_cn[None, :]
    tl.store(ws, acc, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def reduce_relu_kernel(ws_ptr, c_ptr, MN, N, stride_cm, SPLIT, BLOCK: tl.constexpr):
    """Each element of C: its SPLIT partials summed in slice order, ReLU, one cast."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, SPLIT):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + (offs // N) * stride_cm + offs % N, tl.maximum(acc, 0.0).to(c_ptr.dtype.element_ty), mask=mask)


def _split(a, b, c, kw):
    """relu(a @ b) into c through SPLIT slices of K and the workspace."""
    import torch

    M, K = a.shape
    N = b.shape[1]
    split, bk = kw["SPLIT"], kw["BLOCK_K"]
    k_per = triton.cdiv(triton.cdiv(K, split), bk) * bk  # whole BLOCK_K steps per slice
    split = triton.cdiv(K, k_per)  # no slice left empty
    assert split * M * N < 2**31, "int32 offsets into the workspace"
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device)
    tiles = triton.cdiv(M, kw["BLOCK_M"]) * triton.cdiv(N, kw["BLOCK_N"])
    launch = {k: kw[k] for k in ("num_stages", "num_warps") if k in kw}
    partial_kernel[(tiles, split)](a, b, ws, M, N, K, k_per, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                   BLOCK_M=kw["BLOCK_M"], BLOCK_N=kw["BLOCK_N"], BLOCK_K=bk, **launch)
    reduce_relu_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](ws, c, M * N, N, c.stride(0), split,
                                                           BLOCK=REDUCE_BLOCK)
    return c


def candidates(M: int, N: int, K: int, sms: int) -> list:
    """("v1", None), then each split layout that gives the GPU more programs than v1's tiles:
    ("split", its constexprs and launch options), SPLIT >= 2 with MIN_K_STEPS per slice."""
    out = [("v1", None)]
    for bm, bn, bk, stages, warps in SPLIT_TILES:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        most = K // (MIN_K_STEPS * bk)
        for waves in WAVES:
            split = min(triton.cdiv(waves * sms, tiles), most)
            cand = ("split", {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT": split,
                              "num_stages": stages, "num_warps": warps})
            if split >= 2 and split * M * N < 2**31 and cand not in out:
                out.append(cand)
    return out


def matmul_relu(a, b, c, config=None):
    """relu(a @ b) into c: v1's kernel or a split of K, whichever the picker times fastest for
    the shape; `config` (a split's constexprs) forces a split (on the CPU: CPU_CONFIG)."""
    M, K = a.shape
    N = b.shape[1]
    assert M * K < 2**31 and K * N < 2**31 and M * N < 2**31, "int32 offsets"
    if not a.is_cuda:
        triton_interpreter.apply()
        # see v0_tiled: the interpreter's tl.dot cannot take bf16; fp32 copies are exact
        return _split(a.float(), b.float(), c, config or CPU_CONFIG)
    cuda.require(a.device, v1_tma_persistent.NEEDS)  # v1 is a candidate on every shape
    if config is not None:
        return _split(a, b, c, config)

    def run(candidate):
        kind, kw = candidate
        if kind == "v1":
            v1_tma_persistent.matmul_relu(a, b, c)
        else:
            _split(a, b, c, kw)

    tuning.launch_fastest(("v2_split_k", M, N, K, a.dtype, b.dtype, c.dtype),
                          lambda: candidates(M, N, K, tuning.sm_count(a.device)), run, a.device)
    return c
