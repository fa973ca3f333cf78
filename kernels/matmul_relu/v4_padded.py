"""v4_padded: where a row stride defeats TMA (an odd N such as GPT-2's 50257-token LM head),
copy the operand into a padded buffer and keep TMA for both loads.

Evidence: at 4096x50257x768 every earlier revision fell back to v0's pointer kernel (C's and
B's row strides, 100514 bytes, are no multiple of 16: no TMA descriptor takes them) and B's
rows start on 2-byte boundaries, so each load moves one element: 151 TFLOP/s against
torch.compile's 395, which pads B the same way before cuBLAS (Inductor's padded mm).
Change: B (and A, where K is odd) copied once per call into a buffer whose rows are a multiple
of 128 bytes (TMA's fast case, v3's evidence); the descriptors keep the true N and K, so TMA
zero-fills the pad and nothing reads it uninitialized. A persistent program per SM loads A
and B by TMA and stores C (whose stride stays odd) with masked pointer stores. The picker
times these beside v3's candidates, which stay the only ones where every stride suits TMA.
Predicts: 4096x50257x768 >= 0.95x of torch.compile (the faster reference there); the copy
costs K x N x 2 bytes twice (~0.05 ms at K = 768, ~10% of the matmul).
"""
import triton
import triton.language as tl

from kernels.common import triton_interpreter, tuning
from kernlog import cuda

from . import v1_tma_persistent as v1
from . import v3_b_pointers as v3
from .v1_tma_persistent import _tile_origin

PAD = 64  # elements: rows of 128 bytes in bf16


def _config(bm, bn, bk, stages, warps):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_stages": stages, "num_warps": warps}


# No C staging buffer (pointer stores): a stage more than v1's configs of the same tiles fits.
CONFIGS = (_config(128, 256, 64, 4, 8), _config(128, 256, 64, 3, 8), _config(256, 128, 64, 4, 8),
           _config(128, 128, 64, 5, 8), _config(128, 128, 64, 4, 4))
CPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2}


@triton.jit
def padded_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  NUM_SMS: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        off_m, off_n = _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([k, off_n]), acc)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, tl.maximum(acc, 0.0).to(c_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _padded(t):
    """`t` itself if its rows suit TMA, else a copy whose row stride is a multiple of PAD
    elements (the pad columns left unwritten: the descriptor's shape keeps TMA off them)."""
    import torch

    if t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0:
        return t
    rows, cols = t.shape
    buf = torch.empty((rows, triton.cdiv(cols, PAD) * PAD), dtype=t.dtype, device=t.device)
    view = buf[:, :cols]
    view.copy_(t)
    return view


def needs_pad(a, b) -> bool:
    """A or B has a row stride (or base) TMA cannot take."""
    return not v1.tma_ok(a, b, a)


def run_padded(a, b, c, kw, num_sms):
    """relu(a @ b) into c by padded_kernel in config `kw`, A and B padded where they must be."""
    M, K = a.shape
    N = b.shape[1]
    ap, bp = _padded(a), _padded(b)
    launch = {k: v for k, v in kw.items() if k in ("num_stages", "num_warps")}
    consts = {k: v for k, v in kw.items() if k not in launch}
    tiles = triton.cdiv(M, kw["BLOCK_M"]) * triton.cdiv(N, kw["BLOCK_N"])
    padded_kernel[(min(num_sms, tiles),)](ap, bp, c, M, N, K, ap.stride(0), bp.stride(0), c.stride(0),
                                          NUM_SMS=num_sms, **consts, **launch)
    return c


def candidates(a, b, c, sms: int) -> list:
    """("v3", None) (v3 picking among its own), then ("pad", config) for each of CONFIGS where
    A or B needs a pad."""
    out = [("v3", None)]
    if needs_pad(a, b) and a.stride(1) == 1 and b.stride(1) == 1:
        out += [("pad", kw) for kw in CONFIGS]
    return out


def matmul_relu(a, b, c, config=None):
    """relu(a @ b) into c: the fastest, per shape, of v3's candidates and (a stride TMA cannot
    take) the padded kernel; `config` forces the padded kernel in that config (CPU: CPU_CONFIG)."""
    M, K = a.shape
    N = b.shape[1]
    assert M * K < 2**31 and K * N < 2**31 and M * N < 2**31, "int32 offsets"
    if not a.is_cuda:
        triton_interpreter.apply()
        # see v0_tiled: the interpreter's tl.dot cannot take bf16; fp32 copies are exact
        return run_padded(a.float(), b.float(), c, config or CPU_CONFIG, 4)
    cuda.require(a.device, v1.NEEDS)
    v1._ensure_allocator()
    sms = tuning.sm_count(a.device)
    if config is not None:
        return run_padded(a, b, c, config, sms)

    def run(candidate):
        kind, kw = candidate
        if kind == "pad":
            run_padded(a, b, c, kw, sms)
        else:
            v3.matmul_relu(a, b, c)

    tuning.launch_fastest(("v4_padded", M, N, K, a.dtype, b.dtype, c.dtype, a.stride(0), b.stride(0)),
                          lambda: candidates(a, b, c, sms), run, a.device)
    return c
