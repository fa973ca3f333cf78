// cu0_naive: one thread per output element, a K-long dot product from global memory.
//
// CHANGE: the baseline. threadIdx.x walks M (rows of A and C), threadIdx.y walks N.
// EXPECTED NCU: the 32 lanes of a warp hold 32 different rows: each A load touches 32 rows
// K*2 bytes apart and each C store 32 rows N*2 bytes apart (32 sectors per request, 2 useful
// bytes of 32 per sector); B is a broadcast. Every operand is re-read from L1/L2 per output:
// memory pipes (LSU/L1) saturated, DRAM and FMA throughput at a few % of peak, ~1 TFLOP/s.
#include "mm_common.cuh"

extern "C" __global__ void __launch_bounds__(256)
mm_naive(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N, int K) {
    int m = blockIdx.x * blockDim.x + threadIdx.x;
    int n = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    const bf16_t* a = A + (long long)m * K;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += kl_to_float(a[k]) * kl_to_float(B[(long long)k * N + n]);
    C[(long long)m * N + n] = mm_relu_bf16(acc);
}
