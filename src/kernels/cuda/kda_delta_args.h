// Raw arguments of the KDA delta-rule kernels (kda_delta_rule.cu, kda_chunk_tc.cu): pointers and strides of
// kernels::GatedDeltaRuleParams after the launcher's checks. Internal to the CUDA backend; device-compilable.
#pragma once

#include <cstdint>

namespace penstock::cuda {

struct DeltaArgs {
    float* out;
    const float* q;
    const float* k;
    const float* v;
    const float* g;
    const float* beta;
    float* state;  // [n_slots, n_heads, k_dim, v_dim]
    const int32_t* cu;
    const int32_t* slots;
    int64_t o0, o1, q0, q1, k0, k1, v0, v1, g0, g1, b0;
    int n_heads, k_dim, v_dim, chunk;
    float scale;
};

}  // namespace penstock::cuda
