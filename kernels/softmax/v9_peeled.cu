// v9_peeled: rows that do not start on a 16-byte boundary keep a 16-byte layout. Each row
// peels the elements before its first 16-byte boundary (the head: 0-7 bf16, 0-3 fp32) and
// after its last whole vector (the tail, as many) as scalars, one per thread; the body between
// is read and written 16 bytes at a time, as an aligned row is.
//   softmax_bf16_peeled_t<T>_c<C>   v7's softmax_bf16_packed_t<T>_c<C>, with the peel
//   softmax_fp32_peeled_t<T>_c<C>   v5/v6's softmax_fp32_row_vec_t<T>_c<C>, with the peel
// The launcher adds these layouts to v8's candidates for rows of > 1024 columns that are not
// aligned but whose input and output rows sit at the same offset from a 16-byte boundary (a
// contiguous tensor's rows, whatever the row length); v8's candidates stay.
//
// CHANGE vs v8: an odd row length (50257, GPT-2's vocabulary) no longer sends every access of
// every row down the scalar path (2-byte loads).
// EVIDENCE (H100, v7 at 4096x50257 bf16, ncu): the scalar kernel softmax_bf16_row_scalar_t256_c8
// at 2.9 sectors per request (torch 14.3), DRAM at 48% of peak (torch 65%); 513 us against
// F.softmax's 393 (0.77x), 1.6 TB/s where copy runs at 3.0.
// PREDICTION: bf16 vocabulary rows (50257, 151936 columns and other odd lengths > 1024) reach
// v7's aligned speed at the same size (>= 2.5 TB/s at 4096x50257, >= F.softmax); aligned rows
// unchanged (v8's kernels).
// MEASURED (H100, 3 runs): bf16 4096x50257 2922 GB/s, 98% of copy, 1.40x F.softmax. fp32 then
// got the same peel: v8's fp32 4096x50257 ran its scalar path at 2651 GB/s, 88% of copy
// (4-byte accesses coalesce; the loss is instructions and sectors per request).
// PREDICTION (fp32): 4096x50257 fp32 at >= 95% of copy, as 4096x32000 (aligned) runs.
#include "v8_split.cu"

template <int THREADS, int C>
__device__ void softmax_peeled_row(const unsigned short* __restrict__ x, unsigned short* __restrict__ y,
                                   int cols, long long x_row_stride, float2* __restrict__ ws) {
    constexpr int VPT = PACKED / 8;
    const unsigned int rank = C > 1 ? cluster_ctarank() : 0u;
    const long long row = blockIdx.x / C;
    const unsigned short* xrow = x + row * x_row_stride;
    unsigned short* yrow = y + row * (long long)cols;
    // Elements before the row's first 16-byte boundary; the launcher checks y's row sits at the
    // same offset, so one head serves both.
    const int head = min(cols, (int)(((16u - ((unsigned int)(size_t)xrow & 15u)) & 15u) >> 1));
    const int nvec = (cols - head) / 8, tail = cols - head - nvec * 8;
    const int first = (int)rank * THREADS * VPT + threadIdx.x;
    const uint4* xr = reinterpret_cast<const uint4*>(xrow + head);
    uint4* yr = reinterpret_cast<uint4*>(yrow + head);

    uint4 q[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = first + i * THREADS;
        q[i] = j < nvec ? xr[j] : make_uint4(BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF);
    }
    // The peel: threads 0-7 of the row's first block take a head element each, 8-15 a tail one.
    int e = -1;
    if (rank == 0 && threadIdx.x < 16) {
        const int t = threadIdx.x & 7;
        if (threadIdx.x < 8 && t < head) e = t;
        else if (threadIdx.x >= 8 && t < tail) e = head + nvec * 8 + t;
    }
    const float pv = e >= 0 ? kl_to_float(xrow[e]) : kl_neg_inf();
    unsigned int mw = BF16X2_NEG_INF;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
        mw = max_bf16x2(mw, max_bf16x2(max_bf16x2(q[i].x, q[i].y), max_bf16x2(q[i].z, q[i].w)));
    const float2 mlh = widen(mw);
    // A NaN peel drops out of the max (fmaxf) but not out of the sum, as in v7.
    const float mt = fmaxf(KL_NEG_MAX, fmaxf(fmaxf(mlh.x, mlh.y), pv));
    float st = e >= 0 ? kl_exp(pv - mt) : 0.f;
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
    const float m = ms.x, inv = 1.f / ms.y;
    if (e >= 0) yrow[e] = kl_float_to_bf16(kl_exp(pv - m) * inv);
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

#define KL_PEELED1(THREADS)                                                             \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_bf16_peeled_t##THREADS##_c1(KL_ARGS(unsigned short)) {                  \
        softmax_peeled_row<THREADS, 1>(x, y, cols, x_row_stride, ws);                   \
    }
#define KL_PEELEDC(THREADS, C)                                                          \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 1024 / THREADS) \
        softmax_bf16_peeled_t##THREADS##_c##C(KL_ARGS(unsigned short)) {                \
        softmax_peeled_row<THREADS, C>(x, y, cols, x_row_stride, ws);                   \
    }

KL_PEELED1(64)
KL_PEELED1(128)
KL_PEELED1(256)
KL_PEELED1(512)
KL_PEELED1(1024)
KL_PEELEDC(256, 2)
KL_PEELEDC(512, 2)
KL_PEELEDC(256, 4)
KL_PEELEDC(512, 4)
KL_PEELEDC(256, 8)
KL_PEELEDC(512, 8)

// fp32: v5's register layout (ELEMS floats per thread as float4) behind the peel of 0-3 head
// and 0-3 tail elements (threads 0-3 and 4-7 of the row's first block).
template <int THREADS, int C>
__device__ void softmax_peeled_row_fp32(const float* __restrict__ x, float* __restrict__ y, int cols,
                                        long long x_row_stride, float2* __restrict__ ws) {
    constexpr int VW = 4, VPT = ELEMS / VW;
    const unsigned int rank = C > 1 ? cluster_ctarank() : 0u;
    const long long row = blockIdx.x / C;
    const float* xrow = x + row * x_row_stride;
    float* yrow = y + row * (long long)cols;
    const int head = min(cols, (int)(((16u - ((unsigned int)(size_t)xrow & 15u)) & 15u) >> 2));
    const int nvec = (cols - head) / VW, tail = cols - head - nvec * VW;
    const int first = (int)rank * THREADS * VPT + threadIdx.x;

    float v[ELEMS];
    load_row<float, VW, VPT>(xrow + head, first, THREADS, nvec, v);
    int e = -1;
    if (rank == 0 && threadIdx.x < 8) {
        const int t = threadIdx.x & 3;
        if (threadIdx.x < 4 && t < head) e = t;
        else if (threadIdx.x >= 4 && t < tail) e = head + nvec * VW + t;
    }
    const float pv = e >= 0 ? xrow[e] : kl_neg_inf();
    float mt = fmaxf(KL_NEG_MAX, pv);  // a NaN peel drops out of the max, not out of the sum
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) mt = fmaxf(mt, v[k]);
    float st = e >= 0 ? kl_exp(pv - mt) : 0.f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) { v[k] = kl_exp(v[k] - mt); st += v[k]; }
    const float2 ms = row_merge<THREADS, C>(mt, st, rank, ws + row * C);
    if (e >= 0) yrow[e] = kl_exp(pv - ms.x) * (1.f / ms.y);
    store_row<float, VW, VPT>(yrow + head, first, THREADS, nvec, v, mt, ms.x, ms.y);
}

#define KL_PEELED_FP32_1(THREADS)                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_fp32_peeled_t##THREADS##_c1(KL_ARGS(float)) {                           \
        softmax_peeled_row_fp32<THREADS, 1>(x, y, cols, x_row_stride, ws);              \
    }
#define KL_PEELED_FP32_C(THREADS, C)                                                    \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 1024 / THREADS) \
        softmax_fp32_peeled_t##THREADS##_c##C(KL_ARGS(float)) {                         \
        softmax_peeled_row_fp32<THREADS, C>(x, y, cols, x_row_stride, ws);              \
    }

KL_PEELED_FP32_1(256)
KL_PEELED_FP32_1(512)
KL_PEELED_FP32_1(1024)
KL_PEELED_FP32_C(256, 2)
KL_PEELED_FP32_C(512, 2)
KL_PEELED_FP32_C(256, 4)
KL_PEELED_FP32_C(512, 4)
KL_PEELED_FP32_C(256, 8)
KL_PEELED_FP32_C(512, 8)

