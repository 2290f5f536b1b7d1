// CUDA launchers of the KDA / SiTU ops (kernels/ops_kda.h), namespace penstock::cuda: same Params and semantics as the
// CPU reference in kernels/ref/kda.cc (f32 tensors, bf16 activations where ops_kda.h allows them; i32 cu_seqlens /
// state_slots on the device, not validated there:
// the host checks shapes only). Each enqueues on `stream` (a cudaStream_t as void*) and returns without
// synchronising. Host-compilable (no CUDA headers): kernels/ops_kda.cc includes it for dispatch.
// Numerics: fp32 arithmetic (the reference uses double), so results agree to rounding; the delta-rule state is fp32
// inside a call as well as between calls. bf16 outputs of sigmoid_gate / situ_mul use fast exp and divide
// intrinsics (situ_mul also a fast tanh: SituMath below); attn_res_mix on bf16 activations
// accumulates each thread's share of a row in f32 and combines the shares in double.
#pragma once

#include "kernels/ops_kda.h"

namespace penstock::cuda {

void short_conv(const kernels::ShortConvParams& p, void* stream);  // kernel <= 16
void l2norm(const kernels::L2NormParams& p, void* stream);
void sigmoid(const kernels::SigmoidParams& p, void* stream);
void sigmoid_gate(const kernels::SigmoidGateParams& p, void* stream);
void kda_gate(const kernels::KdaGateParams& p, void* stream);
// k_dim <= 128 (any v_dim): one block per (sequence, head, 32 value columns), state in registers.
void gated_delta_rule_recurrent(const kernels::GatedDeltaRuleParams& p, void* stream);
// k_dim <= 128, v_dim <= 128, chunk_size <= 64: one block per (sequence, head), state and chunk in shared memory.
void gated_delta_rule_chunk(const kernels::GatedDeltaRuleParams& p, void* stream);
void gated_rms_norm(const kernels::GatedRmsNormParams& p, void* stream);
void situ_mul(const kernels::SituMulParams& p, void* stream);
// situ_mul's bf16 arithmetic (f32 outputs always use tanhf / expf): kRational = a [13/6] rational tanh (< 3e-7
// relative) and fast exp / divide; kTanhApprox = the tanh.approx.f32 instruction (2^-10.987 relative, a quarter of a
// bf16 rounding) and fast exp / divide, fewer instructions per element. situ_mul runs kDefaultSituMath; the variant
// entry point is for the conformance tests and the benchmark, which cover both.
enum class SituMath : uint8_t { kRational, kTanhApprox };
inline constexpr SituMath kDefaultSituMath = SituMath::kTanhApprox;
void situ_mul_variant(const kernels::SituMulParams& p, SituMath math, void* stream);
void attn_res_mix(const kernels::AttnResMixParams& p, void* stream);

}  // namespace penstock::cuda
