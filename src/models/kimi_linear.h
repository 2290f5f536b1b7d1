// Kimi Linear family (`model_type: kimi_linear`; reference/MODELS.md §3, transformers 5.17 KimiLinearForCausalLM):
// pre-norm decoder layers of KDA (`linear_attention`) or NoPE MLA (`full_attention`), each followed by a dense SwiGLU
// (`dense`) or the `block_sparse_moe` MoE (`sparse`). Plus the Kimi K3 extensions, switched on by config fields:
// `mla_use_output_gate` (gated MLA), `linear_attn_config.{gate_lower_bound, use_full_rank_gate}` (K3 KDA gate),
// `hidden_act: situ` (SiTU with activation_situ_beta / activation_situ_linear_beta), `routed_expert_hidden_size`
// (latent MoE, `latent_moe_use_norm`) and `attn_res_block_size` (Block Attention Residuals, MODELS.md §3.6).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "kv_cache/paged_cache.h"
#include "kv_cache/state_pool.h"
#include "models/kda_layer.h"
#include "models/mla.h"
#include "models/model.h"
#include "models/moe.h"

namespace penstock::models {

// The family's config beyond loader::ModelConfig, parsed from config.raw (kimi field names).
struct KimiConfig {
    std::vector<bool> is_kda;  // per layer: layer_types[l] == "linear_attention" (else MLA)
    std::vector<bool> is_moe;  // per layer: mlp_layer_types[l] == "sparse" (else dense)
    KdaOptions kda;
    bool mla_output_gate = false;
    GluActivation act;
    int64_t latent_dim = 0;  // routed_expert_hidden_size (0: plain MoE)
    bool latent_norm = false;
    int64_t attn_res_block_size = 0;  // 0: plain residual stream

    // layer_types, else linear_attn_config.{kda_layers, full_attn_layers} (1-based), else transformers' default
    // (full attention at l % 4 == 0, l > 0); mlp_layer_types, else dense below first_k_dense_replace.
    [[nodiscard]] static Result<KimiConfig> parse(const loader::ModelConfig& config);
    int64_t n_bank_rows(int64_t n_layers) const;  // AttnRes rows appended over n_layers layers
};

// The cache of a Kimi stage: the MLA latent rows of its MLA layers (one PagedRowCache each, row [c ; k_shared]) and
// the KDA state pool (one slot per admitted request, every KDA layer).
class KimiLinearCache final : public ModelCache {
public:
    // Latent rows (`dtype`) and KDA states (f32) on `placement`'s device; `kda_layers` are the KDA layers' indices in
    // state pool order.
    KimiLinearCache(int64_t n_pages, int64_t n_slots, const std::vector<int64_t>& mla_layers, int64_t latent_dim,
                    std::vector<int64_t> kda_layers, const kv_cache::KdaStateShape& shape,
                    const kernels::Context& placement = kernels::Context{}, DType dtype = DType::kF32);

    [[nodiscard]] Status admit(int64_t request_id) override { return slots_.acquire(request_id); }
    void release(int64_t request_id) override { slots_.release(request_id); }
    int64_t n_admitted() const override { return slots_.n_requests(); }
    std::vector<kv_cache::PagedBuffer> paged_buffers() const override {
        std::vector<kv_cache::PagedBuffer> out;
        for (const auto& [layer, c] : latent_) {
            for (const kv_cache::PagedBuffer& b : c->buffers()) out.push_back(b);
        }
        return out;
    }
    bool has_request_state() const override { return states_.n_layers() > 0; }
    void reserve_state_storage() override { states_.reserve_all(); }
    std::vector<kv_cache::PagedBuffer> state_buffers() const override;
    std::optional<int32_t> state_slot(int64_t request_id) const override {
        return slots_.contains(request_id) ? std::optional<int32_t>(slots_.slot(request_id)) : std::nullopt;
    }

    kv_cache::PagedRowCache* latent(int64_t layer);
    kv_cache::KdaStatePool& states() { return states_; }
    // [n_seqs] i32 on ctx's device: each batch sequence's state slot (every request must have been admitted), built
    // on the host from the batch and transferred once per forward. A sequence whose chunk starts at position 0 gets
    // its state zeroed first: it starts over, as its KV positions do.
    Tensor slots_for(const ForwardBatch& batch, const kernels::Context& ctx);

private:
    std::map<int64_t, std::unique_ptr<kv_cache::PagedRowCache>> latent_;
    std::vector<int64_t> kda_layers_;
    kv_cache::KdaStatePool states_;
    kv_cache::RequestStateSlots slots_;
};

class KimiLinearModel final : public Model {
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
    int64_t bank_rows_before(int64_t layer) const override { return kimi_.n_bank_rows(layer); }
    Tensor compute_logits(const BatchLayout& layout, const Activations& act,
                          const kernels::Context& ctx) const override;

private:
    struct ResidualQuery {  // one AttnRes read site
        Tensor query;       // [hidden] f32
        Tensor norm;        // [hidden] f32
    };
    struct Layer {
        Tensor input_norm;                  // [hidden] f32
        Tensor post_norm;                   // [hidden] f32
        std::unique_ptr<KdaAttention> kda;  // linear_attention layers
        int64_t kda_slot_layer = -1;        // index into the stage's KDA state pool
        std::unique_ptr<MlaAttention> mla;  // full_attention layers
        std::unique_ptr<DenseMlp> mlp;
        std::unique_ptr<MoeBlock> moe;
        ResidualQuery attn_res, mlp_res;  // K3 AttnRes only
    };

    [[nodiscard]] Status load_layer(WeightReader& r, int64_t l);
    // The sub-layer input of AttnRes read `q` before layer l: mix(partial, the bank's first n rows).
    void attn_res_read(const Activations& act, int64_t n_rows, const ResidualQuery& q, const TensorView& out,
                       const kernels::Context& ctx) const;
    void forward_layers_attn_res(const ForwardBatch& batch, const BatchLayout& layout, Activations* act,
                                 KimiLinearCache* cache, const TensorView& slots, const kernels::Context& ctx) const;
    // xq (attention, ffn): x's FP8 rows from the norm that made x, or null (MlaAttention / MoeBlock forward).
    void attention(const Layer& layer, int64_t index, const ForwardBatch& batch, const BatchLayout& layout,
                   const TensorView& x, KimiLinearCache* cache, const TensorView& slots, const TensorView& out,
                   const kernels::Context& ctx, const Fp8Activations* xq) const;
    // out = the layer's MoE or dense MLP of x (profiling scope "moe" / "mlp").
    void ffn(const Layer& layer, int64_t index, const ForwardBatch& batch, const TensorView& x, const TensorView& out,
             const kernels::Context& ctx, const Fp8Activations* xq) const;
    // Whether the layer's attention (MLA or KDA) and its ffn read x in FP8.
    static bool attn_fp8_input(const Layer& layer) {
        return layer.mla ? layer.mla->fp8_input() : layer.kda && layer.kda->fp8_input();
    }
    static bool ffn_fp8_input(const Layer& layer) {
        return layer.moe ? layer.moe->fp8_input() : layer.mlp && layer.mlp->fp8_gate_up();
    }

    loader::ModelConfig config_;
    KimiConfig kimi_;
    loader::LayerRange range_;
    ModelOptions options_;
    RopeTable no_rope_;  // NoPE MLA: never read
    float softmax_scale_ = 1.0f;
    std::vector<int64_t> mla_layers_;  // MLA layer indices in the range
    std::vector<int64_t> kda_layers_;  // KDA layer indices in the range (state pool order)
    EmbedHead io_;                     // embedding (first stage), final norm and lm_head (last stage)
    ResidualQuery output_res_;         // K3 AttnRes output read (last stage)
    std::vector<Layer> layers_;
};

// The registry entry point for `kimi_linear`.
[[nodiscard]] Result<std::unique_ptr<Model>> load_kimi_linear_model(const loader::ModelConfig& config,
                                                                    const loader::Checkpoint& checkpoint,
                                                                    const loader::LayerRange& range,
                                                                    const ModelOptions& options,
                                                                    loader::LoadStats* stats);

}  // namespace penstock::models
