// cu8_wgmma_wide: cu7's TMA + wgmma pipeline with a 128x256 block tile (wgmma m64n256k16: each
// consumer warpgroup owns 64x256, 128 fp32 accumulators per thread), one wgmma group left in flight
// while the next k-tile's is issued (a stage is freed once the group after it is issued, not
// waited to empty), and tiles launched in grouped order (16 row-tiles per group) so the blocks
// resident at once share A's and B's tiles in L2. 384 threads: warpgroup 0 loads (its first
// lane issues the copies), warpgroups 1 and 2 compute. Needs sm_90a (nvcc), like cu7.
//
// CHANGE (from cu7's evidence at 4096^3: 38% of the warp samples on `wgmma.wait_group 0` (the
// barrier stall), DRAM traffic 3.4x the minimum, 518 TFLOP/s): wait_group 1 keeps the tensor cores
// fed across k-tiles; m64n256 halves the A tile reads per FLOP and the number of tiles (grid
// 512 instead of 1024), and the grouped order keeps a wave's tiles within ~35 MB of L2.
// EXPECTED NCU: the wait_group line's share of samples well under cu7's 38%; DRAM bytes down
// >25%; ~600-700 TFLOP/s at 4096^3 (0.75-0.88x the cuBLAS roof of 795). Unaligned K or N
// (no tensor map) -> cu5's scalar mma.sync kernel, as cu7.
#include "mm_wgmma.cuh"

#define W8_BM 128
#define W8_BN 256
#define W8_BK 64
#define W8_STAGES 4
#define W8_GROUP_M 16                   // row-tiles per group of the launch order
#define W8_A_BYTES (W8_BM * W8_BK * 2)  // 16384
#define W8_B_BYTES (W8_BK * W8_BN * 2)  // 32768: four 64x64 boxes, 8192 bytes apart
#define W8_STAGE_BYTES (W8_A_BYTES + W8_B_BYTES)
#define W8_THREADS 384                  // warpgroup 0 loads, warpgroups 1 and 2 compute
// dynamic shared memory: 1024 bytes of alignment slack, the stages, then 2 x W8_STAGES mbarriers
#define W8_SMEM_BYTES (1024 + W8_STAGES * W8_STAGE_BYTES + 2 * W8_STAGES * 8)

#define W8_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                   "+f"(d[i + 6]), "+f"(d[i + 7])
// d (128 floats) += A (64x16, K-major, from desc_a) x B (16x256, N-major: transposed, from desc_b)
__device__ __forceinline__ void wgmma_m64n256k16(float* d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 1;\n"
        "}\n"
        : W8_ACC8(0), W8_ACC8(8), W8_ACC8(16), W8_ACC8(24), W8_ACC8(32), W8_ACC8(40), W8_ACC8(48), W8_ACC8(56), W8_ACC8(64), W8_ACC8(72), W8_ACC8(80), W8_ACC8(88), W8_ACC8(96), W8_ACC8(104), W8_ACC8(112), W8_ACC8(120)
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

// The grouped launch order: block `pid` -> (row-tile, column-tile); W8_GROUP_M row-tiles per group,
// column-major inside a group (cuda_launch.grouped_tile is the same map in Python).
__device__ __forceinline__ void w8_tile(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int width = W8_GROUP_M * tiles_n;
    const int first = (pid / width) * W8_GROUP_M;
    const int rows = min(tiles_m - first, W8_GROUP_M);
    tm = first + (pid % width) % rows;
    tn = (pid % width) / rows;
}

extern "C" __global__ void __launch_bounds__(W8_THREADS, 1)
mm_wgmma_wide(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    extern __shared__ unsigned char w8_smem_raw[];
    const unsigned raw = mm_smem_addr(w8_smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;  // 128-byte swizzle atoms need 1024-byte alignment
    const unsigned full0 = base + W8_STAGES * W8_STAGE_BYTES;  // full[s] = full0 + 8 s
    const unsigned empty0 = full0 + W8_STAGES * 8;            // empty[s] = empty0 + 8 s
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tm, tn;
    w8_tile(blockIdx.x, (M + W8_BM - 1) / W8_BM, (N + W8_BN - 1) / W8_BN, tm, tn);
    const int m0 = tm * W8_BM, n0 = tn * W8_BN;
    const int ktiles = (K + W8_BK - 1) / W8_BK;
    const void* tmap_a = tmaps;
    const void* tmap_b = tmaps + 16;  // each CUtensorMap is 128 bytes

    if (threadIdx.x == 0) {
        for (int s = 0; s < W8_STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);  // the producer's arrive.expect_tx; the bytes complete it
            mbar_init(empty0 + 8 * s, 8);  // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {  // the producer warpgroup: one thread issues every copy
        if (warp == 0 && lane == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_b) : "memory");
            for (int kt = 0; kt < ktiles; ++kt) {
                int s = kt % W8_STAGES;
                if (kt >= W8_STAGES) mbar_wait(empty0 + 8 * s, ((kt / W8_STAGES) - 1) & 1);
                unsigned full = full0 + 8 * s, sa = base + s * W8_STAGE_BYTES, sb = sa + W8_A_BYTES;
                mbar_expect_tx(full, W8_STAGE_BYTES);  // out-of-bounds box elements are zero-filled and counted
                int k0 = kt * W8_BK;
                tma_load_2d(sa, tmap_a, full, k0, m0);
#pragma unroll
                for (int j = 0; j < 4; ++j) tma_load_2d(sb + 8192 * j, tmap_b, full, n0 + 64 * j, k0);
            }
        }
        return;
    }

    // consumers: warpgroup wg (0 or 1) computes rows m0 + 64 wg .. +64, all 256 columns
    const int wg = warp / 4 - 1;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int kt = 0; kt < ktiles; ++kt) {
        int s = kt % W8_STAGES;
        mbar_wait(full0 + 8 * s, (kt / W8_STAGES) & 1);
        unsigned sa = base + s * W8_STAGE_BYTES + wg * 64 * 128, sb = base + s * W8_STAGE_BYTES + W8_A_BYTES;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < W8_BK / 16; ++kk) {
            // A: K-major, rows of 128 bytes, 8-row atoms 1024 bytes apart (SBO); k16 step = +32 bytes.
            // B: N-major (transposed), 8 K-rows of 128 bytes per atom (SBO 1024), each further 64
            // columns 8192 bytes on (LBO); k16 step = 16 rows = +2048 bytes.
            wgmma_m64n256k16(d, wg_desc(sa + kk * 32, 16, 1024), wg_desc(sb + kk * 2048, 8192, 1024));
        }
        wg_commit();
        wg_wait<1>();  // k-tile kt-1's group is done: its stage can be refilled
        if (kt > 0) {
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * ((kt - 1) % W8_STAGES));
        }
    }
    wg_wait<0>();

    // epilogue: d[r] of thread (warp w in its warpgroup, lane l) is row 16 w + l/4 + 8 ((r%4)/2),
    // column 8 (r/4) + 2 (l%4) + r%2
    const int wr = m0 + wg * 64 + (warp % 4) * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        int n = n0 + i * 8 + (lane % 4) * 2;
        mm_store2(C, wr, n, M, N, d[4 * i], d[4 * i + 1]);
        mm_store2(C, wr + 8, n, M, N, d[4 * i + 2], d[4 * i + 3]);
    }
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_wide_scalar(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M, int N,
               int K) {
    mm_mma_sync_kernel<false>(A, B, C, M, N, K);
}
