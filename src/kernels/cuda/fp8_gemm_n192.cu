// The 128 x 192 FP8 block-scaled grouped GEMM with a TMA-store epilogue (contract kernels/cuda/fp8_gemm.h, variant
// kWgmmaTmaN192; bf16 out). sm_90a.
//
// The shape of DeepGEMM's SM90 FP8 kernel, which ran the DeepSeek-V3 down GEMM 1.22x faster than kWgmmaTmaWide in the
// same process (docs/perf/2026-12-07-s57.md): per k-step each consumer warpgroup issues ONE wgmma chain (4 x
// m64n192k32 into 96 block registers), waits for it, frees the stage and promotes the block (96 + 96 registers, where
// the 256-wide tile needs two chains per k-step and 128 + 64); the four 40 KiB stages (A 128 x 128, B 192 x 128 bytes)
// leave room for a dedicated 48 KiB output tile, so a warpgroup hands its finished 64 x 192 rows to TMA stores through
// shared memory (tma::store_wg_tile_bf16) and starts the next tile's products while they drain, instead of storing
// from the registers with the tensor cores idle (10-14% of the down GEMM, docs/perf/2026-12-06-s52.md).
//
// Everything else is kWgmmaTma's (fp8_gemm_tma.cu): 384 threads = a producer warpgroup (one thread issues the TMA
// loads; setmaxnreg 40) and two consumer warpgroups (rows [0, 64) and [64, 128) of the tile; setmaxnreg 232) on
// full / empty mbarriers; tiles from the global counter in the scheduler's order (group-major, n-tile, m-tile); the
// tile id through a per-stage slot; rows past n_rows, k past the end and weight rows past n zero-filled by TMA; a
// warpgroup whose 64 rows are all past the tile's valid rows passes the stages on. The weight scales: the 192 columns
// of tile j span the 128-row scale blocks b0 = floor(192 j / 128) and b0 + 1, split at column 128 (j even) or 64
// (j odd); the promotion scales fragment columns [0, 64) by block b0, [128, 192) by b0 + 1 and [64, 128) by the one
// the split gives (acc += block * a_scale[row, kb] * b_scale[block, kb], fmaf, k order: the same per-element sums as
// the other variants, so the outputs are bit-identical to them). A warpgroup whose 64 rows are not all in the tile's
// group (a group tail: a TMA store would overwrite the next group's rows), or any warpgroup when out rows are not
// 16-byte aligned, stores from the registers instead.
//
// The scales (kScaleSmem): where the activation scales are in the transposed layout that fp8_act_quant writes (a [kb,
// m] buffer: as_row 1, as_col a multiple of 4, 16-byte aligned; fp8_gemm_common.cuh scale_smem_ok), the producer brings
// each k-step's scales with its stage: the tile's 128 activation scales by TMA (a kActScaleBox x 1 f32 box from row0
// rounded down to 4, so that it starts 16 bytes aligned, into a kActScaleSlot-byte slot; row r of the tile at float
// (row0 & 3) + r; rows past n_rows zero-filled, never stored) and the two weight scales by 4-byte cp.async, whose
// completion is the full barrier's second arrival (cp.async.mbarrier.arrive.noinc). The consumers read them from shared
// memory once the stage is full. Loaded from global memory one k-step ahead instead (any other layout), the activation
// scales arrived late: 23% of the consumers' stall samples sat on them (docs/perf/2026-12-07-s58.md, call C).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_sched.cuh"
#include "kernels/cuda/tile_sched.h"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

using namespace fp8;  // NOLINT(google-build-using-namespace): the kernels' shared tiling

constexpr int kThreads = 384;
constexpr int kTileN = 192;
constexpr int kBoxes = kTileN / 64;                     // 64-column TMA store boxes per warpgroup
constexpr int kStageBytes192 = kABytes + kTileN * kBK;  // 40 KiB
constexpr int kStages = 4;
constexpr int kPipeBytes = kStages * kStageBytes192;  // 160 KiB
constexpr int kStoreBytes = 2 * 64 * kTileN * 2;      // two warpgroups' 64 x 192 bf16 staging tiles: 48 KiB
constexpr int kScaleSlot = kActScaleSlot;             // one k-step's activation scales (fp8_gemm_common.cuh)
constexpr int kScaleBytes = kStages * kScaleSlot;     // 2.5 KiB
constexpr int kWScaleBytes = kStages * 16;            // one k-step's two weight scales per stage (16-byte slots)
constexpr int kBarBytes = 2 * kStages * 8;            // full, empty
constexpr int kScanBytes = 32 * 4;
constexpr int kSlotBytes = 4 * kStages;  // the tile id whose first k-step is in stage i
constexpr int kFixedBytes =
    kPipeBytes + kStoreBytes + kScaleBytes + kWScaleBytes + 1024 + kBarBytes + kScanBytes + kSlotBytes;
constexpr int kGroupsMax = 1936;  // the per-group prefix and offsets fill the rest of the 227 KiB
int smem_bytes(int n_groups) { return kFixedBytes + 8 * (n_groups + 1); }
static_assert(kStageBytes192 % 1024 == 0, "stages stay 1024-byte aligned (the 128-byte swizzle's atom)");
static_assert(kFixedBytes + 8 * (kGroupsMax + 1) <= 227 * 1024, "shared memory");

using tma::mbar_arrive;
using tma::mbar_expect_tx;
using tma::mbar_init;
using tma::mbar_wait;
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

// acc += blk * scale for the m64n192 fragment (blk[4 i + {0, 1}]: row r_lo, columns 8 i + 2 t + {0, 1}; {2, 3}: row
// r_lo + 8): columns [0, 64) by (lo0, hi0), [64, 128) by (lo_m, hi_m), [128, 192) by (lo1, hi1).
__device__ __forceinline__ void promote192(float (&acc)[96], const float (&blk)[96], float lo0, float hi0, float lo_m,
                                           float hi_m, float lo1, float hi1) {
#pragma unroll
    for (int i = 0; i < 24; ++i) {
        const float lo = i < 8 ? lo0 : (i < 16 ? lo_m : lo1);
        const float hi = i < 8 ? hi0 : (i < 16 ? hi_m : hi1);
        acc[4 * i + 0] = fmaf(blk[4 * i + 0], lo, acc[4 * i + 0]);
        acc[4 * i + 1] = fmaf(blk[4 * i + 1], lo, acc[4 * i + 1]);
        acc[4 * i + 2] = fmaf(blk[4 * i + 2], hi, acc[4 * i + 2]);
        acc[4 * i + 3] = fmaf(blk[4 * i + 3], hi, acc[4 * i + 3]);
    }
}

template <bool kScaleSmem>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_n192_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                         const __grid_constant__ CUtensorMap tm_out, const __grid_constant__ CUtensorMap tm_as, Args p,
                         int* sched, int tma_store) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    const uint32_t stg_base = sbase + kPipeBytes;      // the staging tiles, 1024-byte aligned
    const uint32_t scl_base = stg_base + kStoreBytes;  // the activation-scale slots (kScaleSmem)
    const uint32_t wsc_base = scl_base + kScaleBytes;  // the weight-scale slots (kScaleSmem)
    const uint32_t bars = wsc_base + kWScaleBytes;     // full[0, kStages), empty[0, kStages)
    const int G = p.n_groups;
    const float* scl = reinterpret_cast<const float*>(smem + kPipeBytes + kStoreBytes);
    const float* wsc = scl + kScaleBytes / 4;
    int* scan = reinterpret_cast<int*>(smem + kPipeBytes + kStoreBytes + kScaleBytes + kWScaleBytes + kBarBytes);
    int* stage_tile = scan + 32;  // tile id of the tile whose first k-step is in stage i (-1: no more tiles)
    int* prefix = stage_tile + kStages;
    int* offs = prefix + (G + 1);
    const int tid = static_cast<int>(threadIdx.x);
    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(bars + 8 * i, kScaleSmem ? 2 : 1);  // full: the producer's expect_tx (and its cp.async)
            mbar_init(bars + 8 * (kStages + i), 2);       // empty: each consumer warpgroup
        }
        tma::fence_mbar_init();
    }
    // Ends with a barrier, which also publishes the barrier inits.
    const int total = tile::build_group_tile_prefix<kBM>(p.offsets, p.n_rows, G, p.n_tiles_n, prefix, offs, scan);
    const int KT = p.k_steps;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    if (wg == 0) {
        // ------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int ring = 0;
            uint32_t ring_phase = 0;
            bool filled = false;  // kScaleSmem: the stage and phase this thread filled last
            int last_ring = 0;
            uint32_t last_phase = 0;
            for (;;) {
                const int first = ring;
                mbar_wait(bars + 8 * (kStages + first), ring_phase ^ 1u);
                const int t = tile_sched::next_tile(sched);
                stage_tile[first] = t < total ? t : -1;
                if (t >= total) {
                    mbar_arrive(bars + 8 * first);  // the consumers wake, read -1 and stop
                    if constexpr (kScaleSmem) mbar_arrive(bars + 8 * first);
                    break;
                }
                const Tile ct = tile::decode_group_tile<kBM, kTileN>(t, prefix, offs, G);
                const float* pw0 = nullptr;
                const float* pw1 = nullptr;
                if constexpr (kScaleSmem) {
                    const int b0 = ct.n0 / 128;  // as the consumers' (below)
                    const int b1 = (b0 + 1) * 128 < p.n ? b0 + 1 : b0;
                    const float* sb_group = p.b_scale + static_cast<int64_t>(ct.group) * p.bs_gstride;
                    pw0 = sb_group + static_cast<int64_t>(b0) * p.bs_row;
                    pw1 = sb_group + static_cast<int64_t>(b1) * p.bs_row;
                }
                for (int kt = 0; kt < KT; ++kt) {
                    if (kt != 0) mbar_wait(bars + 8 * (kStages + ring), ring_phase ^ 1u);
                    const uint32_t full = bars + 8 * ring;
                    mbar_expect_tx(full, kStageBytes192 + (kScaleSmem ? kActScaleBox * 4 : 0));
                    const uint32_t sa = sbase + static_cast<uint32_t>(ring) * kStageBytes192;
                    tma::load_2d(sa, &tm_a, kt * kBK, ct.row0, full);
                    tma::load_3d(sa + kABytes, &tm_b, kt * kBK, ct.n0, ct.group, full);
                    if constexpr (kScaleSmem) {
                        tma::load_2d(scl_base + static_cast<uint32_t>(ring) * kScaleSlot, &tm_as,
                                     act_scale_x0(ct.row0), kt, full);
                        const uint32_t ws = wsc_base + static_cast<uint32_t>(ring) * 16;
                        tile::cp_async_4(ws, pw0 + kt, true);
                        tile::cp_async_4(ws + 4, pw1 + kt, true);
                        cp_async_mbar_arrive_noinc(full);  // the second arrival, once both have landed
                        filled = true;
                        last_ring = ring;
                        last_phase = ring_phase;
                    }
                    if (++ring == kStages) {
                        ring = 0;
                        ring_phase ^= 1u;
                    }
                }
            }
            // kScaleSmem: this thread leaves only once its last cp.async arrival has landed (the last filled stage's
            // phase completes on it), not with weight-scale copies still in flight.
            if constexpr (kScaleSmem) {
                if (filled) mbar_wait(bars + 8 * last_ring, last_phase);
            }
            tile_sched::finish(sched, static_cast<int>(gridDim.x));
        }
    } else {
        // ------------------------------------------------------------ consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1;
        const int lane = tid & 31;
        const int wr = (tid >> 5) & 3;
        const int t = lane & 3;
        const int r_lo = 64 * cw + 16 * wr + (lane >> 2);  // this thread's two tile rows: r_lo and r_lo + 8
        const uint32_t stg = stg_base + static_cast<uint32_t>(cw) * (kStoreBytes / 2);
        float acc[96];
        float blk[96];
#pragma unroll
        for (int i = 0; i < 96; ++i) {
            acc[i] = 0.0f;
            blk[i] = 0.0f;
        }
        int ring = 0;
        uint32_t ring_phase = 0;
        bool stored_by_tma = false;  // this warpgroup's thread 0 has bulk groups to wait for at the end
        for (;;) {
            mbar_wait(bars + 8 * ring, ring_phase);
            const int tile_id = *static_cast<volatile int*>(stage_tile + ring);
            if (tile_id < 0) break;
            const Tile ct = tile::decode_group_tile<kBM, kTileN>(tile_id, prefix, offs, G);
            if (64 * cw >= ct.rows) {
                // Every row of this warpgroup's half is past the tile's valid rows: the stages are only passed on
                // (tma_util.cuh, "Warps that skip").
                for (int kt = 0; kt < KT; ++kt) {
                    mbar_wait(bars + 8 * ring, ring_phase);
                    tma::named_sync(1 + cw, 128);
                    if ((tid & 127) == 0) mbar_arrive(bars + 8 * (kStages + ring));
                    if (++ring == kStages) {
                        ring = 0;
                        ring_phase ^= 1u;
                    }
                }
                continue;
            }
            const TileScales sc = tile_scales(p, ct, r_lo);
            // The two weight-scale blocks of the tile's columns (a block wholly past n reads the first one's: its
            // columns are never stored) and where the middle 64 columns take theirs from.
            const int b0 = ct.n0 / 128;
            const int b1 = (b0 + 1) * 128 < p.n ? b0 + 1 : b0;
            const bool mid_second = (ct.n0 & 127) != 0;  // split at column 64: columns [64, 128) in block b0 + 1
            const float* sb_group = p.b_scale + static_cast<int64_t>(ct.group) * p.bs_gstride;
            const float* ps_b0 = sb_group + static_cast<int64_t>(b0) * p.bs_row;
            const float* ps_b1 = sb_group + static_cast<int64_t>(b1) * p.bs_row;
            const float* ps_lo = sc.a_lo;
            const float* ps_hi = sc.a_hi;
            // The global scales of k-step kt + 1 are loaded while k-step kt's chain runs.
            float n_lo = 0.0f, n_hi = 0.0f;
            if constexpr (!kScaleSmem) {
                n_lo = __ldg(ps_lo);
                n_hi = __ldg(ps_hi);
            }
            float n_b0 = 0.0f, n_b1 = 0.0f;
            if constexpr (!kScaleSmem) {
                n_b0 = __ldg(ps_b0);
                n_b1 = __ldg(ps_b1);
            }
            for (int kt = 0; kt < KT; ++kt) {
                float a_lo = n_lo, a_hi = n_hi;
                float w_b0 = n_b0, w_b1 = n_b1;
                {
                    const bool more = kt + 1 < KT;
                    if constexpr (!kScaleSmem) {
                        ps_lo += more ? p.as_col : 0;
                        ps_hi += more ? p.as_col : 0;
                        n_lo = __ldg(ps_lo);
                        n_hi = __ldg(ps_hi);
                        ps_b0 += more ? 1 : 0;
                        ps_b1 += more ? 1 : 0;
                        n_b0 = __ldg(ps_b0);
                        n_b1 = __ldg(ps_b1);
                    }
                }
                mbar_wait(bars + 8 * ring, ring_phase);
                if constexpr (kScaleSmem) {
                    const float* sr = scl + ring * (kScaleSlot / 4) + (ct.row0 & 3) + r_lo;
                    a_lo = sr[0];
                    a_hi = sr[8];
                    w_b0 = wsc[ring * 4];
                    w_b1 = wsc[ring * 4 + 1];
                }
                const uint32_t sa = sbase + static_cast<uint32_t>(ring) * kStageBytes192;
                wgmma::reg_fence(blk);
                wgmma::fence();
                const uint64_t da = make_desc(sa + cw * 64 * 128), db = make_desc(sa + kABytes);
#pragma unroll
                for (int ks = 0; ks < kBK / 32; ++ks) {
                    wgmma::m64n192k32_e4m3(blk, da + 2 * ks, db + 2 * ks, ks != 0 ? 1 : 0);
                }
                wgmma::commit();
                const float s_lo0 = a_lo * w_b0, s_hi0 = a_hi * w_b0;
                const float s_lo1 = a_lo * w_b1, s_hi1 = a_hi * w_b1;
                wgmma::wait<0>();
                wgmma::reg_fence(blk);
                if ((tid & 127) == 0) mbar_arrive(bars + 8 * (kStages + ring));  // this warpgroup is done with it
                if (++ring == kStages) {
                    ring = 0;
                    ring_phase ^= 1u;
                }
                promote192(acc, blk, s_lo0, s_hi0, mid_second ? s_lo1 : s_lo0, mid_second ? s_hi1 : s_hi0, s_lo1,
                           s_hi1);
            }
            if (tma_store != 0 && 64 * cw + 64 <= ct.rows) {
                tma::store_wg_tile_bf16<kBoxes>(
                    &tm_out, stg, ct.n0, ct.row0 + 64 * cw, p.n, cw, wr, lane,
                    [&](int i, int hf) { return tile::pack_bf16x2(acc[4 * i + 2 * hf], acc[4 * i + 2 * hf + 1]); });
                stored_by_tma = true;
            } else {
                // A group tail (or rows TMA may not write): bf16x2 stores of the valid rows and columns.
                store_frag_pairs<__nv_bfloat16, 24>(p, ct, r_lo, t, acc);
            }
#pragma unroll
            for (int i = 0; i < 96; ++i) acc[i] = 0.0f;
        }
        // The staging tile's last TMA stores complete before the CTA's shared memory goes.
        if (stored_by_tma && (tid & 127) == 0) tma::bulk_wait();
    }
}

}  // namespace

bool fp8_wgmma_tma_n192(const kernels::Fp8GroupedGemmParams& p, void* stream) {
    if (p.out.dtype != DType::kBF16 || p.b.size(0) > kGroupsMax) return false;
    if (p.a.size(0) == 0) return true;
    Args args = make_args(p);
    const int64_t n_groups = p.b.size(0), n_rows = p.a.size(0);
    args.n_tiles_n = static_cast<int>((args.n + kTileN - 1) / kTileN);
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(args.k), static_cast<cuuint64_t>(args.n_rows)};
    const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(args.lda)};
    const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(args.k), static_cast<cuuint64_t>(args.n),
                                  static_cast<cuuint64_t>(args.n_groups)};
    const int64_t b_gstride = n_groups > 1 ? args.b_gstride : args.ldb * args.n;
    const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(args.ldb), static_cast<cuuint64_t>(b_gstride)};
    const cuuint32_t a_box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(kBM)};
    const cuuint32_t b_box[3] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(kTileN), 1u};
    const CUtensorMap tm_a = tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, args.a, 2, a_dims, a_strides, a_box);
    const CUtensorMap tm_b = tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, args.b, 3, b_dims, b_strides, b_box);
    // TMA stores need 16-byte aligned out rows (args.out16); else every tile stores from the registers, as with
    // PENSTOCK_FP8_N192_STORE=0 (read once per process: an A/B knob that isolates the epilogue's share).
    static const bool reg_store = [] {
        const char* e = std::getenv("PENSTOCK_FP8_N192_STORE");
        return e != nullptr && std::strcmp(e, "0") == 0;
    }();
    const int tma_store = reg_store ? 0 : args.out16;
    CUtensorMap tm_out{};
    if (tma_store != 0) tm_out = tma::encode_bf16_store_map(args.out, args.n_rows, args.n, args.ldo);
    // The scales through shared memory where the layout allows (fp8_gemm_common.cuh scale_smem_ok).
    const bool scale_smem = scale_smem_ok(args);
    const CUtensorMap tm_as = scale_smem ? act_scale_map(args) : CUtensorMap{};
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * args.n_tiles_n;
    const int grid = static_cast<int>(tile_bound < device_sms() ? tile_bound : device_sms());
    const int smem = smem_bytes(args.n_groups);
    const auto s = static_cast<cudaStream_t>(stream);
    const auto kernel = scale_smem ? fp8_gemm_n192_kernel<true> : fp8_gemm_n192_kernel<false>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<grid, kThreads, smem, s>>>(tm_a, tm_b, tm_out, tm_as, args, dynamic_tile_counter(s), tma_store);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    return true;
}

}  // namespace penstock::cuda
