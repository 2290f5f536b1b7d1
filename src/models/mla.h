// Multi-head Latent Attention (DeepSeek-V2/V3 MLA) over a paged latent cache, in both prefill forms:
//   kMha: expand the cached latent through kv_b_proj in pieces (<= max_kv_chunk_capacity tokens across the batch),
//         attend per head with K = [k_nope; k_pe], merge the pieces by log-sum-exp;
//   kAbsorbed: fold W_UK into q and W_UV into the output, MQA over the (kv_lora + rope)-d latent.
// Both are algebraically identical (they differ by rounding only). The cache row of a token is [c (kv_lora) ; k_pe
// (rope)], c RMS-normalised and k_pe roped. See reference/MODELS.md §1.4.
#pragma once

#include <string>

#include "kv_cache/paged_cache.h"
#include "loader/model_config.h"
#include "models/forward_batch.h"
#include "models/linear.h"
#include "models/model.h"
#include "models/rope_table.h"

namespace penstock::models {

struct MlaDims {
    int64_t hidden = 0;
    int64_t n_heads = 0;
    int64_t q_lora_rank = 0;  // 0: plain q_proj
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_head_dim = 0;
    int64_t qk_rope_head_dim = 0;
    int64_t v_head_dim = 0;
    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }

    static MlaDims from_config(const loader::ModelConfig& config);
};

class MlaAttention final {
public:
    // Reads `<prefix>.{q_a_proj,q_a_layernorm,q_b_proj | q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
    // o_proj}`.
    [[nodiscard]] static Result<MlaAttention> load(WeightReader& reader, const std::string& prefix,
                                                   const loader::ModelConfig& config);

    // out[n_tokens, hidden] = MLA(x) for the batch; writes the batch's latent rows of `layer` into `cache` first.
    // x: [n_tokens, hidden] f32 (already input-normalised).
    void forward(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& x, int64_t layer,
                 kv_cache::PagedRowCache* cache, const RopeTable& rope, float softmax_scale,
                 const ModelOptions& options, const TensorView& out, const kernels::Context& ctx) const;

    const MlaDims& dims() const { return dims_; }

private:
    // attn_out[n_tokens, n_heads * v_head_dim] from q[n_tokens, n_heads, qk_head_dim] and the cached latents.
    void attend_mha(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& q, int64_t layer,
                    const kv_cache::PagedRowCache& cache, float softmax_scale, int64_t capacity,
                    const TensorView& attn_out, const kernels::Context& ctx) const;
    void attend_absorbed(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& q, int64_t layer,
                         const kv_cache::PagedRowCache& cache, float softmax_scale, const TensorView& attn_out,
                         const kernels::Context& ctx) const;

    MlaDims dims_;
    float rms_eps_ = 1e-6f;
    Linear q_a_proj_, q_b_proj_, q_proj_;
    Tensor q_a_norm_;  // [q_lora_rank] f32
    Linear kv_a_proj_;
    Tensor kv_a_norm_;  // [kv_lora_rank] f32
    Linear kv_b_proj_;  // [n_heads * (nope + v), kv_lora_rank]: per head rows [0, nope) = W_UK, [nope, nope + v) = W_UV
    Linear o_proj_;
};

}  // namespace penstock::models
