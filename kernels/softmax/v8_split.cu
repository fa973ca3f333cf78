// v8_split: the shapes the families exposed, each with a path of its own; v7's stay as they are.
//   softmax_<dt>_group_<p>_g<G>     rows <= 128 columns: G lanes per row (G = 1..32, a power of
//                                   two), 32 / G rows per warp, 16 bytes of row per lane (4 fp32,
//                                   8 bf16): one vector, or ("scalar") as many elements strided
//                                   by G; reduced by shuffles within the group
//   softmax_<dt>_split_stats_<p>    then softmax_<dt>_split_write_<p>: a row split across
//                                   gridDim.x / rows blocks in two kernels. The first writes
//                                   each chunk's (max, sum) to the workspace, the second merges
//                                   its row's pairs and writes the chunk, reading it again: the
//                                   last chunks read first, while L2 still holds them
// <p> is "vec" (16-byte accesses) or "scalar", as in v5.
//
// CHANGE vs v7: short rows no longer leave lanes idle (v5's warp per row used 2 of 32 lanes on
// rows of 8, one 16-byte vector each); rows longer than a cluster holds (> 131072 columns) or
// too few to fill the GPU run on every SM instead of one block per row.
// EVIDENCE (H100, kernlog bench --family all, v7): 1048576x8 at 336 GB/s fp32 (F.softmax 2205),
// 262144x64 bf16 at 855 (F.softmax 1658); 16x1048576 fp32 at 389 GB/s and 4x1048576 at 130
// (copy 2685 and 2009): the stream path's one block per row leaves 116 and 128 of 132 SMs idle;
// 32x151936 fp32 at 732 (copy 2099).
// PREDICTION: rows <= 128 at >= F.softmax (>= 2.2 TB/s fp32 on 1048576x8); long and decode rows
// at >= 1.5 TB/s where the tensor outgrows L2 (three passes: read, read, write) and near copy
// speed where it fits; nothing slower than v7 beyond noise (the split layouts are candidates
// beside v7's, timed per shape).
#include "v7_bf16_packed.cu"

#define GROUP_THREADS 256
#define SPLIT_THREADS 512

template <typename T, int G>
__device__ void softmax_group_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                   long long x_row_stride) {
    constexpr int GROUP_ELEMS = 16 / sizeof(T);
    const int sub = threadIdx.x & (G - 1);
    const long long row = ((long long)blockIdx.x * GROUP_THREADS + threadIdx.x) / G;
    const bool live = row < rows;  // a dead group still shuffles: every lane of the warp takes part
    const T* xr = x + (live ? row : 0) * x_row_stride;
    float v[GROUP_ELEMS];
#pragma unroll
    for (int i = 0; i < GROUP_ELEMS; ++i) {
        const int j = sub + i * G;  // lanes of a group read neighbours: a warp reads 32 / G rows at once
        v[i] = live && j < cols ? kl_to_float(xr[j]) : kl_neg_inf();
    }
    const float2 mine = local_exp_sum<GROUP_ELEMS>(v);
    float m = mine.x, s = mine.y;
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) {  // xor partners stay inside the aligned group of G lanes
        const float m2 = __shfl_xor_sync(KL_FULL_MASK, m, o);
        const float s2 = __shfl_xor_sync(KL_FULL_MASK, s, o);
        kl_merge(m, s, m2, s2);
    }
    if (!live) return;
    const float scale = kl_exp(mine.x - m) * (1.f / s);
    T* yr = y + row * cols;
#pragma unroll
    for (int i = 0; i < GROUP_ELEMS; ++i) {
        const int j = sub + i * G;
        if (j < cols) yr[j] = kl_from_float<T>(v[i] * scale);
    }
}

// Aligned rows: lane `sub` of the group holds the row's vector `sub`, so a warp's load is 512
// contiguous bytes. (Elements strided by G, above, left bf16 rows of 8 at 0.34-0.65x torch.compile
// on the H100: each lane's 8 or 4 two-byte loads.)
template <typename T, int VW, int G>
__device__ void softmax_group_vec_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                       long long x_row_stride) {
    const int sub = threadIdx.x & (G - 1);
    const long long row = ((long long)blockIdx.x * GROUP_THREADS + threadIdx.x) / G;
    const bool live = row < rows && sub < cols / VW;  // a dead lane still shuffles
    float v[VW];
    if (live) {
        KlVec<T, VW>::load(x + row * x_row_stride + sub * VW, v);
    } else {
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] = kl_neg_inf();
    }
    const float2 mine = local_exp_sum<VW>(v);
    float m = mine.x, s = mine.y;
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(KL_FULL_MASK, m, o);
        const float s2 = __shfl_xor_sync(KL_FULL_MASK, s, o);
        kl_merge(m, s, m2, s2);
    }
    if (!live) return;
    const float scale = kl_exp(mine.x - m) * (1.f / s);
#pragma unroll
    for (int k = 0; k < VW; ++k) v[k] *= scale;
    KlVec<T, VW>::store(y + row * cols + sub * VW, v);
}

// The vectors [lo, hi) of chunk `block` % chunks of row `block` / chunks.
__device__ __forceinline__ int2 split_chunk(int nvec, int chunks, int block) {
    const int per = (nvec + chunks - 1) / chunks, c = block % chunks;
    return make_int2(min(nvec, c * per), min(nvec, (c + 1) * per));
}

template <typename T, int VW>
__device__ void softmax_split_stats(const T* __restrict__ x, int rows, int cols, long long x_row_stride,
                                    float2* __restrict__ ws) {
    const int chunks = gridDim.x / rows;
    const long long row = blockIdx.x / chunks;
    const int2 r = split_chunk(cols / VW, chunks, blockIdx.x);
    const T* xr = x + row * x_row_stride;
    float m = KL_NEG_MAX, s = 0.f;
#pragma unroll 4
    for (int j = r.x + threadIdx.x; j < r.y; j += SPLIT_THREADS) {
        float v[VW];
        KlVec<T, VW>::load(xr + (long long)j * VW, v);
        float vm = KL_NEG_MAX;
#pragma unroll
        for (int k = 0; k < VW; ++k) vm = fmaxf(vm, v[k]);
        const float mn = fmaxf(m, vm);
        s *= kl_exp(m - mn);
#pragma unroll
        for (int k = 0; k < VW; ++k) s += kl_exp(v[k] - mn);
        m = mn;
    }
    const float2 ms = row_merge<SPLIT_THREADS, 1>(m, s, 0u, nullptr);
    if (threadIdx.x == 0) ws[blockIdx.x] = ms;
}

template <typename T, int VW>
__device__ void softmax_split_write(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                    long long x_row_stride, const float2* __restrict__ ws) {
    // Blocks start in the reverse order of the first kernel's: the chunks it read last are the
    // ones L2 still holds (a 64 MB tensor outgrows the H100's 50 MB L2).
    const int block = gridDim.x - 1 - blockIdx.x, chunks = gridDim.x / rows;
    const long long row = block / chunks;
    const int2 r = split_chunk(cols / VW, chunks, block);
    float m = KL_NEG_MAX, s = 0.f;
    for (int k = threadIdx.x; k < chunks; k += SPLIT_THREADS) {  // the row's pairs, from the first kernel
        const float2 p = __ldcg(ws + row * chunks + k);
        kl_merge(m, s, p.x, p.y);
    }
    const float2 ms = row_merge<SPLIT_THREADS, 1>(m, s, 0u, nullptr);
    const float inv = 1.f / ms.y;
    const T* xr = x + row * x_row_stride;
    T* yr = y + row * cols;
#pragma unroll 4
    for (int j = r.x + threadIdx.x; j < r.y; j += SPLIT_THREADS) {
        float v[VW];
        KlVec<T, VW>::load(xr + (long long)j * VW, v);
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] = kl_exp(v[k] - ms.x) * inv;
        KlVec<T, VW>::store(yr + (long long)j * VW, v);
    }
}

#define KL_GROUP(DT, T, G)                                                               \
    extern "C" __global__ void __launch_bounds__(GROUP_THREADS)                          \
        softmax_##DT##_group_scalar_g##G(KL_ARGS(T)) {                                   \
        softmax_group_rows<T, G>(x, y, rows, cols, x_row_stride);                        \
    }                                                                                    \
    extern "C" __global__ void __launch_bounds__(GROUP_THREADS)                          \
        softmax_##DT##_group_vec_g##G(KL_ARGS(T)) {                                      \
        softmax_group_vec_rows<T, VEC(T), G>(x, y, rows, cols, x_row_stride);            \
    }
#define KL_SPLIT(DT, T, P, VW)                                                           \
    extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)                          \
        softmax_##DT##_split_stats_##P(KL_ARGS(T)) {                                     \
        softmax_split_stats<T, VW>(x, rows, cols, x_row_stride, ws);                     \
    }                                                                                    \
    extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)                          \
        softmax_##DT##_split_write_##P(KL_ARGS(T)) {                                     \
        softmax_split_write<T, VW>(x, y, rows, cols, x_row_stride, ws);                  \
    }
#define KL_GROUPS(DT, T)                                                                 \
    KL_GROUP(DT, T, 1)                                                                   \
    KL_GROUP(DT, T, 2)                                                                   \
    KL_GROUP(DT, T, 4)                                                                   \
    KL_GROUP(DT, T, 8)                                                                   \
    KL_GROUP(DT, T, 16)

KL_GROUPS(fp32, float)
KL_GROUP(fp32, float, 32)  // 32 x 4 fp32 = 128 columns; bf16 rows of 128 take 16 lanes of 8
KL_GROUPS(bf16, unsigned short)
KL_SPLIT(fp32, float, vec, 4)
KL_SPLIT(fp32, float, scalar, 1)
KL_SPLIT(bf16, unsigned short, vec, 8)
KL_SPLIT(bf16, unsigned short, scalar, 1)
