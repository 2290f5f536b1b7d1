// Kimi Linear / Kimi K3 composition: config parsing, loading, the plain pre-norm forward and the K3 AttnRes forward.
#include "models/kimi_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/ops_kda.h"
#include "kernels/profile.h"

namespace penstock::models {

namespace {

using nlohmann::json;

const json* field(const json& obj, const char* name) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status bad_field(const std::string& name, const std::string& want, const json& v) {
    return invalid_argument("config field '" + name + "': expected " + want + ", got " + v.dump());
}

[[nodiscard]] Status read_int(const json& obj, const char* name, const std::string& path, int64_t lo, int64_t hi,
                              int64_t* out) {
    const json* v = field(obj, name);
    if (!v) return ok_status();
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
        return bad_field(path + name, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", *v);
    }
    *out = v->get<int64_t>();
    return ok_status();
}

[[nodiscard]] Status read_bool(const json& obj, const char* name, const std::string& path, bool* out) {
    const json* v = field(obj, name);
    if (!v) return ok_status();
    if (!v->is_boolean()) return bad_field(path + name, "a boolean", *v);
    *out = v->get<bool>();
    return ok_status();
}

[[nodiscard]] Status read_float(const json& obj, const char* name, const std::string& path, float* out) {
    const json* v = field(obj, name);
    if (!v) return ok_status();
    if (!v->is_number()) return bad_field(path + name, "a number", *v);
    *out = v->get<float>();
    return ok_status();
}

// A list of n strings, each one of {a, b}: out[i] = (value == a).
[[nodiscard]] Status read_types(const json& list, const char* name, int64_t n, const char* a, const char* b,
                                std::vector<bool>* out) {
    if (!list.is_array() || static_cast<int64_t>(list.size()) != n) {
        return bad_field(name, "a list of " + std::to_string(n) + " strings (num_hidden_layers)", list);
    }
    out->clear();
    for (const json& e : list) {
        if (!e.is_string() || (e.get<std::string>() != a && e.get<std::string>() != b)) {
            return bad_field(name, std::string("entries \"") + a + "\" or \"" + b + "\"", e);
        }
        out->push_back(e.get<std::string>() == a);
    }
    return ok_status();
}

// linear_attn_config.{kda_layers, full_attn_layers}: 1-based layer numbers that must cover every layer once.
[[nodiscard]] Status read_layer_numbers(const json& lac, int64_t n, std::vector<bool>* is_kda) {
    std::vector<int> seen(static_cast<size_t>(n), 0);
    is_kda->assign(static_cast<size_t>(n), false);
    for (const char* name : {"kda_layers", "full_attn_layers"}) {
        const json& list = lac[name];
        const std::string path = std::string("linear_attn_config.") + name;
        if (!list.is_array()) return bad_field(path, "a list of 1-based layer numbers", list);
        for (const json& e : list) {
            if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > n) {
                return bad_field(path, "layer numbers in [1, " + std::to_string(n) + "]", e);
            }
            const auto i = static_cast<size_t>(e.get<int64_t>() - 1);
            ++seen[i];
            (*is_kda)[i] = std::string(name) == "kda_layers";
        }
    }
    for (int64_t i = 0; i < n; ++i) {
        if (seen[static_cast<size_t>(i)] != 1) {
            return invalid_argument("config field 'linear_attn_config': layer " + std::to_string(i + 1) +
                                    " must be in exactly one of kda_layers / full_attn_layers");
        }
    }
    return ok_status();
}

}  // namespace

Result<KimiConfig> KimiConfig::parse(const loader::ModelConfig& c) {
    const json& raw = c.raw;
    const int64_t n = c.num_hidden_layers;
    constexpr int64_t kMaxDim = int64_t{1} << 20;
    KimiConfig k;
    KdaDims& d = k.kda.dims;
    d.hidden = c.hidden_size;
    d.head_dim = 128;  // KimiLinearConfig defaults
    d.n_heads = 32;
    d.conv_kernel = 4;
    PENSTOCK_RETURN_IF_ERROR(read_int(raw, "linear_head_dim", "", 1, kMaxDim, &d.head_dim));
    PENSTOCK_RETURN_IF_ERROR(read_int(raw, "linear_num_heads", "", 1, kMaxDim, &d.n_heads));
    PENSTOCK_RETURN_IF_ERROR(read_int(raw, "linear_conv_kernel_dim", "", 1, 64, &d.conv_kernel));
    const json* lac = field(raw, "linear_attn_config");
    if (lac && !lac->is_object()) return bad_field("linear_attn_config", "an object", *lac);
    const json empty = json::object();
    const json& la = lac ? *lac : empty;
    const std::string lp = "linear_attn_config.";
    PENSTOCK_RETURN_IF_ERROR(read_int(la, "head_dim", lp, 1, kMaxDim, &d.head_dim));
    PENSTOCK_RETURN_IF_ERROR(read_int(la, "num_heads", lp, 1, kMaxDim, &d.n_heads));
    PENSTOCK_RETURN_IF_ERROR(read_int(la, "short_conv_kernel_size", lp, 1, 64, &d.conv_kernel));
    if (field(la, "gate_lower_bound")) {
        k.kda.gate_form = kernels::KdaGateForm::kLowerBound;
        PENSTOCK_RETURN_IF_ERROR(read_float(la, "gate_lower_bound", lp, &k.kda.gate_lower_bound));
        if (!(k.kda.gate_lower_bound < 0.0f)) {
            return invalid_argument("config field 'linear_attn_config.gate_lower_bound': must be < 0");
        }
    }
    PENSTOCK_RETURN_IF_ERROR(read_bool(la, "use_full_rank_gate", lp, &k.kda.full_rank_output_gate));
    k.kda.norm_eps = static_cast<float>(c.rms_norm_eps);

    if (const json* lt = field(raw, "layer_types")) {
        PENSTOCK_RETURN_IF_ERROR(read_types(*lt, "layer_types", n, "linear_attention", "full_attention", &k.is_kda));
    } else if (field(la, "kda_layers") && field(la, "full_attn_layers")) {
        PENSTOCK_RETURN_IF_ERROR(read_layer_numbers(la, n, &k.is_kda));
    } else {
        for (int64_t l = 0; l < n; ++l) k.is_kda.push_back(!(l > 0 && l % 4 == 0));
    }
    if (const json* mt = field(raw, "mlp_layer_types")) {
        PENSTOCK_RETURN_IF_ERROR(read_types(*mt, "mlp_layer_types", n, "sparse", "dense", &k.is_moe));
    } else {
        for (int64_t l = 0; l < n; ++l) k.is_moe.push_back(l >= c.first_k_dense_replace);
    }
    if (c.n_routed_experts == 0 && std::count(k.is_moe.begin(), k.is_moe.end(), true) > 0) {
        return invalid_argument("config: sparse layers need num_experts > 0");
    }

    bool use_nope = true;
    PENSTOCK_RETURN_IF_ERROR(read_bool(raw, "mla_use_nope", "", &use_nope));
    if (!use_nope)
        return unimplemented("config field 'mla_use_nope': false (RoPE MLA in kimi_linear) is not supported");
    PENSTOCK_RETURN_IF_ERROR(read_bool(raw, "mla_use_output_gate", "", &k.mla_output_gate));
    if (c.hidden_act == "situ") {
        k.act.kind = GluActivation::Kind::kSitu;
        PENSTOCK_RETURN_IF_ERROR(read_float(raw, "activation_situ_beta", "", &k.act.situ_beta));
        PENSTOCK_RETURN_IF_ERROR(read_float(raw, "activation_situ_linear_beta", "", &k.act.situ_linear_beta));
        if (!(k.act.situ_beta > 0.0f) || !(k.act.situ_linear_beta > 0.0f)) {
            return invalid_argument("config: activation_situ_beta and activation_situ_linear_beta must be > 0");
        }
    } else if (c.hidden_act != "silu") {
        return unimplemented("hidden_act '" + c.hidden_act + "' is not supported for kimi_linear (silu, situ)");
    }
    PENSTOCK_RETURN_IF_ERROR(read_int(raw, "routed_expert_hidden_size", "", 0, kMaxDim, &k.latent_dim));
    PENSTOCK_RETURN_IF_ERROR(read_bool(raw, "latent_moe_use_norm", "", &k.latent_norm));
    PENSTOCK_RETURN_IF_ERROR(read_int(raw, "attn_res_block_size", "", 0, n, &k.attn_res_block_size));
    return k;
}

int64_t KimiConfig::n_bank_rows(int64_t n_layers) const {
    // Rows are appended before layers 0, S, 2S, ... < n_layers.
    if (attn_res_block_size <= 0 || n_layers <= 0) return 0;
    return (n_layers - 1) / attn_res_block_size + 1;
}

KimiLinearCache::KimiLinearCache(int64_t n_pages, int64_t n_slots, const std::vector<int64_t>& mla_layers,
                                 int64_t latent_dim, std::vector<int64_t> kda_layers,
                                 const kv_cache::KdaStateShape& shape, const kernels::Context& placement, DType dtype)
    : kda_layers_(std::move(kda_layers)),
      states_(n_slots, static_cast<int64_t>(kda_layers_.size()), shape, kernels::allocator_of(placement),
              placement.device == Device::kCPU
                  ? kv_cache::StateMemoryOps{}
                  : kv_cache::StateMemoryOps{
                        .copy = [placement](
                                    const TensorView& dst,
                                    const TensorView& src) { kernels::transfer({.out = dst, .in = src}, placement); },
                        .zero = [placement](
                                    const TensorView& dst) { kernels::fill({.out = dst, .value = 0.0f}, placement); }}),
      slots_(&states_) {
    for (int64_t l : mla_layers) {
        latent_[l] = std::make_unique<kv_cache::PagedRowCache>(n_pages, latent_dim, l, l + 1, dtype,
                                                               kernels::allocator_of(placement));
    }
}

std::vector<kv_cache::PagedBuffer> KimiLinearCache::state_buffers() const {
    std::vector<kv_cache::PagedBuffer> out;
    const int64_t slots = states_.capacity();
    for (int64_t l = 0; l < states_.n_layers(); ++l) {
        for (const TensorView* v : {&states_.recurrent(l), &states_.conv(l)}) {
            const auto bytes = static_cast<uint64_t>(v->numel() / std::max<int64_t>(slots, 1)) * sizeof(float);
            out.push_back({.layer = kda_layers_[static_cast<size_t>(l)],
                           .kind = v == &states_.recurrent(l) ? kv_cache::BufferKind::kKdaRecurrent
                                                              : kv_cache::BufferKind::kKdaConv,
                           .base = v->data,
                           .page_bytes = bytes,
                           .page_stride = bytes,
                           .n_pages = slots,
                           .on_device = v->device != Device::kCPU});
        }
    }
    return out;
}

kv_cache::PagedRowCache* KimiLinearCache::latent(int64_t layer) {
    auto it = latent_.find(layer);
    PENSTOCK_CHECK(it != latent_.end()) << "layer " << layer << " has no MLA latent cache";
    return it->second.get();
}

Tensor KimiLinearCache::slots_for(const ForwardBatch& batch, const kernels::Context& ctx) {
    const auto n_seqs = static_cast<int64_t>(batch.seqs.size());
    Tensor t = Tensor::empty({n_seqs}, DType::kI32);
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
        const int32_t slot = slots_.slot(batch.seqs[s].request_id);
        if (batch.seqs[s].prefix_len == 0) states_.reset(slot);
        t.ptr<int32_t>()[s] = slot;
    }
    if (ctx.device == Device::kCPU) return t;
    Tensor d = scratch(ctx, {n_seqs}, DType::kI32);
    kernels::transfer({.out = d, .in = t}, ctx);
    return d;
}

Result<std::unique_ptr<Model>> KimiLinearModel::load(const loader::ModelConfig& config,
                                                     const loader::Checkpoint& checkpoint,
                                                     const loader::LayerRange& range, const ModelOptions& options,
                                                     loader::LoadStats* stats) {
    if (range.begin < 0 || range.begin >= range.end || range.end > config.num_hidden_layers) {
        return invalid_argument("layer range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                ") is not inside [0, " + std::to_string(config.num_hidden_layers) + ")");
    }
    auto m = std::make_unique<KimiLinearModel>();
    m->config_ = config;
    m->range_ = range;
    m->options_ = options;
    PENSTOCK_ASSIGN_OR_RETURN(m->kimi_, KimiConfig::parse(config));
    // NoPE MLA: scale = qk_head_dim^-0.5 (transformers 5.17 KimiLinearAttention.scaling; no YaRN mscale).
    m->softmax_scale_ = static_cast<float>(std::pow(static_cast<double>(config.qk_head_dim()), -0.5));

    const int64_t n_layers = config.num_hidden_layers;
    const bool tie = config.tie_word_embeddings;
    // Only the language model's tensors; a multimodal K3 checkpoint prefixes them with "language_model." (stripped
    // below) and carries a vision tower that prefill never reads.
    constexpr std::string_view kLmPrefix = "language_model.";
    auto strip = [&](std::string_view name) {
        return name.starts_with(kLmPrefix) ? name.substr(kLmPrefix.size()) : name;
    };
    auto wanted = [&](std::string_view name) {
        const std::string_view n = strip(name);
        if (!n.starts_with("model.") && !n.starts_with("lm_head.")) return false;
        // The K3 AttnRes output read is model-level but belongs to the last stage.
        return loader::tensor_in_layer_range(n, range, n_layers, tie) ||
               (range.end == n_layers && n.starts_with("model.output_attn_res_"));
    };
    const int64_t block_n = config.fp8 ? config.fp8->block_n : 128;
    const int64_t block_k = config.fp8 ? config.fp8->block_k : 128;
    PENSTOCK_ASSIGN_OR_RETURN(const Fp8Weights fp8, resolve_fp8_weights(config, options));
    const Fp8ReadMode fp8_mode{.native = fp8 == Fp8Weights::kNative, .block_n = block_n, .block_k = block_k};
    PENSTOCK_ASSIGN_OR_RETURN(
        loader::WeightMap loaded,
        checkpoint.load(wanted, loader::LoadOptions{.target = DType::kF32, .dequantize_fp8 = !fp8_mode.native}, block_n,
                        block_k, stats));
    loader::WeightMap weights;
    for (auto& [name, tensor] : loaded) weights.emplace(std::string(strip(name)), std::move(tensor));
    if (options.dtype != DType::kF32 && (options.dtype != DType::kBF16 || options.placement.device == Device::kCPU)) {
        return invalid_argument(
            "--dtype: the cpu backend computes in float32; the cuda backend in float32 or bfloat16");
    }
    WeightReader r(&weights, options.placement, options.dtype, options.dummy_weights_seed, fp8_mode);
    const int64_t h = config.hidden_size;
    const bool attn_res = m->kimi_.attn_res_block_size > 0;
    PENSTOCK_ASSIGN_OR_RETURN(m->io_, EmbedHead::load(r, config, m->is_first_stage(), m->is_last_stage(), options.tp));
    if (m->is_last_stage()) {
        if (attn_res) {
            PENSTOCK_ASSIGN_OR_RETURN(Tensor q, r.take_host("model.output_attn_res_proj.weight", {1, h}));
            m->output_res_.query = r.place_f32(q.reshape({h}));
            PENSTOCK_ASSIGN_OR_RETURN(m->output_res_.norm, r.take("model.output_attn_res_norm.weight", {h}));
        }
    }
    for (int64_t l = range.begin; l < range.end; ++l) {
        PENSTOCK_RETURN_IF_ERROR(m->load_layer(r, l));
    }
    return std::unique_ptr<Model>(std::move(m));
}

Status KimiLinearModel::load_layer(WeightReader& r, int64_t l) {
    const int64_t h = config_.hidden_size;
    const std::string p = "model.layers." + std::to_string(l);
    Layer layer;
    PENSTOCK_ASSIGN_OR_RETURN(layer.input_norm, r.take(p + ".input_layernorm.weight", {h}));
    PENSTOCK_ASSIGN_OR_RETURN(layer.post_norm, r.take(p + ".post_attention_layernorm.weight", {h}));
    if (kimi_.is_kda[static_cast<size_t>(l)]) {
        PENSTOCK_ASSIGN_OR_RETURN(KdaAttention kda, KdaAttention::load(r, p + ".self_attn", kimi_.kda, options_.tp));
        layer.kda = std::make_unique<KdaAttention>(std::move(kda));
        layer.kda_slot_layer = static_cast<int64_t>(kda_layers_.size());
        kda_layers_.push_back(l);
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(MlaAttention mla,
                                  MlaAttention::load(r, p + ".self_attn", config_,
                                                     MlaVariant{.rope = false,
                                                                .output_gate = kimi_.mla_output_gate,
                                                                .fp8_attention = options_.fp8_attention},
                                                     options_.tp));
        layer.mla = std::make_unique<MlaAttention>(std::move(mla));
        mla_layers_.push_back(l);
    }
    // The checkpoint names both FFN kinds `block_sparse_moe`; transformers' modules are `mlp`.
    const std::string ffn = r.contains(p + ".mlp.gate.weight") || r.contains(p + ".mlp.gate_proj.weight")
                                ? p + ".mlp"
                                : p + ".block_sparse_moe";
    if (kimi_.is_moe[static_cast<size_t>(l)]) {
        MoeLoadOptions o{.act = kimi_.act,
                         .latent_dim = kimi_.latent_dim,
                         .latent_norm = kimi_.latent_norm,
                         .latent_norm_eps = static_cast<float>(config_.rms_norm_eps)};
        if (r.contains(ffn + ".experts.0.w1.weight")) {
            o.expert_gate = "w1";
            o.expert_up = "w3";
            o.expert_down = "w2";
        }
        PENSTOCK_ASSIGN_OR_RETURN(MoeBlock moe, MoeBlock::load(r, ffn, config_, o, options_.tp));
        layer.moe = std::make_unique<MoeBlock>(std::move(moe));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(DenseMlp mlp,
                                  DenseMlp::load(r, ffn, h, config_.intermediate_size, kimi_.act, options_.tp));
        layer.mlp = std::make_unique<DenseMlp>(std::move(mlp));
    }
    if (kimi_.attn_res_block_size > 0) {
        for (auto [site, res] : {std::pair{"self_attention", &layer.attn_res}, std::pair{"mlp", &layer.mlp_res}}) {
            PENSTOCK_ASSIGN_OR_RETURN(Tensor q, r.take_host(p + "." + site + "_res_proj.weight", {1, h}));
            res->query = r.place_f32(q.reshape({h}));
            PENSTOCK_ASSIGN_OR_RETURN(res->norm, r.take(p + "." + site + "_res_norm.weight", {h}));
        }
    }
    layers_.push_back(std::move(layer));
    return ok_status();
}

std::unique_ptr<ModelCache> KimiLinearModel::create_cache(int64_t n_pages) const {
    KdaDims d = kimi_.kda.dims;
    d.n_heads = options_.tp.shard(d.n_heads).size();  // this rank's heads
    const kv_cache::KdaStateShape shape{.n_heads = d.n_heads,
                                        .k_dim = d.head_dim,
                                        .v_dim = d.head_dim,
                                        .conv_kernel = d.conv_kernel,
                                        .conv_channels = d.conv_channels()};
    const int64_t n_slots = std::min(n_pages, options_.max_state_slots);
    return std::make_unique<KimiLinearCache>(n_pages, n_slots, mla_layers_,
                                             config_.kv_lora_rank + config_.qk_rope_head_dim, kda_layers_, shape,
                                             options_.placement, options_.dtype);
}

void KimiLinearModel::embed(const BatchLayout& layout, Activations* act, const kernels::Context& ctx) const {
    PENSTOCK_CHECK(io_.embed.defined()) << "embed() called on a stage without the embedding";
    const int64_t h = config_.hidden_size;
    act->hidden = scratch(ctx, {layout.n_tokens, h}, options_.dtype);
    kernels::embedding({.out = act->hidden, .table = io_.embed, .ids = layout.token_ids}, ctx);
    if (kimi_.attn_res_block_size > 0) {  // the activation dtype: bank rows are copies of the stream, so bf16 is exact
        act->bank = scratch_filled(ctx, {layout.n_tokens, kimi_.n_bank_rows(config_.num_hidden_layers), h}, 0.0f,
                                   options_.dtype);
    }
}

void KimiLinearModel::attention(const Layer& layer, int64_t index, const ForwardBatch& batch, const BatchLayout& layout,
                                const TensorView& x, KimiLinearCache* cache, const TensorView& slots,
                                const TensorView& out, const kernels::Context& ctx, const Fp8Activations* xq) const {
    const kernels::ProfileScope scope(ctx, layer.kda ? "kda" : "attn");
    if (layer.kda) {  // context parallelism: KdaAttention gathers what its recurrences need
        layer.kda->forward(layout, x, cache->states().recurrent(layer.kda_slot_layer),
                           cache->states().conv(layer.kda_slot_layer), slots, out, ctx, xq);
    } else {
        layer.mla->forward(batch, layout, x, index, cache->latent(index), no_rope_, softmax_scale_, options_, out, ctx,
                           xq);
    }
}

void KimiLinearModel::ffn(const Layer& layer, int64_t index, const ForwardBatch& batch, const TensorView& x,
                          const TensorView& out, const kernels::Context& ctx, const Fp8Activations* xq) const {
    const kernels::ProfileScope scope(ctx, layer.moe ? "moe" : "mlp");
    if (layer.moe) {
        layer.moe->forward(x, out, ctx, {.pins = options_.decisions, .layer = index, .batch = &batch}, xq);
    } else {
        layer.mlp->forward(x, out, ctx, xq);
    }
}

void KimiLinearModel::forward_layers(const ForwardBatch& batch, const BatchLayout& layout, Activations* act,
                                     ModelCache* cache, const kernels::Context& ctx) const {
    auto* kc = dynamic_cast<KimiLinearCache*>(cache);
    PENSTOCK_CHECK(kc != nullptr) << "kimi_linear needs the cache it created";
    const Tensor slots = kc->slots_for(batch, ctx);
    if (kimi_.attn_res_block_size > 0) {
        forward_layers_attn_res(batch, layout, act, kc, slots, ctx);
        return;
    }
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
        const Fp8Activations* xq = norms.apply(layer.input_norm, act->hidden, sub_out, normed, attn_fp8_input(layer));
        attention(layer, index, batch, layout, normed, kc, slots, sub_out, ctx, xq);
        xq = norms.apply(layer.post_norm, act->hidden, sub_out, normed, ffn_fp8_input(layer));
        ffn(layer, index, batch, normed, sub_out, ctx, xq);
        if (i + 1 == layers_.size()) norms.finish(act->hidden, sub_out);  // the stage's last add, in its layer
    }
}

void KimiLinearModel::attn_res_read(const Activations& act, int64_t n_rows, const ResidualQuery& q,
                                    const TensorView& out, const kernels::Context& ctx) const {
    // The stream, the bank and the mix share the activation dtype (bf16: rows read as f32, the mix rounded once).
    kernels::attn_res_mix({.out = out,
                           .bank = act.bank.view().slice(1, 0, n_rows),
                           .partial = act.hidden,
                           .query = q.query,
                           .norm_weight = q.norm,
                           .eps = static_cast<float>(config_.rms_norm_eps)},
                          ctx);
}

// Block AttnRes (MODELS.md §3.6): act->hidden is the partial block sum p, act->bank the completed block rows.
void KimiLinearModel::forward_layers_attn_res(const ForwardBatch& batch, const BatchLayout& layout, Activations* act,
                                              KimiLinearCache* cache, const TensorView& slots,
                                              const kernels::Context& ctx) const {
    const int64_t n = layout.n_tokens;
    const int64_t h = config_.hidden_size;
    const int64_t block = kimi_.attn_res_block_size;
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    PENSTOCK_CHECK(act->bank.defined()) << "AttnRes needs the bank from embed() / the previous stage";
    Tensor mixed = scratch(ctx, {n, h}, act->hidden.dtype());
    Tensor sub_out = scratch(ctx, {n, h}, act->hidden.dtype());
    BlockNorms norms(n, h, eps, ctx);  // the FP8 rows only: each norm reads a fresh mix, not hidden + sub_out
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& layer = layers_[i];
        const int64_t index = range_.begin + static_cast<int64_t>(i);
        const kernels::ProfileScope layer_scope(ctx, "layer");
        int64_t rows = kimi_.n_bank_rows(index);  // completed rows before this layer
        {
            const kernels::ProfileScope scope(ctx, "attn_res");
            if (rows == 0) {
                kernels::copy({.out = mixed, .in = act->hidden}, ctx);
            } else {
                attn_res_read(*act, rows, layer.attn_res, mixed, ctx);
            }
            if (index % block == 0) {  // the partial sum becomes a completed block row; a new block starts at 0
                kernels::copy({.out = act->bank.view().select(1, rows), .in = act->hidden}, ctx);
                kernels::fill({.out = act->hidden, .value = 0.0f}, ctx);
                ++rows;
            }
        }
        const Fp8Activations* xq = norms.fp8_rows(attn_fp8_input(layer));
        block_rms_norm(layer.input_norm, mixed, mixed, eps, ctx, {}, xq);
        attention(layer, index, batch, layout, mixed, cache, slots, sub_out, ctx, xq);
        residual_add(act->hidden, sub_out, ctx);
        {
            const kernels::ProfileScope scope(ctx, "attn_res");
            attn_res_read(*act, rows, layer.mlp_res, mixed, ctx);
        }
        xq = norms.fp8_rows(ffn_fp8_input(layer));
        block_rms_norm(layer.post_norm, mixed, mixed, eps, ctx, {}, xq);
        ffn(layer, index, batch, mixed, sub_out, ctx, xq);
        residual_add(act->hidden, sub_out, ctx);
    }
}

Tensor KimiLinearModel::compute_logits(const BatchLayout& layout, const Activations& act,
                                       const kernels::Context& ctx) const {
    const int64_t h = config_.hidden_size;
    Tensor final_hidden;  // [n_tokens, hidden]: the stream, or the AttnRes output read
    if (kimi_.attn_res_block_size > 0) {
        final_hidden = scratch(ctx, {layout.n_tokens, h}, act.hidden.dtype());
        attn_res_read(act, kimi_.n_bank_rows(config_.num_hidden_layers), output_res_, final_hidden, ctx);
    } else {
        final_hidden = act.hidden;
    }
    return io_.logits(layout, final_hidden, ctx);
}

Result<std::unique_ptr<Model>> load_kimi_linear_model(const loader::ModelConfig& config,
                                                      const loader::Checkpoint& checkpoint,
                                                      const loader::LayerRange& range, const ModelOptions& options,
                                                      loader::LoadStats* stats) {
    return KimiLinearModel::load(config, checkpoint, range, options, stats);
}

}  // namespace penstock::models
