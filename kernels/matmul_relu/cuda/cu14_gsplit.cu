// cu14: split-K without clusters where cu11's split is held by cluster residency. A block per (128 x 64 tile,
// K-slice) runs cu11's pipeline over its slice and stores its fp32 partial to a global workspace ws[slice][M][N] by
// float2 stores from its registers (each quad of lanes writes a 32-byte sector); a second kernel sums the S partials
// in order (the result does not depend on timing), applies the ReLU and stores bf16, four elements a thread.
//
// CHANGE (cu11's evidence at 512x512x16384 on the H200: its split runs 96 blocks of 128x192 tiles in 12 clusters of
// 8, each block half again the products of cuBLAS's 128 blocks, because 128-wide tiles would make 16 clusters of 8
// where the H200 holds 15 at once; cuBLAS's splitK kernel runs 128 blocks of 128x64 tiles, K in four slices summed
// through global memory): no cluster, so any S, and 128x64 tiles in four slices make 128 blocks there.
// EXPECTED: >= 1.05x cu11 at 512x512x16384 (the experiment: 27.7 us to cu11's 30.3, eager relu(A @ B) 27.4) and
// >= 0.95x torch.compile there; cu13's kernels and speed wherever the plan does not split K this way.
#include "cu13_multicast.cu"

// d (32 floats) += A (64x16, K-major) x B (16x64, N-major): one 64-column box
#define GS_ACC4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
__device__ __forceinline__ void gs_wgmma_n64(float* d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 1;\n"
        "}\n"
        : GS_ACC4(0), GS_ACC4(4), GS_ACC4(8), GS_ACC4(12), GS_ACC4(16), GS_ACC4(20), GS_ACC4(24), GS_ACC4(28)
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <int BN, int STAGES>  // BN 64: gs_wgmma_n64's width
__device__ __forceinline__ void gs_body(const unsigned long long* __restrict__ tmaps, float* __restrict__ ws,
                                        int M, int N, int K) {
    constexpr int B_BYTES = S11_BK * BN * 2;
    constexpr int STAGE_BYTES = S11_A_BYTES + B_BYTES;
    constexpr int ACC = BN / 2;
    extern __shared__ unsigned char gs_smem_raw[];
    const unsigned base = (mm_smem_addr(gs_smem_raw) + 1023u) & ~1023u;
    const unsigned full0 = base + STAGES * STAGE_BYTES;
    const unsigned empty0 = full0 + STAGES * 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_m = (M + S11_BM - 1) / S11_BM;
    const int m0 = (blockIdx.x % tiles_m) * S11_BM, n0 = (blockIdx.x / tiles_m) * BN;
    const int S = gridDim.y, slice = blockIdx.y;
    const int ktiles = (K + S11_BK - 1) / S11_BK;
    const int per = (ktiles + S - 1) / S;
    const int kt0 = slice * per;
    const int nkt = max(0, min(ktiles, kt0 + per) - kt0);
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
        return;
    }
    for (int kt = 0; kt < nkt; ++kt) {
        int s = kt % STAGES;
        mbar_wait(full0 + 8 * s, (kt / STAGES) & 1);
        unsigned sa = base + s * STAGE_BYTES + wg * 64 * 128, sb = base + s * STAGE_BYTES + S11_A_BYTES;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < S11_BK / 16; ++kk) {
            const unsigned long long da = wg_desc(sa + kk * 32, 16, 1024);
            const unsigned long long db = wg_desc(sb + kk * 2048, 8192, 1024);
            gs_wgmma_n64(d, da, db);
        }
        wg_commit();
        wg_wait<1>();
        if (kt > 0) {
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * ((kt - 1) % STAGES));
        }
    }
    wg_wait<0>();
    // d[4 i + 2 h + e]: row 16 w + l/4 + 8 h, column 8 i + 2 (l%4) + e
    const int r = m0 + wg * 64 + (warp % 4) * 16 + lane / 4;
    float* part = ws + (long long)slice * M * N;
#pragma unroll
    for (int i = 0; i < ACC / 4; ++i) {
        const int c = n0 + i * 8 + (lane % 4) * 2;
        if (c < N) {
            if (r < M) *reinterpret_cast<float2*>(part + (long long)r * N + c) = make_float2(d[4 * i], d[4 * i + 1]);
            if (r + 8 < M)
                *reinterpret_cast<float2*>(part + (long long)(r + 8) * N + c) = make_float2(d[4 * i + 2], d[4 * i + 3]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(S11_THREADS, 1)
mm_gsplit_n64(const unsigned long long* __restrict__ tmaps, float* __restrict__ ws, int M, int N, int K) {
    gs_body<64, 8>(tmaps, ws, M, N, K);
}
// C = relu(sum over s of ws[s]) in bf16, the slices summed in order, 4 elements a thread (N is a multiple of 8)
extern "C" __global__ void __launch_bounds__(256)
mm_gsplit_reduce(const float* __restrict__ ws, bf16_t* __restrict__ C, int MN, int S) {
    const long long i = 4ll * (blockIdx.x * 256ll + threadIdx.x);
    if (i >= MN) return;
    float4 acc = *reinterpret_cast<const float4*>(ws + i);
    for (int s = 1; s < S; ++s) {
        const float4 v = *reinterpret_cast<const float4*>(ws + (long long)s * MN + i);
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    const unsigned lo = (unsigned)mm_relu_bf16(acc.x) | ((unsigned)mm_relu_bf16(acc.y) << 16);
    const unsigned hi = (unsigned)mm_relu_bf16(acc.z) | ((unsigned)mm_relu_bf16(acc.w) << 16);
    *reinterpret_cast<uint2*>(C + i) = make_uint2(lo, hi);
}
