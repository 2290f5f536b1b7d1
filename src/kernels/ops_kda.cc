// Backend dispatch of the KDA / SiTU ops: CPU -> the reference (kernels/ref/kda.cc); CUDA -> kernels/cuda (kda.cu,
// kda_delta_rule.cu) when the backend is built.
#include "kernels/ops_kda.h"

#include "core/check.h"
#include "kernels/ref/ref_kda.h"

#if PENSTOCK_ENABLE_CUDA
#include "kernels/cuda/cuda_ops_kda.h"
#endif

namespace penstock::kernels {

#if PENSTOCK_ENABLE_CUDA
#define PENSTOCK_KDA_DISPATCH(op, p, ctx)               \
    switch ((ctx).device) {                             \
        case Device::kCPU:                              \
            ref::op((p), (ctx).pool);                   \
            return;                                     \
        case Device::kCUDA:                             \
            cuda::op((p), (ctx).stream);                \
            return;                                     \
    }
#else
#define PENSTOCK_KDA_DISPATCH(op, p, ctx)                                   \
    switch ((ctx).device) {                                                 \
        case Device::kCPU:                                                  \
            ref::op((p), (ctx).pool);                                       \
            return;                                                         \
        case Device::kCUDA:                                                  \
            PENSTOCK_CHECK(false) << #op ": this build has no CUDA backend"; \
            return;                                                         \
    }
#endif

void short_conv(const ShortConvParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(short_conv, p, ctx); }
void l2norm(const L2NormParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(l2norm, p, ctx); }
void sigmoid(const SigmoidParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(sigmoid, p, ctx); }
void sigmoid_gate(const SigmoidGateParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(sigmoid_gate, p, ctx); }
void kda_gate(const KdaGateParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(kda_gate, p, ctx); }
void gated_delta_rule_recurrent(const GatedDeltaRuleParams& p, const Context& ctx) {
    PENSTOCK_KDA_DISPATCH(gated_delta_rule_recurrent, p, ctx);
}
void gated_delta_rule_chunk(const GatedDeltaRuleParams& p, const Context& ctx) {
    PENSTOCK_KDA_DISPATCH(gated_delta_rule_chunk, p, ctx);
}
void gated_rms_norm(const GatedRmsNormParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(gated_rms_norm, p, ctx); }
void situ_mul(const SituMulParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(situ_mul, p, ctx); }
void attn_res_mix(const AttnResMixParams& p, const Context& ctx) { PENSTOCK_KDA_DISPATCH(attn_res_mix, p, ctx); }

#undef PENSTOCK_KDA_DISPATCH

}  // namespace penstock::kernels
