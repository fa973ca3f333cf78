// v4_wgmma: causal flash attention forward for Hopper in CUDA C, built as the matmul ladder's cu8
// (TMA, an mbarrier ring, wgmma) and as cuDNN's fused kernel: 384 threads a block, one block per
// (128-query tile, batch x head), the longest tiles first. Warpgroup 0 loads: one lane issues the TMA
// copies, Q once, then K and V per 128-key block into a 3-stage ring (each with its own full barrier,
// so S can start before V lands). Warpgroups 1 and 2 each own 64 query rows: S = Q K^T by wgmma from
// shared memory, the online softmax in registers (exp2 of one multiply-add, as v3_fma), then O += P V
// with P from registers: the S accumulator's layout is the wgmma A fragment's. The S product of key
// block j is issued before the P V product of block j-1, and j's softmax runs while that product is in
// flight. setmaxnreg moves registers from the loading warpgroup (24) to the computing ones (240).
// bf16 only, head dim 64 or 128, q, k, v and o contiguous (B H T, D); sm_90a (nvcc), as cu7 and cu8.
//
// CHANGE (from v3_fma's evidence: Triton's loop at head dim 128 holds 0.77-0.88x of SDPA on the
// H200's family members, its products and softmax serialized within each warp): the producer and
// the two consumers overlap loads, tensor-core products and the softmax, as cuDNN's kernel does.
// EXPECTED: >= v3_fma on the head-dim-128 and long members; shorter sequences keep v3_fma's loop
// (the picker times both), so no member is slower than v3_fma beyond noise.
#include "fa_wgmma.cuh"

// tmaps: Q's, K's and V's tensor maps (128 bytes each) over the (B H T, D) row-major views; O is
// (B H T, D); lse, (B H T) fp32 or null, gets each row's log-sum-exp; scale2 = scale * log2(e).
// A block per (query tile, batch x head), the longest tiles (the last query blocks) first.
template <int D>
__device__ __forceinline__ void fa_fwd(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O,
                                       float* __restrict__ lse, int T, float scale2) {
    extern __shared__ unsigned char fa_smem_raw[];
    const FaAddr<D, 1> a((mm_smem_addr(fa_smem_raw) + 1023u) & ~1023u);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = (gridDim.x - 1 - blockIdx.x) * FA_BM;
    const int row0 = blockIdx.y * T;
    const int nblocks = fa_nblocks(T, m0);
    if (threadIdx.x == 0) a.init();
    __syncthreads();
    if (warp < 4) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (warp == 0 && lane == 0) fa_load_tile<D, 1>(a, tmaps, row0, m0, nblocks, 0, 0);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    fa_tile<D, 1>(a, 0, 0, nblocks, m0, row0, T, O, lse, scale2);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
fa_fwd_d64(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O, float* __restrict__ lse, int T,
           float scale2) {
    fa_fwd<64>(tmaps, O, lse, T, scale2);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
fa_fwd_d128(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O, float* __restrict__ lse, int T,
            float scale2) {
    fa_fwd<128>(tmaps, O, lse, T, scale2);
}
