// dsa_indexer_logits on Hopper tensor cores (IndexerVariant::kWgmma / kWgmmaFp8; contract kernels/ops_dsa.h,
// dispatch dsa.cu). sm_90a. fp8 q / k only: head_dim 128, n_heads kHeads = 32 (GLM-5) or 64 (DeepSeek-V3.2).
//
// The GEMM per CTA is keys x (query row, head): A = a 64-key tile of k (M = 64 keys, K = head_dim), B = the CTA's
// query rows with all their heads (N = 256 (row, head) pairs = kRows = 256 / kHeads rows per consumer warpgroup).
// 384 threads: a producer warpgroup and two consumer warpgroups, each consumer with its own kRows query rows (the
// CTA: 2 kRows rows), both consuming every key tile from a ring ("full" mbarrier filled by the producer, "empty": one
// arrive per consumer warpgroup once its wgmma retired). Each consumer warpgroup stages its q rows once, with 16-byte
// loads, in the pair order below (PairMap). Both operands are K-major with 128-byte swizzle (16-byte chunk c of row r
// at chunk c ^ (r & 7) in 1024-byte atoms of 8 rows).
// Per key tile a consumer issues its wgmmas (f32 accumulators, 128 per thread), then the epilogue (score_tile). The
// accumulator's column n = 8j + 2t + e (t = lane % 4) is the B row that holds the pair (PairMap::row(n),
// PairMap::head(n)), ordered so that lane t's 64 columns are whole query rows (kRows / 4 of them, every head): a lane
// sums gate * ReLU(acc) over its rows' heads by itself (gate = weights * q_scale * scale, 64 registers for the CTA's
// life), with no cross-lane reduction, and stores its rows x its 2 keys times k_scale[key]. (The earlier (row, head)
// order gave each lane 8 heads of every row, and a quad reduce-scatter of 12 shuffles, 24 selects and 12 adds per
// tile per lane at 32 heads.)
// The consumers free-run by default: each issues its next wgmmas as soon as its stage is full, and the tensor cores
// take both warpgroups' work. WgmmaIndexerOptions::ping_pong makes them alternate their issue with two named
// barriers instead (the bench and DsaOpTest run it): with the per-lane row sums it is 0-5% slower at 4K-64K.
// Causal skipping: with q_pos the CTA scores keys [0, max q_pos of its rows] only (tiles past it are never loaded
// and their logits are not written: unspecified by the contract); CTAs run latest rows (most keys) first.
//
// Two operand paths:
//  - kWgmma (dsa_indexer_logits_wgmma_f16_kernel, the default): e4m3 is widened exactly to f16 on the way into shared
//    memory (the producer's 128 threads load key tiles with 16-byte loads, the consumers their q rows), then
//    wgmma.m64n256k16 f16 x f16 -> f32: exact products, f32 accumulation, so it matches the reference to the f32
//    kernels' tolerance. Half the fp8 tensor-core rate.
//  - kWgmmaFp8 (dsa_indexer_logits_wgmma_fp8_kernel): e4m3 key tiles straight from TMA (cp.async.bulk.tensor, one
//    producer thread), the q rows as they are (no widening), wgmma.m64n256k32 e4m3 x e4m3 -> f32 at the full fp8 rate;
//    but Hopper's fp8 MMA accumulates with reduced precision inside the instruction (about 14 bits; DeepSeek-V3
//    report), which measured ~1e-4 relative (NMSE ~1e-8) on the conformance inputs: outside kF32IndexerLogits, hence
//    opt-in only (kAuto never takes it).
// Outputs of keys past n_keys and rows past n_rows (zero-filled operands) are not stored.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/dsa_indexer_wgmma.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

constexpr int kHeadDim = 128;                  // bytes of one e4m3 row = one 128-byte swizzle row
constexpr int kKeys = 64;                      // keys per tile (wgmma M)
constexpr int kPairs = 256;                    // (row, head) pairs per consumer warpgroup (wgmma N)
constexpr int kStages = 8;                     // key-tile ring depth
constexpr int kThreads = 384;                  // producer + 2 consumer warpgroups
constexpr int kKeyTileBytes = kKeys * kHeadDim;  // 8 KiB
constexpr int kQBytes = kPairs * kHeadDim;       // 32 KiB per consumer warpgroup
constexpr int kBarBytes = 2 * kStages * 8;
constexpr int kSmemBytes = 1024 + 2 * kQBytes + kStages * kKeyTileBytes + kBarBytes;
static_assert(kSmemBytes <= 227 * 1024, "shared memory");
// The f16 (exact) kernel: operands twice as wide, so a shallower ring.
constexpr int kStagesF16 = 4;
constexpr int kKeyTileBytesF16 = 2 * kKeyTileBytes;  // 16 KiB
constexpr int kQBytesF16 = 2 * kQBytes;              // 64 KiB per consumer warpgroup
constexpr int kSmemBytesF16 = 1024 + 2 * kQBytesF16 + kStagesF16 * kKeyTileBytesF16 + 2 * kStagesF16 * 8;
static_assert(kSmemBytesF16 <= 227 * 1024, "shared memory");

struct WgArgs {
    float* logits;
    const float* weights;
    const float* q_scale;
    const float* k_scale;
    const int32_t* q_pos;  // nullptr: score every key
    int64_t lg0, w0, qs0, qs1, ks0, qp0, q0, q1, k0;  // q / k strides in bytes (the f16 kernel's loads)
    int n_rows, n_keys;
    float scale;
    bool ping_pong;  // the consumers alternate wgmma issue (named barriers 1 and 2); false: they free-run
    bool mma_only;   // diagnostic: no epilogue, nothing written
    bool hand_over_after_wait;  // ping-pong hand-over once this warpgroup's wgmmas retired (else right after issue)
};

__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

// ---------------------------------------------------------------------------------------------------------------
// Consumer pieces shared by both kernels.
//
// The B operand's row n (= accumulator column n = 8j + 2t + e, j < 32, t = lane % 4, e < 2) holds the (query row,
// head) pair chosen so that every lane's 64 columns are whole query rows: lane t owns the kLaneRows = kRows / 4 rows
// t * kLaneRows + i (i < kLaneRows), row i in the column blocks j of [i * kRowBlocks, (i + 1) * kRowBlocks) with head
// 2 (j % kRowBlocks) + e. A lane then sums gate * ReLU over all its rows' heads by itself: no cross-lane reduction.
template <int kHeads>
struct PairMap {
    static constexpr int kRows = kPairs / kHeads;      // query rows per consumer warpgroup
    static constexpr int kLaneRows = kRows / 4;        // 2 (32 heads) or 1 (64 heads)
    static constexpr int kRowBlocks = 32 / kLaneRows;  // column blocks j per row: kHeads / 2
    static_assert(kLaneRows >= 1 && kRowBlocks * 2 == kHeads, "kHeads 32 or 64");
    // The warpgroup-local query row and the head of B row / accumulator column n.
    __device__ __forceinline__ static int row(int n) { return ((n % 8) / 2) * kLaneRows + (n / 8) / kRowBlocks; }
    __device__ __forceinline__ static int head(int n) { return 2 * ((n / 8) % kRowBlocks) + n % 2; }
};

// gate[j][e] belongs to accumulator column n = 8j + 2t + e: gate = weights * q_scale * scale of that pair (0 for rows
// past n_rows).
// `mul` is 1, or 0.5 for the FaddAbs epilogues (halved gates: exact).
template <int kHeads>
__device__ __forceinline__ void load_gates(const WgArgs& a, int crow0, int t, float (&gate)[32][2], float mul = 1.0f) {
    using M = PairMap<kHeads>;
    // All 128 loads first (rows past n_rows read row 0 and are zeroed after), then the products: a product right
    // after its loads waits out their latency, 64 times in a row.
    float w[32][2], qs[32][2];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int r = crow0 + M::row(8 * j + 2 * t);
        const int64_t rr = r < a.n_rows ? r : 0;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int h = M::head(8 * j + 2 * t + e);
            w[j][e] = __ldg(a.weights + rr * a.w0 + h);
            qs[j][e] = __ldg(a.q_scale + rr * a.qs0 + static_cast<int64_t>(h) * a.qs1);
        }
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int r = crow0 + M::row(8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 2; ++e) gate[j][e] = r < a.n_rows ? w[j][e] * qs[j][e] * a.scale * mul : 0.0f;
    }
}

// This lane's output rows: the logits row pointer of each (nullptr past n_rows), fixed for the CTA's life.
template <int kHeads>
struct LaneRows {
    float* ptr[PairMap<kHeads>::kLaneRows];
    __device__ __forceinline__ LaneRows(const WgArgs& a, int crow0, int t) {
#pragma unroll
        for (int i = 0; i < PairMap<kHeads>::kLaneRows; ++i) {
            const int r = crow0 + t * PairMap<kHeads>::kLaneRows + i;
            ptr[i] = r < a.n_rows ? a.logits + static_cast<int64_t>(r) * a.lg0 : nullptr;
        }
    }
};

// Whether score_tile's form kForm (below) takes ReLU as acc + |acc| against halved gates.
constexpr bool fadd_abs_form(int form) { return form == 2 || form == 3; }

// One retired key tile: for each of this lane's rows and its two keys (accumulator rows g and g + 8 of the tile:
// key_lo, key_lo + 8), gate * ReLU summed over the row's heads in f32 in a fixed order, times k_scale[key], stored.
// kForm (IndexerEpilogue): 0 = kChains2, 4 / kLaneRows interleaved partial sums per (key, row), both heads of a
// column pair into one sum (8 chains of FMAs in all), ReLU by fmaxf; 1 = kChains4, 8 / kLaneRows partial sums per
// (key, row), head 2 (j % kRowBlocks) + e into sum (2 j + e) % kSplit (16 chains); 2 = kChains4FaddAbs, kChains4's
// sums with ReLU as acc + |acc| on the FMA pipe against halved gates (the same products: bit for bit kChains4);
// 3 = kChains2FaddAbs, kChains2's sums with that ReLU (bit for bit kChains2).
// The partial sums are then added in order.
template <int kHeads, int kForm>
__device__ __forceinline__ void score_tile(const WgArgs& a, const float (&acc)[128], const float (&gate)[32][2],
                                           const LaneRows<kHeads>& rows, int key_lo, float ks_lo, float ks_hi) {
    using M = PairMap<kHeads>;
    constexpr bool kPairChains = kForm == 0 || kForm == 3;  // kChains2's sums
    constexpr bool kFaddAbs = fadd_abs_form(kForm);
    constexpr int kSplit = (kPairChains ? 4 : 8) / M::kLaneRows;
    float part[2][M::kLaneRows][kSplit];
#pragma unroll
    for (int i = 0; i < M::kLaneRows; ++i) {
#pragma unroll
        for (int s = 0; s < kSplit; ++s) part[0][i][s] = part[1][i][s] = 0.0f;
    }
    const auto relu = [](float x) { return kFaddAbs ? __fadd_rn(x, fabsf(x)) : fmaxf(x, 0.0f); };
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int i = j / M::kRowBlocks;
        const int s0 = kPairChains ? j % kSplit : (2 * j) % kSplit;
        const int s1 = kPairChains ? s0 : (2 * j + 1) % kSplit;
        part[0][i][s0] = fmaf(relu(acc[4 * j + 0]), gate[j][0], part[0][i][s0]);
        part[0][i][s1] = fmaf(relu(acc[4 * j + 1]), gate[j][1], part[0][i][s1]);
        part[1][i][s0] = fmaf(relu(acc[4 * j + 2]), gate[j][0], part[1][i][s0]);
        part[1][i][s1] = fmaf(relu(acc[4 * j + 3]), gate[j][1], part[1][i][s1]);
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int key = key_lo + 8 * k;
        if (key >= a.n_keys) continue;
        const float ks = k == 0 ? ks_lo : ks_hi;
#pragma unroll
        for (int i = 0; i < M::kLaneRows; ++i) {
            float v = part[k][i][0];
#pragma unroll
            for (int s = 1; s < kSplit; ++s) v += part[k][i][s];
            if (rows.ptr[i] != nullptr) rows.ptr[i][key] = v * ks;
        }
    }
}

// Keys [0, key_end) are scored: with q_pos, up to the last key any of rows [row0, row0 + n) sees. CTA-uniform.
__device__ __forceinline__ int cta_key_end(const WgArgs& a, int row0, int n) {
    if (a.q_pos == nullptr) return a.n_keys;
    int m = -1;
    for (int i = 0; i < n && row0 + i < a.n_rows; ++i) {
        m = max(m, __ldg(a.q_pos + static_cast<int64_t>(row0 + i) * a.qp0));
    }
    return m >= a.n_keys ? a.n_keys : m + 1;
}

__device__ __forceinline__ float key_scale(const WgArgs& a, int key) {
    return key < a.n_keys ? __ldg(a.k_scale + static_cast<int64_t>(key) * a.ks0) : 0.0f;
}

// 16 e4m3 values (a 16-byte word) -> 16 f16 values (two 16-byte words), exact.
__device__ __forceinline__ void e4m3x16_to_f16(const uint4& in, uint4& lo, uint4& hi) {
    const uint32_t w[4] = {in.x, in.y, in.z, in.w};
    uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] & 0xffffu), __NV_E4M3);
        const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> 16), __NV_E4M3);
        o[2 * i] = static_cast<uint32_t>(a.x) | (static_cast<uint32_t>(a.y) << 16);
        o[2 * i + 1] = static_cast<uint32_t>(b.x) | (static_cast<uint32_t>(b.y) << 16);
    }
    lo = make_uint4(o[0], o[1], o[2], o[3]);
    hi = make_uint4(o[4], o[5], o[6], o[7]);
}

// Stores the f16 widening of 16-byte e4m3 chunk c8 (range [0, 8)) of row `row` into a K-major f16 tile of `rows`
// rows with 128-byte swizzle: two column blocks of [rows][64 f16 = 128 B] (block = c8 / 4), 16-byte chunk c of a
// row at c ^ (row & 7) (the hardware's swizzle of a 1024-byte aligned 8-row atom).
__device__ __forceinline__ void store_f16_chunk(uint32_t tile, int rows, int row, int c8, const uint4& in) {
    uint4 lo, hi;
    e4m3x16_to_f16(in, lo, hi);
    const uint32_t base = tile + static_cast<uint32_t>((c8 >> 2) * rows * 128 + row * 128);
    const int c = (2 * c8) & 7;
    const uint32_t a0 = base + static_cast<uint32_t>(((c ^ (row & 7)) << 4));
    const uint32_t a1 = base + static_cast<uint32_t>((((c + 1) ^ (row & 7)) << 4));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a0), "r"(lo.x), "r"(lo.y), "r"(lo.z), "r"(lo.w)
                 : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a1), "r"(hi.x), "r"(hi.y), "r"(hi.z), "r"(hi.w)
                 : "memory");
}

__device__ __forceinline__ uint4 load16_or_zero(const uint8_t* p, bool ok) {
    return ok ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
}

// A consumer warpgroup's q tile: B row n (n < kPairs) gets q[crow0 + PairMap::row(n), PairMap::head(n)], e4m3, as 8
// 16-byte chunks handed to store(n, chunk, bytes) (zeros past n_rows). In batches of 8 loads before their stores (the
// stores are volatile asm, which no later load passes).
template <int kHeads, class Store>
__device__ __forceinline__ void stage_q(const WgArgs& a, const uint8_t* q, int crow0, int ctid, Store&& store) {
    using M = PairMap<kHeads>;
    constexpr int kQBatch = 8;
    static_assert(kPairs * 8 % (128 * kQBatch) == 0, "whole batches");
    for (int i0 = ctid; i0 < kPairs * 8; i0 += 128 * kQBatch) {
        uint4 x[kQBatch];
#pragma unroll
        for (int b = 0; b < kQBatch; ++b) {
            const int i = i0 + 128 * b, n = i / 8, c8 = i % 8;
            const int r = crow0 + M::row(n);
            const bool ok = r < a.n_rows;
            x[b] = load16_or_zero(
                q + static_cast<int64_t>(ok ? r : 0) * a.q0 + static_cast<int64_t>(M::head(n)) * a.q1 + 16 * c8, ok);
        }
#pragma unroll
        for (int b = 0; b < kQBatch; ++b) {
            const int i = i0 + 128 * b;
            store(i / 8, i % 8, x[b]);
        }
    }
}

// The consumer warpgroup's key-tile loop, shared by both kernels. Per tile:
// - wait for the stage, then (ping-pong) for this warpgroup's turn on the tensor cores;
// - issue `mma(acc, stage)` and commit;
// - hand the tensor cores to the other warpgroup, right after issue (default) or once these wgmmas retired
//   (hand_over_after_wait, so that the other's cannot interleave with them). Warpgroup 1 skips its last hand-over so
//   that every arrive on a named barrier meets exactly one sync;
// - wait, release the stage (`releases`: one thread per warpgroup), score the tile.
template <int kHeads, int kNumStages, int kForm, class Mma>
__device__ __forceinline__ void consume_key_tiles(const WgArgs& a, uint32_t bars, int n_tiles, int c, bool releases,
                                                  const LaneRows<kHeads>& rows, int warp, int g,
                                                  const float (&gate)[32][2], float (&acc)[128], Mma&& mma) {
    const int bar_mine = 1 + c;  // ping-pong: "this warpgroup may issue"
    const int bar_other = 1 + (1 - c);
    for (int it = 0; it < n_tiles; ++it) {
        const int stage = it % kNumStages;
        const auto use = static_cast<uint32_t>(it / kNumStages);
        const int key_lo = it * kKeys + 16 * warp + g;
        const float ks_lo = key_scale(a, key_lo);
        const float ks_hi = key_scale(a, key_lo + 8);
        tma::mbar_wait(bars + 8 * stage, use & 1u);
        if (a.ping_pong) tma::named_sync(bar_mine, 256);
        wgmma::reg_fence(acc);
        wgmma::fence();
        mma(acc, stage);
        wgmma::commit();
        const bool hand_over = a.ping_pong && (c == 0 || it + 1 < n_tiles);
        if (hand_over && !a.hand_over_after_wait) tma::named_arrive(bar_other, 256);
        wgmma::wait<0>();
        if (hand_over && a.hand_over_after_wait) tma::named_arrive(bar_other, 256);
        wgmma::reg_fence(acc);
        if (releases) tma::mbar_arrive(bars + 8 * (kNumStages + stage));  // stage consumed
        if (!a.mma_only) score_tile<kHeads, kForm>(a, acc, gate, rows, key_lo, ks_lo, ks_hi);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// kWgmma (exact): e4m3 widened to f16 in shared memory, wgmma.m64n256k16 f16 x f16 -> f32.
template <int kHeads>
__global__ void __launch_bounds__(kThreads, 1) dsa_indexer_logits_wgmma_f16_kernel(const uint8_t* q,
                                                                                   const uint8_t* k, WgArgs a) {
    constexpr int kRows = kPairs / kHeads;
    constexpr int kCtaRows = 2 * kRows;
    static_assert(kRows / 4 >= 1 && kPairs % kHeads == 0 && kHeads % 8 == 0, "kHeads 32 or 64");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t sbase = raw + ((1024u - (raw & 1023u)) & 1023u);
    const uint32_t q_s = sbase;                                 // [2][2 blocks][kPairs][128 B] f16, swizzled
    const uint32_t k_s = sbase + 2 * kQBytesF16;                // [kStagesF16][2 blocks][kKeys][128 B] f16
    const uint32_t bars = k_s + kStagesF16 * kKeyTileBytesF16;  // full[kStagesF16], empty[kStagesF16]
    const int tid = static_cast<int>(threadIdx.x);
    const int row0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kCtaRows;  // latest first
    const int key_end = cta_key_end(a, row0, kCtaRows);
    const int n_tiles = key_end > 0 ? (key_end + kKeys - 1) / kKeys : 0;
    if (n_tiles == 0) return;  // CTA-uniform, before any barrier

    if (tid == 0) {
        for (int i = 0; i < kStagesF16; ++i) {
            tma::mbar_init(bars + 8 * i, 128);               // full: every producer thread, after its stores
            tma::mbar_init(bars + 8 * (kStagesF16 + i), 2);  // empty: one arrive per consumer warpgroup
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer: 128 threads widen key tiles
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
        // Thread p handles 16-byte chunks p + 128 i (i < 4) of the 64 x 128-byte tile: row = chunk / 8.
        uint4 v[4];
        auto load_tile = [&](int it) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int chunk = tid + 128 * i;
                const int key = it * kKeys + chunk / 8;
                v[i] = load16_or_zero(k + static_cast<int64_t>(key < a.n_keys ? key : 0) * a.k0 + 16 * (chunk % 8),
                                      key < a.n_keys);
            }
        };
        load_tile(0);
        for (int it = 0; it < n_tiles; ++it) {
            const int stage = it % kStagesF16;
            const auto use = static_cast<uint32_t>(it / kStagesF16);
            tma::mbar_wait(bars + 8 * (kStagesF16 + stage), (use & 1u) ^ 1u);
            const uint32_t dst = k_s + static_cast<uint32_t>(stage) * kKeyTileBytesF16;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int chunk = tid + 128 * i;
                store_f16_chunk(dst, kKeys, chunk / 8, chunk % 8, v[i]);
            }
            wgmma::fence_proxy_async();  // these generic-proxy stores before the consumers' wgmma reads
            tma::mbar_arrive(bars + 8 * stage);
            if (it + 1 < n_tiles) load_tile(it + 1);  // the next tile's loads overlap the wait above
        }
        return;
    }
    // ---------------------------------------------------------------- consumers
    // 128 accumulators + 64 gates per thread: more than the 168 registers of an even split, hence setmaxnreg.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    const int c = wg - 1;
    const int ctid = tid & 127;
    const int lane = tid & 31;
    const int warp = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int crow0 = row0 + c * kRows;  // this warpgroup's rows [crow0, crow0 + kRows)
    const uint32_t qc = q_s + static_cast<uint32_t>(c) * kQBytesF16;
    // This warpgroup's q rows, widened: B row n holds the pair (PairMap::row(n), PairMap::head(n)), 8 16-byte chunks.
    stage_q<kHeads>(a, q, crow0, ctid, [&](int n, int c8, const uint4& x) { store_f16_chunk(qc, kPairs, n, c8, x); });
    wgmma::fence_proxy_async();
    tma::named_sync(3 + c, 128);  // this warpgroup's q tile written
    float gate[32][2];
    load_gates<kHeads>(a, crow0, t, gate);
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    if (a.ping_pong && c == 1) tma::named_arrive(1, 256);  // ping-pong: warpgroup 0 issues first

    const LaneRows<kHeads> rows(a, crow0, t);
    consume_key_tiles<kHeads, kStagesF16, 0>(a, bars, n_tiles, c, ctid == 0, rows, warp, g, gate, acc,
                                          [&](float(&d)[128], int stage) {
                                              const uint32_t ka =
                                                  k_s + static_cast<uint32_t>(stage) * kKeyTileBytesF16;
#pragma unroll
                                              for (int ks = 0; ks < 8; ++ks) {
                                                  const uint32_t off = static_cast<uint32_t>(32 * (ks % 4));
                                                  wgmma::m64n256k16_f16(
                                                      d, make_desc(ka + (ks / 4) * (kKeys * 128) + off),
                                                      make_desc(qc + (ks / 4) * (kPairs * 128) + off),
                                                      ks != 0 ? 1 : 0);
                                              }
                                          });
}

// ---------------------------------------------------------------------------------------------------------------
// kWgmmaFp8 (Hopper's fp8 accumulation): e4m3 operands straight from TMA, wgmma.m64n256k32 e4m3 x e4m3 -> f32.
template <int kHeads, int kForm>
__global__ void __launch_bounds__(kThreads, 1)
    dsa_indexer_logits_wgmma_fp8_kernel(const uint8_t* q, const __grid_constant__ CUtensorMap tm_k, WgArgs a) {
    constexpr int kRows = kPairs / kHeads;
    constexpr int kCtaRows = 2 * kRows;
    static_assert(kRows / 4 >= 1 && kPairs % kHeads == 0 && kHeads % 8 == 0, "kHeads 32 or 64");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t sbase = raw + ((1024u - (raw & 1023u)) & 1023u);
    const uint32_t q_s = sbase;                           // [2][kPairs][128] e4m3, swizzled
    const uint32_t k_s = sbase + 2 * kQBytes;             // [kStages][kKeys][128] e4m3, swizzled
    const uint32_t bars = k_s + kStages * kKeyTileBytes;  // full[kStages], empty[kStages]
    const int tid = static_cast<int>(threadIdx.x);
    const int row0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kCtaRows;  // latest first
    const int key_end = cta_key_end(a, row0, kCtaRows);
    const int n_tiles = key_end > 0 ? (key_end + kKeys - 1) / kKeys : 0;
    if (n_tiles == 0) return;  // CTA-uniform, before any barrier

    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            tma::mbar_init(bars + 8 * i, 1);              // full: the producer's expect_tx
            tma::mbar_init(bars + 8 * (kStages + i), 2);  // empty: one arrive per consumer warpgroup
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer: one thread issues TMA
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            for (int it = 0; it < n_tiles; ++it) {
                const int stage = it % kStages;
                const auto use = static_cast<uint32_t>(it / kStages);
                tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                const uint32_t full = bars + 8 * stage;
                tma::mbar_expect_tx(full, kKeyTileBytes);
                tma::load_2d(k_s + static_cast<uint32_t>(stage) * kKeyTileBytes, &tm_k, 0, it * kKeys, full);
            }
        }
        return;
    }
    // ---------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wg - 1;
    const int lane = tid & 31;
    const int warp = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int crow0 = row0 + c * kRows;
    const uint32_t qc = q_s + static_cast<uint32_t>(c) * kQBytes;
    // This warpgroup's q rows in PairMap's order (not one TMA box: B row n is not q's (row, head) order), 16-byte
    // chunk c8 of B row n at chunk c8 ^ (n & 7) of the row (128-byte swizzle), as the TMA would place it.
    stage_q<kHeads>(a, q, crow0, tid & 127, [&](int n, int c8, const uint4& x) {
        const uint32_t addr = qc + static_cast<uint32_t>(n * 128 + ((c8 ^ (n & 7)) << 4));
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w)
                     : "memory");
    });
    wgmma::fence_proxy_async();
    tma::named_sync(3 + c, 128);  // this warpgroup's q tile written
    float gate[32][2];
    load_gates<kHeads>(a, crow0, t, gate, fadd_abs_form(kForm) ? 0.5f : 1.0f);
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    if (a.ping_pong && c == 1) tma::named_arrive(1, 256);
    const LaneRows<kHeads> rows(a, crow0, t);

    consume_key_tiles<kHeads, kStages, kForm>(a, bars, n_tiles, c, (tid & 127) == 0, rows, warp, g, gate, acc,
                                       [&](float(&d)[128], int stage) {
                                           const uint32_t ka = k_s + static_cast<uint32_t>(stage) * kKeyTileBytes;
#pragma unroll
                                           for (int ks = 0; ks < kHeadDim / 32; ++ks) {
                                               wgmma::m64n256k32_e4m3(d, make_desc(ka + 32 * ks),
                                                                      make_desc(qc + 32 * ks), ks != 0 ? 1 : 0);
                                           }
                                       });
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kHeads, int kForm>
void launch_fp8(const kernels::DsaIndexerLogitsParams& p, const WgArgs& args, int64_t grid, cudaStream_t stream) {
    const int64_t n_keys = p.k.size(0);
    const cuuint64_t k_dims[2] = {static_cast<cuuint64_t>(kHeadDim), static_cast<cuuint64_t>(n_keys)};
    const cuuint64_t k_strides[1] = {static_cast<cuuint64_t>(p.k.stride(0))};
    const cuuint32_t k_box[2] = {static_cast<cuuint32_t>(kHeadDim), static_cast<cuuint32_t>(kKeys)};
    const CUtensorMap tm_k = tma::encode_u8_sw128(p.k.data, 2, k_dims, k_strides, k_box);
    auto* kernel = dsa_indexer_logits_wgmma_fp8_kernel<kHeads, kForm>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, stream>>>(static_cast<const uint8_t*>(p.q.data), tm_k,
                                                                          args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

template <int kHeads>
void launch_f16(const kernels::DsaIndexerLogitsParams& p, const WgArgs& args, int64_t grid, cudaStream_t stream) {
    auto* kernel = dsa_indexer_logits_wgmma_f16_kernel<kHeads>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytesF16));
    kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytesF16, stream>>>(static_cast<const uint8_t*>(p.q.data),
                                                                              static_cast<const uint8_t*>(p.k.data),
                                                                              args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

// kDefault's epilogue: kChains2, or PENSTOCK_DSA_FP8_EPILOGUE=1 (kChains4) / 2 (kChains4FaddAbs) / 3
// (kChains2FaddAbs), read once per process (an A/B knob for the layers).
IndexerEpilogue default_epilogue() {
    static const IndexerEpilogue e = [] {
        const char* v = std::getenv("PENSTOCK_DSA_FP8_EPILOGUE");
        if (v != nullptr && std::strcmp(v, "1") == 0) return IndexerEpilogue::kChains4;
        if (v != nullptr && std::strcmp(v, "2") == 0) return IndexerEpilogue::kChains4FaddAbs;
        if (v != nullptr && std::strcmp(v, "3") == 0) return IndexerEpilogue::kChains2FaddAbs;
        return IndexerEpilogue::kChains2;
    }();
    return e;
}

}  // namespace

bool dsa_indexer_wgmma_supported(const kernels::DsaIndexerLogitsParams& p) {
    if (p.q.dtype != DType::kF8E4M3 || p.k.dtype != DType::kF8E4M3 || p.q.ndim != 3 || p.k.ndim != 2) return false;
    const int64_t n_heads = p.q.size(1);
    return p.q.size(2) == kHeadDim && (n_heads == 32 || n_heads == 64) && aligned16(p.q.data) &&
           aligned16(p.k.data) && p.q.stride(0) % 16 == 0 && p.q.stride(1) % 16 == 0 && p.k.stride(0) % 16 == 0 &&
           p.q.stride(0) > 0 && p.q.stride(1) > 0 && p.k.stride(0) > 0 && p.q.size(0) < (int64_t{1} << 31) &&
           p.k.size(0) < (int64_t{1} << 31) && fp8::device_major() == 9;
}

void dsa_indexer_logits_wgmma(const kernels::DsaIndexerLogitsParams& p, const WgmmaIndexerOptions& options,
                              void* stream) {
    const int64_t n_rows = p.q.size(0), n_keys = p.k.size(0);
    if (n_rows == 0 || n_keys == 0) return;
    WgArgs a{};
    a.logits = p.logits.ptr<float>();
    a.weights = p.weights.ptr<const float>();
    a.q_scale = p.q_scale.ptr<const float>();
    a.k_scale = p.k_scale.ptr<const float>();
    a.q_pos = p.q_pos.data != nullptr ? p.q_pos.ptr<const int32_t>() : nullptr;
    a.lg0 = p.logits.stride(0);
    a.w0 = p.weights.stride(0);
    a.qs0 = p.q_scale.stride(0);
    a.qs1 = p.q_scale.stride(1);
    a.ks0 = p.k_scale.stride(0);
    a.qp0 = p.q_pos.data != nullptr ? p.q_pos.stride(0) : 0;
    a.q0 = p.q.stride(0);
    a.q1 = p.q.stride(1);
    a.k0 = p.k.stride(0);
    a.n_rows = static_cast<int>(n_rows);
    a.n_keys = static_cast<int>(n_keys);
    a.scale = p.scale;
    a.ping_pong = options.ping_pong;
    a.mma_only = options.mma_only;
    a.hand_over_after_wait = options.hand_over_after_wait;
    const auto s = static_cast<cudaStream_t>(stream);
    const bool h32 = p.q.size(1) == 32;
    const int64_t grid = (n_rows + 2 * (kPairs / (h32 ? 32 : 64)) - 1) / (2 * (kPairs / (h32 ? 32 : 64)));
    if (options.fp8_accumulate) {
        const IndexerEpilogue e = options.epilogue == IndexerEpilogue::kDefault ? default_epilogue() : options.epilogue;
        const int form = e == IndexerEpilogue::kChains4          ? 1
                         : e == IndexerEpilogue::kChains4FaddAbs ? 2
                         : e == IndexerEpilogue::kChains2FaddAbs ? 3
                                                                 : 0;  // score_tile's kForm
        using Launch = void (*)(const kernels::DsaIndexerLogitsParams&, const WgArgs&, int64_t, cudaStream_t);
        static constexpr Launch kLaunch[2][4] = {
            {launch_fp8<32, 0>, launch_fp8<32, 1>, launch_fp8<32, 2>, launch_fp8<32, 3>},
            {launch_fp8<64, 0>, launch_fp8<64, 1>, launch_fp8<64, 2>, launch_fp8<64, 3>}};
        kLaunch[h32 ? 0 : 1][form](p, a, grid, s);
    } else {
        h32 ? launch_f16<32>(p, a, grid, s) : launch_f16<64>(p, a, grid, s);
    }
}

}  // namespace penstock::cuda
