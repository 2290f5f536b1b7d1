// DeepSeek-V3 family against Hugging Face transformers 5.17 reference logits (fp32 on the same bf16 weights):
// every prompt, every position, chunk sizes whole/1/5/64, both MLA forms, ragged multi-prompt batches, a tiny
// max_kv_chunk_capacity (many MHA pieces merged by log-sum-exp), the FP8 block-scaled checkpoint, and the variant
// fixtures in tests/data/variants (other head counts, YaRN with mscale, n_group/topk_group > 1, sharded files).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/reference.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "runtime/model_runner.h"

namespace penstock {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxAbsDiff = 1e-4;   // issue #2 asks <= 2e-3; the fp32 reference path reaches ~2e-6
constexpr double kArgmaxMargin = 2e-3;  // argmax identical wherever the reference top-2 gap exceeds this

struct Case {
    std::string model_dir;
    int64_t chunk_size;
    models::MlaForm form;
    int64_t max_kv_chunk_capacity;
    bool batched;  // all prompts in one ragged batch
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    std::string name = fs::path(c.model_dir).filename().string() + "_chunk" + std::to_string(c.chunk_size) +
                       (c.form == models::MlaForm::kMha ? "_mha" : "_absorbed");
    if (c.max_kv_chunk_capacity < 1000) name += "_cap" + std::to_string(c.max_kv_chunk_capacity);
    if (c.batched) name += "_batched";
    for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name;
}

std::unique_ptr<runtime::ModelRunner> make_runner(const Case& c, int64_t n_pages, bool fp8_attention = false) {
    auto config = loader::load_model_config(c.model_dir);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    auto ckpt = loader::Checkpoint::open(c.model_dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    models::ModelOptions options{.mla_form = c.form, .max_kv_chunk_capacity = c.max_kv_chunk_capacity};
    options.fp8_attention = fp8_attention;
    loader::LoadStats stats;
    auto model = models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, options, &stats);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    return std::make_unique<runtime::ModelRunner>(std::move(model).value(),
                                                  runtime::RunnerOptions{.n_pages = n_pages, .n_threads = 2});
}

class DeepseekV3Fixture : public ::testing::TestWithParam<Case> {};

TEST_P(DeepseekV3Fixture, MatchesReferenceLogits) {
    const Case& c = GetParam();
    const std::vector<testing::ReferencePrompt> ref = testing::load_reference(c.model_dir);
    auto runner = make_runner(c, /*n_pages=*/64);
    ASSERT_NE(runner, nullptr);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    std::vector<Tensor> got;
    if (c.batched) {
        auto r = runner->prefill_all_logits(prompts, c.chunk_size);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        got = std::move(r).value();
    } else {
        for (size_t i = 0; i < prompts.size(); ++i) {
            auto r = runner->prefill_all_logits(std::span(&prompts[i], 1), c.chunk_size, static_cast<int64_t>(i));
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            got.push_back(std::move(r->front()));
        }
    }
    for (size_t i = 0; i < ref.size(); ++i) {
        const testing::LogitsComparison cmp = testing::compare_logits(got[i], ref[i].logits, kArgmaxMargin);
        EXPECT_LE(cmp.max_abs_diff, kMaxAbsDiff) << "prompt " << i << " (" << ref[i].ids.size() << " tokens): "
                                                 << cmp.describe();
        EXPECT_EQ(cmp.argmax_mismatches, 0) << "prompt " << i << ": " << cmp.describe();
    }
    EXPECT_EQ(runner->page_pool().n_used(), 0) << "pages leaked";
}

std::vector<Case> fixture_cases() {
    std::vector<Case> cases;
    const std::string fixtures = PENSTOCK_FIXTURES_DIR;
    for (const std::string name : {"deepseek_v3_tiny", "deepseek_v3_tiny_fp8"}) {
        for (int64_t chunk : {0, 1, 5, 64}) {
            for (auto form : {models::MlaForm::kMha, models::MlaForm::kAbsorbed}) {
                cases.push_back({fixtures + "/" + name, chunk, form, 128 * 1024, false});
            }
        }
        // Ragged batches of all four prompts advancing together, and MHA pieces of 7 keys (split across the batch).
        for (int64_t chunk : {0, 5, 64}) {
            for (auto form : {models::MlaForm::kMha, models::MlaForm::kAbsorbed}) {
                cases.push_back({fixtures + "/" + name, chunk, form, 128 * 1024, true});
            }
        }
        cases.push_back({fixtures + "/" + name, 17, models::MlaForm::kMha, 7, true});
        cases.push_back({fixtures + "/" + name, 0, models::MlaForm::kMha, 30, false});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekV3Fixture, ::testing::ValuesIn(fixture_cases()), case_name);

std::vector<Case> variant_cases() {
    std::vector<Case> cases;
    const fs::path root = fs::path(PENSTOCK_TEST_DATA_DIR) / "variants";
    if (!fs::exists(root)) return cases;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root)) {
        if (e.is_directory() && fs::exists(e.path() / "reference.safetensors")) dirs.push_back(e.path());
    }
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
        for (int64_t chunk : {0, 1, 5, 64}) {
            for (auto form : {models::MlaForm::kMha, models::MlaForm::kAbsorbed}) {
                cases.push_back({d.string(), chunk, form, 128 * 1024, chunk == 5});
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Variants, DeepseekV3Fixture, ::testing::ValuesIn(variant_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeepseekV3Fixture);

// The two MLA forms agree with each other more tightly than with the reference.
TEST(DeepseekV3, MhaAndAbsorbedFormsAgree) {
    const std::string dir = std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny";
    const auto ref = testing::load_reference(dir);
    std::vector<std::vector<int32_t>> prompts{ref.back().ids};
    auto mha = make_runner({dir, 0, models::MlaForm::kMha, 128 * 1024, false}, 8);
    auto absorbed = make_runner({dir, 0, models::MlaForm::kAbsorbed, 128 * 1024, false}, 8);
    auto a = mha->prefill_all_logits(prompts, 0);
    auto b = absorbed->prefill_all_logits(prompts, 0);
    ASSERT_TRUE(a.ok() && b.ok());
    const auto cmp = testing::compare_logits((*a)[0], (*b)[0], 0.0);
    EXPECT_LE(cmp.max_abs_diff, 1e-3) << cmp.describe();
}

// FP8 attention (ModelOptions::fp8_attention, MHA form): per-tensor e4m3 q, k, v and out around the reference
// attention. Whole prompts and ragged batches take it; with chunks of 5 the first chunk of each prompt does (the later
// ones have a cached prefix and stay f32). FP8 attention is lossy and this random-weight fixture is sensitive to it: on
// 2026-12-01 the logits' relative RMS error against transformers was 4-20% (growing with the prompt: more keys, sharper
// score errors), so this test guards the wiring, not the quality: the logits move (the path runs) and the error stays
// under 30% (a wrong scale or an undequantised output gives ~100% or NaN). The attention's own accuracy is checked at
// the op level (tests/kernels/ref_attention_test.cc, tests/kernels/cuda/fp8_attention_test.cc).
TEST(DeepseekV3, Fp8AttentionStaysWithinFp8AccuracyOfTheReference) {
    const std::string dir = std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny";
    const auto ref = testing::load_reference(dir);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    for (const int64_t chunk : {int64_t{0}, int64_t{5}}) {
        for (const bool batched : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "chunk " << chunk << (batched ? " batched" : ""));
            auto fp8 = make_runner({dir, chunk, models::MlaForm::kMha, 128 * 1024, batched}, 64, true);
            auto plain = make_runner({dir, chunk, models::MlaForm::kMha, 128 * 1024, batched}, 64, false);
            std::vector<Tensor> got, base;
            if (batched) {
                auto a = fp8->prefill_all_logits(prompts, chunk);
                auto b = plain->prefill_all_logits(prompts, chunk);
                ASSERT_TRUE(a.ok() && b.ok());
                got = std::move(a).value();
                base = std::move(b).value();
            } else {
                for (size_t i = 0; i < prompts.size(); ++i) {
                    auto a = fp8->prefill_all_logits(std::span(&prompts[i], 1), chunk, static_cast<int64_t>(i));
                    auto b = plain->prefill_all_logits(std::span(&prompts[i], 1), chunk, static_cast<int64_t>(i));
                    ASSERT_TRUE(a.ok() && b.ok());
                    got.push_back(std::move(a->front()));
                    base.push_back(std::move(b->front()));
                }
            }
            for (size_t i = 0; i < ref.size(); ++i) {
                const TensorView r = ref[i].logits;
                double err = 0.0, ref_sq = 0.0, moved = 0.0;
                for (int64_t j = 0; j < r.numel(); ++j) {
                    const double want = r.ptr<const float>()[j], g = got[i].ptr<const float>()[j];
                    err += (g - want) * (g - want);
                    ref_sq += want * want;
                    moved = std::max(moved, std::fabs(g - static_cast<double>(base[i].ptr<const float>()[j])));
                }
                const double rel = std::sqrt(err / ref_sq);
                std::printf("fp8 attention: chunk %lld%s prompt %zu: relative RMS error %.4f, max move %.3g\n",
                            static_cast<long long>(chunk), batched ? " batched" : "", i, rel, moved);
                EXPECT_LT(rel, 0.3) << "prompt " << i;
                EXPECT_GT(moved, 0.0) << "prompt " << i << ": FP8 attention left the logits unchanged";
            }
            EXPECT_EQ(fp8->page_pool().n_used(), 0) << "pages leaked";
        }
    }
}

TEST(DeepseekV3, RejectsOutOfVocabularyIdsAndOversizedPrompts) {
    const std::string dir = std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny";
    auto runner = make_runner({dir, 0, models::MlaForm::kMha, 128 * 1024, false}, 2);
    std::vector<std::vector<int32_t>> bad_id{{1, 2, 100000}};
    auto r = runner->prefill_all_logits(bad_id, 0);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("100000"), std::string::npos) << r.status().to_string();
    std::vector<std::vector<int32_t>> too_long{std::vector<int32_t>(200, 3)};  // 4 pages needed, 2 in the pool
    r = runner->prefill_all_logits(too_long, 0);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(runner->page_pool().n_used(), 0);
}

TEST(DeepseekV3, UnsupportedModelTypeIsAnError) {
    auto config = loader::load_model_config(std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny");
    ASSERT_TRUE(config.ok());
    loader::ModelConfig other = *config;
    other.model_type = "llama";
    auto ckpt = loader::Checkpoint::open(std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny");
    ASSERT_TRUE(ckpt.ok());
    auto model = models::load_model(other, *ckpt, {0, other.num_hidden_layers}, {}, nullptr);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(model.status().message().find("llama"), std::string::npos);
}

}  // namespace
}  // namespace penstock
