"""C = relu(A @ B) with A (M, K), B (K, N) row-major bf16, fp32 accumulation, bf16 C.

Shapes are (M, N, K). The ReLU rides in the matmul's epilogue; the reference pays a second
pass over C for it. K need not be a multiple of any tile (the check shapes make sure).
"""
from __future__ import annotations

from pathlib import Path

from kernels.common import TUNING_SOURCE, LazyModule
from kernels.matmul_relu.cuda_ladder import CUDA_REVISIONS
from kernlog.frameworks import references
from kernlog.library import ClassRule
from kernlog.spec import DTYPE_BYTES, Family, Kernel, Revision, SpeedBar, torch_dtype

torch = LazyModule("torch", globals())
HERE = Path(__file__).resolve().parent


def make_inputs(shape, dtype, gen, device, case="random"):
    M, N, K = shape
    a = torch.randn((M, K), generator=gen, device=gen.device)
    b = torch.randn((K, N), generator=gen, device=gen.device)
    return tuple(t.to(device=device, dtype=torch_dtype(dtype)) for t in (a, b))


def make_output(inputs):
    a, b = inputs
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def reference(inputs, out=None):
    a, b = (t.detach().to(torch.float64) for t in inputs)
    return torch.relu(a @ b)


def bytes_moved(shape, dtype):
    M, N, K = shape
    return (M * K + K * N + M * N) * DTYPE_BYTES[dtype]


def flops(shape):
    M, N, K = shape
    return 2 * M * N * K


def _load_v0():
    from .v0_tiled import matmul_relu

    return lambda inputs, out: matmul_relu(inputs[0], inputs[1], out)


def _load_v1():
    from .v1_tma_persistent import matmul_relu

    return lambda inputs, out: matmul_relu(inputs[0], inputs[1], out)


def _load_v2():
    from .v2_split_k import matmul_relu

    return lambda inputs, out: matmul_relu(inputs[0], inputs[1], out)


def _load_v3():
    from .v3_b_pointers import matmul_relu

    return lambda inputs, out: matmul_relu(inputs[0], inputs[1], out)


def _load_v4():
    from .v4_padded import matmul_relu

    return lambda inputs, out: matmul_relu(inputs[0], inputs[1], out)


# The CUDA C ladder (cu0-cu7, cuda_ladder.py) first, naive to wgmma, then the Triton revisions.
REVISIONS = (
    *CUDA_REVISIONS,
    Revision("v0_tiled", "triton", (HERE / "v0_tiled.py", TUNING_SOURCE), _load_v0,
             "tiled tl.dot, grouped program order (GROUP_M=8), ReLU + bf16 cast in the epilogue; "
             "tiles and stages autotuned",
             "~90-100% of cuBLAS: ~580-650 TFLOP/s at 4096^3; tensor pipe the busiest unit"),
    Revision("v1_tma_persistent", "triton", (HERE / "v1_tma_persistent.py", HERE / "v0_tiled.py", TUNING_SOURCE),
             _load_v1,
             "TMA descriptors for A, B, C (hardware bounds and zero-fill) and one persistent program "
             "per SM walking the tiles in grouped order; v0 for shapes TMA cannot take",
             ">= cuBLAS at 2048^3-8192^3, ~650-700 TFLOP/s at 4096^3; fewer issued instructions per tile"),
    Revision("v2_split_k", "triton", (HERE / "v2_split_k.py", HERE / "v1_tma_persistent.py", HERE / "v0_tiled.py",
                                      TUNING_SOURCE), _load_v2,
             "split-K layouts timed beside v1: tiles x slices of K write fp32 partials, a second kernel sums them "
             "in order, applies the ReLU and casts once; small tiles for skinny M",
             "large_k and decode members >= 0.95x of relu(A @ B) (v1: 0.15-0.39x and 0.70-0.75x); every other "
             "member as v1"),
    Revision("v3_b_pointers", "triton", (HERE / "v3_b_pointers.py", HERE / "v2_split_k.py",
                                         HERE / "v1_tma_persistent.py", HERE / "v0_tiled.py", TUNING_SOURCE), _load_v3,
             "where B's row stride is no multiple of 32 bytes (TMA's slow case: v1 502 TFLOP/s at N = 5000 against "
             "661 at 5056), a persistent kernel that keeps TMA for A and C and loads B with 16-byte pointer loads "
             "(stride passed divided by 8) is timed beside v2's candidates",
             "3000x5000x4000 >= 0.95x of relu(A @ B) (v2: 0.79x); members with a 32-byte-multiple B stride as v2"),
    Revision("v4_padded", "triton", (HERE / "v4_padded.py", HERE / "v3_b_pointers.py", HERE / "v2_split_k.py",
                                     HERE / "v1_tma_persistent.py", HERE / "v0_tiled.py", TUNING_SOURCE), _load_v4,
             "where A's or B's row stride is no multiple of 16 bytes (an odd N: GPT-2's LM head), the operand copied "
             "into a buffer padded to 128-byte rows so TMA loads both, C stored by masked pointer stores; timed "
             "beside v3",
             "4096x50257x768 >= 0.95x of torch.compile (v3: 0.38x); members TMA takes as v3"),
    *references(lambda a, b: torch.relu(a @ b), HERE / "__init__.py",
               "torch.relu(A @ B), eager: cuBLAS then a separate ReLU pass",
               "torch.compile of relu(A @ B): cuBLAS with Inductor's ReLU kernel"),
)

# Issue 20's shape families, (M, N, K); `check`: small versions the gate checks everywhere
# (bench gates every member at full size on the GPU).
FAMILIES = (
    Family("unaligned", "sizes that are no tile's multiple: 1000^3; 3000 x 5000 x 4000 (TMA-aligned, tails in "
           "M and N); 2047 x 2049 x 2048",
           ((1000, 1000, 1000), (3000, 5000, 4000), (2047, 2049, 2048)),
           check=((33, 257, 48), (100, 136, 88), (31, 49, 77))),
    Family("lm_head", "a language model's head over 4096 tokens: GPT-2 small and XL (50257 columns, odd: no "
           "TMA stride), Llama 3.2 1B and Llama 3 8B (128256), Qwen2.5 0.5B and 7B (151936)",
           ((4096, 50257, 768), (4096, 50257, 1600), (4096, 128256, 2048), (4096, 128256, 4096),
            (4096, 151936, 896), (4096, 151936, 3584)),
           check=((33, 201, 40), (20, 129, 24))),
    Family("decode", "skinny M, a decode step of 1 to 64 tokens through Llama 2 7B's layers: attention "
           "projection (4096 x 4096), MLP up (11008 x 4096) and down (4096 x 11008), a fused QKV (12288)",
           ((1, 4096, 4096), (8, 11008, 4096), (32, 4096, 11008), (64, 12288, 4096)),
           check=((1, 264, 136), (8, 72, 200))),
    Family("large_k", "large K with small M x N (split-K territory: too few output tiles to fill the GPU)",
           ((256, 256, 65536), (512, 512, 16384), (128, 1024, 32768)),
           check=((16, 16, 2056), (24, 40, 1032))),
    Family("square", "square sizes: the bar is cuBLAS itself (1.0x) from 2048 up",
           ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192))),
)

# The library's shape classes: each axis in half octaves, so 3072 is not 4096's class (on the H200 the
# 192x192 tile won at 3072^3 and lost at 4096^3, where a power-of-two class had them share a pick).
DISPATCH_CLASSES = ClassRule(("M", "N", "K"), (1, 2), per_octave=2)


def bar_ratio(shape) -> float:
    """The bar: 0.95x of the faster of relu(A @ B) (cuBLAS, then ReLU) and torch.compile on every
    member, 1.0x on squares from 2048 up, where cuBLAS is at its best and a tuned kernel has no
    excuse."""
    m, n, k = shape
    return 1.0 if m == n == k >= 2048 else 0.95


KERNEL = Kernel(
    name="matmul_relu",
    revisions=REVISIONS,
    families=FAMILIES,
    speed_bar=SpeedBar(against=("torch", "torch_compile"), ratio=bar_ratio, label="faster of relu(A@B), compile"),
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    flops=flops,
    ceiling="matmul",
    # K is never a multiple of BLOCK_K (32 on the CPU, 64/128 on the GPU). M, N odd ones take
    # v1's v0 fallback (TMA needs K, N % 8 == 0); the last two reach v1's TMA path, the last
    # with several tiles per persistent program on the CPU.
    check_shapes=((1, 1, 1), (5, 3, 70), (33, 47, 70), (64, 65, 129), (48, 88, 136), (130, 264, 72)),
    bench_shapes=((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (3072, 3072, 3072),
                  (4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192)),
    profile_shape=(4096, 4096, 4096),
    dtypes=("bf16",),
    sweep_axis=0,
    doc=__doc__,
)
