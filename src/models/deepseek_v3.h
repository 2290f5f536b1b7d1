// DeepSeek-V3 family (`model_type: deepseek_v3`; also V2-style checkpoints without q_lora): pre-norm decoder layers of
// MLA + (dense SwiGLU for layers < first_k_dense_replace, MoE after), final RMSNorm and lm_head. The MTP layers
// (index >= num_hidden_layers) are not part of prefill and are never loaded.
#pragma once

#include <memory>
#include <vector>

#include "models/mla.h"
#include "models/model.h"
#include "models/moe.h"

namespace penstock::models {

// The latent cache of a DeepSeek-style stage: one PagedRowCache over its layer range.
class MlaModelCache final : public ModelCache {
public:
    MlaModelCache(int64_t n_pages, int64_t row_dim, int64_t layer_begin, int64_t layer_end,
                  Allocator& alloc = cpu_allocator(), DType dtype = DType::kF32)
        : latent(n_pages, row_dim, layer_begin, layer_end, dtype, alloc) {}
    std::vector<kv_cache::PagedBuffer> paged_buffers() const override { return latent.buffers(); }
    kv_cache::PagedRowCache latent;
};

class DeepseekV3Model final : public Model {
public:
    [[nodiscard]] static Result<std::unique_ptr<Model>> load(const loader::ModelConfig& config,
                                                             const loader::Checkpoint& checkpoint,
                                                             const loader::LayerRange& range,
                                                             const ModelOptions& options, loader::LoadStats* stats);

    const loader::ModelConfig& config() const override { return config_; }
    loader::LayerRange layer_range() const override { return range_; }
    std::unique_ptr<ModelCache> create_cache(int64_t n_pages) const override;
    void embed(const BatchLayout& layout, Activations* act, const kernels::Context& ctx) const override;
    void forward_layers(const ForwardBatch& batch, const BatchLayout& layout, Activations* act, ModelCache* cache,
                        const kernels::Context& ctx) const override;
    Tensor compute_logits(const BatchLayout& layout, const Activations& act,
                          const kernels::Context& ctx) const override;

private:
    struct Layer {
        Tensor input_norm;  // [hidden] f32
        Tensor post_norm;   // [hidden] f32
        std::unique_ptr<MlaAttention> attn;
        std::unique_ptr<FeedForward> ffn;  // MoE on MoE layers, dense MLP on the first_k_dense_replace ones
    };

    loader::ModelConfig config_;
    loader::LayerRange range_;
    ModelOptions options_;
    RopeTable rope_;
    float softmax_scale_ = 1.0f;
    EmbedHead io_;  // embedding (first stage), final norm and lm_head (last stage)
    std::vector<Layer> layers_;
};

}  // namespace penstock::models
