// Device helpers shared by the hand-written tensor-core kernels (MLA, grouped bf16 / FP8 GEMMs, KDA): shared-memory
// addresses, 16-byte cp.async with zero fill, pairs of outputs, the tile walk over variable-size row groups, and the
// lane quad's word transpose of the GEMM epilogues' 16-byte stores. Device-only; include from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace penstock::cuda::tile {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; when !ok the destination is zero-filled (src-size 0) and src is not read.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool ok) {
    const int n = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
// 4-byte async copy (through L1: .cg takes 16 bytes only); zero fill as above.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool ok) {
    const int n = ok ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait<0>(); }

// Two adjacent outputs (x at p[0], y at p[1]) in OutT.
template <class OutT>
__device__ __forceinline__ void store2(OutT* p, float x, float y);
template <>
__device__ __forceinline__ void store2<__nv_bfloat16>(__nv_bfloat16* p, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}
template <>
__device__ __forceinline__ void store2<float>(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}

// One BM x BN output tile of a grouped GEMM.
struct GroupTile {
    int group;
    int row0;  // first row of a / out
    int rows;  // valid rows, [1, BM]
    int n0;
};

// The group g with prefix[g] <= t < prefix[g + 1] (binary search over the exclusive scan of the per-group counts).
__device__ __forceinline__ int find_group(int t, const int* prefix, int n_groups) {
    int lo = 0, hi = n_groups;  // prefix[lo] <= t < prefix[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (prefix[mid] <= t) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Tile t (< prefix[n_groups]): its group (find_group), then its n-tile, then its m-tile. offs: the groups' row
// offsets.
template <int BM, int BN>
__device__ __forceinline__ GroupTile decode_group_tile(int t, const int* prefix, const int* offs, int n_groups) {
    const int lo = find_group(t, prefix, n_groups);
    const int local = t - prefix[lo];
    const int mg = offs[lo + 1] - offs[lo];
    const int mt_count = (mg + BM - 1) / BM;
    const int nt = local / mt_count;
    const int mt = local - nt * mt_count;
    GroupTile tl;
    tl.group = lo;
    tl.row0 = offs[lo] + mt * BM;
    tl.rows = min(BM, mg - mt * BM);
    tl.n0 = nt * BN;
    return tl;
}

// Units of two tiles for CTA pairs (a 2-CTA cluster) that share one operand tile. A group of M m-tiles and N n-tiles
// has pair_units(M, N) = (N / 2) M + (N odd ? ceil(M / 2) : 0) units, in the order of the n-tile pairs (2i, 2i + 1):
// the floor(M / 2) m-tile pairs of n-tile 2i, then those of 2i + 1 (the pair shares the weight tile: rank r takes
// m-tile 2j + r), then, when M is odd, the last m-tile on both n-tiles (the pair shares the activation tile: rank r
// takes n-tile 2i + r); an odd N ends with the m-tile pairs of n-tile N - 1, where an odd M leaves rank 1 no rows.
// So no rank idles except in that last unit, whatever the groups' row counts, and the units that read one weight
// tile run together.
__device__ __forceinline__ int pair_units(int m_tiles, int n_tiles) {
    return (n_tiles >> 1) * m_tiles + (n_tiles & 1) * ((m_tiles + 1) >> 1);
}
struct PairTile {
    GroupTile tile;  // this rank's tile (rows 0: none)
    bool share_a;    // the pair shares the activation tile (same rows, n-tiles 2i and 2i + 1), else the weight tile
};
template <int BM, int BN>
__device__ __forceinline__ PairTile decode_pair_unit(int u, int rank, const int* prefix, const int* offs, int n_groups,
                                                     int n_tiles) {
    const int g = find_group(u, prefix, n_groups);
    const int local = u - prefix[g];
    const int mg = offs[g + 1] - offs[g];
    const int M = (mg + BM - 1) / BM;
    const int full = (n_tiles >> 1) * M;
    int mt = 0, nt = 0;
    bool share_a = false;
    if (local < full) {
        const int i = local / M;
        const int r = local - i * M;
        const int h = M >> 1;
        if (r < h) {
            mt = 2 * r + rank;
            nt = 2 * i;
        } else if (r < 2 * h) {
            mt = 2 * (r - h) + rank;
            nt = 2 * i + 1;
        } else {
            mt = M - 1;
            nt = 2 * i + rank;
            share_a = true;
        }
    } else {
        mt = 2 * (local - full) + rank;
        nt = n_tiles - 1;
    }
    PairTile pt;
    pt.share_a = share_a;
    pt.tile.group = g;
    pt.tile.row0 = offs[g] + min(mt, M - 1) * BM;
    pt.tile.rows = mt < M ? min(BM, mg - mt * BM) : 0;
    pt.tile.n0 = nt * BN;
    return pt;
}

// All blockDim.x threads (a multiple of 32, at most 1024): offs[0..G] = the group offsets clamped to [0, n_rows]
// (offsets null: one group [0, n_rows)), prefix[0..G] = the exclusive scan of the per-group tile counts
// (ceil(rows / BM) * n_tiles_n; kPairUnits: pair_units of them). `scan` is 32 ints of shared scratch. Ends with a
// barrier; returns prefix[G], the tile count.
template <int BM, bool kPairUnits = false>
__device__ __forceinline__ int build_group_tile_prefix(const int32_t* offsets, int n_rows, int G, int n_tiles_n,
                                                       int* prefix, int* offs, int* scan) {
    const int tid = static_cast<int>(threadIdx.x);
    const int n_threads = static_cast<int>(blockDim.x);
    const int lane = tid & 31;
    const int warp = tid >> 5;
    for (int i = tid; i <= G; i += n_threads) {
        int v = offsets != nullptr ? offsets[i] : (i == 0 ? 0 : n_rows);
        v = v < 0 ? 0 : (v > n_rows ? n_rows : v);
        offs[i] = v;
    }
    __syncthreads();
    const int per = (G + n_threads - 1) / n_threads;
    const int g0 = min(G, tid * per);
    const int g1 = min(G, g0 + per);
    auto tiles_of = [&](int g) {
        const int mg = max(0, offs[g + 1] - offs[g]);
        if constexpr (kPairUnits) {
            return pair_units((mg + BM - 1) / BM, n_tiles_n);
        } else {
            return ((mg + BM - 1) / BM) * n_tiles_n;
        }
    };
    int local = 0;
    for (int g = g0; g < g1; ++g) local += tiles_of(g);
    int x = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) scan[warp] = x;
    __syncthreads();
    int run = x - local;
    for (int w = 0; w < warp; ++w) run += scan[w];
    for (int g = g0; g < g1; ++g) {
        prefix[g] = run;
        run += tiles_of(g);
    }
    if (tid == n_threads - 1) prefix[G] = run;
    __syncthreads();
    return prefix[G];
}

// Whether rows starting at `base`, `ld_bytes` apart, are all 16-byte aligned: the epilogues' 16-byte row stores
// (store_row_bf16x16; the FP8 gated epilogue) may run. Host side, per call.
inline bool rows_16b_aligned(const void* base, int64_t ld_bytes) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && ld_bytes % 16 == 0;
}

// A 4 x 4 transpose of 32-bit words inside each lane quad (lanes 4 g .. 4 g + 3; t = lane % 4): w[q] is this lane's
// word for lane q of its quad; returns r with r[q] = lane q's w[t]. Three xor shuffles, and two permutations by t (the
// words each shuffle sends, and where each received one goes). Every lane of the warp must call it.
__device__ __forceinline__ uint4 quad_transpose(const uint32_t (&w)[4], int t) {
    // perm(x)[k] = x[t ^ k]: swap neighbours when bit 0 of t is set, then pairs when bit 1 is
    const auto perm = [t](uint32_t x0, uint32_t x1, uint32_t x2, uint32_t x3) {
        const bool b0 = (t & 1) != 0, b1 = (t & 2) != 0;
        const uint32_t a0 = b0 ? x1 : x0, a1 = b0 ? x0 : x1, a2 = b0 ? x3 : x2, a3 = b0 ? x2 : x3;
        return uint4{b1 ? a2 : a0, b1 ? a3 : a1, b1 ? a0 : a2, b1 ? a1 : a3};
    };
    const uint4 snd = perm(w[0], w[1], w[2], w[3]);  // round k sends w[t ^ k] to lane t ^ k
    const uint32_t r1 = __shfl_xor_sync(0xffffffffu, snd.y, 1);
    const uint32_t r2 = __shfl_xor_sync(0xffffffffu, snd.z, 2);
    const uint32_t r3 = __shfl_xor_sync(0xffffffffu, snd.w, 3);
    return perm(snd.x, r1, r2, r3);  // round k's word came from lane t ^ k
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// One accumulator row of 32 * kBlocks bf16 columns from a wgmma fragment, in 16-byte stores: lane t of the row's quad
// holds word(i) = columns 8 i + 2 t (+1) packed (pack_bf16x2) for i < 4 kBlocks; after quad_transpose it stores columns
// 32 jb + 8 t .. + 7 for each block jb. `orow_t` is the row's first column + 8 t (16-byte aligned), `valid` whether
// the row is stored. Every lane of the warp must call it (the shuffles).
template <int kBlocks, class Word>
__device__ __forceinline__ void store_row_bf16x16(__nv_bfloat16* orow_t, bool valid, int t, Word&& word) {
#pragma unroll
    for (int jb = 0; jb < kBlocks; ++jb) {
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) w[q] = word(4 * jb + q);
        const uint4 v = quad_transpose(w, t);
        if (valid) *reinterpret_cast<uint4*>(orow_t + 32 * jb) = v;
    }
}

}  // namespace penstock::cuda::tile
