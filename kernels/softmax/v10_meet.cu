// v10_meet: a row longer than a cluster holds, or too few rows to fill the GPU, is split into
// chunks of THREADS x 32 elements, one block each, every chunk held in registers; the chunks of
// a row meet through a global workspace instead of reading the row twice.
//   softmax_<dt>_meet_t<T>          T = 256, 512, 1024 threads of 32 elements (widened to floats)
//   softmax_bf16_meet_packed_t<T>   the same with 64 bf16 a thread kept packed (v7's rows)
// a row in 2..32 chunks of T threads' elements; 16-byte rows only.
// A block reduces its chunk to (max, sum), publishes them in its slot of the row (one 64-bit
// word: max in the high half, sum in the low, the sum's sign bit holding the launch's epoch),
// and warp 0 polls the row's slots until every chunk's word carries this launch's epoch. No
// fence and no counter: the data is the word. Every launch leaves all MEET_CAP slots of a row
// it splits in one epoch (chunk 0 marks the slots past the row's chunks), so a block reads the
// epoch its own slot holds and takes the other; a CUDA graph replay flips it too. Two launches
// must not run concurrently on one workspace (the launcher's, per device).
// Blocks are scheduled about in index order, so a row's chunks are co-resident but at a wave's
// edge; CUDA does not promise it, so after `polls` polls a block computes every chunk's pair
// itself, exactly as that chunk's block does (same threads, same order), and merges them in the
// same order: bitwise the same row (max, sum), whichever way it was found.
//
// CHANGE vs v9: rows > 131072 columns (and decode batches) were split in two kernels (v8), the
// row read twice: (max, sum) per chunk, then merge and write.
// EVIDENCE (H100, committed sweep, v9): fp32 4096x151936 at 1940 GB/s, 64% of the run's copy
// (3022); 64x262144 62%, 16x1048576 63%: the two-pass bound (3 accesses for 2 counted: 2015).
// The Triton counterpart, whose chunks meet this way, reads once: 3023 GB/s at 4096x151936.
// PREDICTION: rows >= 131072 aligned at >= 90% of copy (>= 2.7 TB/s at 4096x151936 fp32 and
// bf16, 64x262144, 16x1048576); nothing else slower than v9 beyond noise (candidates beside
// v9's, timed per shape).
#include "v9_peeled.cu"

#define MEET_CAP 32                    // slots a row: warp 0 polls one a lane
#define MEET_EPOCH 0x80000000ull       // the sum's sign bit: the epoch of the launch that wrote it

__device__ __forceinline__ unsigned long long meet_load(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void meet_store(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// A chunk of a row, held by one block of THREADS threads: load(c) reads chunk c into this
// thread's registers and returns the chunk's (max, sum) (every thread gets it); store writes the
// chunk back normalized by the row's (m, s).
// Widened: ELEMS floats a thread, as v5/v6's register rows.
template <typename T, int VW, int THREADS>
struct WideChunk {
    static constexpr int VPT = ELEMS / VW;
    float v[ELEMS];
    float mt;
    __device__ __forceinline__ float2 load(const T* __restrict__ xr, int c, int nvec) {
        load_row<T, VW, VPT>(xr, c * THREADS * VPT + threadIdx.x, THREADS, nvec, v);
        const float2 mine = local_exp_sum<ELEMS>(v);
        mt = mine.x;
        return row_merge<THREADS, 1>(mine.x, mine.y, 0u, nullptr);
    }
    __device__ __forceinline__ void store(T* __restrict__ yr, int c, int nvec, float m, float s) {
        store_row<T, VW, VPT>(yr, c * THREADS * VPT + threadIdx.x, THREADS, nvec, v, mt, m, s);
    }
};
// Packed: PACKED bf16 a thread kept as bf16x2 words, as v7's packed rows (twice the bytes in
// flight per thread of a widened bf16 chunk); exp computed again at the store.
template <int THREADS>
struct PackedChunk {
    static constexpr int VPT = PACKED / 8;
    uint4 q[VPT];
    __device__ __forceinline__ float2 load(const unsigned short* __restrict__ xr, int c, int nvec) {
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        const int first = c * THREADS * VPT + threadIdx.x;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = first + i * THREADS;
            q[i] = j < nvec ? xv[j] : make_uint4(BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF);
        }
        unsigned int mw = BF16X2_NEG_INF;
#pragma unroll
        for (int i = 0; i < VPT; ++i)
            mw = max_bf16x2(mw, max_bf16x2(max_bf16x2(q[i].x, q[i].y), max_bf16x2(q[i].z, q[i].w)));
        const float2 mlh = widen(mw);
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
        return row_merge<THREADS, 1>(mt, st, 0u, nullptr);
    }
    __device__ __forceinline__ void store(unsigned short* __restrict__ yr, int c, int nvec, float m, float s) {
        uint4* yv = reinterpret_cast<uint4*>(yr);
        const int first = c * THREADS * VPT + threadIdx.x;
        const float inv = 1.f / s;
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
                yv[j] = make_uint4(o[0], o[1], o[2], o[3]);
            }
        }
    }
};

template <typename T, int VW, typename Chunk>
__device__ void softmax_meet_row(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                 long long x_row_stride, unsigned long long* __restrict__ slots, int polls) {
    __shared__ float2 met, pairs[MEET_CAP];
    __shared__ int found;
    const int split = gridDim.x / rows;
    const long long row = blockIdx.x / split;
    const int k = blockIdx.x % split, nvec = cols / VW, lane = threadIdx.x & 31;
    const T* xr = x + row * x_row_stride;
    Chunk chunk;
    const float2 part = chunk.load(xr, k, nvec);
    if (threadIdx.x < 32) {
        unsigned long long* rs = slots + row * MEET_CAP;
        unsigned long long epoch = 0;
        if (lane == 0) {  // a sum is >= 0 (or NaN, which stays NaN): its sign bit is free
            epoch = (meet_load(rs + k) & MEET_EPOCH) ^ MEET_EPOCH;
            atomicExch(rs + k, ((unsigned long long)__float_as_uint(part.x) << 32)
                                   | (__float_as_uint(part.y) & 0x7fffffffu) | epoch);
        }
        epoch = __shfl_sync(KL_FULL_MASK, epoch, 0);
        if (k == 0 && lane >= split) meet_store(rs + lane, epoch);
        const bool live = lane < split;
        unsigned long long w = epoch;
        bool all = false;
        for (int left = polls; left > 0 && !all; --left) {  // warp-uniform: all is __all_sync's
            w = live ? meet_load(rs + lane) : epoch;
            all = __all_sync(KL_FULL_MASK, (w & MEET_EPOCH) == epoch);
        }
        if (all) {
            float m = live ? __uint_as_float((unsigned int)(w >> 32)) : KL_NEG_MAX;
            float s = live ? __uint_as_float((unsigned int)w & 0x7fffffffu) : 0.f;
            kl_warp_merge(m, s);
            if (lane == 0) met = make_float2(m, s);
        }
        if (lane == 0) found = all;
    }
    __syncthreads();
    if (!found) {  // block-uniform: the row's pairs computed here, as each chunk's block does
        for (int c = 0; c < split; ++c) {
            const float2 p = chunk.load(xr, c, nvec);
            if (threadIdx.x == 0) pairs[c] = make_float2(p.x, __uint_as_float(__float_as_uint(p.y) & 0x7fffffffu));
            __syncthreads();  // row_merge's shared partials are reused by the next chunk
        }
        if (threadIdx.x < 32) {
            float m = lane < split ? pairs[lane].x : KL_NEG_MAX;
            float s = lane < split ? pairs[lane].y : 0.f;
            kl_warp_merge(m, s);
            if (lane == 0) met = make_float2(m, s);
        }
        chunk.load(xr, k, nvec);  // this block's chunk again, as it was
        __syncthreads();
    }
    const float2 ms = met;
    chunk.store(y + row * cols, k, nvec, ms.x, ms.y);
}

#define KL_MEET(DT, T, THREADS)                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_##DT##_meet_t##THREADS(KL_ARGS(T), unsigned long long* slots, int polls) { \
        softmax_meet_row<T, VEC(T), WideChunk<T, VEC(T), THREADS>>(x, y, rows, cols, x_row_stride, slots, polls); \
    }
#define KL_MEET_PACKED(THREADS)                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_bf16_meet_packed_t##THREADS(KL_ARGS(unsigned short), unsigned long long* slots, int polls) { \
        softmax_meet_row<unsigned short, 8, PackedChunk<THREADS>>(x, y, rows, cols, x_row_stride, slots, polls); \
    }

KL_MEET(fp32, float, 256)
KL_MEET(fp32, float, 512)
KL_MEET(fp32, float, 1024)
KL_MEET(bf16, unsigned short, 256)
KL_MEET(bf16, unsigned short, 512)
KL_MEET(bf16, unsigned short, 1024)
KL_MEET_PACKED(256)
KL_MEET_PACKED(512)
KL_MEET_PACKED(1024)
