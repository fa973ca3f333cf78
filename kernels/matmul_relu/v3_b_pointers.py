"""v3_b_pointers: B through pointer loads where its row stride defeats TMA.

Evidence (H100, ncu and a stride sweep, this rung's session): at 3000x5000x4000 v1/v2 ran 0.79x of
relu(A @ B) with 72% of warp stalls on long scoreboard at the K loop (v1 at 4096^3: 1 cycle an
instruction, here 12) and the memory units 80% busy against cuBLAS's 75%. The same kernel and
config (128x256x64, 3 stages) ran 502 TFLOP/s with B's row stride 10000 bytes (16 mod 32), 632
at N = 5008 (a 32-byte multiple), 661 at N = 5056 (a 128-byte multiple); A's stride (8000 bytes,
64 mod 128) cost nothing measurable (cuBLAS 629-668 on all of them). TMA reads a box row that
starts 16 bytes off a 32-byte sector slowly; ordinary loads do not care beyond the sector count.

Change: where B's row stride in bytes is no multiple of 32, the launcher also times a persistent
kernel that keeps TMA for A and C and loads B's tiles with tl.load (cp.async into the same
pipeline stages), its stride and N passed divided by Q (16 bytes of elements at most) as the
norms' v2 does, so the compiler knows each row of the tile starts Q-aligned and moves 16-byte
vectors. Every v2 candidate stays (the picker times them side by side).
Predicts: 3000x5000x4000 >= 0.95x of relu(A @ B) (v2: 0.79x); every member where B's stride is a
32-byte multiple as v2 (the new candidates are not built there).
"""
import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning
from kernlog import cuda

from . import v1_tma_persistent as v1
from . import v2_split_k as v2
from .v1_tma_persistent import _tile_origin

SECTOR = 32  # bytes: a B stride that is a multiple of this keeps v2's candidates only


def _config(bm, bn, bk, stages, warps, split=1):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "EPILOGUE_SPLIT": split,
            "num_stages": stages, "num_warps": warps}


# v1's unflattened configs (the persistent loop is not flattened here: one pipeline per tile).
CONFIGS = (_config(128, 256, 64, 3, 8), _config(128, 256, 64, 4, 8, split=2), _config(256, 128, 64, 3, 8),
           _config(128, 128, 64, 4, 8), _config(128, 128, 64, 5, 8, split=2))
CPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "EPILOGUE_SPLIT": 1}


@triton.jit
def b_pointer_kernel(a_ptr, b_ptr, c_ptr, M, n_q, K, stride_am, stride_bk_q, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     EPILOGUE_SPLIT: tl.constexpr, NUM_SMS: tl.constexpr, Q: tl.constexpr):
    N = n_q * Q  # known multiples of Q: B's rows start Q-aligned and the N mask is constant over Q lanes
    stride_bk = stride_bk_q * Q
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // EPILOGUE_SPLIT])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        off_m, off_n = _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
        n_mask = offs_n[None, :] < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & n_mask, other=0.0)
            acc = tl.dot(a_desc.load([off_m, k]), b, acc)  # TMA zero-fills A past K
            b_ptrs += BLOCK_K * stride_bk
        acc = tl.maximum(acc, 0.0)
        if EPILOGUE_SPLIT == 2:
            left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([off_m, off_n], left.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def quantum(n: int, stride: int, elem_bytes: int) -> int:
    """The largest power of two up to 16 bytes of elements dividing N and B's row stride."""
    q = 16 // elem_bytes
    while q > 1 and (n % q or stride % q):
        q //= 2
    return q


def b_misaligned(b) -> bool:
    """B's row stride is no multiple of a 32-byte sector (TMA's slow case)."""
    return (b.stride(0) * b.element_size()) % SECTOR != 0


def run_b_pointers(a, b, c, kw, num_sms):
    """relu(a @ b) into c by b_pointer_kernel in config `kw` (A and C must suit TMA)."""
    M, K = a.shape
    N = b.shape[1]
    q = quantum(N, b.stride(0), b.element_size())
    launch = {k: v for k, v in kw.items() if k in ("num_stages", "num_warps")}
    consts = {k: v for k, v in kw.items() if k not in launch}
    tiles = triton.cdiv(M, kw["BLOCK_M"]) * triton.cdiv(N, kw["BLOCK_N"])
    b_pointer_kernel[(min(num_sms, tiles),)](a, b, c, M, N // q, K, a.stride(0), b.stride(0) // q, c.stride(0),
                                             NUM_SMS=num_sms, Q=q, **consts, **launch)
    return c


def candidates(a, b, c, sms: int) -> list:
    """v2's candidates, then ("bptr", config) for each of CONFIGS where B's stride is misaligned
    and A and C suit TMA."""
    M, K = a.shape
    N = b.shape[1]
    out = list(v2.candidates(M, N, K, sms))
    if b_misaligned(b) and v1.tma_ok(a, a, c) and b.stride(1) == 1:
        out += [("bptr", kw) for kw in CONFIGS]
    return out


def matmul_relu(a, b, c, config=None):
    """relu(a @ b) into c: the fastest, per shape, of v2's candidates and (B misaligned) the
    B-pointer kernel; `config` forces the B-pointer kernel in that config (CPU: CPU_CONFIG)."""
    if not a.is_cuda:
        triton_interpreter.apply()
        af, bf = a.float(), b.float()  # see v0_tiled: the interpreter's tl.dot cannot take bf16
        if not v1.tma_ok(af, af, c):
            return v2.matmul_relu(a, b, c)
        return run_b_pointers(af, bf, c, config or CPU_CONFIG, 4)
    cuda.require(a.device, v1.NEEDS)
    v1._ensure_allocator()
    sms = tuning.sm_count(a.device)
    if config is not None:
        return run_b_pointers(a, b, c, config, sms)
    M, K = a.shape
    N = b.shape[1]

    def run(candidate):
        kind, kw = candidate
        if kind == "bptr":
            run_b_pointers(a, b, c, kw, sms)
        elif kind == "v1":
            v1.matmul_relu(a, b, c)
        else:
            v2._split(a, b, c, kw)

    tuning.launch_fastest(("v3_b_pointers", M, N, K, a.dtype, b.dtype, c.dtype, b.stride(0)),
                          lambda: candidates(a, b, c, sms), run, a.device)
    return c
