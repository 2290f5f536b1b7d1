// Kimi Linear family against Hugging Face transformers 5.17 reference logits (fp32 on the same bf16 weights): every
// prompt of ../shared/fixtures/kimi_linear_tiny and of the variants in tests/data/variants_kda, every position, chunk
// sizes whole / 1 / 5 / 17 / 64 (KDA conv + recurrent state and the MLA latent cache carried across chunks), both MLA
// forms, ragged batches of all prompts; and the K3-shaped variants in tests/data/variants_k3 (references from the
// independent torch oracle tests/python/k3_oracle.py), chunked vs unchunked. Each case also checks that no page or
// KDA state slot leaks.
#include "models/kimi_linear.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/reference.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "runtime/model_runner.h"

namespace penstock {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxAbsDiff = 1e-4;    // issue #3 asks <= 2e-3; the fp32 reference path is far tighter
constexpr double kArgmaxMargin = 2e-3;  // argmax identical wherever the reference top-2 gap exceeds this

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

std::unique_ptr<runtime::ModelRunner> make_runner(const std::string& dir, models::MlaForm form, int64_t n_pages,
                                                  int64_t max_state_slots = 256,
                                                  models::Fp8Weights fp8 = models::Fp8Weights::kAuto,
                                                  loader::LoadStats* stats = nullptr) {
    auto config = loader::load_model_config(dir);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (!config.ok()) return nullptr;
    auto ckpt = loader::Checkpoint::open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    if (!ckpt.ok()) return nullptr;
    models::ModelOptions options{.mla_form = form, .max_state_slots = max_state_slots};
    options.fp8_weights = fp8;
    auto model = models::load_kimi_linear_model(*config, *ckpt, {0, config->num_hidden_layers}, options, stats);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (!model.ok()) return nullptr;
    return std::make_unique<runtime::ModelRunner>(std::move(model).value(),
                                                  runtime::RunnerOptions{.n_pages = n_pages, .n_threads = 2});
}

// Logits of every prompt, one request at a time or all in one ragged batch.
std::vector<Tensor> run_prompts(runtime::ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                int64_t chunk_size, bool batched) {
    std::vector<Tensor> got;
    if (batched) {
        auto r = runner.prefill_all_logits(prompts, chunk_size);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        if (r.ok()) got = std::move(r).value();
    } else {
        for (size_t i = 0; i < prompts.size(); ++i) {
            auto r = runner.prefill_all_logits(std::span(&prompts[i], 1), chunk_size, static_cast<int64_t>(i));
            EXPECT_TRUE(r.ok()) << r.status().to_string();
            if (r.ok()) got.push_back(std::move(r->front()));
        }
    }
    return got;
}

class KimiLinearFixture : public ::testing::TestWithParam<Case> {};

TEST_P(KimiLinearFixture, MatchesReferenceLogits) {
    const Case& c = GetParam();
    const std::vector<testing::ReferencePrompt> ref = testing::load_reference(c.model_dir);
    auto runner = make_runner(c.model_dir, c.form, /*n_pages=*/64);
    ASSERT_NE(runner, nullptr);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    const std::vector<Tensor> got = run_prompts(*runner, prompts, c.chunk_size, c.batched);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        const testing::LogitsComparison cmp = testing::compare_logits(got[i], ref[i].logits, kArgmaxMargin);
        EXPECT_LE(cmp.max_abs_diff, kMaxAbsDiff)
            << "prompt " << i << " (" << ref[i].ids.size() << " tokens): " << cmp.describe();
        EXPECT_EQ(cmp.argmax_mismatches, 0) << "prompt " << i << ": " << cmp.describe();
        std::printf("[ measured ] %s prompt %zu (%zu tokens): max |diff| %.3g\n",
                    fs::path(c.model_dir).filename().c_str(), i, ref[i].ids.size(), cmp.max_abs_diff);
    }
    EXPECT_EQ(runner->page_pool().n_used(), 0) << "pages leaked";
    EXPECT_EQ(runner->cache().n_admitted(), 0) << "KDA state slots leaked";
}

std::vector<fs::path> variant_dirs(const char* sub) {
    std::vector<fs::path> dirs;
    const fs::path root = fs::path(PENSTOCK_TEST_DATA_DIR) / sub;
    if (!fs::exists(root)) return dirs;
    for (const auto& e : fs::directory_iterator(root)) {
        if (e.is_directory() && fs::exists(e.path() / "reference.safetensors")) dirs.push_back(e.path());
    }
    std::sort(dirs.begin(), dirs.end());
    return dirs;
}

std::vector<Case> fixture_cases() {
    std::vector<Case> cases;
    std::vector<std::string> dirs{std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny"};
    for (const auto& d : variant_dirs("variants_kda")) dirs.push_back(d.string());
    for (const std::string& dir : dirs) {
        for (int64_t chunk : {0, 1, 5, 17, 64}) {
            cases.push_back({dir, chunk, models::MlaForm::kMha, false});
        }
        cases.push_back({dir, 0, models::MlaForm::kAbsorbed, false});
        cases.push_back({dir, 17, models::MlaForm::kAbsorbed, false});
        for (int64_t chunk : {0, 5, 64}) cases.push_back({dir, chunk, models::MlaForm::kMha, true});
        cases.push_back({dir, 17, models::MlaForm::kAbsorbed, true});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KimiLinearFixture, ::testing::ValuesIn(fixture_cases()), case_name);

std::vector<Case> k3_cases() {
    std::vector<Case> cases;
    for (const auto& d : variant_dirs("variants_k3")) {
        for (int64_t chunk : {0, 1, 5, 17, 64}) cases.push_back({d.string(), chunk, models::MlaForm::kMha, false});
        cases.push_back({d.string(), 0, models::MlaForm::kAbsorbed, false});
        cases.push_back({d.string(), 5, models::MlaForm::kAbsorbed, true});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(K3, KimiLinearFixture, ::testing::ValuesIn(k3_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KimiLinearFixture);

// Kimi K3's published mixed checkpoint layout (compressed-tensors): routed experts MXFP4 (`weight_packed` +
// `weight_scale`, e8m0 per 32 columns), attention and shared-expert projections FP8 (`weight` e4m3 + per-channel
// `weight_scale`). The K3 variant is re-encoded that way here (this test's own quantiser), and beside it the same
// dequantised values are written as plain f32 weights: both checkpoints must give bit-identical logits, so every
// quantised tensor reaches the model under the right name with the right values.
float mxfp4_round(float x, int e, uint8_t* code) {
    static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = std::fabs(std::ldexp(x, -e));
    int best = 0;
    for (int i = 1; i < 8; ++i) {
        if (std::fabs(kMag[i] - v) < std::fabs(kMag[best] - v)) best = i;
    }
    *code = static_cast<uint8_t>(best | (std::signbit(x) ? 8 : 0));
    return std::copysign(std::ldexp(kMag[best], e), x);
}

TEST(KimiLinear, K3MixedQuantizedCheckpointLoads) {
    const fs::path src = std::string(PENSTOCK_TEST_DATA_DIR) + "/variants_k3/k3_tiny_block2";
    if (!fs::exists(src)) GTEST_SKIP() << "no " << src;
    auto file = loader::SafetensorsFile::open(src / "model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    const fs::path root = fs::temp_directory_path() / ("penstock_k3_quant_" + std::to_string(::getpid()));
    struct RemoveOnExit {
        fs::path p;
        ~RemoveOnExit() {
            std::error_code ec;
            fs::remove_all(p, ec);
        }
    } cleanup{root};
    const fs::path quant = root / "quant", plain = root / "plain";
    fs::create_directories(quant);
    fs::create_directories(plain);
    std::vector<std::vector<uint8_t>> bytes;  // owns the written tensors
    std::vector<std::vector<float>> floats;
    bytes.reserve(4096);
    floats.reserve(4096);
    loader::NamedViews qv, pv;
    int n_mxfp4 = 0, n_fp8 = 0;
    for (const loader::TensorInfo& info : (*file)->tensors()) {
        const TensorView v = (*file)->view(info);
        const bool linear = v.ndim == 2 && v.dtype == DType::kBF16 && info.name.ends_with(".weight");
        const bool routed = linear && info.name.find(".experts.") != std::string::npos;
        const bool fp8 = linear && !routed &&
                         (info.name.find(".self_attn.") != std::string::npos ||
                          info.name.find(".shared_experts.") != std::string::npos);
        if (!routed && !fp8) {
            qv.push_back({info.name, v});
            pv.push_back({info.name, v});
            continue;
        }
        const int64_t rows = v.shape[0], cols = v.shape[1];
        std::vector<float> x(static_cast<size_t>(rows * cols));
        for (int64_t i = 0; i < rows * cols; ++i) {
            uint16_t h;
            std::memcpy(&h, static_cast<const uint8_t*>(v.data) + 2 * i, 2);
            x[static_cast<size_t>(i)] = bf16_to_float(h);
        }
        std::vector<float>& deq = floats.emplace_back(x.size());
        const std::string base = info.name.substr(0, info.name.size() - std::string(".weight").size());
        if (routed) {
            ++n_mxfp4;
            const int64_t groups = (cols + 31) / 32;
            std::vector<uint8_t>& packed = bytes.emplace_back(static_cast<size_t>(rows * cols / 2));
            std::vector<uint8_t>& scale = bytes.emplace_back(static_cast<size_t>(rows * groups));
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t gi = 0; gi < groups; ++gi) {
                    float amax = 0.0f;
                    for (int64_t c = 32 * gi; c < std::min(cols, 32 * gi + 32); ++c) {
                        amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
                    }
                    const int e = amax > 0.0f ? static_cast<int>(std::ceil(std::log2(amax / 6.0f))) : -127;
                    scale[static_cast<size_t>(r * groups + gi)] = static_cast<uint8_t>(e + 127);
                    for (int64_t c = 32 * gi; c < std::min(cols, 32 * gi + 32); ++c) {
                        uint8_t code = 0;
                        const size_t i = static_cast<size_t>(r * cols + c);
                        deq[i] = mxfp4_round(x[i], e, &code);
                        uint8_t& b = packed[i / 2];
                        b = (i % 2 == 0) ? static_cast<uint8_t>((b & 0xf0u) | code)
                                         : static_cast<uint8_t>((b & 0x0fu) | (code << 4));
                    }
                }
            }
            qv.push_back(
                {base + ".weight_packed", TensorView::contiguous(packed.data(), DType::kU8, Shape{rows, cols / 2})});
            qv.push_back(
                {base + ".weight_scale", TensorView::contiguous(scale.data(), DType::kU8, Shape{rows, groups})});
        } else {
            ++n_fp8;
            std::vector<uint8_t>& q = bytes.emplace_back(static_cast<size_t>(rows * cols));
            std::vector<float>& sc = floats.emplace_back(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) {
                float amax = 0.0f;
                for (int64_t c = 0; c < cols; ++c)
                    amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
                const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
                sc[static_cast<size_t>(r)] = s;
                for (int64_t c = 0; c < cols; ++c) {
                    const size_t i = static_cast<size_t>(r * cols + c);
                    q[i] = float_to_e4m3(x[i] / s);
                    deq[i] = e4m3_to_float(q[i]) * s;
                }
            }
            qv.push_back({info.name, TensorView::contiguous(q.data(), DType::kF8E4M3, Shape{rows, cols})});
            qv.push_back({base + ".weight_scale", TensorView::contiguous(sc.data(), DType::kF32, Shape{rows, 1})});
        }
        pv.push_back({info.name, TensorView::contiguous(deq.data(), DType::kF32, Shape{rows, cols})});
    }
    EXPECT_GT(n_mxfp4, 20);
    EXPECT_GT(n_fp8, 10);
    ASSERT_TRUE(loader::write_safetensors(quant / "model.safetensors", qv).ok());
    ASSERT_TRUE(loader::write_safetensors(plain / "model.safetensors", pv).ok());
    {
        std::ifstream in(src / "config.json");
        nlohmann::json cfg = nlohmann::json::parse(in);
        std::ofstream(plain / "config.json") << cfg.dump(1);
        cfg["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"format", "mixed-precision"}};
        std::ofstream(quant / "config.json") << cfg.dump(1);
    }
    const auto ref = testing::load_reference(src.string());
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& r : ref) prompts.push_back(r.ids);
    auto rq = make_runner(quant.string(), models::MlaForm::kMha, 64);
    auto rp = make_runner(plain.string(), models::MlaForm::kMha, 64);
    ASSERT_NE(rq, nullptr);
    ASSERT_NE(rp, nullptr);
    const std::vector<Tensor> got = run_prompts(*rq, prompts, 17, true);
    const std::vector<Tensor> want = run_prompts(*rp, prompts, 17, true);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        const auto cmp = testing::compare_logits(got[i], want[i], 0.0);
        EXPECT_EQ(cmp.max_abs_diff, 0.0) << "prompt " << i << ": " << cmp.describe();
    }
    // the quantised weights were really used: 4-bit experts move this random tiny model's logits away from the
    // bf16 reference (by up to ~3 here; no accuracy claim is made for random weights)
    double moved = 0.0;
    for (size_t i = 0; i < got.size(); ++i)
        moved = std::max(moved, testing::compare_logits(got[i], ref[i].logits, 0.0).max_abs_diff);
    EXPECT_GT(moved, 1e-3);

    // Native FP8 (--fp8-weights native): the MXFP4 experts re-encoded as 128 x 128 block FP8 on load (exact here:
    // every 128 x 128 block's group exponents lie within e4m3's range, so no element is rounded) and run by the FP8
    // path, which also rounds their activations to block FP8; the per-channel FP8 attention and shared experts stay
    // dequantised. Against the dequantised run: within the activation rounding's bound for Kimi (fp8_weights_test.cc
    // kFp8ActQuantLogitsMaxAbsKimi = 5.0) and the same argmax everywhere.
    loader::LoadStats stats;
    auto rn = make_runner(quant.string(), models::MlaForm::kMha, 64, 256, models::Fp8Weights::kNative, &stats);
    ASSERT_NE(rn, nullptr);
    EXPECT_EQ(stats.n_mxfp4_fp8, n_mxfp4);
    EXPECT_EQ(stats.n_mxfp4, 0);
    EXPECT_EQ(stats.n_mxfp4_fp8_inexact, 0);
    EXPECT_EQ(stats.n_fp8_scaled, n_fp8);
    const std::vector<Tensor> native = run_prompts(*rn, prompts, 17, true);
    ASSERT_EQ(native.size(), want.size());
    double worst = 0.0;
    for (size_t i = 0; i < native.size(); ++i) {
        const auto cmp = testing::compare_logits(native[i], want[i], 10.0);
        EXPECT_LE(cmp.max_abs_diff, 5.0) << "prompt " << i << ": " << cmp.describe();
        EXPECT_EQ(cmp.argmax_mismatches, 0) << "prompt " << i << ": " << cmp.describe();
        worst = std::max(worst, cmp.max_abs_diff);
        std::printf("native FP8 prompt %zu: %s\n", i, cmp.describe().c_str());
    }
    EXPECT_GT(worst, 0.0) << "the native run must differ (FP8 activations)";
}

// Chunked and unchunked runs of the same model agree with each other far more tightly than with the reference.
TEST(KimiLinear, ChunkedEqualsUnchunked) {
    const std::string dir = std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny";
    const auto ref = testing::load_reference(dir);
    std::vector<std::vector<int32_t>> prompts{ref.back().ids};
    auto runner = make_runner(dir, models::MlaForm::kMha, 8);
    ASSERT_NE(runner, nullptr);
    auto whole = runner->prefill_all_logits(prompts, 0);
    auto chunked = runner->prefill_all_logits(prompts, 13);
    ASSERT_TRUE(whole.ok() && chunked.ok());
    const auto cmp = testing::compare_logits((*whole)[0], (*chunked)[0], 0.0);
    EXPECT_LE(cmp.max_abs_diff, 1e-5) << cmp.describe();
}

// A chunk at position 0 starts its request over: the KDA state left by an earlier run is not read.
TEST(KimiLinear, RestartAtPositionZeroResetsState) {
    const std::string dir = std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny";
    auto runner = make_runner(dir, models::MlaForm::kMha, 8);
    ASSERT_NE(runner, nullptr);
    const std::vector<int32_t> ids = testing::load_reference(dir)[1].ids;
    ASSERT_TRUE(runner->tables().reserve(9, static_cast<int64_t>(ids.size())).ok());
    ASSERT_TRUE(runner->cache().admit(9).ok());
    models::ForwardBatch batch;
    batch.seqs.push_back({.request_id = 9,
                          .token_ids = ids,
                          .prefix_len = 0,
                          .pages = &runner->tables().table(9),
                          .logits = models::LogitsMode::kAll});
    const Tensor a = runner->forward(batch);
    const Tensor b = runner->forward(batch);
    const auto cmp = testing::compare_logits(a, b, 0.0);
    EXPECT_EQ(cmp.max_abs_diff, 0.0) << cmp.describe();
    runner->cache().release(9);
    runner->tables().release(9);
}

// Admission is all or nothing across pages and KDA state slots: more prompts than slots fail with
// ResourceExhausted and leave nothing allocated; a bad id is rejected.
TEST(KimiLinear, StateSlotsAreAdmittedAllOrNothing) {
    const std::string dir = std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny";
    auto runner = make_runner(dir, models::MlaForm::kMha, /*n_pages=*/16, /*max_state_slots=*/2);
    ASSERT_NE(runner, nullptr);
    const std::vector<std::vector<int32_t>> three{{1, 2}, {3}, {4, 5, 6}};
    auto r = runner->prefill_all_logits(three, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
    EXPECT_EQ(runner->page_pool().n_used(), 0);
    EXPECT_EQ(runner->cache().n_admitted(), 0);
    const std::vector<std::vector<int32_t>> two{{1, 2}, {3}};
    EXPECT_TRUE(runner->prefill_all_logits(two, 1).ok());
    const std::vector<std::vector<int32_t>> bad{{1, 2, 100000}};
    EXPECT_FALSE(runner->prefill_all_logits(bad, 0).ok());
    EXPECT_EQ(runner->cache().n_admitted(), 0);
}

// Two pipeline stages run in 17-token chunks: the KDA state and MLA latents live in each stage's own cache, and the
// residual stream (plus, for K3, the AttnRes bank) crosses the stage boundary in Activations. A split inside an AttnRes
// block and one at a block start are both covered.
TEST(KimiLinear, TwoPipelineStagesMatchReference) {
    const std::vector<std::pair<std::string, int64_t>> cases{
        {std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny", 3},
        {std::string(PENSTOCK_TEST_DATA_DIR) + "/variants_k3/k3_tiny_block2", 3},
        {std::string(PENSTOCK_TEST_DATA_DIR) + "/variants_k3/k3_tiny_block2", 2},
        {std::string(PENSTOCK_TEST_DATA_DIR) + "/variants_k3/k3_tiny_block3_nonorm", 1}};
    for (const auto& [dir, split] : cases) {
        SCOPED_TRACE(dir + " split at " + std::to_string(split));
        if (!fs::exists(dir)) continue;
        auto config = loader::load_model_config(dir);
        ASSERT_TRUE(config.ok()) << config.status().to_string();
        auto ckpt = loader::Checkpoint::open(dir);
        ASSERT_TRUE(ckpt.ok());
        const int64_t n_layers = config->num_hidden_layers;
        auto first = models::load_kimi_linear_model(*config, *ckpt, {0, split}, {}, nullptr);
        auto second = models::load_kimi_linear_model(*config, *ckpt, {split, n_layers}, {}, nullptr);
        ASSERT_TRUE(first.ok()) << first.status().to_string();
        ASSERT_TRUE(second.ok()) << second.status().to_string();
        auto cache0 = (*first)->create_cache(8);
        auto cache1 = (*second)->create_cache(8);
        const testing::ReferencePrompt ref = testing::load_reference(dir).back();
        const auto len = static_cast<int64_t>(ref.ids.size());
        kv_cache::PagePool pool(8);
        kv_cache::RequestTables tables(&pool);
        ASSERT_TRUE(tables.reserve(5, len).ok());
        ASSERT_TRUE(cache0->admit(5).ok());
        ASSERT_TRUE(cache1->admit(5).ok());
        const kernels::Context ctx{};
        Tensor logits = Tensor::empty({len, config->vocab_size}, DType::kF32);
        for (int64_t pos = 0; pos < len; pos += 17) {
            const int64_t take = std::min<int64_t>(17, len - pos);
            models::ForwardBatch batch;
            batch.seqs.push_back(
                {.request_id = 5,
                 .token_ids = std::vector<int32_t>(ref.ids.begin() + pos, ref.ids.begin() + pos + take),
                 .prefix_len = pos,
                 .pages = &tables.table(5),
                 .logits = models::LogitsMode::kAll});
            const models::BatchLayout layout = models::BatchLayout::build(batch);
            models::Activations act;
            (*first)->embed(layout, &act, ctx);
            (*first)->forward_layers(batch, layout, &act, cache0.get(), ctx);
            (*second)->forward_layers(batch, layout, &act, cache1.get(), ctx);
            const Tensor out = (*second)->compute_logits(layout, act, ctx);
            std::memcpy(logits.ptr<float>() + pos * config->vocab_size, out.ptr<const float>(), out.nbytes());
        }
        const auto cmp = testing::compare_logits(logits, ref.logits, kArgmaxMargin);
        EXPECT_LE(cmp.max_abs_diff, kMaxAbsDiff) << cmp.describe();
        EXPECT_EQ(cmp.argmax_mismatches, 0) << cmp.describe();
        cache0->release(5);
        cache1->release(5);
        tables.release(5);
        EXPECT_EQ(cache0->n_admitted() + cache1->n_admitted() + pool.n_used(), 0);
    }
}

TEST(KimiLinear, ConfigErrorsNameTheField) {
    auto config = loader::load_model_config(std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny");
    ASSERT_TRUE(config.ok());
    loader::ModelConfig c = *config;
    c.raw["layer_types"] = {"linear_attention", "mamba"};
    auto k = models::KimiConfig::parse(c);
    ASSERT_FALSE(k.ok());
    EXPECT_NE(k.status().message().find("layer_types"), std::string::npos) << k.status().to_string();
    c = *config;
    c.raw.erase("layer_types");
    c.raw["linear_attn_config"]["kda_layers"] = {1, 2, 3, 4, 6, 7, 8};
    c.raw["linear_attn_config"]["full_attn_layers"] = {5};
    k = models::KimiConfig::parse(c);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    EXPECT_EQ(k->is_kda, std::vector<bool>({true, true, true, true, false, true, true, true}));
    c.raw["linear_attn_config"]["full_attn_layers"] = {5, 6};
    k = models::KimiConfig::parse(c);
    ASSERT_FALSE(k.ok());
    EXPECT_NE(k.status().message().find("linear_attn_config"), std::string::npos) << k.status().to_string();
    c = *config;
    c.hidden_act = "gelu";
    k = models::KimiConfig::parse(c);
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace penstock
