// Shared device helpers of the CUDA C matmul+ReLU ladder (kernels/matmul_relu/cuda/*.cu).
// C = relu(A @ B): A (M, K), B (K, N), C (M, N), all row-major and contiguous, bf16 as raw
// `unsigned short` bits (kl_cuda.cuh), fp32 accumulation. NVRTC-safe: no system headers.
#pragma once
#include "kl_cuda.cuh"

typedef unsigned short bf16_t;

// relu + round to bf16. fmaxf(NaN, 0) would be 0: keep a NaN a NaN, as torch.relu does.
__device__ __forceinline__ bf16_t mm_relu_bf16(float v) {
    return kl_float_to_bf16(v != v ? v : fmaxf(v, 0.f));
}

// A bf16 from global memory, 0 outside [0, rows) x [0, cols) (masked edges).
__device__ __forceinline__ float mm_load(const bf16_t* __restrict__ p, int r, int c, int rows, int cols, int ld) {
    return (r < rows && c < cols) ? kl_to_float(p[(long long)r * ld + c]) : 0.f;
}
__device__ __forceinline__ bf16_t mm_load_bits(const bf16_t* __restrict__ p, int r, int c, int rows, int cols,
                                               int ld) {
    return (r < rows && c < cols) ? p[(long long)r * ld + c] : (bf16_t)0;
}
