// v5_persistent: v4_wgmma's kernel run persistently: one block per SM (the grid is the SMs, or the
// tiles where fewer), each taking query tiles in turn. The tiles are ordered in groups of `group`
// heads, each group's longest first (query block nmb-1 of each of its heads, then nmb-2, ...), and
// dealt in rounds of one tile per block, each round in the opposite direction of the last (block b
// takes round r's tile b, then round r+1's tile grid-1-b). With one group of every head, all tiles
// run longest first, so a block dealt one of a round's longest tiles gets one of the next round's
// shortest; groups of about a round's tiles, or of one head, read each head's K and V while they
// are in L2. The K/V ring runs on across tiles (its blocks counted from the block's first tile), and
// Q has an empty barrier as well as a full one: the consumers release Q after the tile's last S
// product and each stage after its P V, so the loading warp fetches the next tile's Q and first key
// blocks while the consumers finish this tile's last P V and store its O. Each entry comes twice: O
// stored as v4 stores it, or in 16-byte vectors (fa_tile's WIDE_O); the launcher's picker times both.
//
// CHANGE (from v4_wgmma's profile and the family sweep: at 256-1024 tokens a block per tile spends
// much of its life loading its first tiles, and v4 lost there to v3_fma's Triton loop): the next
// tile's loads overlap this tile's end, and no block starts cold after the first. The order of the
// tiles and O's store are picked per shape (the launcher's `group`, the entry).
// EXPECTED: >= v4_wgmma on every family member within noise, and >= v3_fma's loop at the short and
// GPT-2 members, where v4's picker ran v3's loop.
#include "fa_wgmma.cuh"

// Block b's tile in round r of `grid` blocks (each round dealt the opposite way of the last): false
// where that round has none for it (the last round's tiles go to its far end), else its query block
// qb and its head bh (of BH), tile t of the order above: group t / (group nmb), in which the tiles
// run query block by query block from the last, head by head within one.
__device__ __forceinline__ bool fp_tile(int r, int grid, int nmb, int BH, int group, int& qb, int& bh) {
    const int t = r * grid + ((r & 1) ? grid - 1 - (int)blockIdx.x : (int)blockIdx.x);
    if (t >= nmb * BH) return false;
    const int g = t / (group * nmb), w = t - g * group * nmb;
    const int heads = min(group, BH - g * group);  // the last group's may be fewer
    qb = nmb - 1 - w / heads;
    bh = g * group + w % heads;
    return true;
}

// tmaps, O, lse, scale2: v4_wgmma's; T the sequence length, BH the batch x heads, group the heads a
// group of the tiles' order (1..BH). The loading thread
// and the consumers walk the same tiles in their own loops (one shared loop with the roles apart in
// its body made ptxas serialize the wgmma products and spill).
template <int D, bool WIDE_O>
__device__ __forceinline__ void fp_fwd(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O,
                                       float* __restrict__ lse, int T, int BH, int group, float scale2) {
    extern __shared__ unsigned char fa_smem_raw[];
    const FaAddr<D, 2> a((mm_smem_addr(fa_smem_raw) + 1023u) & ~1023u);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nmb = (T + FA_BM - 1) / FA_BM, ntiles = nmb * BH, grid = gridDim.x;
    if (threadIdx.x == 0) a.init();
    __syncthreads();
    if (warp < 4) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (warp == 0 && lane == 0) {
            int g0 = 0, n = 0;
            int qb, bh;
            for (int r = 0; r * grid < ntiles; ++r) {
                if (!fp_tile(r, grid, nmb, BH, group, qb, bh)) continue;
                const int m0 = qb * FA_BM, nblocks = fa_nblocks(T, m0);
                fa_load_tile<D, 2>(a, tmaps, bh * T, m0, nblocks, g0, n++);
                g0 += nblocks;
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    int g0 = 0, n = 0, qb, bh;
    for (int r = 0; r * grid < ntiles; ++r) {
        if (!fp_tile(r, grid, nmb, BH, group, qb, bh)) continue;
        const int m0 = qb * FA_BM, nblocks = fa_nblocks(T, m0);
        fa_tile<D, 2, WIDE_O>(a, g0, n++, nblocks, m0, bh * T, T, O, lse, scale2);
        g0 += nblocks;
    }
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
fp_fwd_d64(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O, float* __restrict__ lse, int T,
           int BH, int group, float scale2) {
    fp_fwd<64, false>(tmaps, O, lse, T, BH, group, scale2);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
fp_fwd_d128(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O, float* __restrict__ lse, int T,
            int BH, int group, float scale2) {
    fp_fwd<128, false>(tmaps, O, lse, T, BH, group, scale2);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
fp_fwd_d64_wide_o(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O, float* __restrict__ lse, int T,
                  int BH, int group, float scale2) {
    fp_fwd<64, true>(tmaps, O, lse, T, BH, group, scale2);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1)
fp_fwd_d128_wide_o(const unsigned long long* __restrict__ tmaps, bf16_t* __restrict__ O, float* __restrict__ lse, int T,
                   int BH, int group, float scale2) {
    fp_fwd<128, true>(tmaps, O, lse, T, BH, group, scale2);
}
