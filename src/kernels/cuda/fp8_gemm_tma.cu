// The warp-specialised FP8 block-scaled GEMM kernel (contract kernels/cuda/fp8_gemm.h, variant kWgmmaTma). sm_90a.
//
// Same tiling, tile scheduler, promotion and epilogue as the cp.async kernel (fp8_gemm_common.cuh), but the two
// consumer warpgroups no longer meet at a CTA barrier every k-step: 384 threads = a producer warpgroup (one thread
// issues the loads; setmaxnreg 40) and two consumer warpgroups (rows [0, 64) and [64, 128) of the tile; setmaxnreg
// 232). Operands arrive by TMA (cp.async.bulk.tensor, 128-byte swizzle: the layout the wgmma descriptors read) into a
// 6-stage ring of 32 KiB stages; stage i has a "full" mbarrier (the producer's expect_tx of 32 KiB, completed by
// the two bulk copies) and an "empty" one (one arrive per consumer warpgroup once its wgmma on the stage retired).
// A consumer waits for "full", issues 4 wgmma.m64n128k32.e4m3 into its block registers, waits for them, releases the
// stage and promotes the block into its f32 accumulators (acc += block * a_scale[row, kb] * b_scale[n0 / 128, kb]; in
// the 256-wide kernels the next k-step's scales are loaded while this one's chains run, by pointers that step along the
// k blocks), so one warpgroup's promotion overlaps the other's tensor-core work and the loads run up to 6 k-steps
// ahead, across tiles. With 128-wide tiles a consumer takes two k-steps at a time into two block
// register sets and promotes the first while the second chain runs (the same sums in the same order). The descriptors
// of a chain's 4 wgmma are one base plus constants. TMA's out-of-bounds zero fill covers rows past n_rows, k past the
// end and rows past n (b is a 3-d [G, n, k] map); rows of the next group that land in a tile are computed and not
// stored. Tiles are handed out in the scheduler's order by a global counter (tile_sched.h; the bf16 kTmaDyn's scheme):
// the producer takes the next tile when its ring has room and passes its id to the consumers through a per-stage slot,
// so the CTAs that share a weight tile stay together (DeepSeek-V3 experts at T = 16384 on the H200: gate_up 10.9 ->
// 9.7 ms, down 6.5 -> 6.2 ms in the layer). A consumer warpgroup whose 64 rows are all past the tile's valid rows skips
// its products. The epilogues store 16 bytes per lane (bf16 out: store_tile; the gated FP8 out: store_glu_tile), the
// row's lane quad trading words first (tile_util.cuh quad_transpose): the consumers' stores do not overlap the
// tensor cores, and with 4- and 2-byte stores they were 18% of the DeepSeek-V3 down GEMM at T = 16384
// (docs/perf/2026-12-04-s27.md).
//
// Scales through shared memory (kScaleSmem, the 256-wide kernels: plain, CTA pairs, gated): where the activation scales
// are in fp8_act_quant's transposed layout (a [kb, m] buffer: as_row 1, as_col a multiple of 4, 16-byte aligned) and
// the call has at most kMaxGroupsScaleSmem groups, the producer brings each k-step's scales with its stage: the tile's
// 128 activation scales by TMA (a kActScaleBox x 1 f32 box from row0 rounded down to 4, fp8_gemm_common.cuh; rows
// past n_rows zero-filled, never stored) and the two halves'
// weight scales by 4-byte cp.async, whose completion is the full barrier's second arrival
// (cp.async.mbarrier.arrive.noinc). The consumers then read them from shared memory once the stage is full, where
// loads from global memory one k-step ahead made them wait (docs/perf/2026-12-07-s59.md). kWgmmaTmaN192 does the
// same (fp8_gemm_n192.cu). Other layouts keep the loads.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/glu_act.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_sched.cuh"
#include "kernels/cuda/tile_sched.h"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

using namespace fp8;  // NOLINT(google-build-using-namespace): the kernels' shared tiling

constexpr int kThreads = 384;
constexpr int kScanBytes = 32 * 4;  // build_tile_prefix's scratch, outside the bulk copies' bytes
// fp8_pair_default(), PENSTOCK_FP8_PAIR unset: kAuto and the gated GEMM take the CTA-pair kernel above this many rows
// per group on average. Measured in interleaved layer A/Bs: at 512 rows per expert (T = 16384) the FP8 DeepSeek-V3
// and GLM-5.3 layers ran 0.1-0.6 ms faster with the pairs (docs/perf/2026-12-02-s18.md, call E), and at 292 (Kimi K3
// at T = 16384) its FP8 MLA layer 0.4 ms faster on average over 5 rounds (4 of them faster); at 128 (T = 4096) the
// pair kernel alone ran 0.85-0.94x the single-CTA one, and the DeepSeek-V3 FP8 layer 0.05-0.1 ms slower with it
// (docs/perf/2026-12-02-s19.md).
constexpr int64_t kFp8PairMinAvgRows = 256;

// The pipeline of a CTA tile 128 x BN (BN = 128: six 32 KiB stages; BN = 256: four 48 KiB stages), with the scale
// slots of kScaleSmem (per stage: a kActScaleSlot-byte slot of activation scales, then the halves' weight scales in a
// 16-byte slot).
constexpr int kMaxGroupsScaleSmem = 3840;
template <int BN, bool kScaleSmem = false>
struct Pipe {
    static constexpr int kHalves = BN / 128;  // 128-column halves: one weight-scale block and one wgmma chain each
    static constexpr int kStageBytes = kABytes + BN * kBK;
    static constexpr int kStages = BN == 128 ? 6 : 4;
    static constexpr int kPipeBytes = kStages * kStageBytes;  // 192 KiB
    static constexpr int kAScaleSlot = kActScaleSlot;
    static constexpr int kScaleBytes = kScaleSmem ? kStages * (kAScaleSlot + 16) : 0;
    static constexpr int kBarBytes = 3 * kStages * 8;  // full, empty; the pairs' unit barriers
    static constexpr int kSlotBytes = 8 * kStages;  // the tile id whose first k-step is in stage i; the pairs' mailbox
    static constexpr int kFixedBytes = kPipeBytes + kScaleBytes + 1024 + kBarBytes + kScanBytes + kSlotBytes;
    static constexpr int kGroupsMax = kScaleSmem ? kMaxGroupsScaleSmem : kMaxGroups;
    static int smem_bytes(int n_groups) { return kFixedBytes + 8 * (n_groups + 1); }
    static int smem_bound() { return kFixedBytes + 8 * (kGroupsMax + 1); }
    static_assert(BN == 128 || BN == 256, "tile widths");
    static_assert(!kScaleSmem || BN == 256, "scales through shared memory: the 256-wide kernels");
    static_assert(kFixedBytes + 8 * (kGroupsMax + 1) <= 227 * 1024, "shared memory");
};

using tma::load_2d;
using tma::load_3d;
using tma::mbar_arrive;
using tma::mbar_expect_tx;
using tma::mbar_init;
using tma::mbar_wait;
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

// The fused gated epilogue (kAct != kActNone, fp8_grouped_gemm_glu): b is [n_groups, 2 I, k] with the gate rows
// first (p.n = 2 I), tile j of a group's n-tiles has the gate rows [128 j, +128) as its first B half and the up rows
// [I + 128 j, +128) as its second, and writes the output columns [128 j, +128): one 1 x 128 quantisation block.
constexpr int kActNone = 0;
constexpr int kActSilu = 1;
constexpr int kActSitu = 2;
struct GluArgs {
    uint8_t* out;      // [n_rows, I] e4m3
    float* out_scale;  // [n_rows, I / 128]
    int64_t ldo, os_row, os_col;
    int inter;  // I
    int out16;  // out and ldo 16-byte aligned: the epilogue's 16-byte stores
    float situ_beta, situ_linear_beta, situ_inv_beta, situ_inv_linear_beta;
};

// The B rows of half h of a tile (the gate / up blocks in the gated form, else consecutive 128-row blocks).
template <int BN, int kAct>
__device__ __forceinline__ int b_row(const Tile& ct, int h, const GluArgs& glu) {
    if constexpr (kAct != kActNone) {
        return h * glu.inter + (ct.n0 / BN) * 128;
    } else {
        return ct.n0 + 128 * h;
    }
}

// The gated epilogue of one thread's fragment: gate = acc[0], up = acc[1] (the same columns 8 i + 2 t (+1) of rows
// r_lo, r_lo + 8), each rounded to bf16 as the GEMM would store it, then act in f32 rounded to bf16 (silu_mul /
// situ_mul), then fp8_act_quant's block of 128 columns: amax over the row (the quad's four lanes hold it), s =
// max(amax, 1e-4) / 448, e4m3(v / s) (NaN: 0x7f). The quotients come from one reciprocal per row (fp8.cuh
// div_by_recip: the same e4m3 bytes as the division) so that the 64 elements of a thread run without a branch or
// call between them, and the cast from the hardware (e4m3x2_in_range: the same bytes in range). Zeroes acc.
template <int kAct>
__device__ __forceinline__ void store_glu_tile(const GluArgs& glu, const Tile& ct, int tile_j, int r_lo, int t,
                                               float (&acc)[2][64]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float v[32];
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float gv = __bfloat162float(__float2bfloat16_rn(acc[0][4 * i + 2 * hf + e]));
                const float uv = __bfloat162float(__float2bfloat16_rn(acc[1][4 * i + 2 * hf + e]));
                float o;
                if constexpr (kAct == kActSilu) {
                    o = silu_mul_fast(gv, uv);
                } else {
                    o = situ_mul_fast<kDefaultSituMath>(gv, uv, glu.situ_beta, glu.situ_linear_beta, glu.situ_inv_beta,
                                                        glu.situ_inv_linear_beta);
                }
                o = __bfloat162float(__float2bfloat16_rn(o));
                v[2 * i + e] = o;
                amax = fmaxf(amax, fabsf(o));
            }
        }
        // The quad (lanes 4 q .. 4 q + 3) holds the row's 128 columns; every lane takes part in the shuffles.
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        amax = fmaxf(amax, 1e-4f);
        const float sc = __fdiv_rn(amax, 448.0f);
        const float rc = __frcp_rn(sc);
        if (rc != 0.0f) {
#pragma unroll
            for (int k = 0; k < 32; ++k) v[k] = div_by_recip(v[k], sc, rc);
        } else {  // amax infinite: the division itself (inf / inf is NaN, finite / inf is +-0)
#pragma unroll
            for (int k = 0; k < 32; ++k) v[k] = __fdiv_rn(v[k], sc);
        }
        const int r = r_lo + 8 * hf;
        if (glu.out16 != 0) {  // uniform over the kernel: every lane takes part in the quad's shuffles
            // |v / s| <= 448.0001: the hardware cast gives the software cast's bytes (fp8.cuh e4m3x2_in_range).
            // Word b of this lane: columns 16 b + 2 t (+1) (low half) and 16 b + 8 + 2 t (+1) (high half). The quad
            // trades them (quad_transpose) so that lane t holds every lane's word of blocks t and t + 4, and stores
            // each block's 16 bytes (columns 16 b .. 16 b + 15) at once.
            const int64_t row = ct.row0 + (r < ct.rows ? r : 0);
            uint8_t* orow = glu.out + row * glu.ldo + tile_j * 128;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                uint32_t w[4];  // words 4 half .. 4 half + 3
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int b = 4 * half + q;
                    w[q] =
                        e4m3x2_in_range(v[4 * b], v[4 * b + 1]) | (e4m3x2_in_range(v[4 * b + 2], v[4 * b + 3]) << 16);
                }
                const uint4 x = tile::quad_transpose(w, t);  // x.q: lane q's word of block 4 half + t
                const uint4 o{__byte_perm(x.x, x.y, 0x5410), __byte_perm(x.z, x.w, 0x5410),
                              __byte_perm(x.x, x.y, 0x7632), __byte_perm(x.z, x.w, 0x7632)};
                if (r < ct.rows) *reinterpret_cast<uint4*>(orow + 16 * (4 * half + t)) = o;
            }
            if (r < ct.rows && t == 0) {
                glu.out_scale[static_cast<int64_t>(ct.row0 + r) * glu.os_row +
                              static_cast<int64_t>(tile_j) * glu.os_col] = sc;
            }
        } else if (r < ct.rows) {
            const int64_t row = ct.row0 + r;
            uint8_t* orow = glu.out + row * glu.ldo + tile_j * 128 + 2 * t;
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                *reinterpret_cast<uint16_t*>(orow + 8 * i) =
                    static_cast<uint16_t>(e4m3x2_in_range(v[2 * i], v[2 * i + 1]));
            }
            if (t == 0) glu.out_scale[row * glu.os_row + static_cast<int64_t>(tile_j) * glu.os_col] = sc;
        }
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        acc[0][i] = 0.0f;
        acc[1][i] = 0.0f;
    }
}

template <class OutT, int BN, int kAct = kActNone, int kCluster = 1, bool kScaleSmem = false>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_tma_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                        const __grid_constant__ CUtensorMap tm_a64, const __grid_constant__ CUtensorMap tm_as, Args p,
                        int* sched, GluArgs glu) {
    static_assert(kAct == kActNone || BN == 256, "the gated epilogue needs the gate and up halves of a 256 tile");
    static_assert(kCluster == 1 || (kCluster == 2 && BN == 256),
                  "a CTA pair shares the two halves of a 256-row B tile");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    using P = Pipe<BN, kScaleSmem>;
    constexpr int kStages = P::kStages;
    constexpr int kStage = P::kStageBytes;
    constexpr int kPipeBytes = P::kPipeBytes;
    constexpr int kBarBytes = P::kBarBytes;
    constexpr int kASlot = P::kAScaleSlot;
    // kScaleSmem: the activation-scale slots [kStages][128], then the weight-scale slots [kStages][4]
    const uint32_t scl_base = sbase + kPipeBytes;
    const uint32_t wsc_base = scl_base + kStages * kASlot;
    const float* scl = reinterpret_cast<const float*>(smem + kPipeBytes);
    const float* wsc = scl + kStages * (kASlot / 4);
    const uint32_t bars = sbase + kPipeBytes + P::kScaleBytes;  // full[0, kStages), empty[0, kStages), unit[0, kStages)
    const uint32_t unit_bars = bars + 16 * kStages;
    const int G = p.n_groups;
    int* scan = reinterpret_cast<int*>(smem + kPipeBytes + P::kScaleBytes + kBarBytes);
    int* stage_tile = scan + 32;       // tile id of the tile whose first k-step is in stage i (-1: no more tiles)
    int* mail = stage_tile + kStages;  // pairs: rank 0's unit id for the unit whose first k-step is in stage i
    int* prefix = mail + kStages;
    int* offs = prefix + (G + 1);
    const int tid = static_cast<int>(threadIdx.x);
    const uint32_t rank = kCluster > 1 ? tma::cluster_rank() : 0u;
    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(bars + 8 * i, kScaleSmem ? 2 : 1);        // full: the producer's expect_tx (and cp.async)
            mbar_init(bars + 8 * (kStages + i), 2 * kCluster);  // empty: each consumer warpgroup of the cluster
            // pairs, rank 1: rank 0's arrive once the id of a unit whose first k-step is in stage i is in mail[i]
            // (one phase per such unit: the stage's next unit waits for its release, so never two pending)
            mbar_init(unit_bars + 8 * i, 1);
        }
        tma::fence_mbar_init();
    }
    // Ends with a barrier, which also publishes the barrier inits. A pair's unit is two tiles that share the weight
    // tile (rank r takes m-tile 2j + r; each loads one B half, multicast) or, for a group's odd last m-tile, the
    // activation tile (rank r takes n-tile 2i + r; each loads 64 of its rows, multicast): tile_util.cuh pair_units.
    const int total = tile::build_group_tile_prefix<kBM, (kCluster > 1)>(p.offsets, p.n_rows, p.n_groups, p.n_tiles_n,
                                                                         prefix, offs, scan);
    if constexpr (kCluster > 1) tma::cluster_sync();  // the peer's barriers exist before any remote arrive or multicast
    auto my_tile = [&](int u) {
        if constexpr (kCluster > 1) {
            return tile::decode_pair_unit<kBM, BN>(u, static_cast<int>(rank), prefix, offs, G, p.n_tiles_n);
        } else {
            return tile::PairTile{tile::decode_group_tile<kBM, BN>(u, prefix, offs, G), false};
        }
    };
    // A consumer warpgroup frees a stage in every CTA of the cluster (the peer's at CTA scope: a cluster-scope release
    // per k-step cost 35%, docs/perf/2026-12-02-s17.md).
    auto release = [&](int stage) {
        mbar_arrive(bars + 8 * (kStages + stage));
        if constexpr (kCluster > 1) tma::mbar_arrive_remote(bars + 8 * (kStages + stage), rank ^ 1u);
    };
    const int grid = static_cast<int>(gridDim.x);
    const int KT = p.k_steps;
    // Broadcast from lane 0, ptxas knows the warpgroup index is warp-uniform and keeps the consumers' shared-memory
    // addresses and wgmma descriptors in uniform registers. That made the fused gated GEMM 0.1-0.15 ms faster in the
    // DeepSeek-V3 and GLM-5.3 FP8 layers at T = 16384, but the plain CTA-pair kernel spilled and its down GEMM ran
    // 0.15 ms slower (docs/perf/2026-12-04-s28.md, call E): that one keeps the plain index.
    constexpr bool kUniformWg = kAct != kActNone || kCluster == 1;
    const int wg = kUniformWg ? __shfl_sync(0xffffffffu, tid >> 7, 0) : tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int64_t s = 0;
            uint32_t unit_phase = 0;  // rank 1: bit i, the phase of unit barrier i
            for (;;) {
                // The next tile of the order (tile_sched.h), its id to the consumers through the stage slot,
                // published by the stage's "full" arrive (release). A pair: rank 0 takes it and hands it to rank 1
                // through rank 1's mailbox slot and unit barrier.
                const int first = static_cast<int>(s % kStages);  // the stage of the tile's first k-step
                mbar_wait(bars + 8 * (kStages + first), (static_cast<uint32_t>(s / kStages) & 1u) ^ 1u);
                int t = 0;
                if (kCluster == 1 || rank == 0) {
                    t = tile_sched::next_tile(sched);
                    if constexpr (kCluster > 1) {
                        tma::st_remote_u32(smem_u32(mail + first), 1u, static_cast<uint32_t>(t));
                        tma::mbar_arrive_cluster(unit_bars + 8 * first, 1u);
                    }
                } else {
                    tma::mbar_wait_cluster(unit_bars + 8 * first, (unit_phase >> first) & 1u);
                    unit_phase ^= 1u << first;
                    t = *static_cast<volatile int*>(mail + first);
                }
                stage_tile[first] = t < total ? t : -1;
                if (t >= total) {
                    mbar_arrive(bars + 8 * first);  // the consumers wake, read -1 and stop
                    if constexpr (kScaleSmem) mbar_arrive(bars + 8 * first);
                    break;
                }
                const tile::PairTile pt = my_tile(t);
                const Tile& ct = pt.tile;
                // A pair's rank without rows loads no A; every CTA of a pair receives both B halves.
                const bool has_a = kCluster == 1 || ct.rows > 0 || pt.share_a;
                const float* pw[P::kHalves];  // kScaleSmem: the halves' weight-scale rows, as the consumers' below
                if constexpr (kScaleSmem) {
                    const float* sb_group = p.b_scale + static_cast<int64_t>(ct.group) * p.bs_gstride;
#pragma unroll
                    for (int h = 0; h < P::kHalves; ++h) {
                        const int brow = b_row<BN, kAct>(ct, h, glu);
                        pw[h] =
                            sb_group +
                            static_cast<int64_t>((brow < p.n ? brow : b_row<BN, kAct>(ct, 0, glu)) / 128) * p.bs_row;
                    }
                }
                for (int kt = 0; kt < KT; ++kt, ++s) {
                    const int stage = static_cast<int>(s % kStages);
                    const auto use = static_cast<uint32_t>(s / kStages);
                    mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                    const uint32_t full = bars + 8 * stage;
                    mbar_expect_tx(full, has_a ? kStage + (kScaleSmem ? kActScaleBox * 4 : 0) : kStage - kABytes);
                    const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStage;
                    if (kCluster > 1 && pt.share_a) {
                        // rows [64 rank, 64 rank + 64) of the shared activation tile into both CTAs
                        tma::load_2d_multicast(sa + rank * (kABytes / 2), &tm_a64, kt * kBK,
                                               ct.row0 + 64 * static_cast<int>(rank), full, 0x3);
                    } else if (has_a) {
                        load_2d(sa, &tm_a, kt * kBK, ct.row0, full);
                    }
                    if (kCluster == 1 || pt.share_a) {
#pragma unroll
                        for (int h = 0; h < P::kHalves; ++h) {
                            load_3d(sa + kABytes + h * 128 * kBK, &tm_b, kt * kBK, b_row<BN, kAct>(ct, h, glu),
                                    ct.group, full);
                        }
                    } else {
                        const int h = static_cast<int>(rank);  // this CTA's half, into both CTAs
                        tma::load_3d_multicast(sa + kABytes + h * 128 * kBK, &tm_b, kt * kBK,
                                               b_row<BN, kAct>(ct, h, glu), ct.group, full, 0x3);
                    }
                    if constexpr (kScaleSmem) {
                        if (has_a) {
                            load_2d(scl_base + static_cast<uint32_t>(stage) * kASlot, &tm_as, act_scale_x0(ct.row0), kt,
                                    full);
                        }
#pragma unroll
                        for (int h = 0; h < P::kHalves; ++h) {
                            tile::cp_async_4(wsc_base + static_cast<uint32_t>(stage) * 16 + 4 * h, pw[h] + kt, true);
                        }
                        cp_async_mbar_arrive_noinc(full);  // the second arrival, once they have landed
                    }
                }
            }
            // kScaleSmem: this thread leaves only once its last cp.async arrival has landed (the last filled stage's
            // phase completes on it), not with weight-scale copies still in flight.
            if constexpr (kScaleSmem) {
                if (s > 0) {
                    const int64_t last = s - 1;
                    mbar_wait(bars + 8 * static_cast<int>(last % kStages), static_cast<uint32_t>(last / kStages) & 1u);
                }
            }
            // The last taker resets the counter pair for the next launch.
            if (kCluster == 1 || rank == 0) tile_sched::finish(sched, grid / kCluster);
        }
    } else {
        // ------------------------------------------------------------ consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1;
        const int lane = tid & 31;
        const int wr = (tid >> 5) & 3;
        const int t = lane & 3;
        const int r_lo = 64 * cw + 16 * wr + (lane >> 2);  // this thread's two tile rows: r_lo and r_lo + 8
        constexpr int kHalves = P::kHalves;
        float acc[kHalves][64];
        float blk[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) {
#pragma unroll
            for (int h = 0; h < kHalves; ++h) acc[h][i] = 0.0f;
            blk[i] = 0.0f;
        }
        // The ring position of the next k-step: its stage and that stage's phase (32-bit counters instead of a 64-bit
        // k-step count divided by kStages on every k-step).
        struct RingPos {
            int stage;
            uint32_t phase;
        };
        int ring = 0;
        uint32_t ring_phase = 0;
        auto next_stage = [&] {
            const RingPos pos{ring, ring_phase};
            if (++ring == kStages) {
                ring = 0;
                ring_phase ^= 1u;
            }
            return pos;
        };
        for (;;) {
            const int first = ring;  // the stage of the tile's first k-step
            mbar_wait(bars + 8 * first, ring_phase);
            const int tile_id = *static_cast<volatile int*>(stage_tile + first);
            if (tile_id < 0) break;
            const Tile ct = my_tile(tile_id).tile;
            if (64 * cw >= ct.rows) {
                // Every row of this warpgroup's half is past the tile's valid rows (a group tail of <= 64 rows): no
                // products, nothing stored; the stages are only passed on, and the other warpgroup has the tensor
                // cores to itself.
                for (int kt = 0; kt < KT; ++kt) {
                    const auto [stage, phase] = next_stage();
                    mbar_wait(bars + 8 * stage, phase);
                    // The warpgroup's four warps pass each stage together before its one thread frees it
                    // (tma_util.cuh, "Warps that skip").
                    tma::named_sync(1 + cw, 128);
                    if ((tid & 127) == 0) release(stage);
                }
                continue;
            }
            const TileScales sc = tile_scales(p, ct, r_lo);
            // The weight-scale row of each 128-row B half (a half wholly past n reads the first half's: its columns
            // are never stored).
            const float* sb_row[kHalves];
            const float* sb_group = p.b_scale + static_cast<int64_t>(ct.group) * p.bs_gstride;
#pragma unroll
            for (int h = 0; h < kHalves; ++h) {
                const int brow = b_row<BN, kAct>(ct, h, glu);
                sb_row[h] =
                    sb_group + static_cast<int64_t>((brow < p.n ? brow : b_row<BN, kAct>(ct, 0, glu)) / 128) * p.bs_row;
            }
            // One wgmma chain: the 4 wgmma of the 128-byte k-step in the stage at `sa` into b, A = this warpgroup's 64
            // rows, B = the 128-row half h, committed as one group. k-step ks of the 128-byte rows is 32 bytes on: +2
            // in the descriptors' address field (the stage is 1024-byte aligned, so the field does not carry).
            auto issue_chain = [&](float(&b)[64], uint32_t sa, int h) {
                wgmma::reg_fence(b);
                wgmma::fence();
                const uint64_t da = make_desc(sa + cw * 64 * 128), db = make_desc(sa + kABytes + h * 128 * kBK);
#pragma unroll
                for (int ks = 0; ks < kBK / 32; ++ks) {
                    wgmma::m64n128k32_e4m3(b, da + 2 * ks, db + 2 * ks, ks != 0 ? 1 : 0);
                }
                wgmma::commit();
            };
            int kt0 = 0;  // the k-steps the pipelined promotion below has taken
            if constexpr (kHalves == 1) {
                // 128-wide tiles: two k-steps per iteration, their chains into two block register sets, so that
                // the first block's promotion runs while the second chain is on the tensor cores (wait_group 1).
                // The pipe drains at the end of each iteration: a wait_group whose other group was issued in the
                // previous iteration makes ptxas serialise every wgmma (C7514; docs/perf/2026-12-04-s27.md). With
                // the other warpgroup's chains this is the wgmma probe's "pipe" pattern (1636 TFLOP/s against 1287
                // for wait-then-promote, session 27).
                float blk1[64];
                const float* sbr = sb_row[0];
                for (; kt0 + 1 < KT; kt0 += 2) {
                    const auto [st0, ph0] = next_stage();
                    const auto [st1, ph1] = next_stage();
                    const float sb0 = __ldg(sbr + kt0), sb1 = __ldg(sbr + kt0 + 1);
                    const float lo0 = __ldg(sc.a_lo + kt0 * p.as_col), hi0 = __ldg(sc.a_hi + kt0 * p.as_col);
                    const float lo1 = __ldg(sc.a_lo + (kt0 + 1) * p.as_col);
                    const float hi1 = __ldg(sc.a_hi + (kt0 + 1) * p.as_col);
                    mbar_wait(bars + 8 * st0, ph0);
                    const uint32_t sa0 = sbase + static_cast<uint32_t>(st0) * kStage;
                    issue_chain(blk, sa0, 0);
                    mbar_wait(bars + 8 * st1, ph1);
                    const uint32_t sa1 = sbase + static_cast<uint32_t>(st1) * kStage;
                    issue_chain(blk1, sa1, 0);
                    wgmma::wait<1>();
                    wgmma::reg_fence(blk);
                    if ((tid & 127) == 0) release(st0);
                    promote(acc[0], blk, lo0 * sb0, hi0 * sb0);
                    wgmma::wait<0>();
                    wgmma::reg_fence(blk1);
                    if ((tid & 127) == 0) release(st1);
                    promote(acc[0], blk1, lo1 * sb1, hi1 * sb1);
                }
            }
            // The scales of k-step kt + 1 are loaded while k-step kt's chains run (one k-step ahead, by pointers
            // that step along the k blocks): the promotion's scale products then wait on no global load, and the
            // loop top has no 64-bit index products. The last k-step re-reads its own scales (no load past them).
            const float* ps_lo = sc.a_lo + kt0 * p.as_col;
            const float* ps_hi = sc.a_hi + kt0 * p.as_col;
            const float* ps_b[kHalves];
            float nb[kHalves];
#pragma unroll
            for (int h = 0; h < kHalves; ++h) {
                ps_b[h] = sb_row[h] + kt0;
                nb[h] = !kScaleSmem && kt0 < KT ? __ldg(ps_b[h]) : 0.0f;
            }
            float n_lo = !kScaleSmem && kt0 < KT ? __ldg(ps_lo) : 0.0f;
            float n_hi = !kScaleSmem && kt0 < KT ? __ldg(ps_hi) : 0.0f;
            for (int kt = kt0; kt < KT; ++kt) {
                const auto [stage, phase] = next_stage();
                float s_lo[kHalves], s_hi[kHalves];
#pragma unroll
                for (int h = 0; h < kHalves; ++h) {
                    s_lo[h] = n_lo * nb[h];
                    s_hi[h] = n_hi * nb[h];
                }
                if constexpr (!kScaleSmem) {
                    const bool more = kt + 1 < KT;
                    ps_lo += more ? p.as_col : 0;
                    ps_hi += more ? p.as_col : 0;
                    n_lo = __ldg(ps_lo);
                    n_hi = __ldg(ps_hi);
#pragma unroll
                    for (int h = 0; h < kHalves; ++h) {
                        ps_b[h] += more ? 1 : 0;
                        nb[h] = __ldg(ps_b[h]);
                    }
                }
                mbar_wait(bars + 8 * stage, phase);
                if constexpr (kScaleSmem) {
                    const float* sr = scl + stage * (kASlot / 4) + (ct.row0 & 3) + r_lo;
                    const float a_lo = sr[0], a_hi = sr[8];
#pragma unroll
                    for (int h = 0; h < kHalves; ++h) {
                        const float w = wsc[stage * 4 + h];
                        s_lo[h] = a_lo * w;
                        s_hi[h] = a_hi * w;
                    }
                }
                const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStage;
                // One wgmma chain per 128-column half into the same block registers, each promoted before the
                // next is issued (two halves' blocks and accumulators would not fit in the registers); the
                // other warpgroup's chains keep the tensor cores busy meanwhile.
#pragma unroll
                for (int h = 0; h < kHalves; ++h) {
                    issue_chain(blk, sa, h);
                    wgmma::wait<0>();
                    wgmma::reg_fence(blk);
                    // this warpgroup is done with the stage
                    if (h == kHalves - 1 && (tid & 127) == 0) release(stage);
                    promote(acc[h], blk, s_lo[h], s_hi[h]);
                }
            }
            if constexpr (kAct != kActNone) {
                store_glu_tile<kAct>(glu, ct, ct.n0 / BN, r_lo, t, acc);
            } else {
#pragma unroll
                for (int h = 0; h < kHalves; ++h) {
                    Tile half = ct;
                    half.n0 += 128 * h;
                    store_tile<OutT>(p, half, r_lo, t, acc[h]);
                }
            }
        }
    }
    // No CTA of a pair leaves while its peer may still arrive on its barriers or multicast into its shared memory.
    if constexpr (kCluster > 1) {
        __syncwarp();
        tma::cluster_sync();
    }
}

// A rank-`rank` uint8 tensor map over `base`: dims (innermost first), byte strides of dims 1.., box 128 x box_rows
// (x 1).
CUtensorMap encode(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   uint32_t box_rows = 128) {
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(kBK), box_rows, 1u};
    return tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, base, rank, dims, strides, box);
}

// The tensor maps, arguments and grid of a call in the kernels' grouped form with n_tiles_n n-tiles per group.
struct Prepared {
    CUtensorMap tm_a, tm_b, tm_a64, tm_as;  // tm_as: the activation scales (kScaleSmem kernels; else unused)
    Args args;
    int grid;
    bool scale_smem;  // the call may take a kScaleSmem kernel (256-wide)
};

// How many 2-CTA clusters of `kernel` fit on the device at once (persistent pairs), per device and kernel.
template <class Kernel>
int max_pairs(Kernel kernel, int smem) {
    static thread_local std::map<std::pair<int, const void*>, int> cache;
    int dev = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    const auto key = std::make_pair(dev, reinterpret_cast<const void*>(kernel));
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    // 0: no pair fits (the callers then run the single-CTA wide kernel)
    const int n = max_active_clusters(reinterpret_cast<const void*>(kernel), kThreads, smem, 2);
    cache.emplace(key, n);
    return n;
}

Prepared prepare(const kernels::Fp8GroupedGemmParams& p, int n_tiles_n, int cluster_pairs = 0) {
    Prepared r{};
    r.args = make_args(p);
    Args& args = r.args;
    args.n_tiles_n = n_tiles_n;
    const int64_t n_groups = p.b.size(0), n_rows = p.a.size(0);
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(args.k), static_cast<cuuint64_t>(args.n_rows)};
    const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(args.lda)};
    const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(args.k), static_cast<cuuint64_t>(args.n),
                                  static_cast<cuuint64_t>(args.n_groups)};
    const int64_t b_gstride = n_groups > 1 ? args.b_gstride : args.ldb * args.n;
    const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(args.ldb), static_cast<cuuint64_t>(b_gstride)};
    r.tm_a = encode(args.a, 2, a_dims, a_strides);
    r.tm_a64 = encode(args.a, 2, a_dims, a_strides, 64);  // the half activation tile a pair multicasts
    r.tm_b = encode(args.b, 3, b_dims, b_strides);        // 128-row boxes: one per B half
    r.scale_smem = scale_smem_ok(args) && args.n_groups <= kMaxGroupsScaleSmem;
    if (r.scale_smem) r.tm_as = act_scale_map(args);
    // cluster_pairs > 0: CTA pairs on pair units (at most (tiles + groups) / 2), at most that many pairs resident.
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * n_tiles_n;
    const int64_t unit_bound = cluster_pairs > 0 ? (tile_bound + 1) / 2 + n_groups : tile_bound;
    if (cluster_pairs > 0) {
        r.grid = 2 * static_cast<int>(unit_bound < cluster_pairs ? unit_bound : cluster_pairs);
    } else {
        r.grid = static_cast<int>(unit_bound < device_sms() ? unit_bound : device_sms());
    }
    return r;
}

template <class Kernel>
void launch(Kernel kernel, const Prepared& pr, int smem, const GluArgs& glu, cudaStream_t s, int cluster = 1) {
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (cluster == 1) {
        kernel<<<pr.grid, kThreads, smem, s>>>(pr.tm_a, pr.tm_b, pr.tm_a64, pr.tm_as, pr.args, dynamic_tile_counter(s),
                                               glu);
    } else {
        const ClusterLaunch cl(pr.grid, kThreads, smem, cluster, s);
        PENSTOCK_CUDA_CHECK(cudaLaunchKernelEx(&cl.cfg, kernel, pr.tm_a, pr.tm_b, pr.tm_a64, pr.tm_as, pr.args,
                                               dynamic_tile_counter(s), glu));
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

// fp8_wgmma_supported's conditions hold (checked by the caller); TMA adds nothing they do not imply (16-byte aligned
// bases and row strides, dims < 2^31).
void fp8_wgmma_tma(const kernels::Fp8GroupedGemmParams& p, int tile_n, void* stream) {
    if (p.a.size(0) == 0) return;
    const int64_t n = p.b.size(1);
    const Prepared pr = prepare(p, static_cast<int>((n + tile_n - 1) / tile_n));
    const auto s = static_cast<cudaStream_t>(stream);
    const bool f32 = p.out.dtype == DType::kF32;
    const GluArgs none{};
    if (tile_n == 256 && pr.scale_smem) {
        const int smem = Pipe<256, true>::smem_bytes(pr.args.n_groups);
        f32 ? launch(fp8_gemm_tma_kernel<float, 256, kActNone, 1, true>, pr, smem, none, s)
            : launch(fp8_gemm_tma_kernel<bf16, 256, kActNone, 1, true>, pr, smem, none, s);
    } else if (tile_n == 256) {
        const int smem = Pipe<256>::smem_bytes(pr.args.n_groups);
        f32 ? launch(fp8_gemm_tma_kernel<float, 256>, pr, smem, none, s)
            : launch(fp8_gemm_tma_kernel<bf16, 256>, pr, smem, none, s);
    } else {
        const int smem = Pipe<128>::smem_bytes(pr.args.n_groups);
        f32 ? launch(fp8_gemm_tma_kernel<float, 128>, pr, smem, none, s)
            : launch(fp8_gemm_tma_kernel<bf16, 128>, pr, smem, none, s);
    }
}

void fp8_wgmma_tma_pair(const kernels::Fp8GroupedGemmParams& p, void* stream) {
    if (p.a.size(0) == 0) return;
    const int64_t n = p.b.size(1);
    const auto s = static_cast<cudaStream_t>(stream);
    const GluArgs none{};
    const Prepared probe = prepare(p, static_cast<int>((n + 255) / 256));
    auto run = [&](auto kernel, auto pipe) {
        using P = decltype(pipe);
        const int pairs = max_pairs(kernel, P::smem_bound());
        if (pairs == 0) {
            fp8_wgmma_tma(p, 256, stream);
            return;
        }
        const Prepared pr = prepare(p, static_cast<int>((n + 255) / 256), pairs);
        launch(kernel, pr, P::smem_bytes(pr.args.n_groups), none, s, 2);
    };
    const bool f32 = p.out.dtype == DType::kF32;
    if (probe.scale_smem) {
        f32 ? run(fp8_gemm_tma_kernel<float, 256, kActNone, 2, true>, Pipe<256, true>{})
            : run(fp8_gemm_tma_kernel<bf16, 256, kActNone, 2, true>, Pipe<256, true>{});
    } else {
        f32 ? run(fp8_gemm_tma_kernel<float, 256, kActNone, 2>, Pipe<256>{})
            : run(fp8_gemm_tma_kernel<bf16, 256, kActNone, 2>, Pipe<256>{});
    }
}

bool fp8_pair_default(int64_t n_rows, int64_t n_groups, bool gated) {
    // -1: the row rule; 0 / 1: never / always; 2 ("glu"): the row rule for the gated GEMM only, so that the plain
    // calls (the down GEMM) run the wide single-CTA kernel (docs/perf/2026-12-04-s27.md: 0.2-0.35 ms faster alone)
    static const int forced = [] {
        const char* e = std::getenv("PENSTOCK_FP8_PAIR");
        if (e == nullptr) return -1;
        if (std::strcmp(e, "glu") == 0) return 2;
        return std::strcmp(e, "0") != 0 ? 1 : 0;
    }();
    const bool rows_rule = n_rows > kFp8PairMinAvgRows * n_groups;
    if (forced == 2) return gated && rows_rule;
    return forced >= 0 ? forced == 1 : rows_rule;
}

void fp8_wgmma_tma_glu(const kernels::Fp8GroupedGluGemmParams& p, void* stream) {
    fp8_wgmma_tma_glu(p, fp8_pair_default(p.a.size(0), p.b.size(0), /*gated=*/true), stream);
}

void fp8_wgmma_tma_glu(const kernels::Fp8GroupedGluGemmParams& p, bool pair, void* stream) {
    const int64_t n_rows = p.a.size(0), inter = p.out.size(1);
    if (n_rows == 0) return;
    // The gate_up problem as the GEMM sees it; its out is not written (the epilogue writes p.out / p.out_scale).
    const kernels::Fp8GroupedGemmParams gp{
        .out = p.gate_up, .a = p.a, .a_scale = p.a_scale, .b = p.b, .b_scale = p.b_scale, .offsets = p.offsets};
    GluArgs glu{};
    glu.out = p.out.ptr<uint8_t>();
    glu.out_scale = p.out_scale.ptr<float>();
    glu.ldo = n_rows > 1 ? p.out.stride(0) : inter;
    glu.out16 = tile::rows_16b_aligned(glu.out, glu.ldo) ? 1 : 0;  // e4m3: ldo in bytes
    glu.os_row = p.out_scale.stride(0);
    glu.os_col = p.out_scale.stride(1);
    glu.inter = static_cast<int>(inter);
    glu.situ_beta = p.situ_beta;
    glu.situ_linear_beta = p.situ_linear_beta;
    glu.situ_inv_beta = 1.0f / p.situ_beta;  // as situ_mul computes them
    glu.situ_inv_linear_beta = 1.0f / p.situ_linear_beta;
    const auto s = static_cast<cudaStream_t>(stream);
    const Prepared probe = prepare(gp, static_cast<int>(inter / 128));
    auto run = [&](auto kernel, auto pipe, int cluster) {
        using P = decltype(pipe);
        const int pairs = cluster == 2 ? max_pairs(kernel, P::smem_bound()) : 0;
        const Prepared pr = prepare(gp, static_cast<int>(inter / 128), pairs);
        launch(kernel, pr, P::smem_bytes(pr.args.n_groups), glu, s, cluster);
    };
    const bool silu = p.act == kernels::GluKind::kSilu;
    // No pair fits on this device: the single-CTA kernel (the same bytes).
    if (pair &&
        (probe.scale_smem ? max_pairs(fp8_gemm_tma_kernel<bf16, 256, kActSilu, 2, true>, Pipe<256, true>::smem_bound())
                          : max_pairs(fp8_gemm_tma_kernel<bf16, 256, kActSilu, 2>, Pipe<256>::smem_bound())) == 0) {
        pair = false;
    }
    if (probe.scale_smem) {
        using P = Pipe<256, true>;
        if (pair) {
            silu ? run(fp8_gemm_tma_kernel<bf16, 256, kActSilu, 2, true>, P{}, 2)
                 : run(fp8_gemm_tma_kernel<bf16, 256, kActSitu, 2, true>, P{}, 2);
        } else {
            silu ? run(fp8_gemm_tma_kernel<bf16, 256, kActSilu, 1, true>, P{}, 1)
                 : run(fp8_gemm_tma_kernel<bf16, 256, kActSitu, 1, true>, P{}, 1);
        }
    } else if (pair) {
        silu ? run(fp8_gemm_tma_kernel<bf16, 256, kActSilu, 2>, Pipe<256>{}, 2)
             : run(fp8_gemm_tma_kernel<bf16, 256, kActSitu, 2>, Pipe<256>{}, 2);
    } else {
        silu ? run(fp8_gemm_tma_kernel<bf16, 256, kActSilu>, Pipe<256>{}, 1)
             : run(fp8_gemm_tma_kernel<bf16, 256, kActSitu>, Pipe<256>{}, 1);
    }
}

}  // namespace penstock::cuda
