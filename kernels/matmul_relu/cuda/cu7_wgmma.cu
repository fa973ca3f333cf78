// cu7_wgmma: Hopper. TMA (cp.async.bulk.tensor, 128-byte swizzle, hardware zero-fill at the edges)
// into a 4-stage mbarrier ring, wgmma.mma_async m64n128k16 (bf16 -> fp32) from shared memory.
// Block tile 128x128x64: 2 consumer warpgroups (64x128 each, 64 fp32 accumulators per thread)
// and 1 producer warp whose lane 0 issues the copies. Needs sm_90a: the launcher builds it with
// nvcc -gencode=arch=compute_90a,code=sm_90a (NVRTC through CuPy is given -arch=sm_90).
//
// The two CUtensorMaps (A: dims {K, M}, box {64, 128}; B: dims {N, K}, box {64, 64}, two boxes per
// stage) are encoded on the host (cuTensorMapEncodeTiled) and copied to global memory: CuPy
// cannot pass a 128-byte struct by value, so the kernel takes a pointer to them (the PTX allows
// a tensor map in .global; each issuing thread fences it with fence.proxy.tensormap acquire).
// Unaligned K or N (a row stride that is no multiple of 16 bytes: no tensor map) -> the plan
// picks mm_wgmma_scalar, cu5's synchronous scalar-load mma.sync kernel.
//
// CHANGE (from cu6's evidence: tensor pipe 60-75% with mma.sync, issue-bound on ldmatrix+HMMA,
// 128 threads moving every byte): one thread moves each tile (TMA), the tensor cores read
// operands straight from shared memory (no ldmatrix, no fragments in registers), 4 stages in
// flight. EXPECTED NCU: SASS shows HGMMA.64x128x16 and UTMALDG, no LDGSTS/LDSM; issued
// instructions per FLOP down >5x; tensor pipe 75-85%; ~500-600 TFLOP/s at 4096^3 (0.75-0.9x
// cuBLAS). Next: the consumer waits for each wgmma group (wait_group 0) before freeing its stage,
// and the epilogue writes C from registers with 4-byte stores: wgmma overlap and a TMA store.
#include "mm_wgmma.cuh"

#define WG_BM 128
#define WG_BN 128
#define WG_BK 64
#define WG_STAGES 4
#define WG_A_BYTES (WG_BM * WG_BK * 2)  // 16384
#define WG_B_BYTES (WG_BK * WG_BN * 2)  // 16384: two 64x64 boxes, 8192 bytes apart
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_THREADS 288                  // warpgroups 0 and 1 compute, warp 8 loads
// dynamic shared memory: 1024 bytes of alignment slack, the stages, then 2 x WG_STAGES mbarriers
#define WG_SMEM_BYTES (1024 + WG_STAGES * WG_STAGE_BYTES + 2 * WG_STAGES * 8)

#define WG_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                   "+f"(d[i + 6]), "+f"(d[i + 7])
// d (64 floats) += A (64x16, K-major, from desc_a) x B (16x128, N-major: transposed, from desc_b)
__device__ __forceinline__ void wgmma_m64n128k16(float* d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 1;\n"
        "}\n"
        : WG_ACC8(0), WG_ACC8(8), WG_ACC8(16), WG_ACC8(24), WG_ACC8(32), WG_ACC8(40), WG_ACC8(48), WG_ACC8(56)
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
mm_wgmma_tma(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    extern __shared__ unsigned char wg_smem_raw[];
    const unsigned raw = mm_smem_addr(wg_smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;  // 128-byte swizzle atoms need 1024-byte alignment
    const unsigned full0 = base + WG_STAGES * WG_STAGE_BYTES;  // full[s] = full0 + 8 s
    const unsigned empty0 = full0 + WG_STAGES * 8;            // empty[s] = empty0 + 8 s
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * WG_BN;
    const int ktiles = (K + WG_BK - 1) / WG_BK;
    const void* tmap_a = tmaps;
    const void* tmap_b = tmaps + 16;  // each CUtensorMap is 128 bytes

    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);  // the producer's arrive.expect_tx; the bytes complete it
            mbar_init(empty0 + 8 * s, 8);  // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp == 8) {  // producer
        if (lane == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_b) : "memory");
            for (int kt = 0; kt < ktiles; ++kt) {
                int s = kt % WG_STAGES;
                if (kt >= WG_STAGES) mbar_wait(empty0 + 8 * s, ((kt / WG_STAGES) - 1) & 1);
                unsigned full = full0 + 8 * s, sa = base + s * WG_STAGE_BYTES, sb = sa + WG_A_BYTES;
                mbar_expect_tx(full, WG_STAGE_BYTES);  // out-of-bounds box elements are zero-filled and counted
                int k0 = kt * WG_BK;
                tma_load_2d(sa, tmap_a, full, k0, m0);
                tma_load_2d(sb, tmap_b, full, n0, k0);
                tma_load_2d(sb + 8192, tmap_b, full, n0 + 64, k0);
            }
        }
        return;
    }

    // consumers: warpgroup wg computes rows m0 + 64 wg .. +64, all 128 columns
    const int wg = warp / 4;
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    for (int kt = 0; kt < ktiles; ++kt) {
        int s = kt % WG_STAGES;
        mbar_wait(full0 + 8 * s, (kt / WG_STAGES) & 1);
        unsigned sa = base + s * WG_STAGE_BYTES + wg * 64 * 128, sb = base + s * WG_STAGE_BYTES + WG_A_BYTES;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; ++kk) {
            // A: K-major, rows of 128 bytes, 8-row atoms 1024 bytes apart (SBO); k16 step = +32 bytes.
            // B: N-major (transposed), 8 K-rows of 128 bytes per atom (SBO 1024), the second 64 columns
            // 8192 bytes on (LBO); k16 step = 16 rows = +2048 bytes.
            wgmma_m64n128k16(d, wg_desc(sa + kk * 32, 16, 1024), wg_desc(sb + kk * 2048, 8192, 1024));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * s);
    }

    // epilogue: d[r] of thread (warp w in its warpgroup, lane l) is row 16 w + l/4 + 8 ((r%4)/2),
    // column 8 (r/4) + 2 (l%4) + r%2
    const int wr = m0 + wg * 64 + (warp % 4) * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        int n = n0 + i * 8 + (lane % 4) * 2;
        mm_store2(C, wr, n, M, N, d[4 * i], d[4 * i + 1]);
        mm_store2(C, wr + 8, n, M, N, d[4 * i + 2], d[4 * i + 3]);
    }
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_wgmma_scalar(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
                int K) {
    mm_mma_sync_kernel<false>(A, B, C, M, N, K);
}
