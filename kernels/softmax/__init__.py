"""Row-wise softmax over the last dimension, fp32 and bf16 (fp32 accumulation).

The ladder: naive CUDA C to a tuned kernel that beats F.softmax, then the Triton
counterpart and the framework references. Inputs may have a row stride larger than
the row; the output is contiguous.
"""
from __future__ import annotations

from pathlib import Path

from kernels.common import TUNING_SOURCE, LazyModule
from kernlog.frameworks import liger, references
from kernlog.spec import DTYPE_BYTES, Family, Kernel, Revision, torch_dtype

from . import cuda_launch, meet_launch, meet_peeled_launch, peel_launch

torch = LazyModule("torch", globals())
liger_softmax = LazyModule("liger_kernel.ops.softmax", globals(), optional=True)
HERE = Path(__file__).resolve().parent


def make_inputs(shape, dtype, gen, device, case="random"):
    rows, cols = shape
    pad = 3 if case == "strided" else 0
    x = torch.randn((rows, cols + pad), generator=gen, device=gen.device, dtype=torch.float32)
    if case == "large":
        x = x * 1e4  # exp overflows in fp32 without the max subtraction
    else:
        x = x * 3
    if case == "neg_inf":
        x[torch.rand(x.shape, generator=gen, device=gen.device) < 0.2] = float("-inf")
        x[0] = float("-inf")  # a whole row of -inf: F.softmax gives NaN
    if case == "nan":
        x[torch.rand(x.shape, generator=gen, device=gen.device) < 0.01] = float("nan")
    x = x.to(device=device, dtype=torch_dtype(dtype))
    return (x[:, :cols],)


def make_output(inputs):
    (x,) = inputs
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def reference(inputs, out=None):
    (x,) = inputs
    return torch.softmax(x.detach().to(torch.float64), dim=-1)


def bytes_moved(shape, dtype):
    rows, cols = shape
    return 2 * rows * cols * DTYPE_BYTES[dtype]


# (revision, the one change, the prediction the log prints beside the measured outcome)
STEPS = (
    ("v0_naive", "one thread per row, three passes over global memory (max, sum of exp, write)",
     "uncoalesced: ~32 sectors per request and DRAM throughput under 10% of peak"),
    ("v1_block_smem", "one block per row: coalesced strided loop, shared-memory tree reductions",
     "sectors per request fall to the ideal (4 fp32 / 2 bf16) and duration 10-50x; barrier stalls lead"),
    ("v2_warp_shuffle", "warp-shuffle reductions instead of the shared-memory tree (1 barrier each, not 8)",
     "barrier stall share falls ~80%; duration 10-25% lower on rows <= 4096, flat on long rows"),
    ("v3_online", "online softmax: running max and sum in one pass, so the row is read twice, not three times",
     "global load bytes fall by 1/3; ~20-25% faster where rows outgrow L2 (1024x131072)"),
    ("v4_vectorized", "128-bit loads/stores with the row held in registers: each element read once",
     "load instructions fall 4x (fp32) / 8x (bf16), load bytes halve; ~80% of DRAM peak on 64 MB+ rows <= 8192"),
    ("v5_tuned", "launch by shape: a warp per short row; Hopper clusters hold rows up to 131072 on chip",
     "global load bytes halve on rows > 8192 (no second pass); >= 2.7 TB/s and >= F.softmax on every bench shape"),
    ("v6_autotuned", "for rows > 1024 the layout (block of 64-1024 threads, cluster of 2-8 blocks) is timed "
     "per shape, the fastest kept, instead of v5's fixed table",
     "bf16 rows >= 16384 rise from v5's 2.3-2.5 TB/s to >= 2.7; no shape slower than v5 beyond noise"),
    ("v7_bf16_packed", "bf16 rows stay packed in registers, 64 per thread (v6 widened 32 to floats): "
     "as many bytes per thread as fp32, half the blocks per row; exp computed again at the store",
     "bf16 rows of 16384-131072 reach >= 2.7 TB/s, like v6's fp32; fp32 unchanged (v6's kernels)"),
    ("v8_split", "rows <= 128: a group of 1-32 lanes per row, several rows per warp; rows too long for a "
     "cluster, or too few to fill the GPU: split across blocks in two kernels ((max, sum) per chunk, then "
     "merge and write), as candidates beside v7's layouts",
     "rows <= 128 at >= F.softmax (>= 2.2 TB/s fp32 at 1048576x8, v7 336); rows >= 256K and decode batches "
     ">= 1.5 TB/s (v7 130-1113); nothing slower than v7 beyond noise"),
)
# v6 and v7 time their candidates with the picker. The .cu files each includes (v7 v6's, v6
# v5's), kernlog's header, cuda_launch.py and kernlog/cuda.py count without being listed
# (kernlog.provenance.executed_files).
PICKER = {"v6_autotuned": (TUNING_SOURCE,), "v7_bf16_packed": (TUNING_SOURCE,), "v8_split": (TUNING_SOURCE,)}



def _naive_rows(shape) -> str:
    """v0 declines rows past 131072 columns: its one thread's sequential fp32 sum is no longer
    within the gate's 5e-4 there (5.4e-4 at 1x262144 on the H100): the method's limit, which
    v1's tree reductions lift."""
    return ("one thread's sequential fp32 sum: past 131072 columns its rounding passes the gate's 5e-4"
            if shape[-1] > 131072 else "")


CUDA_REVISIONS = tuple(
    Revision(name, "cuda", (HERE / f"{name}.cu", *PICKER.get(name, ())),
             cuda_launch.loader(HERE / f"{name}.cu", name), change, predicts,
             refuses=_naive_rows if name == "v0_naive" else None)
    for name, change, predicts in STEPS
)


# v9 has a launcher of its own (peel_launch.py, which counts in its hash as its loader's file):
# cuda_launch.py, which it plans through, is named; v0-v8 do not hash peel_launch.py.
V9 = Revision(
    "v9_peeled", "cuda", (HERE / "v9_peeled.cu", HERE / "cuda_launch.py", TUNING_SOURCE),
    peel_launch.loader(HERE / "v9_peeled.cu"),
    "rows not on a 16-byte boundary (odd lengths: GPT-2's 50257) peel a head and a tail of <= 7 bf16 / 3 fp32 "
    "elements as scalars and keep a 16-byte layout for the body (bf16: v7's packed one; fp32: v6's), where v8 "
    "took 2- and 4-byte accesses",
    "bf16 4096x50257 from 0.77x of F.softmax (v7/v8, 1.6 TB/s) to >= 1.0x and >= 2.5 TB/s; fp32 4096x50257 "
    "from 88% of copy to >= 95%; aligned rows unchanged (v8's kernels)",
)


# v10 has a launcher of its own too (meet_launch.py); it plans through v9's and v8's, named here.
V10 = Revision(
    "v10_meet", "cuda", (HERE / "v10_meet.cu", HERE / "cuda_launch.py", HERE / "peel_launch.py", TUNING_SOURCE),
    meet_launch.loader(HERE / "v10_meet.cu"),
    "rows of > 16384 columns may split into 2-32 chunks of 256-1024 threads x 32 elements (bf16 also 64, "
    "packed as v7's), one block each, held in registers; the chunks of a row meet through (max, sum) words "
    "in a global workspace, each carrying its launch's epoch, so the row is read once (v8's split read it "
    "twice); candidates beside v9's",
    "rows > 131072 aligned (4096x151936, 64x262144, 16x1048576, fp32 and bf16) from v9's two-pass 62-81% of "
    "copy to >= 90%; decode batches of long rows at >= v9; nothing else slower than v9 beyond noise",
)


# v11's launcher (meet_peeled_launch.py) plans through v10's, v9's and v8's, named here.
V11 = Revision(
    "v11_meet_peeled", "cuda",
    (HERE / "v11_meet_peeled.cu", HERE / "cuda_launch.py", HERE / "peel_launch.py", HERE / "meet_launch.py",
     TUNING_SOURCE),
    meet_peeled_launch.loader(HERE / "v11_meet_peeled.cu"),
    "rows off the 16-byte boundary meet too, each chunk peeling the row's head or tail as v9 does (v10 met "
    "only 16-byte rows; GPT-2's 50257 ran v9's clusters), and a bf16 chunk computes each exponential once, "
    "holding it packed two a word across the meeting (v10's packed chunk computed it twice): one rounding "
    "more, as triton_packed; warp 0 reads its slot's epoch before the chunk's loads, not after them; "
    "candidates beside v10's",
    "4096x50257 bf16 and fp32 and 4096x151936 bf16 (v10 at 83%, 79% and 89% of copy on the H200) at >= 95% "
    "of the same-run copy, >= 1.1x v10 at 4096x50257 bf16; nothing slower than v10 beyond noise",
)

def _load_triton():
    from . import softmax_triton

    return softmax_triton.load()


TRITON = Revision(
    "triton", "triton", (HERE / "softmax_triton.py", TUNING_SOURCE), _load_triton,
    "Triton, autotuned: 2-256 short rows per program, one program per row up to 32768; rows over 8192 may be "
    "split into chunks held in registers, whose (max, sum) words meet in a global workspace with no fence and "
    "no counter (each word carries its launch's epoch bit; a program that waits too long reads its row itself)",
    "every row up to 1M columns read once: >= 2.7 TB/s on 64 MB+ shapes and >= F.softmax everywhere; "
    "bf16 2048x32768 from 2.70 to ~2.83 TB/s, with no atomic ahead of the chunk's loads",
    role="counterpart",
    # A program that polls too long reads its row's (max, sum) from x, summed in another order
    # than the slots' words: which program does is the scheduler's, so two launches may round
    # apart in the last bit (the H100 gate saw it with the polls cut to 2: up to 1 ulp).
    deterministic=False,
)

def _load_triton_peeled():
    from . import softmax_triton_peeled

    return softmax_triton_peeled.load()


TRITON_PEELED = Revision(
    "triton_peeled", "triton", (HERE / "softmax_triton_peeled.py", HERE / "softmax_triton.py", TUNING_SOURCE),
    _load_triton_peeled,
    "rows off the 16-byte boundary (odd lengths: GPT-2's 50257) are addressed from the boundary below their "
    "start, so the body moves in 16-byte vectors under a mask Triton knows is constant over 16 bytes, and a "
    "head and a tail of under 16 bytes move as scalars (v9's peel, in Triton), and a row's chunks meet a warp "
    "at a time (each warp polls the row's slots itself, no barrier between warps); every other row takes "
    "triton's kernels",
    "bf16 4096x50257 from triton's 76% of copy (H100) to >= 95%, fp32 4096x50257 to >= 95%; rows on the "
    "boundary unchanged (triton's kernels)",
    role="counterpart",
    deterministic=False,  # as triton: a warp that polls too long sums its row in another order
)

def _load_triton_met():
    from . import softmax_triton_met

    return softmax_triton_met.load()


TRITON_MET = Revision(
    "triton_met", "triton",
    (HERE / "softmax_triton_met.py", HERE / "softmax_triton_peeled.py", HERE / "softmax_triton.py", TUNING_SOURCE),
    _load_triton_met,
    "long rows on the 16-byte boundary take triton_peeled's kernel too (their head and tail empty): their chunks "
    "meet a warp at a time, each exponential one ex2.approx.ftz, each output one multiply; the picker times it "
    "beside triton's split chunks and pipelined rows; rows off the boundary as triton_peeled, short rows as triton",
    "bf16 4096x128256 and 4096x151936 (triton's split kernel at 77% and 72% of copy on the H200, its chunk's "
    "max reduced at a barrier) >= 1.08x triton; no row slower than triton beyond noise",
    role="counterpart",
    deterministic=False,  # as triton: a warp that polls too long sums its row in another order
)

def _load_triton_packed():
    from . import softmax_triton_packed

    return softmax_triton_packed.load()


TRITON_PACKED = Revision(
    "triton_packed", "triton",
    (HERE / "softmax_triton_packed.py", HERE / "softmax_triton_met.py", HERE / "softmax_triton_peeled.py",
     HERE / "softmax_triton.py", TUNING_SOURCE),
    _load_triton_packed,
    "long bf16 rows are loaded as 32-bit words of two bf16 and held so across the meeting: the max taken two "
    "at a time (max.bf16x2), the exponentials a half-chunk at a time, packed back two a word (cvt.rn.bf16x2), "
    "the second half's waiting on the first's sums so that ptxas cannot widen the whole chunk at once: 62 "
    "registers where triton_met's kernel takes 94 at 8192 columns on 4 warps, 8 programs an SM, not 5; timed "
    "beside triton_met's candidates; fp32 and short rows as triton_met",
    "bf16 4096x50257 (triton_met at 85% of copy on the H200) >= 1.08x triton_met, and >= 95% of the same-run "
    "copy on the vocab family's bf16 members; no row slower than triton_met beyond noise",
    role="counterpart",
    deterministic=False,  # as triton: a warp that polls too long sums its row in another order
)

REFERENCES = (
    *references(lambda x: torch.softmax(x, dim=-1), HERE / "__init__.py",
               "F.softmax, eager: PyTorch's own kernel",
               "torch.compile of F.softmax (Inductor's generated Triton)"),
    *liger(lambda x: liger_softmax.LigerSoftmaxFunction.apply(x), HERE / "__init__.py",
           "Liger-Kernel's softmax (Triton: one program per row, the row in one block up to 65536 columns; "
           "longer rows refused)"),
)

# Issue 20's shape families: what softmax meets in models, rows x columns; `check`: their
# small versions, which the gate checks everywhere (the CPU's default test run only those of
# at most 20000 elements; bench gates every member at full size on the GPU).
FAMILIES = (
    Family("vocab", "an LLM's output softmax over its vocabulary: Llama 2 (32000), GPT-2 (50257: odd, "
           "no vector width divides it), Llama 3 (128256), Qwen 2 (151936) columns, 4096 tokens of a "
           "training batch or a long prefill",
           ((4096, 32000), (4096, 50257), (4096, 128256), (4096, 151936)),
           check=((2, 32000), (3, 50257), (1, 128256), (2, 151936))),
    Family("decode", "the same vocabularies at decode: 1 to 64 rows cannot fill 132 SMs with one "
           "block per row",
           ((1, 50257), (8, 128256), (32, 151936), (64, 50257)),
           check=((1, 50257), (5, 151936))),
    Family("long_rows", "rows of 256K to 1M columns (long-context attention scores, big classifiers): "
           "one row outgrows a block, and a cluster",
           ((64, 262144), (16, 1048576), (4, 1048576)),
           check=((1, 262144), (2, 300007))),
    Family("short_rows", "many rows of at most 128 columns (attention over short windows, MoE router "
           "softmax over 8-128 experts): a warp or less per row",
           ((1048576, 8), (262144, 64), (131072, 128), (65536, 100)),
           # the group path's every width: 4-128 columns aligned (fp32 and bf16), 13, 30, 100 not
           check=((33, 4), (2049, 8), (513, 13), (513, 16), (257, 30), (257, 32), (257, 64), (131, 128),
                  (67, 100))),
)

KERNEL = Kernel(
    flops_per_element=5,  # for the roofline: max, subtract, exp, sum, scale
    name="softmax",
    families=FAMILIES,
    revisions=CUDA_REVISIONS + (V9, V10, V11, TRITON, TRITON_PEELED, TRITON_MET, TRITON_PACKED) + REFERENCES,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    # The last three reach v5's vector cluster paths (2, 8 and 8 x 512-thread blocks per row).
    check_shapes=((1, 1), (3, 1), (7, 33), (257, 64), (5, 1000), (17, 4097), (4, 12345), (2, 131073),
                  (3, 16384), (2, 65536), (2, 131072)),
    bench_shapes=((4096, 1024), (32768, 256), (8192, 4096), (4096, 8192), (4096, 32000),
                  (2048, 32768), (16384, 16384), (1024, 131072)),
    profile_shape=(8192, 4096),
    cases=("random", "large", "neg_inf", "nan", "strided"),
    # v0's one-thread sequential fp32 sum over a 131072-long row lands at 1.9e-4 (H100), an
    # accumulation error of the naive method, not a wrong answer; the wrong kernels in
    # tests/test_softmax_wrong.py land at 1e-1 and above.
    tolerance={"fp32": 5e-4},
    doc=__doc__,
)
