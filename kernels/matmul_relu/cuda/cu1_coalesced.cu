// cu1_coalesced: the same thread per output, the other mapping: threadIdx.x walks N.
//
// CHANGE (from cu0's evidence: ~32 sectors per A load and C store request, 2 useful bytes
// each): consecutive lanes take consecutive columns n, so a warp's B loads and C stores are
// 64 contiguous bytes (2 sectors) and its A load is one broadcast address.
// EXPECTED NCU: sectors per request from ~32 to ~2-4 on global loads and stores; L1 hit rate
// up; throughput several x cu0, still bound by L1/LSU re-reads (each B element is read by
// every row's warp, K loads per output), FMA pipe well under 10%.
#include "mm_common.cuh"

extern "C" __global__ void __launch_bounds__(256)
mm_coalesced(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
             int K) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    const bf16_t* a = A + (long long)m * K;
    const bf16_t* b = B + n;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += kl_to_float(a[k]) * kl_to_float(b[(long long)k * N]);
    C[(long long)m * N + n] = mm_relu_bf16(acc);
}
