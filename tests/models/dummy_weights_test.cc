// `--load-format dummy` (ModelOptions::dummy_weights_seed + loader::Checkpoint::none()): every family builds from its
// config alone, opens no file, and runs a finite forward (chunks of 17); the same seed gives the same logits bit for
// bit, another seed other logits; a later stage (layer range [1, n)) loads its own layers only; `--num-layers`
// (loader::with_num_layers) builds every family at partial depth.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "runtime/model_runner.h"

namespace penstock {
namespace {

struct Loaded {
    std::unique_ptr<runtime::ModelRunner> runner;
    loader::LoadStats stats;
};

Loaded load(const std::string& dir, uint64_t seed, loader::LayerRange range = {0, 0}, int64_t num_layers = 0) {
    auto config = loader::load_model_config(dir);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (config.ok() && num_layers > 0) {
        config = loader::with_num_layers(*config, num_layers);
        EXPECT_TRUE(config.ok()) << config.status().to_string();
    }
    if (range.end == 0) range = {0, config->num_hidden_layers};
    models::ModelOptions options;
    options.dummy_weights_seed = seed;
    Loaded l;
    auto model = models::load_model(*config, loader::Checkpoint::none(), range, options, &l.stats);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (!model.ok()) return l;
    l.runner = std::make_unique<runtime::ModelRunner>(std::move(model).value(),
                                                      runtime::RunnerOptions{.n_pages = 16, .n_threads = 1});
    return l;
}

std::vector<std::string> family_dirs() {
    const std::string f = PENSTOCK_FIXTURES_DIR;
    const std::string d = PENSTOCK_TEST_DATA_DIR;
    return {f + "/deepseek_v3_tiny", f + "/deepseek_v3_tiny_fp8", f + "/glm_moe_dsa_tiny", f + "/kimi_linear_tiny",
            d + "/variants_k3/k3_tiny_block2", d + "/variants_dsa/glm_h3_freq_topk8_sharded"};
}

class DummyWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(DummyWeights, FiniteDeterministicAndSeeded) {
    const std::string dir = GetParam();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 100);
    const std::vector<std::vector<int32_t>> prompts{prompt};
    Loaded a = load(dir, 1234);
    Loaded b = load(dir, 1234);
    Loaded c = load(dir, 99);
    ASSERT_TRUE(a.runner && b.runner && c.runner);
    EXPECT_TRUE(a.stats.files_opened.empty()) << "dummy weights opened " << a.stats.files_opened.front();
    auto la = a.runner->prefill_all_logits(prompts, 17);
    auto lb = b.runner->prefill_all_logits(prompts, 17);
    auto lc = c.runner->prefill_all_logits(prompts, 17);
    ASSERT_TRUE(la.ok() && lb.ok() && lc.ok());
    const Tensor& ta = (*la)[0];
    const Tensor& tb = (*lb)[0];
    const Tensor& tc = (*lc)[0];
    ASSERT_EQ(ta.numel(), tb.numel());
    int64_t differ = 0;
    double max_abs = 0.0;
    for (int64_t i = 0; i < ta.numel(); ++i) {
        const float x = ta.ptr<float>()[i];
        ASSERT_TRUE(std::isfinite(x)) << i;
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(x)));
        ASSERT_EQ(x, tb.ptr<float>()[i]) << i;  // same seed: the same weights, bit for bit
        differ += tc.ptr<float>()[i] != tb.ptr<float>()[i];
    }
    EXPECT_GT(max_abs, 0.0);                 // not all zeros
    EXPECT_GT(differ, ta.numel() / 2);       // another seed, other weights
}

TEST_P(DummyWeights, LaterStageLoadsItsOwnLayers) {
    Loaded s = load(GetParam(), 5, {1, 2});
    ASSERT_TRUE(s.runner);
    EXPECT_FALSE(s.runner->model().is_first_stage());
    EXPECT_TRUE(s.stats.files_opened.empty());
}

TEST_P(DummyWeights, PartialDepthBuildsAndRuns) {
    // Every family at each depth 1..n-1: the family's own parser accepts the cut config (per-layer lists cut with it),
    // the model holds that many layers, and its forward is finite and differs from the full-depth model's.
    auto config = loader::load_model_config(GetParam());
    ASSERT_TRUE(config.ok());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back((i * 13 + 5) % 100);
    const std::vector<std::vector<int32_t>> prompts{prompt};
    Loaded full = load(GetParam(), 7);
    ASSERT_TRUE(full.runner);
    auto lf = full.runner->prefill_all_logits(prompts, 0);
    ASSERT_TRUE(lf.ok());
    for (int64_t n = 1; n < config->num_hidden_layers; ++n) {
        Loaded cut = load(GetParam(), 7, {0, n}, n);
        ASSERT_TRUE(cut.runner) << "num_layers " << n;
        EXPECT_EQ(cut.runner->model().config().num_hidden_layers, n);
        auto lc = cut.runner->prefill_all_logits(prompts, 0);
        ASSERT_TRUE(lc.ok()) << lc.status().to_string();
        const Tensor& a = (*lf)[0];
        const Tensor& b = (*lc)[0];
        ASSERT_EQ(a.numel(), b.numel());
        int64_t differ = 0;
        for (int64_t i = 0; i < b.numel(); ++i) {
            ASSERT_TRUE(std::isfinite(b.ptr<float>()[i])) << "num_layers " << n << " element " << i;
            differ += a.ptr<float>()[i] != b.ptr<float>()[i];
        }
        EXPECT_GT(differ, b.numel() / 2) << "num_layers " << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Families, DummyWeights, ::testing::ValuesIn(family_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                             std::string n = i.param.substr(i.param.find_last_of('/') + 1);
                             for (char& ch : n) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return n;
                         });

}  // namespace
}  // namespace penstock
