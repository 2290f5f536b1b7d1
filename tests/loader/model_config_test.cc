// parse_model_config / load_model_config: every fixture and shared config, transformers defaults and aliases, RoPE
// forms (rope_parameters, legacy rope_scaling, yarn fallbacks), and validation errors that name the field.
#include "loader/model_config.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace penstock::loader {
namespace {

using nlohmann::json;
using testing::contains;

const std::filesystem::path kFixtures = PENSTOCK_FIXTURES_DIR;
const std::filesystem::path kConfigs = std::filesystem::path(PENSTOCK_FIXTURES_DIR) / "../configs";

ModelConfig load_ok(const std::filesystem::path& dir) {
    Result<ModelConfig> c = load_model_config(dir);
    EXPECT_TRUE(c.ok()) << dir << ": " << c.status().to_string();
    return c.ok() ? *c : ModelConfig{};
}

ModelConfig parse_ok(const json& j) {
    Result<ModelConfig> c = parse_model_config(j);
    EXPECT_TRUE(c.ok()) << j.dump() << ": " << c.status().to_string();
    return c.ok() ? *c : ModelConfig{};
}

ModelConfig parse_file(const std::filesystem::path& path) {
    Result<std::string> text = read_text_file(path);
    EXPECT_TRUE(text.ok()) << path;
    Result<json> j = parse_json_text(*text, path.string());
    EXPECT_TRUE(j.ok()) << j.status().to_string();
    return parse_ok(*j);
}

// Parses `j`, expects failure with `code`, and returns the message after checking it contains `needle`.
std::string parse_err(const json& j, std::string_view needle, StatusCode code = StatusCode::kInvalidArgument) {
    Result<ModelConfig> c = parse_model_config(j);
    EXPECT_FALSE(c.ok()) << j.dump();
    if (c.ok()) return "";
    EXPECT_EQ(c.status().code(), code) << c.status().to_string();
    EXPECT_TRUE(contains(c.status().message(), needle)) << "'" << needle << "' not in: " << c.status().message();
    return c.status().message();
}

json v3(json extra = json::object()) {
    json j = {{"model_type", "deepseek_v3"}};
    j.update(extra);
    return j;
}

TEST(ModelConfigTest, DeepseekV3TinyFixture) {
    const ModelConfig c = load_ok(kFixtures / "deepseek_v3_tiny");
    EXPECT_EQ(c.model_type, "deepseek_v3");
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.hidden_size, 128);
    EXPECT_EQ(c.intermediate_size, 256);
    EXPECT_EQ(c.moe_intermediate_size, 64);
    EXPECT_EQ(c.num_hidden_layers, 4);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.num_key_value_heads, 4);
    EXPECT_EQ(c.q_lora_rank, 64);
    EXPECT_EQ(c.kv_lora_rank, 32);
    EXPECT_EQ(c.qk_nope_head_dim, 32);
    EXPECT_EQ(c.qk_rope_head_dim, 16);
    EXPECT_EQ(c.qk_head_dim(), 48);
    EXPECT_EQ(c.v_head_dim, 32);
    EXPECT_EQ(c.n_routed_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.n_group, 2);
    EXPECT_EQ(c.topk_group, 1);
    EXPECT_EQ(c.first_k_dense_replace, 1);
    EXPECT_EQ(c.moe_layer_freq, 1);
    EXPECT_EQ(c.max_position_embeddings, 4096);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_TRUE(c.rope_interleave);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.scoring_func, "sigmoid");
    EXPECT_EQ(c.topk_method, "noaux_tc");
    EXPECT_EQ(c.hidden_act, "silu");
    EXPECT_EQ(c.rope.type, "default");
    EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
    EXPECT_FALSE(c.fp8.has_value());
    EXPECT_FALSE(c.is_moe_layer(0));
    EXPECT_TRUE(c.is_moe_layer(1));
    EXPECT_TRUE(c.is_moe_layer(3));
    EXPECT_EQ(c.raw["num_nextn_predict_layers"], 1);
}

TEST(ModelConfigTest, Fp8Fixture) {
    const ModelConfig c = load_ok(kFixtures / "deepseek_v3_tiny_fp8");
    ASSERT_TRUE(c.fp8.has_value());
    EXPECT_EQ(c.fp8->block_n, 128);
    EXPECT_EQ(c.fp8->block_k, 128);
    EXPECT_EQ(c.fp8->scale_fmt, "");
    EXPECT_EQ(c.hidden_size, 128);
}

TEST(ModelConfigTest, GlmMoeDsaFixture) {
    const ModelConfig c = load_ok(kFixtures / "glm_moe_dsa_tiny");
    EXPECT_EQ(c.model_type, "glm_moe_dsa");
    EXPECT_EQ(c.num_hidden_layers, 6);
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.topk_group, 1);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(c.raw["index_topk"], 16);
    EXPECT_EQ(c.raw["indexer_types"].size(), 6u);
}

TEST(ModelConfigTest, KimiLinearFixtureUsesKimiNames) {
    const ModelConfig c = load_ok(kFixtures / "kimi_linear_tiny");
    EXPECT_EQ(c.model_type, "kimi_linear");
    EXPECT_EQ(c.q_lora_rank, 0);  // null: plain q_proj
    EXPECT_EQ(c.n_routed_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.max_position_embeddings, 4096);  // model_max_length
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.446);
    EXPECT_EQ(c.num_hidden_layers, 8);
    EXPECT_EQ(c.first_k_dense_replace, 1);
    EXPECT_EQ(c.raw["linear_attn_config"]["num_heads"], 4);
}

TEST(ModelConfigTest, SharedDeepseekV3Config) {
    const ModelConfig c = parse_file(kConfigs / "deepseek-v3.json");
    EXPECT_EQ(c.num_hidden_layers, 61);
    EXPECT_EQ(c.hidden_size, 7168);
    EXPECT_EQ(c.n_group, 8);
    EXPECT_EQ(c.topk_group, 4);
    EXPECT_EQ(c.max_position_embeddings, 163840);
    EXPECT_EQ(c.rope.type, "yarn");
    EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
    EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
    EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
    EXPECT_DOUBLE_EQ(c.rope.mscale, 1.0);
    EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
    EXPECT_FALSE(c.rope.attention_factor.has_value());
    EXPECT_TRUE(c.rope.truncate);
    ASSERT_TRUE(c.fp8.has_value());
    EXPECT_EQ(c.fp8->block_n, 128);
    EXPECT_FALSE(c.is_moe_layer(2));
    EXPECT_TRUE(c.is_moe_layer(3));
}

TEST(ModelConfigTest, SharedGlmConfig) {
    const ModelConfig c = parse_file(kConfigs / "glm-5.3.json");
    EXPECT_EQ(c.model_type, "glm_moe_dsa");
    EXPECT_EQ(c.num_hidden_layers, 78);
    EXPECT_EQ(c.hidden_size, 6144);
    EXPECT_EQ(c.qk_nope_head_dim, 192);
    EXPECT_EQ(c.v_head_dim, 256);
    EXPECT_EQ(c.q_lora_rank, 2048);
    EXPECT_EQ(c.max_position_embeddings, 1048576);
    EXPECT_EQ(c.rope.type, "default");
    EXPECT_DOUBLE_EQ(c.rope.theta, 8e6);  // nested rope_parameters.rope_theta
    EXPECT_EQ(c.raw["index_topk_freq"], 4);
}

TEST(ModelConfigTest, SharedKimiK3Config) {
    const ModelConfig c = parse_file(kConfigs / "kimi-k3.json");
    EXPECT_EQ(c.model_type, "kimi_linear");
    EXPECT_EQ(c.num_hidden_layers, 93);
    EXPECT_EQ(c.num_attention_heads, 96);
    EXPECT_EQ(c.n_routed_experts, 896);
    EXPECT_EQ(c.num_experts_per_tok, 16);
    EXPECT_EQ(c.n_shared_experts, 2);
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.scoring_func, "sigmoid");
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.max_position_embeddings, 1048576);
    EXPECT_EQ(c.hidden_act, "situ");
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
    EXPECT_EQ(c.raw["attn_res_block_size"], 12);
    EXPECT_EQ(c.rope.type, "default");
}

TEST(ModelConfigTest, NumLayersCutsGlmPerLayerLists) {
    const ModelConfig full = parse_file(kConfigs / "glm-5.3.json");
    Result<ModelConfig> c = with_num_layers(full, 8);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->num_hidden_layers, 8);
    EXPECT_EQ(c->raw["num_hidden_layers"], 8);
    ASSERT_EQ(c->raw["indexer_types"].size(), 8u);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(c->raw["indexer_types"][i], full.raw["indexer_types"][i]) << i;
    // Per-layer shapes and everything else are the full model's.
    EXPECT_EQ(c->hidden_size, full.hidden_size);
    EXPECT_EQ(c->n_routed_experts, full.n_routed_experts);
    EXPECT_EQ(c->first_k_dense_replace, full.first_k_dense_replace);
    EXPECT_EQ(c->vocab_size, full.vocab_size);
    EXPECT_TRUE(c->fp8.has_value());
    Result<ModelConfig> same = with_num_layers(full, 78);
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(same->raw, full.raw);
    // A string pattern is cut too.
    const ModelConfig pattern = parse_ok({{"model_type", "glm_moe_dsa"},
                                          {"num_hidden_layers", 4},
                                          {"index_topk_pattern", "FFSS"},
                                          {"mlp_layer_types", {"dense", "sparse", "sparse", "sparse"}}});
    Result<ModelConfig> p2 = with_num_layers(pattern, 2);
    ASSERT_TRUE(p2.ok());
    EXPECT_EQ(p2->raw["index_topk_pattern"], "FF");
    EXPECT_EQ(p2->raw["mlp_layer_types"], json({"dense", "sparse"}));
}

TEST(ModelConfigTest, NumLayersKeepsKimiLayerNumbersInRange) {
    const ModelConfig full = parse_file(kConfigs / "kimi-k3.json");
    Result<ModelConfig> c = with_num_layers(full, 8);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->num_hidden_layers, 8);
    EXPECT_EQ(c->raw["linear_attn_config"]["kda_layers"], json({1, 2, 3, 5, 6, 7}));
    EXPECT_EQ(c->raw["linear_attn_config"]["full_attn_layers"], json({4, 8}));
    EXPECT_EQ(c->raw["attn_res_block_size"], 1);  // 12 * 8 / 93 rounded: 8 blocks, as in the full model
    Result<ModelConfig> half = with_num_layers(full, 47);
    ASSERT_TRUE(half.ok());
    EXPECT_EQ(half->raw["attn_res_block_size"], 6);  // 12 * 47 / 93 = 6.06
    Result<ModelConfig> three = with_num_layers(full, 3);
    ASSERT_TRUE(three.ok());
    EXPECT_EQ(three->raw["linear_attn_config"]["kda_layers"], json({1, 2, 3}));
    EXPECT_EQ(three->raw["linear_attn_config"]["full_attn_layers"], json::array());
}

TEST(ModelConfigTest, NumLayersOutOfRangeIsRefused) {
    const ModelConfig full = parse_file(kConfigs / "kimi-k3.json");
    for (int64_t n : {int64_t{0}, int64_t{-1}, int64_t{94}}) {
        Result<ModelConfig> c = with_num_layers(full, n);
        ASSERT_FALSE(c.ok()) << n;
        EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(contains(c.status().message(), "--num-layers must be in [1, 93]")) << c.status().message();
    }
}

TEST(ModelConfigTest, DeepseekV3DefaultsWhenAbsent) {
    const ModelConfig c = parse_ok(v3());
    EXPECT_EQ(c.vocab_size, 129280);
    EXPECT_EQ(c.hidden_size, 7168);
    EXPECT_EQ(c.intermediate_size, 18432);
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.num_hidden_layers, 61);
    EXPECT_EQ(c.num_attention_heads, 128);
    EXPECT_EQ(c.num_key_value_heads, 128);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.n_routed_experts, 256);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.kv_lora_rank, 512);
    EXPECT_EQ(c.q_lora_rank, 1536);
    EXPECT_EQ(c.qk_rope_head_dim, 64);
    EXPECT_EQ(c.v_head_dim, 128);
    EXPECT_EQ(c.qk_nope_head_dim, 128);
    EXPECT_EQ(c.n_group, 8);
    EXPECT_EQ(c.topk_group, 4);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.first_k_dense_replace, 3);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.max_position_embeddings, 4096);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_TRUE(c.rope_interleave);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.moe_layer_freq, 1);
    EXPECT_EQ(c.scoring_func, "sigmoid");
    EXPECT_EQ(c.hidden_act, "silu");
    EXPECT_EQ(c.rope.type, "default");
    EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
    // kv heads follow heads when absent or null; unknown model types are not an error here.
    EXPECT_EQ(parse_ok(v3({{"num_attention_heads", 16}, {"num_key_value_heads", nullptr}})).num_key_value_heads, 16);
    EXPECT_EQ(parse_ok({{"model_type", "some_future_model"}}).hidden_size, 7168);
    EXPECT_EQ(parse_ok(v3({{"q_lora_rank", nullptr}})).q_lora_rank, 0);
    EXPECT_EQ(parse_ok(v3({{"max_position_embeddings", 8192.0}})).max_position_embeddings, 8192);
    // moe_layer_freq.
    const ModelConfig f = parse_ok(v3({{"moe_layer_freq", 2}, {"first_k_dense_replace", 1}}));
    EXPECT_FALSE(f.is_moe_layer(1));
    EXPECT_TRUE(f.is_moe_layer(2));
    EXPECT_FALSE(parse_ok(v3({{"n_routed_experts", 0}})).is_moe_layer(5));
}

TEST(ModelConfigTest, LegacyRopeScalingYarn) {
    const ModelConfig c = parse_ok(v3({{"rope_theta", 50000},
                                       {"max_position_embeddings", 163840},
                                       {"rope_scaling",
                                        {{"type", "yarn"},
                                         {"factor", 40},
                                         {"original_max_position_embeddings", 4096},
                                         {"beta_fast", 32},
                                         {"beta_slow", 1},
                                         {"mscale", 1.0},
                                         {"mscale_all_dim", 0.707}}}}));
    EXPECT_EQ(c.rope.type, "yarn");
    EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
    EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
    EXPECT_DOUBLE_EQ(c.rope.mscale, 1.0);
    EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);

    // rope_parameters wins over rope_scaling; explicit attention_factor / truncate / partial_rotary_factor.
    const ModelConfig p = parse_ok(v3({{"rope_scaling", {{"type", "yarn"}, {"factor", 2}}},
                                       {"rope_parameters",
                                        {{"rope_type", "yarn"},
                                         {"rope_theta", 1e6},
                                         {"factor", 8},
                                         {"original_max_position_embeddings", 1024},
                                         {"attention_factor", 1.25},
                                         {"truncate", false},
                                         {"partial_rotary_factor", 0.5}}}}));
    EXPECT_DOUBLE_EQ(p.rope.factor, 8.0);
    EXPECT_DOUBLE_EQ(p.rope.theta, 1e6);
    ASSERT_TRUE(p.rope.attention_factor.has_value());
    EXPECT_DOUBLE_EQ(*p.rope.attention_factor, 1.25);
    EXPECT_FALSE(p.rope.truncate);
    EXPECT_DOUBLE_EQ(p.rope.partial_rotary_factor, 0.5);

    // yarn without original_max_position_embeddings: it is max_position_embeddings (factor stays as given).
    const ModelConfig a =
        parse_ok(v3({{"max_position_embeddings", 8192}, {"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4}}}}));
    EXPECT_EQ(a.rope.original_max_position_embeddings, 8192);
    EXPECT_DOUBLE_EQ(a.rope.factor, 4.0);
    // yarn without factor: max_position_embeddings / original.
    const ModelConfig b =
        parse_ok(v3({{"max_position_embeddings", 8192},
                     {"rope_parameters", {{"rope_type", "yarn"}, {"original_max_position_embeddings", 2048}}}}));
    EXPECT_DOUBLE_EQ(b.rope.factor, 4.0);
    // Per-layer-type rope_parameters: the full_attention entry is used.
    const ModelConfig l =
        parse_ok(v3({{"rope_parameters", {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 5e5}}}}}}));
    EXPECT_DOUBLE_EQ(l.rope.theta, 5e5);
    // Top-level rope_theta alone.
    EXPECT_DOUBLE_EQ(parse_ok(v3({{"rope_theta", 123.0}})).rope.theta, 123.0);
}

TEST(ModelConfigTest, RopeErrors) {
    const std::string m = parse_err(v3({{"rope_parameters", {{"rope_type", "llama3"}}}}), "rope_parameters.rope_type",
                                    StatusCode::kUnimplemented);
    EXPECT_TRUE(contains(m, "llama3"));
    parse_err(v3({{"rope_scaling", {{"type", "linear"}, {"factor", 2}}}}), "rope_scaling.rope_type",
              StatusCode::kUnimplemented);
    parse_err(v3({{"rope_parameters", "yarn"}}), "rope_parameters");
    parse_err(v3({{"rope_parameters", {{"rope_type", 3}}}}), "rope_parameters.rope_type");
    parse_err(v3({{"rope_parameters", {{"rope_theta", "big"}}}}), "rope_parameters.rope_theta");
    parse_err(v3({{"rope_parameters", {{"rope_theta", -1.0}}}}), "rope_theta");
    parse_err(v3({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 0}}}}), "factor");
    parse_err(v3({{"rope_parameters", {{"rope_type", "yarn"}, {"original_max_position_embeddings", -5}}}}),
              "original_max_position_embeddings");
    parse_err(v3({{"partial_rotary_factor", 1.5}}), "partial_rotary_factor");
}

TEST(ModelConfigTest, AbsurdDimsAreRejected) {
    EXPECT_TRUE(contains(parse_err(v3({{"hidden_size", 1 << 21}}), "hidden_size"), "2097152"));
    parse_err(v3({{"hidden_size", 0}}), "hidden_size");
    parse_err(v3({{"num_hidden_layers", -3}}), "num_hidden_layers");
    parse_err(v3({{"num_hidden_layers", 5000}}), "num_hidden_layers");
    parse_err(v3({{"vocab_size", 1 << 25}}), "vocab_size");
    parse_err(v3({{"q_lora_rank", -1}}), "q_lora_rank");
    parse_err(v3({{"kv_lora_rank", 0}}), "kv_lora_rank");
    parse_err(v3({{"max_position_embeddings", int64_t{1} << 40}}), "max_position_embeddings");
    parse_err(v3({{"moe_layer_freq", 0}}), "moe_layer_freq");
    parse_err(v3({{"rms_norm_eps", 0.0}}), "rms_norm_eps");
    // Every dim within bounds, but the parameter count overflows int64.
    parse_err(v3({{"num_hidden_layers", 4096},
                  {"n_routed_experts", 1 << 20},
                  {"n_group", 1},
                  {"topk_group", 1},
                  {"moe_intermediate_size", 1 << 20},
                  {"hidden_size", 1 << 20}}),
              "overflows int64");
    // Structural rules.
    parse_err(v3({{"num_attention_heads", 12}, {"num_key_value_heads", 5}}), "num_key_value_heads");
    parse_err(v3({{"n_routed_experts", 10}, {"n_group", 4}}), "n_group");
    parse_err(v3({{"topk_group", 9}}), "topk_group");
    parse_err(v3({{"num_experts_per_tok", 300}}), "num_experts_per_tok");
    parse_err(v3({{"num_experts_per_tok", 64}, {"topk_group", 1}}), "topk_group * n_routed_experts / n_group");
    parse_err(v3({{"qk_rope_head_dim", 63}}), "qk_rope_head_dim");
    parse_err(v3({{"qk_rope_head_dim", 0}}), "qk_rope_head_dim");
    parse_err(v3({{"scoring_func", "relu"}}), "scoring_func");
}

TEST(ModelConfigTest, WrongTypesNameTheField) {
    EXPECT_TRUE(contains(parse_err(v3({{"hidden_size", "7168"}}), "'hidden_size'"), "string"));
    parse_err(v3({{"hidden_size", 7168.5}}), "'hidden_size'");
    parse_err(v3({{"hidden_size", true}}), "'hidden_size'");
    parse_err(v3({{"vocab_size", std::numeric_limits<uint64_t>::max()}}), "'vocab_size'");
    parse_err(v3({{"norm_topk_prob", 1}}), "'norm_topk_prob'");
    parse_err(v3({{"routed_scaling_factor", "2.5"}}), "'routed_scaling_factor'");
    parse_err(v3({{"scoring_func", 1}}), "'scoring_func'");
    parse_err(v3({{"num_experts", "8"}}), "'num_experts'");  // alias fields are named as written
    parse_err({{"model_type", 5}}, "'model_type'");
    parse_err({{"hidden_size", 5}}, "'model_type'");
    parse_err(json::array(), "object");
    parse_err(v3({{"quantization_config", 3}}), "quantization_config");
    parse_err(v3({{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {128}}}}}),
              "quantization_config.weight_block_size");
    parse_err(v3({{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}}}),
              "quantization_config.weight_block_size");
    const ModelConfig q = parse_ok(v3(
        {{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {64, 32}}, {"scale_fmt", "ue8m0"}}}}));
    ASSERT_TRUE(q.fp8.has_value());
    EXPECT_EQ(q.fp8->block_n, 64);
    EXPECT_EQ(q.fp8->block_k, 32);
    EXPECT_EQ(q.fp8->scale_fmt, "ue8m0");
    EXPECT_FALSE(parse_ok(v3({{"quantization_config", {{"quant_method", "compressed-tensors"}}}})).fp8.has_value());
}

TEST(ModelConfigTest, LoadErrorsNameTheFile) {
    testing::TempDir dir;
    Result<ModelConfig> missing = load_model_config(dir.path());
    ASSERT_FALSE(missing.ok());
    EXPECT_TRUE(contains(missing.status().message(), "config.json"));

    testing::write_text(dir.path() / "config.json", "{\"model_type\": \"deepseek_v3\",\n \"hidden_size\": 12,,}");
    Result<ModelConfig> bad = load_model_config(dir.path());
    ASSERT_FALSE(bad.ok());
    EXPECT_TRUE(contains(bad.status().message(), (dir.path() / "config.json").string())) << bad.status().message();
    EXPECT_TRUE(contains(bad.status().message(), "invalid JSON at byte")) << bad.status().message();
    EXPECT_TRUE(contains(bad.status().message(), "line 2")) << bad.status().message();

    testing::write_text(dir.path() / "config.json", R"({"model_type": "deepseek_v3", "hidden_size": "x"})");
    Result<ModelConfig> typed = load_model_config(dir.path());
    ASSERT_FALSE(typed.ok());
    EXPECT_TRUE(contains(typed.status().message(), "config.json")) << typed.status().message();
    EXPECT_TRUE(contains(typed.status().message(), "'hidden_size'")) << typed.status().message();
}

}  // namespace
}  // namespace penstock::loader
