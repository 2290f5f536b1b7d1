// Scheduler: request lifecycle, abort/timeout freeing pages, validation, queue cap, ineffective options, and seeded
// random simulations that check the one-mid-chunk, budget and page-accounting invariants after every step.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "test_util.h"

namespace penstock::scheduler {
namespace {

using testing::iota_prompt;

std::unique_ptr<Scheduler> make_scheduler(const SchedulerConfig& c, kv_cache::PagePool* pool) {
    auto s = Scheduler::create(c, pool, std::nullopt);
    PENSTOCK_CHECK(s.ok()) << s.status().to_string();
    return std::move(s).value();
}

NewRequest new_request(int64_t id, int64_t prompt_len, int64_t max_new_tokens = 1, TimePoint deadline = kNoDeadline) {
    return {.id = id,
            .prompt = iota_prompt(prompt_len),
            .sampling = {.max_new_tokens = max_new_tokens, .stop_token_ids = {}},
            .arrival = TimePoint{},
            .deadline = deadline};
}

// Returns one token (`token`) for every kLast entry of `plan`.
StepResult result_for(const BatchPlan& plan, int32_t token = 5) {
    StepResult r{.step_id = plan.step_id, .tokens = {}};
    for (const PlanEntry& e : plan.entries) {
        if (e.logits == ChunkLogits::kLast) r.tokens.push_back({.request_id = e.request_id, .token_id = token});
    }
    return r;
}

TEST(Scheduler, ChunkedPromptThenDecodeThenFinishFreesPages) {
    kv_cache::PagePool pool(100);
    SchedulerConfig c;
    c.chunked_prefill_size = 256;
    auto s = make_scheduler(c, &pool);
    ASSERT_TRUE(s->add_request(new_request(1, /*prompt_len=*/700, /*max_new_tokens=*/3)).ok());
    std::vector<int64_t> chunks;
    for (int step = 0; step < 3; ++step) {
        const BatchPlan plan = s->schedule_step();
        ASSERT_EQ(plan.entries.size(), 1u);
        const PlanEntry& e = plan.entries[0];
        chunks.push_back(e.n_tokens());
        EXPECT_EQ(e.prefix_len, 256 * step);
        EXPECT_EQ(e.logits, step < 2 ? ChunkLogits::kNone : ChunkLogits::kLast);
        EXPECT_EQ(e.admitted, step == 0);
        EXPECT_EQ(e.pages.size(), static_cast<size_t>(kv_cache::pages_for_tokens(e.prefix_len + e.n_tokens())));
        EXPECT_EQ(pool.n_used(), kv_cache::pages_for_tokens(703)) << "whole KV reserved at admission";
        EXPECT_EQ(s->n_mid_chunk(), step < 2 ? 1 : 0);
        s->on_step_done(result_for(plan, /*token=*/40 + step));
        ASSERT_TRUE(s->check_invariants().ok()) << s->check_invariants().to_string();
    }
    EXPECT_EQ(chunks, (std::vector<int64_t>{256, 256, 188}));
    EXPECT_EQ(s->find(1)->state(), RequestState::kDecoding);
    for (int step = 0; step < 2; ++step) {
        const BatchPlan plan = s->schedule_step();
        ASSERT_EQ(plan.entries.size(), 1u);
        EXPECT_EQ(plan.entries[0].kind, EntryKind::kDecode);
        EXPECT_EQ(plan.entries[0].prefix_len, 700 + step);
        EXPECT_TRUE(s->schedule_step().empty()) << "a decode in flight is not planned twice";
        s->on_step_done(result_for(plan, /*token=*/50 + step));
    }
    EXPECT_EQ(s->find(1), nullptr);
    auto done = s->take_finished();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0]->finish_reason(), FinishReason::kLength);
    EXPECT_EQ(done[0]->generated(), (std::vector<int32_t>{42, 50, 51}));
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_TRUE(s->check_invariants().ok());
}

TEST(Scheduler, MidChunkRequestIsPipelinedBeforeResultsReturn) {
    kv_cache::PagePool pool(100);
    SchedulerConfig c;
    c.chunked_prefill_size = 128;
    auto s = make_scheduler(c, &pool);
    ASSERT_TRUE(s->add_request(new_request(1, 300)).ok());
    const BatchPlan a = s->schedule_step(), b = s->schedule_step(), d = s->schedule_step();
    EXPECT_EQ(a.entries[0].prefix_len, 0);
    EXPECT_EQ(b.entries[0].prefix_len, 128);
    EXPECT_EQ(d.entries[0].prefix_len, 256);
    EXPECT_EQ(d.entries[0].logits, ChunkLogits::kLast);
    EXPECT_TRUE(s->schedule_step().empty());
    EXPECT_EQ(s->n_steps_in_flight(), 3);
    s->on_step_done(result_for(a));
    s->on_step_done(result_for(b));
    s->on_step_done(result_for(d));
    EXPECT_EQ(s->take_finished().size(), 1u);
    EXPECT_EQ(pool.n_used(), 0);
}

TEST(Scheduler, StopTokenFinishesEarly) {
    kv_cache::PagePool pool(10);
    auto s = make_scheduler(SchedulerConfig{}, &pool);
    NewRequest r = new_request(3, 10, /*max_new_tokens=*/100);
    r.sampling.stop_token_ids = {2};
    ASSERT_TRUE(s->add_request(std::move(r)).ok());
    s->on_step_done(result_for(s->schedule_step(), /*token=*/1));
    s->on_step_done(result_for(s->schedule_step(), /*token=*/2));
    auto done = s->take_finished();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0]->finish_reason(), FinishReason::kStop);
    EXPECT_EQ(done[0]->generated(), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(pool.n_used(), 0);
}

TEST(Scheduler, AbortFreesPagesFromEveryState) {
    kv_cache::PagePool pool(100);
    SchedulerConfig c;
    c.chunked_prefill_size = 128;
    auto s = make_scheduler(c, &pool);
    ASSERT_TRUE(s->add_request(new_request(2, 10, /*max_new=*/5)).ok());  // decoding
    ASSERT_TRUE(s->add_request(new_request(1, 1000)).ok());               // mid-chunk, step in flight
    ASSERT_TRUE(s->add_request(new_request(3, 64 * 90)).ok());            // waiting: not enough pages for it
    const BatchPlan first = s->schedule_step();
    ASSERT_EQ(first.entries.size(), 2u);
    EXPECT_EQ(first.entries[1].n_tokens(), 64) << "118 tokens left after request 2: cut at 64";
    s->on_step_done(result_for(first));
    const BatchPlan second = s->schedule_step();  // request 2 decodes, request 1 continues
    ASSERT_EQ(second.entries.size(), 2u);
    EXPECT_EQ(s->find(1)->state(), RequestState::kPrefilling);
    EXPECT_EQ(s->find(2)->state(), RequestState::kDecoding);
    EXPECT_EQ(s->find(3)->state(), RequestState::kWaiting);
    EXPECT_EQ(pool.n_used(), kv_cache::pages_for_tokens(1001) + kv_cache::pages_for_tokens(15));

    ASSERT_TRUE(s->abort(3).ok());
    EXPECT_EQ(pool.n_used(), kv_cache::pages_for_tokens(1001) + kv_cache::pages_for_tokens(15));
    ASSERT_TRUE(s->abort(1).ok()) << "aborted while its chunk is in flight";
    EXPECT_EQ(pool.n_used(), kv_cache::pages_for_tokens(15)) << "pages freed at once";
    s->on_step_done(result_for(second));  // the stale entry of request 1 is ignored
    EXPECT_EQ(s->find(2)->state(), RequestState::kDecoding);
    ASSERT_TRUE(s->abort(2).ok());
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_EQ(s->abort(2).code(), StatusCode::kNotFound);
    for (const auto& r : s->take_finished()) {
        EXPECT_EQ(r->state(), RequestState::kAborted);
        EXPECT_EQ(r->finish_reason(), FinishReason::kAbort);
    }
    EXPECT_TRUE(s->check_invariants().ok());
}

TEST(Scheduler, ReusedIdAfterAbortIgnoresTheStaleStep) {
    kv_cache::PagePool pool(100);
    auto s = make_scheduler(SchedulerConfig{}, &pool);
    ASSERT_TRUE(s->add_request(new_request(1, 100, 2)).ok());
    const BatchPlan stale = s->schedule_step();
    ASSERT_TRUE(s->abort(1).ok());
    ASSERT_TRUE(s->add_request(new_request(1, 50, 2)).ok());
    s->on_step_done(result_for(stale));
    EXPECT_EQ(s->find(1)->state(), RequestState::kWaiting);
    EXPECT_EQ(s->find(1)->n_generated(), 0);
    const BatchPlan fresh = s->schedule_step();
    EXPECT_EQ(fresh.entries[0].n_tokens(), 50);
    s->on_step_done(result_for(fresh));
    EXPECT_EQ(s->find(1)->n_generated(), 1);
}

TEST(Scheduler, LongestPrefixPolicyAdmitsTheLongestMatchFirst) {
    for (Policy policy : {Policy::kFcfs, Policy::kLongestPrefix}) {
        kv_cache::PagePool pool(100);
        SchedulerConfig c;
        c.policy = policy;
        c.max_running_requests = 1;
        auto s = make_scheduler(c, &pool);
        for (int64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s->add_request(new_request(id, 200)).ok());
        ASSERT_TRUE(s->set_matched_prefix_len(2, 64).ok());
        ASSERT_TRUE(s->set_matched_prefix_len(3, 128).ok());
        std::vector<int64_t> order;
        while (s->n_waiting() + s->n_running() > 0) {
            const BatchPlan plan = s->schedule_step();
            ASSERT_EQ(plan.entries.size(), 1u);
            order.push_back(plan.entries[0].request_id);
            s->on_step_done(result_for(plan));
        }
        EXPECT_EQ(order, policy == Policy::kFcfs ? (std::vector<int64_t>{1, 2, 3}) : (std::vector<int64_t>{3, 2, 1}))
            << policy_name(policy);
    }
    kv_cache::PagePool pool(100);
    auto s = make_scheduler(SchedulerConfig{}, &pool);
    ASSERT_TRUE(s->add_request(new_request(1, 200)).ok());
    EXPECT_EQ(s->set_matched_prefix_len(1, 201).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s->set_matched_prefix_len(2, 0).code(), StatusCode::kNotFound);
    s->schedule_step();
    EXPECT_EQ(s->set_matched_prefix_len(1, 0).code(), StatusCode::kFailedPrecondition);
}

TEST(Scheduler, ExpiredDeadlinesAbortWithTimeoutAndFreePages) {
    kv_cache::PagePool pool(100);
    SchedulerConfig c;
    c.chunked_prefill_size = 64;
    auto s = make_scheduler(c, &pool);
    const TimePoint t0{};
    using std::chrono::seconds;
    ASSERT_TRUE(s->add_request(new_request(1, 500, 1, t0 + seconds(5))).ok());
    ASSERT_TRUE(s->add_request(new_request(2, 10, 1, t0 + seconds(10))).ok());
    ASSERT_TRUE(s->add_request(new_request(3, 10, 1)).ok());
    s->on_step_done(result_for(s->schedule_step()));
    EXPECT_GT(pool.n_used(), 0);
    EXPECT_TRUE(s->expire_deadlines(t0 + seconds(4)).empty());
    EXPECT_EQ(s->expire_deadlines(t0 + seconds(5)), (std::vector<int64_t>{1}));
    EXPECT_EQ(pool.n_used(), 0) << "the mid-chunk request's pages are freed";
    EXPECT_EQ(s->expire_deadlines(t0 + seconds(60)), (std::vector<int64_t>{2})) << "request 3 has no deadline";
    for (const auto& r : s->take_finished()) EXPECT_EQ(r->finish_reason(), FinishReason::kTimeout);
    EXPECT_NE(s->find(3), nullptr);
}

TEST(Scheduler, AddRequestValidation) {
    kv_cache::PagePool pool(10);
    SchedulerConfig c;
    c.max_context_len = 600;
    auto s = make_scheduler(c, &pool);
    EXPECT_EQ(s->add_request(new_request(1, 0)).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s->add_request(new_request(1, 10, 0)).code(), StatusCode::kInvalidArgument);
    const Status ctx = s->add_request(new_request(1, 590, 11));
    EXPECT_EQ(ctx.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ctx.message().find("max context"), std::string::npos) << ctx.to_string();
    ASSERT_TRUE(s->add_request(new_request(1, 590, 10)).ok());
    EXPECT_EQ(s->add_request(new_request(1, 5)).code(), StatusCode::kInvalidArgument) << "duplicate id";
    EXPECT_EQ(s->n_waiting(), 1);
}

TEST(Scheduler, OversizeRequestIsRejectedAtOnce) {
    kv_cache::PagePool pool(10);  // 640 tokens
    auto s = make_scheduler(SchedulerConfig{}, &pool);
    const Status st = s->add_request(new_request(1, 640, 1));
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
    EXPECT_NE(st.message().find("can never be admitted"), std::string::npos) << st.to_string();
    EXPECT_EQ(s->n_waiting(), 0);
    EXPECT_TRUE(s->add_request(new_request(2, 639, 1)).ok()) << "exactly the pool fits";
}

TEST(Scheduler, NotEnoughPagesWaitsThenRuns) {
    kv_cache::PagePool pool(4);
    auto s = make_scheduler(SchedulerConfig{}, &pool);
    ASSERT_TRUE(s->add_request(new_request(1, 150, 2)).ok());  // 3 pages
    ASSERT_TRUE(s->add_request(new_request(2, 100, 1)).ok());  // 2 pages
    BatchPlan p = s->schedule_step();
    EXPECT_EQ(p.entries.size(), 1u);
    EXPECT_EQ(p.stop, StopReason::kNoPages);
    s->on_step_done(result_for(p));
    p = s->schedule_step();  // request 1 decodes; 2 still waits
    EXPECT_EQ(s->find(2)->state(), RequestState::kWaiting);
    s->on_step_done(result_for(p));
    p = s->schedule_step();
    ASSERT_EQ(p.entries.size(), 1u);
    EXPECT_EQ(p.entries[0].request_id, 2);
    s->on_step_done(result_for(p));
    EXPECT_EQ(pool.n_used(), 0);
}

TEST(Scheduler, QueueCapAnswersResourceExhausted) {
    kv_cache::PagePool pool(100);
    SchedulerConfig c;
    c.max_queue_size = 2;
    auto s = make_scheduler(c, &pool);
    ASSERT_TRUE(s->add_request(new_request(1, 10)).ok());
    ASSERT_TRUE(s->add_request(new_request(2, 10)).ok());
    const Status full = s->add_request(new_request(3, 10));
    EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(full.message().find("max_queue_size"), std::string::npos);
    s->on_step_done(result_for(s->schedule_step()));  // both admitted and finished: the queue drains
    EXPECT_TRUE(s->add_request(new_request(3, 10)).ok());
}

// Disaggregation, decode end: a prefilled request takes its pages at once, is never planned until its KV arrives, then
// decodes; a transfer that never comes ends at the deadline (RELIABILITY T11), its pages held until the caller knows
// the transfer is over.
TEST(Scheduler, PrefilledRequestWaitsForItsKvThenDecodes) {
    kv_cache::PagePool pool(20);
    SchedulerConfig c;
    c.max_running_requests = 2;
    auto s = make_scheduler(c, &pool);
    ASSERT_TRUE(s->add_prefilled_request(new_request(1, 130, /*max_new_tokens=*/3)).ok());
    EXPECT_TRUE(s->awaiting_kv(1));
    EXPECT_EQ(s->page_table(1).pages.size(), 3u) << "130 + 3 tokens";
    EXPECT_EQ(pool.n_used(), 3);
    EXPECT_TRUE(s->schedule_step().empty()) << "nothing to plan while the KV is on its way";
    EXPECT_TRUE(s->check_invariants().ok());
    EXPECT_EQ(s->add_prefilled_request(new_request(1, 10)).code(), StatusCode::kInvalidArgument) << "id in use";
    EXPECT_EQ(s->add_prefilled_request(new_request(2, 64 * 18)).code(), StatusCode::kResourceExhausted)
        << "17 free pages now";
    EXPECT_EQ(s->complete_transfer(9, 1).status().code(), StatusCode::kNotFound);
    auto done = s->complete_transfer(1, 77);
    ASSERT_TRUE(done.ok());
    EXPECT_FALSE(*done);
    EXPECT_EQ(s->complete_transfer(1, 77).status().code(), StatusCode::kFailedPrecondition) << "only once";
    EXPECT_EQ(s->find(1)->generated(), std::vector<int32_t>{77});
    EXPECT_EQ(s->find(1)->prefix_len(), 130);
    for (int step = 0; step < 2; ++step) {
        const BatchPlan plan = s->schedule_step();
        ASSERT_EQ(plan.entries.size(), 1u);
        EXPECT_EQ(plan.entries[0].kind, EntryKind::kDecode);
        EXPECT_EQ(plan.entries[0].prefix_len, 130 + step);
        s->on_step_done(result_for(plan));
    }
    EXPECT_EQ(s->find(1), nullptr) << "3 tokens: 77 from prefill and two decoded";
    EXPECT_EQ(pool.n_used(), 0);
    // max_new_tokens 1: the first token finishes it.
    ASSERT_TRUE(s->add_prefilled_request(new_request(3, 10)).ok());
    auto one = s->complete_transfer(3, 5);
    ASSERT_TRUE(one.ok());
    EXPECT_TRUE(*one);
    EXPECT_EQ(pool.n_used(), 0);
    // The prefill end never delivers: the deadline aborts it and frees its pages.
    ASSERT_TRUE(s->add_prefilled_request(new_request(4, 100, 4, TimePoint{} + std::chrono::seconds(5))).ok());
    ASSERT_TRUE(s->add_prefilled_request(new_request(5, 100, 4)).ok());
    EXPECT_EQ(s->add_prefilled_request(new_request(6, 10)).code(), StatusCode::kResourceExhausted) << "running cap";
    EXPECT_EQ(s->expire_deadlines(TimePoint{} + std::chrono::seconds(6)), std::vector<int64_t>{4});
    EXPECT_FALSE(s->awaiting_kv(4));
    ASSERT_TRUE(s->abort(5).ok());
    // Their KV may still be on the way: the pages stay held (not reused) until the transfer is over.
    EXPECT_EQ(s->n_held_requests(), 2);
    EXPECT_EQ(pool.n_used(), 4);
    EXPECT_TRUE(s->check_invariants().ok());
    ASSERT_TRUE(s->release_held(4).ok());
    ASSERT_TRUE(s->release_held(5).ok());
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_TRUE(s->check_invariants().ok());
}

// Disaggregation, prefill end: a finished request's pages stay held for the transfer (and count in the page
// invariant) until released; an aborted one frees them at once.
TEST(Scheduler, FinishedRequestHoldsItsPagesForTheTransfer) {
    kv_cache::PagePool pool(20);
    auto s = make_scheduler(SchedulerConfig{}, &pool);
    NewRequest r = new_request(1, 200);
    r.hold_kv_on_finish = true;
    ASSERT_TRUE(s->add_request(std::move(r)).ok());
    NewRequest q = new_request(2, 100);
    q.hold_kv_on_finish = true;
    ASSERT_TRUE(s->add_request(std::move(q)).ok());
    const BatchPlan plan = s->schedule_step();
    ASSERT_EQ(plan.entries.size(), 2u);
    const std::vector<int32_t> pages = plan.entries[0].pages;
    ASSERT_TRUE(s->abort(2).ok());
    s->on_step_done(result_for(plan, 9));
    EXPECT_EQ(s->find(1), nullptr);
    EXPECT_EQ(s->n_held_requests(), 1) << "the aborted request holds nothing";
    auto held = s->held_pages(1);
    ASSERT_TRUE(held.ok());
    EXPECT_EQ(*held, pages) << "the pages its prompt was written to";
    EXPECT_EQ(pool.n_used(), 4);
    EXPECT_TRUE(s->check_invariants().ok());
    EXPECT_EQ(s->add_request(new_request(1, 10)).code(), StatusCode::kInvalidArgument) << "its id is still in use";
    ASSERT_TRUE(s->release_held(1).ok());
    EXPECT_EQ(s->release_held(1).code(), StatusCode::kNotFound);
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_TRUE(s->check_invariants().ok());
}

TEST(SchedulerConfig, ValidationNamesTheField) {
    SchedulerConfig c;
    EXPECT_TRUE(validate(c).ok());
    c.chunked_prefill_size = 63;
    EXPECT_NE(validate(c).message().find("chunked_prefill_size"), std::string::npos);
    c.chunked_prefill_size = -1;
    EXPECT_TRUE(validate(c).ok()) << "-1 disables chunking";
    c.max_running_requests = 0;
    EXPECT_NE(validate(c).message().find("max_running_requests"), std::string::npos);
    c = SchedulerConfig{};
    c.watermark = 1.0;
    EXPECT_NE(validate(c).message().find("watermark"), std::string::npos);
    c = SchedulerConfig{};
    c.pp_max_micro_batch_size = 0;
    EXPECT_FALSE(validate(c).ok());
    kv_cache::PagePool pool(1);
    c = SchedulerConfig{};
    c.enable_dynamic_chunking = true;
    EXPECT_EQ(Scheduler::create(c, &pool, std::nullopt).status().code(), StatusCode::kInvalidArgument)
        << "dynamic chunking needs a cost model";
}

TEST(SchedulerConfig, IneffectiveOptionsAreReported) {
    SchedulerConfig c;
    EXPECT_TRUE(describe_ineffective_options(c).empty()) << "defaults report nothing";
    auto has = [](const std::vector<std::string>& v, const std::string& what) {
        return std::any_of(v.begin(), v.end(), [&](const std::string& m) { return m.find(what) != m.npos; });
    };
    c.pp_max_micro_batch_size = 4;
    EXPECT_TRUE(has(describe_ineffective_options(c), "pp_max_micro_batch_size = 4 has no effect with pp_size 1"));
    c.pp_size = 2;
    EXPECT_TRUE(describe_ineffective_options(c).empty());
    c.pp_max_micro_batch_size = 256;
    EXPECT_TRUE(has(describe_ineffective_options(c), "not below max_running_requests"));
    c = SchedulerConfig{};
    c.dynamic_chunking_budget_tokens = 4096;
    EXPECT_TRUE(has(describe_ineffective_options(c), "without enable_dynamic_chunking"));
    c.enable_dynamic_chunking = true;
    EXPECT_TRUE(describe_ineffective_options(c).empty());
    c.chunked_prefill_size = -1;
    EXPECT_TRUE(has(describe_ineffective_options(c), "chunked prefill is disabled"));
    c = SchedulerConfig{};
    c.max_prefill_tokens = 4096;
    EXPECT_TRUE(has(describe_ineffective_options(c), "chunks are limited to 4096"));
    c = SchedulerConfig{};
    c.policy = Policy::kLongestPrefix;
    EXPECT_TRUE(has(describe_ineffective_options(c), "policy lpm orders the queue like fcfs"));
}

}  // namespace
}  // namespace penstock::scheduler
