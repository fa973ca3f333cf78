"""Causal multi-head self-attention, backward: dq, dk, dv of o = softmax(q k^T * scale, causal) v.

Inputs are (q, k, v, do, scale), q, k, v and the output gradient do of shape (B, H, T, D),
contiguous, bf16 or fp32. The output is one tensor, (B, H, T, 3 D) in the input dtype: each
token's dq | dk | dv side by side along the last dimension. Shapes are (B, H, T, D), the
forward's. Every revision runs the forward it needs and then the backward, as a training step
does when nothing of the forward is kept: the fused one runs attention's v1_flash kernel for o
and each row's log-sum-exp, then its backward kernels; the references run their forward under
autograd and then torch.autograd.grad. So all of them do the same work, forward + backward.

Why dq | dk | dv along the last dimension and not stacked, (3, B, H, T, D): the gate checks
each row of the last dimension against its own norm, and query 0, which sees key 0 alone, has
dq = 0 exactly (its softmax is the constant 1). Stacked, that row is all zero, held to exact
zeros, and SDPA's delta = rowsum(do * o) leaves 6e-8 in it (CPU, fp32): it failed at every seed.
And dq rows of the first few queries are small differences (their ds sums to zero over two or
three keys): PyTorch's eager math in bf16, its dp rounded before the difference, put them up to
1.4x off their own norm. Beside their token's dk and dv, each row is one token's gradients, the
zero dq is a third of a row that is not zero, and the same eager math stays within 1.7e-2.

The ladder: v0_fused, the FlashAttention-2 backward in Triton (a preprocess for rowsum(do * o),
one kernel over key blocks for dk and dv, one over query blocks for dq), and wrong_no_delta, the
same without the preprocess (role "wrong": the gate must reject it). References: the eager math
with autograd (`torch`), torch.compile of it, and F.scaled_dot_product_attention's forward and
backward (`torch_sdpa`, FlashAttention-2 or cuDNN on the GPU), the speed bar: 0.8x of it, the
forward's bar (a first Triton FlashAttention-2 backward, like Triton's tutorial kernel, runs at
about 0.6-0.8x of the CUDA FlashAttention-2's on Hopper).

flops: the forward's two products, 2 B H T T D causal-halved as attention counts them, and the
backward's five (q k^T again, dp = do v^T, dv = p^T do, dk = ds^T q, dq = ds k), 2.5x that:
7 B H T T D in all, the same count for every revision. bytes_moved: q, k, v and do read once,
dq, dk, dv written once, 7 B H T D elements; o, the log-sum-exps and the rows' delta that the
fused kernels keep between launches are left out, as the T x T scores are.
"""
from __future__ import annotations

from pathlib import Path

from kernels.attention import FAMILIES, SPEED_BAR, refuses_head_dim
from kernels.common import TUNING_SOURCE, LazyModule, triton_interpreter
from kernlog import cuda as kernlog_cuda
from kernlog.frameworks import references
from kernlog.spec import DTYPE_BYTES, Kernel, Revision, torch_dtype

torch = LazyModule("torch", globals())
F = LazyModule("torch.nn.functional", globals())
HERE = Path(__file__).resolve().parent
FLASH = HERE.parent / "attention" / "v1_flash.py"  # the forward kernel v0_fused launches
# v2_split's forward: attention's v5_persistent (CUDA C, its includes followed by the hash) and what it picks among
FORWARD_V5 = tuple(HERE.parent / "attention" / f for f in ("cuda/v5_persistent.cu", "v5_persistent.py",
                                                           "cuda/v4_wgmma.cu", "v4_wgmma.py", "v3_fma.py",
                                                           "v2_tuned.py"))
CUDA_BUILD = (HERE.parent / "matmul_relu" / "cuda_launch.py", Path(kernlog_cuda.__file__).resolve())
INTERPRETER_SOURCE = Path(triton_interpreter.__file__).resolve()


def make_inputs(shape, dtype, gen, device, case="random"):
    q, k, v, do = (torch.randn(shape, generator=gen, device=gen.device).to(device=device, dtype=torch_dtype(dtype))
                   for _ in range(4))
    return (q, k, v, do, shape[-1] ** -0.5)


def make_output(inputs):
    B, H, T, D = inputs[0].shape
    return torch.empty((B, H, T, 3 * D), dtype=inputs[0].dtype, device=inputs[0].device)


def reference(inputs, out=None):
    """float64 on the inputs' device, autograd through the eager math: at the largest bench shape,
    (1, 32, 4096, 128), autograd keeps a few 32 x 4096^2 float64 tensors, 4.3 GB each."""
    q, k, v = (t.detach().to(torch.float64).requires_grad_() for t in inputs[:3])
    T = q.shape[-2]
    above = torch.ones((T, T), dtype=torch.bool, device=q.device).triu(1)
    scores = (q @ k.transpose(-2, -1)) * inputs[4]
    o = torch.softmax(scores.masked_fill(above, float("-inf")), dim=-1) @ v
    return torch.cat(torch.autograd.grad(o, (q, k, v), inputs[3].to(torch.float64)), dim=-1)


def bytes_moved(shape, dtype):
    B, H, T, D = shape
    return 7 * B * H * T * D * DTYPE_BYTES[dtype]


def flops(shape):
    B, H, T, D = shape
    return 7 * B * H * T * T * D


def eager_grads(q, k, v, do, scale):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    T = q.shape[-2]
    above = torch.ones((T, T), dtype=torch.bool, device=q.device).triu(1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    o = torch.matmul(torch.softmax(scores.masked_fill(above, float("-inf")), dim=-1), v)
    return torch.cat(torch.autograd.grad(o, (q, k, v), do), dim=-1)


def compiled_grads(compile):
    """torch_compile's function: the forward's eager math compiled, so AOTAutograd compiles its
    backward as well, and the gradient taken by autograd around it. eager_grads compiled whole
    compiles nothing: Dynamo breaks its graph where the gradient is taken and runs the rest
    eagerly (on the H200 its profile was eager's kernels, 273 us to eager's 274)."""
    def forward(q, k, v, scale):
        T = q.shape[-2]
        above = torch.ones((T, T), dtype=torch.bool, device=q.device).triu(1)
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        return torch.matmul(torch.softmax(scores.masked_fill(above, float("-inf")), dim=-1), v)

    fn = compile(forward)

    def grads(q, k, v, do, scale):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        return torch.cat(torch.autograd.grad(fn(q, k, v, scale), (q, k, v), do), dim=-1)

    return grads


def sdpa_grads(q, k, v, do, scale):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return torch.cat(torch.autograd.grad(o, (q, k, v), do), dim=-1)


def _load_v0():
    from .v0_fused import attention_backward

    return lambda inputs, out: attention_backward(*inputs, out)


def _load_v1():
    from .v1_tuned import attention_backward

    return lambda inputs, out: attention_backward(*inputs, out)


def _load_v2():
    from .v2_split import attention_backward

    return lambda inputs, out: attention_backward(*inputs, out)


def _load_v3():
    from .v3_ordered import attention_backward

    return lambda inputs, out: attention_backward(*inputs, out)


def _load_wrong():
    from .wrong_no_delta import attention_backward

    return lambda inputs, out: attention_backward(*inputs, out)


def _load_sdpa():
    return lambda inputs, out: sdpa_grads(*inputs)


REVISIONS = (
    Revision("v0_fused", "triton", (HERE / "v0_fused.py", FLASH, INTERPRETER_SOURCE), _load_v0,
             "v1_flash's forward keeping each row's log-sum-exp, then the FlashAttention-2 backward in three "
             "kernels: delta = rowsum(do * o); a program per key block (k, v, dk, dv in registers) walking the "
             "query blocks from its diagonal down; a program per query block (q, do, dq) walking the key blocks "
             "up to its diagonal; p recomputed from the log-sum-exp, masks on diagonal blocks only, no atomics",
             ">= 0.5x SDPA's forward + backward at (1, 12, 1024, 64) bf16", refuses=refuses_head_dim),
    Revision("v1_tuned", "triton", (HERE / "v1_tuned.py", HERE / "v0_fused.py", FLASH, FLASH.parent / "v2_tuned.py",
                                    TUNING_SOURCE, INTERPRETER_SOURCE), _load_v1,
             "attention's v2_tuned forward (the causal loop split, its layout picked per shape) keeping the "
             "log-sum-exp, and the dk/dv and dq kernels' layouts picked per shape by kernlog's picker, each "
             "kernel timed alone, among the fastest of 48 timed on an H200, where v0 had a fixed table",
             ">= 2x v0_fused and >= 0.7x SDPA's forward + backward at (1, 32, 4096, 128) bf16; no slower than "
             "v0_fused at (1, 12, 1024, 64)", refuses=refuses_head_dim),
    Revision("v2_split", "triton", (HERE / "v2_split.py", HERE / "v1_tuned.py", HERE / "v0_fused.py", FLASH,
                                    *FORWARD_V5, *CUDA_BUILD, TUNING_SOURCE, INTERPRETER_SOURCE), _load_v2,
             "v1_tuned with both backward kernels' causal loops split in two among the candidates: the blocks "
             "off the diagonal with no mask, those that cross it masked (one inner loop, instantiated twice by a "
             "constexpr flag), each kernel's picker timing the split and the whole loop at v1's layouts; the "
             "forward attention's v5_persistent (its CUDA C kernels on Hopper in bf16, v3_fma's loop "
             "elsewhere), o kept in the input dtype for delta",
             ">= 1.05x v1_tuned at (1, 32, 4096, 128) bf16; no slower than v1_tuned at (1, 12, 1024, 64) bf16",
             refuses=refuses_head_dim),
    Revision("v3_ordered", "triton", (HERE / "v3_ordered.py", HERE / "v2_split.py", HERE / "v1_tuned.py",
                                      HERE / "v0_fused.py", FLASH, *FORWARD_V5, *CUDA_BUILD, TUNING_SOURCE,
                                      INTERPRETER_SOURCE), _load_v3,
             "v2_split's kernels with their programs on one grid axis, ordered longest first across groups of "
             "heads (block 0 of every head in a group, then block 1), the group size (1, 4 or every head) picked "
             "per shape with v2's loop forms and layouts; delta = rowsum(do * o) computed by the dq kernel, "
             "launched first, where v2 had a preprocess launch",
             ">= 1.04x v2_split at (1, 16, 8192, 128) bf16; no slower than v2_split at (1, 12, 1024, 64) bf16",
             refuses=refuses_head_dim),
    Revision("wrong_no_delta", "triton", (HERE / "wrong_no_delta.py", HERE / "v0_fused.py", FLASH, INTERPRETER_SOURCE),
             _load_wrong, "v0_fused with the preprocess never launched: delta left zero",
             refuses=refuses_head_dim, role="wrong",
             bug="ds = p * dp: the -p * rowsum(do * o) term of the softmax's gradient dropped, so dq and dk are "
                 "off by p delta summed over keys (dv is right)"),
    *references(eager_grads, HERE / "__init__.py",
                "the math, eager, under autograd: q k^T, masked_fill, softmax, @ v, then torch.autograd.grad "
                "(the T x T scores, probabilities and their gradients through DRAM)",
                "torch.compile of the eager math's forward, its gradient by autograd (AOTAutograd compiles the "
                "backward with it: Inductor fuses the masks and the softmax and its gradient; the products are "
                "cuBLAS's)", compiled_op=compiled_grads),
    Revision("torch_sdpa", "torch", (HERE / "__init__.py",), _load_sdpa,
             "F.scaled_dot_product_attention(is_causal=True) under autograd, then torch.autograd.grad: PyTorch's "
             "fused attention forward and backward, whichever backend it picks (the profiled kernels name it)",
             role="reference", code=sdpa_grads),
)


KERNEL = Kernel(
    name="attention_backward",
    revisions=REVISIONS,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    flops=flops,
    ceiling="matmul",
    # attention's: odd T (no block's multiple), one and several heads and batches, every head dim
    # the kernel takes; v0_fused's whole CPU gate runs in the interpreter in seconds.
    check_shapes=((1, 1, 17, 16), (2, 3, 33, 64), (1, 2, 130, 32), (1, 1, 40, 128)),
    bench_shapes=((1, 12, 1024, 64), (8, 12, 1024, 64), (4, 16, 2048, 64), (1, 32, 4096, 128)),
    profile_shape=(1, 12, 1024, 64),
    dtypes=("fp32", "bf16"),
    # the sweeps and their bar are bf16's: in fp32 every rung past v2 runs v3_fma's loop, and
    # SDPA's fp32 kernels are not what the bar measures against
    sweep_dtypes=("bf16",),
    sweep_axis=2,
    families=FAMILIES,  # attention's: the forward's shapes are the backward's
    speed_bar=SPEED_BAR,  # attention's: 0.95x of this kernel's torch_sdpa
    # bf16: PyTorch's eager math under autograd rounds the scores, the probabilities and dp to bf16
    # before the softmax's gradient takes dp - delta, a difference of near-equal terms: 3600 draws
    # at the check shapes (CPU; seeds 0-299 and 1000-1599) reached 5.4e-3 of the whole (under
    # the default 1e-2), 2.0e-2 of a row and 1.45e-1 of a row's mean |ref| on one element, over
    # the defaults (1e-2, 2^-7); SDPA's on the CPU 1.9e-2 and 1.04e-1; up to (1, 2, 1024, 64) and
    # (1, 2, 512, 128), 5 draws each, 1.9e-2 and 1.1e-1. v0_fused in the interpreter (fp32
    # products there; 100 draws) stays within the defaults, 3.7e-3 of the whole and 5.2e-3 of a
    # row; a torch model of it on the GPU (p and ds rounded to bf16 for the products) within
    # 5.5e-3 of a row and 3.3e-2 of the row mean. wrong_no_delta lands at 0.45-0.85 of the whole.
    tolerance={"bf16": {"row": 3e-2, "atol": 2**-2}},
    doc=__doc__,
)
