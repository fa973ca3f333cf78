// cu3_regblock: 128x128 block tiles, K in steps of 16, 256 threads each computing 8x8 outputs.
//
// CHANGE (from cu2's evidence: shared-memory bound, 2 LDS per FMA, MIO-throttle stalls): 2-D
// register blocking. Each thread keeps an 8x8 accumulator tile; per k it reads 8 values of A and 8
// of B from shared memory (fp32, A stored transposed As[k][m] so both are 2 float4 reads) and does
// 64 FMAs: 16 FMAs per LDS.128 instead of 0.5 per LDS.32. Global loads stay scalar and masked.
// EXPECTED NCU: shared-memory wavefronts per FMA down ~8x, FMA pipe from ~10% to 50-70% of its
// fp32 peak (~25-35 TFLOP/s at 4096^3, FFMA-bound: the bf16 inputs are widened to fp32); scalar
// 2-byte global loads and the transposed As stores (2-way bank conflicts) now visible in the
// memory tables; registers ~128 per thread.
#include "mm_common.cuh"

#define RB_BM 128
#define RB_BN 128
#define RB_BK 16
#define RB_TM 8
#define RB_TN 8

extern "C" __global__ void __launch_bounds__(256)
mm_regblock(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
            int K) {
    __shared__ __align__(16) float As[RB_BK][RB_BM];  // transposed: As[k][m]
    __shared__ __align__(16) float Bs[RB_BK][RB_BN];
    const int t = threadIdx.x;
    const int tr = t / 16, tc = t % 16;  // this thread's 8x8 outputs: rows tr*8.., cols tc*8..
    const int m0 = blockIdx.y * RB_BM, n0 = blockIdx.x * RB_BN;
    // Loads: A row t/2, k (t%2)*8..+8; B row t/16, n (t%16)*8..+8. 8 scalar loads each.
    const int a_row = t / 2, a_k = (t % 2) * 8;
    const int b_row = t / 16, b_n = (t % 16) * 8;
    float acc[RB_TM][RB_TN];
#pragma unroll
    for (int i = 0; i < RB_TM; ++i)
#pragma unroll
        for (int j = 0; j < RB_TN; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += RB_BK) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            As[a_k + e][a_row] = mm_load(A, m0 + a_row, k0 + a_k + e, M, K, K);
            Bs[b_row][b_n + e] = mm_load(B, k0 + b_row, n0 + b_n + e, K, N, N);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < RB_BK; ++k) {
            float a[RB_TM], b[RB_TN];
#pragma unroll
            for (int i = 0; i < RB_TM; ++i) a[i] = As[k][tr * RB_TM + i];
#pragma unroll
            for (int j = 0; j < RB_TN; ++j) b[j] = Bs[k][tc * RB_TN + j];
#pragma unroll
            for (int i = 0; i < RB_TM; ++i)
#pragma unroll
                for (int j = 0; j < RB_TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < RB_TM; ++i) {
        int m = m0 + tr * RB_TM + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < RB_TN; ++j) {
            int n = n0 + tc * RB_TN + j;
            if (n < N) C[(long long)m * N + n] = mm_relu_bf16(acc[i][j]);
        }
    }
}
