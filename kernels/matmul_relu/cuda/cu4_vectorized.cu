// cu4_vectorized: cu3's 128x128x16 tiles and 8x8 outputs per thread, fed by 16-byte loads into a
// bank-conflict-free shared-memory layout.
//
// CHANGE (from cu3's evidence: 16 scalar 2-byte global loads per thread per k-step, 2-way
// conflicts on the transposed As stores and on the 32-byte-strided LDS.128 of B): each thread
// loads one 16-byte vector (8 bf16) of A and one of B per k-step (plan: only where K and N are
// multiples of 8 and the bases 16-byte aligned; the `_scalar` kernel, same layout, loads 8
// masked scalars otherwise). A's vector goes to a row m = t%128 of As[k][m], so a warp's
// transposed stores hit 32 consecutive words (no conflict); each thread's 8 rows and 8 columns
// are split 4 + 4, 64 apart, so a quarter-warp's LDS.128 reads 128 contiguous bytes.
// EXPECTED NCU: global load instructions 8x fewer (LDG.E.128), shared bank conflicts ~0
// (l1tex__data_bank_conflicts_pipe_lsu_mem_shared ~0), FMA pipe to ~70-80% of the fp32 peak,
// ~1.2-1.5x cu3's FLOP/s; now FFMA-bound: the next step has to leave the fp32 pipe.
#include "mm_common.cuh"

#define VB_BM 128
#define VB_BN 128
#define VB_BK 16

template <bool VEC>
__device__ __forceinline__ void vb_tile(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B,
                                        bf16_t* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[VB_BK][VB_BM];  // As[k][m]
    __shared__ __align__(16) float Bs[VB_BK][VB_BN];  // Bs[k][n]
    const int t = threadIdx.x;
    const int tr = t / 16, tc = t % 16;  // rows tr*4+i and 64+tr*4+i, cols tc*4+j and 64+tc*4+j
    const int m0 = blockIdx.y * VB_BM, n0 = blockIdx.x * VB_BN;
    const int a_row = t % VB_BM, a_k = (t / VB_BM) * 8;  // one 8-wide vector of A's tile each
    const int b_row = t / 16, b_n = (t % 16) * 8;         // one 8-wide vector of B's tile each
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += VB_BK) {
        float av[8], bv[8];
        {
            int m = m0 + a_row, k = k0 + a_k;
            if (VEC) {  // K % 8 == 0: the vector is all in or all out
                if (m < M && k < K) KlVec<bf16_t, 8>::load(A + (long long)m * K + k, av);
                else
#pragma unroll
                    for (int e = 0; e < 8; ++e) av[e] = 0.f;
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) av[e] = mm_load(A, m, k + e, M, K, K);
            }
        }
        {
            int k = k0 + b_row, n = n0 + b_n;
            if (VEC) {
                if (k < K && n < N) KlVec<bf16_t, 8>::load(B + (long long)k * N + n, bv);
                else
#pragma unroll
                    for (int e = 0; e < 8; ++e) bv[e] = 0.f;
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) bv[e] = mm_load(B, k, n + e, K, N, N);
            }
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) As[a_k + e][a_row] = av[e];
        *reinterpret_cast<float4*>(&Bs[b_row][b_n]) = make_float4(bv[0], bv[1], bv[2], bv[3]);
        *reinterpret_cast<float4*>(&Bs[b_row][b_n + 4]) = make_float4(bv[4], bv[5], bv[6], bv[7]);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < VB_BK; ++k) {
            float4 a_lo = *reinterpret_cast<const float4*>(&As[k][tr * 4]);
            float4 a_hi = *reinterpret_cast<const float4*>(&As[k][64 + tr * 4]);
            float4 b_lo = *reinterpret_cast<const float4*>(&Bs[k][tc * 4]);
            float4 b_hi = *reinterpret_cast<const float4*>(&Bs[k][64 + tc * 4]);
            float a[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
            float b[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        int m = m0 + (i < 4 ? tr * 4 + i : 64 + tr * 4 + (i - 4));
        if (m >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int n = n0 + h * 64 + tc * 4;
            bf16_t* c = C + (long long)m * N + n;
            if (VEC && n + 3 < N) {  // N % 8 == 0 and C 16-byte aligned: an 8-byte store
                uint2 q;
                q.x = (unsigned)mm_relu_bf16(acc[i][4 * h]) | ((unsigned)mm_relu_bf16(acc[i][4 * h + 1]) << 16);
                q.y = (unsigned)mm_relu_bf16(acc[i][4 * h + 2]) | ((unsigned)mm_relu_bf16(acc[i][4 * h + 3]) << 16);
                *reinterpret_cast<uint2*>(c) = q;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (n + j < N) c[j] = mm_relu_bf16(acc[i][4 * h + j]);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
mm_vec(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N, int K) {
    vb_tile<true>(A, B, C, M, N, K);
}
extern "C" __global__ void __launch_bounds__(256)
mm_vec_scalar(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
              int K) {
    vb_tile<false>(A, B, C, M, N, K);
}
