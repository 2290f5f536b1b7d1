// The DSA family: `glm_moe_dsa` (GLM-5.x) and `deepseek_v32` (DeepSeek-V3.2), as transformers 5.17 computes them.
// Pre-norm decoder layers of MLA + the lightning indexer (models/dsa_indexer.h) + (dense SwiGLU | MoE) per
// `mlp_layer_types`. Main MLA RoPE is always interleaved (transformers hard-codes it for both types); the indexer's
// RoPE is interleaved for GLM and half-split for V3.2 (`indexer_rope_interleave` overrides). `indexer_types`: a
// `shared` layer reuses the top-k of the previous `full` layer (GLM only; every V3.2 layer is full).
// Attention: while a forward's longest KV is <= index_topk (ModelOptions::dsa_dense_max_kv) every row attends to all
// its keys, so the dense causal MLA of ModelOptions::mla_form runs; beyond, sparse absorbed MLA over the selected
// latents (the set transformers' index mask leaves visible). See reference/MODELS.md §2 and docs/design/models.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/dsa_indexer.h"
#include "models/mla.h"
#include "models/model.h"
#include "models/moe.h"

namespace penstock::models {

// Family fields of config.raw with GlmMoeDsaConfig / DeepseekV32Config defaults.
struct DsaConfig {
    int64_t index_topk = 2048;
    int64_t index_n_heads = 32;  // GLM 32, V3.2 64
    int64_t index_head_dim = 128;
    bool indexer_rope_interleave = true;  // GLM true, V3.2 false
    std::vector<uint8_t> full_indexer;    // [num_hidden_layers]: 1 = "full", 0 = "shared"
    std::vector<uint8_t> moe_mlp;         // [num_hidden_layers]: 1 = "sparse" (MoE), 0 = "dense"
};

// indexer_types: the explicit list, else index_topk_pattern ("FS.." or a list), else full iff
// max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (defaults 2 and 1: all full). mlp_layer_types: the
// list, else first_k_dense_replace dense layers then sparse. Errors name the field.
[[nodiscard]] Result<DsaConfig> parse_dsa_config(const loader::ModelConfig& config);

// A DSA stage's cache on `alloc`'s device: the MLA latent rows of every layer (`dtype`, the activation dtype) and the
// index keys of its full layers (f32, or FP8).
class DsaModelCache final : public ModelCache {
public:
    DsaModelCache(int64_t n_pages, int64_t latent_dim, int64_t layer_begin, int64_t layer_end, int64_t index_head_dim,
                  const std::vector<int64_t>& full_layers, bool fp8_indexer, Allocator& alloc = cpu_allocator(),
                  DType dtype = DType::kF32)
        : latent(n_pages, latent_dim, layer_begin, layer_end, dtype, alloc),
          index_k(n_pages, index_head_dim, full_layers, fp8_indexer, alloc) {}
    std::vector<kv_cache::PagedBuffer> paged_buffers() const override {
        std::vector<kv_cache::PagedBuffer> out = latent.buffers();
        for (const kv_cache::PagedBuffer& b : index_k.buffers()) out.push_back(b);
        return out;
    }
    kv_cache::PagedRowCache latent;
    DsaIndexKCache index_k;
};

class GlmDsaModel final : public Model {
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
    int64_t topk_cols_after(const ForwardBatch& batch) const override;
    Tensor compute_logits(const BatchLayout& layout, const Activations& act,
                          const kernels::Context& ctx) const override;

    const DsaConfig& dsa_config() const { return dsa_; }

private:
    // Whether `batch` takes the sparse path (its longest KV exceeds dsa_dense_max_kv).
    bool sparse(const ForwardBatch& batch) const;
    struct Layer {
        Tensor input_norm;  // [hidden] f32
        Tensor post_norm;   // [hidden] f32
        std::unique_ptr<MlaAttention> attn;
        std::unique_ptr<DsaIndexer> indexer;  // full layers only
        std::unique_ptr<FeedForward> ffn;     // MoE or dense per mlp_layer_types
    };

    // The sparse attention's inputs that do not depend on the selection: every sequence's latent rows of positions
    // [0, prefix + chunk) (one paged gather) and q absorbed into the latent space, both as sparse_mla_attention takes
    // them (exact f32 copies unless the bf16 kernel takes the rows as they are). Allocated on ctx, issued on `work`
    // (a fork beside the indexer, or ctx itself).
    // Every buffer the work writes lives here until the struct dies (after any join).
    struct SparseInputs {
        Tensor latent;        // [total_keys, kv_lora + rope] the cache's dtype
        Tensor kv;            // latent itself (native) or its f32 copy
        Tensor q_abs_raw;     // [n, n_heads, kv_lora + rope] q's dtype
        Tensor q_abs;         // q_abs_raw itself (native) or its f32 copy
        bool native = false;  // bf16 rows for the tensor-core kernel
    };
    SparseInputs sparse_inputs(const BatchLayout& layout, const Layer& layer, int64_t index, const TensorView& x,
                               DsaModelCache* cache, const MlaAttention::Projection& proj, const kernels::Context& ctx,
                               const kernels::Context& work) const;
    // The sparse path of one layer: sub_out = o_proj(sparse absorbed MLA of the rows' selected key positions).
    void attend_sparse(const ForwardBatch& batch, const BatchLayout& layout, const Layer& layer, const TensorView& x,
                       const TensorView& key_pos, const SparseInputs& in, const TensorView& out,
                       const kernels::Context& ctx) const;

    loader::ModelConfig config_;
    DsaConfig dsa_;
    loader::LayerRange range_;
    ModelOptions options_;
    RopeTable rope_;  // main MLA (interleaved) and, with the indexer's layout flag, the indexer
    float softmax_scale_ = 1.0f;
    EmbedHead io_;  // embedding (first stage), final norm and lm_head (last stage)
    std::vector<Layer> layers_;
};

// Loads a glm_moe_dsa or deepseek_v32 model for layers `range` (see Model / load_model in models/model.h).
[[nodiscard]] Result<std::unique_ptr<Model>> load_glm_dsa_model(const loader::ModelConfig& config,
                                                                const loader::Checkpoint& checkpoint,
                                                                const loader::LayerRange& range,
                                                                const ModelOptions& options, loader::LoadStats* stats);

}  // namespace penstock::models
