// v1_block_smem: one block of 256 threads per row; each thread strides over the row so a
// warp's loads are coalesced; max and sum are reduced through a shared-memory tree.
//
// CHANGE vs v0: parallelize across the row (block per row, coalesced strided loop) instead
// of one thread per row.
// PREDICTION: sectors per request drops from ~32 to the ideal (4 fp32, 2 bf16) and the
// grid grows to `rows` blocks; duration falls 10-50x. Still three passes over the row
// (the re-reads mostly hit L1/L2) and 2 x 8 barriers in the reduction trees, so
// smsp__warp_issue_stalled_barrier is the top stall and DRAM throughput sits near 50-60%.
#include "kl_cuda.cuh"

#define THREADS 256

template <typename T>
__device__ void softmax_block_smem(const T* __restrict__ x, T* __restrict__ y, int cols,
                                   long long x_row_stride) {
    __shared__ float red[THREADS];
    const int tid = threadIdx.x;
    const T* xr = x + blockIdx.x * x_row_stride;
    T* yr = y + (long long)blockIdx.x * cols;

    float m = kl_neg_inf();
    for (int c = tid; c < cols; c += THREADS) m = fmaxf(m, kl_to_float(xr[c]));
    red[tid] = m;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) red[tid] = fmaxf(red[tid], red[tid + half]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();  // everyone has read red[0] before it is overwritten below

    float s = 0.f;
    for (int c = tid; c < cols; c += THREADS) s += kl_exp(kl_to_float(xr[c]) - m);
    red[tid] = s;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) red[tid] += red[tid + half];
        __syncthreads();
    }
    float inv = 1.f / red[0];
    for (int c = tid; c < cols; c += THREADS) yr[c] = kl_from_float<T>(kl_exp(kl_to_float(xr[c]) - m) * inv);
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_fp32(const float* x, float* y, int rows, int cols, long long x_row_stride) {
    softmax_block_smem<float>(x, y, cols, x_row_stride);
}
extern "C" __global__ void __launch_bounds__(THREADS)
softmax_bf16(const unsigned short* x, unsigned short* y, int rows, int cols, long long x_row_stride) {
    softmax_block_smem<unsigned short>(x, y, cols, x_row_stride);
}
