// The mma.sync block tile of cu5_mma (also cu6's and cu7's fallback for unaligned K or N):
// a 128x128 block tile, K in steps of 32, 4 warps (2 x 2) each computing 64x64 with
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate), fragments read by ldmatrix from a padded
// shared-memory layout (rows of 80 and 272 bytes: the 8 row addresses of one ldmatrix phase
// fall in 8 distinct 4-bank groups, so no bank conflicts).
#pragma once
#include "mm_common.cuh"

#define MMA_BM 128
#define MMA_BN 128
#define MMA_BK 32
#define MMA_THREADS 128
#define MMA_A_LD (MMA_BK + 8)   // bf16 per row of As[m][k]: 80 bytes
#define MMA_B_LD (MMA_BN + 8)   // bf16 per row of Bs[k][n]: 272 bytes
#define MMA_A_ELEMS (MMA_BM * MMA_A_LD)
#define MMA_B_ELEMS (MMA_BK * MMA_B_LD)
#define MMA_STAGE_ELEMS (MMA_A_ELEMS + MMA_B_ELEMS)  // 9472 bf16 = 18944 bytes per stage

__device__ __forceinline__ unsigned mm_smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mm_ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void mm_ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                                     unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void mm_mma_bf16(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 8 bf16 of a row (A: along K; B: along N) from global memory as one uint4; zeros outside.
// VEC: one 16-byte load (the plan guarantees K, N % 8 == 0 and 16-byte aligned bases, so a
// vector is all in or all out); else 8 masked 2-byte loads.
template <bool VEC>
__device__ __forceinline__ uint4 mm_load8(const bf16_t* __restrict__ p, int r, int c, int rows, int cols) {
    if (VEC) {
        if (r < rows && c < cols) return *reinterpret_cast<const uint4*>(p + (long long)r * cols + c);
        return make_uint4(0u, 0u, 0u, 0u);
    } else {
        unsigned w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
            w[e] = (unsigned)mm_load_bits(p, r, c + 2 * e, rows, cols, cols) |
                   ((unsigned)mm_load_bits(p, r, c + 2 * e + 1, rows, cols, cols) << 16);
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// One 128x32 tile of A and 32x128 of B into As/Bs (4 vectors of each per thread), synchronously.
template <bool VEC>
__device__ __forceinline__ void mm_load_tile(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B,
                                             bf16_t* As, bf16_t* Bs, int M, int N, int K, int m0, int n0, int k0) {
    const int t = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int c = t + i * MMA_THREADS;      // 0..511
        int ar = c / 4, ak = (c % 4) * 8;  // A: 128 rows x 4 vectors
        *reinterpret_cast<uint4*>(As + ar * MMA_A_LD + ak) = mm_load8<VEC>(A, m0 + ar, k0 + ak, M, K);
        int br = c / 16, bn = (c % 16) * 8;  // B: 32 rows x 16 vectors
        *reinterpret_cast<uint4*>(Bs + br * MMA_B_LD + bn) = mm_load8<VEC>(B, k0 + br, n0 + bn, K, N);
    }
}

// acc[mi][ni][4] += the warp's 64x64 share of As (128x32) x Bs (32x128).
__device__ __forceinline__ void mm_mma_tile(const bf16_t* As, const bf16_t* Bs, float (&acc)[4][8][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = (warp / 2) * 64, wn = (warp % 2) * 64;
#pragma unroll
    for (int kk = 0; kk < MMA_BK; kk += 16) {
        unsigned a[4][4], b[8][2];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
            // lanes 0-15: rows 0-15 at k; lanes 16-31: rows 0-15 at k + 8 -> a0..a3 of m16k16
            const bf16_t* p = As + (wm + mi * 16 + lane % 16) * MMA_A_LD + kk + (lane / 16) * 8;
            mm_ldmatrix_x4(a[mi][0], a[mi][1], a[mi][2], a[mi][3], mm_smem_addr(p));
        }
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
            // matrices q = lane/8: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15),
            // transposed: b0, b1 of n-tile 2*nj, then of 2*nj + 1
            int q = lane / 8;
            const bf16_t* p = Bs + (kk + (q % 2) * 8 + lane % 8) * MMA_B_LD + wn + nj * 16 + (q / 2) * 8;
            mm_ldmatrix_x4_trans(b[2 * nj][0], b[2 * nj][1], b[2 * nj + 1][0], b[2 * nj + 1][1], mm_smem_addr(p));
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) mm_mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
}

// Two adjacent outputs (row m, columns n, n + 1) through the ReLU: one 4-byte store where both
// are inside and the address is 4-byte aligned, else masked 2-byte stores.
__device__ __forceinline__ void mm_store2(bf16_t* __restrict__ C, int m, int n, int M, int N, float v0, float v1) {
    if (m >= M || n >= N) return;
    bf16_t* c = C + (long long)m * N + n;
    if (n + 1 < N && (reinterpret_cast<unsigned long long>(c) & 3ull) == 0) {
        *reinterpret_cast<unsigned*>(c) = (unsigned)mm_relu_bf16(v0) | ((unsigned)mm_relu_bf16(v1) << 16);
    } else {
        c[0] = mm_relu_bf16(v0);
        if (n + 1 < N) c[1] = mm_relu_bf16(v1);
    }
}

__device__ __forceinline__ void mm_mma_epilogue(bf16_t* __restrict__ C, int M, int N, int m0, int n0,
                                                const float (&acc)[4][8][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = m0 + (warp / 2) * 64, wn = n0 + (warp % 2) * 64;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
            int m = wm + mi * 16 + lane / 4, n = wn + ni * 8 + (lane % 4) * 2;
            mm_store2(C, m, n, M, N, acc[mi][ni][0], acc[mi][ni][1]);
            mm_store2(C, m + 8, n, M, N, acc[mi][ni][2], acc[mi][ni][3]);
        }
}

__device__ __forceinline__ void mm_zero(float (&acc)[4][8][4]) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.f;
}

// cu5's whole kernel: load a stage, sync, mma, sync. Grid (ceil(N/128), ceil(M/128)), 128 threads.
template <bool VEC>
__device__ __forceinline__ void mm_mma_sync_kernel(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B,
                                                   bf16_t* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) bf16_t smem[MMA_STAGE_ELEMS];
    bf16_t* As = smem;
    bf16_t* Bs = smem + MMA_A_ELEMS;
    const int m0 = blockIdx.y * MMA_BM, n0 = blockIdx.x * MMA_BN;
    float acc[4][8][4];
    mm_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MMA_BK) {
        mm_load_tile<VEC>(A, B, As, Bs, M, N, K, m0, n0, k0);
        __syncthreads();
        mm_mma_tile(As, Bs, acc);
        __syncthreads();
    }
    mm_mma_epilogue(C, M, N, m0, n0, acc);
}
