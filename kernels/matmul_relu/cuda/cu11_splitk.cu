// cu11: split-K in one kernel, the K-slices of a tile reduced through a cluster's distributed shared
// memory. Where C has too few tiles to fill the GPU (large K over a small M x N, decode's few rows,
// 1000^3), the S blocks of a cluster (1, S, 1) share one 128 x BN tile, each running cu8's pipeline over
// its 1/S of K (a TMA ring filled by one thread of warp 8; warpgroups 0 and 1 issue wgmma, one group in
// flight). Each writes its fp32 partial into its own shared memory (over the spent stages), the cluster
// meets at a barrier, and block r sums rows [r 128/S, (r+1) 128/S) of the S partials (ld.shared::cluster,
// in the same order every call: the result does not depend on timing), applies the ReLU and stores bf16.
// No workspace in global memory, no second launch, nothing to zero between calls. BN is 128 or 192 (the
// wgmma wrappers of this file and cu10), S 2 to 16 (16 is a non-portable cluster size: the launcher opts
// in); 256-wide tiles were never picked (at equal waves the model prices a k-tile by the tile's width).
// cuda_splitk.py's plan picks (BN, S) by a cost model over waves of co-resident clusters, or cu10's kernels
// (included) where no split is cheaper.
//
// CHANGE (from the large_k members' ncu pairs on the H200: without a split cu10 runs 4-8 blocks there; v2's
// Triton split-K runs 256 blocks and a reducing kernel, 5.6 M warp instructions and 53 MB of DRAM at
// 512x512x16384, where cuBLAS's one split-K kernel of 128 blocks runs 3.4 M and 40 MB): one launch, the
// partials never leave the chip. A cluster's blocks must be resident at once, so the waves count clusters:
// on the H200 66 of 2, 30 of 4, 15 of 8 and 7 of 16 (cuOccupancyMaxActiveClusters, one block an SM).
// EXPECTED: 1000^3 and 128x1024x32768 at >= 0.95x of torch.compile, 512x512x16384 at >= 0.87x (best step
// before: 0.91x, 0.88x, 0.87x); cu10's kernel and speed wherever the plan keeps it.
#include "cu10_waves.cu"

#define S11_BM 128
#define S11_BK 64
#define S11_THREADS 288                 // warpgroups 0 and 1 compute, warp 8 loads
#define S11_A_BYTES (S11_BM * S11_BK * 2)  // 16384: one 64x128 box
// the partial tile's row stride in floats: BN + 8 (16-byte aligned rows; a warp's float2 stores meet each
// bank twice, the minimum). It reuses the stages: 128 x (BN + 8) x 4 bytes.
// dynamic shared memory: 1024 bytes of alignment slack, the stages, then 2 x STAGES mbarriers.

#define S11_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
// d (64 floats) += A (64x16, K-major) x B (16x128, N-major); cu7's instruction (cu7_wgmma.cu's kernels
// are not this rung's, so its wrapper is not included)
__device__ __forceinline__ void s11_wgmma_n128(float* d, unsigned long long desc_a, unsigned long long desc_b) {
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
        : S11_ACC8(0), S11_ACC8(8), S11_ACC8(16), S11_ACC8(24), S11_ACC8(32), S11_ACC8(40), S11_ACC8(48),
          S11_ACC8(56)
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ unsigned s11_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void s11_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// this block's shared address `addr` as seen in block `rank` of the cluster
__device__ __forceinline__ unsigned s11_mapa(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ float4 s11_ld_cluster(unsigned addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void s11_st_shared2(unsigned addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

template <int BN, int S, int STAGES>
__device__ __forceinline__ void s11_body(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C,
                                         int M, int N, int K) {
    constexpr int B_BYTES = S11_BK * BN * 2;
    constexpr int STAGE_BYTES = S11_A_BYTES + B_BYTES;
    constexpr int ACC = BN / 2;  // fp32 accumulators a consumer thread holds: 64 x BN / 128
    constexpr int LD = BN + 8;
    static_assert(128 * LD * 4 <= STAGES * STAGE_BYTES, "the partial tile fits in the stages");
    extern __shared__ unsigned char s11_smem_raw[];
    const unsigned base = (mm_smem_addr(s11_smem_raw) + 1023u) & ~1023u;
    const unsigned full0 = base + STAGES * STAGE_BYTES;
    const unsigned empty0 = full0 + STAGES * 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_m = (M + S11_BM - 1) / S11_BM;
    const int m0 = (blockIdx.x % tiles_m) * S11_BM, n0 = (blockIdx.x / tiles_m) * BN;
    const unsigned rank = s11_cluster_rank();  // == blockIdx.y: the grid is (tiles, S), the cluster (1, S, 1)
    const int ktiles = (K + S11_BK - 1) / S11_BK;
    const int per = (ktiles + S - 1) / S;
    const int kt0 = (int)rank * per;
    const int nkt = max(0, min(ktiles, kt0 + per) - kt0);  // a slice past K has none: its partial is 0
    const void* tmap_a = tmaps;
    const void* tmap_b = tmaps + 16;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    float d[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) d[i] = 0.f;
    const int wg = warp / 4;
    if (warp == 8) {
        if (lane == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tmap_b) : "memory");
            for (int kt = 0; kt < nkt; ++kt) {
                int s = kt % STAGES;
                if (kt >= STAGES) mbar_wait(empty0 + 8 * s, ((kt / STAGES) - 1) & 1);
                unsigned full = full0 + 8 * s, sa = base + s * STAGE_BYTES, sb = sa + S11_A_BYTES;
                mbar_expect_tx(full, STAGE_BYTES);
                int k0 = (kt0 + kt) * S11_BK;
                tma_load_2d(sa, tmap_a, full, k0, m0);
#pragma unroll
                for (int j = 0; j < BN / 64; ++j) tma_load_2d(sb + 8192 * j, tmap_b, full, n0 + 64 * j, k0);
            }
        }
        __syncwarp();
    } else {
        for (int kt = 0; kt < nkt; ++kt) {
            int s = kt % STAGES;
            mbar_wait(full0 + 8 * s, (kt / STAGES) & 1);
            unsigned sa = base + s * STAGE_BYTES + wg * 64 * 128, sb = base + s * STAGE_BYTES + S11_A_BYTES;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < S11_BK / 16; ++kk) {
                // A: K-major 128-byte rows, 8-row atoms 1024 bytes apart; B: N-major, 64-column boxes 8192
                // bytes apart (LBO), 8 K-rows an atom (SBO 1024): cu8's descriptors
                const unsigned long long da = wg_desc(sa + kk * 32, 16, 1024);
                const unsigned long long db = wg_desc(sb + kk * 2048, 8192, 1024);
                if constexpr (BN == 192)
                    q_wgmma(d, da, db, 1);
                else
                    s11_wgmma_n128(d, da, db);
            }
            wg_commit();
            wg_wait<1>();
            if (kt > 0) {
                __syncwarp();
                if (lane == 0) mbar_arrive(empty0 + 8 * ((kt - 1) % STAGES));
            }
        }
        wg_wait<0>();
    }
    __syncthreads();  // every stage read by its last wgmma: the partial tile may overwrite them

    const unsigned part = base;  // 128 rows x LD floats
    if (warp < 8) {
        // d[r] of thread (warp w of its warpgroup, lane l): row 16 w + l/4 + 8 ((r%4)/2), column 8 (r/4) + 2 (l%4) + r%2
        const int r = wg * 64 + (warp % 4) * 16 + lane / 4;
#pragma unroll
        for (int i = 0; i < ACC / 4; ++i) {
            int c = i * 8 + (lane % 4) * 2;
            s11_st_shared2(part + (r * LD + c) * 4, d[4 * i], d[4 * i + 1]);
            s11_st_shared2(part + ((r + 8) * LD + c) * 4, d[4 * i + 2], d[4 * i + 3]);
        }
    }
    s11_cluster_sync();  // every block's partial written and visible to the cluster

    constexpr int ROWS = S11_BM / S;  // this block's share of the tile's rows
    constexpr int VEC = BN / 4;       // float4s a row
    for (int idx = threadIdx.x; idx < ROWS * VEC; idx += S11_THREADS) {
        const int rr = (int)rank * ROWS + idx / VEC, cc = (idx % VEC) * 4;
        const unsigned off = part + (rr * LD + cc) * 4;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int p = 0; p < S; ++p) {  // the same order in every block and every call
            float4 v = s11_ld_cluster(s11_mapa(off, p));
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
        const int m = m0 + rr, n = n0 + cc;
        if (m < M) {
            bf16_t* c = C + (long long)m * N + n;
            if (n + 3 < N) {  // N is a multiple of 8 and C 16-byte aligned on this path: an 8-byte store
                unsigned lo = (unsigned)mm_relu_bf16(acc.x) | ((unsigned)mm_relu_bf16(acc.y) << 16);
                unsigned hi = (unsigned)mm_relu_bf16(acc.z) | ((unsigned)mm_relu_bf16(acc.w) << 16);
                *reinterpret_cast<uint2*>(c) = make_uint2(lo, hi);
            } else {
                const float v[4] = {acc.x, acc.y, acc.z, acc.w};
                for (int j = 0; j < 4 && n + j < N; ++j) c[j] = mm_relu_bf16(v[j]);
            }
        }
    }
    s11_cluster_sync();  // no block leaves while another may still read its shared memory
}

// The (BN, S) pairs cuda_splitk.py plans with; the stages fill what shared memory allows (S11_STAGES there).
extern "C" __global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(S11_THREADS, 1)
mm_splitk_n128_s2(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    s11_body<128, 2, 6>(tmaps, C, M, N, K);
}
extern "C" __global__ void __cluster_dims__(1, 4, 1) __launch_bounds__(S11_THREADS, 1)
mm_splitk_n128_s4(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    s11_body<128, 4, 6>(tmaps, C, M, N, K);
}
extern "C" __global__ void __cluster_dims__(1, 8, 1) __launch_bounds__(S11_THREADS, 1)
mm_splitk_n128_s8(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    s11_body<128, 8, 6>(tmaps, C, M, N, K);
}
extern "C" __global__ void __cluster_dims__(1, 16, 1) __launch_bounds__(S11_THREADS, 1)
mm_splitk_n128_s16(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    s11_body<128, 16, 6>(tmaps, C, M, N, K);
}
extern "C" __global__ void __cluster_dims__(1, 4, 1) __launch_bounds__(S11_THREADS, 1)
mm_splitk_n192_s4(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    s11_body<192, 4, 5>(tmaps, C, M, N, K);
}
extern "C" __global__ void __cluster_dims__(1, 8, 1) __launch_bounds__(S11_THREADS, 1)
mm_splitk_n192_s8(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ C, int M, int N, int K) {
    s11_body<192, 8, 5>(tmaps, C, M, N, K);
}
