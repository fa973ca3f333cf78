// bf16 carried as raw unsigned short bits, so the kernels need no CUDA headers under NVRTC.
#pragma once

__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN instead of rounding into Inf.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ unsigned short add_bf16(unsigned short a, unsigned short b) {
    return f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(b));
}

// Two bf16 packed in one 32-bit word, added lane by lane.
__device__ __forceinline__ unsigned int add_bf16x2(unsigned int a, unsigned int b) {
    unsigned int lo = add_bf16((unsigned short)(a & 0xffffu), (unsigned short)(b & 0xffffu));
    unsigned int hi = add_bf16((unsigned short)(a >> 16), (unsigned short)(b >> 16));
    return lo | (hi << 16);
}
