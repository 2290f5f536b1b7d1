// Backend dispatch of the DSA ops: CPU -> the reference (kernels/ref/dsa.cc); CUDA -> kernels/cuda (dsa.cu,
// dsa_topk.cu) when the backend is built. dsa_topk takes its scratch from the context's allocator.
#include "kernels/ops_dsa.h"

#include "core/check.h"
#include "kernels/ref/ref_dsa.h"

#if PENSTOCK_ENABLE_CUDA
#include "kernels/cuda/cuda_ops_dsa.h"
#endif

namespace penstock::kernels {

#if PENSTOCK_ENABLE_CUDA
#define PENSTOCK_DSA_DISPATCH(op, p, ctx)               \
    switch ((ctx).device) {                             \
        case Device::kCPU:                              \
            ref::op((p), (ctx).pool);                   \
            return;                                     \
        case Device::kCUDA:                             \
            cuda::op((p), (ctx).stream);                \
            return;                                     \
    }
#else
#define PENSTOCK_DSA_DISPATCH(op, p, ctx)                                   \
    switch ((ctx).device) {                                                 \
        case Device::kCPU:                                                  \
            ref::op((p), (ctx).pool);                                       \
            return;                                                         \
        case Device::kCUDA:                                                 \
            PENSTOCK_CHECK(false) << #op ": this build has no CUDA backend"; \
            return;                                                         \
    }
#endif

void dsa_indexer_logits(const DsaIndexerLogitsParams& p, const Context& ctx) {
    PENSTOCK_DSA_DISPATCH(dsa_indexer_logits, p, ctx);
}
void dsa_topk(const DsaTopkParams& p, const Context& ctx) {
    switch (ctx.device) {
        case Device::kCPU:
            ref::dsa_topk(p, ctx.pool);
            return;
        case Device::kCUDA:
#if PENSTOCK_ENABLE_CUDA
            cuda::dsa_topk(p, allocator_of(ctx), ctx.stream);
#else
            PENSTOCK_CHECK(false) << "dsa_topk: this build has no CUDA backend";
#endif
            return;
    }
}
void dsa_quantize_fp8(const DsaQuantizeFp8Params& p, const Context& ctx) {
    PENSTOCK_DSA_DISPATCH(dsa_quantize_fp8, p, ctx);
}
void sparse_mla_attention(const SparseMlaAttentionParams& p, const Context& ctx) {
    PENSTOCK_DSA_DISPATCH(sparse_mla_attention, p, ctx);
}

#undef PENSTOCK_DSA_DISPATCH

}  // namespace penstock::kernels
