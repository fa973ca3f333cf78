// v3_online: one pass keeps a running max m and a running sum s of exp(x - m) per thread
// (rescaling s whenever m grows); the (m, s) pairs are merged across the block in one
// shuffle-and-shared-memory reduction; a second pass writes exp(x - M) / S.
//
// CHANGE vs v2: online softmax: the max and sum passes fuse, so the row is read twice and
// written once instead of read three times.
// PREDICTION: global load bytes (l1tex__t_bytes_pipe_lsu_mem_global_op_ld) fall by 1/3 and
// barriers from 2 to 1; on rows too long for L2 to keep between passes (1024x131072)
// dram__bytes_read falls by ~1/3 and duration by ~20-25%; short rows change little.
#include "kl_cuda.cuh"

#define THREADS 256
#define WARPS (THREADS / 32)

template <typename T>
__device__ void softmax_block_online(const T* __restrict__ x, T* __restrict__ y, int cols,
                                     long long x_row_stride) {
    __shared__ float part_m[WARPS], part_s[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const T* xr = x + blockIdx.x * x_row_stride;
    T* yr = y + (long long)blockIdx.x * cols;

    float m = KL_NEG_MAX, s = 0.f;
    for (int c = tid; c < cols; c += THREADS) {
        float v = kl_to_float(xr[c]);
        float mn = fmaxf(m, v);  // fmaxf drops a NaN v, but exp(NaN - mn) makes s NaN
        s = s * kl_exp(m - mn) + kl_exp(v - mn);
        m = mn;
    }
    kl_warp_merge(m, s);
    if (lane == 0) { part_m[warp] = m; part_s[warp] = s; }
    __syncthreads();
    m = lane < WARPS ? part_m[lane] : KL_NEG_MAX;
    s = lane < WARPS ? part_s[lane] : 0.f;
    kl_warp_merge(m, s);

    // A row of -inf: m = KL_NEG_MAX, s = 0, exp(-inf) * (1/0) = 0 * inf = NaN, as F.softmax.
    float inv = 1.f / s;
    for (int c = tid; c < cols; c += THREADS) yr[c] = kl_from_float<T>(kl_exp(kl_to_float(xr[c]) - m) * inv);
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_fp32(const float* x, float* y, int rows, int cols, long long x_row_stride) {
    softmax_block_online<float>(x, y, cols, x_row_stride);
}
extern "C" __global__ void __launch_bounds__(THREADS)
softmax_bf16(const unsigned short* x, unsigned short* y, int rows, int cols, long long x_row_stride) {
    softmax_block_online<unsigned short>(x, y, cols, x_row_stride);
}
