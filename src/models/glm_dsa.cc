// DSA family composition (glm_moe_dsa, deepseek_v32): config, loading and the layer forward.
#include "models/glm_dsa.h"

#include <algorithm>
#include <optional>
#include <string>

#include "kernels/fork.h"
#include "kernels/ops_dsa.h"
#include "kernels/profile.h"

namespace penstock::models {

namespace {

using nlohmann::json;

std::string render(const json& v) {
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// A positive integer field of config.raw, or `fallback` when absent / null.
Status read_positive(const json& raw, const char* field, int64_t* out) {
    if (!raw.contains(field) || raw[field].is_null()) return ok_status();
    const json& v = raw[field];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 30)) {
        return invalid_argument(std::string("config field '") + field + "': expected a positive integer, got " +
                                render(v));
    }
    *out = v.get<int64_t>();
    return ok_status();
}

// A list of strings with `n` entries, each `a` (-> 1) or `b` (-> 0).
Result<std::vector<uint8_t>> read_choice_list(const json& v, const char* field, int64_t n, const char* a,
                                              const char* b) {
    if (!v.is_array() || static_cast<int64_t>(v.size()) != n) {
        return invalid_argument(std::string("config field '") + field + "': expected a list of " + std::to_string(n) +
                                " entries (one per layer), got " + render(v));
    }
    std::vector<uint8_t> out;
    for (const json& e : v) {
        if (e.is_string() && e.get<std::string>() == a) {
            out.push_back(1);
        } else if (e.is_string() && e.get<std::string>() == b) {
            out.push_back(0);
        } else {
            return invalid_argument(std::string("config field '") + field + "': entries must be \"" + a + "\" or \"" +
                                    b + "\", got " + render(e));
        }
    }
    return out;
}

Result<std::vector<uint8_t>> read_indexer_types(const json& raw, int64_t n_layers) {
    if (raw.contains("indexer_types") && !raw["indexer_types"].is_null()) {
        return read_choice_list(raw["indexer_types"], "indexer_types", n_layers, "full", "shared");
    }
    if (raw.contains("index_topk_pattern") && !raw["index_topk_pattern"].is_null()) {
        const json& p = raw["index_topk_pattern"];
        if (!p.is_string()) return read_choice_list(p, "index_topk_pattern", n_layers, "full", "shared");
        const std::string s = p.get<std::string>();
        if (static_cast<int64_t>(s.size()) != n_layers || s.find_first_not_of("FS") != std::string::npos) {
            return invalid_argument("config field 'index_topk_pattern': expected " + std::to_string(n_layers) +
                                    " characters F/S, got " + render(p));
        }
        std::vector<uint8_t> out;
        for (char c : s) out.push_back(c == 'F' ? 1 : 0);
        return out;
    }
    int64_t freq = 1;
    int64_t offset = 2;
    if (raw.contains("index_topk_freq") && raw["index_topk_freq"].is_number_integer()) {
        freq = std::max<int64_t>(raw["index_topk_freq"].get<int64_t>(), 1);  // transformers: max(freq, 1)
    } else if (raw.contains("index_topk_freq") && !raw["index_topk_freq"].is_null()) {
        return invalid_argument("config field 'index_topk_freq': expected an integer, got " +
                                render(raw["index_topk_freq"]));
    }
    if (raw.contains("index_skip_topk_offset") && raw["index_skip_topk_offset"].is_number_integer()) {
        offset = raw["index_skip_topk_offset"].get<int64_t>();
    } else if (raw.contains("index_skip_topk_offset") && !raw["index_skip_topk_offset"].is_null()) {
        return invalid_argument("config field 'index_skip_topk_offset': expected an integer, got " +
                                render(raw["index_skip_topk_offset"]));
    }
    std::vector<uint8_t> out;
    for (int64_t i = 0; i < n_layers; ++i) out.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? 1 : 0);
    return out;
}

}  // namespace

Result<DsaConfig> parse_dsa_config(const loader::ModelConfig& c) {
    const bool glm = c.model_type == "glm_moe_dsa";
    if (!glm && c.model_type != "deepseek_v32") {
        return invalid_argument("model_type '" + c.model_type + "' is not a DSA family type");
    }
    const json& raw = c.raw;
    DsaConfig d;
    d.index_n_heads = glm ? 32 : 64;
    d.indexer_rope_interleave = glm;
    PENSTOCK_RETURN_IF_ERROR(read_positive(raw, "index_topk", &d.index_topk));
    PENSTOCK_RETURN_IF_ERROR(read_positive(raw, "index_n_heads", &d.index_n_heads));
    PENSTOCK_RETURN_IF_ERROR(read_positive(raw, "index_head_dim", &d.index_head_dim));
    if (raw.contains("indexer_rope_interleave") && !raw["indexer_rope_interleave"].is_null()) {
        if (!raw["indexer_rope_interleave"].is_boolean()) {
            return invalid_argument("config field 'indexer_rope_interleave': expected a boolean, got " +
                                    render(raw["indexer_rope_interleave"]));
        }
        d.indexer_rope_interleave = raw["indexer_rope_interleave"].get<bool>();
    }
    const int64_t n_layers = c.num_hidden_layers;
    if (glm) {
        PENSTOCK_ASSIGN_OR_RETURN(d.full_indexer, read_indexer_types(raw, n_layers));
    } else {
        d.full_indexer.assign(static_cast<size_t>(n_layers), 1);  // DeepseekV32: every layer runs its indexer
    }
    if (n_layers > 0 && d.full_indexer[0] == 0) {
        return invalid_argument("config field 'indexer_types': layer 0 is \"shared\" but no earlier full layer exists");
    }
    if (raw.contains("mlp_layer_types") && !raw["mlp_layer_types"].is_null()) {
        PENSTOCK_ASSIGN_OR_RETURN(
            d.moe_mlp, read_choice_list(raw["mlp_layer_types"], "mlp_layer_types", n_layers, "sparse", "dense"));
    } else {
        const int64_t n_dense = std::min(c.first_k_dense_replace, n_layers);
        for (int64_t i = 0; i < n_layers; ++i) d.moe_mlp.push_back(i >= n_dense ? 1 : 0);
    }
    if (c.qk_rope_head_dim > d.index_head_dim) {
        return invalid_argument("config field 'index_head_dim': " + std::to_string(d.index_head_dim) +
                                " is smaller than qk_rope_head_dim " + std::to_string(c.qk_rope_head_dim));
    }
    if (c.q_lora_rank <= 0) {
        return invalid_argument("config field 'q_lora_rank': the DSA indexer reads the q latent, so it must be set");
    }
    for (int64_t i = 0; i < n_layers; ++i) {
        if (d.moe_mlp[static_cast<size_t>(i)] && c.n_routed_experts <= 0) {
            return invalid_argument("config field 'mlp_layer_types': layer " + std::to_string(i) +
                                    " is sparse but n_routed_experts is 0");
        }
    }
    return d;
}

namespace {

// DeepseekV32Config defaults that differ from the DeepseekV3Config ones the generic parser applied.
loader::ModelConfig family_config(const loader::ModelConfig& in) {
    loader::ModelConfig c = in;
    if (c.model_type == "deepseek_v32" && !c.raw.contains("max_position_embeddings")) {
        const int64_t old = c.max_position_embeddings;
        c.max_position_embeddings = 163840;
        const json* rp = c.raw.contains("rope_parameters") ? &c.raw["rope_parameters"]
                         : c.raw.contains("rope_scaling")  ? &c.raw["rope_scaling"]
                                                           : nullptr;
        const bool explicit_orig = rp && rp->is_object() && rp->contains("original_max_position_embeddings");
        if (c.rope.type == "yarn" && !explicit_orig && c.rope.original_max_position_embeddings == old) {
            c.rope.original_max_position_embeddings = c.max_position_embeddings;
        }
    }
    return c;
}

// ModelOptions::dsa_logits_budget_bytes, or the backend default when 0: on CUDA SPEC §3's min(20% of the memory left
// outside the static pool, 30% of device memory), read once per forward (kernels::device_memory); on the CPU a fixed
// 256 MiB.
int64_t logits_budget_bytes(const ModelOptions& options, const kernels::Context& ctx) {
    if (options.dsa_logits_budget_bytes > 0) return options.dsa_logits_budget_bytes;
    switch (ctx.device) {
        case Device::kCPU:
            return kDsaCpuLogitsBudgetBytes;
        case Device::kCUDA: {
            const kernels::DeviceMemory m = kernels::device_memory(ctx);
            return dsa_gpu_logits_budget_bytes(m.free_bytes, m.total_bytes);
        }
    }
    return 0;
}

}  // namespace

Result<std::unique_ptr<Model>> GlmDsaModel::load(const loader::ModelConfig& in_config,
                                                 const loader::Checkpoint& checkpoint, const loader::LayerRange& range,
                                                 const ModelOptions& options, loader::LoadStats* stats) {
    const loader::ModelConfig config = family_config(in_config);
    if (range.begin < 0 || range.begin >= range.end || range.end > config.num_hidden_layers) {
        return invalid_argument("layer range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                ") is not inside [0, " + std::to_string(config.num_hidden_layers) + ")");
    }
    if (config.hidden_act != "silu") {
        return unimplemented("hidden_act '" + config.hidden_act + "' is not supported for " + config.model_type);
    }
    PENSTOCK_ASSIGN_OR_RETURN(DsaConfig dsa, parse_dsa_config(config));
    auto m = std::make_unique<GlmDsaModel>();
    m->config_ = config;
    m->dsa_ = dsa;
    m->range_ = range;
    m->options_ = options;
    PENSTOCK_ASSIGN_OR_RETURN(m->rope_, make_rope_table(config));
    m->rope_.interleaved = true;  // transformers applies apply_rotary_pos_emb_interleave unconditionally here
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
    const DsaIndexerDims ixd{.hidden = h,
                             .q_lora_rank = config.q_lora_rank,
                             .n_heads = dsa.index_n_heads,
                             .head_dim = dsa.index_head_dim,
                             .rope_dim = m->rope_.rot_dim,
                             .top_k = dsa.index_topk,
                             .rope_interleaved = dsa.indexer_rope_interleave};
    for (int64_t l = range.begin; l < range.end; ++l) {
        const std::string p = "model.layers." + std::to_string(l);
        Layer layer;
        PENSTOCK_ASSIGN_OR_RETURN(layer.input_norm, r.take(p + ".input_layernorm.weight", {h}));
        PENSTOCK_ASSIGN_OR_RETURN(layer.post_norm, r.take(p + ".post_attention_layernorm.weight", {h}));
        PENSTOCK_ASSIGN_OR_RETURN(MlaAttention attn,
                                  MlaAttention::load(r, p + ".self_attn", config, MlaVariant{}, options.tp));
        layer.attn = std::make_unique<MlaAttention>(std::move(attn));
        if (dsa.full_indexer[static_cast<size_t>(l)]) {
            PENSTOCK_ASSIGN_OR_RETURN(DsaIndexer ix, DsaIndexer::load(r, p + ".self_attn.indexer", ixd));
            layer.indexer = std::make_unique<DsaIndexer>(std::move(ix));
        }
        PENSTOCK_ASSIGN_OR_RETURN(FeedForward ffn,
                                  FeedForward::load(r, p + ".mlp", config, dsa.moe_mlp[static_cast<size_t>(l)],
                                                    config.intermediate_size, options.tp));
        layer.ffn = std::make_unique<FeedForward>(std::move(ffn));
        m->layers_.push_back(std::move(layer));
    }
    return std::unique_ptr<Model>(std::move(m));
}

std::unique_ptr<ModelCache> GlmDsaModel::create_cache(int64_t n_pages) const {
    std::vector<int64_t> full;
    for (int64_t l = range_.begin; l < range_.end; ++l) {
        if (dsa_.full_indexer[static_cast<size_t>(l)]) full.push_back(l);
    }
    return std::make_unique<DsaModelCache>(n_pages, config_.kv_lora_rank + config_.qk_rope_head_dim, range_.begin,
                                           range_.end, dsa_.index_head_dim, full, options_.dsa_fp8_indexer,
                                           kernels::allocator_of(options_.placement), options_.dtype);
}

void GlmDsaModel::embed(const BatchLayout& layout, Activations* act, const kernels::Context& ctx) const {
    PENSTOCK_CHECK(io_.embed.defined()) << "embed() called on a stage without the embedding";
    act->hidden = scratch(ctx, {layout.n_tokens, config_.hidden_size}, options_.dtype);
    kernels::embedding({.out = act->hidden, .table = io_.embed, .ids = layout.token_ids}, ctx);
}

bool GlmDsaModel::sparse(const ForwardBatch& batch) const {
    int64_t longest_kv = 0;
    for (const SeqChunk& s : batch.seqs) {
        longest_kv = std::max(longest_kv, s.prefix_len + static_cast<int64_t>(s.token_ids.size()));
    }
    const int64_t dense_max = options_.dsa_dense_max_kv < 0 ? dsa_.index_topk : options_.dsa_dense_max_kv;
    return longest_kv > dense_max;
}

int64_t GlmDsaModel::topk_cols_after(const ForwardBatch& batch) const {
    const int64_t next = range_.end;
    if (next >= config_.num_hidden_layers || dsa_.full_indexer[static_cast<size_t>(next)] || !sparse(batch)) return 0;
    return dsa_.index_topk;
}

void GlmDsaModel::forward_layers(const ForwardBatch& batch, const BatchLayout& layout, Activations* act,
                                 ModelCache* cache, const kernels::Context& ctx) const {
    auto* dsa_cache = dynamic_cast<DsaModelCache*>(cache);
    PENSTOCK_CHECK(dsa_cache != nullptr) << config_.model_type << " needs the cache it created";
    const int64_t n = layout.n_tokens;
    const int64_t h = config_.hidden_size;
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    const bool dense = !sparse(batch);
    const int64_t budget = logits_budget_bytes(options_, ctx);

    Tensor normed = scratch(ctx, {n, h}, act->hidden.dtype());
    Tensor sub_out = scratch(ctx, {n, h}, act->hidden.dtype());
    // Context parallelism (SPEC §4): every op runs on this rank's rows; the chunk's MLA latents and index K are
    // all-gathered so that each rank caches the whole chunk, and the indexer scores and the sparse attention read
    // the whole cached prefix + chunk for this rank's rows only.
    const BatchLayout& whole = layout.cp ? layout.cp->full : layout;
    // [n, index_topk] i32: the latest full layer's selection for this layout's rows (sparse path); a stage starting
    // at a shared layer gets the previous stage's from the pipeline.
    Tensor key_pos = act->dsa_topk;
    BlockNorms norms(n, h, eps, ctx);
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& layer = layers_[i];
        const int64_t index = range_.begin + static_cast<int64_t>(i);
        const kernels::ProfileScope layer_scope(ctx, "layer");
        const Fp8Activations* xq = norms.apply(layer.input_norm, act->hidden, sub_out, normed, layer.attn->fp8_input());
        std::optional<kernels::ProfileScope> attn_scope(std::in_place, ctx, "attn");
        if (dense) {
            layer.attn->forward(batch, layout, normed, index, &dsa_cache->latent, rope_, softmax_scale_, options_,
                                sub_out, ctx, xq);
            if (layer.indexer) {
                const kernels::ProfileScope scope(ctx, "indexer");
                const kernels::ProfileScope keys_scope(ctx, "k_write");
                layer.indexer->write_keys(layout, normed, rope_, index, &dsa_cache->index_k, ctx);
            }
        } else {
            const MlaAttention::Projection proj = layer.attn->project(layout, normed, rope_, ctx, xq);
            {
                const kernels::ProfileScope scope(ctx, "kv_write");
                const Tensor kv_rows = layout.cp ? cp_gather_rows(layout, proj.kv, ctx) : proj.kv;
                kernels::paged_write({.cache = dsa_cache->latent.layer_view(index),  // the chunk's latents join first
                                      .rows = kv_rows,
                                      .page_table = whole.page_table,
                                      .cu_rows = whole.cu_seqlens_q,
                                      .pos0 = whole.q_pos0},
                                     ctx);
            }
            // The sparse attention's selection-free inputs (the latent rows, q absorbed) run on a fork
            // (kernels/fork.h; CUDA: the side stream) beside a full layer's indexer, which reads other buffers.
            std::optional<kernels::Fork> fork;
            if (layer.indexer) fork.emplace(ctx);
            const SparseInputs in =
                sparse_inputs(layout, layer, index, normed, dsa_cache, proj, ctx, fork ? fork->ctx() : ctx);
            if (layer.indexer) {
                const kernels::ProfileScope scope(ctx, "indexer");
                {
                    const kernels::ProfileScope keys_scope(ctx, "k_write");
                    layer.indexer->write_keys(layout, normed, rope_, index, &dsa_cache->index_k, ctx);
                }
                key_pos = layer.indexer->select(batch, layout, normed, proj.cq, rope_, index, dsa_cache->index_k,
                                                budget, options_.dsa_fp8_accumulate, ctx);
                if (options_.decisions) options_.decisions->dsa_topk(batch, index, key_pos, ctx);  // test hook
            }
            if (fork) fork->join();
            PENSTOCK_CHECK(key_pos.defined()) << "shared layer " << index << " has no earlier full layer's top-k";
            attend_sparse(batch, layout, layer, normed, key_pos, in, sub_out, ctx);
        }
        attn_scope.reset();
        xq = norms.apply(layer.post_norm, act->hidden, sub_out, normed, layer.ffn->fp8_input());
        {
            const kernels::ProfileScope scope(ctx, layer.ffn->is_moe() ? "moe" : "mlp");
            layer.ffn->forward(normed, sub_out, ctx, {.pins = options_.decisions, .layer = index, .batch = &batch}, xq);
        }
        if (i + 1 == layers_.size()) norms.finish(act->hidden, sub_out);  // the stage's last add, in its layer
    }
    act->dsa_topk = dense ? Tensor() : key_pos;  // for a next stage that starts at a shared layer
}

GlmDsaModel::SparseInputs GlmDsaModel::sparse_inputs(const BatchLayout& layout, const Layer& layer, int64_t index,
                                                     const TensorView& x, DsaModelCache* cache,
                                                     const MlaAttention::Projection& proj, const kernels::Context& ctx,
                                                     const kernels::Context& work) const {
    const MlaDims& d = layer.attn->dims();
    const int64_t n = layout.n_tokens;
    SparseInputs in;
    const kernels::ProfileScope core_scope(work, "core");
    std::optional<kernels::ProfileScope> scope(std::in_place, work, "gather");
    // Every sequence's latent rows of positions [0, prefix + chunk) (one paged gather, like the absorbed dense form):
    // sequence s's key position p is row cu_seqlens_k[s] + p, so each sequence's selection indexes its own slice of
    // the rows directly. bf16 activations with the 576 = 512 + 64 latent take sparse_mla_attention's bf16 tensor-core
    // kernel on the rows as they are (ops_dsa.h); otherwise the f32 kernel on exactly widened copies.
    const TensorView cache_rows = cache->latent.layer_view(index);
    in.latent = scratch(ctx, {layout.total_keys, d.latent_dim()}, cache_rows.dtype);
    kernels::paged_gather({.out = in.latent,
                           .cache = cache_rows,
                           .page_table = layout.page_table,
                           .cu_rows = layout.cu_seqlens_k,
                           .pos0 = layout.k_pos0},
                          work);
    in.native =
        x.dtype == DType::kBF16 && cache_rows.dtype == DType::kBF16 && d.kv_lora_rank == 512 && d.latent_dim() == 576;
    in.kv = in.latent;
    if (!in.native && in.latent.dtype() != DType::kF32) {
        in.kv = scratch(ctx, in.latent.view().shape_vec(), DType::kF32);
        kernels::copy({.out = in.kv, .in = in.latent}, work);
    }
    scope.emplace(work, "absorb_q");
    in.q_abs_raw = scratch(ctx, {n, d.n_heads, d.latent_dim()}, proj.q.dtype());
    layer.attn->absorb_q(proj.q, in.q_abs_raw, work);
    in.q_abs = in.q_abs_raw;
    if (!in.native && in.q_abs_raw.dtype() != DType::kF32) {
        in.q_abs = scratch(ctx, in.q_abs_raw.view().shape_vec(), DType::kF32);
        kernels::copy({.out = in.q_abs, .in = in.q_abs_raw}, work);
    }
    return in;
}

void GlmDsaModel::attend_sparse(const ForwardBatch& batch, const BatchLayout& layout, const Layer& layer,
                                const TensorView& x, const TensorView& key_pos, const SparseInputs& in,
                                const TensorView& out, const kernels::Context& ctx) const {
    const MlaDims& d = layer.attn->dims();
    const int64_t n = layout.n_tokens;
    const DType act = x.dtype;
    const bool native = in.native;
    const Tensor& kv = in.kv;
    const Tensor& q_abs = in.q_abs;
    std::optional<kernels::ProfileScope> core_scope(std::in_place, ctx, "core");
    std::optional<kernels::ProfileScope> scope(std::in_place, ctx, "sparse_mla");
    Tensor o_lat = scratch(ctx, {n, d.n_heads, d.kv_lora_rank}, native ? act : DType::kF32);
    Tensor lse = scratch(ctx, {n, d.n_heads}, DType::kF32);
    int64_t row = 0;
    int64_t key0 = 0;
    for (size_t si = 0; si < batch.seqs.size(); ++si) {
        const SeqChunk& s = batch.seqs[si];
        const int64_t len = layout.seq_rows[si];  // this layout's rows (a cp rank's own rows)
        const int64_t n_keys = s.prefix_len + static_cast<int64_t>(s.token_ids.size());
        if (len > 0) {
            const TensorView kv_seq = kv.view().slice(0, key0, key0 + n_keys);
            kernels::sparse_mla_attention({.out = o_lat.view().slice(0, row, row + len),
                                           .lse = lse.view().slice(0, row, row + len),
                                           .q = q_abs.view().slice(0, row, row + len),
                                           .kv = kv_seq,
                                           .v = kv_seq.slice(1, 0, d.kv_lora_rank),
                                           .indices = key_pos.slice(0, row, row + len),
                                           .scale = softmax_scale_},
                                          ctx);
        }
        row += len;
        key0 += n_keys;
    }
    scope.emplace(ctx, "absorb_out");
    Tensor o_act = o_lat;
    if (o_lat.dtype() != act) {
        o_act = scratch(ctx, {n, d.n_heads, d.kv_lora_rank}, act);
        kernels::copy({.out = o_act, .in = o_lat}, ctx);
    }
    Tensor attn_out = scratch(ctx, {n, d.n_heads * d.v_head_dim}, act);
    layer.attn->absorb_out(o_act, attn_out, ctx);
    scope.reset();
    core_scope.reset();
    layer.attn->output(x, attn_out, out, ctx);
}

Tensor GlmDsaModel::compute_logits(const BatchLayout& layout, const Activations& act,
                                   const kernels::Context& ctx) const {
    return io_.logits(layout, act.hidden, ctx);
}

Result<std::unique_ptr<Model>> load_glm_dsa_model(const loader::ModelConfig& config,
                                                  const loader::Checkpoint& checkpoint, const loader::LayerRange& range,
                                                  const ModelOptions& options, loader::LoadStats* stats) {
    return GlmDsaModel::load(config, checkpoint, range, options, stats);
}

}  // namespace penstock::models
