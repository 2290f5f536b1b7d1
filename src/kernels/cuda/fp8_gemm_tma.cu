// The warp-specialised FP8 block-scaled GEMM kernel (contract kernels/cuda/fp8_gemm.h, variant kWgmmaTma). sm_90a.
//
// Same tiling, tile scheduler, promotion and epilogue as the cp.async kernel (fp8_gemm_common.cuh), but the two
// consumer warpgroups no longer meet at a CTA barrier every k-step: 384 threads = a producer warpgroup (one thread
// issues the loads; setmaxnreg 40) and two consumer warpgroups (rows [0, 64) and [64, 128) of the tile; setmaxnreg
// 232). Operands arrive by TMA (cp.async.bulk.tensor, 128-byte swizzle: the layout the wgmma descriptors read) into a
// 6-stage ring of 32 KiB stages; stage i has a "full" mbarrier (the producer's expect_tx of 32 KiB, completed by
// the two bulk copies) and an "empty" one (one arrive per consumer warpgroup once its wgmma on the stage retired).
// A consumer waits for "full", issues 4 wgmma.m64n128k32.e4m3 into its block registers, waits for them, releases the
// stage and promotes the block into its f32 accumulators (acc += block * a_scale[row, kb] * b_scale[n0 / 128, kb],
// scales loaded before the wait), so one warpgroup's promotion overlaps the other's tensor-core work and the loads run
// up to 6 k-steps ahead, across tiles. TMA's out-of-bounds zero fill covers rows past n_rows, k past the end and
// rows past n (b is a 3-d [G, n, k] map); rows of the next group that land in a tile are computed and not stored.
// Tiles are handed out in the scheduler's order by a global counter (tile_sched.h; the bf16 kTmaDyn's scheme): the
// producer takes the next tile when its ring has room and passes its id to the consumers through a per-stage slot,
// so the CTAs that share a weight tile stay together (DeepSeek-V3 experts at T = 16384 on the H200: gate_up 10.9 ->
// 9.7 ms, down 6.5 -> 6.2 ms in the layer). A consumer warpgroup whose 64 rows are all past the tile's valid rows skips
// its products.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_sched.cuh"
#include "kernels/cuda/tile_sched.h"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

using namespace fp8;  // NOLINT(google-build-using-namespace): the kernels' shared tiling

constexpr int kStages = 6;
constexpr int kThreads = 384;
constexpr int kPipeBytes = kStages * kStageBytes;  // 192 KiB
constexpr int kBarBytes = 2 * kStages * 8;

constexpr int kScanBytes = 32 * 4;  // build_tile_prefix's scratch, outside the bulk copies' bytes

constexpr int kSlotBytes = 4 * kStages;  // the tile id whose first k-step is in stage i

int smem_bytes(int n_groups) { return kPipeBytes + 1024 + kBarBytes + kScanBytes + kSlotBytes + 8 * (n_groups + 1); }
static_assert(kPipeBytes + 1024 + kBarBytes + kScanBytes + kSlotBytes + 8 * (kMaxGroups + 1) <= 227 * 1024,
              "shared memory");

using tma::load_2d;
using tma::load_3d;
using tma::mbar_arrive;
using tma::mbar_expect_tx;
using tma::mbar_init;
using tma::mbar_wait;
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

template <class OutT>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_tma_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b, Args p,
                        int* sched) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    const uint32_t bars = sbase + kPipeBytes;  // full[0, kStages), then empty[0, kStages)
    const int G = p.n_groups;
    int* scan = reinterpret_cast<int*>(smem + kPipeBytes + kBarBytes);
    int* stage_tile = scan + 32;  // tile id of the tile whose first k-step is in stage i (-1: no more tiles)
    int* prefix = stage_tile + kStages;
    int* offs = prefix + (G + 1);
    const int tid = static_cast<int>(threadIdx.x);
    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(bars + 8 * i, 1);              // full: the producer's expect_tx
            mbar_init(bars + 8 * (kStages + i), 2);  // empty: one arrive per consumer warpgroup
        }
        tma::fence_mbar_init();
    }
    // Ends with a barrier, which also publishes the barrier inits.
    const int total = build_tile_prefix(p, prefix, offs, scan);
    const int grid = static_cast<int>(gridDim.x);
    const int KT = p.k_steps;
    const int wg = tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int64_t s = 0;
            for (;;) {
                // The next tile of the order (tile_sched.h), its id to the consumers through the stage slot,
                // published by the stage's "full" arrive (release).
                const int t = tile_sched::next_tile(sched);
                const int first = static_cast<int>(s % kStages);  // the stage of the tile's first k-step
                mbar_wait(bars + 8 * (kStages + first), (static_cast<uint32_t>(s / kStages) & 1u) ^ 1u);
                stage_tile[first] = t < total ? t : -1;
                if (t >= total) {
                    mbar_arrive(bars + 8 * first);  // the consumers wake, read -1 and stop
                    break;
                }
                const Tile ct = decode(t, prefix, offs, G);
                for (int kt = 0; kt < KT; ++kt, ++s) {
                    const int stage = static_cast<int>(s % kStages);
                    const auto use = static_cast<uint32_t>(s / kStages);
                    mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                    const uint32_t full = bars + 8 * stage;
                    mbar_expect_tx(full, kStageBytes);
                    const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStageBytes;
                    load_2d(sa, &tm_a, kt * kBK, ct.row0, full);
                    load_3d(sa + kABytes, &tm_b, kt * kBK, ct.n0, ct.group, full);
                }
            }
            tile_sched::finish(sched, grid);  // the last CTA resets the pair for the next launch
        }
    } else {
        // ------------------------------------------------------------ consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1;
        const int lane = tid & 31;
        const int wr = (tid >> 5) & 3;
        const int t = lane & 3;
        const int r_lo = 64 * cw + 16 * wr + (lane >> 2);  // this thread's two tile rows: r_lo and r_lo + 8
        float acc[64];
        float blk[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            acc[i] = 0.0f;
            blk[i] = 0.0f;
        }
        int64_t s = 0;
        for (;;) {
            const int first = static_cast<int>(s % kStages);  // the stage of the tile's first k-step
            mbar_wait(bars + 8 * first, static_cast<uint32_t>(s / kStages) & 1u);
            const int tile_id = *static_cast<volatile int*>(stage_tile + first);
            if (tile_id < 0) break;
            const Tile ct = decode(tile_id, prefix, offs, G);
            if (64 * cw >= ct.rows) {
                // Every row of this warpgroup's half is past the tile's valid rows (a group tail of <= 64 rows): no
                // products, nothing stored; the stages are only passed on, and the other warpgroup has the tensor
                // cores to itself.
                for (int kt = 0; kt < KT; ++kt, ++s) {
                    const int stage = static_cast<int>(s % kStages);
                    mbar_wait(bars + 8 * stage, static_cast<uint32_t>(s / kStages) & 1u);
                    // The warpgroup's four warps pass each stage together before its one thread frees it
                    // (tma_util.cuh, "Warps that skip").
                    tma::named_sync(1 + cw, 128);
                    if ((tid & 127) == 0) mbar_arrive(bars + 8 * (kStages + stage));
                }
                continue;
            }
            const TileScales sc = tile_scales(p, ct, r_lo);
            for (int kt = 0; kt < KT; ++kt, ++s) {
                const int stage = static_cast<int>(s % kStages);
                const auto use = static_cast<uint32_t>(s / kStages);
                const float sb = __ldg(sc.b + kt);
                const float sa_lo = __ldg(sc.a_lo + kt * p.as_col);
                const float sa_hi = __ldg(sc.a_hi + kt * p.as_col);
                mbar_wait(bars + 8 * stage, use & 1u);
                const uint32_t sa = sbase + static_cast<uint32_t>(stage) * kStageBytes;
                wgmma::reg_fence(blk);
                wgmma::fence();
#pragma unroll
                for (int ks = 0; ks < kBK / 32; ++ks) {
                    const uint64_t da = make_desc(sa + cw * 64 * 128 + ks * 32);
                    const uint64_t db = make_desc(sa + kABytes + ks * 32);
                    wgmma::m64n128k32_e4m3(blk, da, db, ks != 0 ? 1 : 0);
                }
                wgmma::commit();
                wgmma::wait<0>();
                wgmma::reg_fence(blk);
                if ((tid & 127) == 0) mbar_arrive(bars + 8 * (kStages + stage));  // this warpgroup is done with it
                promote(acc, blk, sa_lo * sb, sa_hi * sb);
            }
            store_tile<OutT>(p, ct, r_lo, t, acc);
        }
    }
}

// A rank-`rank` uint8 tensor map over `base`: dims (innermost first), byte strides of dims 1.., box 128 x 128 (x 1).
CUtensorMap encode(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides) {
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(kBK), 128u, 1u};
    return tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, base, rank, dims, strides, box);
}

}  // namespace

// fp8_wgmma_supported's conditions hold (checked by the caller); TMA adds nothing they do not imply (16-byte aligned
// bases and row strides, dims < 2^31).
void fp8_wgmma_tma(const kernels::Fp8GroupedGemmParams& p, void* stream) {
    const int64_t n_groups = p.b.size(0), n_rows = p.a.size(0);
    if (n_rows == 0) return;
    const Args args = make_args(p);
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(args.k), static_cast<cuuint64_t>(args.n_rows)};
    const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(args.lda)};
    const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(args.k), static_cast<cuuint64_t>(args.n),
                                  static_cast<cuuint64_t>(args.n_groups)};
    const int64_t b_gstride = n_groups > 1 ? args.b_gstride : args.ldb * args.n;
    const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(args.ldb), static_cast<cuuint64_t>(b_gstride)};
    const CUtensorMap tm_a = encode(args.a, 2, a_dims, a_strides);
    const CUtensorMap tm_b = encode(args.b, 3, b_dims, b_strides);
    const int64_t tile_bound = (n_rows / kBM + n_groups + 1) * args.n_tiles_n;
    const int grid = static_cast<int>(tile_bound < device_sms() ? tile_bound : device_sms());
    const int smem = smem_bytes(args.n_groups);
    const auto s = static_cast<cudaStream_t>(stream);
    int* sched = dynamic_tile_counter(s);
    auto launch = [&](auto kernel) {
        PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        kernel<<<grid, kThreads, smem, s>>>(tm_a, tm_b, args, sched);
    };
    if (p.out.dtype == DType::kF32) {
        launch(fp8_gemm_tma_kernel<float>);
    } else {
        launch(fp8_gemm_tma_kernel<bf16>);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
