// Dynamic chunking cost model: FLOP counting by layer kind on the real DeepSeek-V3, GLM-5.3 and Kimi K3 configs, max
// over pipeline stages, the chunk search, and the scheduler's shrinking chunks of a long prompt with every chunk's
// predicted cost within budget.
#include "scheduler/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "loader/model_config.h"
#include "scheduler/scheduler.h"
#include "test_util.h"

namespace penstock::scheduler {
namespace {

constexpr double kRelSlack = 1e-12;  // cost comparisons are exact up to double rounding

loader::ModelConfig real_config(const std::string& name) {
    const std::string path = std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/" + name;
    auto text = loader::read_text_file(path);
    PENSTOCK_CHECK(text.ok()) << text.status().to_string();
    auto json = loader::parse_json_text(*text, path);
    PENSTOCK_CHECK(json.ok()) << json.status().to_string();
    auto config = loader::parse_model_config(*json);
    PENSTOCK_CHECK(config.ok()) << config.status().to_string();
    return *config;
}

loader::ModelConfig deepseek_v3() { return real_config("deepseek-v3.json"); }

TEST(CostModel, CountsDeepSeekV3PerTokenFlops) {
    const loader::ModelConfig m = deepseek_v3();
    ASSERT_EQ(m.num_hidden_layers, 61);
    // Written out from the published shapes (H 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128,
    // dense 18432, 256 experts of 2048, top-8 + 1 shared, first 3 layers dense).
    const double attn = 2.0 * 7168 * 1536 + 2.0 * 1536 * 128 * 192 + 2.0 * 7168 * 576 + 2.0 * 128 * 128 * 7168;
    const double dense = 6.0 * 7168 * 18432, moe = 6.0 * 7168 * 2048 * 9 + 2.0 * 7168 * 256;
    auto all = count_layer_costs(m, 0, 61);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    EXPECT_DOUBLE_EQ(all->k_g, 61 * attn + 3 * dense + 58 * moe);
    EXPECT_DOUBLE_EQ(all->k_e, 61 * 2.0 * 512 * 128 * 256);
    EXPECT_DOUBLE_EQ(all->k_a, 61 * 2.0 * 128 * 320);
    std::printf("DeepSeek-V3 per token: k_g %.4g GFLOP, k_e %.4g GFLOP/context token, k_a %.4g MFLOP/pair\n",
                all->k_g / 1e9, all->k_e / 1e9, all->k_a / 1e6);
    auto dense_only = count_layer_costs(m, 0, 3);
    ASSERT_TRUE(dense_only.ok());
    EXPECT_DOUBLE_EQ(dense_only->k_g, 3 * (attn + dense));
    EXPECT_FALSE(count_layer_costs(m, 60, 62).ok());
    EXPECT_FALSE(count_layer_costs(m, 5, 5).ok());
}

TEST(CostModel, CappedPairsMatchBruteForce) {
    std::mt19937_64 rng(11);
    for (int trial = 0; trial < 500; ++trial) {
        const int64_t prefix = static_cast<int64_t>(rng() % 3000), n = static_cast<int64_t>(rng() % 2500);
        const int64_t cap = 1 + static_cast<int64_t>(rng() % 2048);
        double expect = 0;
        for (int64_t p = prefix; p < prefix + n; ++p) expect += static_cast<double>(std::min(p + 1, cap));
        ASSERT_DOUBLE_EQ(capped_pairs(prefix, n, cap), expect) << prefix << " " << n << " " << cap;
    }
    EXPECT_EQ(capped_pairs(5, 0, 10), 0.0);
    EXPECT_EQ(capped_pairs(0, 4, 0), 0.0);
}

// GLM-5.3 (DSA): written out from its shapes (H 6144, 64 heads, q_lora 2048, kv_lora 512, nope 192, rope 64, v 256,
// dense 12288, 256 experts of 2048, top-8 + 1 shared, first 3 dense; indexer 32 heads x 128, top-2048; 21 "full"
// indexer layers of 78).
TEST(CostModel, CountsGlmDsaLayersByKind) {
    const loader::ModelConfig m = real_config("glm-5.3.json");
    ASSERT_EQ(m.num_hidden_layers, 78);
    const double mla = 2.0 * 6144 * 2048 + 2.0 * 2048 * 64 * 256 + 2.0 * 6144 * 576 + 2.0 * 64 * 256 * 6144;
    const double absorb = 2.0 * 64 * 512 * (192 + 256);
    const double indexer = 2.0 * 2048 * 32 * 128 + 2.0 * 6144 * 128 + 2.0 * 6144 * 32;
    const double dense = 6.0 * 6144 * 12288, moe = 6.0 * 6144 * 2048 * 9 + 2.0 * 6144 * 256;
    auto all = count_layer_costs(m, 0, 78);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    EXPECT_DOUBLE_EQ(all->k_g, 78 * (mla + absorb) + 21 * indexer + 3 * dense + 75 * moe);
    EXPECT_EQ(all->k_e, 0.0) << "the absorbed form expands no prefix latents";
    EXPECT_DOUBLE_EQ(all->k_a, 21 * 2.0 * 32 * 128) << "only the full indexer layers score every prefix key";
    EXPECT_DOUBLE_EQ(all->k_s, 78 * 2.0 * 64 * (512 + 64 + 512));
    EXPECT_EQ(all->s_cap, 2048);
    auto shared = count_layer_costs(m, 3, 4);  // a "shared" layer: no indexer
    ASSERT_TRUE(shared.ok());
    EXPECT_DOUBLE_EQ(shared->k_g, mla + absorb + moe);
    EXPECT_EQ(shared->k_a, 0.0);
    // Past index_topk keys a query's sparse attention costs the same at any prefix.
    EXPECT_DOUBLE_EQ(chunk_cost(*shared, 100000, 512), chunk_cost(*shared, 2048, 512));
    EXPECT_LT(chunk_cost(*shared, 0, 512), chunk_cost(*shared, 2048, 512));
    std::printf("GLM-5.3 per token: k_g %.4g GFLOP, k_a %.4g MFLOP/pair, k_s %.4g MFLOP/selected pair (cap %lld)\n",
                all->k_g / 1e9, all->k_a / 1e6, all->k_s / 1e6, static_cast<long long>(all->s_cap));
}

// Kimi K3 (69 KDA + 24 MLA layers): H 7168; MLA 96 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, with
// the output gate; KDA 96 heads x 128, conv 4, full-rank output gate, chunk 64; latent MoE 3584, 896 experts of 3072,
// top-16 + 2 shared; dense 33792 in layer 0.
TEST(CostModel, CountsKimiKdaAndMlaLayersByKind) {
    const loader::ModelConfig m = real_config("kimi-k3.json");
    ASSERT_EQ(m.num_hidden_layers, 93);
    const double qkv = 96.0 * 128;
    const double kda = 3 * 2.0 * 7168 * qkv + 2.0 * 4 * 3 * qkv + 2.0 * 7168 * 128 + 2.0 * 128 * qkv + 2.0 * 7168 * 96 +
                       2.0 * 7168 * qkv + 2.0 * qkv * 7168 + 96 * (6.0 * 128 * 128 + 8.0 * 64 * 128);
    const double mla =
        2.0 * 7168 * 1536 + 2.0 * 1536 * 96 * 192 + 2.0 * 7168 * 576 + 2.0 * 96 * 128 * 7168 + 2.0 * 7168 * 96 * 128;
    const double moe = 6.0 * 3584 * 3072 * 16 + 4.0 * 7168 * 3584 + 6.0 * 7168 * 3072 * 2 + 2.0 * 7168 * 896;
    const double dense = 6.0 * 7168 * 33792;
    auto all = count_layer_costs(m, 0, 93);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    EXPECT_DOUBLE_EQ(all->k_g, 69 * kda + 24 * mla + dense + 92 * moe);
    EXPECT_DOUBLE_EQ(all->k_e, 24 * 2.0 * 512 * 96 * 256);
    EXPECT_DOUBLE_EQ(all->k_a, 24 * 2.0 * 96 * 320);
    EXPECT_EQ(all->k_s, 0.0);
    auto kda_only = count_layer_costs(m, 0, 3);  // layers 1-3 (1-based) are KDA
    ASSERT_TRUE(kda_only.ok());
    EXPECT_DOUBLE_EQ(kda_only->k_g, 3 * kda + dense + 2 * moe);
    EXPECT_DOUBLE_EQ(chunk_cost(*kda_only, 500000, 4096), chunk_cost(*kda_only, 0, 4096)) << "no prefix term";
    std::printf("Kimi K3 per token: k_g %.4g GFLOP, k_e %.4g GFLOP/context token, k_a %.4g MFLOP/pair\n",
                all->k_g / 1e9, all->k_e / 1e9, all->k_a / 1e6);
}

// A bad family config is an error, not a guess.
// The per-class split of the planner adds up to the totals, and each term lands in the class it runs on.
TEST(CostModel, BreakdownByOpClassSumsToTheTotals) {
    for (const char* name : {"deepseek-v3.json", "glm-5.3.json", "kimi-k3.json"}) {
        const loader::ModelConfig m = real_config(name);
        for (const auto& [b, e] : {std::pair<int64_t, int64_t>{0, m.num_hidden_layers}, {0, 1}, {3, 4}, {1, 2}}) {
            auto total = count_layer_costs(m, b, e);
            auto split = count_layer_cost_breakdown(m, b, e);
            ASSERT_TRUE(total.ok() && split.ok()) << name;
            const CostCoefficients sum = split->total();
            EXPECT_NEAR(sum.k_g, total->k_g, 1e-9 * total->k_g) << name << " [" << b << "," << e << ")";
            EXPECT_DOUBLE_EQ(sum.k_e, total->k_e) << name;
            EXPECT_DOUBLE_EQ(sum.k_a, total->k_a) << name;
            EXPECT_DOUBLE_EQ(sum.k_s, total->k_s) << name;
            EXPECT_EQ(sum.s_cap, total->s_cap) << name;
        }
    }
    // DeepSeek-V3 layer 3: attention pairs only in kAttention, the routed experts (8 of 2048 wide) in kExperts.
    auto d = count_layer_cost_breakdown(real_config("deepseek-v3.json"), 3, 4);
    ASSERT_TRUE(d.ok());
    EXPECT_DOUBLE_EQ((*d)[OpClass::kAttention].k_a, 2.0 * 128 * 320);
    EXPECT_DOUBLE_EQ((*d)[OpClass::kExperts].k_g, 6.0 * 7168 * 2048 * 8);
    EXPECT_DOUBLE_EQ((*d)[OpClass::kGemm].k_e, 2.0 * 512 * 128 * 256) << "kv_b's expansion is a dense GEMM";
    EXPECT_EQ((*d)[OpClass::kIndexer].k_a + (*d)[OpClass::kKda].k_g + (*d)[OpClass::kSparseAttention].k_s, 0.0);
    // GLM-5.3: the whole model's indexer logits are 21 full layers x 2 x 32 x 128 per pair; sparse MLA in k_s.
    auto g = count_layer_cost_breakdown(real_config("glm-5.3.json"), 0, 78);
    ASSERT_TRUE(g.ok());
    EXPECT_DOUBLE_EQ((*g)[OpClass::kIndexer].k_a, 21 * 2.0 * 32 * 128);
    EXPECT_DOUBLE_EQ((*g)[OpClass::kAttention].k_a, 0.0);
    EXPECT_EQ((*g)[OpClass::kSparseAttention].s_cap, 2048);
    // Kimi K3 layer 1 (KDA): the delta rule and conv in kKda, 96 heads of 128, chunk 64, conv 4.
    auto k = count_layer_cost_breakdown(real_config("kimi-k3.json"), 1, 2);
    ASSERT_TRUE(k.ok());
    EXPECT_DOUBLE_EQ((*k)[OpClass::kKda].k_g, 2.0 * 4 * 3 * 12288 + 96 * (6.0 * 128 * 128 + 8.0 * 64 * 128));
    EXPECT_EQ((*k)[OpClass::kAttention].k_a, 0.0);
    EXPECT_STREQ(op_class_name(OpClass::kSparseAttention), "sparse_attention");
}

TEST(CostModel, FamilyConfigErrorsPropagate) {
    loader::ModelConfig m = real_config("glm-5.3.json");
    m.raw["indexer_types"] = nlohmann::json::array({"shared"});
    auto bad = count_layer_costs(m, 0, 1);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("indexer_types"), std::string::npos) << bad.status().to_string();
}

TEST(CostModel, PartitionIsValidatedAndTheWorstStageBinds) {
    const loader::ModelConfig m = deepseek_v3();
    const std::vector<int64_t> bad_sum{30, 30}, empty_stage{61, 0}, ok{31, 30};
    auto bad = ChunkCostModel::from_model(m, bad_sum);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("30,30 sums to 60 layers; the model has 61"), std::string::npos)
        << bad.status().to_string();
    EXPECT_FALSE(ChunkCostModel::from_model(m, empty_stage).ok());
    auto two = ChunkCostModel::from_model(m, ok);
    ASSERT_TRUE(two.ok());
    ASSERT_EQ(two->stages().size(), 2u);
    EXPECT_DOUBLE_EQ(two->cost(1000, 512), chunk_cost(two->stages()[0], 1000, 512)) << "31 layers cost more";

    // A GEMM-heavy stage binds at short prefixes, an attention-heavy one at long prefixes.
    const ChunkCostModel mixed({{.k_g = 100, .k_e = 0, .k_a = 0}, {.k_g = 10, .k_e = 0, .k_a = 1}});
    EXPECT_DOUBLE_EQ(mixed.cost(0, 64), 6400);
    EXPECT_DOUBLE_EQ(mixed.cost(10000, 64), 640 + 64 * (10000 + 32));
}

TEST(CostModel, MaxTokensWithinMatchesBruteForce) {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> coef(0.0, 5.0);
    for (int trial = 0; trial < 200; ++trial) {
        const ChunkCostModel model({{.k_g = 1 + coef(rng), .k_e = coef(rng), .k_a = coef(rng) / 100},
                                    {.k_g = 1 + coef(rng),
                                     .k_e = coef(rng),
                                     .k_a = coef(rng) / 1000,
                                     .k_s = coef(rng) / 10,
                                     .s_cap = 1 + static_cast<int64_t>(rng() % 1000)}});
        const int64_t prefix = static_cast<int64_t>(rng() % 2000), limit = static_cast<int64_t>(rng() % 1500);
        const double budget = coef(rng) * 2000 + 10;
        int64_t expect = 0;
        for (int64_t x = 0; x <= limit; ++x) {
            if (model.cost(prefix, x) <= budget) expect = x;
        }
        if (model.cost(prefix, 0) > budget) expect = 0;
        ASSERT_EQ(model.max_tokens_within(prefix, budget, limit), expect) << "trial " << trial;
    }
}

TEST(CostModel, NextChunkAlwaysMakesProgress) {
    const ChunkCostModel model({{.k_g = 1, .k_e = 1, .k_a = 1}});
    EXPECT_EQ(model.next_chunk(/*prefix_len=*/4096, /*remaining=*/1000, /*budget=*/1.0), 64)
        << "over budget: still one page";
    EXPECT_EQ(model.next_chunk(4096, 10, 1.0), 10);
}

// Cuts a `prompt`-token prompt by next_chunk under `budget` and checks every chunk: within the budget, and (all but
// the last) the largest page-aligned chunk that fits, ending on a page boundary, no longer than the one before.
std::vector<int64_t> chunk_prompt(const ChunkCostModel& model, double budget, int64_t prompt) {
    std::vector<int64_t> chunks;
    for (int64_t done = 0; done < prompt;) {
        const int64_t x = model.next_chunk(done, prompt - done, budget);
        EXPECT_GT(x, 0);
        if (x <= 0) break;
        EXPECT_LE(model.cost(done, x), budget * (1 + kRelSlack)) << "chunk at prefix " << done;
        if (done + x < prompt) {
            EXPECT_EQ((done + x) % kv_cache::kPageSize, 0);
            EXPECT_GT(model.cost(done, x + kv_cache::kPageSize), budget) << "the largest page-aligned chunk";
            if (!chunks.empty()) {
                EXPECT_LE(x, chunks.back()) << "chunks shrink monotonically";
            }
        }
        chunks.push_back(x);
        done += x;
    }
    return chunks;
}

// The acceptance test of SPEC §3: later chunks of a long prompt shrink and each stays within the budget.
TEST(CostModel, LongPromptChunksShrinkWithinBudget) {
    const loader::ModelConfig m = deepseek_v3();
    const std::vector<int64_t> partition{16, 15, 15, 15};
    auto model = ChunkCostModel::from_model(m, partition);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const int64_t prompt = 131072;
    const std::vector<int64_t> chunks = chunk_prompt(*model, model->budget(8192), prompt);
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(chunks.front(), 8192);
    EXPECT_LT(chunks[chunks.size() - 2], chunks.front() / 4) << "late chunks are much shorter";
    std::printf("%zu chunks for a %lld-token prompt: first %lld, second %lld, last full %lld\n", chunks.size(),
                static_cast<long long>(prompt), static_cast<long long>(chunks[0]), static_cast<long long>(chunks[1]),
                static_cast<long long>(chunks[chunks.size() - 2]));
}

// GLM-5.3 at a long prompt: only the full layers' indexer grows with the prefix (sparse attention is capped at
// index_topk keys per query), so the chunks shrink far less than an all-MLA count would make them.
TEST(CostModel, DsaLongPromptChunksStayLongWithinBudget) {
    const loader::ModelConfig m = real_config("glm-5.3.json");
    auto model = ChunkCostModel::from_model(m, {});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const int64_t prompt = 131072;
    const std::vector<int64_t> chunks = chunk_prompt(*model, model->budget(8192), prompt);
    ASSERT_FALSE(HasFailure());
    ASSERT_GE(chunks.size(), 3u);
    EXPECT_EQ(chunks.front(), 8192);
    EXPECT_LT(chunks[chunks.size() - 2], chunks.front()) << "the indexer still grows with the prefix";
    EXPECT_GT(chunks[chunks.size() - 2], chunks.front() / 2) << "but the sparse attention does not";
    // Counted as dense MLA (k_a over every causal pair, k_e re-expanding the prefix), the same prefix would allow
    // under a fifth of that.
    const int64_t l_hi = prompt - chunks.back() - chunks[chunks.size() - 2];
    CostCoefficients as_mla = model->stages()[0];
    as_mla.k_a = 78 * 2.0 * 64 * (256 + 256);
    as_mla.k_e = 78 * 2.0 * 512 * 64 * (192 + 256);
    as_mla.k_s = 0;
    as_mla.s_cap = 0;
    const ChunkCostModel mla_model({as_mla});
    EXPECT_LT(mla_model.max_tokens_within(l_hi, mla_model.budget(8192), 8192) * 5, chunks[chunks.size() - 2]);
    std::printf("GLM-5.3: %zu chunks for a %lld-token prompt: first %lld, last full %lld at prefix %lld\n",
                chunks.size(), static_cast<long long>(prompt), static_cast<long long>(chunks[0]),
                static_cast<long long>(chunks[chunks.size() - 2]), static_cast<long long>(l_hi));
}

TEST(CostModel, SchedulerPlansShrinkingChunksWithinBudget) {
    const loader::ModelConfig m = deepseek_v3();
    auto model = ChunkCostModel::from_model(m, {});
    ASSERT_TRUE(model.ok());
    SchedulerConfig c;
    c.enable_dynamic_chunking = true;
    c.chunked_prefill_size = 8192;
    c.max_context_len = m.max_position_embeddings;
    kv_cache::PagePool pool(4096);
    auto s = Scheduler::create(c, &pool, *model);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    const double budget = (*s)->adder().cost_budget();
    EXPECT_DOUBLE_EQ(budget, model->budget(8192));
    ASSERT_TRUE((*s)->add_request({.id = 1,
                                   .prompt = testing::iota_prompt(65536),
                                   .sampling = {.max_new_tokens = 1, .stop_token_ids = {}},
                                   .arrival = TimePoint{},
                                   .deadline = kNoDeadline})
                    .ok());
    std::vector<int64_t> chunks;
    while (true) {
        const BatchPlan plan = (*s)->schedule_step();
        if (plan.empty()) break;
        ASSERT_EQ(plan.entries.size(), 1u);
        EXPECT_LE(plan.predicted_cost, budget * (1 + kRelSlack));
        EXPECT_DOUBLE_EQ(plan.predicted_cost, model->cost(plan.entries[0].prefix_len, plan.entries[0].n_tokens()));
        chunks.push_back(plan.entries[0].n_tokens());
        (*s)->on_step_done({.step_id = plan.step_id, .tokens = {{.request_id = 1, .token_id = 0}}});
    }
    int64_t sum = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
        sum += chunks[i];
        if (i > 0 && i + 1 < chunks.size()) {
            EXPECT_LE(chunks[i], chunks[i - 1]);
        }
    }
    EXPECT_EQ(sum, 65536);
    EXPECT_EQ(chunks.front(), 8192);
    EXPECT_LT(chunks[chunks.size() - 2], 8192 / 2);
    EXPECT_EQ(pool.n_used(), 0);

    c.dynamic_chunking_budget_tokens = 4096;  // the cost-model option: a smaller per-step budget
    EXPECT_DOUBLE_EQ(PrefillAdder(c, *model).cost_budget(), model->budget(4096));
}

// A cost-bound mid-chunk request leaves tokens but little cost: a new prompt that would need splitting must wait
// (one request mid-chunk), while a short one that fits whole joins the step.
TEST(CostModel, CostBoundStepKeepsOneRequestMidChunk) {
    const loader::ModelConfig m = deepseek_v3();
    auto model = ChunkCostModel::from_model(m, {});
    ASSERT_TRUE(model.ok());
    SchedulerConfig c;
    c.enable_dynamic_chunking = true;
    const PrefillAdder adder(c, *model);
    auto mid = testing::mid_chunk_request(9, /*prompt_len=*/150000, /*computed=*/140032);
    auto long_one = testing::waiting_request(1, 10000);
    auto short_one = testing::waiting_request(2, 100);
    const std::vector<const Request*> queue1{long_one.get()}, queue2{short_one.get(), long_one.get()};
    const AdderInput base{.mid_chunk = mid.get(), .n_running = 1, .n_free_pages = 10000, .n_total_pages = 10000};
    AdderInput in = base;
    in.waiting = queue1;
    BatchPlan plan = adder(in);
    ASSERT_EQ(plan.entries.size(), 1u);
    EXPECT_LT(plan.entries[0].n_tokens(), 8192) << "cost-bound at a long prefix";
    EXPECT_EQ(plan.stop, StopReason::kChunkSlotBusy);
    in.waiting = queue2;
    plan = adder(in);
    ASSERT_EQ(plan.entries.size(), 2u);
    EXPECT_EQ(plan.entries[1].request_id, 2);
    EXPECT_EQ(plan.stop, StopReason::kChunkSlotBusy);
    EXPECT_LE(plan.predicted_cost, adder.cost_budget() * (1 + kRelSlack));
}

}  // namespace
}  // namespace penstock::scheduler
