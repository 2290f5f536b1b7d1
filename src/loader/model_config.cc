// config.json parsing: per-model-type defaults, field aliases, typed field access and validation.
#include "loader/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string_view>

namespace penstock::loader {

namespace {

using nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 30;

// A short, never-throwing rendering of a JSON value for error messages.
std::string render(const json& v) {
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

const char* kind_name(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

Status type_error(const std::string& field, const char* expected, const json& v) {
    return invalid_argument("config field '" + field + "': expected " + expected + ", got " + kind_name(v) + " " +
                            render(v));
}

// Typed access to the fields of one JSON object. Lookups take a list of names (canonical name first, then aliases);
// an absent or null field leaves the output (pre-set to the default) unchanged.
class FieldReader final {
public:
    FieldReader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

    // The first present, non-null field among `names`, or nullptr.
    const json* find(std::initializer_list<std::string_view> names, std::string* used) const {
        if (!obj_.is_object()) return nullptr;
        for (std::string_view n : names) {
            auto it = obj_.find(std::string(n));
            if (it != obj_.end() && !it->is_null()) {
                if (used) *used = prefix_ + std::string(n);
                return &*it;
            }
        }
        return nullptr;
    }
    bool has(std::initializer_list<std::string_view> names) const { return find(names, nullptr) != nullptr; }

    [[nodiscard]] Status get_int(std::initializer_list<std::string_view> names, int64_t* out) const {
        std::string field;
        const json* v = find(names, &field);
        if (!v) return ok_status();
        if (v->is_number_unsigned()) {
            const uint64_t u = v->get<uint64_t>();
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                return invalid_argument("config field '" + field + "': value " + render(*v) + " overflows int64");
            }
            *out = static_cast<int64_t>(u);
            return ok_status();
        }
        if (v->is_number_integer()) {
            *out = v->get<int64_t>();
            return ok_status();
        }
        if (v->is_number_float()) {  // 4096.0 is accepted; 4096.5 is not
            const double d = v->get<double>();
            if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) {
                *out = static_cast<int64_t>(d);
                return ok_status();
            }
            return type_error(field, "an integer", *v);
        }
        return type_error(field, "an integer", *v);
    }

    [[nodiscard]] Status get_double(std::initializer_list<std::string_view> names, double* out) const {
        std::string field;
        const json* v = find(names, &field);
        if (!v) return ok_status();
        if (!v->is_number()) return type_error(field, "a number", *v);
        *out = v->get<double>();
        if (!std::isfinite(*out)) return invalid_argument("config field '" + field + "': not finite");
        return ok_status();
    }

    [[nodiscard]] Status get_bool(std::initializer_list<std::string_view> names, bool* out) const {
        std::string field;
        const json* v = find(names, &field);
        if (!v) return ok_status();
        if (!v->is_boolean()) return type_error(field, "a boolean", *v);
        *out = v->get<bool>();
        return ok_status();
    }

    [[nodiscard]] Status get_string(std::initializer_list<std::string_view> names, std::string* out) const {
        std::string field;
        const json* v = find(names, &field);
        if (!v) return ok_status();
        if (!v->is_string()) return type_error(field, "a string", *v);
        *out = v->get<std::string>();
        return ok_status();
    }

private:
    const json& obj_;
    std::string prefix_;
};

// transformers defaults for the model type (DeepseekV3Config for every type not listed).
ModelConfig defaults_for(std::string_view model_type) {
    ModelConfig c{};
    c.vocab_size = 129280;
    c.hidden_size = 7168;
    c.intermediate_size = 18432;
    c.moe_intermediate_size = 2048;
    c.num_hidden_layers = 61;
    c.num_attention_heads = 128;
    c.num_key_value_heads = -1;  // = num_attention_heads unless given
    c.q_lora_rank = 1536;
    c.kv_lora_rank = 512;
    c.qk_nope_head_dim = 128;
    c.qk_rope_head_dim = 64;
    c.v_head_dim = 128;
    c.n_routed_experts = 256;
    c.num_experts_per_tok = 8;
    c.n_shared_experts = 1;
    c.n_group = 8;
    c.topk_group = 4;
    c.first_k_dense_replace = 3;
    c.moe_layer_freq = 1;
    c.max_position_embeddings = 4096;
    c.routed_scaling_factor = 2.5;
    c.rms_norm_eps = 1e-6;
    c.norm_topk_prob = true;
    c.tie_word_embeddings = false;
    c.rope_interleave = true;
    c.attention_bias = false;
    c.scoring_func = "sigmoid";
    c.topk_method = "noaux_tc";
    c.hidden_act = "silu";
    if (model_type == "glm_moe_dsa") {  // GlmMoeDsaConfig
        c.vocab_size = 154880;
        c.hidden_size = 6144;
        c.intermediate_size = 12288;
        c.num_hidden_layers = 78;
        c.num_attention_heads = 64;
        c.q_lora_rank = 2048;
        c.qk_nope_head_dim = 192;
        c.v_head_dim = 256;
        c.n_group = 1;
        c.topk_group = 1;
        c.max_position_embeddings = 202752;
        c.rms_norm_eps = 1e-5;
    } else if (model_type == "kimi_linear") {  // KimiLinearConfig
        c.vocab_size = 163840;
        c.hidden_size = 2304;
        c.intermediate_size = 9216;
        c.moe_intermediate_size = 1024;
        c.num_hidden_layers = 27;
        c.num_attention_heads = 32;
        c.q_lora_rank = 0;
        c.n_group = 1;
        c.topk_group = 1;
        c.first_k_dense_replace = 1;
        c.max_position_embeddings = 1048576;
        c.routed_scaling_factor = 2.446;
        c.rms_norm_eps = 1e-5;
    }
    return c;
}

[[nodiscard]] Status read_fields(const json& j, ModelConfig* c) {
    const FieldReader r(j, "");
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"vocab_size"}, &c->vocab_size));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"hidden_size"}, &c->hidden_size));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"intermediate_size"}, &c->intermediate_size));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"moe_intermediate_size"}, &c->moe_intermediate_size));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"num_hidden_layers"}, &c->num_hidden_layers));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"num_attention_heads"}, &c->num_attention_heads));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"num_key_value_heads"}, &c->num_key_value_heads));
    if (c->num_key_value_heads == -1) c->num_key_value_heads = c->num_attention_heads;
    if (j.contains("q_lora_rank") && j["q_lora_rank"].is_null()) {
        c->q_lora_rank = 0;
    } else {
        PENSTOCK_RETURN_IF_ERROR(r.get_int({"q_lora_rank"}, &c->q_lora_rank));
    }
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"kv_lora_rank"}, &c->kv_lora_rank));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"qk_nope_head_dim"}, &c->qk_nope_head_dim));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"qk_rope_head_dim"}, &c->qk_rope_head_dim));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"v_head_dim"}, &c->v_head_dim));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"n_routed_experts", "num_local_experts", "num_experts"}, &c->n_routed_experts));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"num_experts_per_tok", "num_experts_per_token"}, &c->num_experts_per_tok));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"n_shared_experts", "num_shared_experts"}, &c->n_shared_experts));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"n_group", "num_expert_group"}, &c->n_group));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"topk_group"}, &c->topk_group));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"first_k_dense_replace"}, &c->first_k_dense_replace));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"moe_layer_freq"}, &c->moe_layer_freq));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"max_position_embeddings", "model_max_length"}, &c->max_position_embeddings));
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"routed_scaling_factor"}, &c->routed_scaling_factor));
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"rms_norm_eps"}, &c->rms_norm_eps));
    PENSTOCK_RETURN_IF_ERROR(r.get_bool({"norm_topk_prob", "moe_renormalize"}, &c->norm_topk_prob));
    PENSTOCK_RETURN_IF_ERROR(r.get_bool({"tie_word_embeddings"}, &c->tie_word_embeddings));
    PENSTOCK_RETURN_IF_ERROR(r.get_bool({"rope_interleave"}, &c->rope_interleave));
    PENSTOCK_RETURN_IF_ERROR(r.get_bool({"attention_bias"}, &c->attention_bias));
    PENSTOCK_RETURN_IF_ERROR(r.get_string({"scoring_func", "moe_router_activation_func"}, &c->scoring_func));
    PENSTOCK_RETURN_IF_ERROR(r.get_string({"topk_method"}, &c->topk_method));
    PENSTOCK_RETURN_IF_ERROR(r.get_string({"hidden_act"}, &c->hidden_act));
    return ok_status();
}

// RoPE: `rope_parameters` (possibly per layer type, then its "full_attention" entry) or legacy `rope_scaling`, with
// `rope_theta` / `partial_rotary_factor` falling back to the top level.
[[nodiscard]] Status read_rope(const json& j, int64_t max_position_embeddings, RopeConfig* rope) {
    const FieldReader top(j, "");
    std::string name;
    const json* src = top.find({"rope_parameters", "rope_scaling"}, &name);
    if (src && !src->is_object()) return type_error(name, "an object", *src);
    if (src && !src->contains("rope_type") && !src->contains("type") && !src->contains("rope_theta") &&
        src->contains("full_attention") && (*src)["full_attention"].is_object()) {
        src = &(*src)["full_attention"];
        name += ".full_attention";
    }
    const json empty = json::object();
    const FieldReader r(src ? *src : empty, name + ".");

    PENSTOCK_RETURN_IF_ERROR(r.get_string({"rope_type", "type"}, &rope->type));
    if (r.has({"rope_theta"})) {
        PENSTOCK_RETURN_IF_ERROR(r.get_double({"rope_theta"}, &rope->theta));
    } else {
        PENSTOCK_RETURN_IF_ERROR(top.get_double({"rope_theta"}, &rope->theta));
    }
    if (r.has({"partial_rotary_factor"})) {
        PENSTOCK_RETURN_IF_ERROR(r.get_double({"partial_rotary_factor"}, &rope->partial_rotary_factor));
    } else {
        PENSTOCK_RETURN_IF_ERROR(top.get_double({"partial_rotary_factor"}, &rope->partial_rotary_factor));
    }
    const bool has_factor = r.has({"factor"});
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"factor"}, &rope->factor));
    PENSTOCK_RETURN_IF_ERROR(r.get_int({"original_max_position_embeddings"}, &rope->original_max_position_embeddings));
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"beta_fast"}, &rope->beta_fast));
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"beta_slow"}, &rope->beta_slow));
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"mscale"}, &rope->mscale));
    PENSTOCK_RETURN_IF_ERROR(r.get_double({"mscale_all_dim"}, &rope->mscale_all_dim));
    if (r.has({"attention_factor"})) {
        double a = 0.0;
        PENSTOCK_RETURN_IF_ERROR(r.get_double({"attention_factor"}, &a));
        rope->attention_factor = a;
    }
    PENSTOCK_RETURN_IF_ERROR(r.get_bool({"truncate"}, &rope->truncate));

    const std::string field = (src ? name + "." : std::string()) + "rope_type";
    if (rope->type != "default" && rope->type != "yarn") {
        return unimplemented("config field '" + field + "': RoPE type '" + rope->type +
                             "' is not supported (supported: default, yarn)");
    }
    if (!(rope->theta > 0.0)) {
        return invalid_argument("config field 'rope_theta': must be > 0, got " + std::to_string(rope->theta));
    }
    if (!(rope->partial_rotary_factor > 0.0 && rope->partial_rotary_factor <= 1.0)) {
        return invalid_argument("config field 'partial_rotary_factor': must be in (0, 1], got " +
                                std::to_string(rope->partial_rotary_factor));
    }
    if (rope->type == "yarn") {
        if (rope->original_max_position_embeddings == 0) {
            rope->original_max_position_embeddings = max_position_embeddings;
        }
        if (rope->original_max_position_embeddings <= 0 || rope->original_max_position_embeddings > kMaxPositions) {
            return invalid_argument("config field '" + name + ".original_max_position_embeddings': out of range: " +
                                    std::to_string(rope->original_max_position_embeddings));
        }
        if (!has_factor) {
            rope->factor = static_cast<double>(max_position_embeddings) /
                           static_cast<double>(rope->original_max_position_embeddings);
        }
    }
    if (!(rope->factor > 0.0)) {
        return invalid_argument("config field '" + name + ".factor': must be > 0, got " + std::to_string(rope->factor));
    }
    return ok_status();
}

[[nodiscard]] Status read_quantization(const json& j, std::optional<Fp8QuantConfig>* fp8, bool* compressed_tensors) {
    const FieldReader top(j, "");
    std::string name;
    const json* q = top.find({"quantization_config"}, &name);
    if (!q) return ok_status();
    if (!q->is_object()) return type_error(name, "an object", *q);
    const FieldReader r(*q, name + ".");
    std::string method;
    PENSTOCK_RETURN_IF_ERROR(r.get_string({"quant_method"}, &method));
    *compressed_tensors = method == "compressed-tensors";
    if (method != "fp8") return ok_status();  // other schemes (compressed-tensors, ...) stay in `raw`
    std::string fmt = "e4m3";
    PENSTOCK_RETURN_IF_ERROR(r.get_string({"fmt"}, &fmt));
    if (fmt != "e4m3") {
        return unimplemented("config field 'quantization_config.fmt': FP8 format '" + fmt + "' is not supported");
    }
    Fp8QuantConfig cfg;
    PENSTOCK_RETURN_IF_ERROR(r.get_string({"scale_fmt"}, &cfg.scale_fmt));
    if (const json* b = r.find({"weight_block_size"}, nullptr)) {
        const std::string f = "quantization_config.weight_block_size";
        auto non_negative_int = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; };
        if (!b->is_array() || b->size() != 2 || !non_negative_int((*b)[0]) || !non_negative_int((*b)[1])) {
            return type_error(f, "an array of two integers", *b);
        }
        cfg.block_n = (*b)[0].get<int64_t>();
        cfg.block_k = (*b)[1].get<int64_t>();
        if (cfg.block_n <= 0 || cfg.block_k <= 0 || cfg.block_n > kMaxDim || cfg.block_k > kMaxDim) {
            return invalid_argument("config field '" + f + "': block sizes must be in [1, 2^20], got " + render(*b));
        }
    }
    *fp8 = cfg;
    return ok_status();
}

Status range_error(const char* field, int64_t value, const std::string& rule) {
    return invalid_argument("config field '" + std::string(field) + "': " + rule + ", got " + std::to_string(value));
}

[[nodiscard]] Status check_dim(const char* field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
        return range_error(field, v, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return ok_status();
}

// Multiplies the factors, failing if the product overflows int64.
[[nodiscard]] Status check_product(const char* what, std::initializer_list<int64_t> factors) {
    int64_t p = 1;
    std::ostringstream s;
    bool first = true;
    for (int64_t f : factors) {
        s << (first ? "" : " * ") << f;
        first = false;
        if (__builtin_mul_overflow(p, f, &p)) {
            return invalid_argument(std::string("config: ") + what + " overflows int64 (" + s.str() + " ...)");
        }
    }
    return ok_status();
}

[[nodiscard]] Status validate(const ModelConfig& c) {
    const bool kimi = c.model_type == "kimi_linear";  // NoPE MLA: qk_rope_head_dim may be 0
    PENSTOCK_RETURN_IF_ERROR(check_dim("vocab_size", c.vocab_size, 1, kMaxVocab));
    PENSTOCK_RETURN_IF_ERROR(check_dim("hidden_size", c.hidden_size, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("intermediate_size", c.intermediate_size, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("moe_intermediate_size", c.moe_intermediate_size, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("num_hidden_layers", c.num_hidden_layers, 1, kMaxLayers));
    PENSTOCK_RETURN_IF_ERROR(check_dim("num_attention_heads", c.num_attention_heads, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("num_key_value_heads", c.num_key_value_heads, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("q_lora_rank", c.q_lora_rank, 0, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("kv_lora_rank", c.kv_lora_rank, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("qk_nope_head_dim", c.qk_nope_head_dim, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("qk_rope_head_dim", c.qk_rope_head_dim, kimi ? 0 : 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("v_head_dim", c.v_head_dim, 1, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("n_routed_experts", c.n_routed_experts, 0, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("n_shared_experts", c.n_shared_experts, 0, kMaxDim));
    PENSTOCK_RETURN_IF_ERROR(check_dim("first_k_dense_replace", c.first_k_dense_replace, 0, kMaxLayers));
    PENSTOCK_RETURN_IF_ERROR(check_dim("moe_layer_freq", c.moe_layer_freq, 1, kMaxLayers));
    PENSTOCK_RETURN_IF_ERROR(check_dim("max_position_embeddings", c.max_position_embeddings, 1, kMaxPositions));
    if (c.qk_rope_head_dim % 2 != 0) return range_error("qk_rope_head_dim", c.qk_rope_head_dim, "must be even");
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
        return invalid_argument("config: num_attention_heads (" + std::to_string(c.num_attention_heads) +
                                ") must be a multiple of num_key_value_heads (" +
                                std::to_string(c.num_key_value_heads) + ")");
    }
    if (c.n_routed_experts > 0) {
        PENSTOCK_RETURN_IF_ERROR(check_dim("num_experts_per_tok", c.num_experts_per_tok, 1, c.n_routed_experts));
        PENSTOCK_RETURN_IF_ERROR(check_dim("n_group", c.n_group, 1, c.n_routed_experts));
        PENSTOCK_RETURN_IF_ERROR(check_dim("topk_group", c.topk_group, 1, c.n_group));
        if (c.n_routed_experts % c.n_group != 0) {
            return invalid_argument("config: n_routed_experts (" + std::to_string(c.n_routed_experts) +
                                    ") must be a multiple of n_group (" + std::to_string(c.n_group) + ")");
        }
        const int64_t reachable = c.topk_group * (c.n_routed_experts / c.n_group);
        if (c.n_group > 1 && c.num_experts_per_tok > reachable) {
            return invalid_argument("config: num_experts_per_tok (" + std::to_string(c.num_experts_per_tok) +
                                    ") exceeds topk_group * n_routed_experts / n_group (" + std::to_string(reachable) +
                                    ")");
        }
    }
    if (!(c.rms_norm_eps > 0.0)) {
        return invalid_argument("config field 'rms_norm_eps': must be > 0, got " + std::to_string(c.rms_norm_eps));
    }
    if (c.scoring_func != "sigmoid" && c.scoring_func != "softmax") {
        return invalid_argument("config field 'scoring_func': expected \"sigmoid\" or \"softmax\", got \"" +
                                c.scoring_func + "\"");
    }
    PENSTOCK_RETURN_IF_ERROR(check_product("embedding size vocab_size * hidden_size", {c.vocab_size, c.hidden_size}));
    PENSTOCK_RETURN_IF_ERROR(
        check_product("attention weights num_hidden_layers * num_attention_heads * qk_head_dim * hidden_size",
                      {c.num_hidden_layers, c.num_attention_heads, c.qk_head_dim(), c.hidden_size}));
    PENSTOCK_RETURN_IF_ERROR(check_product(
        "expert weights num_hidden_layers * n_routed_experts * 3 * moe_intermediate_size * hidden_size",
        {c.num_hidden_layers, std::max<int64_t>(c.n_routed_experts, 1), 3, c.moe_intermediate_size, c.hidden_size}));
    PENSTOCK_RETURN_IF_ERROR(check_product("dense weights num_hidden_layers * 3 * intermediate_size * hidden_size",
                                           {c.num_hidden_layers, 3, c.intermediate_size, c.hidden_size}));
    return ok_status();
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
    return layer >= first_k_dense_replace && layer % moe_layer_freq == 0 && n_routed_experts > 0;
}

Result<ModelConfig> parse_model_config(const nlohmann::json& j) {
    if (!j.is_object()) return invalid_argument(std::string("config: expected a JSON object, got ") + kind_name(j));
    auto mt = j.find("model_type");
    if (mt == j.end()) return invalid_argument("config field 'model_type': missing");
    if (!mt->is_string()) return type_error("model_type", "a string", *mt);
    ModelConfig c = defaults_for(mt->get<std::string>());
    c.model_type = mt->get<std::string>();
    PENSTOCK_RETURN_IF_ERROR(read_fields(j, &c));
    PENSTOCK_RETURN_IF_ERROR(validate(c));
    PENSTOCK_RETURN_IF_ERROR(read_rope(j, c.max_position_embeddings, &c.rope));
    PENSTOCK_RETURN_IF_ERROR(read_quantization(j, &c.fp8, &c.compressed_tensors));
    c.raw = j;
    return c;
}

Result<std::string> read_text_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found("cannot open " + path.string());
    std::ostringstream s;
    s << in.rdbuf();
    if (in.bad()) return data_loss("error reading " + path.string());
    return s.str();
}

Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& what) {
    try {
        return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
        return invalid_argument(what + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
    } catch (const std::exception& e) {
        return invalid_argument(what + ": invalid JSON: " + e.what());
    }
}

namespace {
Result<ModelConfig> load_config_file(const std::filesystem::path& path) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
    PENSTOCK_ASSIGN_OR_RETURN(const json j, parse_json_text(text, path.string()));
    Result<ModelConfig> c = parse_model_config(j);
    if (!c.ok()) return c.status().with_context(path.string());
    return c;
}
}  // namespace

Result<ModelConfig> with_num_layers(const ModelConfig& config, int64_t n_layers) {
    const int64_t n = config.num_hidden_layers;
    if (n_layers < 1 || n_layers > n) {
        return invalid_argument("--num-layers must be in [1, " + std::to_string(n) + "] (the config's " +
                                "num_hidden_layers), got " + std::to_string(n_layers));
    }
    json raw = config.raw;
    raw["num_hidden_layers"] = n_layers;
    for (const char* key : {"indexer_types", "index_topk_pattern", "mlp_layer_types", "layer_types"}) {
        if (!raw.contains(key)) continue;
        json& v = raw[key];
        if (v.is_array() && static_cast<int64_t>(v.size()) >= n_layers) {
            v.erase(v.begin() + n_layers, v.end());
        } else if (v.is_string() && static_cast<int64_t>(v.get<std::string>().size()) >= n_layers) {
            v = v.get<std::string>().substr(0, static_cast<size_t>(n_layers));
        }
    }
    if (raw.contains("linear_attn_config") && raw["linear_attn_config"].is_object()) {
        json& lac = raw["linear_attn_config"];
        for (const char* key : {"kda_layers", "full_attn_layers"}) {
            if (!lac.contains(key) || !lac[key].is_array()) continue;
            json kept = json::array();
            for (const json& e : lac[key]) {
                if (!e.is_number_integer() || e.get<int64_t>() <= n_layers) kept.push_back(e);
            }
            lac[key] = std::move(kept);
        }
    }
    // AttnRes: scale the block size with the depth (rounded, at least 1) so that the cut model keeps about as many
    // bank blocks as the full one, and pipeline stage messages carry banks of about the full model's size.
    if (raw.contains("attn_res_block_size") && raw["attn_res_block_size"].is_number_integer()) {
        const int64_t block = raw["attn_res_block_size"].get<int64_t>();
        if (block > 0) raw["attn_res_block_size"] = std::max<int64_t>(1, (block * n_layers + n / 2) / n);
    }
    Result<ModelConfig> c = parse_model_config(raw);
    if (!c.ok()) return c.status().with_context("with --num-layers " + std::to_string(n_layers));
    return c;
}

Result<ModelConfig> load_model_config_dir_or_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return load_config_file(path);
    return load_model_config(path);
}

Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir) {
    const std::filesystem::path path = model_dir / "config.json";
    PENSTOCK_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
    PENSTOCK_ASSIGN_OR_RETURN(const json j, parse_json_text(text, path.string()));
    Result<ModelConfig> c = parse_model_config(j);
    if (!c.ok()) return c.status().with_context(path.string());
    return c;
}

}  // namespace penstock::loader
