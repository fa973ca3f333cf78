// v7_bf16_packed: bf16 rows stay packed in registers, 64 elements per thread as 8 uint4
// (32 registers), instead of being widened to 32 floats on load; each exp is computed
// twice, once for the sum and again at the store. fp32 is v6 unchanged.
//   softmax_bf16_packed_t<T>_c<C>   a cluster of C blocks of T threads per row (C = 1: a
//                                   block per row), capacity T * C * 64 elements
// The launcher adds these layouts to v6's candidates for aligned bf16 rows and keeps the
// fastest, as v6 does.
//
// CHANGE vs v6: twice the bytes per thread for bf16 (128 B, as fp32 has), so half the
// blocks per row, and every block has as many bytes in flight during its load phase as
// v6's fp32 blocks do.
// EVIDENCE: in v6, fp32 1024x131072 reached 2.88 TB/s but bf16 only 2.29 (2048x32768: 2.91
// vs 2.63) with the same layouts: per block, the bf16 load phase moves half the bytes
// while the reduction, the cluster barrier and the ramp cost the same.
// PREDICTION: bf16 rows of 16384..131072 reach >= 2.7 TB/s (the fp32 figures); the extra
// exp stays hidden: 2 exps per element at 3 TB/s is ~1.5e12/s, ~40% of the H100's MUFU
// rate (16 per SM per clock); no shape slower than v6 beyond noise (v6's layouts stay
// candidates).
#include "v6_autotuned.cu"

#define PACKED 64  // bf16 per thread: 8 uint4
#define BF16X2_NEG_INF 0xff80ff80u

// The two bf16 of a word as floats. volatile, so the compiler cannot keep the sum pass's
// 64 widened floats alive until the store (that CSE costs 200+ bytes of spills): each pass
// widens its own copy, one word at a time.
__device__ __forceinline__ float2 widen(unsigned int w) {
    float lo, hi;
    asm volatile("{ shl.b32 %0, %2, 16; and.b32 %1, %2, 0xffff0000; }" : "=f"(lo), "=f"(hi) : "r"(w));
    return make_float2(lo, hi);
}
// Lane-wise max of two bf16x2 words. A NaN input drops out of the max but not out of the
// sum of exps, which makes the whole row NaN as in F.softmax.
__device__ __forceinline__ unsigned int max_bf16x2(unsigned int a, unsigned int b) {
    unsigned int r;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
// Two floats to a bf16x2 word (lo in the low half), round to nearest even, in one cvt.
__device__ __forceinline__ unsigned int narrow(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <int THREADS, int C>
__device__ void softmax_packed_row(const unsigned short* __restrict__ x, unsigned short* __restrict__ y,
                                   int cols, long long x_row_stride, float2* __restrict__ ws) {
    constexpr int VPT = PACKED / 8;
    const unsigned int rank = C > 1 ? cluster_ctarank() : 0u;
    const long long row = blockIdx.x / C;
    const int nvec = cols / 8, first = (int)rank * THREADS * VPT + threadIdx.x;
    const uint4* xr = reinterpret_cast<const uint4*>(x + row * x_row_stride);
    uint4* yr = reinterpret_cast<uint4*>(y + row * cols);

    uint4 q[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = first + i * THREADS;
        q[i] = j < nvec ? xr[j] : make_uint4(BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF);
    }
    // The max in packed bf16 (exact: a max only picks an input), then widened once.
    unsigned int mw = BF16X2_NEG_INF;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
        mw = max_bf16x2(mw, max_bf16x2(max_bf16x2(q[i].x, q[i].y), max_bf16x2(q[i].z, q[i].w)));
    const float2 mlh = widen(mw);
    // Finite floor as in v5: a thread of only -inf (or masked) elements sums exp(-inf) = 0.
    const float mt = fmaxf(KL_NEG_MAX, fmaxf(mlh.x, mlh.y));
    float st = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const unsigned int w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 v = widen(w[k]);
            st += kl_exp(v.x - mt) + kl_exp(v.y - mt);
        }
    }
    const float2 ms = row_merge<THREADS, C>(mt, st, rank, ws + row * C);
    // A row of -inf: m is KL_NEG_MAX and s = 0, so 0 * inf = NaN as F.softmax gives.
    const float m = ms.x, inv = 1.f / ms.y;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = first + i * THREADS;
        if (j < nvec) {
            const unsigned int w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
            unsigned int o[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float2 v = widen(w[k]);
                o[k] = narrow(kl_exp(v.x - m) * inv, kl_exp(v.y - m) * inv);
            }
            yr[j] = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}

// 1024 / THREADS blocks per SM caps registers at 64 per thread, as in v5.
#define KL_PACKED1(THREADS)                                                             \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_bf16_packed_t##THREADS##_c1(KL_ARGS(unsigned short)) {                  \
        softmax_packed_row<THREADS, 1>(x, y, cols, x_row_stride, ws);                   \
    }
#define KL_PACKEDC(THREADS, C)                                                          \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 1024 / THREADS) \
        softmax_bf16_packed_t##THREADS##_c##C(KL_ARGS(unsigned short)) {                \
        softmax_packed_row<THREADS, C>(x, y, cols, x_row_stride, ws);                   \
    }

KL_PACKED1(64)
KL_PACKED1(128)
KL_PACKED1(256)
KL_PACKED1(512)
KL_PACKED1(1024)
KL_PACKEDC(256, 2)
KL_PACKEDC(512, 2)
KL_PACKEDC(256, 4)
KL_PACKEDC(512, 4)
KL_PACKEDC(256, 8)
KL_PACKEDC(512, 8)
