// The CPU reference of the KDA / SiTU ops in kernels/ops_kda.h: plain loops, fp32 values with double accumulation
// (sigmoid_gate, situ_mul and attn_res_mix also read and write bf16 activations, rounding once at the output).
// `pool` may be null; results never depend on the thread count.
#pragma once

#include "kernels/ops_kda.h"

namespace penstock::ref {

void short_conv(const kernels::ShortConvParams& p, ThreadPool* pool);
void l2norm(const kernels::L2NormParams& p, ThreadPool* pool);
void sigmoid(const kernels::SigmoidParams& p, ThreadPool* pool);
void sigmoid_gate(const kernels::SigmoidGateParams& p, ThreadPool* pool);
void kda_gate(const kernels::KdaGateParams& p, ThreadPool* pool);
void gated_delta_rule_recurrent(const kernels::GatedDeltaRuleParams& p, ThreadPool* pool);
void gated_delta_rule_chunk(const kernels::GatedDeltaRuleParams& p, ThreadPool* pool);
void gated_rms_norm(const kernels::GatedRmsNormParams& p, ThreadPool* pool);
void situ_mul(const kernels::SituMulParams& p, ThreadPool* pool);
void attn_res_mix(const kernels::AttnResMixParams& p, ThreadPool* pool);

}  // namespace penstock::ref
