// The layout planner (SPEC §8): the cluster file, the collective model against the measured points, the published
// reasoning it must reproduce (TP traffic patterns, GLM-5.3's 1M-token prefill, deep PP on PCIe nodes), memory and
// bubbles, and the command's report.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/check.h"
#include "planner/cluster.h"
#include "planner/plan_command.h"
#include "scheduler/cost_model.h"

namespace penstock::planner {
namespace {

std::string config_path(const std::string& name) { return std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/" + name; }

loader::ModelConfig config(const std::string& name) {
    auto c = loader::load_model_config_dir_or_file(config_path(name));
    PENSTOCK_CHECK(c.ok()) << c.status().to_string();
    return *c;
}

Cluster builtin(const std::string& name) {
    auto c = builtin_cluster(name);
    PENSTOCK_CHECK(c.ok()) << c.status().to_string();
    return *c;
}

constexpr char kClusterToml[] = R"(
name = "two-nodes"
gpu = "test GPU"
nodes = 2
gpus_per_node = 4
memory_gib = 80
bf16_tflops = 400
fp8_tflops = 700
[intra]
busbw_gbps = 200
p2p_gbps = 250
latency_us = 10
[inter]
busbw_gbps = 40
p2p_gbps = 45
latency_us = 30
[[all_reduce]]
ranks = 8
bytes = 134217728
ms = 5.0
)";

TEST(PlannerCluster, ReadsTomlAndNamesEveryProblem) {
    auto c = parse_cluster(kClusterToml, "c.toml");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->name, "two-nodes");
    EXPECT_EQ(c->world(), 8);
    EXPECT_DOUBLE_EQ(c->inter.p2p_gbps, 45);
    ASSERT_EQ(c->all_reduce.size(), 1u);
    // 4 ranks inside a node: the intra link; 8 ranks: the measured point (2 * 7 / 8 * 128 MiB in 5 ms).
    EXPECT_NEAR(c->all_reduce_ms(1e9, 4, 0), 0.010 + 1.5 * 1e9 / 200e9 * 1e3, 1e-9);
    EXPECT_NEAR(c->all_reduce_ms(134217728, 8, 0), 0.030 + 5.0, 1e-9);
    EXPECT_NEAR(c->send_ms(45e6, 0, 4), 0.030 + 1.0, 1e-9) << "rank 0 -> 4 crosses nodes";
    EXPECT_NEAR(c->send_ms(250e6, 0, 3), 0.010 + 1.0, 1e-9);
    EXPECT_EQ(c->all_reduce_ms(1e9, 1, 0), 0.0);

    const auto error_of = [](const std::string& text) {
        auto r = parse_cluster(text, "bad.toml");
        return r.ok() ? std::string() : r.status().message();
    };
    std::string t = kClusterToml;
    EXPECT_NE(error_of(t + "colour = 1\n").find("unknown key 'all_reduce"), std::string::npos)
        << "a key after [[all_reduce]] belongs to it: " << error_of(t + "colour = 1\n");
    EXPECT_NE(error_of("colour = 1\n" + t).find("unknown key 'colour'"), std::string::npos);
    std::string no_mem = t;
    no_mem.replace(no_mem.find("memory_gib = 80\n"), 16, "");
    EXPECT_NE(error_of(no_mem).find("'memory_gib' is required"), std::string::npos);
    std::string bad_nodes = t;
    bad_nodes.replace(bad_nodes.find("nodes = 2"), 9, "nodes = 0");
    EXPECT_NE(error_of(bad_nodes).find("'nodes' must be in [1"), std::string::npos);
    std::string bad_type = t;
    bad_type.replace(bad_type.find("p2p_gbps = 250"), 14, "p2p_gbps = \"fast\"");
    EXPECT_NE(error_of(bad_type).find("'intra.p2p_gbps' must be a number"), std::string::npos);
    EXPECT_NE(error_of("nodes = [").find("bad.toml:1:"), std::string::npos);
    EXPECT_FALSE(builtin_cluster("h100x8").ok());
    EXPECT_TRUE(cluster_from_arg("rtx6000d-4x8").ok());
    EXPECT_FALSE(cluster_from_arg("/no/such/cluster.toml").ok());
}

// SPEC §8's measured PCIe all-reduces are reproduced by the built-in profile (plus its 20-25 us latency).
TEST(PlannerCluster, Rtx6000dProfileKeepsTheMeasuredAllReduces) {
    const Cluster c = builtin("rtx6000d-4x8");
    EXPECT_NEAR(c.all_reduce_ms(134217728, 4, 0), 4.93, 0.03);
    EXPECT_NEAR(c.all_reduce_ms(134217728, 8, 0), 6.00, 0.03);
    EXPECT_NEAR(c.all_reduce_ms(134217728, 16, 0), 6.24, 0.03);
    EXPECT_NEAR(c.all_reduce_ms(134217728, 32, 0), 6.59, 0.03);
    EXPECT_NEAR(c.memory_gib * 1024, 85651, 1e-6);
}

// The H200 profile's bf16 / FP8 layer rates reproduce the DeepSeek-V3 layer times they were taken from.
TEST(PlannerCluster, H200RatesReproduceTheMeasuredLayer) {
    const Cluster c = builtin("h200x8");
    const loader::ModelConfig m = config("deepseek-v3.json");
    auto coef = scheduler::count_layer_costs(m, 3, 4);  // an MoE layer
    ASSERT_TRUE(coef.ok());
    const double flops = scheduler::chunk_cost(*coef, 0, 16384);
    EXPECT_NEAR(flops / (c.bf16_tflops * 1e12) * 1e3, 51.0, 0.5);
    EXPECT_NEAR(flops / (c.fp8_tflops * 1e12) * 1e3, 35.2, 0.4);
}

TEST(PlannerReasoning, TpTrafficPatterns) {
    auto d = tp_comm_patterns(config("deepseek-v3.json"));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->hidden, 7168);
    EXPECT_EQ(d->latent, 2112);  // q_lora 1536 + kv_lora 512 + rope 64
    EXPECT_NEAR(1.0 - d->rs_ag / d->all_reduce, 0.35, 0.005) << "reduce-scatter + all-gather saves ~35%";
    EXPECT_FALSE(d->needs_full_hidden);
    auto k = tp_comm_patterns(config("kimi-k3.json"));
    ASSERT_TRUE(k.ok());
    EXPECT_TRUE(k->needs_full_hidden) << "K3's MLA output gate and KDA layers read the full hidden";
    EXPECT_NEAR(k->chosen() / k->all_reduce - 1.0, 0.15, 0.005) << "2H + L is ~15% more than the all-reduce";
}

// A 1M-token GLM-5.3 prefill: indexer ~21 L²/2 8192 FLOPs (~94 PFLOP), backbone ~100 PFLOP, KV 56.6 GB in the FP8
// formats (78 x 656 + 21 x 132 bytes per token).
TEST(PlannerReasoning, GlmMillionTokenPrefill) {
    const loader::ModelConfig m = config("glm-5.3.json");
    Workload w;
    w.fp8_kv = true;
    w.fp8_index_k = true;
    const int64_t len = int64_t{1} << 20;
    auto lc = long_context(m, w, len, {2048, 8192, 32768});
    ASSERT_TRUE(lc.ok()) << lc.status().to_string();
    EXPECT_EQ(lc->full_indexer_layers, 21);
    EXPECT_NEAR(lc->indexer_pflop, 21.0 * len * static_cast<double>(len) / 2.0 * 8192 / 1e15, 1e-6);
    EXPECT_NEAR(lc->indexer_pflop, 94.6, 0.1);
    EXPECT_GT(lc->backbone_pflop, 95);
    EXPECT_LT(lc->backbone_pflop, 110);
    EXPECT_DOUBLE_EQ(lc->kv_bytes_per_token, 78 * 656.0 + 21 * 132.0);
    EXPECT_NEAR(lc->kv_gb, 56.6, 0.05);
    ASSERT_EQ(lc->chunks.size(), 3u);
    // Index-K re-reads fall with the chunk (∝ L² / b); the logits and activation peaks grow with it.
    EXPECT_NEAR(lc->chunks[0].index_k_reread_gb / lc->chunks[1].index_k_reread_gb, 4.0, 1e-9);
    EXPECT_LT(lc->chunks[0].logits_peak_gb, lc->chunks[1].logits_peak_gb);
    EXPECT_LT(lc->chunks[1].activation_peak_gb, lc->chunks[2].activation_peak_gb);
}

TEST(PlannerModel, MemoryDecidesWhatFits) {
    const loader::ModelConfig m = config("deepseek-v3.json");
    const Cluster c = builtin("h200x8");
    Workload w;
    auto one = predict(m, c, w, Layout{.pp = 1, .tp = 1, .ep = 1, .cp = 1});
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    // At tp 1 every weight is on the one rank: the model's ~657B parameters (671B with the MTP layer) in bf16.
    const double params = one->stages[0].weights_gib * 1024.0 * 1024.0 * 1024.0 / 2.0;
    EXPECT_GT(params, 640e9);
    EXPECT_LT(params, 680e9);
    EXPECT_FALSE(one->fits);
    auto bf16 = predict(m, c, w, Layout{.pp = 1, .tp = 8, .ep = 8, .cp = 1});
    ASSERT_TRUE(bf16.ok());
    EXPECT_FALSE(bf16->fits) << "1.3 TB of bf16 weights do not fit 8 x 139 GiB";
    w.fp8_weights = true;
    auto fp8 = predict(m, c, w, Layout{.pp = 1, .tp = 8, .ep = 8, .cp = 1});
    ASSERT_TRUE(fp8.ok());
    EXPECT_TRUE(fp8->fits) << fp8->max_rank_gib << " GiB";
    EXPECT_LT(fp8->max_rank_gib, bf16->max_rank_gib / 1.8);
}

TEST(PlannerModel, StagesCoverTheModelAndBubblesShowWithFewMicroBatches) {
    const loader::ModelConfig m = config("kimi-k3.json");
    const Cluster c = builtin("h200x8");
    Workload w;
    w.input_len = 8192;
    w.chunk = 8192;
    w.concurrency = 1;
    w.fp8_weights = true;
    auto p = predict(m, c, w, Layout{.pp = 4, .tp = 2, .ep = 2, .cp = 1});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->stages.size(), 4u);
    int64_t next = 0;
    for (const StagePrediction& s : p->stages) {
        EXPECT_EQ(s.layer_begin, next);
        EXPECT_GT(s.layer_end, s.layer_begin);
        EXPECT_GT(s.compute_ms, 0);
        next = s.layer_end;
    }
    EXPECT_EQ(next, 93);
    EXPECT_EQ(p->stages.back().boundary_ms, 0);
    EXPECT_GT(p->stages[0].boundary_ms, 0);
    EXPECT_DOUBLE_EQ(p->fill, 0.25) << "one chunk in a 4-stage pipeline";
    w.concurrency = 4;
    auto full = predict(m, c, w, Layout{.pp = 4, .tp = 2, .ep = 2, .cp = 1});
    ASSERT_TRUE(full.ok());
    EXPECT_DOUBLE_EQ(full->fill, 1.0);
    EXPECT_NEAR(full->input_tok_s, 4.0 * p->input_tok_s, 1e-6 * full->input_tok_s);
    // TTFT: Little's law over the closed loop, never less than one request's trip through the stages.
    EXPECT_GE(full->ttft_s + 1e-12, 4.0 * 8192 / full->input_tok_s);
    EXPECT_GE(p->ttft_s + 1e-12, 4.0 * p->period_ms * 1e-3);
}

// The Deep-PP study's setting (SPEC §7 / §8): DeepSeek-V3 with FP8 weights on 32 PCIe GPUs, input 16384, chunk 8192,
// C = 16. TP32 spends most of its window in all-reduces (the study profiled 57% NCCL); smaller TP domains with more
// stages win.
TEST(PlannerModel, DeepPpWinsOnPcieNodes) {
    const loader::ModelConfig m = config("deepseek-v3.json");
    const Cluster c = builtin("rtx6000d-4x8");
    Workload w;
    w.fp8_weights = true;
    w.concurrency = 16;
    auto preds = plan(m, c, w, enumerate_layouts(m, 32, 1, true, 1));
    ASSERT_TRUE(preds.ok()) << preds.status().to_string();
    ASSERT_EQ(preds->size(), 6u);  // pp x tp = 32
    const Prediction& best = preds->front();
    EXPECT_TRUE(best.fits);
    EXPECT_GT(best.layout.pp, 1);
    EXPECT_LT(best.layout.tp, 32);
    const Prediction* tp32 = nullptr;
    for (const Prediction& p : *preds) {
        if (p.layout.tp == 32) tp32 = &p;
    }
    ASSERT_NE(tp32, nullptr);
    EXPECT_GT(tp32->comm_share, 0.5);
    EXPECT_EQ(tp32->bottleneck, "TP all-reduce");
    EXPECT_GT(best.input_tok_s, 1.5 * tp32->input_tok_s);
    for (const Prediction& p : *preds) {
        std::printf("%s fits %d %.1f GiB period %.1f ms (%s, comm %.0f%%) %.0f tok/s TTFT %.2f s\n",
                    p.layout.str().c_str(), p.fits, p.max_rank_gib, p.period_ms, p.bottleneck.c_str(),
                    100 * p.comm_share, p.input_tok_s, p.ttft_s);
    }
}

TEST(PlannerModel, BadLayoutsAreErrors) {
    const loader::ModelConfig m = config("deepseek-v3.json");
    const Cluster c = builtin("h200x8");
    EXPECT_FALSE(predict(m, c, Workload{}, Layout{.pp = 4, .tp = 4, .ep = 1, .cp = 1}).ok()) << "16 GPUs of 8";
    EXPECT_FALSE(predict(m, c, Workload{}, Layout{.pp = 1, .tp = 4, .ep = 3, .cp = 1}).ok()) << "ep must divide tp";
    Workload w;
    w.chunk = 0;
    EXPECT_FALSE(predict(m, c, w, Layout{}).ok());
    for (const double f : {0.0, 1.5, -0.2}) {
        Workload bad;
        bad.mem_fraction = f;
        EXPECT_FALSE(predict(m, c, bad, Layout{}).ok()) << f;
    }
    Workload depth;
    depth.async_depth = -1;
    EXPECT_FALSE(predict(m, c, depth, Layout{}).ok());
}

TEST(PlanCommand, PrintsTheTablesAndWritesJson) {
    PlanArgs a;
    a.model = config_path("glm-5.3.json");
    a.cluster = "h200x8";
    a.workload.fp8_weights = true;
    a.workload.fp8_kv = true;
    a.workload.fp8_index_k = true;
    a.max_cp = 2;
    a.long_context = 1 << 20;
    a.json = ::testing::TempDir() + "/plan.json";
    std::ostringstream out;
    const Status st = run_plan(a, out);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const std::string text = out.str();
    EXPECT_NE(text.find("| layout | fits |"), std::string::npos) << text;
    EXPECT_NE(text.find("pp1 tp8 ep8 cp1"), std::string::npos) << text;
    EXPECT_NE(text.find("pp1 tp4 ep4 cp2"), std::string::npos) << text;
    EXPECT_NE(text.find("indexer 94.6 PFLOP (21 full layers)"), std::string::npos) << text;
    EXPECT_NE(text.find("= 56.6 GB"), std::string::npos) << text;
    std::ifstream f(a.json);
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_EQ(j["model_type"], "glm_moe_dsa");
    EXPECT_EQ(j["layouts"].size(), 7u);  // pp x tp = 8 at cp 1 (pp 1, 2, 4, 8) and pp x tp = 4 at cp 2 (pp 1, 2, 4)
    EXPECT_NEAR(j["long_context"]["kv_gb"].get<double>(), 56.6, 0.05);
    std::printf("%s", text.c_str());

    PlanArgs bad = a;
    bad.layouts = {"2,x"};
    std::ostringstream ignored;
    const Status e = run_plan(bad, ignored);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.message().find("--layout '2,x'"), std::string::npos) << e.to_string();
    bad.layouts = {"2,4"};
    bad.cluster = "nowhere";
    EXPECT_FALSE(run_plan(bad, ignored).ok());
}

}  // namespace
}  // namespace penstock::planner
