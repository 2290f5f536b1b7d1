// Dynamic chunking cost model: FLOP counting on DeepSeek-V3's real config, max over pipeline stages, the chunk
// search, and the scheduler's shrinking chunks of a long prompt with every chunk's predicted cost within budget.
#include "scheduler/cost_model.h"

#include <gtest/gtest.h>

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

loader::ModelConfig deepseek_v3() {
    const std::string path = std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/deepseek-v3.json";
    auto text = loader::read_text_file(path);
    PENSTOCK_CHECK(text.ok()) << text.status().to_string();
    auto json = loader::parse_json_text(*text, path);
    PENSTOCK_CHECK(json.ok()) << json.status().to_string();
    auto config = loader::parse_model_config(*json);
    PENSTOCK_CHECK(config.ok()) << config.status().to_string();
    return *config;
}

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
                                    {.k_g = 1 + coef(rng), .k_e = coef(rng), .k_a = coef(rng) / 100}});
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

// The acceptance test of SPEC §3: later chunks of a long prompt shrink and each stays within the budget.
TEST(CostModel, LongPromptChunksShrinkWithinBudget) {
    const loader::ModelConfig m = deepseek_v3();
    const std::vector<int64_t> partition{16, 15, 15, 15};
    auto model = ChunkCostModel::from_model(m, partition);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const double budget = model->budget(8192);
    const int64_t prompt = 131072;
    std::vector<int64_t> chunks;
    for (int64_t done = 0; done < prompt;) {
        const int64_t x = model->next_chunk(done, prompt - done, budget);
        ASSERT_GT(x, 0);
        EXPECT_LE(model->cost(done, x), budget * (1 + kRelSlack)) << "chunk at prefix " << done;
        if (done + x < prompt) {
            EXPECT_EQ((done + x) % kv_cache::kPageSize, 0);
            EXPECT_GT(model->cost(done, x + kv_cache::kPageSize), budget) << "the largest page-aligned chunk";
            if (!chunks.empty()) {
                EXPECT_LE(x, chunks.back()) << "chunks shrink monotonically";
            }
        }
        chunks.push_back(x);
        done += x;
    }
    EXPECT_EQ(chunks.front(), 8192);
    EXPECT_LT(chunks[chunks.size() - 2], chunks.front() / 4) << "late chunks are much shorter";
    std::printf("%zu chunks for a %lld-token prompt: first %lld, second %lld, last full %lld\n", chunks.size(),
                static_cast<long long>(prompt), static_cast<long long>(chunks[0]), static_cast<long long>(chunks[1]),
                static_cast<long long>(chunks[chunks.size() - 2]));
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
