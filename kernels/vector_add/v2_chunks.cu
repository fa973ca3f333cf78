// v2_chunks: a block per chunk of THREADS x UNROLL 16-byte vectors instead of v1's one resident wave
// looping over the array, each thread with UNROLL loads per input in flight.
// Each block covers one contiguous chunk of THREADS x UNROLL vectors: thread t loads vectors
// base + t + k*THREADS (k < UNROLL) of x and of y -- all 2 x UNROLL loads first, then the
// adds, then the stores -- so every warp-wide access stays one coalesced 512-byte run. The
// launcher starts one block per chunk (PyTorch's elementwise kernels do the same: 2^28 fp32 is
// 65536 blocks); the loop still strides by the grid, so any grid size is correct. The vectors
// past the last whole chunk, the scalar tail and the scalar path for unaligned pointers are v1's.
// Cache hints: none (__ldcs/__stcs would be a further change; eager reaches 3.04 TB/s without).
// EVIDENCE: v1 held 2.90 TB/s at 2^28 fp32 against eager's 3.04; on the H100 the unrolled
// loads alone, still in v1's one-wave grid-stride loop, measured 2.89: bytes in flight were
// not the limit.
// Predicts: dram__throughput within ~1% of eager's at 2^26 and 2^28 (>= 3.0 TB/s), the
// many short-lived blocks trading v1's long per-block streams for eager's access pattern.
#include "bf16.cuh"

// The launcher starts cdiv(n, CHUNK vectors) blocks of THREADS threads (the chunk indexing
// below assumes exactly THREADS). 2 x UNROLL float4/uint4 are 32
// registers of data alone: BLOCKS_PER_SM 4 lets ptxas use up to 64 per thread without spilling.
#define THREADS 256
#define UNROLL 4
#define BLOCKS_PER_SM 4
#define CHUNK (THREADS * UNROLL)  // vectors per block iteration

__device__ __forceinline__ bool aligned16(const void* a, const void* b, const void* c) {
    return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15ull) == 0;
}

struct F32 {  // 4 fp32 per 16-byte vector
    typedef float T;
    typedef float4 V;
    static constexpr int PER_VEC = 4;
    __device__ static T add(T a, T b) { return a + b; }
    __device__ static V add(V a, V b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
};

struct BF16 {  // 8 bf16 (raw bits) per 16-byte vector
    typedef unsigned short T;
    typedef uint4 V;
    static constexpr int PER_VEC = 8;
    __device__ static T add(T a, T b) { return add_bf16(a, b); }
    __device__ static V add(V a, V b) {
        return make_uint4(add_bf16x2(a.x, b.x), add_bf16x2(a.y, b.y), add_bf16x2(a.z, b.z), add_bf16x2(a.w, b.w));
    }
};

template <class Op>
__device__ __forceinline__ void add_unrolled(const typename Op::T* __restrict__ x, const typename Op::T* __restrict__ y,
                                             typename Op::T* __restrict__ out, long long n) {
    typedef typename Op::V V;
    long long tid = (long long)blockIdx.x * THREADS + threadIdx.x;
    long long stride = (long long)gridDim.x * THREADS;
    long long head = 0;
    if (aligned16(x, y, out)) {
        const V* xv = reinterpret_cast<const V*>(x);
        const V* yv = reinterpret_cast<const V*>(y);
        V* ov = reinterpret_cast<V*>(out);
        long long nvec = n / Op::PER_VEC;
        long long whole = nvec / CHUNK * CHUNK;  // vectors in whole chunks: no masks needed there
#pragma unroll 1  // unrolling the chunk loop only adds registers; the ILP is within a chunk
        for (long long base = (long long)blockIdx.x * CHUNK + threadIdx.x; base < whole;
             base += (long long)gridDim.x * CHUNK) {
            V a[UNROLL], b[UNROLL];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                a[k] = xv[base + k * THREADS];
                b[k] = yv[base + k * THREADS];
            }
            // Compiler fence: without it ptxas (CUDA 13) started the bf16 conversions before the
            // last two loads and re-used the first loads' registers for them, so only 6 of the 8
            // vectors were in flight; with it all 8 LDG.128 issue back to back (checked in SASS).
            asm volatile("" ::: "memory");
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) a[k] = Op::add(a[k], b[k]);
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) ov[base + k * THREADS] = a[k];
        }
        // Fewer than CHUNK vectors remain: one at a time over the whole grid, as in v1.
        for (long long i = whole + tid; i < nvec; i += stride) ov[i] = Op::add(xv[i], yv[i]);
        head = nvec * Op::PER_VEC;
    }
    for (long long i = head + tid; i < n; i += stride) out[i] = Op::add(x[i], y[i]);
}

extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) add_fp32(const float* __restrict__ x, const float* __restrict__ y,
                                    float* __restrict__ out, long long n) {
    add_unrolled<F32>(x, y, out, n);
}

extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) add_bf16(const unsigned short* __restrict__ x,
                                    const unsigned short* __restrict__ y,
                                    unsigned short* __restrict__ out, long long n) {
    add_unrolled<BF16>(x, y, out, n);
}
