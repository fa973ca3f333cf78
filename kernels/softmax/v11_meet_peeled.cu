// v11_meet_peeled: v10's meeting for rows off the 16-byte boundary too (v9's peel in every
// chunk), and a bf16 chunk that computes each exponential once and holds it packed.
//   softmax_bf16_meet_peeled_t<T>   T = 128, 256, 512 threads of 64 bf16 (8 uint4) a thread
//   softmax_fp32_meet_peeled_t<T>   T = 256, 512, 1024 threads of 32 floats (v10's widened chunk)
// A row is addressed as v9 addresses it: the head (the elements before its first 16-byte
// boundary, 0-7 bf16 / 0-3 fp32) and the tail (after its last whole vector) are scalars; the
// body's vectors are dealt to the chunks, PER = T x (vectors a thread) each, chunk c holding
// vectors [c PER, (c + 1) PER). Threads 0..VW-1 of chunk 0 take a head element each, threads
// VW..2VW-1 of the chunk holding the last body vector a tail one; a scalar joins its thread's
// (max, sum) and is written with its thread's factor. The launcher splits a row of n vectors
// (n = cols / VW, the most any offset leaves) into ceil(n / PER) chunks, so every offset's body
// fits, and takes only rows whose output sits at the input's offset (as v9).
// The meeting is v10's (softmax_meet_row_early below), with the epoch read ahead of the loads.
//
// CHANGE vs v10: v10 met only 16-byte rows; the others (GPT-2's 50257 columns, every row of a
// contiguous tensor of odd length) ran v9's one-row-a-cluster layouts. v10's packed bf16 chunk
// held x and computed every exponential twice (for the sum, then for the output): here the
// exponentials, taken against the thread's max, replace x in the registers, rounded to bf16, and
// the store multiplies each by one factor. That is one rounding more than v10's (an output within
// one bf16 ulp of the correctly rounded value, where v10's is within half), as the Triton
// counterpart triton_packed. And v10's warp 0 read its slot's epoch after the chunk's (max, sum),
// an L2 round trip in every block's path to its publish; here it is read before the loads.
// EVIDENCE (H200, committed sweep, v10): 4096x50257 bf16 at 83% of copy and fp32 at 79% (v9's
// clusters), where triton_packed meets at 95% and 97%; aligned bf16 4096x151936 at 89% and
// 4096x128256 at 91% (v10's packed meeting, two exponentials an element), triton_packed 96-98%.
// The first form of this file (v10's meeting as it is) ran bf16 4096x50257 at 88% of copy, its
// profile's warps stalled at the barrier after the meeting 4.7 cycles an instruction (triton_packed
// 0.8); the epoch read early: 95% (H200, do_bench, each layout forced; every warp polling for
// itself, with or without a barrier after, ran 87-90%).
// PREDICTION: 4096x50257 bf16 and fp32 and 4096x151936 bf16 at >= 95% of the same-run copy on
// the H200, >= 1.1x v10 at 4096x50257 bf16; nothing slower than v10 beyond noise (candidates
// beside v10's, timed per shape).
#include "v10_meet.cu"

// The head and tail of a row whose body starts at the first 16-byte boundary at or after p.
struct Peel {
    int head, nvec, tail;
    template <typename T>
    __device__ __forceinline__ Peel(const T* p, int cols) {
        constexpr int VW = 16 / (int)sizeof(T);
        head = min(cols, (int)(((16u - ((unsigned int)(size_t)p & 15u)) & 15u) / sizeof(T)));
        nvec = (cols - head) / VW;
        tail = cols - head - nvec * VW;
    }
    // This thread's scalar of chunk c (chunks of `per` vectors): its index in the row, or -1.
    template <int VW>
    __device__ __forceinline__ int scalar(int c, int per) const {
        const int t = threadIdx.x & (VW - 1);
        if (threadIdx.x < VW) return c == 0 && t < head ? t : -1;
        if (threadIdx.x < 2 * VW) return c == max(nvec - 1, 0) / per && t < tail ? head + nvec * VW + t : -1;
        return -1;
    }
};

// bf16: 64 a thread, loaded as 8 uint4; after load() they hold exp(x - mt) rounded to bf16, two
// a word, mt this thread's max (its scalar's too), pe the scalar's exponential in fp32. (ptxas
// spills two words once a chunk at 64 registers, however the scalar and the epoch are held.)
template <int THREADS>
struct PeeledPackedChunk {
    static constexpr int VPT = PACKED / 8, PER = THREADS * VPT;
    uint4 q[VPT];
    float mt, pe;
    __device__ __forceinline__ float2 load(const unsigned short* __restrict__ xr, int c, int cols) {
        const Peel p(xr, cols);
        const uint4* xv = reinterpret_cast<const uint4*>(xr + p.head);
        const int first = c * PER + threadIdx.x;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = first + i * THREADS;
            q[i] = j < p.nvec ? xv[j] : make_uint4(BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF, BF16X2_NEG_INF);
        }
        const int e = p.scalar<8>(c, PER);
        const float pv = e >= 0 ? kl_to_float(xr[e]) : kl_neg_inf();
        unsigned int mw = BF16X2_NEG_INF;
#pragma unroll
        for (int i = 0; i < VPT; ++i)
            mw = max_bf16x2(mw, max_bf16x2(max_bf16x2(q[i].x, q[i].y), max_bf16x2(q[i].z, q[i].w)));
        const float2 mlh = widen(mw);
        // A NaN scalar drops out of the max (fmaxf) but not out of the sum, as in v9.
        mt = fmaxf(KL_NEG_MAX, fmaxf(fmaxf(mlh.x, mlh.y), pv));
        pe = e >= 0 ? kl_exp(pv - mt) : 0.f;
        float st = pe;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            unsigned int w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float2 v = widen(w[k]);
                const float lo = kl_exp(v.x - mt), hi = kl_exp(v.y - mt);
                st += lo + hi;
                w[k] = narrow(lo, hi);
            }
            q[i] = make_uint4(w[0], w[1], w[2], w[3]);
        }
        return row_merge<THREADS, 1>(mt, st, 0u, nullptr);
    }
    // A row of -inf: mt = m = KL_NEG_MAX and s = 0, so 0 * inf = NaN, as F.softmax gives.
    __device__ __forceinline__ void store(unsigned short* __restrict__ yr, int c, int cols, float m, float s) {
        const Peel p(yr, cols);  // x's, the launcher checks: y's row sits at x's offset
        uint4* yv = reinterpret_cast<uint4*>(yr + p.head);
        const int first = c * PER + threadIdx.x, e = p.scalar<8>(c, PER);
        const float scale = kl_exp(mt - m) * (1.f / s);
        if (e >= 0) yr[e] = kl_float_to_bf16(pe * scale);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = first + i * THREADS;
            if (j < p.nvec) {
                const unsigned int w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
                unsigned int o[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float2 v = widen(w[k]);
                    o[k] = narrow(v.x * scale, v.y * scale);
                }
                yv[j] = make_uint4(o[0], o[1], o[2], o[3]);
            }
        }
    }
};

// fp32: v10's widened chunk (ELEMS floats a thread as float4) behind the peel.
template <int THREADS>
struct PeeledWideChunk {
    static constexpr int VPT = ELEMS / 4, PER = THREADS * VPT;
    float v[ELEMS];
    float mt, pe;
    int e;
    __device__ __forceinline__ float2 load(const float* __restrict__ xr, int c, int cols) {
        const Peel p(xr, cols);
        load_row<float, 4, VPT>(xr + p.head, c * PER + threadIdx.x, THREADS, p.nvec, v);
        e = p.scalar<4>(c, PER);
        const float pv = e >= 0 ? xr[e] : kl_neg_inf();
        mt = fmaxf(KL_NEG_MAX, pv);  // a NaN scalar drops out of the max, not out of the sum
#pragma unroll
        for (int k = 0; k < ELEMS; ++k) mt = fmaxf(mt, v[k]);
        pe = e >= 0 ? kl_exp(pv - mt) : 0.f;
        float st = pe;
#pragma unroll
        for (int k = 0; k < ELEMS; ++k) { v[k] = kl_exp(v[k] - mt); st += v[k]; }
        return row_merge<THREADS, 1>(mt, st, 0u, nullptr);
    }
    __device__ __forceinline__ void store(float* __restrict__ yr, int c, int cols, float m, float s) {
        const Peel p(yr, cols);
        if (e >= 0) yr[e] = pe * (kl_exp(mt - m) * (1.f / s));
        store_row<float, 4, VPT>(yr + p.head, c * PER + threadIdx.x, THREADS, p.nvec, v, mt, m, s);
    }
};

// v10's softmax_meet_row but for one thing: warp 0 reads the epoch its slot holds before the
// chunk's loads, not after the block's (max, sum), where that L2 round trip delayed every
// block's publish (and so every row's meeting) by its latency. The block publishes only after
// the barrier in its chunk's row_merge, so the read still sees the last launch's word. Chunks see
// the row's exact length (v10's vectors: 1 element).
template <typename T, typename Chunk>
__device__ void softmax_meet_row_early(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                       long long x_row_stride, unsigned long long* __restrict__ slots, int polls) {
    __shared__ float2 met, pairs[MEET_CAP];
    __shared__ int found;
    const int split = gridDim.x / rows;
    const long long row = blockIdx.x / split;
    const int k = blockIdx.x % split, lane = threadIdx.x & 31;
    const T* xr = x + row * x_row_stride;
    unsigned long long* rs = slots + row * MEET_CAP;
    unsigned int flip = 0;  // the epoch bit, held in 32 bits across the chunk's loads
    if (threadIdx.x == 0) flip = ((unsigned int)meet_load(rs + k) >> 31) ^ 1u;  // MEET_EPOCH's bit
    Chunk chunk;
    const float2 part = chunk.load(xr, k, cols);
    if (threadIdx.x < 32) {
        const unsigned long long epoch = (unsigned long long)__shfl_sync(KL_FULL_MASK, flip, 0) << 31;
        if (lane == 0)  // a sum is >= 0 (or NaN, which stays NaN): its sign bit is free
            atomicExch(rs + k, ((unsigned long long)__float_as_uint(part.x) << 32)
                                   | (__float_as_uint(part.y) & 0x7fffffffu) | epoch);
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
            const float2 p = chunk.load(xr, c, cols);
            if (threadIdx.x == 0) pairs[c] = make_float2(p.x, __uint_as_float(__float_as_uint(p.y) & 0x7fffffffu));
            __syncthreads();  // row_merge's shared partials are reused by the next chunk
        }
        if (threadIdx.x < 32) {
            float m = lane < split ? pairs[lane].x : KL_NEG_MAX;
            float s = lane < split ? pairs[lane].y : 0.f;
            kl_warp_merge(m, s);
            if (lane == 0) met = make_float2(m, s);
        }
        chunk.load(xr, k, cols);  // this block's chunk again, as it was
        __syncthreads();
    }
    const float2 ms = met;
    chunk.store(y + row * cols, k, cols, ms.x, ms.y);
}

#define KL_MEET_PEELED(DT, T, CHUNK, THREADS)                                           \
    extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)               \
        softmax_##DT##_meet_peeled_t##THREADS(KL_ARGS(T), unsigned long long* slots, int polls) { \
        softmax_meet_row_early<T, CHUNK<THREADS>>(x, y, rows, cols, x_row_stride, slots, polls); \
    }

KL_MEET_PEELED(bf16, unsigned short, PeeledPackedChunk, 128)
KL_MEET_PEELED(bf16, unsigned short, PeeledPackedChunk, 256)
KL_MEET_PEELED(bf16, unsigned short, PeeledPackedChunk, 512)
KL_MEET_PEELED(fp32, float, PeeledWideChunk, 256)
KL_MEET_PEELED(fp32, float, PeeledWideChunk, 512)
KL_MEET_PEELED(fp32, float, PeeledWideChunk, 1024)
