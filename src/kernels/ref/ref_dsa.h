// The CPU reference of the DSA ops in kernels/ops_dsa.h (host memory; `pool` may be null; results never depend on
// the thread count).
#pragma once

#include "kernels/ops_dsa.h"

namespace penstock::ref {

void dsa_indexer_logits(const kernels::DsaIndexerLogitsParams& p, ThreadPool* pool);
void dsa_topk(const kernels::DsaTopkParams& p, ThreadPool* pool);
void dsa_quantize_fp8(const kernels::DsaQuantizeFp8Params& p, ThreadPool* pool);
void sparse_mla_attention(const kernels::SparseMlaAttentionParams& p, ThreadPool* pool);

}  // namespace penstock::ref
