// cu6_cp_async: cu5's mma.sync tile fed by a 3-stage cp.async pipeline (dynamic shared memory,
// 3 x 18944 bytes).
//
// CHANGE (from cu5's evidence: long-scoreboard and barrier stalls, loads and math serialized
// per k-step, tensor pipe < 50%): global -> shared copies go through cp.async.cg (16 bytes,
// L1 bypassed, zero-filled past K/M/N by a 0 source size), two k-tiles ahead of the math; the
// registers no longer stage the data. Unaligned K or N: the plan picks mm_cpasync_scalar,
// cu5's synchronous scalar-load kernel (cp.async needs 16-byte aligned vectors).
// EXPECTED NCU: stall_long_scoreboard down by >2x, tensor pipe 60-75% active,
// ~350-450 TFLOP/s at 4096^3 (1.5-2x cu5); next limit: mma.sync issue (ldmatrix + HMMA per 16 k,
// from one warp's instruction stream) and 128-wide tiles re-reading A and B from L2.
#include "mm_mma.cuh"

#define CP_STAGES 3

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mm_smem_addr(smem)), "l"(gmem),
                 "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void cp_load_tile(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* As,
                                             bf16_t* Bs, int M, int N, int K, int m0, int n0, int k0) {
    const int t = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int c = t + i * MMA_THREADS;
        int ar = c / 4, ak = (c % 4) * 8;
        bool av = m0 + ar < M && k0 + ak < K;
        cp_async16(As + ar * MMA_A_LD + ak, av ? A + (long long)(m0 + ar) * K + k0 + ak : A, av);
        int br = c / 16, bn = (c % 16) * 8;
        bool bv = k0 + br < K && n0 + bn < N;
        cp_async16(Bs + br * MMA_B_LD + bn, bv ? B + (long long)(k0 + br) * N + n0 + bn : B, bv);
    }
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_cpasync(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) bf16_t dsmem[];  // CP_STAGES * MMA_STAGE_ELEMS
    const int m0 = blockIdx.y * MMA_BM, n0 = blockIdx.x * MMA_BN;
    const int ktiles = (K + MMA_BK - 1) / MMA_BK;
    float acc[4][8][4];
    mm_zero(acc);
#pragma unroll
    for (int s = 0; s < CP_STAGES - 1; ++s) {
        if (s < ktiles) {
            bf16_t* st = dsmem + s * MMA_STAGE_ELEMS;
            cp_load_tile(A, B, st, st + MMA_A_ELEMS, M, N, K, m0, n0, s * MMA_BK);
        }
        cp_async_commit();  // an empty group where there is no tile: the wait counts stay uniform
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<CP_STAGES - 2>();  // tile kt has landed (this thread's copies)...
        __syncthreads();                 // ...and everyone's; stage (kt-1)%S is free again
        int next = kt + CP_STAGES - 1;
        if (next < ktiles) {
            bf16_t* st = dsmem + (next % CP_STAGES) * MMA_STAGE_ELEMS;
            cp_load_tile(A, B, st, st + MMA_A_ELEMS, M, N, K, m0, n0, next * MMA_BK);
        }
        cp_async_commit();
        const bf16_t* cur = dsmem + (kt % CP_STAGES) * MMA_STAGE_ELEMS;
        mm_mma_tile(cur, cur + MMA_A_ELEMS, acc);
    }
    mm_mma_epilogue(C, M, N, m0, n0, acc);
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_cpasync_scalar(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
                  int K) {
    mm_mma_sync_kernel<false>(A, B, C, M, N, K);
}
