// Backend dispatch of the DSA ops: CPU -> the reference; CUDA kernels are not written yet.
#include "kernels/ops_dsa.h"

#include "kernels/ref/ref_dsa.h"

namespace penstock::kernels {

// TODO(#3): route Device::kCUDA to kernels/cuda once the DSA kernels exist.
#define PENSTOCK_DSA_DISPATCH(op, p, ctx)                         \
    switch ((ctx).device) {                                       \
        case Device::kCPU:                                        \
            ref::op((p), (ctx).pool);                             \
            return;                                               \
        case Device::kCUDA:                                       \
            PENSTOCK_CHECK(false) << #op ": CUDA kernel not yet"; \
            return;                                               \
    }

void dsa_indexer_logits(const DsaIndexerLogitsParams& p, const Context& ctx) {
    PENSTOCK_DSA_DISPATCH(dsa_indexer_logits, p, ctx);
}
void dsa_topk(const DsaTopkParams& p, const Context& ctx) { PENSTOCK_DSA_DISPATCH(dsa_topk, p, ctx); }
void dsa_quantize_fp8(const DsaQuantizeFp8Params& p, const Context& ctx) {
    PENSTOCK_DSA_DISPATCH(dsa_quantize_fp8, p, ctx);
}
void sparse_mla_attention(const SparseMlaAttentionParams& p, const Context& ctx) {
    PENSTOCK_DSA_DISPATCH(sparse_mla_attention, p, ctx);
}

}  // namespace penstock::kernels
