"""Elementwise out = x + y over a contiguous 1-D tensor, fp32 and bf16.

The bandwidth floor of the library: three streams (two reads, one write) and no math. The
ladder is CUDA C (one element per thread, then 16-byte vectors in a grid-stride loop), the
Triton counterpart, and the framework references. The "offset" case starts both inputs one
element past a 16-byte boundary, which sends v1_vec down its scalar path.
"""
from __future__ import annotations

from pathlib import Path

from kernels.common import TUNING_SOURCE, LazyModule
from kernlog.frameworks import references
from kernlog.spec import DTYPE_BYTES, Kernel, Revision, torch_dtype

torch = LazyModule("torch", globals())
HERE = Path(__file__).resolve().parent
THREADS = 256  # matches THREADS in v1_vec.cu and v2_chunks.cu
BLOCKS_PER_SM = 8  # matches BLOCKS_PER_SM in v1_vec.cu: 2048 threads, a full H100 SM
# match BLOCKS_PER_SM (its __launch_bounds__: <= 64 registers; a grid of one block per chunk
# does not depend on it) and UNROLL in v2_chunks.cu
V2_BLOCKS_PER_SM, V2_UNROLL = 4, 4


def make_inputs(shape, dtype, gen, device, case="random"):
    (n,) = shape
    skip = 1 if case == "offset" else 0
    x, y = (torch.randn(n + skip, generator=gen, device=gen.device) for _ in range(2))
    return tuple(t.to(device=device, dtype=torch_dtype(dtype))[skip:] for t in (x, y))


def make_output(inputs):
    return torch.empty_like(inputs[0])


def reference(inputs, out=None):
    x, y = (t.detach().to(torch.float64) for t in inputs)
    return x + y


def bytes_moved(shape, dtype):
    return 3 * shape[0] * DTYPE_BYTES[dtype]


def _load_cuda(filename: str, grid_stride: bool, vectors_per_thread: int = 0):
    """One launcher for the CUDA C revisions: they export add_fp32 / add_bf16 with the same
    signature and differ only in how many elements a thread covers. `vectors_per_thread`
    (v2: UNROLL) sizes the grid by 16-byte vectors per block instead of elements; 0 keeps
    v0/v1's one element per thread."""

    def load():
        import numpy

        from kernlog import cuda

        fns = cuda.load_module(HERE / filename, ("add_fp32", "add_bf16"))
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

        def launch(inputs, out):
            x, y = inputs
            assert x.is_contiguous() and y.is_contiguous() and out.is_contiguous()
            n = out.numel()
            per_block = THREADS * vectors_per_thread * (16 // out.element_size()) if vectors_per_thread else THREADS
            blocks = -(-n // per_block)
            if grid_stride:
                blocks = min(blocks, sms * BLOCKS_PER_SM)
            fn = fns["add_fp32" if out.dtype == torch.float32 else "add_bf16"]
            cuda.launch(fn, (blocks,), (THREADS,), (cuda.ptr(x), cuda.ptr(y), cuda.ptr(out), numpy.int64(n)))
            return out

        return launch

    return load


def _load_triton():
    from .add_triton import add

    return lambda inputs, out: add(inputs[0], inputs[1], out)


REVISIONS = (
    Revision("v0_naive", "cuda", (HERE / "v0_naive.cu",), _load_cuda("v0_naive.cu", False),
             "one element per thread, 4-byte (fp32) / 2-byte (bf16) loads",
             "dram throughput ~80-90% of copy bw (fp32), ~75-85% (bf16): coalesced but many LSU instructions"),
    Revision("v1_vec", "cuda", (HERE / "v1_vec.cu",), _load_cuda("v1_vec.cu", True),
             "16-byte vector loads/stores in a grid-stride loop over one full wave; scalar tail and "
             "unaligned fallback",
             "load/store instructions /4 (fp32) and /8 (bf16); dram throughput >= 90% of copy bw, "
             "bf16 gaining most"),
    Revision("v2_chunks", "cuda", (HERE / "v2_chunks.cu",),
             _load_cuda("v2_chunks.cu", False, V2_UNROLL),
             "a block per contiguous chunk of 1024 16-byte vectors (eager's grid shape) instead of one "
             "resident wave looping, each thread with 4 loads per input in flight before any store",
             "dram throughput from v1's ~96% to eager's ~100% of copy bw: >= eager at 2^26 and 2^28"),
    Revision("triton", "triton", (HERE / "add_triton.py", TUNING_SOURCE), _load_triton,
             "the same in Triton: BLOCK elements per program, BLOCK and num_warps picked per size by timing",
             "within ~2% of v1_vec: >= 90% of copy bw", role="counterpart"),
    *references(lambda x, y: x + y, HERE / "__init__.py",
               "torch.add, eager: PyTorch's vectorized elementwise kernel",
               "torch.compile of x + y (Inductor's generated Triton)"),
)

KERNEL = Kernel(
    flops_per_element=1,  # for the roofline: the add
    name="vector_add",
    revisions=REVISIONS,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    check_shapes=((1,), (3,), (7,), (33,), (1029,), (4099,), (65539,)),
    bench_shapes=tuple((1 << k,) for k in range(16, 29, 2)),
    profile_shape=(1 << 25,),  # 33.5M elements: 3 x 128 MiB in fp32, far past the 50 MB L2
    cases=("random", "offset"),
    sweep_axis=0,
    doc=__doc__,
)
