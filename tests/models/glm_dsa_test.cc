// DSA family (glm_moe_dsa, deepseek_v32) against Hugging Face transformers 5.17 reference logits (fp32 on the same
// bf16 weights): every prompt, every position, chunk sizes whole/1/5/17/64, both MLA forms of the dense path, ragged
// multi-prompt batches, and the variant fixtures in tests/data/variants_dsa (made by tools/make_dsa_variants.py).
// Also: a tiny indexer logits budget changes nothing (bit for bit), a prompt of <= index_topk tokens through the
// forced sparse path is exactly the dense causal result, the FP8 indexer is chunking-invariant and close to the
// reference, and the indexer_types / mlp_layer_types config rules.
#include "models/glm_dsa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/reference.h"
#include "kernels/ops_dsa.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "runtime/model_runner.h"

namespace penstock {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxAbsDiff = 1e-4;    // issue #3 asks <= 2e-3; the fp32 reference path reaches a few 1e-6
constexpr double kArgmaxMargin = 2e-3;  // argmax identical wherever the reference top-2 gap exceeds this

std::string fixture_dir() { return std::string(PENSTOCK_FIXTURES_DIR) + "/glm_moe_dsa_tiny"; }

struct Case {
    std::string model_dir;
    int64_t chunk_size;
    models::MlaForm form;
    bool batched;  // all prompts in one ragged batch
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    std::string name = fs::path(c.model_dir).filename().string() + "_chunk" + std::to_string(c.chunk_size) +
                       (c.form == models::MlaForm::kMha ? "_mha" : "_absorbed") + (c.batched ? "_batched" : "");
    for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name;
}

std::unique_ptr<runtime::ModelRunner> make_runner(const std::string& dir, const models::ModelOptions& options,
                                                  int64_t n_pages) {
    auto config = loader::load_model_config(dir);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (!config.ok()) return nullptr;
    auto ckpt = loader::Checkpoint::open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    if (!ckpt.ok()) return nullptr;
    loader::LoadStats stats;
    auto model = models::load_glm_dsa_model(*config, *ckpt, {0, config->num_hidden_layers}, options, &stats);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (!model.ok()) return nullptr;
    return std::make_unique<runtime::ModelRunner>(std::move(model).value(),
                                                  runtime::RunnerOptions{.n_pages = n_pages, .n_threads = 2});
}

// Logits of every prompt: one ragged batch, or one request after the other.
std::vector<Tensor> run_prompts(runtime::ModelRunner* runner, const std::vector<std::vector<int32_t>>& prompts,
                                int64_t chunk_size, bool batched) {
    std::vector<Tensor> got;
    if (batched) {
        auto r = runner->prefill_all_logits(prompts, chunk_size);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        if (r.ok()) got = std::move(r).value();
        return got;
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto r = runner->prefill_all_logits(std::span(&prompts[i], 1), chunk_size, static_cast<int64_t>(i));
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        if (r.ok()) got.push_back(std::move(r->front()));
    }
    return got;
}

std::vector<std::vector<int32_t>> prompts_of(const std::vector<testing::ReferencePrompt>& ref) {
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    return prompts;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.ptr<const float>(), b.ptr<const float>(), a.nbytes()) == 0;
}

class GlmDsaFixture : public ::testing::TestWithParam<Case> {};

TEST_P(GlmDsaFixture, MatchesReferenceLogits) {
    const Case& c = GetParam();
    const std::vector<testing::ReferencePrompt> ref = testing::load_reference(c.model_dir);
    auto runner = make_runner(c.model_dir, {.mla_form = c.form}, /*n_pages=*/64);
    ASSERT_NE(runner, nullptr);
    const std::vector<Tensor> got = run_prompts(runner.get(), prompts_of(ref), c.chunk_size, c.batched);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        const testing::LogitsComparison cmp = testing::compare_logits(got[i], ref[i].logits, kArgmaxMargin);
        EXPECT_LE(cmp.max_abs_diff, kMaxAbsDiff)
            << "prompt " << i << " (" << ref[i].ids.size() << " tokens): " << cmp.describe();
        EXPECT_EQ(cmp.argmax_mismatches, 0) << "prompt " << i << ": " << cmp.describe();
        std::printf("[ max |dlogit| ] %s prompt %zu (%zu tokens): %.3g\n", case_name({c, 0}).c_str(), i,
                    ref[i].ids.size(), cmp.max_abs_diff);
    }
    EXPECT_EQ(runner->page_pool().n_used(), 0) << "pages leaked";
}

std::vector<Case> fixture_cases() {
    std::vector<Case> cases;
    for (int64_t chunk : {0, 1, 5, 17, 64}) {
        for (auto form : {models::MlaForm::kMha, models::MlaForm::kAbsorbed}) {
            cases.push_back({fixture_dir(), chunk, form, false});
        }
    }
    for (int64_t chunk : {0, 5, 17}) cases.push_back({fixture_dir(), chunk, models::MlaForm::kMha, true});
    cases.push_back({fixture_dir(), 64, models::MlaForm::kAbsorbed, true});
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixture, GlmDsaFixture, ::testing::ValuesIn(fixture_cases()), case_name);

std::vector<Case> variant_cases() {
    std::vector<Case> cases;
    const fs::path root = fs::path(PENSTOCK_TEST_DATA_DIR) / "variants_dsa";
    if (!fs::exists(root)) return cases;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root)) {
        if (e.is_directory() && fs::exists(e.path() / "reference.safetensors")) dirs.push_back(e.path());
    }
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
        for (int64_t chunk : {0, 1, 5, 17, 64}) {
            for (auto form : {models::MlaForm::kMha, models::MlaForm::kAbsorbed}) {
                cases.push_back({d.string(), chunk, form, chunk == 5});
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Variants, GlmDsaFixture, ::testing::ValuesIn(variant_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GlmDsaFixture);

// Row slices of the indexer logits (down to one row per slice) change nothing, bit for bit.
TEST(GlmDsa, TinyLogitsBudgetIsBitIdentical) {
    const auto ref = testing::load_reference(fixture_dir());
    const auto prompts = prompts_of(ref);
    for (int64_t chunk : {0, 17}) {
        auto big = make_runner(fixture_dir(), {.mla_form = models::MlaForm::kAbsorbed}, 64);
        auto tiny =
            make_runner(fixture_dir(), {.mla_form = models::MlaForm::kAbsorbed, .dsa_logits_budget_bytes = 1}, 64);
        auto mid = make_runner(fixture_dir(),
                               {.mla_form = models::MlaForm::kAbsorbed, .dsa_logits_budget_bytes = 3 * 4 * 150}, 64);
        ASSERT_TRUE(big && tiny && mid);
        const auto a = run_prompts(big.get(), prompts, chunk, true);
        const auto b = run_prompts(tiny.get(), prompts, chunk, true);
        const auto c = run_prompts(mid.get(), prompts, chunk, true);
        ASSERT_EQ(a.size(), prompts.size());
        ASSERT_EQ(b.size(), prompts.size());
        ASSERT_EQ(c.size(), prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_TRUE(bit_equal(a[i], b[i])) << "chunk " << chunk << " prompt " << i;
            EXPECT_TRUE(bit_equal(a[i], c[i])) << "chunk " << chunk << " prompt " << i;
        }
    }
}

// A prompt of <= index_topk tokens: every row selects its whole causal prefix, so the sparse path (forced with
// dsa_dense_max_kv = 0) is exactly the dense causal absorbed MLA, and within rounding of the MHA form.
TEST(GlmDsa, ShortPromptIsExactlyDenseCausal) {
    const auto ref = testing::load_reference(fixture_dir());
    std::vector<std::vector<int32_t>> prompts{std::vector<int32_t>(ref[3].ids.begin(), ref[3].ids.begin() + 16),
                                              ref[1].ids};
    auto dense = make_runner(fixture_dir(), {.mla_form = models::MlaForm::kAbsorbed}, 8);
    auto sparse = make_runner(fixture_dir(), {.mla_form = models::MlaForm::kAbsorbed, .dsa_dense_max_kv = 0}, 8);
    auto mha = make_runner(fixture_dir(), {.mla_form = models::MlaForm::kMha}, 8);
    ASSERT_TRUE(dense && sparse && mha);
    for (int64_t chunk : {0, 5}) {
        const auto a = run_prompts(dense.get(), prompts, chunk, true);
        const auto b = run_prompts(sparse.get(), prompts, chunk, true);
        const auto c = run_prompts(mha.get(), prompts, chunk, true);
        ASSERT_EQ(a.size(), 2u);
        ASSERT_EQ(b.size(), 2u);
        ASSERT_EQ(c.size(), 2u);
        for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_TRUE(bit_equal(a[i], b[i])) << "chunk " << chunk << " prompt " << i;
            EXPECT_LE(testing::compare_logits(a[i], c[i], 0.0).max_abs_diff, 1e-5);
        }
    }
    // The 16-token prefix of prompt 3 is also the reference's first 16 rows.
    const auto whole = run_prompts(dense.get(), prompts, 0, true);
    const TensorView ref16 = ref[3].logits.view().slice(0, 0, 16);
    EXPECT_LE(testing::compare_logits(whole[0], ref16, kArgmaxMargin).max_abs_diff, kMaxAbsDiff);
}

// The forced sparse path over the whole fixture equals the reference too (every row through the indexer's top-k).
TEST(GlmDsa, ForcedSparsePathMatchesReference) {
    const auto ref = testing::load_reference(fixture_dir());
    auto runner = make_runner(fixture_dir(), {.mla_form = models::MlaForm::kMha, .dsa_dense_max_kv = 0}, 64);
    ASSERT_NE(runner, nullptr);
    for (int64_t chunk : {0, 7}) {
        const auto got = run_prompts(runner.get(), prompts_of(ref), chunk, true);
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
            const auto cmp = testing::compare_logits(got[i], ref[i].logits, kArgmaxMargin);
            EXPECT_LE(cmp.max_abs_diff, kMaxAbsDiff) << "chunk " << chunk << " prompt " << i << ": " << cmp.describe();
        }
    }
}

// FP8 indexer (DeepSeek-V3.2 reference numerics, not what transformers computes): results do not depend on the
// chunking, and stay close to the f32-indexer reference on this fixture.
TEST(GlmDsa, Fp8IndexerIsChunkingInvariant) {
    const auto ref = testing::load_reference(fixture_dir());
    const auto prompts = prompts_of(ref);
    auto runner = make_runner(fixture_dir(), {.mla_form = models::MlaForm::kAbsorbed, .dsa_fp8_indexer = true}, 64);
    ASSERT_NE(runner, nullptr);
    const auto whole = run_prompts(runner.get(), prompts, 0, true);
    ASSERT_EQ(whole.size(), prompts.size());
    for (int64_t chunk : {1, 17, 64}) {
        const auto chunked = run_prompts(runner.get(), prompts, chunk, true);
        ASSERT_EQ(chunked.size(), prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto cmp = testing::compare_logits(chunked[i], whole[i], 0.0);
            EXPECT_LE(cmp.max_abs_diff, kMaxAbsDiff) << "chunk " << chunk << " prompt " << i << ": " << cmp.describe();
        }
    }
    // Prompts of <= index_topk tokens never consult the indexer: identical to the reference.
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_LE(testing::compare_logits(whole[i], ref[i].logits, kArgmaxMargin).max_abs_diff, kMaxAbsDiff);
    }
    for (size_t i = 2; i < prompts.size(); ++i) {
        const auto cmp = testing::compare_logits(whole[i], ref[i].logits, kArgmaxMargin);
        std::printf("[ fp8 indexer ] prompt %zu: vs the f32-indexer reference %s\n", i, cmp.describe().c_str());
    }
}

// Through models::load_model (what `penstock forward` uses) once the registry knows the DSA types.
TEST(GlmDsa, LoadsThroughTheRegistry) {
    if (!models::is_supported_model_type("glm_moe_dsa") || !models::is_supported_model_type("deepseek_v32")) {
        GTEST_SKIP() << "glm_moe_dsa / deepseek_v32 are not wired into models/registry.cc yet";
    }
    std::vector<std::string> dirs{fixture_dir()};
    const fs::path variants = fs::path(PENSTOCK_TEST_DATA_DIR) / "variants_dsa";
    if (fs::exists(variants / "v32_yarn_groups")) dirs.push_back((variants / "v32_yarn_groups").string());
    for (const std::string& dir : dirs) {
        auto config = loader::load_model_config(dir);
        ASSERT_TRUE(config.ok()) << config.status().to_string();
        auto ckpt = loader::Checkpoint::open(dir);
        ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
        auto model = models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, {}, nullptr);
        ASSERT_TRUE(model.ok()) << model.status().to_string();
        runtime::ModelRunner runner(std::move(model).value(), {.n_pages = 16, .n_threads = 2});
        const auto ref = testing::load_reference(dir);
        const auto got = run_prompts(&runner, prompts_of(ref), 17, true);
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
            EXPECT_LE(testing::compare_logits(got[i], ref[i].logits, kArgmaxMargin).max_abs_diff, kMaxAbsDiff) << dir;
        }
    }
}

// FP8 index-K rows are head_dim e4m3 bytes + one f32 scale (132 bytes for head_dim 128), read back unchanged; the
// f32 cache round-trips exactly; shared layers have no rows.
TEST(GlmDsa, IndexKCacheRows) {
    kv_cache::PagePool pool(4);
    kv_cache::RequestTables tables(&pool);
    ASSERT_TRUE(tables.reserve(7, 130).ok());
    const kv_cache::PageTable& table = tables.table(7);
    const int64_t n = 130, dim = 128;
    std::vector<float> vals(static_cast<size_t>(n * dim));
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
    Tensor k = Tensor::from_f32({n, dim}, vals);
    const kernels::Context ctx;
    for (bool fp8 : {false, true}) {
        models::DsaIndexKCache cache(4, dim, {0, 3}, fp8);
        EXPECT_EQ(cache.row_bytes(), fp8 ? 132u : 512u);
        EXPECT_TRUE(cache.has_layer(3));
        EXPECT_FALSE(cache.has_layer(1));
        // Two chunks, crossing a page boundary; the second chunk's layout gathers all n keys.
        auto layout_of = [&](int64_t prefix, int64_t len) {
            models::ForwardBatch batch;
            batch.seqs.push_back(models::SeqChunk{.request_id = 7,
                                                  .token_ids = std::vector<int32_t>(static_cast<size_t>(len), 1),
                                                  .prefix_len = prefix,
                                                  .pages = &table});
            return models::BatchLayout::build(batch);
        };
        cache.write(3, layout_of(0, 70), k.view().slice(0, 0, 70), ctx);
        const models::BatchLayout second = layout_of(70, n - 70);
        cache.write(3, second, k.view().slice(0, 70, n), ctx);
        const auto keys = cache.gather(3, second, ctx);
        if (!fp8) {
            EXPECT_EQ(std::memcmp(keys.k.ptr<const float>(), vals.data(), vals.size() * sizeof(float)), 0);
            continue;
        }
        Tensor want = Tensor::empty({n, dim}, DType::kF8E4M3);
        Tensor want_scale = Tensor::empty({n}, DType::kF32);
        kernels::dsa_quantize_fp8({.out = want, .scale = want_scale, .in = k, .rotate = true, .ue8m0 = true}, ctx);
        EXPECT_EQ(std::memcmp(keys.k.ptr<const uint8_t>(), want.ptr<const uint8_t>(), static_cast<size_t>(n * dim)), 0);
        EXPECT_EQ(std::memcmp(keys.scale.ptr<const float>(), want_scale.ptr<const float>(), n * sizeof(float)), 0);
    }
    tables.release(7);
}

TEST(GlmDsa, LogitsBudgetSlices) {
    EXPECT_EQ(models::dsa_rows_per_slice(1, 200), 1);
    EXPECT_EQ(models::dsa_rows_per_slice(800 * 3 + 799, 200), 3);
    EXPECT_EQ(models::dsa_rows_per_slice(models::kDsaCpuLogitsBudgetBytes, 128 * 1024), 512);
    const int64_t gib = int64_t{1} << 30;
    EXPECT_EQ(models::dsa_gpu_logits_budget_bytes(10 * gib, 141 * gib), 2 * gib);              // 20% of free
    EXPECT_EQ(models::dsa_gpu_logits_budget_bytes(300 * gib, 141 * gib), 141 * gib * 3 / 10);  // 30% of device
}

// ---------------------------------------------------------------------------------------------------------------
loader::ModelConfig fixture_config() {
    auto c = loader::load_model_config(fixture_dir());
    PENSTOCK_CHECK(c.ok()) << c.status().to_string();
    return *c;
}

std::vector<uint8_t> full_pattern(loader::ModelConfig c, const nlohmann::json& patch) {
    c.raw.erase("indexer_types");
    for (auto it = patch.begin(); it != patch.end(); ++it) c.raw[it.key()] = it.value();
    if (patch.contains("num_hidden_layers")) {
        c.num_hidden_layers = patch["num_hidden_layers"].get<int64_t>();
        c.raw.erase("mlp_layer_types");
    }
    auto d = models::parse_dsa_config(c);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return d.ok() ? d->full_indexer : std::vector<uint8_t>{};
}

TEST(GlmDsaConfig, IndexerTypesRules) {
    const loader::ModelConfig c = fixture_config();
    auto d = models::parse_dsa_config(c);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->full_indexer, (std::vector<uint8_t>{1, 1, 0, 1, 0, 0}));
    EXPECT_EQ(d->moe_mlp, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1}));
    EXPECT_EQ(d->index_topk, 16);
    EXPECT_EQ(d->index_n_heads, 4);
    EXPECT_EQ(d->index_head_dim, 32);
    EXPECT_TRUE(d->indexer_rope_interleave);
    // Defaults: freq 1 -> all full.
    EXPECT_EQ(full_pattern(c, nlohmann::json::object()), std::vector<uint8_t>(6, 1));
    // GLM-5.2: freq 4, offset 3 -> layers 0, 1, 2, then every 4th from 6.
    std::vector<uint8_t> want(78, 0);
    for (int i : {0, 1, 2}) want[static_cast<size_t>(i)] = 1;
    for (int i = 6; i < 78; i += 4) want[static_cast<size_t>(i)] = 1;
    const auto glm52 =
        full_pattern(c, {{"index_topk_freq", 4}, {"index_skip_topk_offset", 3}, {"num_hidden_layers", 78}});
    EXPECT_EQ(glm52, want);
    EXPECT_EQ(std::count(glm52.begin(), glm52.end(), 1), 21);
    // freq 2 with the default offset 2: max(i - 1, 0) % 2 == 0 -> 0, 1, 3, 5.
    EXPECT_EQ(full_pattern(c, {{"index_topk_freq", 2}}), (std::vector<uint8_t>{1, 1, 0, 1, 0, 1}));
    // An explicit pattern wins over freq / offset.
    EXPECT_EQ(full_pattern(c, {{"index_topk_pattern", "FFSSFS"}, {"index_topk_freq", 4}}),
              (std::vector<uint8_t>{1, 1, 0, 0, 1, 0}));
    // mlp_layer_types absent: first_k_dense_replace dense layers.
    loader::ModelConfig c2 = c;
    c2.raw.erase("mlp_layer_types");
    c2.first_k_dense_replace = 2;
    auto d2 = models::parse_dsa_config(c2);
    ASSERT_TRUE(d2.ok());
    EXPECT_EQ(d2->moe_mlp, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1}));
    // deepseek_v32: every layer full, half-split indexer RoPE, 64 index heads by default.
    loader::ModelConfig v32 = c;
    v32.model_type = "deepseek_v32";
    v32.raw.erase("index_n_heads");
    auto d3 = models::parse_dsa_config(v32);
    ASSERT_TRUE(d3.ok());
    EXPECT_EQ(d3->full_indexer, std::vector<uint8_t>(6, 1));
    EXPECT_FALSE(d3->indexer_rope_interleave);
    EXPECT_EQ(d3->index_n_heads, 64);
}

TEST(GlmDsaConfig, BadFieldsAreNamedErrors) {
    const loader::ModelConfig c = fixture_config();
    const auto expect_error = [&](const nlohmann::json& patch, const std::string& field) {
        loader::ModelConfig x = c;
        for (auto it = patch.begin(); it != patch.end(); ++it) x.raw[it.key()] = it.value();
        auto d = models::parse_dsa_config(x);
        ASSERT_FALSE(d.ok()) << patch.dump();
        EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(d.status().message().find(field), std::string::npos) << d.status().to_string();
    };
    expect_error({{"indexer_types", {"full", "shared"}}}, "indexer_types");
    expect_error({{"indexer_types", {"full", "full", "sparse", "full", "full", "full"}}}, "indexer_types");
    expect_error({{"indexer_types", {"shared", "full", "full", "full", "full", "full"}}}, "indexer_types");
    expect_error({{"mlp_layer_types", {"dense"}}}, "mlp_layer_types");
    expect_error({{"index_topk", -3}}, "index_topk");
    expect_error({{"index_head_dim", 8}}, "index_head_dim");
    expect_error({{"indexer_rope_interleave", "yes"}}, "indexer_rope_interleave");
}

// A stage may start at a `shared` indexer layer: the stage before it announces the top-k columns it hands on (only
// on the sparse path, and only when the next layer is shared); pp_cli_test runs such partitions end to end.
TEST(GlmDsaConfig, StageBeforeSharedLayerCarriesTopk) {
    const loader::ModelConfig c = fixture_config();  // indexer_types full, full, shared, full, shared, shared
    auto ckpt = loader::Checkpoint::open(fixture_dir());
    ASSERT_TRUE(ckpt.ok());
    auto first = models::load_glm_dsa_model(c, *ckpt, {0, 2}, {}, nullptr);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    auto shared_start = models::load_glm_dsa_model(c, *ckpt, {2, 3}, {}, nullptr);
    ASSERT_TRUE(shared_start.ok()) << shared_start.status().to_string();
    auto before_full = models::load_glm_dsa_model(c, *ckpt, {0, 3}, {}, nullptr);
    ASSERT_TRUE(before_full.ok());
    models::ForwardBatch sparse, dense;
    sparse.seqs.push_back({.request_id = 0, .token_ids = std::vector<int32_t>(17, 1)});  // 17 keys > index_topk 16
    dense.seqs.push_back({.request_id = 0, .token_ids = std::vector<int32_t>(16, 1)});
    EXPECT_EQ((*first)->topk_cols_after(sparse), 16);
    EXPECT_EQ((*first)->topk_cols_after(dense), 0);
    EXPECT_EQ((*before_full)->topk_cols_after(sparse), 0);  // layer 3 is full: it selects its own
    EXPECT_EQ((*shared_start)->topk_cols_after(sparse), 0);  // layer 3 is full
}

}  // namespace
}  // namespace penstock
