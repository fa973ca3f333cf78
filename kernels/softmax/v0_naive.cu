// v0_naive: one thread per row, three passes over global memory (max, sum of exp, write).
//
// CHANGE: the baseline.
// PREDICTION: uncoalesced. Adjacent threads read addresses one row apart, so each warp
// load touches 32 sectors for 32 useful elements of 128 bytes' worth: expect
// smsp__sectors_per_request ~32 (ideal 4 for fp32), DRAM throughput well under 10% of
// peak, and only ceil(rows/128) blocks, so most shapes leave SMs idle.
#include "kl_cuda.cuh"

template <typename T>
__device__ void softmax_row_per_thread(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                       long long x_row_stride) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const T* xr = x + row * x_row_stride;
    T* yr = y + (long long)row * cols;

    float m = kl_neg_inf();
    for (int c = 0; c < cols; ++c) m = fmaxf(m, kl_to_float(xr[c]));
    float s = 0.f;
    for (int c = 0; c < cols; ++c) s += kl_exp(kl_to_float(xr[c]) - m);
    // A row of -inf has m = -inf, so exp(-inf - -inf) = NaN: the row is NaN, as in F.softmax.
    float inv = 1.f / s;
    for (int c = 0; c < cols; ++c) yr[c] = kl_from_float<T>(kl_exp(kl_to_float(xr[c]) - m) * inv);
}

extern "C" __global__ void __launch_bounds__(128)
softmax_fp32(const float* x, float* y, int rows, int cols, long long x_row_stride) {
    softmax_row_per_thread<float>(x, y, rows, cols, x_row_stride);
}
extern "C" __global__ void __launch_bounds__(128)
softmax_bf16(const unsigned short* x, unsigned short* y, int rows, int cols, long long x_row_stride) {
    softmax_row_per_thread<unsigned short>(x, y, rows, cols, x_row_stride);
}
