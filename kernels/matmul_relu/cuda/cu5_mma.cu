// cu5_mma: tensor cores. 128x128x32 block tiles, 4 warps of 64x64, mma.sync.m16n8k16 bf16 -> fp32
// with ldmatrix fragments from padded shared memory (mm_mma.cuh).
//
// CHANGE (from cu4's evidence: fp32 FMA pipe ~70-80% busy, the bf16 inputs widened to fp32 at
// ~50 TFLOP/s of ceiling): the products go to the tensor cores (HMMA.16816.F32.BF16, 4096
// MACs per instruction instead of 1). bf16 stays bf16 in shared memory (half cu4's smem bytes).
// Loads remain synchronous: global -> registers -> shared, then __syncthreads, then math.
// EXPECTED NCU: FMA pipe -> ~0, tensor pipe (sm__pipe_tensor_op_hmma_cycles_active) 30-50%;
// ~150-250 TFLOP/s at 4096^3 (3-5x cu4); warps now stall on the global loads each k-step
// (long-scoreboard / barrier stalls dominate): nothing overlaps a tile's loads with its math.
#include "mm_mma.cuh"

extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_mma(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N, int K) {
    mm_mma_sync_kernel<true>(A, B, C, M, N, K);
}
extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_mma_scalar(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
              int K) {
    mm_mma_sync_kernel<false>(A, B, C, M, N, K);
}
