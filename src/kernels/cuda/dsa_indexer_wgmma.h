// The Hopper lightning-indexer logits kernels for fp8 q / k (IndexerVariant::kWgmma / kWgmmaFp8 of cuda_ops_dsa.h;
// dsa_indexer_wgmma.cu) and f32 q / k (kWgmmaTf32; dsa_indexer_wgmma_tf32.cu): wgmma with the keys as the A operand and
// (query row, head) pairs as B, 128-byte-swizzled shared memory, causal tile skipping from q_pos. Host-compilable (no
// CUDA headers).
#pragma once

#include "kernels/ops_dsa.h"

namespace penstock::cuda {

// Whether the wgmma kernels can run `p`: an sm_90 device; fp8 q / k; head_dim 128; n_heads 32 or 64; q and k bases
// 16-byte aligned and their row / head strides multiples of 16 bytes (TMA / 16-byte loads); sizes below 2^31.
bool dsa_indexer_wgmma_supported(const kernels::DsaIndexerLogitsParams& p);
// The e4m3 kernel's score epilogue (per key tile, gate * ReLU(acc) summed over each row's heads in f32; the f16
// kernel always runs kChains2):
//  - kChains2: 4 / kLaneRows partial sums per (key, row), the two heads of a column pair into the same sum, ReLU by
//    fmaxf (FMNMX, the ALU pipe at half rate). Nsight (docs/perf/2026-12-08-s61.md): two dependent FMA chains in
//    flight, ~3 cycles per epilogue instruction, the epilogue ~3x the warpgroup's own wgmma time.
//  - kChains4: 8 / kLaneRows partial sums per (key, row) (8 or 16 chains in flight), each head of a pair in its own
//    sum; another summation order (within kFp8AccumIndexerLogits of the reference like kChains2).
//  - kChains4FaddAbs: kChains4's sums, ReLU as acc + |acc| (FADD, the FMA pipe) against gates halved at load: the
//    same products, so bit for bit kChains4 (for finite products; a NaN product, from NaN q / k bytes only, poisons
//    the sum instead of counting as 0).
//  - kChains2FaddAbs: kChains2's sums with that ReLU: bit for bit kChains2 (finite products), so a candidate for the
//    exact f16 kernel too.
enum class IndexerEpilogue { kDefault, kChains2, kChains4, kChains4FaddAbs, kChains2FaddAbs };
// Tuning of the wgmma kernels (the bench measures the alternatives; cuda::dsa_indexer_logits uses the defaults).
struct WgmmaIndexerOptions {
    bool fp8_accumulate = false;  // e4m3 wgmma (IndexerVariant::kWgmmaFp8) instead of e4m3 widened to f16 (kWgmma)
    bool ping_pong = false;       // the two consumer warpgroups alternate wgmma issue (default: they free-run)
    bool mma_only = false;        // diagnostic for the bench: loads and wgmmas only, no epilogue, nothing written
    // Ping-pong hand-over once this warpgroup's wgmmas retired instead of right after issue (measured within 0-3% of
    // the other schedules: docs/perf/2026-12-02-s17.md).
    bool hand_over_after_wait = false;
    IndexerEpilogue epilogue = IndexerEpilogue::kDefault;  // the e4m3 kernel's epilogue (kDefault: kChains2)
};
// Runs `p` (validated by cuda::dsa_indexer_logits, and dsa_indexer_wgmma_supported(p)) on `stream`: e4m3 widened to
// f16 (exact products, f32 accumulation), or with fp8_accumulate the e4m3 wgmma (full fp8 rate, Hopper's
// reduced-precision accumulation inside the tensor core).
void dsa_indexer_logits_wgmma(const kernels::DsaIndexerLogitsParams& p, const WgmmaIndexerOptions& options,
                              void* stream);

// f32 q / k on tf32 wgmma, three products per dot (IndexerVariant::kWgmmaTf32, dsa_indexer_wgmma_tf32.cu): whether
// it can run `p` (an sm_90 device; head_dim 128; n_heads 32 or 64; q / k innermost contiguous, bases 16-byte aligned,
// row / head strides multiples of 4 floats; sizes below 2^31), and the launcher (p validated by
// cuda::dsa_indexer_logits).
// f16 (kWgmmaF16x3): the same products on f16 wgmma, each key and q vector scaled by a power of two first (the same
// shapes).
bool dsa_indexer_wgmma_tf32_supported(const kernels::DsaIndexerLogitsParams& p);
void dsa_indexer_logits_wgmma_tf32(const kernels::DsaIndexerLogitsParams& p, bool f16, void* stream);

}  // namespace penstock::cuda
