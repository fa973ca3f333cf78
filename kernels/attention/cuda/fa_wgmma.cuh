// The causal flash attention forward on Hopper shared by attention's CUDA C rungs (v4_wgmma, and
// v5_persistent, which runs it as a persistent kernel): the shared-memory layout and barriers, the
// wgmma products (S = Q K^T from shared memory; O += P V with P from registers, the S accumulator's
// layout being the A fragment's), the online softmax, the loading thread's work for a query tile
// and a consumer warpgroup's. bf16, head dim 64 or 128, 384 threads a block: warpgroup 0 loads,
// warpgroups 1 and 2 each compute 64 of a tile's 128 query rows. sm_90a (nvcc), as the matmul
// ladder's cu7 and cu8, whose TMA, mbarrier and wgmma helpers it uses.
#pragma once
#include "../../matmul_relu/cuda/mm_wgmma.cuh"

#define FA_BM 128     // query rows a block: 64 per consumer warpgroup
#define FA_BN 128     // keys a block of the loop
#define FA_STAGES 3   // K/V stages in flight
#define FA_THREADS 384

// dynamic shared memory (after up to 1024 bytes of alignment slack): Q as [warpgroup][64-column
// chunk] boxes of 64 rows x 128 bytes, then FA_STAGES x (K, V) as [chunk] boxes of FA_BN rows x
// 128 bytes (128-byte swizzle), then the barriers: QBARS for Q (its full; a persistent kernel's
// empty too), then each stage's K full, V full and empty.
template <int D, int QBARS>
struct FaSmem {
    static constexpr int NC = D / 64;
    static constexpr int Q_BYTES = FA_BM * D * 2;
    static constexpr int KV_BYTES = FA_BN * D * 2;
    static constexpr int STAGE_BYTES = 2 * KV_BYTES;
    static constexpr int BAR_OFF = Q_BYTES + FA_STAGES * STAGE_BYTES;
    static constexpr int BYTES = 1024 + BAR_OFF + (QBARS + 3 * FA_STAGES) * 8;
};

// The shared memory's addresses: Q, the K/V stages, and the barriers.
template <int D, int QBARS>
struct FaAddr {
    using L = FaSmem<D, QBARS>;
    unsigned sq, skv, qbar, qempty, kfull0, vfull0, empty0;
    __device__ __forceinline__ explicit FaAddr(unsigned base)
        : sq(base), skv(base + L::Q_BYTES), qbar(base + L::BAR_OFF), qempty(QBARS > 1 ? qbar + 8 : 0u),
          kfull0(qbar + 8 * QBARS), vfull0(kfull0 + 8 * FA_STAGES), empty0(vfull0 + 8 * FA_STAGES) {}
    // one thread: Q's full barrier (one arrival and the bytes), its empty one (8 consumer warps),
    // each stage's K and V full (the bytes) and empty (8 consumer warps)
    __device__ __forceinline__ void init() const {
        mbar_init(qbar, 1);
        if (QBARS > 1) mbar_init(qempty, 8);
        for (int s = 0; s < FA_STAGES; ++s) {
            mbar_init(kfull0 + 8 * s, 1);
            mbar_init(vfull0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
};

// Key blocks the 128-row query tile at m0 reads (the causal diagonal's last, or T's).
__device__ __forceinline__ int fa_nblocks(int T, int m0) {
    return min((T + FA_BN - 1) / FA_BN, (m0 + FA_BM + FA_BN - 1) / FA_BN);
}

__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#define FA_R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
// d (64 floats) = or += A (64x16 K-major, smem) x B (16x128, K-major: K's rows, smem)
__device__ __forceinline__ void wg_ss_n128(float* d, unsigned long long da, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : FA_R8(0), FA_R8(8), FA_R8(16), FA_R8(24), FA_R8(32), FA_R8(40), FA_R8(48), FA_R8(56)
        : "l"(da), "l"(db), "r"(acc));
}

// d (32 floats) += A (64x16, registers) x B (16x64, N-major: V's rows, smem, transposed)
__device__ __forceinline__ void wg_rs_n64(float* d, const unsigned* a, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : FA_R8(0), FA_R8(8), FA_R8(16), FA_R8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// d (64 floats) += A (64x16, registers) x B (16x128, N-major, smem, transposed)
__device__ __forceinline__ void wg_rs_n128(float* d, const unsigned* a, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : FA_R8(0), FA_R8(8), FA_R8(16), FA_R8(24), FA_R8(32), FA_R8(40), FA_R8(48), FA_R8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ float fa_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// S (this thread's 64 scores of block n0) -> P in A-fragment registers; updates the running max and
// sum; alpha: what the accumulator must be multiplied by before P V is added.
__device__ __forceinline__ void fa_softmax(float* sacc, unsigned (*pn)[4], float* mx, float* sum, float* alpha,
                                           int n0, int row_min, int r_lo, int lane, float scale2) {
    if (n0 + FA_BN - 1 > row_min) {
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int col = n0 + 8 * i + 2 * (lane % 4) + (r % 2);
                if (col > r_lo + 8 * (r / 2)) sacc[4 * i + r] = -INFINITY;
            }
    }
    float bm[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        bm[0] = fmaxf(bm[0], fmaxf(sacc[4 * i], sacc[4 * i + 1]));
        bm[1] = fmaxf(bm[1], fmaxf(sacc[4 * i + 2], sacc[4 * i + 3]));
    }
    float mneg[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        bm[h] = fmaxf(bm[h], __shfl_xor_sync(0xffffffffu, bm[h], 1));
        bm[h] = fmaxf(bm[h], __shfl_xor_sync(0xffffffffu, bm[h], 2));
        const float mnew = fmaxf(mx[h], bm[h] * scale2);
        alpha[h] = fa_ex2(mx[h] - mnew);
        mx[h] = mnew;
        mneg[h] = -mnew;
        sum[h] *= alpha[h];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const float p0 = fa_ex2(fmaf(sacc[4 * i], scale2, mneg[0]));
        const float p1 = fa_ex2(fmaf(sacc[4 * i + 1], scale2, mneg[0]));
        const float p2 = fa_ex2(fmaf(sacc[4 * i + 2], scale2, mneg[1]));
        const float p3 = fa_ex2(fmaf(sacc[4 * i + 3], scale2, mneg[1]));
        sum[0] += p0 + p1;
        sum[1] += p2 + p3;
        pn[i / 2][2 * (i % 2)] = fa_pack(p0, p1);
        pn[i / 2][2 * (i % 2) + 1] = fa_pack(p2, p3);
    }
}

template <int D>
__device__ __forceinline__ void fa_pv(float* oacc, unsigned (*pa)[4], unsigned sv) {
#pragma unroll
    for (int kk = 0; kk < FA_BN / 16; ++kk) {
        const unsigned long long vb = wg_desc(sv + kk * 2048, FA_BN * 128, 1024);
        if (D == 64) wg_rs_n64(oacc, pa[kk], vb);
        else wg_rs_n128(oacc, pa[kk], vb);
    }
}

// The loading thread's work for one query tile (rows m0.. of the head whose rows start at row0):
// Q, once the last tile's consumers have released it (tile n > 0 of a persistent block), then K and
// V of key blocks 0..nblocks-1 into the ring, whose blocks are counted from g0 across tiles.
template <int D, int QBARS>
__device__ __forceinline__ void fa_load_tile(const FaAddr<D, QBARS>& a, const unsigned long long* tmaps, int row0,
                                             int m0, int nblocks, int g0, int n) {
    using L = FaSmem<D, QBARS>;
    constexpr int NC = L::NC;
    const void* tq = tmaps;
    const void* tk = tmaps + 16;
    const void* tv = tmaps + 32;
    if (n > 0) mbar_wait(a.qempty, (n - 1) & 1);
    mbar_expect_tx(a.qbar, L::Q_BYTES);
#pragma unroll
    for (int w = 0; w < 2; ++w)
#pragma unroll
        for (int c = 0; c < NC; ++c) tma_load_2d(a.sq + (w * NC + c) * 8192, tq, a.qbar, 64 * c, row0 + m0 + 64 * w);
    for (int j = 0; j < nblocks; ++j) {
        const int g = g0 + j, s = g % FA_STAGES;
        if (g >= FA_STAGES) mbar_wait(a.empty0 + 8 * s, ((g / FA_STAGES) - 1) & 1);
        const unsigned sk = a.skv + s * L::STAGE_BYTES, sv = sk + L::KV_BYTES;
        mbar_expect_tx(a.kfull0 + 8 * s, L::KV_BYTES);
#pragma unroll
        for (int c = 0; c < NC; ++c) tma_load_2d(sk + c * FA_BN * 128, tk, a.kfull0 + 8 * s, 64 * c, row0 + j * FA_BN);
        mbar_expect_tx(a.vfull0 + 8 * s, L::KV_BYTES);
#pragma unroll
        for (int c = 0; c < NC; ++c) tma_load_2d(sv + c * FA_BN * 128, tv, a.vfull0 + 8 * s, 64 * c, row0 + j * FA_BN);
    }
}

// A consumer warpgroup's work for one query tile (its 64 of the tile's rows), the n-th of its block,
// whose first key block is the ring's g0-th: S of block 0, then for each further block j its S
// issued, P V of block j-1 (P in pin), then j's softmax into pout while that product runs; pin and
// pout alternate, so no register of an in-flight product is written (one array copied into the
// other let ptxas share their registers and serialize). A persistent block (QBARS 2) releases Q
// after the tile's last S product and the ring's last stage after its P V, so the loader moves on
// to the next tile. O (and the log-sum-exp, where lse is not null) are stored from registers: each
// thread's 4-byte pieces (a quad's 16 contiguous bytes of a row an instruction), or with WIDE_O
// 16-byte vectors after a transpose inside the quad (64 contiguous bytes).
// u[k] becomes u[k ^ c], c in 0..3: two conditional swaps, as selects (an index by c would put u in
// local memory).
__device__ __forceinline__ void fa_xor_perm(unsigned (&u)[4], int c) {
    const bool s1 = c & 1, s2 = c & 2;
    const unsigned t0 = s1 ? u[1] : u[0], t1 = s1 ? u[0] : u[1], t2 = s1 ? u[3] : u[2], t3 = s1 ? u[2] : u[3];
    u[0] = s2 ? t2 : t0;
    u[1] = s2 ? t3 : t1;
    u[2] = s2 ? t0 : t2;
    u[3] = s2 ? t1 : t3;
}

template <int D, int QBARS, bool WIDE_O = false>
__device__ __forceinline__ void fa_tile(const FaAddr<D, QBARS>& a, int g0, int n, int nblocks, int m0, int row0,
                                        int T, bf16_t* __restrict__ O, float* __restrict__ lse, float scale2) {
    using L = FaSmem<D, QBARS>;
    constexpr int STAGES = FA_STAGES;
    constexpr int NC = L::NC;
    constexpr bool PERSIST = QBARS > 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wg = warp / 4 - 1;
    const int row_min = m0 + 64 * wg;
    const int r_lo = row_min + 16 * (warp % 4) + lane / 4;
    float sacc[64];
    float oacc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) oacc[i] = 0.f;
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f}, alpha[2];
    unsigned pa[FA_BN / 16][4];
    auto release = [&](unsigned bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    };
    auto s_product = [&](int g) {
        const unsigned sk = a.skv + (g % STAGES) * L::STAGE_BYTES;
        mbar_wait(a.kfull0 + 8 * (g % STAGES), (g / STAGES) & 1);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            wg_ss_n128(sacc, wg_desc(a.sq + (wg * NC + kk / 4) * 8192 + (kk % 4) * 32, 16, 1024),
                       wg_desc(sk + (kk / 4) * FA_BN * 128 + (kk % 4) * 32, 16, 1024), kk > 0);
        wg_commit();
    };
    mbar_wait(a.qbar, n & 1);
    s_product(g0);
    wg_wait<0>();
    if (PERSIST && nblocks == 1) release(a.qempty);
    fa_softmax(sacc, pa, mx, sum, alpha, 0, row_min, r_lo, lane, scale2);

    auto step = [&](int j, unsigned (*pin)[4], unsigned (*pout)[4]) {
        const int g = g0 + j, sp = (g - 1) % STAGES;
        s_product(g);
        mbar_wait(a.vfull0 + 8 * sp, ((g - 1) / STAGES) & 1);
        fa_pv<D>(oacc, pin, a.skv + sp * L::STAGE_BYTES + L::KV_BYTES);
        wg_commit();
        wg_wait<1>();  // S of block j is in
        if (PERSIST && j == nblocks - 1) release(a.qempty);
        fa_softmax(sacc, pout, mx, sum, alpha, j * FA_BN, row_min, r_lo, lane, scale2);
        wg_wait<0>();  // P V of block j-1 is in: its stage is free, the accumulator ours again
        release(a.empty0 + 8 * sp);
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            oacc[4 * i] *= alpha[0];
            oacc[4 * i + 1] *= alpha[0];
            oacc[4 * i + 2] *= alpha[1];
            oacc[4 * i + 3] *= alpha[1];
        }
    };
    auto last = [&](unsigned (*pin)[4]) {
        const int g = g0 + nblocks - 1, sp = g % STAGES;
        mbar_wait(a.vfull0 + 8 * sp, (g / STAGES) & 1);
        wg_fence();
        fa_pv<D>(oacc, pin, a.skv + sp * L::STAGE_BYTES + L::KV_BYTES);
        wg_commit();
        wg_wait<0>();
        if (PERSIST) release(a.empty0 + 8 * sp);
    };
    unsigned pb[FA_BN / 16][4];
    int j = 1;
    for (; j + 1 < nblocks; j += 2) {
        step(j, pa, pb);
        step(j + 1, pb, pa);
    }
    if (j < nblocks) {
        step(j, pa, pb);
        last(pb);
    } else {
        last(pa);
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
        sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
        sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
    }
    const float inv[2] = {1.f / sum[0], 1.f / sum[1]};
    if constexpr (WIDE_O) {
        // A row's D columns lie over its quad's 4 lanes, lane c holding columns 8i + 2c, 8i + 2c + 1:
        // each group of 4 words (i = 4b..4b+3) is transposed inside the quad (3 shuffles), so lane c
        // stores the 8 columns 8(4b + c).. as one 16-byte vector, and the quad 64 contiguous bytes.
        const int c = lane % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r_lo + 8 * h;
            bf16_t* orow = O + (long long)(row0 + row) * D;
#pragma unroll
            for (int b = 0; b < D / 32; ++b) {
                unsigned u[4];
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    u[k] = fa_pack(oacc[4 * (4 * b + k) + 2 * h] * inv[h], oacc[4 * (4 * b + k) + 2 * h + 1] * inv[h]);
                fa_xor_perm(u, c);  // u[k]: this lane's word of column group 4b + (c ^ k)
#pragma unroll
                for (int r = 1; r < 4; ++r) u[r] = __shfl_xor_sync(0xffffffffu, u[r], r);  // lane c ^ r's, of 4b + c
                fa_xor_perm(u, c);  // u[p]: lane p's word of column group 4b + c
                if (row < T) *reinterpret_cast<uint4*>(orow + 8 * (4 * b + c)) = make_uint4(u[0], u[1], u[2], u[3]);
            }
            if (row < T && lse != nullptr && c == 0) lse[row0 + row] = (mx[h] + log2f(sum[h])) * 0.6931471805599453f;
        }
        return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r_lo + 8 * h;
        if (row < T) {
            bf16_t* orow = O + (long long)(row0 + row) * D + 2 * (lane % 4);
#pragma unroll
            for (int i = 0; i < D / 8; ++i)
                *reinterpret_cast<unsigned*>(orow + 8 * i) =
                    fa_pack(oacc[4 * i + 2 * h] * inv[h], oacc[4 * i + 2 * h + 1] * inv[h]);
            if (lse != nullptr && lane % 4 == 0)
                lse[row0 + row] = (mx[h] + log2f(sum[h])) * 0.6931471805599453f;
        }
    }
}
