// kernels::Profiler / ProfileScope on the CPU backend: scopes nest into dotted paths, aggregate() sums the instances of
// a path, a parent's interval holds its children's; and on every family's tiny model (dummy weights), a forward with
// the profiler on gives bit-identical logits to one with it off and records the scopes of each layer's ops.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/profile.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "runtime/model_runner.h"

namespace penstock {
namespace {

using kernels::ProfileScope;

std::map<std::string, kernels::ProfileTotal> by_path(const std::vector<kernels::ProfileTotal>& totals) {
    std::map<std::string, kernels::ProfileTotal> m;
    for (const kernels::ProfileTotal& t : totals) m[t.path] = t;
    return m;
}

// Sum of the direct children's totals of every path that has children.
std::map<std::string, double> child_sums(const std::vector<kernels::ProfileTotal>& totals) {
    std::map<std::string, double> sums;
    for (const kernels::ProfileTotal& t : totals) {
        const size_t dot = t.path.rfind('.');
        if (dot != std::string::npos) sums[t.path.substr(0, dot)] += t.ms;
    }
    return sums;
}

TEST(Profiler, NullProfilerRecordsNothing) {
    kernels::Profiler profiler(Device::kCPU);
    const kernels::Context off{.device = Device::kCPU};
    { const ProfileScope scope(off, "layer"); }
    EXPECT_TRUE(profiler.collect().empty());
}

TEST(Profiler, ScopesNestAndAggregate) {
    using std::chrono::milliseconds;
    kernels::Profiler profiler(Device::kCPU);
    const kernels::Context ctx{.device = Device::kCPU, .profiler = &profiler};
    for (int layer = 0; layer < 2; ++layer) {
        const ProfileScope l(ctx, "layer");
        {
            const ProfileScope a(ctx, "attn");
            {
                const ProfileScope q(ctx, "q_proj");
                std::this_thread::sleep_for(milliseconds(2));
            }
            for (int round = 0; round < 3; ++round) {
                const ProfileScope c(ctx, "core");
                std::this_thread::sleep_for(milliseconds(1));
            }
        }
        const ProfileScope m(ctx, "moe");
        std::this_thread::sleep_for(milliseconds(1));
    }
    const std::vector<kernels::ProfileRecord> records = profiler.collect();
    ASSERT_EQ(records.size(), 2u * 7u);  // per layer: layer, attn, q_proj, 3 x core, moe
    // Begin order: a parent comes before its children.
    const std::vector<std::string> first_layer{"layer", "layer.attn", "layer.attn.q_proj", "layer.attn.core",
                                               "layer.attn.core", "layer.attn.core"};
    for (size_t i = 0; i < first_layer.size(); ++i) EXPECT_EQ(records[i].path, first_layer[i]) << i;
    EXPECT_EQ(records[0].depth, 0);
    EXPECT_EQ(records[2].depth, 2);
    EXPECT_EQ(records[5].path, "layer.attn.core");
    EXPECT_EQ(records[6].path, "layer.moe");  // the first layer's last scope, a sibling of attn

    const std::vector<kernels::ProfileTotal> totals = kernels::aggregate(records);
    const auto t = by_path(totals);
    ASSERT_EQ(t.size(), 5u);
    EXPECT_EQ(t.at("layer").count, 2);
    EXPECT_EQ(t.at("layer.attn.core").count, 6);
    EXPECT_EQ(t.at("layer.attn.core").depth, 2);
    double core_sum = 0.0;
    for (const kernels::ProfileRecord& r : records) {
        if (r.path == "layer.attn.core") core_sum += r.ms;
    }
    EXPECT_DOUBLE_EQ(t.at("layer.attn.core").ms, core_sum);
    EXPECT_GE(t.at("layer.attn.q_proj").ms, 2 * 2.0);  // slept 2 ms in each of 2 instances
    EXPECT_GE(t.at("layer.attn.core").ms, 6 * 1.0);
    for (const auto& [parent, sum] : child_sums(totals)) EXPECT_LE(sum, t.at(parent).ms) << parent;

    profiler.clear();
    EXPECT_TRUE(profiler.collect().empty());
    { const ProfileScope again(ctx, "layer"); }
    ASSERT_EQ(profiler.collect().size(), 1u);  // markers reused after clear()
}

// DeviceClock on the CPU: each bracket's host time, summed by poll(); nothing is ever pending; misuse aborts.
TEST(DeviceClock, CpuBracketsSum) {
    using std::chrono::milliseconds;
    kernels::DeviceClock clock(Device::kCPU);
    const kernels::Context ctx{.device = Device::kCPU};
    EXPECT_EQ(clock.poll(), 0.0);
    clock.begin(ctx);
    std::this_thread::sleep_for(milliseconds(3));
    clock.end(ctx);
    std::this_thread::sleep_for(milliseconds(5));  // between brackets: not counted
    const double one = clock.poll();
    EXPECT_GE(one, 3.0);
    EXPECT_LT(one, 5.0 + 3.0 + 50.0);  // not the gap (a loaded machine may stretch the sleep itself)
    clock.begin(ctx);
    std::this_thread::sleep_for(milliseconds(2));
    clock.end(ctx);
    EXPECT_GE(clock.poll(), one + 2.0);
    EXPECT_EQ(clock.pending(), 0);
    EXPECT_DEATH(clock.end(ctx), "without begin");
    clock.begin(ctx);
    EXPECT_DEATH(clock.begin(ctx), "bracket open");
}

struct FamilyCase {
    std::string dir;
    models::MlaForm form = models::MlaForm::kMha;
    std::vector<std::string> required;  // scope paths the forward must record
};

std::vector<FamilyCase> family_cases() {
    const std::string f = PENSTOCK_FIXTURES_DIR;
    const std::string d = PENSTOCK_TEST_DATA_DIR;
    // Plain experts run the gated activation with the gate/up GEMM (kernels::grouped_gemm_glu): one scope.
    const std::vector<std::string> moe{"layer.norm",
                                       "layer.residual",
                                       "layer.moe.router",
                                       "layer.moe.align",
                                       "layer.moe.permute",
                                       "layer.moe.experts.gate_up_act",
                                       "layer.moe.experts.down",
                                       "layer.moe.unpermute",
                                       "layer.mlp.gate_up"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), moe.begin(), moe.end());
        return v;
    };
    return {
        {f + "/deepseek_v3_tiny", models::MlaForm::kMha,
         with({"layer.attn.q_proj", "layer.attn.kv_proj", "layer.attn.rope", "layer.attn.kv_write",
               "layer.attn.core.kv_expand", "layer.attn.core.attention", "layer.attn.o_proj", "layer.moe.shared"})},
        {f + "/deepseek_v3_tiny", models::MlaForm::kAbsorbed,
         with({"layer.attn.core.absorb_q", "layer.attn.core.attention", "layer.attn.core.absorb_out"})},
        {f + "/glm_moe_dsa_tiny", models::MlaForm::kMha,
         with({"layer.attn.q_proj", "layer.attn.kv_write", "layer.attn.indexer.k_write", "layer.attn.indexer.q_proj",
               "layer.attn.indexer.k_gather", "layer.attn.indexer.logits", "layer.attn.indexer.topk",
               "layer.attn.core.gather", "layer.attn.core.absorb_q", "layer.attn.core.sparse_mla",
               "layer.attn.core.absorb_out", "layer.attn.o_proj"})},
        {f + "/kimi_linear_tiny", models::MlaForm::kMha,
         with({"layer.kda.qkv_proj", "layer.kda.gates", "layer.kda.conv", "layer.kda.recurrence", "layer.kda.out_gate",
               "layer.kda.o_norm", "layer.kda.o_proj", "layer.attn.core"})},
        {d + "/variants_k3/k3_tiny_block2", models::MlaForm::kMha,
         with({"layer.attn_res", "layer.kda.recurrence", "layer.attn.out_gate", "layer.attn.o_proj",
               "layer.moe.latent_down", "layer.moe.latent_up", "layer.moe.shared"})},
    };
}

class ProfiledForward : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(ProfiledForward, BitIdenticalAndScoped) {
    const FamilyCase& fc = GetParam();
    auto config = loader::load_model_config(fc.dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    models::ModelOptions options;
    options.dummy_weights_seed = 4242;
    options.mla_form = fc.form;
    auto model = models::load_model(*config, loader::Checkpoint::none(), {0, config->num_hidden_layers}, options,
                                    nullptr);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    runtime::ModelRunner runner(std::move(model).value(), runtime::RunnerOptions{.n_pages = 16, .n_threads = 2});

    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 100);
    const std::vector<std::vector<int32_t>> prompts{prompt};
    constexpr int64_t kChunk = 17;  // 3 chunks: 17 + 17 + 6
    auto off = runner.prefill_all_logits(prompts, kChunk);
    ASSERT_TRUE(off.ok()) << off.status().to_string();

    kernels::Profiler profiler(Device::kCPU);
    runner.set_profiler(&profiler);
    const auto t0 = std::chrono::steady_clock::now();
    auto on = runner.prefill_all_logits(prompts, kChunk);
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    runner.set_profiler(nullptr);
    ASSERT_TRUE(on.ok()) << on.status().to_string();

    const Tensor& a = (*off)[0];
    const Tensor& b = (*on)[0];
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.ptr<float>()[i], b.ptr<float>()[i]) << "logit " << i;

    const std::vector<kernels::ProfileTotal> totals = kernels::aggregate(profiler.collect());
    const auto t = by_path(totals);
    ASSERT_TRUE(t.contains("layer"));
    EXPECT_EQ(t.at("layer").count, 3 * config->num_hidden_layers);  // every layer of every chunk
    EXPECT_EQ(t.at("layer").depth, 0);
    EXPECT_LE(t.at("layer").ms, wall_ms);
    EXPECT_EQ(t.at("layer.norm").count, 2 * t.at("layer").count);
    for (const std::string& path : fc.required) EXPECT_TRUE(t.contains(path)) << "no scope " << path;
    for (const kernels::ProfileTotal& total : totals) {
        EXPECT_EQ(total.path.rfind("layer", 0), 0u) << total.path << " outside a layer scope";
        EXPECT_GE(total.ms, 0.0) << total.path;
    }
    // A parent's instances hold its children's (steady_clock: the same timeline, nested intervals).
    for (const auto& [parent, sum] : child_sums(totals)) {
        ASSERT_TRUE(t.contains(parent)) << parent;
        EXPECT_LE(sum, t.at(parent).ms * (1.0 + 1e-12)) << parent;
    }
}

INSTANTIATE_TEST_SUITE_P(Families, ProfiledForward, ::testing::ValuesIn(family_cases()),
                         [](const ::testing::TestParamInfo<FamilyCase>& i) {
                             std::string n = i.param.dir.substr(i.param.dir.find_last_of('/') + 1);
                             if (i.param.form == models::MlaForm::kAbsorbed) n += "_absorbed";
                             for (char& ch : n) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return n;
                         });

}  // namespace
}  // namespace penstock
