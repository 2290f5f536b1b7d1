// CUDA launchers of the DSA ops (kernels/ops_dsa.h), namespace penstock::cuda: same Params and semantics as the CPU
// reference in kernels/ref/dsa.cc. Each checks shapes on the host, enqueues on `stream` (a cudaStream_t as void*) and
// returns without synchronising. Host-compilable (no CUDA headers): kernels/ops_dsa.cc includes it for dispatch.
// Dtypes are the reference's: f32 activations, or f8e4m3 q/k for the indexer; i32 indices and positions.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops_dsa.h"

namespace penstock::cuda {

// fp32 accumulation of each head's q.k (exact e4m3 products for fp8), fp32 sum over heads.
// Variants: kCudaCore (any shape; f32 and fp8), kMma (fp8 only: mma.sync m16n8k32 e4m3 tensor cores; head_dim a
// multiple of 32 up to 128, 4-byte aligned q / k rows and heads), kWgmma (fp8 only, sm_90, dsa_indexer_wgmma.h:
// head_dim 128, 32 or 64 heads, 16-byte aligned q / k bases and strides; e4m3 widened to f16 for wgmma, exact
// products, f32 accumulation), kWgmmaFp8 (the same shapes on e4m3 wgmma at twice the tensor-core rate, but with
// Hopper's reduced-precision fp8 accumulation, ~1e-4 relative: opt-in, chosen by kAuto only for params with
// fp8_accumulate).
// kAuto: kWgmma where it applies (kWgmmaFp8 instead when the params allow fp8 accumulation,
// DsaIndexerLogitsParams::fp8_accumulate), else kMma where it applies; f32 q / k: kWgmmaF16x3 where it applies, else
// kMmaTf32 where it applies and the call has at least 2 x SMs row groups (4 rows for 32 heads, 2 for 64), else
// kF32Tiled where it applies, else kCudaCore. A forced variant CHECK-fails where it cannot run. Every variant skips key
// tiles past the rows' q_pos (when given). kMmaTf32 (f32 only): three TF32 products per dot on mma.sync (hi/lo splits;
// ~2^-22 relative per product), within the reference's tolerance but not bit-equal to the CUDA-core kernels; each logit
// is computed the same way whatever the call's rows and keys (chunked prefill gives the same logits as one call). 32 or
// 64 heads, head_dim a power of two in 8..128, 16-byte aligned rows. kWgmmaTf32 (f32 only): the same three products on
// Hopper's tf32 wgmma (dsa_indexer_wgmma.h: sm_90, head_dim 128, 32 or 64 heads; calls of few rows split the keys); the
// same error bound, not bit-equal to kMmaTf32 (another accumulation order). kF32Tiled: the register-tiled CUDA-core
// kernel, bit-equal to kCudaCore.
enum class IndexerVariant : uint8_t {
    kAuto,
    kCudaCore,
    kMma,
    kWgmma,
    kWgmmaFp8,
    kMmaTf32,
    kF32Tiled,
    kWgmmaTf32,
    kWgmmaF16x3
};
void dsa_indexer_logits(const kernels::DsaIndexerLogitsParams& p, void* stream);
void dsa_indexer_logits(const kernels::DsaIndexerLogitsParams& p, IndexerVariant variant, void* stream);
// Whether kMma / kWgmma can run `p` (the launcher CHECK-fails when one is forced where it cannot).
bool dsa_indexer_mma_supported(const kernels::DsaIndexerLogitsParams& p);
bool dsa_indexer_wgmma_supported(const kernels::DsaIndexerLogitsParams& p);
// Whether kF32Tiled can run `p` (16-byte aligned rows, head_dim % 4 == 0 and <= 128); kAuto takes it for f32 where
// kMmaTf32 does not apply; otherwise, and under kCudaCore, the per-element kernel (the same results bit for bit).
bool dsa_indexer_f32_tiled_supported(const kernels::DsaIndexerLogitsParams& p);
// Whether kMmaTf32 can run `p`.
bool dsa_indexer_tf32_supported(const kernels::DsaIndexerLogitsParams& p);
// Radix select of the top_k-th logit per row; a row whose boundary value is tied (the index set is not unique)
// replays libstdc++'s nth_element / partial_sort on the device, as the reference does, so the index sets are
// identical. Scratch (the tied-row list and the replay queues) comes from `alloc` (a CUDA allocator; stream-ordered
// use). Variants (dsa_topk.cu), all bit-identical to the reference: kRangeRadix (kAuto's choice; range-adaptive
// 11-bit steps, the selected indices compacted four keys per lane, parallel replay of tied rows; torch_row_len <
// 2^30): calls with n_keys > 16384 stream each row once through a sampled bound into a candidate list (rows up to
// the list's capacity, 2.75 top_k, held whole; calls with n_keys up to that capacity take the same kernel), the
// others hold each row in shared memory; kRangeRadixScalarCompact (the same with the compaction one key per lane);
// kRangeRadixRowSmem (every call on the row-in-shared-memory kernel, 1024 threads above 16384 keys: the previous
// default); kRangeRadixStream (every call on the stream kernel); kRangeRadixSerialReplay (kRangeRadix with tied
// partial_sort rows, top_k * 64 <= torch_row_len, replayed serially on the whole queue: the previous replay; the
// others screen heap_select's scan in parallel); kLegacy (dsa_topk_legacy.cu: 8-bit steps from global memory, serial
// replay). The non-default ones are kept for tests and same-run comparisons.
enum class TopkVariant : uint8_t {
    kAuto,
    kRangeRadix,
    kRangeRadixScalarCompact,
    kRangeRadixRowSmem,
    kRangeRadixStream,
    kRangeRadixSerialReplay,
    kLegacy
};
void dsa_topk(const kernels::DsaTopkParams& p, Allocator& alloc, void* stream);
void dsa_topk(const kernels::DsaTopkParams& p, TopkVariant variant, Allocator& alloc, void* stream);
// Diagnostics of one run of a range-radix variant (synchronises `stream`): rows whose boundary was tied (the replay)
// and rows the stream kernel selected from global memory because the sampled bound missed (its fallback).
struct TopkDiagnosis {
    int64_t tied_rows = 0;
    int64_t global_rows = 0;
};
TopkDiagnosis dsa_topk_diagnose(const kernels::DsaTopkParams& p, TopkVariant variant, Allocator& alloc, void* stream);
// dsa_topk_diagnose(p, kRangeRadix, ...).tied_rows.
int64_t dsa_topk_tied_rows(const kernels::DsaTopkParams& p, Allocator& alloc, void* stream);
// Bit-exact with the reference (same butterflies, IEEE f32 arithmetic, same e4m3 rounding).
void dsa_quantize_fp8(const kernels::DsaQuantizeFp8Params& p, void* stream);
// Online softmax in fp32 over the gathered rows. f32: CUDA cores, d_qk <= 576, d_v <= 512. bf16 q / kv / v (out bf16
// or f32): bf16 tensor cores (mla_tc.h: d_qk 576, d_v 512, v = kv[:, :512], 16-byte aligned rows, else CHECK-fails).
void sparse_mla_attention(const kernels::SparseMlaAttentionParams& p, void* stream);

}  // namespace penstock::cuda
