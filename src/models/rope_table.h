// RoPE frequencies and attention scale from a ModelConfig, following Hugging Face transformers 5.17 exactly:
// default: inv_freq_i = 1 / theta^(2i/d); yarn: ramp-blended interpolation/extrapolation frequencies, cos/sin scaled by
// attention_factor, and the MLA softmax scale multiplied by mscale(factor, mscale_all_dim)^2 when mscale_all_dim is
// set.
#pragma once

#include "core/status.h"
#include "core/tensor.h"
#include "loader/model_config.h"

namespace penstock::models {

struct RopeTable {
    Tensor inv_freq;                // [rot_dim / 2] f32
    float attention_factor = 1.0f;  // multiplies cos and sin
    int64_t rot_dim = 0;
    bool interleaved = true;
};

// rot_dim = qk_rope_head_dim * partial_rotary_factor. Unsupported rope types return Unimplemented.
[[nodiscard]] Result<RopeTable> make_rope_table(const loader::ModelConfig& config);

// qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 for scaled RoPE types with mscale_all_dim set.
float mla_softmax_scale(const loader::ModelConfig& config);

}  // namespace penstock::models
