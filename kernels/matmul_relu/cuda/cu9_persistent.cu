// cu9: cu8's 128x256 wgmma tile run persistently, a block per SM walking tiles in cu8's grouped
// order, with C stored by TMA from shared memory while the loading warpgroup already fills the next
// tile's stages. 384 threads: warpgroup 0 loads (one lane issues the copies), warpgroups 1 and 2 each
// compute 64 rows x 256 columns and store them.
//
// CHANGE (cu8's evidence: its epilogue does not overlap; a block per tile loads its first stages with
// the tensor cores idle and stores C with 4-byte writes from registers): the ring of stages runs on
// across a block's tiles (one counter of k-tiles), so the producer fetches tile t+1 while the
// consumers finish tile t; each consumer warpgroup writes its ReLU'd bf16 tile into a staging buffer
// in the 128-byte-swizzled layout the C tensor map reads (conflict-free), and one thread issues four
// TMA stores (64x64 boxes), waited on only before the buffer is written again, a tile later.
// 3 stages (cu8: 4) to fit the 64 KB of staging: 3 x 48 KB + 64 KB + alignment = 209 KB.
// Launched by kernels/matmul_relu/cuda_persistent.py; unaligned K or N take mm_persistent_scalar.
#include "mm_wgmma.cuh"

#define P9_BM 128
#define P9_BN 256
#define P9_BK 64
#define P9_STAGES 3
#define P9_GROUP_M 16
#define P9_A_BYTES (P9_BM * P9_BK * 2)  // 16384
#define P9_B_BYTES (P9_BK * P9_BN * 2)  // 32768: four 64x64 boxes, 8192 bytes apart
#define P9_STAGE_BYTES (P9_A_BYTES + P9_B_BYTES)
#define P9_C_BYTES (64 * P9_BN * 2)     // a warpgroup's staging: four 64x64 boxes of 8192 bytes
#define P9_THREADS 384
// dynamic shared memory: 1024 alignment slack, the stages, 2 stagings, then 2 x P9_STAGES mbarriers
#define P9_SMEM_BYTES (1024 + P9_STAGES * P9_STAGE_BYTES + 2 * P9_C_BYTES + 2 * P9_STAGES * 8)

#define P9_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                   "+f"(d[i + 6]), "+f"(d[i + 7])
// d (128 floats) = (acc ? d : 0) + A (64x16, K-major) x B (16x256, N-major), as cu8's with scale-d
__device__ __forceinline__ void p9_wgmma(float* d, unsigned long long desc_a, unsigned long long desc_b, int acc) {
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
        : P9_ACC8(0), P9_ACC8(8), P9_ACC8(16), P9_ACC8(24), P9_ACC8(32), P9_ACC8(40), P9_ACC8(48), P9_ACC8(56),
          P9_ACC8(64), P9_ACC8(72), P9_ACC8(80), P9_ACC8(88), P9_ACC8(96), P9_ACC8(104), P9_ACC8(112), P9_ACC8(120)
        : "l"(desc_a), "l"(desc_b), "r"(acc));
}

__device__ __forceinline__ void p9_tile(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int width = P9_GROUP_M * tiles_n;
    const int first = (pid / width) * P9_GROUP_M;
    const int rows = min(tiles_m - first, P9_GROUP_M);
    tm = first + (pid % width) % rows;
    tn = (pid % width) / rows;
}

__device__ __forceinline__ void tma_store_2d(const void* tmap, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(tmap), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void wg_bar(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

extern "C" __global__ void __launch_bounds__(P9_THREADS, 1)
mm_persistent(const unsigned long long* __restrict__ tmaps, int M, int N, int K) {
    extern __shared__ unsigned char p9_smem_raw[];
    const unsigned base = (mm_smem_addr(p9_smem_raw) + 1023u) & ~1023u;
    const unsigned cstage0 = base + P9_STAGES * P9_STAGE_BYTES;  // warpgroup wg's staging: + wg * P9_C_BYTES
    const unsigned full0 = cstage0 + 2 * P9_C_BYTES;
    const unsigned empty0 = full0 + P9_STAGES * 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_m = (M + P9_BM - 1) / P9_BM, tiles_n = (N + P9_BN - 1) / P9_BN, tiles = tiles_m * tiles_n;
    const int ktiles = (K + P9_BK - 1) / P9_BK;
    const void* tmap_a = tmaps;
    const void* tmap_b = tmaps + 16;
    const void* tmap_c = tmaps + 32;

    if (threadIdx.x == 0) {
        for (int s = 0; s < P9_STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8);  // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {  // the producer: one lane issues every copy, the ring running on across tiles
        if (warp == 0 && lane == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_b) : "memory");
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                p9_tile(tile, tiles_m, tiles_n, tm, tn);
                for (int kt = 0; kt < ktiles; ++kt, ++it) {
                    const int s = it % P9_STAGES;
                    if (it >= P9_STAGES) mbar_wait(empty0 + 8 * s, ((it / P9_STAGES) - 1) & 1);
                    const unsigned full = full0 + 8 * s, sa = base + s * P9_STAGE_BYTES, sb = sa + P9_A_BYTES;
                    mbar_expect_tx(full, P9_STAGE_BYTES);
                    tma_load_2d(sa, tmap_a, full, kt * P9_BK, tm * P9_BM);
#pragma unroll
                    for (int j = 0; j < 4; ++j) tma_load_2d(sb + 8192 * j, tmap_b, full, tn * P9_BN + 64 * j, kt * P9_BK);
                }
            }
        }
        return;
    }

    const int wg = warp / 4 - 1;
    const bool leader = (threadIdx.x % 128) == 0;
    const unsigned cstage = cstage0 + wg * P9_C_BYTES;
    if (leader) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_c) : "memory");
    float d[128];
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tm, tn;
        p9_tile(tile, tiles_m, tiles_n, tm, tn);
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
            const int s = it % P9_STAGES;
            mbar_wait(full0 + 8 * s, (it / P9_STAGES) & 1);
            const unsigned sa = base + s * P9_STAGE_BYTES + wg * 64 * 128, sb = base + s * P9_STAGE_BYTES + P9_A_BYTES;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < P9_BK / 16; ++kk)
                p9_wgmma(d, wg_desc(sa + kk * 32, 16, 1024), wg_desc(sb + kk * 2048, 8192, 1024), kt > 0 || kk > 0);
            wg_commit();
            wg_wait<1>();  // k-tile kt-1's group is done: its stage can be refilled
            if (kt > 0) {
                __syncwarp();
                if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % P9_STAGES));
            }
        }
        wg_wait<0>();
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % P9_STAGES));  // the tile's last stage

        // epilogue: the staging is free once the previous tile's stores have read it
        if (leader) bulk_wait_read0();
        wg_bar(1 + wg);
        // d[r]: row 16 (warp % 4) + lane / 4 + 8 ((r % 4) / 2) of the warpgroup's 64, column
        // 8 (r / 4) + 2 (lane % 4) + r % 2 of 256; box j = column / 64, each 64 rows x 128 bytes,
        // its 16-byte chunks XORed with row % 8 (the 128-byte swizzle the C map reads)
        const int r0 = (warp % 4) * 16 + lane / 4;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
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
            for (int j = 0; j < 4; ++j) tma_store_2d(tmap_c, cstage + 8192 * j, tn * P9_BN + 64 * j, tm * P9_BM + 64 * wg);
            bulk_commit();
        }
    }
    if (leader) bulk_wait0();
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS)
mm_persistent_scalar(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C, int M,
                     int N, int K) {
    mm_mma_sync_kernel<false>(A, B, C, M, N, K);
}
