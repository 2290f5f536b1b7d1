// Decision pinning (models/decision_pins.h) on the CPU reference: a recording made unchunked replays at other chunk
// sizes with no flips and bit-identical logits; a pinned choice that differs from the model's own replaces it (MoE
// experts with weights from the run's own scores, DSA top-k rows) from that position on; recordings of another
// model, config or prompt are refused with a clear error. (The CPU reference computes in fp32 only, so the bf16
// replay runs on CUDA: tools/gpu_pinned_check.py.)
#include "models/decision_pins.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
using Kind = models::DecisionPins::Kind;
using Mode = models::DecisionPins::Mode;

std::string fixture(const std::string& name) { return std::string(PENSTOCK_FIXTURES_DIR) + "/" + name; }

loader::ModelConfig config_of(const std::string& dir) {
    auto c = loader::load_model_config(dir);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return *c;
}

// Logits [n, vocab] of one prompt (request id 0) through a fresh runner, with `pins` (or none) hooked in.
Tensor run(const std::string& dir, const std::vector<int32_t>& ids, int64_t chunk, models::DecisionPins* pins) {
    const loader::ModelConfig config = config_of(dir);
    auto ckpt = loader::Checkpoint::open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    models::ModelOptions options{.decisions = pins};
    loader::LoadStats stats;
    auto model = models::load_model(config, *ckpt, {0, config.num_hidden_layers}, options, &stats);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    runtime::ModelRunner runner(std::move(model).value(), runtime::RunnerOptions{.n_pages = 8, .n_threads = 2});
    auto r = runner.prefill_all_logits(std::span(&ids, 1), chunk);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(r->front());
}

bool bit_equal(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.ptr<const void>(), b.ptr<const void>(), a.nbytes()) == 0;
}

// max |a - b| over row r.
double row_diff(const Tensor& a, const Tensor& b, int64_t r) {
    const int64_t v = a.size(1);
    double d = 0.0;
    for (int64_t j = 0; j < v; ++j) {
        d = std::max(d,
                     std::fabs(static_cast<double>(a.ptr<const float>()[r * v + j] - b.ptr<const float>()[r * v + j])));
    }
    return d;
}

fs::path temp_file(const std::string& name) {
    return fs::temp_directory_path() / ("penstock_decisions_" + std::to_string(::getpid()) + "_" + name);
}

class DecisionPinsFixture : public ::testing::TestWithParam<std::string> {};

// Record unchunked; compare at chunk 5 and pin at chunk 17: no flips, and the pinned run is bit-identical to an
// unpinned run at the same chunking (nothing is substituted when nothing differs).
TEST_P(DecisionPinsFixture, RecordingReplaysAtAnyChunkSize) {
    const std::string dir = fixture(GetParam());
    const loader::ModelConfig config = config_of(dir);
    const std::vector<int32_t> ids = testing::load_reference(dir)[3].ids;  // 200 tokens
    const auto n = static_cast<int64_t>(ids.size());
    models::DecisionPins rec = models::DecisionPins::recorder(config);
    const Tensor recorded = run(dir, ids, 0, &rec);
    ASSERT_TRUE(rec.status().ok()) << rec.status().to_string();
    EXPECT_GT(rec.recorded(Kind::kMoeExperts), 0);
    EXPECT_EQ(rec.recorded(Kind::kMoeExperts) % n, 0) << "every token of every MoE layer";
    if (config.model_type == "glm_moe_dsa") {
        const int64_t top_k = config.raw["index_topk"].get<int64_t>();
        EXPECT_EQ(rec.recorded(Kind::kDsaTopk), 3 * (n - top_k)) << "3 full layers, rows that see > top_k keys";
    } else {
        EXPECT_EQ(rec.recorded(Kind::kDsaTopk), 0);
    }
    const fs::path file = temp_file(GetParam() + ".safetensors");
    ASSERT_TRUE(rec.save(file).ok());

    auto compare = models::DecisionPins::load(file, config, Mode::kCompare);
    ASSERT_TRUE(compare.ok()) << compare.status().to_string();
    run(dir, ids, 5, &*compare);
    ASSERT_TRUE(compare->status().ok()) << compare->status().to_string();
    EXPECT_EQ(compare->counts(Kind::kMoeExperts).decisions, rec.recorded(Kind::kMoeExperts));
    EXPECT_EQ(compare->counts(Kind::kMoeExperts).flips, 0);
    EXPECT_EQ(compare->counts(Kind::kDsaTopk).flips, 0);

    auto pin = models::DecisionPins::load(file, config, Mode::kPin);
    ASSERT_TRUE(pin.ok()) << pin.status().to_string();
    const Tensor pinned = run(dir, ids, 17, &*pin);
    ASSERT_TRUE(pin->status().ok()) << pin->status().to_string();
    std::printf("%s chunk 17 %s\n", GetParam().c_str(), pin->summary().c_str());
    EXPECT_EQ(pin->counts(Kind::kMoeExperts).flips, 0);
    EXPECT_EQ(pin->counts(Kind::kDsaTopk).decisions, rec.recorded(Kind::kDsaTopk));
    EXPECT_TRUE(bit_equal(pinned, run(dir, ids, 17, nullptr))) << "pinning changed a run it agrees with";
    double worst = 0.0;
    for (int64_t r = 0; r < n; ++r) worst = std::max(worst, row_diff(pinned, recorded, r));
    EXPECT_LE(worst, 1e-4) << "chunk 17 vs unchunked";
    fs::remove(file);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecisionPinsFixture,
                         ::testing::Values("deepseek_v3_tiny", "glm_moe_dsa_tiny", "kimi_linear_tiny"));

// A recorded choice that differs from the model's own replaces it at its position and not before: the MoE experts
// of one token of one layer, and the DSA top-k of one row of the first full layer.
TEST(DecisionPins, PinnedChoiceReplacesTheModelsOwn) {
    const std::string dir = fixture("glm_moe_dsa_tiny");
    const loader::ModelConfig config = config_of(dir);
    const std::vector<int32_t> ids = testing::load_reference(dir)[2].ids;  // 64 tokens, top-k 16
    models::DecisionPins rec = models::DecisionPins::recorder(config);
    const Tensor own = run(dir, ids, 0, &rec);
    const fs::path file = temp_file("replace.safetensors");
    ASSERT_TRUE(rec.save(file).ok());

    struct Change {
        Kind kind;
        int64_t layer, position;
    };
    for (const Change c : {Change{Kind::kMoeExperts, 2, 30}, Change{Kind::kDsaTopk, 0, 40}}) {
        SCOPED_TRACE(c.kind == Kind::kMoeExperts ? "moe" : "dsa");
        auto pin = models::DecisionPins::load(file, config, Mode::kPin);
        ASSERT_TRUE(pin.ok()) << pin.status().to_string();
        const std::vector<int32_t>* row = pin->find(c.kind, c.layer, 0, c.position);
        ASSERT_NE(row, nullptr);
        std::vector<int32_t> other = *row;
        if (c.kind == Kind::kMoeExperts) {  // experts no other slot of the row uses
            for (int32_t& e : other) {
                e = (e + static_cast<int32_t>(other.size())) % static_cast<int32_t>(config.n_routed_experts);
            }
        } else {  // the row's key positions with its last choice swapped for the row's own query position
            other.back() = static_cast<int32_t>(c.position);
            if (std::count(other.begin(), other.end(), c.position) > 1) other.front() = 0;
            std::sort(other.begin(), other.end());
        }
        ASSERT_NE(other, *row);
        pin->set(c.kind, c.layer, 0, c.position, other);
        const Tensor got = run(dir, ids, 17, &*pin);
        ASSERT_TRUE(pin->status().ok()) << pin->status().to_string();
        EXPECT_GE(pin->counts(c.kind).flips, 1);
        for (int64_t r = 0; r < c.position; ++r) ASSERT_LE(row_diff(got, own, r), 1e-4) << "row " << r;
        EXPECT_GT(row_diff(got, own, c.position), 1e-3) << "the pinned choice changed nothing";
    }
    fs::remove(file);
}

// The MoE hook on host tensors: a replaced row takes the recorded ids and moe_routing's weights at them (sigmoid
// scores at the ids, normalised, scaled); other rows are untouched.
TEST(DecisionPins, MoeHookRecomputesWeightsAtPinnedIds) {
    const loader::ModelConfig config = config_of(fixture("deepseek_v3_tiny"));
    const std::vector<float> logits = {0.1f, 0.9f,  -0.3f, 0.5f, 0.2f,  0.0f, -0.1f, 0.4f,    // token 0
                                       0.7f, -0.2f, 0.3f,  0.1f, -0.5f, 0.6f, 0.8f,  -0.9f};  // token 1
    Tensor l = Tensor::from_f32({2, 8}, logits);
    Tensor ids = Tensor::empty({2, 2}, DType::kI32);
    Tensor w = Tensor::empty({2, 2}, DType::kF32);
    const kernels::MoeRoutingParams p{.topk_ids = ids,
                                      .topk_weights = w,
                                      .logits = l,
                                      .bias = TensorView{},
                                      .routed_scaling_factor = 2.5f,
                                      .norm_topk_prob = true,
                                      .scoring = kernels::MoeScoring::kSigmoid};
    const kernels::Context ctx;
    kernels::moe_routing(p, ctx);
    models::ForwardBatch batch;
    batch.seqs.push_back({.request_id = 7, .token_ids = {11, 12}, .prefix_len = 3});
    models::DecisionPins rec = models::DecisionPins::recorder(config);
    rec.moe({.pins = &rec, .layer = 1, .batch = &batch}, p, ctx);
    const fs::path file = temp_file("hook.safetensors");
    ASSERT_TRUE(rec.save(file).ok());
    auto pin = models::DecisionPins::load(file, config, Mode::kPin);
    ASSERT_TRUE(pin.ok()) << pin.status().to_string();
    fs::remove(file);
    pin->set(Kind::kMoeExperts, 1, 7, 4, {2, 5});  // token 1 (position 4)
    const std::vector<int32_t> own0(ids.ptr<int32_t>(), ids.ptr<int32_t>() + 2);
    const std::vector<float> w0(w.ptr<float>(), w.ptr<float>() + 2);
    pin->moe({.pins = &*pin, .layer = 1, .batch = &batch}, p, ctx);
    ASSERT_TRUE(pin->status().ok()) << pin->status().to_string();
    EXPECT_EQ(pin->counts(Kind::kMoeExperts).decisions, 2);
    EXPECT_EQ(pin->counts(Kind::kMoeExperts).flips, 1);
    EXPECT_EQ(std::vector<int32_t>(ids.ptr<int32_t>(), ids.ptr<int32_t>() + 2), own0);
    EXPECT_EQ(std::vector<float>(w.ptr<float>(), w.ptr<float>() + 2), w0);
    EXPECT_EQ(ids.ptr<int32_t>()[2], 2);
    EXPECT_EQ(ids.ptr<int32_t>()[3], 5);
    const float s2 = 1.0f / (1.0f + std::exp(-0.3f));
    const float s5 = 1.0f / (1.0f + std::exp(-0.6f));
    EXPECT_FLOAT_EQ(w.ptr<float>()[2], s2 / (s2 + s5) * 2.5f);
    EXPECT_FLOAT_EQ(w.ptr<float>()[3], s5 / (s2 + s5) * 2.5f);
}

// Recordings of another model_type, of the same family with another config, of another prompt, and files that are
// no recording are refused with errors that say so.
TEST(DecisionPins, RefusesRecordingsOfAnotherModelConfigOrPrompt) {
    const std::string dsv3 = fixture("deepseek_v3_tiny");
    const std::vector<int32_t> ids = testing::load_reference(dsv3)[1].ids;  // 7 tokens
    models::DecisionPins rec = models::DecisionPins::recorder(config_of(dsv3));
    run(dsv3, ids, 0, &rec);
    const fs::path file = temp_file("negative.safetensors");
    ASSERT_TRUE(rec.save(file).ok());

    for (const std::string other : {"glm_moe_dsa_tiny", "deepseek_v3_tiny_fp8"}) {
        auto r = models::DecisionPins::load(file, config_of(fixture(other)), Mode::kPin);
        ASSERT_FALSE(r.ok()) << other;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(r.status().message().find("was recorded on model_type 'deepseek_v3'"), std::string::npos)
            << r.status().to_string();
    }
    auto not_a_recording =
        models::DecisionPins::load(fs::path(dsv3) / "reference.safetensors", config_of(dsv3), Mode::kPin);
    ASSERT_FALSE(not_a_recording.ok());
    EXPECT_NE(not_a_recording.status().message().find("not a decision recording"), std::string::npos);

    std::vector<int32_t> changed = ids;
    changed[4] = changed[4] == 1 ? 2 : 1;
    auto pin = models::DecisionPins::load(file, config_of(dsv3), Mode::kPin);
    ASSERT_TRUE(pin.ok()) << pin.status().to_string();
    run(dsv3, changed, 0, &*pin);
    EXPECT_FALSE(pin->status().ok());
    EXPECT_NE(pin->status().message().find("position 4 holds token"), std::string::npos) << pin->status().to_string();

    std::vector<int32_t> longer = ids;
    longer.push_back(3);
    auto pin2 = models::DecisionPins::load(file, config_of(dsv3), Mode::kCompare);
    ASSERT_TRUE(pin2.ok());
    run(dsv3, longer, 0, &*pin2);
    EXPECT_NE(pin2->status().message().find("has no token there"), std::string::npos) << pin2->status().to_string();
    fs::remove(file);
}

}  // namespace
}  // namespace penstock
