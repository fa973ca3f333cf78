// cu10: the tile picked for the waves. cu9's 128x256 tile leaves the last wave of a persistent grid part
// empty where the tile count falls just past a multiple of the SMs (3072^3: 288 tiles, 2.18 waves of 132).
// This file adds a 192x192 tile (256 tiles there, 1.94 waves: the tile cuBLAS picks at 3072^3 on the
// H200, nvjet ..._192x192_64x3...) and includes cu9's kernels; cuda_waves.py's plan takes whichever of
// the two tiles fills its waves best. The 192x192 kernel: three consumer warpgroups of 64 rows x 192
// columns (wgmma m64n192k16, 96 accumulators a thread) and one loading warpgroup, 512 threads, so the
// loader gives registers back (setmaxnreg.dec 40) and the consumers take them (setmaxnreg.inc 152:
// 128 x 40 + 384 x 152 = 63488 of 65536). 3 stages of 48 KB and 72 KB of C staging (three 64x64 boxes a
// consumer): 217 KB. Otherwise cu9's: the ring runs on across a block's tiles, C is written ReLU'd into
// 128-byte-swizzled staging and stored by TMA, waited on a tile later.
#include "cu9_persistent.cu"

#define Q_BM 192
#define Q_BN 192
#define Q_BK 64
#define Q_STAGES 3
#define Q_CONSUMERS 3
#define Q_A_BYTES (Q_BM * Q_BK * 2)  // 24576: one 64 x 192 box
#define Q_B_BYTES (Q_BK * Q_BN * 2)  // 24576: three 64x64 boxes, 8192 bytes apart
#define Q_STAGE_BYTES (Q_A_BYTES + Q_B_BYTES)
#define Q_C_BYTES (64 * Q_BN * 2)    // a consumer's staging: three 64x64 boxes of 8192 bytes
#define Q_THREADS (128 * (1 + Q_CONSUMERS))
#define Q_SMEM_BYTES (1024 + Q_STAGES * Q_STAGE_BYTES + Q_CONSUMERS * Q_C_BYTES + 2 * Q_STAGES * 8)

#define Q_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                  "+f"(d[i + 6]), "+f"(d[i + 7])
// d (96 floats) = (acc ? d : 0) + A (64x16, K-major) x B (16x192, N-major)
__device__ __forceinline__ void q_wgmma(float* d, unsigned long long desc_a, unsigned long long desc_b, int acc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
        "%96, %97, p, 1, 1, 0, 1;\n"
        "}\n"
        : Q_ACC8(0), Q_ACC8(8), Q_ACC8(16), Q_ACC8(24), Q_ACC8(32), Q_ACC8(40), Q_ACC8(48), Q_ACC8(56), Q_ACC8(64), Q_ACC8(72), Q_ACC8(80), Q_ACC8(88)
        : "l"(desc_a), "l"(desc_b), "r"(acc));
}

extern "C" __global__ void __launch_bounds__(Q_THREADS, 1)
mm_waves(const unsigned long long* __restrict__ tmaps, int M, int N, int K) {
    extern __shared__ unsigned char q_smem_raw[];
    const unsigned base = (mm_smem_addr(q_smem_raw) + 1023u) & ~1023u;
    const unsigned cstage0 = base + Q_STAGES * Q_STAGE_BYTES;  // consumer wg's staging: + wg * Q_C_BYTES
    const unsigned full0 = cstage0 + Q_CONSUMERS * Q_C_BYTES;
    const unsigned empty0 = full0 + Q_STAGES * 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_m = (M + Q_BM - 1) / Q_BM, tiles_n = (N + Q_BN - 1) / Q_BN, tiles = tiles_m * tiles_n;
    const int ktiles = (K + Q_BK - 1) / Q_BK;
    const void* tmap_a = tmaps;
    const void* tmap_b = tmaps + 16;
    const void* tmap_c = tmaps + 32;

    if (threadIdx.x == 0) {
        for (int s = 0; s < Q_STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 4 * Q_CONSUMERS);  // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {  // the loader: one lane issues every copy, the ring running on across tiles
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (warp == 0 && lane == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_b) : "memory");
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                p9_tile(tile, tiles_m, tiles_n, tm, tn);
                for (int kt = 0; kt < ktiles; ++kt, ++it) {
                    const int s = it % Q_STAGES;
                    if (it >= Q_STAGES) mbar_wait(empty0 + 8 * s, ((it / Q_STAGES) - 1) & 1);
                    const unsigned full = full0 + 8 * s, sa = base + s * Q_STAGE_BYTES, sb = sa + Q_A_BYTES;
                    mbar_expect_tx(full, Q_STAGE_BYTES);
                    tma_load_2d(sa, tmap_a, full, kt * Q_BK, tm * Q_BM);
#pragma unroll
                    for (int j = 0; j < 3; ++j) tma_load_2d(sb + 8192 * j, tmap_b, full, tn * Q_BN + 64 * j, kt * Q_BK);
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n" ::: "memory");
    const int wg = warp / 4 - 1;
    const bool leader = (threadIdx.x % 128) == 0;
    const unsigned cstage = cstage0 + wg * Q_C_BYTES;
    if (leader) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_c) : "memory");
    float d[96];
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tm, tn;
        p9_tile(tile, tiles_m, tiles_n, tm, tn);
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
            const int s = it % Q_STAGES;
            mbar_wait(full0 + 8 * s, (it / Q_STAGES) & 1);
            const unsigned sa = base + s * Q_STAGE_BYTES + wg * 64 * 128, sb = base + s * Q_STAGE_BYTES + Q_A_BYTES;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < Q_BK / 16; ++kk)
                q_wgmma(d, wg_desc(sa + kk * 32, 16, 1024), wg_desc(sb + kk * 2048, 8192, 1024), kt > 0 || kk > 0);
            wg_commit();
            wg_wait<1>();  // k-tile kt-1's group is done: its stage can be refilled
            if (kt > 0) {
                __syncwarp();
                if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % Q_STAGES));
            }
        }
        wg_wait<0>();
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % Q_STAGES));  // the tile's last stage

        if (leader) bulk_wait_read0();  // the staging is free once the previous tile's stores have read it
        wg_bar(1 + wg);
        // d[r]: row 16 (warp % 4) + lane / 4 + 8 ((r % 4) / 2) of the warpgroup's 64, column
        // 8 (r / 4) + 2 (lane % 4) + r % 2 of 192; box j = column / 64, 64 rows x 128 bytes, its
        // 16-byte chunks XORed with row % 8 (the 128-byte swizzle the C map reads)
        const int r0 = (warp % 4) * 16 + lane / 4;
#pragma unroll
        for (int i = 0; i < 24; ++i) {
            const int col = 8 * i + 2 * (lane % 4);
            const unsigned box = cstage + (col / 64) * 8192;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = r0 + 8 * h;
                const unsigned off = row * 128 + (col % 64) * 2;
                const unsigned v = (unsigned)mm_relu_bf16(d[4 * i + 2 * h]) |
                                   ((unsigned)mm_relu_bf16(d[4 * i + 2 * h + 1]) << 16);
                st_shared_u32(box + (off ^ (((off >> 7) & 7) << 4)), v);
            }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, to the TMA unit
        wg_bar(1 + wg);
        if (leader) {
#pragma unroll
            for (int j = 0; j < 3; ++j) tma_store_2d(tmap_c, cstage + 8192 * j, tn * Q_BN + 64 * j, tm * Q_BM + 64 * wg);
            bulk_commit();
        }
    }
    if (leader) bulk_wait0();
}
