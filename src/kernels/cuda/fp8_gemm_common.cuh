// Shared pieces of the FP8 block-scaled GEMM kernels (fp8_grouped_gemm.cu: kWgmma, fp8_gemm_tma.cu: kWgmmaTma;
// contract kernels/cuda/fp8_gemm.h): the kernel arguments, the 128 x 128 x 128 tiling, the persistent-grid tile
// scheduler over device offsets (every CTA scans the per-group tile counts into a prefix in shared memory and finds
// tile t by binary search; tiles run group-major, then n-tile, then m-tile, so CTAs running together share one
// expert's weight tile), the per-128-k-block promotion and the register epilogue. Device-only; include from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/ops.h"

namespace penstock::cuda::fp8 {

constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 128;            // bytes = e4m3 elements = kernels::kFp8Block: one k-step is one scale block
constexpr int kABytes = kBM * kBK;  // 16 KiB
constexpr int kBBytes = kBN * kBK;  // 16 KiB
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kMaxGroups = 4096;
static_assert(kBK == kernels::kFp8Block, "one k-step is one scale block");

struct Args {
    const uint8_t* a;
    const uint8_t* b;
    void* out;
    const float* a_scale;
    const float* b_scale;
    const int32_t* offsets;  // null: one group [0, n_rows)
    int64_t lda, ldo, ldb, b_gstride;
    int64_t as_row, as_col, bs_row, bs_gstride;
    int n_rows, n, k, n_groups, n_tiles_n, k_steps;
    int out16;  // bf16 out with 16-byte aligned rows (pointer and ldo): store_tile's 16-byte stores
};

using tile::smem_u32;
using tile::store2;
using Tile = tile::GroupTile;

__device__ __forceinline__ Tile decode(int t, const int* prefix, const int* offs, int n_groups) {
    return tile::decode_group_tile<kBM, kBN>(t, prefix, offs, n_groups);
}

// The tile prefix over the (clamped) group offsets: tile::build_group_tile_prefix. Ends with a barrier.
__device__ __forceinline__ int build_tile_prefix(const Args& p, int* prefix, int* offs, int* scan) {
    return tile::build_group_tile_prefix<kBM>(p.offsets, p.n_rows, p.n_groups, p.n_tiles_n, prefix, offs, scan);
}

// This thread's scale pointers for a tile: rows r_lo and r_lo + 8 of the tile (a row past the valid rows reads
// row0's scales: any finite value, never stored) and the tile's weight-scale row.
struct TileScales {
    const float* a_lo;
    const float* a_hi;
    const float* b;
};

__device__ __forceinline__ TileScales tile_scales(const Args& p, const Tile& ct, int r_lo) {
    TileScales s;
    s.a_lo = p.a_scale + static_cast<int64_t>(ct.row0 + (r_lo < ct.rows ? r_lo : 0)) * p.as_row;
    s.a_hi = p.a_scale + static_cast<int64_t>(ct.row0 + (r_lo + 8 < ct.rows ? r_lo + 8 : 0)) * p.as_row;
    s.b = p.b_scale + static_cast<int64_t>(ct.group) * p.bs_gstride + static_cast<int64_t>(ct.n0 / kBN) * p.bs_row;
    return s;
}

// acc += blk * scale of the row (fmaf), for the m64n128 f32 fragment: blk[4 i + {0, 1}] are row r_lo, columns
// 8 i + 2 t + {0, 1}; blk[4 i + {2, 3}] the same columns of row r_lo + 8.
__device__ __forceinline__ void promote(float (&acc)[64], const float (&blk)[64], float s_lo, float s_hi) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        acc[4 * i + 0] = fmaf(blk[4 * i + 0], s_lo, acc[4 * i + 0]);
        acc[4 * i + 1] = fmaf(blk[4 * i + 1], s_lo, acc[4 * i + 1]);
        acc[4 * i + 2] = fmaf(blk[4 * i + 2], s_hi, acc[4 * i + 2]);
        acc[4 * i + 3] = fmaf(blk[4 * i + 3], s_hi, acc[4 * i + 3]);
    }
}

// The plain stores of this thread's part of a wgmma fragment of 8 kBlocks columns (rows r_lo, r_lo + 8 of the tile;
// lane quad t holds columns 8 i + 2 t (+1) in acc[4 i + 2 hf (+1)]): 2 values per store, valid rows only, columns
// inside n (n % 8 == 0). Leaves acc as it is.
template <class OutT, int kBlocks, int kRegs>
__device__ __forceinline__ void store_frag_pairs(const Args& p, const Tile& ct, int r_lo, int t,
                                                 const float (&acc)[kRegs]) {
    static_assert(kRegs == 4 * kBlocks, "four accumulators per 8-column block");
    OutT* out = static_cast<OutT*>(p.out);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = r_lo + 8 * hf;
        if (r < ct.rows) {
            OutT* orow = out + static_cast<int64_t>(ct.row0 + r) * p.ldo + ct.n0 + 2 * t;
            const int lim = p.n - ct.n0 - 2 * t;  // columns 8 i + 2 t (+1) valid while 8 i < lim
#pragma unroll
            for (int i = 0; i < kBlocks; ++i) {
                if (8 * i < lim) store2<OutT>(orow + 8 * i, acc[4 * i + 2 * hf], acc[4 * i + 2 * hf + 1]);
            }
        }
    }
}

// Stores this thread's fragment (rows r_lo, r_lo + 8 of the tile; lane quad t) and zeroes acc. n % 8 == 0. With
// p.out16 (bf16, 16-byte aligned rows) and all 128 columns inside n, each row's quad trades its words
// (quad_transpose) so that every lane stores 16 contiguous bytes four times (columns 32 j + 8 t .. + 7) instead of 4
// bytes sixteen times: the same values, a quarter of the store instructions and whole 32-byte sectors.
template <class OutT>
__device__ __forceinline__ void store_tile(const Args& p, const Tile& ct, int r_lo, int t, float (&acc)[64]) {
    OutT* out = static_cast<OutT*>(p.out);
    if constexpr (std::is_same_v<OutT, __nv_bfloat16>) {
        if (p.out16 != 0 && p.n - ct.n0 >= 128) {  // uniform over the warp
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = r_lo + 8 * hf;
                tile::store_row_bf16x16<4>(
                    out + static_cast<int64_t>(ct.row0 + (r < ct.rows ? r : 0)) * p.ldo + ct.n0 + 8 * t, r < ct.rows, t,
                    [&](int i) { return tile::pack_bf16x2(acc[4 * i + 2 * hf], acc[4 * i + 2 * hf + 1]); });
            }
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
            return;
        }
    }
    store_frag_pairs<OutT, 16>(p, ct, r_lo, t, acc);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
}

// Arrives on `bar` once all of this thread's earlier cp.async copies have landed; the arrival does not raise the
// barrier's expected count (init it with one more per such thread). The TMA kernels' weight scales.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Args from a validated call in the kernels' grouped form (fp8_gemm.h). Host (fp8_grouped_gemm.cu).
Args make_args(const kernels::Fp8GroupedGemmParams& p);

// The TMA kernels' scales through shared memory (fp8_gemm_tma.cu, fp8_gemm_n192.cu): whether the activation scales
// are in fp8_act_quant's transposed layout, TMA-readable ([kb, m]: as_row 1, as_col a multiple of 4, 16-byte aligned
// base) and not turned off by PENSTOCK_FP8_SCALE_SMEM=0 (read once per process; an A/B knob), and the map that reads
// them: f32 [k_steps, n_rows] with rows as_col apart, kActScaleBox x 1 boxes, no swizzle. Host (fp8_grouped_gemm.cu).
// A TMA box must start 16 bytes aligned in its innermost dimension (an unaligned start is an illegal instruction), so
// a tile's scales are read from row0 rounded down to 4 rows: a box of kActScaleBox floats in a kActScaleSlot-byte slot
// (128-byte aligned), the tile's row r at float (row0 & 3) + r.
constexpr int kActScaleBox = kBM + 4;
constexpr int kActScaleSlot = 640;
static_assert(kActScaleBox * 4 % 16 == 0 && kActScaleBox * 4 <= kActScaleSlot && kActScaleSlot % 128 == 0, "slots");
__device__ __forceinline__ int act_scale_x0(int row0) { return row0 & ~3; }
bool scale_smem_ok(const Args& a);
CUtensorMap act_scale_map(const Args& a);
// The current device's multiprocessor count and compute-capability major (cached per thread and device).
int device_sms();
int device_major();

}  // namespace penstock::cuda::fp8
