// v0_naive: one element per thread, one 4-byte (fp32) or 2-byte (bf16) load per input.
// Predicts: coalesced already, so DRAM throughput ~80-90% of the 3.0 TB/s copy ceiling
// (3 streams); bf16 lower (~75-85%): half the bytes per load instruction, twice the LSU work.
#include "bf16.cuh"

extern "C" __global__ void add_fp32(const float* __restrict__ x, const float* __restrict__ y,
                                    float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}

extern "C" __global__ void add_bf16(const unsigned short* __restrict__ x,
                                    const unsigned short* __restrict__ y,
                                    unsigned short* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = add_bf16(x[i], y[i]);
}
