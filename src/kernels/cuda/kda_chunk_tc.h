// The tensor-core chunkwise KDA delta rule (kda_chunk_tc.cu), reached through cuda::gated_delta_rule_chunk when
// GatedDeltaRuleParams::precision is kTensorCore or kTensorCoreSplit. Internal to the CUDA backend.
#pragma once

#include <cstdint>

#include "kernels/cuda/kda_delta_args.h"

namespace penstock::cuda {

// Shapes the kernel takes: chunk 64, k_dim <= 128, v_dim <= 128 (smaller dims are zero-padded inside).
bool delta_rule_chunk_tc_supported(int64_t k_dim, int64_t v_dim, int64_t chunk);

// a packed and validated by the caller (cuda::gated_delta_rule_chunk); n_seqs > 0.
void delta_rule_chunk_tc(const DeltaArgs& a, int64_t n_seqs, void* stream);

// The split form (kTensorCoreSplit), same shapes: the chunk-parallel work of every (chunk, head) in one launch, its
// products kept as bf16 in a stream-ordered workspace (~72.5 KB per chunk and head, plus 96 KB of scratch per prep
// CTA), then the state pass per
// (sequence, head) on bf16 tensor cores. n_tokens: the rows of q (an upper bound for the chunk count).
void delta_rule_chunk_split(const DeltaArgs& a, int64_t n_seqs, int64_t n_tokens, void* stream);

}  // namespace penstock::cuda
