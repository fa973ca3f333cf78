"""The CUDA C matmul+ReLU ladder, cu0-cu14: one idea per rung, each motivated by the previous rung's
expected ncu evidence. kernels/matmul_relu/__init__.py lists CUDA_REVISIONS ahead of the Triton
revisions; every rung passed the gate on a GPU (tests/test_matmul_cuda.py -m gpu) before that: cu0-cu8
on the H100, cu9-cu14 on the H200 (sm_90a both).

Every rung: bf16 A (M, K) and B (K, N) row-major, fp32 accumulation, ReLU in the epilogue, bf16 C,
masked edges at any M, N, K; the plans (cuda_launch.py, and the later rungs' own launchers) pick a
scalar-load kernel where K or N is no multiple of 8 (or a base is not 16-byte aligned) and refuse,
declared, a grid over the limits.
"""
from __future__ import annotations

from kernlog.spec import Revision

from . import cuda_gsplit, cuda_launch, cuda_multicast, cuda_persistent, cuda_splitk, cuda_stages, cuda_waves

# (name, change, predicts); predicts name the ncu metric expected to move, at 4096^3 unless said.
STEPS = (
    ("cu0_naive",
     "baseline: one thread per output, threadIdx.x along M, a K-long fp32 dot product straight from global memory, "
     "ReLU and bf16 rounding in the epilogue",
     "uncoalesced: ~32 sectors per request on A loads and C stores (l1tex__t_sectors_pipe_lsu_mem_global_op_ld"
     ".sum / requests), LSU/L1 the busiest unit, dram__throughput and the FMA pipe at a few % of peak; "
     "~0.5-1 TFLOP/s"),
    ("cu1_coalesced",
     "threadIdx.x along N: a warp's B loads and C stores are 64 contiguous bytes, its A load one broadcast",
     "global sectors per request from ~32 to ~2-4 (cu0's evidence: 32 sectors, 2 useful bytes each); "
     "L1 hit rate up; 3-10x cu0's FLOP/s, still L1/LSU-bound on the K re-reads of every operand per output"),
    ("cu2_smem",
     "32x32 output tiles: A and B staged through shared memory 32 columns of K at a time (masked: zeros past "
     "M, N, K), each element fetched from global memory once per tile instead of once per output",
     "global load requests ~32x fewer than cu1 (cu1's evidence: L1/LSU-bound on re-reads); the limit moves to "
     "shared memory (2 LDS per FMA: smsp__average_warps_issue_stalled_mio_throttle and short_scoreboard "
     "dominate); ~2-3x cu1"),
    ("cu3_regblock",
     "2-D register blocking: 128x128x16 block tiles, 256 threads each holding 8x8 fp32 accumulators, A stored "
     "transposed in shared memory so a thread reads 8 A and 8 B values per k as float4s for 64 FMAs",
     "shared-memory wavefronts per FMA down ~8x (cu2's evidence: MIO-throttle stalls, 0.5 FMA per LDS); FMA "
     "pipe (sm__pipe_fma_cycles_active) from ~10% to 50-70%, ~20-30 TFLOP/s; 2-way bank conflicts on the "
     "transposed stores and 16 scalar 2-byte global loads per thread per k-step now visible"),
    ("cu4_vectorized",
     "16-byte global loads (8 bf16, where K and N are multiples of 8 and bases 16-byte aligned; a masked "
     "scalar kernel otherwise) into a conflict-free layout: A's vector lands in one row of As[k][m] per lane "
     "(consecutive words), and each thread's 8x8 outputs split 4+4, 64 apart, so every LDS.128 phase reads "
     "128 contiguous bytes",
     "global load instructions 8x fewer (LDG.E.128; cu3's evidence: 16 LDG.U16 per thread per k-step), "
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared from cu3's 2-way to ~0; FMA pipe 70-80% busy; "
     "1.2-1.5x cu3, capped by the fp32 FMA ceiling (~50 TFLOP/s)"),
    ("cu5_mma",
     "tensor cores: mma.sync.m16n8k16 bf16 -> fp32 on 128x128x32 block tiles, 4 warps of 64x64, fragments by "
     "ldmatrix (.trans for B) from padded shared memory (80- and 272-byte rows: conflict-free); loads still "
     "synchronous, 16-byte where aligned",
     "sm__pipe_fma_cycles_active -> ~0 and sm__pipe_tensor_op_hmma_cycles_active to 30-50% (cu4's evidence: "
     "FFMA-bound at the fp32 ceiling); ~150-250 TFLOP/s (3-5x cu4); stall_long_scoreboard and barrier stalls "
     "now dominate: each k-step's loads and math are serialized"),
    ("cu6_cp_async",
     "a 3-stage cp.async.cg pipeline (16-byte copies, zero-fill past the edges, 56.8 KB dynamic shared memory) "
     "feeding cu5's mma.sync tile, two k-tiles in flight during the math; unaligned K/N keep cu5's scalar "
     "kernel",
     "smsp__average_warps_issue_stalled_long_scoreboard down >2x (cu5's evidence: loads serialized with the "
     "math); tensor pipe 60-75%; ~350-450 TFLOP/s, 1.5-2x cu5; limit moves to issue (ldmatrix+HMMA per 16 k)"),
    ("cu7_wgmma",
     "Hopper: TMA (cp.async.bulk.tensor, 128-byte swizzle, hardware zero-fill; tensor maps encoded on the host "
     "and read from global memory) into a 4-stage mbarrier ring filled by one producer warp, "
     "wgmma.mma_async m64n128k16 from shared memory by 2 consumer warpgroups (128x128x64 tiles); sm_90a, "
     "built by nvcc; unaligned K/N take cu5's scalar mma.sync kernel",
     "SASS HGMMA + UTMALDG in place of HMMA + LDSM + LDGSTS; smsp__inst_executed per FLOP down >5x (cu6's "
     "evidence: issue-bound on ldmatrix/HMMA); tensor pipe 75-85%; ~500-600 TFLOP/s (0.75-0.9x cuBLAS "
     "744); the rest is the wait_group 0 per k-tile and the register epilogue"),
    ("cu8_wgmma_wide",
     "128x256 block tiles (wgmma m64n256k16: 128 fp32 accumulators per consumer thread, four B boxes a stage), "
     "one wgmma group left in flight across k-tiles (wait_group 1: a stage is freed once the next k-tile's group "
     "is issued), tiles launched in grouped order (16 row-tiles a group) so resident blocks share tiles in L2; "
     "384 threads: a producer warpgroup and 2 consumers",
     "the wait_group line's share of warp samples well under cu7's 38% (cu7's evidence: the barrier stall on "
     "wait_group 0 leads); DRAM bytes down >25% (cu7: 3.4x the minimum); ~600-700 TFLOP/s at 4096^3 "
     "(0.75-0.88x the cuBLAS roof of 795), 1.15-1.35x cu7"),
)

CUDA, HERE = cuda_launch.CUDA_DIR, cuda_launch.CUDA_DIR.parent


def _on(before: Revision, *own) -> tuple:
    """The files of a rung built on `before` (its .cu includes before's, its launcher hands before's
    launcher the shapes it does not take): its own two, then before's."""
    return (*own, *before.sources)


# cu9 has its own launcher (cuda_persistent.py): cuda_launch.py is hashed by cu0-cu8's profiles.
CU9 = Revision("cu9_persistent", "cuda", (CUDA / "cu9_persistent.cu", HERE / "cuda_persistent.py",
                                          HERE / "cuda_launch.py"), cuda_persistent.loader(),
               "cu8's tile persistent: a block per SM walking the tiles in cu8's grouped order, the ring of stages "
               "running on across a block's tiles (the producer loads tile t+1 while the consumers finish t), C "
               "written ReLU'd into a 128-byte-swizzled staging buffer per consumer warpgroup and stored by TMA, "
               "waited on only before the buffer is reused a tile later; 3 stages (cu8: 4) to fit the staging",
               "the epilogue cu8 left exposed (cu8's evidence: 4-byte stores from registers, nothing loading "
               "meanwhile) hidden under the next tile's loads: 1.05-1.10x cu8 at 4096^3, >= 0.95x of the cuBLAS "
               "rate at 4096^3 and 8192^3", refuses=cuda_persistent.refuses)
CU10 = Revision("cu10_waves", "cuda", _on(CU9, CUDA / "cu10_waves.cu", HERE / "cuda_waves.py"), cuda_waves.loader(),
                "the tile picked for the waves: beside cu9's 128x256, a 192x192 persistent kernel (three consumer "
                "warpgroups of m64n192k16, 512 threads, the loader's registers handed to them by setmaxnreg), and a "
                "plan taking, per shape, the tile whose waves of one tile per SM are fullest; cu9's kernel elsewhere",
                "3072^3 and 2880^3 at >= 0.95x cuBLAS (cu9: 0.76x and 0.75x on the H200, where cuBLAS runs 192x192 "
                "tiles): >= 1.25x cu9 at 3072^3; cu9's kernel and speed at 4096^3, where its 512 tiles fill 3.88 "
                "waves", refuses=cuda_waves.refuses,
                check_shapes=((2304, 1920, 8),))  # one wave of its 192x192 tile, two of cu9's: its own kernel
CU11 = Revision("cu11_splitk", "cuda", _on(CU10, CUDA / "cu11_splitk.cu", HERE / "cuda_splitk.py"),
                cuda_splitk.loader(),
                "split-K in one kernel where C has too few tiles to fill the GPU: the K-slices of a 128 x BN tile "
                "(BN 128 or 192) in one cluster of S = 2-16 blocks, each block's fp32 partial reduced through "
                "distributed shared memory by the block owning the rows, "
                "ReLU'd and stored; a cost model over waves of co-resident clusters picks (BN, S), or cu10's plan "
                "where no split is cheaper",
                "1000^3 and 128x1024x32768 at >= 0.95x of torch.compile and 512x512x16384 at >= 0.87x (the best "
                "step before: 0.91x, 0.88x, 0.87x of the faster reference on the H200; the experiment: 0.99x, "
                "0.96x, 0.89x of relu(A @ B)); cu10's kernel and speed at 4096^3", refuses=cuda_splitk.refuses,
                # the kernel's check shapes reach its 128-wide splits of 2, 4 and 8; these the rest it picks, and
                # cu10's two kernels (cu9's where its tiles fill the SMs, as at 4096^3)
                check_shapes=((33, 72, 8200), (33, 2056, 1032), (33, 4104, 520), (2304, 1920, 8), (1536, 2816, 8)))

CU12 = Revision("cu12_stages", "cuda", _on(CU11, CUDA / "cu12_stages.cu", HERE / "cuda_stages.py"),
                cuda_stages.loader(),
                "cu9's 128x256 persistent kernel with a ring of four stages where it had three, the room made by "
                "staging and storing each consumer warpgroup's C in two halves of 128 columns; run wherever cu11 "
                "ran cu9's kernel, and in place of cu10's 192x192 tile where its own waves cost no more (a tile of "
                "192x192 costing 1.18 of its own); cu11's launch elsewhere",
                "cu9's waits on a stage's full barrier (30% of its warp samples at 4096^3 on the H200, the tensor "
                "pipe 78% busy) shortened by a fourth stage: >= 1.04x cu11 at 4096^3 and 8192^3 (the experiment: "
                "1.066x and 1.065x cu9), >= 93% of the cuBLAS roof at 4096^3 (cu9: 88%); cu11's speed where it "
                "splits", refuses=cuda_stages.refuses,
                # cu11's (its splits, cu10's 192x192 tile at 2304x1920, cu9's shape at 1536x2816: now this kernel's,
                # one tile a block and one k-tile), and two where this kernel's blocks take a second tile, its ring
                # wraps (8 and 16 k-tiles) and M, N and K have tails
                check_shapes=CU11.check_shapes + ((1544, 2824, 1000), (2056, 2824, 520)))

CU13 = Revision("cu13_multicast", "cuda", _on(CU12, CUDA / "cu13_multicast.cu", HERE / "cuda_multicast.py"),
                cuda_multicast.loader(),
                "where B's row stride is 16 mod 32 bytes (N = 8 mod 16), cu12's kernel in clusters of two blocks "
                "taking M-neighbour tiles: each loads its own A and half of B's tile, multicast by TMA into both, "
                "and a stage is refilled once both blocks' consumers released it; cu12's launch elsewhere",
                "cu12's loads at N = 5000 (44% of its warp samples waiting on a full barrier at 3000x5000x4000 on "
                "the H200; 1.14x faster at N = 5056) shortened by loading B once for two tiles: >= 1.06x cu12 at "
                "3000x5000x4000 (the experiment: 1.10x); cu12's kernel and speed where B's stride is a multiple "
                "of 32 bytes", refuses=cuda_multicast.refuses,
                # cu12's: at 1544x2824x1000 and 2056x2824x520 (N = 8 mod 16) this kernel, an odd count of row
                # tiles (a pair's second tile past M), a second pair a cluster and the ring wrapping
                check_shapes=CU12.check_shapes)

CU14 = Revision("cu14_gsplit", "cuda", _on(CU13, CUDA / "cu14_gsplit.cu", HERE / "cuda_gsplit.py"),
                cuda_gsplit.loader(),
                "split-K without clusters where cu11's split is held by cluster residency (K >= 8192, M and N >= "
                "128): a block per 128x64 tile and K-slice, as many slices as fill one wave, each storing its fp32 "
                "partial to a workspace, then a kernel summing the slices in order with the ReLU; cu13's launch "
                "elsewhere",
                "cu11's 96 blocks at 512x512x16384 (12 clusters of 8: 16 would not be resident at once; cuBLAS runs "
                "128 blocks of 128x64 tiles in four slices) made 128: >= 1.05x cu13 there (cu11's split; the "
                "experiment: 27.7 us to 30.3), >= 0.95x torch.compile; cu13's kernels and speed where it does not "
                "split this way",
                refuses=cuda_gsplit.refuses,
                # cu13's, and two of this rung's split: tails in M, N and K, and a slice past K's last k-tile
                check_shapes=CU13.check_shapes + ((300, 264, 9000), (136, 200, 8200)))

CUDA_REVISIONS = tuple(
    Revision(name, "cuda", (cuda_launch.source(name), HERE / "cuda_launch.py"),
             cuda_launch.loader(name), change, predicts, refuses=cuda_launch.refuses(name))
    for name, change, predicts in STEPS
) + (
    CU9, CU10, CU11, CU12, CU13, CU14)
