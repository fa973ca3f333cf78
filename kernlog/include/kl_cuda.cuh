// Shared device helpers for the CUDA C ladders. NVRTC-safe: no includes, no host code.
// bf16 values travel as their raw bits in `unsigned short` so nothing depends on
// cuda_bf16.h (NVRTC's include paths differ between installs).
// Package data of kernlog (kernlog/include), so a non-editable install has it: any .cu
// includes it as "kl_cuda.cuh" (kernlog.cuda.include_dirs).
#pragma once

#define KL_FULL_MASK 0xffffffffu
// Identity of the running max in online softmax: finite, so exp(m_old - m_new) is never
// exp(-inf - -inf) = NaN for a thread that has only seen -inf (or masked) elements.
#define KL_NEG_MAX (-3.402823466e+38f)

__device__ __forceinline__ float kl_neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float kl_to_float(float v) { return v; }
__device__ __forceinline__ float kl_to_float(unsigned short v) {
    return __uint_as_float(((unsigned int)v) << 16);
}

// float -> bf16 bits, round to nearest even; a NaN stays a (quiet) NaN.
__device__ __forceinline__ unsigned short kl_float_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

template <typename T> __device__ __forceinline__ T kl_from_float(float v);
template <> __device__ __forceinline__ float kl_from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned short kl_from_float<unsigned short>(float v) {
    return kl_float_to_bf16(v);
}

// exp via ex2.approx: ~2 ulp near 0, exp(-inf) = 0, NaN in -> NaN out. One MUFU op, so
// the exps stay off the critical path of a bandwidth-bound kernel.
__device__ __forceinline__ float kl_exp(float x) { return __expf(x); }

// ---- VW consecutive elements <-> VW floats. VW * sizeof(T) is 16 (one 128-bit access)
// on the vector paths and VW == 1 on the scalar fallback paths.
template <typename T, int VW> struct KlVec;

template <> struct KlVec<float, 1> {
    static __device__ __forceinline__ void load(const float* p, float* v) { v[0] = *p; }
    static __device__ __forceinline__ void store(float* p, const float* v) { *p = v[0]; }
};
template <> struct KlVec<unsigned short, 1> {
    static __device__ __forceinline__ void load(const unsigned short* p, float* v) {
        v[0] = kl_to_float(*p);
    }
    static __device__ __forceinline__ void store(unsigned short* p, const float* v) {
        *p = kl_float_to_bf16(v[0]);
    }
};
template <> struct KlVec<float, 4> {
    static __device__ __forceinline__ void load(const float* p, float* v) {
        float4 q = *reinterpret_cast<const float4*>(p);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    }
    static __device__ __forceinline__ void store(float* p, const float* v) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
};
__device__ __forceinline__ unsigned int kl_pack_bf16x2(float lo, float hi) {
    return (unsigned int)kl_float_to_bf16(lo) | ((unsigned int)kl_float_to_bf16(hi) << 16);
}
template <> struct KlVec<unsigned short, 8> {
    static __device__ __forceinline__ void load(const unsigned short* p, float* v) {
        uint4 q = *reinterpret_cast<const uint4*>(p);
        unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
    static __device__ __forceinline__ void store(unsigned short* p, const float* v) {
        uint4 q;
        q.x = kl_pack_bf16x2(v[0], v[1]);
        q.y = kl_pack_bf16x2(v[2], v[3]);
        q.z = kl_pack_bf16x2(v[4], v[5]);
        q.w = kl_pack_bf16x2(v[6], v[7]);
        *reinterpret_cast<uint4*>(p) = q;
    }
};

// ---- Warp reductions (butterfly: every lane ends with the result).
__device__ __forceinline__ float kl_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(KL_FULL_MASK, v, o));
    return v;
}
__device__ __forceinline__ float kl_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(KL_FULL_MASK, v, o);
    return v;
}

// Online-softmax state (running max m, sum s of exp(x - m)). Both maxima are finite
// (>= KL_NEG_MAX) unless an input is +inf, so the rescales never compute -inf - -inf.
// A NaN anywhere makes s NaN, and NaN * 0 stays NaN, so the whole row comes out NaN.
__device__ __forceinline__ void kl_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    s = s * kl_exp(m - mn) + s2 * kl_exp(m2 - mn);
    m = mn;
}
__device__ __forceinline__ void kl_warp_merge(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(KL_FULL_MASK, m, o);
        float s2 = __shfl_xor_sync(KL_FULL_MASK, s, o);
        kl_merge(m, s, m2, s2);
    }
}
