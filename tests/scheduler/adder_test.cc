// PrefillAdder and policies as pure function objects: every budget, the page-aligned cut, one-mid-chunk, decodes.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "scheduler/policy.h"
#include "scheduler/prefill_adder.h"
#include "test_util.h"

namespace penstock::scheduler {
namespace {

using testing::decoding_request;
using testing::mid_chunk_request;
using testing::ptrs;
using testing::waiting_request;

SchedulerConfig config_with(int64_t chunk, int64_t max_prefill = 16384) {
    SchedulerConfig c;
    c.chunked_prefill_size = chunk;
    c.max_prefill_tokens = max_prefill;
    return c;
}

// Runs `config`'s adder over waiting requests only, with `free_pages` of `total_pages` free.
BatchPlan plan_for(const SchedulerConfig& config, const std::vector<std::unique_ptr<Request>>& waiting,
                   int64_t free_pages = 1000, int64_t total_pages = 1000) {
    const std::vector<const Request*> w = ptrs(waiting);
    return PrefillAdder(
        config, std::nullopt)({.waiting = w, .n_running = 0, .n_free_pages = free_pages, .n_total_pages = total_pages});
}

std::vector<int64_t> chunk_lengths(const BatchPlan& plan) {
    std::vector<int64_t> out;
    for (const PlanEntry& e : plan.entries) out.push_back(e.n_tokens());
    return out;
}

TEST(PageAlignedCut, BudgetsAroundOnePage) {
    EXPECT_EQ(page_aligned_cut(/*start=*/0, /*remaining=*/100, /*limit=*/63), 0) << "< one page: not split";
    EXPECT_EQ(page_aligned_cut(0, 100, 64), 64);
    EXPECT_EQ(page_aligned_cut(0, 100, 65), 64);
    EXPECT_EQ(page_aligned_cut(0, 63, 63), 63) << "a remainder that fits is taken whole";
    EXPECT_EQ(page_aligned_cut(0, 65, 64), 64);
    EXPECT_EQ(page_aligned_cut(0, 300, 255), 192);
    EXPECT_EQ(page_aligned_cut(128, 1000, 65), 64) << "the end (192) is a page multiple";
    EXPECT_EQ(page_aligned_cut(10, 1000, 130), 118) << "an unaligned start is realigned at the end";
    EXPECT_EQ(page_aligned_cut(0, 100, 0), 0);
}

TEST(PrefillAdder, TokenBudgetIsSharedByTheStep) {
    std::vector<std::unique_ptr<Request>> w;
    for (int64_t i = 0; i < 3; ++i) w.push_back(waiting_request(i, 100));
    const BatchPlan plan = plan_for(config_with(/*chunk=*/256), w);
    EXPECT_EQ(chunk_lengths(plan), (std::vector<int64_t>{100, 100})) << "56 tokens left: the third is not split";
    EXPECT_EQ(plan.stop, StopReason::kTokenBudget);
    EXPECT_EQ(plan.n_prefill_tokens, 200);
    EXPECT_EQ(plan.n_admitted, 2);
}

TEST(PrefillAdder, MaxPrefillTokensBindsBelowTheChunkSize) {
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 1000));
    const BatchPlan plan = plan_for(config_with(/*chunk=*/8192, /*max_prefill=*/200), w);
    EXPECT_EQ(chunk_lengths(plan), (std::vector<int64_t>{192}));
    EXPECT_EQ(plan.entries[0].logits, ChunkLogits::kNone) << "a mid-chunk chunk produces no logits";
}

// The second request sees a budget of 63, 64 or 65 tokens after the first took 65, 64 or 63.
TEST(PrefillAdder, PageAlignedCutWithBudgetsOf63_64_65) {
    for (const auto& [first_len, expect] : {std::pair<int64_t, int64_t>{65, 0}, {64, 64}, {63, 64}}) {
        std::vector<std::unique_ptr<Request>> w;
        w.push_back(waiting_request(0, first_len));
        w.push_back(waiting_request(1, 1000));
        const BatchPlan plan = plan_for(config_with(/*chunk=*/128), w);
        SCOPED_TRACE(first_len);
        if (expect == 0) {
            ASSERT_EQ(plan.entries.size(), 1u);
            EXPECT_EQ(plan.stop, StopReason::kTokenBudget);
        } else {
            ASSERT_EQ(plan.entries.size(), 2u);
            EXPECT_EQ(plan.entries[1].n_tokens(), expect);
            EXPECT_EQ((plan.entries[1].prefix_len + plan.entries[1].n_tokens()) % 64, 0);
            EXPECT_EQ(plan.entries[1].logits, ChunkLogits::kNone);
        }
    }
}

TEST(PrefillAdder, ChunkCarriesTokensPrefixAndLogitsMode) {
    auto m = mid_chunk_request(7, /*prompt_len=*/300, /*computed=*/256);
    const PrefillAdder adder(config_with(256), std::nullopt);
    const BatchPlan plan = adder({.mid_chunk = m.get(), .n_running = 1, .n_free_pages = 10, .n_total_pages = 10});
    ASSERT_EQ(plan.entries.size(), 1u);
    const PlanEntry& e = plan.entries[0];
    EXPECT_EQ(e.request_id, 7);
    EXPECT_EQ(e.kind, EntryKind::kPrefill);
    EXPECT_EQ(e.prefix_len, 256);
    EXPECT_EQ(e.prompt_len, 300);
    ASSERT_EQ(e.n_tokens(), 44);
    EXPECT_EQ(e.token_ids.front(), 256);
    EXPECT_EQ(e.token_ids.back(), 299);
    EXPECT_EQ(e.logits, ChunkLogits::kLast) << "the final chunk is sampled";
    EXPECT_FALSE(e.admitted);
    EXPECT_EQ(plan.n_pages_reserved, 0) << "a continuing request already holds its pages";
}

TEST(PrefillAdder, PageBudgetReservesWholeKvAllOrNothing) {
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, /*prompt_len=*/100, /*max_new_tokens=*/100));  // 200 tokens: 4 pages
    w.push_back(waiting_request(1, /*prompt_len=*/10));                           // 1 page
    BatchPlan plan = plan_for(config_with(8192), w, /*free_pages=*/3, /*total_pages=*/100);
    EXPECT_TRUE(plan.empty()) << "the head does not fit, and FCFS does not skip it";
    EXPECT_EQ(plan.stop, StopReason::kNoPages);
    EXPECT_TRUE(plan.rejected.empty()) << "not enough pages now is not a rejection";
    plan = plan_for(config_with(8192), w, /*free_pages=*/4, /*total_pages=*/100);
    EXPECT_EQ(plan.n_admitted, 1);
    EXPECT_EQ(plan.n_pages_reserved, 4);
    EXPECT_EQ(plan.stop, StopReason::kNoPages);
    plan = plan_for(config_with(8192), w, /*free_pages=*/5, /*total_pages=*/100);
    EXPECT_EQ(plan.n_admitted, 2);
    EXPECT_EQ(plan.n_pages_reserved, 5);
}

TEST(PrefillAdder, WatermarkHoldsPagesBack) {
    SchedulerConfig c = config_with(8192);
    c.watermark = 0.1;  // 10 of 100 pages
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 64 * 5 - 1));  // + 1 new token: 5 pages
    EXPECT_TRUE(plan_for(c, w, /*free_pages=*/14, /*total_pages=*/100).empty());
    EXPECT_EQ(plan_for(c, w, /*free_pages=*/15, /*total_pages=*/100).n_admitted, 1);
    w.push_back(waiting_request(1, 64 * 91));
    const BatchPlan plan = plan_for(c, w, 100, 100);
    ASSERT_EQ(plan.rejected.size(), 1u) << "92 pages > 100 - 10 can never be admitted";
    EXPECT_EQ(plan.rejected[0].request_id, 1);
}

TEST(PrefillAdder, OversizeRequestIsRejectedAndTheQueueMovesOn) {
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, /*prompt_len=*/64 * 10, /*max_new_tokens=*/1));  // 11 pages
    w.push_back(waiting_request(1, 64));
    const BatchPlan plan = plan_for(config_with(8192), w, /*free_pages=*/10, /*total_pages=*/10);
    ASSERT_EQ(plan.rejected.size(), 1u);
    EXPECT_EQ(plan.rejected[0].request_id, 0);
    EXPECT_EQ(plan.rejected[0].status.code(), StatusCode::kOutOfRange);
    EXPECT_NE(plan.rejected[0].status.message().find("11 KV pages"), std::string::npos)
        << plan.rejected[0].status.to_string();
    ASSERT_EQ(plan.entries.size(), 1u);
    EXPECT_EQ(plan.entries[0].request_id, 1);
}

TEST(PrefillAdder, RunningCap) {
    SchedulerConfig c = config_with(8192);
    c.max_running_requests = 3;
    std::vector<std::unique_ptr<Request>> w;
    for (int64_t i = 0; i < 4; ++i) w.push_back(waiting_request(i, 10));
    const std::vector<const Request*> wp = ptrs(w);
    const BatchPlan plan =
        PrefillAdder(c, std::nullopt)({.waiting = wp, .n_running = 2, .n_free_pages = 100, .n_total_pages = 100});
    EXPECT_EQ(plan.n_admitted, 1);
    EXPECT_EQ(plan.stop, StopReason::kRunningCap);
}

TEST(PrefillAdder, MicroBatchCapCountsDecodesAndOnlyAppliesWithPipeline) {
    SchedulerConfig c = config_with(8192);
    c.max_running_requests = 64;
    c.pp_size = 2;
    c.pp_max_micro_batch_size = 3;
    std::vector<std::unique_ptr<Request>> d, w;
    for (int64_t i = 0; i < 2; ++i) d.push_back(decoding_request(100 + i, 10, 1, 5));
    for (int64_t i = 0; i < 4; ++i) w.push_back(waiting_request(i, 10));
    const std::vector<const Request*> dp = ptrs(d), wp = ptrs(w);
    const AdderInput in{.waiting = wp, .decodable = dp, .n_running = 2, .n_free_pages = 100, .n_total_pages = 100};
    BatchPlan plan = PrefillAdder(c, std::nullopt)(in);
    EXPECT_EQ(plan.n_decode_tokens, 2);
    EXPECT_EQ(plan.n_admitted, 1) << "pp_max_micro_batch_size 3 - 2 running entries";
    EXPECT_EQ(plan.stop, StopReason::kMicroBatchCap);

    c.pp_max_micro_batch_size = 1;
    plan = PrefillAdder(c, std::nullopt)(in);
    EXPECT_EQ(plan.n_decode_tokens, 1) << "decodes beyond the cap wait for the next micro-batch";
    EXPECT_EQ(plan.n_admitted, 0);

    c.pp_size = 1;  // the cap is ignored without a pipeline
    plan = PrefillAdder(c, std::nullopt)(in);
    EXPECT_EQ(plan.n_decode_tokens, 2);
    EXPECT_EQ(plan.n_admitted, 4);

    c.pp_size = 4;  // default: max(max_running_requests / pp_size, 1) = 16
    c.pp_max_micro_batch_size.reset();
    EXPECT_EQ(micro_batch_cap(c), 16);
}

TEST(PrefillAdder, DecodesTakeOneTokenEachFromTheBudget) {
    auto d = decoding_request(5, /*prompt_len=*/10, /*n_generated=*/3, /*max_new_tokens=*/8);
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 1000));
    const std::vector<const Request*> dp{d.get()}, wp = ptrs(w);
    const BatchPlan plan = PrefillAdder(config_with(128), std::nullopt)(
        {.waiting = wp, .decodable = dp, .n_running = 1, .n_free_pages = 100, .n_total_pages = 100});
    ASSERT_EQ(plan.entries.size(), 2u);
    EXPECT_EQ(plan.entries[0].kind, EntryKind::kPrefill) << "prefill chunks come first in the plan";
    EXPECT_EQ(plan.entries[0].n_tokens(), 64) << "127 tokens left after the decode: cut at 64";
    const PlanEntry& dec = plan.entries[1];
    EXPECT_EQ(dec.kind, EntryKind::kDecode);
    EXPECT_EQ(dec.request_id, 5);
    EXPECT_EQ(dec.prefix_len, 12) << "input = last generated token at position prompt + generated - 1";
    EXPECT_EQ(dec.token_ids, (std::vector<int32_t>{1002}));
    EXPECT_EQ(dec.logits, ChunkLogits::kLast);
    EXPECT_EQ(plan.n_tokens(), 65);
}

TEST(PrefillAdder, MidChunkRequestContinuesFirstAndStaysTheOnlyOne) {
    auto m = mid_chunk_request(9, /*prompt_len=*/1000, /*computed=*/256);
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 1000));
    const std::vector<const Request*> wp = ptrs(w);
    const PrefillAdder adder(config_with(512), std::nullopt);
    BatchPlan plan =
        adder({.waiting = wp, .mid_chunk = m.get(), .n_running = 1, .n_free_pages = 100, .n_total_pages = 100});
    ASSERT_EQ(plan.entries.size(), 1u);
    EXPECT_EQ(plan.entries[0].request_id, 9);
    EXPECT_EQ(plan.entries[0].n_tokens(), 512);
    EXPECT_EQ(plan.stop, StopReason::kTokenBudget);

    // The mid-chunk request finishes its prompt; the freed chunk slot goes to the next request.
    auto m2 = mid_chunk_request(9, /*prompt_len=*/1000, /*computed=*/900);
    plan = adder({.waiting = wp, .mid_chunk = m2.get(), .n_running = 1, .n_free_pages = 100, .n_total_pages = 100});
    EXPECT_EQ(chunk_lengths(plan), (std::vector<int64_t>{100, 384}));
    EXPECT_EQ(plan.entries[0].logits, ChunkLogits::kLast);
    EXPECT_EQ(plan.entries[1].logits, ChunkLogits::kNone);
}

TEST(PrefillAdder, WholePromptsStillJoinWhileAnotherIsMidChunk) {
    auto m = mid_chunk_request(9, /*prompt_len=*/1000, /*computed=*/0 + 64);
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 30));
    w.push_back(waiting_request(1, 100));
    const std::vector<const Request*> wp = ptrs(w);
    const BatchPlan plan = PrefillAdder(config_with(300), std::nullopt)(
        {.waiting = wp, .mid_chunk = m.get(), .n_running = 1, .n_free_pages = 100, .n_total_pages = 100});
    EXPECT_EQ(chunk_lengths(plan), (std::vector<int64_t>{256, 30})) << "44 left: 30 fits whole, 100 is not split";
    EXPECT_EQ(plan.stop, StopReason::kTokenBudget);
}

TEST(PrefillAdder, WithoutChunkingPromptsRunWhole) {
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 150));
    w.push_back(waiting_request(1, 30));
    const BatchPlan plan = plan_for(config_with(/*chunk=*/0, /*max_prefill=*/100), w);
    EXPECT_EQ(chunk_lengths(plan), (std::vector<int64_t>{150})) << "the first runs whole beyond max_prefill_tokens";
    EXPECT_EQ(plan.entries[0].logits, ChunkLogits::kLast);
    EXPECT_EQ(plan.stop, StopReason::kTokenBudget);
    const BatchPlan two = plan_for(config_with(/*chunk=*/-1, /*max_prefill=*/200), w);
    EXPECT_EQ(chunk_lengths(two), (std::vector<int64_t>{150, 30}));
}

TEST(WaitingOrder, FcfsKeepsArrivalOrderLongestPrefixSortsStably) {
    std::vector<std::unique_ptr<Request>> w;
    for (int64_t i = 0; i < 5; ++i) w.push_back(waiting_request(i, 200));
    w[1]->set_matched_prefix_len(64);
    w[3]->set_matched_prefix_len(128);
    w[4]->set_matched_prefix_len(64);
    const std::vector<const Request*> q = ptrs(w);
    auto ids = [](const std::vector<const Request*>& v) {
        std::vector<int64_t> out;
        for (const Request* r : v) out.push_back(r->id());
        return out;
    };
    EXPECT_EQ(ids(WaitingOrder(Policy::kFcfs)(q)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(ids(WaitingOrder(Policy::kLongestPrefix)(q)), (std::vector<int64_t>{3, 1, 4, 0, 2}));

    std::vector<std::unique_ptr<Request>> plain;
    for (int64_t i = 0; i < 4; ++i) plain.push_back(waiting_request(i, 10 + i));
    EXPECT_EQ(ids(WaitingOrder(Policy::kLongestPrefix)(ptrs(plain))), (std::vector<int64_t>{0, 1, 2, 3}))
        << "no prefix cache: longest-prefix falls back to FCFS";
}

TEST(WaitingOrder, LongestPrefixChangesWhoIsAdmitted) {
    SchedulerConfig c = config_with(8192);
    c.max_running_requests = 1;
    std::vector<std::unique_ptr<Request>> w;
    w.push_back(waiting_request(0, 100));
    w.push_back(waiting_request(1, 100));
    w[1]->set_matched_prefix_len(64);
    for (Policy p : {Policy::kFcfs, Policy::kLongestPrefix}) {
        const std::vector<const Request*> ordered = WaitingOrder(p)(ptrs(w));
        const BatchPlan plan = PrefillAdder(
            c, std::nullopt)({.waiting = ordered, .n_running = 0, .n_free_pages = 100, .n_total_pages = 100});
        ASSERT_EQ(plan.entries.size(), 1u);
        EXPECT_EQ(plan.entries[0].request_id, p == Policy::kFcfs ? 0 : 1) << policy_name(p);
    }
}

}  // namespace
}  // namespace penstock::scheduler
