// DeepSeek-V3 composition.
#include "models/deepseek_v3.h"

#include <algorithm>
#include <string>

#include "kernels/profile.h"

namespace penstock::models {

Result<std::unique_ptr<Model>> DeepseekV3Model::load(const loader::ModelConfig& config,
                                                     const loader::Checkpoint& checkpoint,
                                                     const loader::LayerRange& range, const ModelOptions& options,
                                                     loader::LoadStats* stats) {
    if (range.begin < 0 || range.begin >= range.end || range.end > config.num_hidden_layers) {
        return invalid_argument("layer range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                ") is not inside [0, " + std::to_string(config.num_hidden_layers) + ")");
    }
    if (config.hidden_act != "silu") {
        return unimplemented("hidden_act '" + config.hidden_act + "' is not supported for deepseek_v3 (silu)");
    }
    auto m = std::make_unique<DeepseekV3Model>();
    m->config_ = config;
    m->range_ = range;
    m->options_ = options;
    PENSTOCK_ASSIGN_OR_RETURN(m->rope_, make_rope_table(config));
    m->softmax_scale_ = mla_softmax_scale(config);

    const int64_t n_layers = config.num_hidden_layers;
    const bool tie = config.tie_word_embeddings;
    const int64_t block_n = config.fp8 ? config.fp8->block_n : 128;
    const int64_t block_k = config.fp8 ? config.fp8->block_k : 128;
    PENSTOCK_ASSIGN_OR_RETURN(const Fp8Weights fp8, resolve_fp8_weights(config, options));
    const Fp8ReadMode fp8_mode{.native = fp8 == Fp8Weights::kNative, .block_n = block_n, .block_k = block_k};
    PENSTOCK_ASSIGN_OR_RETURN(
        loader::WeightMap weights,
        checkpoint.load(
            [&](std::string_view name) { return loader::tensor_in_layer_range(name, range, n_layers, tie); },
            loader::LoadOptions{.target = DType::kF32, .dequantize_fp8 = !fp8_mode.native}, block_n, block_k, stats));
    if (options.dtype != DType::kF32 && (options.dtype != DType::kBF16 || options.placement.device == Device::kCPU)) {
        return invalid_argument(
            "--dtype: the cpu backend computes in float32; the cuda backend in float32 or bfloat16");
    }
    WeightReader r(&weights, options.placement, options.dtype, options.dummy_weights_seed, fp8_mode);
    m->rope_.inv_freq = r.place(std::move(m->rope_.inv_freq));

    const int64_t h = config.hidden_size;
    PENSTOCK_ASSIGN_OR_RETURN(m->io_, EmbedHead::load(r, config, m->is_first_stage(), m->is_last_stage(), options.tp));
    for (int64_t l = range.begin; l < range.end; ++l) {
        const std::string p = "model.layers." + std::to_string(l);
        Layer layer;
        PENSTOCK_ASSIGN_OR_RETURN(layer.input_norm, r.take(p + ".input_layernorm.weight", {h}));
        PENSTOCK_ASSIGN_OR_RETURN(layer.post_norm, r.take(p + ".post_attention_layernorm.weight", {h}));
        PENSTOCK_ASSIGN_OR_RETURN(MlaAttention attn,
                                  MlaAttention::load(r, p + ".self_attn", config,
                                                     MlaVariant{.fp8_attention = options.fp8_attention}, options.tp));
        layer.attn = std::make_unique<MlaAttention>(std::move(attn));
        PENSTOCK_ASSIGN_OR_RETURN(FeedForward ffn, FeedForward::load(r, p + ".mlp", config, config.is_moe_layer(l),
                                                                     config.intermediate_size, options.tp));
        layer.ffn = std::make_unique<FeedForward>(std::move(ffn));
        m->layers_.push_back(std::move(layer));
    }
    return std::unique_ptr<Model>(std::move(m));
}

std::unique_ptr<ModelCache> DeepseekV3Model::create_cache(int64_t n_pages) const {
    return std::make_unique<MlaModelCache>(n_pages, config_.kv_lora_rank + config_.qk_rope_head_dim, range_.begin,
                                           range_.end, kernels::allocator_of(options_.placement), options_.dtype);
}

void DeepseekV3Model::embed(const BatchLayout& layout, Activations* act, const kernels::Context& ctx) const {
    PENSTOCK_CHECK(io_.embed.defined()) << "embed() called on a stage without the embedding";
    act->hidden = scratch(ctx, {layout.n_tokens, config_.hidden_size}, options_.dtype);
    kernels::embedding({.out = act->hidden, .table = io_.embed, .ids = layout.token_ids}, ctx);
}

void DeepseekV3Model::forward_layers(const ForwardBatch& batch, const BatchLayout& layout, Activations* act,
                                     ModelCache* cache, const kernels::Context& ctx) const {
    auto* mla_cache = dynamic_cast<MlaModelCache*>(cache);
    PENSTOCK_CHECK(mla_cache != nullptr) << "deepseek_v3 needs the cache it created";
    const int64_t n = layout.n_tokens;
    const int64_t h = config_.hidden_size;
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    Tensor normed = scratch(ctx, {n, h}, act->hidden.dtype());
    Tensor sub_out = scratch(ctx, {n, h}, act->hidden.dtype());
    BlockNorms norms(n, h, eps, ctx);
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& layer = layers_[i];
        const int64_t index = range_.begin + static_cast<int64_t>(i);
        const kernels::ProfileScope layer_scope(ctx, "layer");
        const Fp8Activations* xq = norms.apply(layer.input_norm, act->hidden, sub_out, normed, layer.attn->fp8_input());
        {
            const kernels::ProfileScope scope(ctx, "attn");
            layer.attn->forward(batch, layout, normed, index, &mla_cache->latent, rope_, softmax_scale_, options_,
                                sub_out, ctx, xq);
        }
        xq = norms.apply(layer.post_norm, act->hidden, sub_out, normed, layer.ffn->fp8_input());
        {
            const kernels::ProfileScope scope(ctx, layer.ffn->is_moe() ? "moe" : "mlp");
            layer.ffn->forward(normed, sub_out, ctx, {.pins = options_.decisions, .layer = index, .batch = &batch}, xq);
        }
        if (i + 1 == layers_.size()) norms.finish(act->hidden, sub_out);  // the stage's last add, in its layer
    }
}

Tensor DeepseekV3Model::compute_logits(const BatchLayout& layout, const Activations& act,
                                       const kernels::Context& ctx) const {
    return io_.logits(layout, act.hidden, ctx);
}

}  // namespace penstock::models
