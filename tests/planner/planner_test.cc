// The layout planner (SPEC §8): the cluster file, the collective model against the measured points, the published
// reasoning it must reproduce (TP traffic patterns, GLM-5.3's 1M-token prefill, deep PP on PCIe nodes), memory and
// bubbles, and the command's report.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/check.h"
#include "planner/calibrate.h"
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
    EXPECT_EQ(c->peak_bf16_tflops, 0.0) << "the datasheet peaks are optional";
    auto peaks =
        parse_cluster("peak_bf16_tflops = 989\npeak_fp8_tflops = 1979\n" + std::string(kClusterToml), "p.toml");
    ASSERT_TRUE(peaks.ok()) << peaks.status().to_string();
    EXPECT_DOUBLE_EQ(peaks->peak_bf16_tflops, 989);
    EXPECT_DOUBLE_EQ(peaks->peak_fp8_tflops, 1979);

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

TEST(PlannerCluster, ReadsClassRatesAndFallsBackToTheLayerRate) {
    const std::string rates = std::string(kClusterToml) + R"(
[rates]
gemm = 500
experts = 800
experts_half_rows = 100
attention = 450
copy_gbps = 2000
)";
    // [[all_reduce]] is an array of tables: [rates] after it is its own table.
    auto c = parse_cluster(rates, "r.toml");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE(c->rates.any());
    EXPECT_DOUBLE_EQ(c->rates.experts_half_rows, 100);
    EXPECT_DOUBLE_EQ(c->rates.sparse_attention, 0) << "not measured: the layer rate stands in";
    auto bad = parse_cluster(rates + "kda_speed = 3\n", "r.toml");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("unknown key 'rates.kda_speed'"), std::string::npos)
        << bad.status().to_string();
    auto zero = parse_cluster(std::string(kClusterToml) + "[rates]\ngemm = 0\n", "r.toml");
    ASSERT_FALSE(zero.ok());
    EXPECT_NE(zero.status().message().find("'rates.gemm' must be in"), std::string::npos);

    // DeepSeek-V3 layer 3 at 16K by hand: gemm FLOPs at 500, experts at 800 · 512 / 612, attention at 450, the
    // memory-bound bytes at 2000 GB/s; nothing else is counted.
    const loader::ModelConfig m = config("deepseek-v3.json");
    auto split = scheduler::count_layer_cost_breakdown(m, 3, 4);
    auto bytes = elementwise_bytes_per_token(m, 3, 4);
    ASSERT_TRUE(split.ok() && bytes.ok());
    const auto flops = [&](scheduler::OpClass k) { return scheduler::chunk_cost((*split)[k], 0, 16384); };
    const double expect_ms =
        (flops(scheduler::OpClass::kGemm) / 500e12 + flops(scheduler::OpClass::kExperts) / (800e12 * 512.0 / 612.0) +
         flops(scheduler::OpClass::kAttention) / 450e12 + *bytes * 16384 / 2000e9) *
        1e3;
    auto ms = compute_ms(m, *c, Workload{}, 3, 4, 0, 16384);
    ASSERT_TRUE(ms.ok());
    EXPECT_NEAR(*ms, expect_ms, 1e-9 * expect_ms);
    // Two TP ranks halve it; with FP8 weights the unmeasured gemm_fp8 / experts_fp8 fall back to fp8_tflops (700).
    auto tp2 = compute_ms(m, *c, Workload{}, 3, 4, 0, 16384, 2);
    ASSERT_TRUE(tp2.ok());
    EXPECT_NEAR(*tp2, expect_ms / 2, 1e-9 * expect_ms);
    Workload fp8;
    fp8.fp8_weights = true;
    auto f = compute_ms(m, *c, fp8, 3, 4, 0, 16384);
    ASSERT_TRUE(f.ok());
    const double expect_fp8 = ((flops(scheduler::OpClass::kGemm) + flops(scheduler::OpClass::kExperts)) / 700e12 +
                               flops(scheduler::OpClass::kAttention) / 450e12 + *bytes * 16384 / 2000e9) *
                              1e3;
    EXPECT_NEAR(*f, expect_fp8, 1e-9 * expect_fp8);
    // Without class rates, every FLOP at the layer rate (the cluster file's bf16_tflops = 400).
    auto plain = parse_cluster(kClusterToml, "c.toml");
    ASSERT_TRUE(plain.ok());
    auto flat = compute_ms(m, *plain, Workload{}, 3, 4, 0, 16384);
    ASSERT_TRUE(flat.ok());
    EXPECT_NEAR(*flat, scheduler::chunk_cost(split->total(), 0, 16384) / 400e12 * 1e3, 1e-9 * *flat);
}

TEST(PlannerCalibrate, ScopesGoToTheirClasses) {
    EXPECT_EQ(classify_scope("layer.attn.q_proj"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.attn.o_proj.(other)"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.attn.o_proj.act_quant"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.moe.shared.down"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.moe.experts.gate_up_act"), ScopeClass::kExperts);
    EXPECT_EQ(classify_scope("layer.moe.experts.(other)"), ScopeClass::kExperts);
    EXPECT_EQ(classify_scope("layer.moe.permute.act_quant"), ScopeClass::kExperts);
    EXPECT_EQ(classify_scope("layer.moe.permute.(other)"), ScopeClass::kMemory);
    EXPECT_EQ(classify_scope("layer.attn.core.attention"), ScopeClass::kAttention);
    EXPECT_EQ(classify_scope("layer.attn.core.fp8_quant"), ScopeClass::kAttention);
    EXPECT_EQ(classify_scope("layer.attn.core.sparse_mla"), ScopeClass::kSparseAttention);
    EXPECT_EQ(classify_scope("layer.attn.indexer.logits"), ScopeClass::kIndexer);
    EXPECT_EQ(classify_scope("layer.attn.indexer.topk"), ScopeClass::kTopk);
    EXPECT_EQ(classify_scope("layer.attn.indexer.q_proj.wq_b"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.attn.indexer.q_proj.quant"), ScopeClass::kMemory);
    EXPECT_EQ(classify_scope("layer.kda.recurrence"), ScopeClass::kKda);
    EXPECT_EQ(classify_scope("layer.kda.gates.decay"), ScopeClass::kKda);
    EXPECT_EQ(classify_scope("layer.kda.gates.f_proj"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.kda.qkv_proj"), ScopeClass::kGemm);
    EXPECT_EQ(classify_scope("layer.norm"), ScopeClass::kMemory);
    EXPECT_EQ(classify_scope("layer.attn_res"), ScopeClass::kMemory);
}

// Runs made from known rates give those rates back, including the routed experts' half-rate rows.
TEST(PlannerCalibrate, RecoversKnownRates) {
    const loader::ModelConfig m = config("deepseek-v3.json");
    const double gemm = 600, experts = 800, half = 120, attention = 500;
    std::vector<std::pair<loader::ModelConfig, BenchRun>> runs;
    for (const int64_t tokens : {4096, 16384, 65536}) {
        auto split = scheduler::count_layer_cost_breakdown(m, 3, 4);
        ASSERT_TRUE(split.ok());
        const auto ms = [&](scheduler::OpClass k, double rate) {
            return scheduler::chunk_cost((*split)[k], 0, tokens) / (rate * 1e12) * 1e3;
        };
        const double rows = static_cast<double>(tokens) * 8 / 256;
        BenchRun r;
        r.source = "synthetic";
        r.layer_begin = 3;
        r.layer_end = 4;
        r.tokens = tokens;
        r.scopes = {{"layer", 0},
                    {"layer.attn", 0},
                    {"layer.attn.q_proj", ms(scheduler::OpClass::kGemm, gemm)},
                    {"layer.attn.core.attention", ms(scheduler::OpClass::kAttention, attention)},
                    {"layer.moe.experts", ms(scheduler::OpClass::kExperts, experts * rows / (rows + half))},
                    {"layer.norm", 0.5}};
        for (const auto& [path, t] : r.scopes) {
            if (path.find('.') != std::string::npos) r.median_ms += t;
        }
        runs.emplace_back(m, r);
    }
    std::vector<RunSplit> splits;
    auto c = calibrate(runs, &splits);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_EQ(splits.size(), 3u);
    EXPECT_NEAR(c->gemm, gemm, 1e-6 * gemm);
    EXPECT_NEAR(c->attention, attention, 1e-6 * attention);
    EXPECT_NEAR(c->experts, experts, 1e-6 * experts);
    EXPECT_NEAR(c->experts_half_rows, half, 1e-6 * half);
    EXPECT_EQ(c->gemm_fp8, 0.0) << "no FP8 run";
    EXPECT_EQ(c->sparse_attention, 0.0);
    EXPECT_GT(c->copy_gbps, 0.0);
    const std::string toml = rates_toml(*c);
    EXPECT_NE(toml.find("[rates]\ngemm = 600\n"), std::string::npos) << toml;
    auto back = parse_cluster(std::string(kClusterToml) + toml, "calibrated.toml");
    ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << toml;
}

std::string perf_dir() { return std::string(PENSTOCK_TEST_DATA_DIR) + "/../../docs/perf/2026-12-05-s36/"; }

std::vector<std::pair<loader::ModelConfig, BenchRun>> recorded_runs(const std::string& folder) {
    std::vector<std::pair<loader::ModelConfig, BenchRun>> out;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(perf_dir() + folder)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        const std::string name = f.filename().string();
        const std::string model = name.starts_with("dsv3")  ? "deepseek-v3.json"
                                  : name.starts_with("glm") ? "glm-5.3.json"
                                                            : "kimi-k3.json";
        auto runs = read_model_bench_json(f.string());
        PENSTOCK_CHECK(runs.ok()) << runs.status().to_string();
        for (const BenchRun& r : *runs) out.emplace_back(config(model), r);
    }
    return out;
}

// The built-in H200 class rates are `penstock plan --calibrate` over the recorded layers; the calibrated model then
// predicts layers it was not fitted on (other sessions' runs, Kimi K3's MLA layer, GLM-5.3 with FP8 weights, 4K and 8K
// chunks, GLM-5.3's f32 indexer at 64K) within 8% of their measured wall time from 8K tokens up and 15% at 4K
// (0.97-1.12 at this commit: planner.md "Calibration").
TEST(PlannerCalibrate, H200RatesComeFromTheRecordedLayersAndPredictHeldOutOnes) {
    const auto runs = recorded_runs("calibration");
    ASSERT_EQ(runs.size(), 7u);
    auto rates = calibrate(runs);
    ASSERT_TRUE(rates.ok()) << rates.status().to_string();
    const Cluster h200 = builtin("h200x8");
    const ClassRates& b = h200.rates;
    const std::pair<double, double> pairs[] = {{rates->gemm, b.gemm},
                                               {rates->gemm_fp8, b.gemm_fp8},
                                               {rates->experts, b.experts},
                                               {rates->experts_fp8, b.experts_fp8},
                                               {rates->experts_half_rows, b.experts_half_rows},
                                               {rates->experts_fp8_half_rows, b.experts_fp8_half_rows},
                                               {rates->attention, b.attention},
                                               {rates->attention_fp8, b.attention_fp8},
                                               {rates->sparse_attention, b.sparse_attention},
                                               {rates->indexer_f32, b.indexer_f32},
                                               {rates->indexer_fp8, b.indexer_fp8},
                                               {rates->indexer_fp8_accumulate, b.indexer_fp8_accumulate},
                                               {rates->kda, b.kda},
                                               {rates->topk_ps_per_pair, b.topk_ps_per_pair},
                                               {rates->copy_gbps, b.copy_gbps}};
    for (const auto& [got, builtin_value] : pairs) EXPECT_NEAR(got, builtin_value, 1e-3 * builtin_value);
    for (const auto& [m, r] : runs) {
        auto ms = predict_run_ms(m, h200, r);
        ASSERT_TRUE(ms.ok());
        EXPECT_NEAR(*ms / r.median_ms, 1.0, 0.08) << r.source;
    }
    for (const auto& [m, r] : recorded_runs("heldout")) {
        auto ms = predict_run_ms(m, h200, r);
        ASSERT_TRUE(ms.ok());
        std::printf("held out %s: measured %.2f ms, model %.2f ms\n", r.source.c_str(), r.median_ms, *ms);
        // 4K chunks run below the power limit the 16K fit carries: the model is up to 12% pessimistic there.
        EXPECT_NEAR(*ms / r.median_ms, 1.0, r.tokens >= 8192 ? 0.08 : 0.15) << r.source;
    }
}

TEST(PlannerCalibrate, BadBenchResultsAreClearErrors) {
    const std::string dir = ::testing::TempDir();
    const auto write = [&](const std::string& name, const std::string& text) {
        std::ofstream(dir + "/" + name) << text;
        return dir + "/" + name;
    };
    const std::string scopes = R"("breakdown": [{"scope": "layer", "median_ms": 1}])";
    const auto error_of = [](const std::string& path) {
        auto r = read_model_bench_json(path);
        return r.ok() ? std::string() : r.status().message();
    };
    EXPECT_NE(error_of(write("nobd.json", R"({"layers": [3, 4], "tokens": 16, "median_ms": 1})")).find("--breakdown"),
              std::string::npos);
    EXPECT_NE(error_of(write("abs.json", R"({"layers": [3, 4], "tokens": 16, "median_ms": 1, "mla_form": )"
                                         R"("absorbed", )" +
                                             scopes + "}"))
                  .find("--mla-form mha"),
              std::string::npos);
    EXPECT_NE(error_of(write("lay.json", R"({"layers": [3], "tokens": 16, "median_ms": 1, )" + scopes + "}"))
                  .find("'layers' must be [b, e]"),
              std::string::npos);
    EXPECT_NE(error_of(write("trunc.json", "{\"layers\": [")).find("trunc.json"), std::string::npos);
    EXPECT_NE(error_of(dir + "/missing.json").find("cannot be read"), std::string::npos);
    // A layer range outside the model fails the calibration, naming the result.
    auto runs = read_model_bench_json(
        write("far.json", R"({"layers": [70, 71], "tokens": 16, "median_ms": 1, )" + scopes + "}"));
    ASSERT_TRUE(runs.ok()) << runs.status().to_string();
    auto c = calibrate({{config("deepseek-v3.json"), runs->front()}});
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("far.json[0]"), std::string::npos) << c.status().to_string();

    // Through the command: the report, the [rates] table and a held-out row; a malformed pair is one error.
    PlanArgs a;
    a.calibrate = {config_path("deepseek-v3.json") + "=" + perf_dir() + "calibration/dsv3-bf16-16k.s27i.json"};
    a.check = {config_path("deepseek-v3.json") + "=" + perf_dir() + "heldout/dsv3-bf16-16k.s32a.json"};
    std::ostringstream out;
    const Status st = run_plan(a, out);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_NE(out.str().find("[rates]\ngemm = "), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("dsv3-bf16-16k.s32a.json[0] | deepseek_v3 | 3-4 | 16384"), std::string::npos) << out.str();
    // Each result's classes at their own rates, with the share of the built-in H200's dense bf16 peak (989): one
    // run, so its dense-linear rate is the calibrated one; no sparse attention in a DeepSeek-V3 layer.
    auto one = read_model_bench_json(perf_dir() + "calibration/dsv3-bf16-16k.s27i.json");
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    auto one_rates = calibrate({{config("deepseek-v3.json"), one->front()}});
    ASSERT_TRUE(one_rates.ok()) << one_rates.status().to_string();
    char cell[64];
    std::snprintf(cell, sizeof(cell), ".json[0] | %.0f (%.0f%%) | ", one_rates->gemm, 100.0 * one_rates->gemm / 989.0);
    EXPECT_NE(out.str().find("Each result's classes of work in TFLOP/s"), std::string::npos) << out.str();
    const size_t row = out.str().find(std::string("dsv3-bf16-16k.s27i") + cell);
    ASSERT_NE(row, std::string::npos) << cell << "\n" << out.str();
    const std::string line = out.str().substr(row, out.str().find('\n', row) - row);
    EXPECT_TRUE(line.ends_with(" | - | - | - |")) << line;
    a.calibrate = {"no-equals-sign.json"};
    const Status e = run_plan(a, out);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.message().find("expected CONFIG=BENCH.json"), std::string::npos) << e.to_string();
    PlanArgs none;
    EXPECT_FALSE(run_plan(none, out).ok()) << "neither --model nor --calibrate";
}

}  // namespace
}  // namespace penstock::planner
