"""v1_tuned: v0_fused's backward kernels with every layout picked per shape, after attention's
v2_tuned forward.

Change: v0_fused took each kernel's (BLOCK_M, BLOCK_N, warps, stages) from a table written
before any GPU ran it. Here the forward is attention's v2_tuned (the causal loop split in two,
its layout picked per shape), asked for the log-sum-exp, and the dk/dv and dq kernels each
pick their layout per (B, H, T, D, dtype) with kernels.common.tuning, each kernel timed alone
on the shape's own inputs. The candidates are the fastest of 48 layouts per kernel timed on
an H200 in bf16 (triton.testing.do_bench, each kernel alone; 2026-11-28):

| shape | dk/dv: v0's table | fastest | dq: v0's table | fastest |
| --- | --- | --- | --- | --- |
| 1x32x4096x128 | (32, 64, 8, 3) | (64, 64, 4, 2) 551 us | (64, 32, 8, 3) | (128, 64, 8, 4) 415 us |
| 4x16x2048x64 | (32, 128, 4, 5) | (32, 64, 4, 4) 201 us | (128, 32, 4, 5) | (64, 64, 4, 3) 121 us |
| 1x12x1024x64 | (32, 128, 4, 5) | (64, 64, 4, 2) 28.8 us | (128, 32, 4, 5) | (64, 64, 4, 4) 19.8 us |

At head dim 128 v0's 8-warp layouts were among the slowest (v0's whole forward and backward
3063 us against SDPA's 1044). A layout that does not fit the GPU (shared memory, registers)
is dropped before the timing. fp32 has no measured candidates yet: v0's table first, then
layouts of the same size. On the CPU, v0_fused's fixed interpreter layouts.
Predicts: at (1, 32, 4096, 128) bf16 >= 2x v0_fused and >= 0.7x SDPA's forward + backward; at
(1, 12, 1024, 64) no slower than v0_fused.
"""
import torch
import triton
from triton.runtime.errors import OutOfResources

from kernels.attention import v1_flash, v2_tuned
from kernels.common import tuning
from kernlog import cuda

from . import v0_fused as v0

# (dk/dv layouts, dq layouts) per dtype, each (BLOCK_M, BLOCK_N, warps, stages): the first wins a tie
CANDIDATES = {
    "bf16": ([(64, 64, 4, 2), (32, 64, 4, 4), (64, 64, 4, 3), (32, 64, 4, 3)],
             [(128, 64, 8, 4), (64, 64, 4, 4), (64, 64, 4, 3), (64, 32, 4, 3)]),
    "fp32": ([(32, 64, 4, 2), (16, 64, 8, 2), (32, 32, 4, 2), (64, 64, 4, 2)],
             [(64, 32, 4, 2), (64, 16, 8, 2), (32, 32, 4, 2), (64, 64, 4, 2)]),
}


def forward(q, k, v, scale):
    """v2_tuned's forward: o in fp32 and each row's natural-log lse, fp32 (B, H, T)."""
    o = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    v2_tuned.attention(q, k, v, scale, o, lse=lse)
    return o, lse


def _launches(q, k, v, do, scale, lse, delta, out):
    """(dk/dv's launch, dq's launch), each taking a layout."""
    B, H, T, D = q.shape
    dq, dk, dv = out[..., :D], out[..., D:2 * D], out[..., 2 * D:]
    common = (T, H, scale * v1_flash.LOG2E, scale, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
              *do.stride()[:3], *out.stride()[:3])
    precision = "ieee" if q.dtype.itemsize == 4 else "tf32"  # as v0_fused: bf16's products are exact either way

    def dkdv(c):
        bm, bn, warps, stages = c
        v0._bwd_dkdv_kernel[(triton.cdiv(T, bn), B * H)](q, k, v, do, lse, delta, dk, dv, *common, D=D, BLOCK_M=bm,
                                                         BLOCK_N=bn, PRECISION=precision, num_warps=warps,
                                                         num_stages=stages)

    def dq_(c):
        bm, bn, warps, stages = c
        v0._bwd_dq_kernel[(triton.cdiv(T, bm), B * H)](q, k, v, do, lse, delta, dq, *common, D=D, BLOCK_M=bm,
                                                       BLOCK_N=bn, PRECISION=precision, num_warps=warps,
                                                       num_stages=stages)
    return dkdv, dq_


# Every candidate here, in v2_split's two loop forms and v3_ordered's grid, at head dims 16-128 in
# fp32 and bf16, fits a Hopper block: 416 of 416 compiled and launched on an H200 (2026-11-29), none
# over its shared memory or registers. Launching each to learn that was most of a cold gate, whose
# picks are untimed and so need one compile a key: every candidate at every gate shape, over 330 s
# on the H200 for v3_ordered.
FITS_SM90 = 227 * 1024  # bytes of shared memory a block may opt in to on the H100 and H200


def fitting(launch, layouts, device=None) -> list:
    """The layouts `launch` runs on `device`: every one on a Hopper GPU with FITS_SM90 bytes of
    shared memory a block, none launched; elsewhere (or `device` None) each is launched once and
    one that Triton finds too big for the GPU's shared memory or registers is dropped (each kept
    one has run once, its output written again later)."""
    if device is not None and getattr(device, "type", None) == "cuda":
        caps = cuda.device_caps(device)
        if caps.capability[0] == 9 and caps.smem_per_block_optin >= FITS_SM90:
            return list(layouts)
    kept = []
    for c in layouts:
        try:
            launch(c)
        except OutOfResources:
            continue
        kept.append(c)
    return kept


def attention_backward(q, k, v, do, scale, out):
    """v0_fused.attention_backward's contract: dq | dk | dv into out (B, H, T, 3 D)."""
    v0.check_args(q, k, v, do, out)
    q, k, v, do = (t if t.stride(-1) == 1 else t.contiguous() for t in v0.on_device(q, k, v, do, out))
    o, lse = forward(q, k, v, scale)
    delta = v0.preprocess(o, do, out)
    if not out.is_cuda:
        return v0.backward(q, k, v, do, scale, lse, delta, out)
    B, H, T, D = q.shape
    key = (B, H, T, D, q.dtype)
    dkdv_layouts, dq_layouts = CANDIDATES[v0.dtype_name(q)]
    dkdv, dq = _launches(q, k, v, do, scale, lse, delta, out)
    tuning.launch_fastest(("attention_backward_dkdv", *key), lambda: fitting(dkdv, dkdv_layouts, q.device), dkdv,
                          q.device)
    tuning.launch_fastest(("attention_backward_dq", *key), lambda: fitting(dq, dq_layouts, q.device), dq, q.device)
    return out
