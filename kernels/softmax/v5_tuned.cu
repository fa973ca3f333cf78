// v5_tuned: picks its strategy by row length; every path holds the row in registers
// (32 elements per thread, 128-bit accesses) so each element is read once and written once.
//   softmax_<dt>_warp_<p>_e<E>      cols <= 1024: a warp per row, 4 rows per 128-thread
//                                   block; E elements per lane, no barrier at all
//   softmax_<dt>_row_<p>_t<T>_c<C>  cols <= C * T * 32: a thread-block cluster of C blocks
//                                   of T threads per row (C = 1: a block per row); the
//                                   blocks' (max, sum) pairs meet in a small global
//                                   workspace, so rows up to 131072 stay on chip across SMs
//   softmax_<dt>_stream_<p>         longer rows: two passes over global memory (as v4)
// <p> is "vec" (16-byte accesses) or "scalar": the fallback when cols, the row stride or a
// base pointer breaks 16-byte alignment.
//
// CHANGE vs v4: shape-dependent launch: several rows per block for short rows, and Hopper
// clusters instead of the second global pass for rows of 16384..131072 elements.
// PREDICTION: rows > 8192 stop re-reading: global load bytes halve, and on 1024x131072
// (rows too long for L2 to keep between v4's passes) dram__bytes_read falls from ~2x to 1x
// the tensor; dram__throughput reaches >= 90% of peak (>= 2.7 TB/s effective) on 64 MB+
// shapes; short rows (<= 1024) get 4x fewer, fuller blocks and no barrier stalls.
#include "kl_cuda.cuh"

#define ELEMS 32  // floats of row per thread: 8 float4 or 4 x (8 x bf16); fits 64 registers

// ---- Cluster primitives (inline PTX, sm_90).
__device__ __forceinline__ unsigned int cluster_ctarank() {
    unsigned int r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Not the .aligned forms: those require every thread of the warp to arrive converged, and
// each barrier here follows divergent code (`tid == 0`, masked stores).
__device__ __forceinline__ void cluster_arrive() {
    __syncwarp();
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}
// ---- Per-thread work shared by both register-resident paths.
// Loads vectors j = first + i * step (i < VPT) of the row, masked ones as -inf.
template <typename T, int VW, int VPT>
__device__ __forceinline__ void load_row(const T* __restrict__ xr, int first, int step, int nvec, float* v) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        int j = first + i * step;
        if (j < nvec) {
            KlVec<T, VW>::load(xr + j * VW, v + i * VW);
        } else {
#pragma unroll
            for (int k = 0; k < VW; ++k) v[i * VW + k] = kl_neg_inf();
        }
    }
}
// v <- exp(v - mt), returns (mt, sum) for this thread.
template <int N>
__device__ __forceinline__ float2 local_exp_sum(float* v) {
    float mt = KL_NEG_MAX;
#pragma unroll
    for (int k = 0; k < N; ++k) mt = fmaxf(mt, v[k]);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < N; ++k) { v[k] = kl_exp(v[k] - mt); s += v[k]; }
    return make_float2(mt, s);
}
// Rescale this thread's exps to the row max m and divide by the row sum s. A row of -inf:
// mt = m and s = 0, so 0 * inf = NaN as in F.softmax; a NaN input makes s NaN everywhere.
template <typename T, int VW, int VPT>
__device__ __forceinline__ void store_row(T* __restrict__ yr, int first, int step, int nvec, float* v,
                                          float mt, float m, float s) {
    const float scale = kl_exp(mt - m) * (1.f / s);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        int j = first + i * step;
        if (j < nvec) {
#pragma unroll
            for (int k = 0; k < VW; ++k) v[i * VW + k] *= scale;
            KlVec<T, VW>::store(yr + j * VW, v + i * VW);
        }
    }
}

// ---- Short rows: one warp per row, shuffles only.
#define WARP_ROWS 4
template <typename T, int VW, int E>
__device__ void softmax_warp_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                  long long x_row_stride) {
    constexpr int VPT = E / VW;
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * WARP_ROWS + (threadIdx.x >> 5);
    if (row >= rows) return;  // whole warps leave; there is no block barrier
    const int nvec = cols / VW;
    float v[E];
    load_row<T, VW, VPT>(x + row * x_row_stride, lane, 32, nvec, v);
    float2 ms = local_exp_sum<E>(v);
    float m = ms.x, s = ms.y;
    kl_warp_merge(m, s);
    store_row<T, VW, VPT>(y + (long long)row * cols, lane, 32, nvec, v, ms.x, m, s);
}

// Row (max, sum) from each thread's pair: merged across the block, then (C > 1) across
// the cluster's blocks. Those meet in a global workspace (C pairs per row, L2 resident),
// ordered by the cluster barrier's release/acquire. The first version read them from the
// peers' shared memory (mapa + ld.shared::cluster) and faulted on the H100 ("unspecified
// launch failure") for fp32 rows of 24000..131072 once thousands of clusters ran; only the
// clusters' co-scheduling is needed here.
template <int THREADS, int C>
__device__ __forceinline__ float2 row_merge(float m, float s, unsigned int rank, float2* __restrict__ slot) {
    constexpr int WARPS = THREADS / 32;
    __shared__ float part_m[WARPS], part_s[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    kl_warp_merge(m, s);
    if (lane == 0) { part_m[warp] = m; part_s[warp] = s; }
    __syncthreads();
    m = lane < WARPS ? part_m[lane] : KL_NEG_MAX;
    s = lane < WARPS ? part_s[lane] : 0.f;
    kl_warp_merge(m, s);
    if (C > 1) {
        if (tid == 0) slot[rank] = make_float2(m, s);
        cluster_arrive();
        cluster_wait();
        float2 peer = make_float2(KL_NEG_MAX, 0.f);
        if (lane < C) peer = __ldcg(slot + lane);
        m = peer.x;
        s = peer.y;
        kl_warp_merge(m, s);
    }
    return make_float2(m, s);
}

// ---- Medium and long rows: a cluster of C blocks of THREADS threads per row, each block
// holding a contiguous slice of THREADS * ELEMS elements.
template <typename T, int VW, int THREADS, int C>
__device__ void softmax_cluster_row(const T* __restrict__ x, T* __restrict__ y, int cols,
                                    long long x_row_stride, float2* __restrict__ ws) {
    constexpr int VPT = ELEMS / VW;
    const unsigned int rank = C > 1 ? cluster_ctarank() : 0u;
    const long long row = blockIdx.x / C;
    const int nvec = cols / VW, first = (int)rank * THREADS * VPT + threadIdx.x;

    float v[ELEMS];
    load_row<T, VW, VPT>(x + row * x_row_stride, first, THREADS, nvec, v);
    const float2 mine = local_exp_sum<ELEMS>(v);

    const float2 ms = row_merge<THREADS, C>(mine.x, mine.y, rank, ws + row * C);
    store_row<T, VW, VPT>(y + row * cols, first, THREADS, nvec, v, mine.x, ms.x, ms.y);
}

// ---- Rows longer than any cluster holds: v4's two passes over global memory.
#define STREAM_THREADS 512
template <typename T, int VW>
__device__ void softmax_stream(const T* __restrict__ x, T* __restrict__ y, int cols, long long x_row_stride) {
    const int tid = threadIdx.x, nvec = cols / VW;
    const T* xr = x + blockIdx.x * x_row_stride;
    T* yr = y + (long long)blockIdx.x * cols;

    float m = KL_NEG_MAX, s = 0.f;
#pragma unroll 4
    for (int j = tid; j < nvec; j += STREAM_THREADS) {
        float v[VW];
        KlVec<T, VW>::load(xr + j * VW, v);
        float vm = KL_NEG_MAX;
#pragma unroll
        for (int k = 0; k < VW; ++k) vm = fmaxf(vm, v[k]);
        float mn = fmaxf(m, vm);
        s *= kl_exp(m - mn);
#pragma unroll
        for (int k = 0; k < VW; ++k) s += kl_exp(v[k] - mn);
        m = mn;
    }
    const float2 ms = row_merge<STREAM_THREADS, 1>(m, s, 0u, nullptr);
    m = ms.x;
    const float inv = 1.f / ms.y;
#pragma unroll 4
    for (int j = tid; j < nvec; j += STREAM_THREADS) {
        float v[VW];
        KlVec<T, VW>::load(xr + j * VW, v);
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] = kl_exp(v[k] - m) * inv;
        KlVec<T, VW>::store(yr + j * VW, v);
    }
}

// ---- extern "C" entry points; cuda_launch.py's v5 plan names exactly these.
#define KL_ARGS(T) const T *x, T *y, int rows, int cols, long long x_row_stride, float2 *ws
#define VEC(T) (16 / (int)sizeof(T))

#define KL_WARP(DT, T, P, VW, E)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * WARP_ROWS, 1024 / (32 * WARP_ROWS)) \
        softmax_##DT##_warp_##P##_e##E(KL_ARGS(T)) {                                    \
        softmax_warp_rows<T, VW, E>(x, y, rows, cols, x_row_stride);                    \
    }
// 1024 / THREADS blocks per SM caps registers at 64 per thread.
#define KL_ROW1(DT, T, P, VW, THREADS)                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_##DT##_row_##P##_t##THREADS##_c1(KL_ARGS(T)) {                          \
        softmax_cluster_row<T, VW, THREADS, 1>(x, y, cols, x_row_stride, ws);               \
    }
#define KL_ROWC(DT, T, P, VW, THREADS, C)                                               \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 1024 / THREADS) \
        softmax_##DT##_row_##P##_t##THREADS##_c##C(KL_ARGS(T)) {                        \
        softmax_cluster_row<T, VW, THREADS, C>(x, y, cols, x_row_stride, ws);               \
    }
#define KL_STREAM(DT, T, P, VW)                                                         \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS)                        \
        softmax_##DT##_stream_##P(KL_ARGS(T)) {                                         \
        softmax_stream<T, VW>(x, y, cols, x_row_stride);                                \
    }
#define KL_ALL(DT, T, P, VW)                                                            \
    KL_WARP(DT, T, P, VW, 8)                                                            \
    KL_WARP(DT, T, P, VW, 16)                                                           \
    KL_WARP(DT, T, P, VW, 32)                                                           \
    KL_ROW1(DT, T, P, VW, 64)                                                           \
    KL_ROW1(DT, T, P, VW, 128)                                                          \
    KL_ROW1(DT, T, P, VW, 256)                                                          \
    KL_ROWC(DT, T, P, VW, 256, 2)                                                       \
    KL_ROWC(DT, T, P, VW, 256, 4)                                                       \
    KL_ROWC(DT, T, P, VW, 256, 8)                                                       \
    KL_ROWC(DT, T, P, VW, 512, 8)                                                       \
    KL_STREAM(DT, T, P, VW)

KL_ALL(fp32, float, vec, 4)
KL_ALL(fp32, float, scalar, 1)
KL_ALL(bf16, unsigned short, vec, 8)
KL_ALL(bf16, unsigned short, scalar, 1)
