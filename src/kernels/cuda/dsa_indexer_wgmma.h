// The Hopper FP8 lightning-indexer logits kernel (IndexerVariant::kWgmma of cuda_ops_dsa.h; dsa_indexer_wgmma.cu):
// wgmma.m64n256k32 e4m3 x e4m3 -> f32 with the keys as the A operand and (query row, head) pairs as B, TMA loads
// into 128-byte-swizzled shared memory, causal tile skipping from q_pos. Host-compilable (no CUDA headers).
#pragma once

#include "kernels/ops_dsa.h"

namespace penstock::cuda {

// Whether the wgmma kernel can run `p`: an sm_90 device; fp8 q / k; head_dim 128; n_heads 32 or 64; q and k bases
// 16-byte aligned and their row / head strides multiples of 16 bytes (TMA); sizes below 2^31.
bool dsa_indexer_wgmma_supported(const kernels::DsaIndexerLogitsParams& p);
// Runs `p` (validated by cuda::dsa_indexer_logits, and dsa_indexer_wgmma_supported(p)) on `stream`.
void dsa_indexer_logits_wgmma(const kernels::DsaIndexerLogitsParams& p, void* stream);

}  // namespace penstock::cuda
