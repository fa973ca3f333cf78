// cu12: cu11 with the ring of cu9's 128x256 persistent kernel a stage deeper.
//
// CHANGE (cu9's evidence at 4096^3 on the H200: 30% of the warp samples are consumers waiting on a stage's
// full barrier, with the tensor pipe 78% busy and DRAM at 18% of peak: the loads arrive late, not slowly):
// four stages where cu9 has three. The room comes from C's staging: each consumer warpgroup stages and
// stores its 64 x 256 tile in two halves of 128 columns (16 KB where cu9 stages 32), the second half
// written once the first half's TMA stores have read the staging. 4 x 48 KB + 2 x 16 KB + alignment =
// 225 KB. Everything else is cu9's kernel. Launched by kernels/matmul_relu/cuda_stages.py where cu11's
// plan takes cu9's kernel, or cu10's 192x192 one where this kernel's waves cost no more; cu11's elsewhere.
#include "cu11_splitk.cu"

#define P12_STAGES 4
#define P12_C_BYTES (64 * 128 * 2)  // a warpgroup's staging: half its tile, two 64x64 boxes of 8192 bytes
// dynamic shared memory: 1024 alignment slack, the stages, 2 stagings, then 2 x P12_STAGES mbarriers
#define P12_SMEM_BYTES (1024 + P12_STAGES * P9_STAGE_BYTES + 2 * P12_C_BYTES + 2 * P12_STAGES * 8)

extern "C" __global__ void __launch_bounds__(P9_THREADS, 1)
mm_stages(const unsigned long long* __restrict__ tmaps, int M, int N, int K) {
    extern __shared__ unsigned char p12_smem_raw[];
    const unsigned base = (mm_smem_addr(p12_smem_raw) + 1023u) & ~1023u;
    const unsigned cstage0 = base + P12_STAGES * P9_STAGE_BYTES;  // warpgroup wg's staging: + wg * P12_C_BYTES
    const unsigned full0 = cstage0 + 2 * P12_C_BYTES;
    const unsigned empty0 = full0 + P12_STAGES * 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_m = (M + P9_BM - 1) / P9_BM, tiles_n = (N + P9_BN - 1) / P9_BN, tiles = tiles_m * tiles_n;
    const int ktiles = (K + P9_BK - 1) / P9_BK;
    const void* tmap_a = tmaps;
    const void* tmap_b = tmaps + 16;
    const void* tmap_c = tmaps + 32;

    if (threadIdx.x == 0) {
        for (int s = 0; s < P12_STAGES; ++s) {
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
                    const int s = it % P12_STAGES;
                    if (it >= P12_STAGES) mbar_wait(empty0 + 8 * s, ((it / P12_STAGES) - 1) & 1);
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
    const unsigned cstage = cstage0 + wg * P12_C_BYTES;
    if (leader) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_c) : "memory");
    float d[128];
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tm, tn;
        p9_tile(tile, tiles_m, tiles_n, tm, tn);
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
            const int s = it % P12_STAGES;
            mbar_wait(full0 + 8 * s, (it / P12_STAGES) & 1);
            const unsigned sa = base + s * P9_STAGE_BYTES + wg * 64 * 128, sb = base + s * P9_STAGE_BYTES + P9_A_BYTES;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < P9_BK / 16; ++kk)
                p9_wgmma(d, wg_desc(sa + kk * 32, 16, 1024), wg_desc(sb + kk * 2048, 8192, 1024), kt > 0 || kk > 0);
            wg_commit();
            wg_wait<1>();  // k-tile kt-1's group is done: its stage can be refilled
            if (kt > 0) {
                __syncwarp();
                if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % P12_STAGES));
            }
        }
        wg_wait<0>();
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % P12_STAGES));  // the tile's last stage

        // epilogue, in two halves of 128 columns: each writes the staging once the stores before it
        // (the previous half's, or the previous tile's) have read it
        const int r0 = (warp % 4) * 16 + lane / 4;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            if (leader) bulk_wait_read0();
            wg_bar(1 + wg);
            // d[4 i + 2 h + e]: row r0 + 8 h, column 8 i + 2 (lane % 4) + e of 256, i in this half's 16
#pragma unroll
            for (int i = 16 * half; i < 16 * half + 16; ++i) {
                const int col = 8 * i + 2 * (lane % 4) - 128 * half;
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
                for (int j = 0; j < 2; ++j)
                    tma_store_2d(tmap_c, cstage + 8192 * j, tn * P9_BN + 128 * half + 64 * j, tm * P9_BM + 64 * wg);
                bulk_commit();
            }
        }
    }
    if (leader) bulk_wait0();
}
