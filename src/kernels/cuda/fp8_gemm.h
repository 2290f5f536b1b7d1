// Block-scaled FP8 GEMMs on the CUDA backend (kernels/ops.h Fp8GemmParams / Fp8GroupedGemmParams;
// docs/design/kernels.md "Block-scaled FP8"). Implementations behind one variant switch, each tested against
// ref::fp8_gemm:
//  - kCublasLt (dense only): cublasLtMatmul with CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F on the weight and
//    VEC128_32F on the activations (cuBLAS 12.9+, Hopper only). Needs: an sm_90 device; m % 4 == 0; k and n
//    multiples of 16; rows of a / b 16-byte aligned (row strides multiples of 16); out rows 16-byte aligned; a_scale
//    in the transposed layout (stride(0) == 1, stride(1) == m: what fp8_act_quant writes into a [kb, m] buffer viewed
//    as [m, kb]); b_scale rows of round_up(kb, 4) floats (the checkpoint's contiguous [nb, kb] whenever kb % 4 == 0
//    or nb == 1); and an algorithm from cuBLASLt's heuristic. Otherwise it declines.
//  - kWgmma / kWgmmaTma: Penstock's kernels: persistent grid, offsets read on the device (no host sync, graph
//    capturable), CTA tile 128 x 128 x 128, e4m3 wgmma m64n128k32, each 128-wide k block accumulated in its own
//    registers and promoted into f32 accumulators with a_scale[row, kb] * b_scale[n / 128, kb] (DeepSeek-V3's
//    recipe). kWgmma (fp8_grouped_gemm.cu): all 256 threads load by cp.async and meet at a barrier every k-step.
//    kWgmmaTma (fp8_gemm_tma.cu): warp-specialised, a TMA producer and two consumer warpgroups on mbarriers, so one
//    warpgroup's promotion overlaps the other's wgmma. Needs: sm_90; k % 16 == 0; n % 8 == 0; 16-byte aligned a / b
//    rows; out rows 8-byte (f32) / 4-byte (bf16) aligned with even row strides; n_groups <= 4096.
//  - kWgmmaTmaWide: the same kernel with a 128 x 256 CTA tile (four 48 KiB stages): a third fewer operand bytes per
//    FLOP through L2. Each consumer warpgroup runs the two 128-column halves as two wgmma chains into the same block
//    registers, promoting each into its own accumulators (128 + 64 registers). Same conditions as kWgmmaTma.
//  - kWgmmaTmaPair: the kWgmmaTmaWide tile run by 2-CTA clusters on the bf16 kTmaDynCluster's pair units
//    (tile_util.cuh pair_units): two tiles that share the weight tile (rank r takes m-tile 2j + r; each CTA loads one
//    128-row half of the weight tile, multicast to both) or, for a group's odd last m-tile, the activation tile (rank
//    r takes n-tile 2i + r; each CTA loads 64 of its rows, multicast). The stages of both CTAs are freed by all four
//    consumer warpgroups (the peer's by a CTA-scope remote arrive); rank 0 takes the units from the dynamic counter
//    and hands each to rank 1 through a shared-memory mailbox and a per-stage mbarrier.
//    The same per-tile arithmetic as kWgmmaTmaWide: bit-identical outputs. Same conditions.
//  - kWgmmaTmaN192 (fp8_gemm_n192.cu, bf16 out only): a 128 x 192 CTA tile, one m64n192k32 chain per consumer
//    warpgroup and k-step (96 block + 96 accumulator registers), four 40 KiB stages and a dedicated 48 KiB output tile
//    through which each warpgroup's finished rows leave by TMA stores while it starts the next tile (DeepGEMM's SM90
//    shape). The same per-element sums as the other variants: bit-identical outputs. Same conditions as kWgmmaTma,
//    plus bf16 out and n_groups <= 1936; declines otherwise.
//  Scales through shared memory: the 256-wide kernels (kWgmmaTmaWide, kWgmmaTmaPair, the fused gated GEMM) and
//    kWgmmaTmaN192 bring each k-step's scales with its stage (the activation scales by TMA, the weight scales by
//    cp.async) where a_scale is in the transposed layout with stride(1) a multiple of 4 and >= m and a 16-byte aligned
//    base (and, for the 256-wide kernels, n_groups <= 3840); any other call loads them from global memory. The same
//    products in the same order: bit-identical outputs. PENSTOCK_FP8_SCALE_SMEM=0 (read once per process) keeps the
//    loads (an A/B knob).
//  - kCudaCore: one thread per output element, per-block partial sums in f32; any layout; slow. The fallback.
// kAuto: dense -> kCublasLt, else the TMA kernel, else kCudaCore; grouped -> the TMA kernel, else kCudaCore. The TMA
// kernel of kAuto is kWgmmaTmaWide when n > 128 (kWgmmaTmaPair when fp8_pair_default(rows, groups)), else kWgmmaTma;
// PENSTOCK_FP8_TILE_N=128 (read once per process) makes it kWgmmaTma always, for A/B runs. With fp8_n192_default()
// (PENSTOCK_FP8_N192=1 / 0, read once per process) kAuto's TMA calls with bf16 out and n > 128 take kWgmmaTmaN192.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace penstock::cuda {

enum class Fp8GemmVariant : uint8_t {
    kAuto,
    kCublasLt,
    kWgmma,
    kWgmmaTma,
    kWgmmaTmaWide,
    kWgmmaTmaPair,
    kWgmmaTmaN192,
    kCudaCore
};

const char* fp8_gemm_variant_name(Fp8GemmVariant v);

// Runs `p` with variant `v` on `stream`. Returns false, with nothing enqueued, when that variant cannot take the
// call (its layout / device conditions above, or cuBLASLt's heuristic has no algorithm); kAuto and kCudaCore always
// run. Shapes and dtypes are checked first (a bad call aborts with the shapes, whatever the variant).
[[nodiscard]] bool fp8_gemm_variant(const kernels::Fp8GemmParams& p, Fp8GemmVariant v, void* stream);
// The same for the grouped form (kCublasLt: false, not offered for groups).
[[nodiscard]] bool fp8_grouped_gemm_variant(const kernels::Fp8GroupedGemmParams& p, Fp8GemmVariant v, void* stream);

// The kernels' common form (fp8_gemm.cu, fp8_grouped_gemm.cu): a grouped call whose `offsets.data == nullptr`
// means one group of all rows (the dense GEMM), and whose b [G, n, k] / b_scale [G, nb, kb] may be strided on dims
// 0 and 1 (last dim contiguous). Validated by the callers above.
bool fp8_wgmma_supported(const kernels::Fp8GroupedGemmParams& p);
void fp8_wgmma(const kernels::Fp8GroupedGemmParams& p, void* stream);  // fp8_grouped_gemm.cu
// fp8_gemm_tma.cu; tile_n 128 (kWgmmaTma) or 256 (kWgmmaTmaWide).
void fp8_wgmma_tma(const kernels::Fp8GroupedGemmParams& p, int tile_n, void* stream);
// fp8_gemm_n192.cu: kWgmmaTmaN192; false (nothing enqueued) for f32 out or more than 1936 groups.
[[nodiscard]] bool fp8_wgmma_tma_n192(const kernels::Fp8GroupedGemmParams& p, void* stream);
// Whether kAuto's TMA calls take kWgmmaTmaN192 where it runs (fp8_gemm.cu; PENSTOCK_FP8_N192).
bool fp8_n192_default();
// fp8_gemm_tma.cu: kWgmmaTmaPair.
void fp8_wgmma_tma_pair(const kernels::Fp8GroupedGemmParams& p, void* stream);
// Whether kAuto and the fused gated GEMM (gated) take the pair kernel for 256-wide tiles of a call with n_rows rows in
// n_groups groups: above kFp8PairMinAvgRows (fp8_gemm_tma.cu, 256) rows per group on average; PENSTOCK_FP8_PAIR=0 / 1
// (read once per process) forces either, PENSTOCK_FP8_PAIR=glu keeps the rule for the gated GEMM only (an A/B knob).
bool fp8_pair_default(int64_t n_rows, int64_t n_groups, bool gated = false);
// The kWgmmaTmaWide kernel with the gated epilogue (kernels/ops.h Fp8GroupedGluGemmParams): tile j holds the gate rows
// [128 j, +128) and the up rows [I + 128 j, +128) of b, rounds both to bf16, applies the activation (glu_act.cuh),
// rounds to bf16 and quantises the 128 columns of each row as fp8_act_quant does, straight from the registers.
// Needs fp8_wgmma_supported of the gate_up problem (out = gate_up), bf16 gate_up, I % 128 == 0, out rows with even
// strides and a 2-byte aligned base. gate_up is not written.
void fp8_wgmma_tma_glu(const kernels::Fp8GroupedGluGemmParams& p, void* stream);  // pair: fp8_pair_default(...)
void fp8_wgmma_tma_glu(const kernels::Fp8GroupedGluGemmParams& p, bool pair, void* stream);
void fp8_cuda_core(const kernels::Fp8GroupedGemmParams& p, void* stream);

}  // namespace penstock::cuda
