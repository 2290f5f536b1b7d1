// ModelConfig: the fields of a Hugging Face config.json that the engine reads, parsed with transformers 5.17 semantics
// (DeepseekV3Config defaults; GlmMoeDsaConfig / KimiLinearConfig defaults and field aliases for those model types).
// Every validation failure is an InvalidArgument (or Unimplemented) naming the offending field and its value; the
// parser never throws. The whole JSON document is kept in `raw` for family-specific fields.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace penstock::loader {

// RoPE parameters as read from `rope_parameters` (preferred) or the legacy `rope_scaling` + top-level `rope_theta`.
struct RopeConfig {
    std::string type = "default";  // "default" | "yarn"; other types are rejected with Unimplemented
    double theta = 10000.0;
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;  // yarn: defaults to max_position_embeddings when absent
    double beta_fast = 32.0, beta_slow = 1.0;
    double mscale = 0.0, mscale_all_dim = 0.0;  // 0 = absent
    std::optional<double> attention_factor;     // explicit override when present
    bool truncate = true;
    double partial_rotary_factor = 1.0;
};

// DeepSeek-style block FP8 (`quantization_config.quant_method == "fp8"`): e4m3fn weights with one fp32
// `weight_scale_inv` multiplier per [block_n, block_k] block of the [out, in] weight.
struct Fp8QuantConfig {
    int64_t block_n = 128, block_k = 128;
    std::string scale_fmt;  // "" or e.g. "ue8m0" (V3.1 / V3.2 activation scales)
};

struct ModelConfig {
    std::string model_type;  // any string; the model registry decides whether it is supported
    int64_t vocab_size, hidden_size, intermediate_size, moe_intermediate_size, num_hidden_layers, num_attention_heads,
        num_key_value_heads, q_lora_rank /*0 = none (plain q_proj)*/, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
        v_head_dim, n_routed_experts /*0 = dense model*/, num_experts_per_tok, n_shared_experts, n_group, topk_group,
        first_k_dense_replace, moe_layer_freq, max_position_embeddings;
    double routed_scaling_factor, rms_norm_eps;
    bool norm_topk_prob, tie_word_embeddings, rope_interleave, attention_bias;
    std::string scoring_func /*"sigmoid"|"softmax"*/, topk_method, hidden_act;
    RopeConfig rope;
    std::optional<Fp8QuantConfig> fp8;  // from quantization_config {quant_method: fp8, weight_block_size}
    // quantization_config {quant_method: compressed-tensors} (Kimi K3's FP8 / MXFP4 release): the tensors say the
    // formats (loader.md); native FP8 loads re-encode the MXFP4 weights as 128 x 128 block FP8.
    bool compressed_tensors = false;
    nlohmann::json raw;                 // the whole config.json, for family-specific fields

    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    // layer >= first_k_dense_replace && layer % moe_layer_freq == 0 && n_routed_experts > 0.
    bool is_moe_layer(int64_t layer) const;
};

// Parses and validates a config.json document. Absent fields take the model type's transformers defaults
// (DeepseekV3Config for unknown types). Kimi-style names (num_experts, num_experts_per_token, num_shared_experts,
// num_expert_group, moe_renormalize, model_max_length, moe_router_activation_func) are accepted as aliases when
// the DeepSeek name is absent. `q_lora_rank: null` means 0 (plain q_proj); other nulls mean "absent".
[[nodiscard]] Result<ModelConfig> parse_model_config(const nlohmann::json& j);

// Reads and parses model_dir/config.json. Unreadable file or bad JSON text -> error naming the file (and the byte
// position of a JSON syntax error).
[[nodiscard]] Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir);
// Like load_model_config, but `path` may also be a config .json file itself (`--load-format dummy`, where no
// checkpoint directory is needed).
[[nodiscard]] Result<ModelConfig> load_model_config_dir_or_file(const std::filesystem::path& path);

// The first `n_layers` decoder layers of `config` (`--num-layers`: partial-depth runs of a large model's shape, e.g.
// with dummy weights on fewer GPUs): `num_hidden_layers` becomes n_layers, per-layer lists of `raw` (`indexer_types`,
// `index_topk_pattern`, `mlp_layer_types`, `layer_types`) keep their first n_layers entries and the 1-based layer
// lists `linear_attn_config.{kda_layers, full_attn_layers}` keep the numbers <= n_layers; `attn_res_block_size` (Kimi
// K3 AttnRes) is scaled by n_layers / num_hidden_layers (rounded, at least 1), so that the cut model keeps about as
// many bank blocks as the full one (the bank, and a pipeline stage's bank message, stay about the full model's size;
// a benchmark shape, not the full model's first layers). Everything else (embedding, final norm, lm_head, per-layer
// shapes) is unchanged. The result is validated as a fresh config.json would be.
// InvalidArgument unless 1 <= n_layers <= config.num_hidden_layers.
[[nodiscard]] Result<ModelConfig> with_num_layers(const ModelConfig& config, int64_t n_layers);

// Parses JSON text (file contents) into a document; errors name `what` and the byte position. Never throws.
[[nodiscard]] Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& what);

// Reads a whole (small) text file; errors name the file. Never throws.
[[nodiscard]] Result<std::string> read_text_file(const std::filesystem::path& path);

}  // namespace penstock::loader
