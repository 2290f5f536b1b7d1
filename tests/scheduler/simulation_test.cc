// Seeded random simulations of a Scheduler driving a fake pipeline: random arrivals, prompt lengths, aborts and
// deadlines, with several steps in flight. After every step: at most one request mid-chunk, no plan over its
// budgets, non-final chunks page-aligned, chunk tokens equal to the prompt slice, page accounting consistent. At the
// end every request has finished or been aborted and the pool is back to its baseline (0 pages used).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "scheduler/scheduler.h"
#include "test_util.h"

namespace penstock::scheduler {
namespace {

struct SimCase {
    std::string name;
    SchedulerConfig config;
    int64_t n_pages = 0;
    int64_t pipeline_depth = 1;  // steps in flight before the oldest completes
    std::optional<ChunkCostModel> cost_model = std::nullopt;
};

struct SimStats {
    int64_t steps = 0, finished = 0, aborted = 0, timed_out = 0, rejected_at_add = 0, queue_full = 0;
    int64_t chunked = 0;  // non-final prefill chunks planned
};

// Checks one plan against the scheduler's rules; returns the number of non-final chunks.
int64_t check_plan(const Scheduler& s, const BatchPlan& plan, const std::map<int64_t, std::vector<int32_t>>& prompts) {
    const SchedulerConfig& c = s.config();
    int64_t non_final = 0;
    EXPECT_LE(plan.n_tokens(), step_token_budget(c)) << "step " << plan.step_id;
    EXPECT_LE(static_cast<int64_t>(plan.entries.size()), micro_batch_cap(c));
    int64_t prefill = 0, decode = 0;
    for (const PlanEntry& e : plan.entries) {
        EXPECT_GT(e.n_tokens(), 0);
        EXPECT_EQ(static_cast<int64_t>(e.pages.size()), kv_cache::pages_for_tokens(e.prefix_len + e.n_tokens()));
        const std::vector<int32_t>& prompt = prompts.at(e.request_id);
        if (e.kind == EntryKind::kDecode) {
            decode += 1;
            EXPECT_EQ(e.n_tokens(), 1);
            EXPECT_GE(e.prefix_len, static_cast<int64_t>(prompt.size()));
            continue;
        }
        prefill += e.n_tokens();
        const bool final_chunk = e.prefix_len + e.n_tokens() == static_cast<int64_t>(prompt.size());
        EXPECT_EQ(e.logits, final_chunk ? ChunkLogits::kLast : ChunkLogits::kNone);
        if (!final_chunk) {
            ++non_final;
            EXPECT_EQ((e.prefix_len + e.n_tokens()) % kv_cache::kPageSize, 0) << "non-final chunk end not page-aligned";
        }
        EXPECT_TRUE(std::equal(e.token_ids.begin(), e.token_ids.end(), prompt.begin() + e.prefix_len));
    }
    EXPECT_EQ(prefill, plan.n_prefill_tokens);
    EXPECT_EQ(decode, plan.n_decode_tokens);
    EXPECT_LE(non_final, 1) << "more than one chunk left mid-prompt in one plan";
    if (s.adder().dynamic_chunking() && plan.predicted_cost > s.adder().cost_budget() * (1 + 1e-12)) {
        // Only the progress guarantee may exceed the cost budget: a single prefill entry of at most one page.
        int64_t n_prefill_entries = 0;
        for (const PlanEntry& e : plan.entries) n_prefill_entries += e.kind == EntryKind::kPrefill;
        EXPECT_EQ(n_prefill_entries, 1) << "plan over the cost budget";
        EXPECT_LE(plan.n_prefill_tokens, kv_cache::kPageSize) << "plan over the cost budget";
    }
    EXPECT_LE(s.n_mid_chunk(), 1);
    const Status inv = s.check_invariants();
    EXPECT_TRUE(inv.ok()) << inv.to_string();
    return non_final;
}

SimStats simulate(const SimCase& sc, uint64_t seed, int64_t n_steps) {
    SCOPED_TRACE(sc.name + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
    kv_cache::PagePool pool(sc.n_pages);
    auto created = Scheduler::create(sc.config, &pool, sc.cost_model);
    PENSTOCK_CHECK(created.ok()) << created.status().to_string();
    Scheduler& s = **created;
    std::map<int64_t, std::vector<int32_t>> prompts;
    std::vector<int64_t> live_ids;
    std::deque<BatchPlan> pipeline;
    SimStats st;
    int64_t next_id = 0;
    const TimePoint t0{};
    auto complete_oldest = [&] {
        StepResult r{.step_id = pipeline.front().step_id, .tokens = {}};
        for (const PlanEntry& e : pipeline.front().entries) {
            if (e.logits == ChunkLogits::kLast) {
                r.tokens.push_back({.request_id = e.request_id, .token_id = static_cast<int32_t>(uniform(0, 40))});
            }
        }
        pipeline.pop_front();
        s.on_step_done(r);
    };
    auto collect = [&] {
        for (const auto& r : s.take_finished()) {
            std::erase(live_ids, r->id());
            switch (r->finish_reason()) {
                case FinishReason::kLength:
                case FinishReason::kStop:
                    ++st.finished;
                    EXPECT_EQ(r->prefix_len(), r->prompt_len() + r->n_generated() - 1);
                    break;
                case FinishReason::kAbort:
                    ++st.aborted;
                    break;
                case FinishReason::kTimeout:
                    ++st.timed_out;
                    break;
                case FinishReason::kRejected:
                case FinishReason::kNone:
                    ADD_FAILURE() << "unexpected finish reason " << finish_reason_name(r->finish_reason());
                    break;
            }
        }
    };
    for (int64_t step = 0;; ++step) {
        const bool arrivals_open = step < n_steps;
        if (!arrivals_open && live_ids.empty() && pipeline.empty()) break;
        PENSTOCK_CHECK_LT(step, n_steps * 50) << "simulation does not drain";
        const TimePoint now = t0 + std::chrono::milliseconds(step);
        for (int64_t k = arrivals_open ? uniform(0, 2) : 0; k > 0; --k) {
            const int64_t bucket = uniform(0, 99);
            const int64_t len = bucket < 70 ? uniform(1, 300) : bucket < 95 ? uniform(300, 3000) : uniform(3000, 9000);
            const int64_t id = next_id++;
            NewRequest nr{.id = id,
                          .prompt = testing::iota_prompt(len, static_cast<int32_t>(id * 7)),
                          .sampling = {.max_new_tokens = uniform(1, 8), .stop_token_ids = {3}},
                          .arrival = now,
                          .deadline = chance(0.2) ? now + std::chrono::milliseconds(uniform(1, 300)) : kNoDeadline};
            prompts[id] = nr.prompt;
            const Status added = s.add_request(std::move(nr));
            if (added.ok()) {
                live_ids.push_back(id);
                if (sc.config.policy == Policy::kLongestPrefix && chance(0.3)) {
                    EXPECT_TRUE(s.set_matched_prefix_len(id, uniform(0, len)).ok());
                }
            } else if (added.code() == StatusCode::kOutOfRange) {
                ++st.rejected_at_add;
            } else {
                EXPECT_EQ(added.code(), StatusCode::kResourceExhausted) << added.to_string();
                ++st.queue_full;
            }
        }
        if (!live_ids.empty() && chance(0.03)) {
            EXPECT_TRUE(s.abort(live_ids[static_cast<size_t>(uniform(0, std::ssize(live_ids) - 1))]).ok());
        }
        s.expire_deadlines(now);
        collect();
        BatchPlan plan = s.schedule_step();
        st.chunked += check_plan(s, plan, prompts);
        if (!plan.empty()) pipeline.push_back(std::move(plan));
        const int64_t depth = std::max<int64_t>(1, uniform(1, sc.pipeline_depth));
        while (!pipeline.empty() && (std::ssize(pipeline) >= depth || plan.empty())) complete_oldest();
        collect();
        EXPECT_TRUE(s.check_invariants().ok());
        st.steps = step;
    }
    EXPECT_EQ(pool.n_used(), 0) << "page accounting back to baseline";
    EXPECT_EQ(s.pages_owned(), 0);
    EXPECT_EQ(s.n_running() + s.n_waiting(), 0);
    EXPECT_EQ(st.finished + st.aborted + st.timed_out, next_id - st.rejected_at_add - st.queue_full);
    return st;
}

std::vector<SimCase> sim_cases() {
    std::vector<SimCase> cases;
    SchedulerConfig a;
    a.chunked_prefill_size = 256;
    a.max_prefill_tokens = 512;
    a.max_running_requests = 8;
    a.max_queue_size = 16;
    cases.push_back({.name = "small_chunks_pp1", .config = a, .n_pages = 200, .pipeline_depth = 1});
    SchedulerConfig b;
    b.chunked_prefill_size = 200;
    b.max_running_requests = 16;
    b.pp_size = 4;
    b.pp_max_micro_batch_size = 3;
    b.policy = Policy::kLongestPrefix;
    b.watermark = 0.05;
    cases.push_back({.name = "pp4_micro3_lpm", .config = b, .n_pages = 120, .pipeline_depth = 4});
    SchedulerConfig d;
    d.chunked_prefill_size = 4096;
    d.max_prefill_tokens = 1000;
    d.max_running_requests = 64;
    cases.push_back({.name = "tight_pool", .config = d, .n_pages = 150, .pipeline_depth = 2});
    SchedulerConfig e;
    e.chunked_prefill_size = 512;
    e.max_running_requests = 32;
    e.enable_dynamic_chunking = true;
    cases.push_back(
        {.name = "dynamic_chunking",
         .config = e,
         .n_pages = 400,
         .pipeline_depth = 3,
         .cost_model = ChunkCostModel({{.k_g = 1, .k_e = 0.01, .k_a = 0.001}, {.k_g = 2, .k_e = 0, .k_a = 0.0002}})});
    return cases;
}

TEST(SchedulerSimulation, InvariantsHoldUnderRandomTraffic) {
    for (const SimCase& sc : sim_cases()) {
        SimStats total;
        for (uint64_t seed = 1; seed <= 12; ++seed) {
            const SimStats st = simulate(sc, seed, /*n_steps=*/400);
            total.finished += st.finished;
            total.aborted += st.aborted;
            total.timed_out += st.timed_out;
            total.chunked += st.chunked;
            total.rejected_at_add += st.rejected_at_add;
            total.queue_full += st.queue_full;
            if (::testing::Test::HasFailure()) return;
        }
        // Each case must exercise what it claims to: chunking, aborts, timeouts and finishes all happen.
        EXPECT_GT(total.finished, 100) << sc.name;
        EXPECT_GT(total.aborted, 0) << sc.name;
        EXPECT_GT(total.timed_out, 0) << sc.name;
        EXPECT_GT(total.chunked, 10) << sc.name;
        std::printf("%s: finished %lld aborted %lld timed out %lld chunks %lld rejected %lld queue-full %lld\n",
                    sc.name.c_str(), static_cast<long long>(total.finished), static_cast<long long>(total.aborted),
                    static_cast<long long>(total.timed_out), static_cast<long long>(total.chunked),
                    static_cast<long long>(total.rejected_at_add), static_cast<long long>(total.queue_full));
    }
}

}  // namespace
}  // namespace penstock::scheduler
