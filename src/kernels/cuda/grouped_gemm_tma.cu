// The warp-specialised bf16 grouped GEMM (contract kernels/cuda/grouped_gemm.h; kTmaDyn, the default device kernel,
// and the variants kTma, kTmaCluster, kTmaK32, kWsCpAsync; issue #7). sm_90a: TMA + mbarriers + wgmma.
//
// out[r, :] = a[r, :] @ b[g]^T for the rows r in [offsets[g], offsets[g + 1]); fp32 accumulation, one rounding to
// bf16 (or none, f32 out) in the epilogue. Scheduling is grouped_gemm.cu's: a persistent grid, every CTA scans the
// device offsets into a per-group tile prefix in shared memory (tile::build_group_tile_prefix) and finds its tiles by
// binary search; tiles run group-major, then n-tile, then m-tile, so CTAs running together share one expert's weight
// tile and its rows stay in L2 across the n-tiles. kDyn (kTmaDyn) hands the tiles out in that order from a global
// counter instead of round-robin (tile_sched.h): the producer takes the next tile when its ring has room and passes
// the tile id to the consumers through a per-stage slot published by the stage's "full" barrier (-1: no more tiles).
//
// CTA tile 128 x 256 x 64 (one 128-byte swizzled row per tile row and k-step), 384 threads: a producer warpgroup
// (one thread issues the TMA loads; setmaxnreg 40) and two consumer warpgroups (rows [0, 64) and [64, 128) of the
// tile, 4 wgmma.m64n256k16 per k-step into 128 f32 accumulators per thread; setmaxnreg 232). A 4-stage ring of 48 KiB
// stages (A 128 rows, B as two 128-row halves); stage i has a "full" mbarrier (the producer's expect_tx, completed by
// the bulk copies) and an "empty" one (one arrive per consumer warpgroup of every CTA that writes into the stage).
// A consumer keeps one wgmma batch in flight and releases the previous stage when it retires; the producer runs up to
// 4 k-steps ahead, across tiles, so the next tile's operands load while the consumers run the epilogue (stores
// straight from the registers, rows past the group and columns past n masked: 16 bytes per lane after a quad
// transpose for bf16 out with aligned rows and whole tiles, else bf16x2 / float2).
//
// A is one 2-d map over all n_rows rows: a tile whose 128 rows cross into the next group loads (and multiplies) those
// rows but never stores them; rows past n_rows, k past the end and weight rows past n are zero-filled by TMA. A B half
// that lies wholly past n is not loaded (its columns are never stored, so stale shared memory there is harmless).
//
// kCluster 2: CTA pairs (a cluster along x) take consecutive tiles 2u and 2u + 1 of the order; when both are the same
// (group, n-tile) — the common case, adjacent m-tiles — each CTA loads one 128-row half of the weight tile and
// multicasts it to both, halving the weight traffic from L2. Otherwise each loads its own. The empty barriers then
// count the consumers of both CTAs (every stage may be written by the peer), so the pair runs in lockstep; a CTA
// whose tile 2u + 1 is past the end recomputes tile 2u as a dummy (nothing stored) to keep the ring in step.
//
// kDyn with kCluster 2 (kTmaDynCluster): the dynamic order over units of two tiles that share the weight tile (each
// CTA loads one half, multicast) or, for a group's odd last m-tile, the activation tile (each CTA loads 64 rows,
// multicast through tm_a64); tile_util.cuh pair_units. Rank 0's producer takes the units and sends each to rank 1
// through a ring of message slots in rank 1's shared memory (remote store + cluster-scope release per tile).
//
// kBK 32 (kTmaK32): 64-byte rows with 64-byte swizzle, 8 stages of 24 KiB. kCpLoad (kWsCpAsync): the producer
// warpgroup's 128 threads load by cp.async instead (rows past the group zero-filled, not loaded) and signal "full".
// Measurement knobs (environment, read once per process): PENSTOCK_GG_TMA_L2PROMO=none|128|256 (the maps' L2
// promotion, default 128) and PENSTOCK_GG_TMA_BBOX=256 (one 256-row weight box per k-step; cluster 1 only).
// A consumer warpgroup whose 64 rows all lie past the tile's valid rows (a group tail of <= 64 rows, a cluster dummy)
// skips its products and only passes the stages on, so such a tile costs about half.
// On the H200 (docs/perf/2026-12-01-grouped-gemm-ws.md) the static round-robin order let the CTAs that share a weight
// tile drift apart at T = 16384 (36-49% L2 hits, 0.67-0.87x torch._grouped_mm); kTmaDyn keeps them together (65% L2
// hits) and runs at 1.00-1.52x torch on the DeepSeek-V3 / Kimi K3 expert shapes
// (docs/perf/2026-12-01-grouped-gemm-dyn.md). The 32-wide step was slower than kTma. Clusters were too (0.7-1.0x)
// while every stage release to the peer was a cluster-scope release (a fence per k-step); with CTA-scope remote
// arrives they run 0.95-1.15x kTmaDyn at T = 16384 (docs/perf/2026-12-02-s17.md section 7).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/glu_act.cuh"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_sched.cuh"
#include "kernels/cuda/tile_sched.h"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

constexpr int kBM = 128;
constexpr int kBN = 256;
constexpr int kThreads = 384;
constexpr int kPipeBytes = 192 * 1024;  // the stage ring, either k-step
constexpr int kScanBytes = 32 * 4;      // build_group_tile_prefix's scratch, outside the bulk copies' bytes
constexpr int kMaxGroups = 4096;

// The k-step: kBK 64 (one 128-byte swizzled row per tile row, 4 stages of 48 KiB) or 32 (64-byte rows, 64-byte
// swizzle, 8 stages of 24 KiB: the same ring, twice as many loads in flight relative to the stage in use).
template <int kBK>
struct Step {
    static constexpr int kRowBytes = kBK * 2;                  // bf16
    static constexpr int kABytes = kBM * kRowBytes;            // 16 / 8 KiB
    static constexpr int kBHalfBytes = (kBN / 2) * kRowBytes;  // 16 / 8 KiB
    static constexpr int kStageBytes = kABytes + 2 * kBHalfBytes;
    static constexpr int kStages = kPipeBytes / kStageBytes;  // 4 / 8
    static constexpr int kBarBytes = 3 * kStages * 8;  // full, empty, and the pair's tile messages (kDyn, kCluster 2)
    static_assert(kBK == 64 || kBK == 32, "k-step");
    static_assert(kStages * kStageBytes == kPipeBytes, "ring");
};

template <int kBK>
constexpr int smem_bytes(int n_groups) {
    return kPipeBytes + 1024 + Step<kBK>::kBarBytes + kScanBytes + 8 * Step<kBK>::kStages + 8 * (n_groups + 1);
}

static_assert(smem_bytes<64>(kMaxGroups) <= 227 * 1024, "shared memory");
static_assert(smem_bytes<32>(kMaxGroups) <= 227 * 1024, "shared memory");

struct TmaArgs {
    void* out;               // [n_rows, n] bf16 or f32, row stride ldo
    const int32_t* offsets;  // [n_groups + 1] i32, device
    const bf16* a;           // [n_rows, k] bf16, row stride lda (the cp.async producer; TMA reads the maps)
    const bf16* b;           // [n_groups, n, k] bf16, contiguous
    int64_t ldo, lda;
    int n_rows, n, k, n_groups, n_tiles_n, k_steps;
    int n_out;       // out's columns (n, or I in the gated form)
    int out16;       // bf16 out with 16-byte aligned rows (pointer and ldo): the epilogue's 16-byte stores
    int b_box_rows;  // rows of tm_b's box: 128 (halves, multicast-capable) or 256 (one load per k-step, no cluster)
    int* sched;      // kDyn: this stream's tile counter pair (tile_sched.h)
    // The fused gated epilogue (kAct != 0, grouped_gemm_glu): b is [n_groups, 2 I, k] with the gate rows first,
    // glu_n = I; a tile is 128 output columns, its B halves the gate rows [n0, n0 + 128) and the up rows
    // [I + n0, I + n0 + 128); out [n_rows, I] = act(bf16(gate), bf16(up)) (glu_act.cuh).
    int glu_n;
    float situ_beta, situ_linear_beta, situ_inv_beta, situ_inv_linear_beta;
};

// Fused gated activations (kAct): none, SiLU (silu_mul), SiTU (situ_mul, kDefaultSituMath).
constexpr int kActNone = 0;
constexpr int kActSilu = 1;
constexpr int kActSitu = 2;

using tile::smem_u32;
using tile::store2;
using Tile = tile::GroupTile;

template <class OutT, int kCluster, int kBK, bool kCpLoad, bool kDyn = false, int kAct = kActNone>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_tma_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                            const __grid_constant__ CUtensorMap tm_a64, TmaArgs p) {
    static_assert(kAct == kActNone || (kDyn && std::is_same_v<OutT, bf16>), "the gated epilogue: kTmaDyn, bf16 out");
    constexpr int kTileN = kAct != kActNone ? kBN / 2 : kBN;  // output columns per tile
    using S = Step<kBK>;
    constexpr int kStages = S::kStages;
    constexpr int kStageBytes = S::kStageBytes;
    constexpr int kABytes = S::kABytes;
    constexpr int kBHalfBytes = S::kBHalfBytes;
    constexpr int kRowBytes = S::kRowBytes;
    // K-major swizzled tile (swizzle width = the row): LBO unused, SBO = 8 rows.
    auto make_desc = [](uint32_t saddr) { return wgmma::desc_swizzle<kRowBytes>(saddr, 16, 8 * kRowBytes); };
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;          // the same offset in every CTA of a cluster (same kernel, same layout)
    const uint32_t bars = sbase + kPipeBytes;  // full[0, kStages), empty[0, kStages), msg[0, kStages)
    const uint32_t msg_bars = bars + 16 * kStages;
    const int G = p.n_groups;
    int* scan = reinterpret_cast<int*>(smem + kPipeBytes + S::kBarBytes);
    int* stage_tile = scan + 32;      // kDyn: the tile id of the tile whose first k-step is in stage i (-1: no more)
    int* msg = stage_tile + kStages;  // kDyn pairs: rank 0's tile messages to rank 1 (a ring, written remotely)
    int* prefix = msg + kStages;
    int* offs = prefix + (G + 1);
    const int tid = static_cast<int>(threadIdx.x);
    const uint32_t rank = kCluster > 1 ? tma::cluster_rank() : 0u;
    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            tma::mbar_init(bars + 8 * i, kCpLoad ? 128 : 1);         // full: the producer's expect_tx / 128 threads
            tma::mbar_init(bars + 8 * (kStages + i), 2 * kCluster);  // empty: each consumer warpgroup of the cluster
            tma::mbar_init(msg_bars + 8 * i, 1);                     // msg: rank 0's producer (kDyn pairs)
        }
        tma::fence_mbar_init();
    }
    // Ends with a CTA barrier, which also publishes the barrier inits inside the CTA. A dynamic pair's order is over
    // units of two tiles that share the weight or the activation tile (tile_util.cuh, pair_units).
    constexpr bool kDynPair = kDyn && kCluster > 1;
    const int total =
        tile::build_group_tile_prefix<kBM, kDynPair>(p.offsets, p.n_rows, G, p.n_tiles_n, prefix, offs, scan);
    if constexpr (kCluster > 1) tma::cluster_sync();  // the peer's barriers exist before any multicast / remote arrive
    const int units = (total + kCluster - 1) / kCluster;
    const int cid = static_cast<int>(blockIdx.x) / kCluster;
    const int n_clusters = static_cast<int>(gridDim.x) / kCluster;
    const int my_units = units > cid ? (units - 1 - cid) / n_clusters + 1 : 0;  // the same in both CTAs of a pair
    const int KT = p.k_steps;
    static_assert(!kDyn || ((kCluster == 1 || kCluster == 2) && !kCpLoad), "the dynamic scheduler: TMA, pairs at most");
    // kDynPair: this CTA's tile of unit t (rows 0: none, nothing computed or stored) and the shared operand.
    auto pair_tile = [&](int t) {
        return tile::decode_pair_unit<kBM, kTileN>(t, static_cast<int>(rank), prefix, offs, G, p.n_tiles_n);
    };
    if (!kDyn && my_units == 0) return;  // uniform over the cluster: nothing was or will be sent to the peer
    // This CTA's tile of unit u (rows 0: a dummy, computed and not stored) and whether the pair shares its weights.
    auto unit_tile = [&](int u, bool& shared) {
        const int t0 = kCluster * u;
        const Tile first = tile::decode_group_tile<kBM, kBN>(t0, prefix, offs, G);
        shared = false;
        if constexpr (kCluster == 1) {
            return first;
        } else {
            if (t0 + 1 >= total) {
                Tile d = first;
                if (rank != 0) d.rows = 0;
                return d;
            }
            const Tile second = tile::decode_group_tile<kBM, kBN>(t0 + 1, prefix, offs, G);
            shared = first.group == second.group && first.n0 == second.n0;
            return rank == 0 ? first : second;
        }
    };
    const int wg = tid >> 7;
    if (wg == 0 && kCpLoad) {
        // ------------------------------------------------------------ producer: cp.async by 128 threads
        // Thread (ld_r = tid / 8, ld_c = tid % 8) copies 16-byte chunk ld_c of tile rows ld_r + 16 pass (A: 8
        // passes, B: 16) into the 128B-swizzled layout (chunk c of row r at c ^ (r & 7)); rows past the group / n
        // and k past the end are zero-filled (src-size 0). Each thread signals "full" for step s - 2 once its own
        // copies of that step landed (cp.async.wait_group 2, then fence.proxy.async so the tensor cores' async
        // proxy sees them): two steps in flight per thread, which cannot deadlock with the consumers' release of
        // step s - 4 (they need step s - 3, already signalled).
        static_assert(!kCpLoad || (kBK == 64 && kCluster == 1), "the cp.async producer: 64-wide k-step, no cluster");
        const int ld_c = tid & 7;
        const int ld_r = tid >> 3;  // 0..15
        const auto swz = static_cast<uint32_t>(ld_r * 128 + ((ld_c ^ (ld_r & 7)) << 4));
        const bf16* a_src[kBM / 16];
        const bf16* b_src[kBN / 16];
        uint32_t row_ok = 0;  // bits 0-7: A rows, 8-23: B rows
        int64_t s = 0;
        for (int i = 0; i < my_units; ++i) {
            bool shared = false;
            const Tile ct = unit_tile(cid + i * n_clusters, shared);
            const bf16* lb = p.b + static_cast<int64_t>(ct.group) * p.n * p.k;
            row_ok = 0;
#pragma unroll
            for (int pass = 0; pass < kBM / 16; ++pass) {
                const int row = ld_r + 16 * pass;
                const bool ok = row < ct.rows;
                a_src[pass] = (ok ? p.a + static_cast<int64_t>(ct.row0 + row) * p.lda : p.a) + 8 * ld_c;
                row_ok |= ok ? 1u << pass : 0u;
            }
#pragma unroll
            for (int pass = 0; pass < kBN / 16; ++pass) {
                const int nrow = ct.n0 + ld_r + 16 * pass;
                const bool ok = nrow < p.n;
                b_src[pass] = (ok ? lb + static_cast<int64_t>(nrow) * p.k : p.b) + 8 * ld_c;
                row_ok |= ok ? 1u << (8 + pass) : 0u;
            }
            for (int kt = 0; kt < KT; ++kt, ++s) {
                const int stage = static_cast<int>(s % kStages);
                const auto use = static_cast<uint32_t>(s / kStages);
                tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStageBytes;
                const uint32_t sb = sa + kABytes;
                const int k0 = kt * kBK;
                const uint32_t ok = k0 + 8 * ld_c < p.k ? row_ok : 0u;
#pragma unroll
                for (int pass = 0; pass < kBM / 16; ++pass) {
                    tile::cp_async_16(sa + swz + pass * 16 * 128, a_src[pass] + k0, (ok >> pass) & 1u);
                }
#pragma unroll
                for (int pass = 0; pass < kBN / 16; ++pass) {
                    tile::cp_async_16(sb + swz + pass * 16 * 128, b_src[pass] + k0, (ok >> (8 + pass)) & 1u);
                }
                tile::cp_async_commit();
                if (s >= 2) {
                    tile::cp_async_wait<2>();
                    wgmma::fence_proxy_async();
                    tma::mbar_arrive(bars + 8 * static_cast<int>((s - 2) % kStages));
                }
            }
        }
        tile::cp_async_wait<0>();
        wgmma::fence_proxy_async();
        for (int64_t d = s >= 2 ? s - 2 : 0; d < s; ++d) tma::mbar_arrive(bars + 8 * static_cast<int>(d % kStages));
    } else if (wg == 0) {
        // ------------------------------------------------------------ producer: TMA
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            tma::prefetch_map(&tm_a);
            tma::prefetch_map(&tm_b);
            int64_t s = 0;
            for (int i = 0; kDyn || i < my_units; ++i) {
                bool shared = false;   // the pair shares the weight tile: each loads one half, multicast
                bool share_a = false;  // kDynPair: the pair shares the activation tile: each loads 64 rows, multicast
                Tile ct{};
                if constexpr (kDynPair) {
                    // Rank 0 takes the next unit once its ring has room (its empty barriers count both CTAs'
                    // consumers) and sends it to rank 1 through message slot i % kStages: a remote store and a
                    // cluster-scope release on the slot's barrier, once per tile. Rank 0 writes slot i again only
                    // after waiting for a stage that rank 1's consumers freed after rank 1 read message i (a tile
                    // has >= 1 k-step and the ring kStages stages), so a slot is never overwritten unread.
                    const int stage = static_cast<int>(s % kStages);
                    const auto use = static_cast<uint32_t>(s / kStages);
                    const int slot = i % kStages;
                    int t = -1;
                    if (rank == 0) {
                        tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                        const int next = tile_sched::next_tile(p.sched);
                        t = next < total ? next : -1;
                        tma::st_remote_u32(smem_u32(msg + slot), 1u, static_cast<uint32_t>(t));
                        tma::mbar_arrive_cluster(msg_bars + 8 * slot, 1u);
                    } else {
                        tma::mbar_wait_cluster(msg_bars + 8 * slot, static_cast<uint32_t>(i / kStages) & 1u);
                        t = *static_cast<volatile int*>(msg + slot);
                        tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                    }
                    stage_tile[stage] = t;  // published by the arrive below (release)
                    if (t < 0) {
                        tma::mbar_arrive(bars + 8 * stage);
                        break;
                    }
                    const tile::PairTile pt = pair_tile(t);
                    ct = pt.tile;
                    share_a = pt.share_a;
                    shared = !share_a;
                } else if constexpr (kDyn) {
                    // The next tile of the order, in the order CTAs become free: the running tiles stay a contiguous
                    // window, so the CTAs that share a weight tile start within a few k-steps of each other.
                    const int t = tile_sched::next_tile(p.sched);
                    const int stage = static_cast<int>(s % kStages);
                    const auto use = static_cast<uint32_t>(s / kStages);
                    tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                    stage_tile[stage] = t < total ? t : -1;  // published by the arrive below (release)
                    if (t >= total) {
                        tma::mbar_arrive(bars + 8 * stage);  // the consumers wake, read -1 and stop
                        break;
                    }
                    ct = tile::decode_group_tile<kBM, kTileN>(t, prefix, offs, G);
                } else {
                    ct = unit_tile(cid + i * n_clusters, shared);
                }
                const bool one_box = p.b_box_rows == kBN;  // the whole box counts, zero fill included
                // a half wholly past n: not loaded (the gated form always loads both: gate and up)
                const int halves = kAct != kActNone || one_box || p.n - ct.n0 > kBN / 2 ? 2 : 1;
                // A dynamic pair's rank 1 with no rows of the unit loads no A (its consumers compute nothing).
                const bool load_a = !kDynPair || ct.rows > 0 || share_a;
                const auto bytes = static_cast<uint32_t>((load_a ? kABytes : 0) + halves * kBHalfBytes);
                // Weight half h's first row: the gate / up rows of the gated form, else the tile's halves.
                auto b_row = [&](int h) { return kAct != kActNone ? h * p.glu_n + ct.n0 : ct.n0 + h * (kBN / 2); };
                for (int kt = 0; kt < KT; ++kt, ++s) {
                    const int stage = static_cast<int>(s % kStages);
                    const auto use = static_cast<uint32_t>(s / kStages);
                    tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                    const uint32_t full = bars + 8 * stage;
                    tma::mbar_expect_tx(full, bytes);
                    const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStageBytes;
                    const uint32_t sb = sa + kABytes;
                    if (share_a) {
                        // Rows [64 rank, 64 rank + 64) of the shared activation tile to both CTAs; own weights.
                        tma::load_2d_multicast(sa + rank * (kABytes / 2), &tm_a64, kt * kBK,
                                               ct.row0 + static_cast<int>(rank) * (kBM / 2), full,
                                               static_cast<uint16_t>((1u << kCluster) - 1u));
                    } else if (load_a) {
                        tma::load_2d(sa, &tm_a, kt * kBK, ct.row0, full);
                    }
                    if (shared) {
                        if (static_cast<int>(rank) < halves) {
                            tma::load_3d_multicast(sb + rank * kBHalfBytes, &tm_b, kt * kBK,
                                                   b_row(static_cast<int>(rank)), ct.group, full,
                                                   static_cast<uint16_t>((1u << kCluster) - 1u));
                        }
                    } else if (one_box) {
                        tma::load_3d(sb, &tm_b, kt * kBK, ct.n0, ct.group, full);
                    } else {
                        for (int h = 0; h < halves; ++h) {
                            tma::load_3d(sb + h * kBHalfBytes, &tm_b, kt * kBK, b_row(h), ct.group, full);
                        }
                    }
                }
            }
            if constexpr (kDynPair) {
                if (rank == 0) tile_sched::finish(p.sched, static_cast<int>(gridDim.x) / kCluster);
            } else if constexpr (kDyn) {
                tile_sched::finish(p.sched, static_cast<int>(gridDim.x));  // the last CTA resets the pair
            }
        }
    } else {
        // ------------------------------------------------------------ consumers
        if constexpr (!kCpLoad) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1;
        const int lane = tid & 31;
        const int wr = (tid >> 5) & 3;
        const int g = lane >> 2;
        const int t = lane & 3;
        const bool signals = (tid & 127) == 0;
        // Frees a stage in every CTA that may write into it.
        auto release = [&](int stage) {
            if (!signals) return;
            const uint32_t bar = bars + 8 * (kStages + stage);
            tma::mbar_arrive(bar);
            // The peer's at CTA scope: a cluster-scope release would fence at every k-step (tma_util.cuh).
            if constexpr (kCluster > 1) tma::mbar_arrive_remote(bar, rank ^ 1u);
        };
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        OutT* out = static_cast<OutT*>(p.out);
        int64_t s = 0;
        for (int i = 0; kDyn || i < my_units; ++i) {
            bool shared = false;
            Tile ct{};
            if constexpr (kDyn) {
                const int stage = static_cast<int>(s % kStages);
                tma::mbar_wait(bars + 8 * stage, static_cast<uint32_t>(s / kStages) & 1u);
                const int t = *static_cast<volatile int*>(stage_tile + stage);
                if (t < 0) break;
                if constexpr (kDynPair) {
                    ct = pair_tile(t).tile;
                } else {
                    ct = tile::decode_group_tile<kBM, kTileN>(t, prefix, offs, G);
                }
            } else {
                ct = unit_tile(cid + i * n_clusters, shared);
            }
            if (64 * cw >= ct.rows) {
                // Every row of this warpgroup's half is past the tile's valid rows (a group's tail tile of <= 64
                // rows, or a cluster's dummy): no products, nothing stored; the stages are only passed on. The other
                // warpgroup then has the tensor cores to itself, so the tile costs about half.
                for (int kt = 0; kt < KT; ++kt, ++s) {
                    const int stage = static_cast<int>(s % kStages);
                    tma::mbar_wait(bars + 8 * stage, static_cast<uint32_t>(s / kStages) & 1u);
                    tma::named_sync(1 + cw, 128);  // the four warps together (tma_util.cuh, "Warps that skip")
                    release(stage);
                }
                continue;
            }
            for (int kt = 0; kt < KT; ++kt, ++s) {
                const int stage = static_cast<int>(s % kStages);
                const auto use = static_cast<uint32_t>(s / kStages);
                tma::mbar_wait(bars + 8 * stage, use & 1u);
                const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStageBytes;
                const uint32_t sb = sa + kABytes;
                wgmma::fence();
#pragma unroll
                for (int ks = 0; ks < kBK / 16; ++ks) {
                    const uint64_t da = make_desc(sa + cw * 64 * kRowBytes + ks * 32);
                    const uint64_t db = make_desc(sb + ks * 32);
                    wgmma::m64n256k16_bf16<0>(acc, da, db, (kt | ks) != 0 ? 1 : 0);
                }
                wgmma::commit();
                wgmma::wait<1>();  // the batch of step s - 1 retired: its stage is free
                if (kt > 0) release(static_cast<int>((s - 1) % kStages));
            }
            wgmma::wait<0>();
            release(static_cast<int>((s - 1) % kStages));
            wgmma::reg_fence(acc);
            // 16-byte stores (bf16 out, 16-byte aligned rows, the tile's columns all inside n): the row's lane quad
            // trades words (tile::quad_transpose) so that each lane stores columns 8 (4 jb + t) .. + 7 of every block
            // of 32 columns at once, instead of a 4-byte store per 8 columns (FP8 GEMM: docs/perf/2026-12-04-s27.md).
            const bool vec = p.out16 != 0 && p.n_out - ct.n0 >= kTileN;
            if constexpr (kAct != kActNone) {
                // Columns 8 j + 2 t (+1) of the accumulator are gate column n0 + 8 j + 2 t for j < 16 and the matching
                // up column for j + 16: each rounded to bf16 (what the unfused GEMM stores), then the activation.
                const auto act = [&](int j, int hf, int e) {
                    const float gv = __bfloat162float(__float2bfloat16_rn(acc[4 * j + 2 * hf + e]));
                    const float uv = __bfloat162float(__float2bfloat16_rn(acc[4 * (j + 16) + 2 * hf + e]));
                    if constexpr (kAct == kActSilu) {
                        return silu_mul_fast(gv, uv);
                    } else {
                        return situ_mul_fast<kDefaultSituMath>(gv, uv, p.situ_beta, p.situ_linear_beta, p.situ_inv_beta,
                                                               p.situ_inv_linear_beta);
                    }
                };
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = 64 * cw + 16 * wr + 8 * hf + g;
                    if (vec) {  // uniform over the warp: every lane takes part in the shuffles
                        tile::store_row_bf16x16<4>(
                            out + static_cast<int64_t>(ct.row0 + (r < ct.rows ? r : 0)) * p.ldo + ct.n0 + 8 * t,
                            r < ct.rows, t, [&](int i) { return tile::pack_bf16x2(act(i, hf, 0), act(i, hf, 1)); });
                    } else if (r < ct.rows) {
                        OutT* orow = out + static_cast<int64_t>(ct.row0 + r) * p.ldo + ct.n0 + 2 * t;
#pragma unroll
                        for (int j = 0; j < 16; ++j) store2<OutT>(orow + 8 * j, act(j, hf, 0), act(j, hf, 1));
                    }
                }
            } else {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = 64 * cw + 16 * wr + 8 * hf + g;
                    if constexpr (std::is_same_v<OutT, bf16>) {
                        if (vec) {
                            tile::store_row_bf16x16<8>(
                                out + static_cast<int64_t>(ct.row0 + (r < ct.rows ? r : 0)) * p.ldo + ct.n0 + 8 * t,
                                r < ct.rows, t,
                                [&](int i) { return tile::pack_bf16x2(acc[4 * i + 2 * hf], acc[4 * i + 2 * hf + 1]); });
                            continue;
                        }
                    }
                    if (r < ct.rows) {
                        OutT* orow = out + static_cast<int64_t>(ct.row0 + r) * p.ldo + ct.n0 + 2 * t;
                        const int lim = p.n - ct.n0 - 2 * t;  // columns 8 i + 2 t (+1) valid while 8 i < lim
#pragma unroll
                        for (int j = 0; j < 32; ++j) {
                            if (8 * j < lim) store2<OutT>(orow + 8 * j, acc[4 * j + 2 * hf], acc[4 * j + 2 * hf + 1]);
                        }
                    }
                }
            }
            wgmma::reg_fence(acc);
        }
    }
    // No CTA leaves while its peer may still arrive on its barriers or multicast into its shared memory.
    if constexpr (kCluster > 1) {
        __syncwarp();
        tma::cluster_sync();
    }
}

// The operand maps: a (box k_step x 128 rows), b (k_step x b_rows x 1), a64 (a with 64-row boxes: the half of an
// activation tile that each CTA of a dynamic pair multicasts).
struct OperandMaps {
    CUtensorMap a, b, a64;
};

struct ClusterInfo {
    int max_pairs = -1;  // co-resident 2-CTA clusters of the kernel at its largest shared memory; -1: not asked yet
};

template <class OutT, int kCluster, int kBK, bool kCpLoad = false, bool kDyn = false, int kAct = kActNone>
void launch(const OperandMaps& m, const TmaArgs& args, int grid, cudaStream_t s) {
    auto kernel = grouped_gemm_tma_kernel<OutT, kCluster, kBK, kCpLoad, kDyn, kAct>;
    const int smem = smem_bytes<kBK>(args.n_groups);
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if constexpr (kCluster == 1) {
        kernel<<<grid, kThreads, smem, s>>>(m.a, m.b, m.a64, args);
    } else {
        const ClusterLaunch cl(grid, kThreads, smem, kCluster, s);
        PENSTOCK_CUDA_CHECK(cudaLaunchKernelEx(&cl.cfg, kernel, m.a, m.b, m.a64, args));
    }
}

// The fused gated form (kTmaDyn's kernel, or kTmaDynCluster's with kCluster 2).
template <int kCluster>
void launch_glu(GluEpilogue act, const OperandMaps& maps, const TmaArgs& args, int grid, cudaStream_t s) {
    switch (act) {
        case GluEpilogue::kSilu:
            launch<bf16, kCluster, 64, false, true, kActSilu>(maps, args, grid, s);
            break;
        case GluEpilogue::kSitu:
            launch<bf16, kCluster, 64, false, true, kActSitu>(maps, args, grid, s);
            break;
    }
}

// How many 2-CTA clusters of the kernel can be resident at once (at the largest shared memory it asks for).
template <class OutT, int kBK>
int max_pairs() {
    static thread_local ClusterInfo cache[16];
    int dev = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    ClusterInfo& c = cache[dev & 15];
    if (c.max_pairs < 0) {
        c.max_pairs = max_active_clusters(reinterpret_cast<const void*>(grouped_gemm_tma_kernel<OutT, 2, kBK, false>),
                                          kThreads, smem_bytes<kBK>(kMaxGroups), 2);
    }
    return c.max_pairs;
}

template <class OutT, int kBK>
void run(const OperandMaps& maps, const TmaArgs& args, int64_t tile_bound, const TmaKernelConfig& cfg, int sms,
         cudaStream_t s) {
    const int pairs = cfg.cluster == 2 ? max_pairs<OutT, kBK>() : 0;
    if constexpr (kBK == 64) {
        if (cfg.cp_async_producer) {
            launch<OutT, 1, 64, true>(maps, args, static_cast<int>(tile_bound < sms ? tile_bound : sms), s);
            return;
        }
        if (cfg.dynamic_tiles && pairs > 0) {
            const int64_t units = (tile_bound + 1) / 2 + args.n_groups;  // pair_units <= (tiles + groups) / 2
            launch<OutT, 2, 64, false, true>(maps, args, 2 * static_cast<int>(units < pairs ? units : pairs), s);
            return;
        }
        if (cfg.dynamic_tiles) {
            launch<OutT, 1, 64, false, true>(maps, args, static_cast<int>(tile_bound < sms ? tile_bound : sms), s);
            return;
        }
    }
    if (pairs > 0) {
        const int64_t want = (tile_bound + 1) / 2;
        launch<OutT, 2, kBK>(maps, args, 2 * static_cast<int>(want < pairs ? want : pairs), s);
    } else {
        launch<OutT, 1, kBK>(maps, args, static_cast<int>(tile_bound < sms ? tile_bound : sms), s);
    }
}

// The tensor maps' L2 promotion: 128 B, the size of one box row. With 256 B (what the FP8 kernel uses) this kernel read
// 75 GB from DRAM at DeepSeek-V3 gate_up T = 16384 (ncu; the cp.async kernel: 36 GB; half the L2 lookups miss there)
// and ran 7-16% slower on DeepSeek-V3; none and 128 B measured the same (docs/perf/2026-12-01-grouped-gemm-ws.md).
// PENSTOCK_GG_TMA_L2PROMO=none|128|256 overrides it (measurement knob).
CUtensorMapL2promotion l2_promotion() {
    static const CUtensorMapL2promotion promo = [] {
        const char* e = std::getenv("PENSTOCK_GG_TMA_L2PROMO");
        if (e != nullptr && std::strcmp(e, "none") == 0) return CU_TENSOR_MAP_L2_PROMOTION_NONE;
        if (e != nullptr && std::strcmp(e, "256") == 0) return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
        return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    }();
    return promo;
}

// The arguments both entry points share: pointers, strides and sizes of p (out's columns: p.out.size(1), which is n,
// or I for the gated form), output tiles of tile_n columns, k-steps of k_step.
TmaArgs base_args(const kernels::GroupedGemmParams& p, int tile_n, int k_step) {
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    const int64_t out_cols = p.out.size(1);
    TmaArgs args{};
    args.out = p.out.data;
    args.offsets = p.offsets.ptr<int32_t>();
    args.a = p.a.ptr<bf16>();
    args.b = p.b.ptr<bf16>();
    args.ldo = n_rows > 1 ? p.out.stride(0) : out_cols;
    args.n_out = static_cast<int>(out_cols);
    args.out16 = p.out.dtype == DType::kBF16 && tile::rows_16b_aligned(p.out.data, args.ldo * 2) ? 1 : 0;
    args.lda = n_rows > 1 ? p.a.stride(0) : k;
    args.k = static_cast<int>(k);
    args.n_rows = static_cast<int>(n_rows);
    args.n = static_cast<int>(n);
    args.n_groups = static_cast<int>(n_groups);
    args.n_tiles_n = static_cast<int>((out_cols + tile_n - 1) / tile_n);
    args.k_steps = static_cast<int>((k + k_step - 1) / k_step);
    return args;
}

// The operand maps of both entry points: a [n_rows, k] (rows lda apart), box k_step x 128 rows; b [n_groups, n, k],
// box k_step x b_rows; 128- (k_step 64) or 64-byte (32) swizzle.
OperandMaps encode_maps(const kernels::GroupedGemmParams& p, int64_t lda, int k_step, int b_rows) {
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n_rows)};
    const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(lda * 2)};
    const cuuint32_t a_box[2] = {static_cast<cuuint32_t>(k_step), static_cast<cuuint32_t>(kBM)};
    const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n),
                                  static_cast<cuuint64_t>(n_groups)};
    const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(k * 2), static_cast<cuuint64_t>(n * k * 2)};
    const cuuint32_t b_box[3] = {static_cast<cuuint32_t>(k_step), static_cast<cuuint32_t>(b_rows), 1u};
    const cuuint32_t a64_box[2] = {static_cast<cuuint32_t>(k_step), static_cast<cuuint32_t>(kBM / 2)};
    const CUtensorMapSwizzle swz = k_step == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    return {
        tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.a.data, 2, a_dims, a_strides, a_box, swz, l2_promotion()),
        tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.b.data, 3, b_dims, b_strides, b_box, swz, l2_promotion()),
        tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.a.data, 2, a_dims, a_strides, a64_box, swz,
                          l2_promotion())};
}

}  // namespace

int grouped_gemm_tma_cluster_ctas() { return 2 * max_pairs<bf16, 64>(); }

// grouped_gemm_device_supported's conditions hold (checked by the caller); TMA adds nothing they do not imply
// (16-byte aligned bases, row strides that are multiples of 8 elements, dims < 2^31).
void grouped_gemm_tma(const kernels::GroupedGemmParams& p, const TmaKernelConfig& cfg, int sms, void* stream) {
    const int k_step = cfg.k_step;
    const int64_t n_groups = p.b.size(0), n = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    if (n_rows == 0) return;
    PENSTOCK_CHECK_LE(n_groups, kMaxGroups) << "grouped_gemm_tma: groups";
    PENSTOCK_CHECK(k_step == 64 || k_step == 32) << "grouped_gemm_tma: k-step " << k_step;
    PENSTOCK_CHECK(cfg.cluster == 1 || cfg.cluster == 2) << "grouped_gemm_tma: cluster " << cfg.cluster;
    PENSTOCK_CHECK(!cfg.cp_async_producer || (k_step == 64 && cfg.cluster == 1))
        << "grouped_gemm_tma: cp.async producer";
    PENSTOCK_CHECK(cfg.cluster == 1 || k_step == 64) << "grouped_gemm_tma: clusters take the 64-wide k-step";
    PENSTOCK_CHECK(!cfg.dynamic_tiles || (k_step == 64 && !cfg.cp_async_producer)) << "grouped_gemm_tma: dynamic tiles";
    TmaArgs args = base_args(p, kBN, k_step);
    // PENSTOCK_GG_TMA_BBOX=256 (measurement knob; cluster 1 only): the weight tile as one 256-row box per k-step.
    static const bool env_one_box = [] {
        const char* e = std::getenv("PENSTOCK_GG_TMA_BBOX");
        return e != nullptr && std::strcmp(e, "256") == 0;
    }();
    args.b_box_rows = env_one_box && cfg.cluster == 1 && !cfg.cp_async_producer ? kBN : kBN / 2;
    const OperandMaps maps = encode_maps(p, args.lda, k_step, args.b_box_rows);
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * args.n_tiles_n;
    const auto s = static_cast<cudaStream_t>(stream);
    args.sched = cfg.dynamic_tiles ? dynamic_tile_counter(s) : nullptr;
    const bool f32 = p.out.dtype == DType::kF32;
    if (k_step == 64) {
        if (f32) {
            run<float, 64>(maps, args, tile_bound, cfg, sms, s);
        } else {
            run<bf16, 64>(maps, args, tile_bound, cfg, sms, s);
        }
    } else {
        if (f32) {
            run<float, 32>(maps, args, tile_bound, cfg, sms, s);
        } else {
            run<bf16, 32>(maps, args, tile_bound, cfg, sms, s);
        }
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void grouped_gemm_glu_tma(const kernels::GroupedGemmParams& p, GluEpilogue act, float situ_beta, float situ_linear_beta,
                          int sms, void* stream, bool pairs) {
    const int64_t n_groups = p.b.size(0), n2 = p.b.size(1), k = p.b.size(2), n_rows = p.a.size(0);
    const int64_t inter = n2 / 2;
    PENSTOCK_CHECK(n2 % 2 == 0 && inter % (kBN / 2) == 0 && p.out.size(1) == inter)
        << "grouped_gemm_glu_tma: b rows " << n2 << " (2 x a multiple of 128), out " << p.out.shape_string();
    PENSTOCK_CHECK(p.out.dtype == DType::kBF16) << "grouped_gemm_glu_tma: bf16 out";
    PENSTOCK_CHECK_LE(n_groups, kMaxGroups) << "grouped_gemm_glu_tma: groups";
    if (n_rows == 0) return;
    TmaArgs args = base_args(p, kBN / 2, 64);
    args.b_box_rows = kBN / 2;
    args.glu_n = static_cast<int>(inter);
    args.situ_beta = situ_beta;
    args.situ_linear_beta = situ_linear_beta;
    args.situ_inv_beta = 1.0f / situ_beta;  // as situ_mul computes them
    args.situ_inv_linear_beta = 1.0f / situ_linear_beta;
    const OperandMaps maps = encode_maps(p, args.lda, 64, kBN / 2);
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * args.n_tiles_n;
    const auto s = static_cast<cudaStream_t>(stream);
    args.sched = dynamic_tile_counter(s);
    const int n_pairs = pairs ? max_pairs<bf16, 64>() : 0;
    if (n_pairs > 0) {
        const int64_t units = (tile_bound + 1) / 2 + n_groups;  // pair_units <= (tiles + groups) / 2
        launch_glu<2>(act, maps, args, 2 * static_cast<int>(units < n_pairs ? units : n_pairs), s);
    } else {
        launch_glu<1>(act, maps, args, static_cast<int>(tile_bound < sms ? tile_bound : sms), s);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
