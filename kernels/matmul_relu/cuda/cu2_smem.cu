// cu2_smem: 32x32 output tiles, A and B staged through shared memory 32 columns of K at a time.
//
// CHANGE (from cu1's evidence: L1/LSU-bound, every A and B element fetched by each of the
// 32 (resp. N/32) warps that use it): a 1024-thread block loads a 32x32 tile of A and of B
// once (masked: zeros past M, N, K), syncs, and each thread does 32 FMAs from shared memory.
// Global/L2 traffic per FMA drops 32x.
// EXPECTED NCU: L1/global load requests ~32x fewer than cu1; the bottleneck moves to shared
// memory (2 LDS per FMA: MIO throttle / short-scoreboard stalls), ~2-3x cu1's FLOP/s.
#include "mm_common.cuh"

#define T2 32

extern "C" __global__ void __launch_bounds__(1024)
mm_smem(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N, int K) {
    __shared__ float As[T2][T2 + 1];  // As[m][k], +1: the column reads As[ty][k] are broadcasts anyway
    __shared__ float Bs[T2][T2];      // Bs[k][n]
    int tx = threadIdx.x, ty = threadIdx.y;
    int n = blockIdx.x * T2 + tx;
    int m = blockIdx.y * T2 + ty;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T2) {
        As[ty][tx] = mm_load(A, m, k0 + tx, M, K, K);
        Bs[ty][tx] = mm_load(B, k0 + ty, n, K, N, N);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T2; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (m < M && n < N) C[(long long)m * N + n] = mm_relu_bf16(acc);
}
