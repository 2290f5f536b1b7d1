// PrefillAdder: the admission rule of one scheduler step as a pure function object. Given a snapshot (waiting queue in
// policy order, the one mid-chunk request, decode-ready requests, running count, free pages) it returns a BatchPlan:
// which requests run this step and which slice of each. It changes nothing; the Scheduler applies the plan.
// BatchPlan is plain data that carries everything a forward needs (runtime/ turns it into a models::ForwardBatch).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "scheduler/config.h"
#include "scheduler/cost_model.h"
#include "scheduler/request.h"

namespace penstock::scheduler {

enum class EntryKind : uint8_t { kPrefill, kDecode };
// Rows that produce logits on the last stage (maps onto models::LogitsMode kNone / kLast).
enum class ChunkLogits : uint8_t { kNone, kLast };

struct PlanEntry {
    int64_t request_id = 0;
    EntryKind kind = EntryKind::kPrefill;
    int64_t prefix_len = 0;          // positions before this chunk (computed, or planned in an earlier step)
    std::vector<int32_t> token_ids;  // [n_tokens] i32: the chunk, at positions prefix_len + i
    int64_t prompt_len = 0;          // the request's whole prompt length
    // kLast: the final prompt chunk or a decode step (its last row is sampled); kNone: a mid-chunk prefill chunk.
    ChunkLogits logits = ChunkLogits::kLast;
    bool admitted = false;       // first chunk of a request admitted by this plan (its pages are reserved by it)
    std::vector<int32_t> pages;  // [pages_for_tokens(prefix_len + n_tokens)] page ids; filled by the Scheduler

    int64_t n_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

// Why admission from the waiting queue stopped (for metrics and tests).
enum class StopReason : uint8_t {
    kQueueEmpty,     // every waiting request was considered
    kTokenBudget,    // the step's token budget is spent (or < one page for a prompt that must be split)
    kCostBudget,     // dynamic chunking: the step's cost budget is spent
    kNoPages,        // the head request's whole KV does not fit the free pages (a normal outcome: it waits)
    kRunningCap,     // max_running_requests
    kMicroBatchCap,  // pp_max_micro_batch_size entries in this micro-batch
    kChunkSlotBusy,  // the head request would need splitting while another request stays mid-chunk
};

std::string_view stop_reason_name(StopReason r);

struct Rejection {
    int64_t request_id = 0;
    Status status;  // OutOfRange: the request needs more KV pages than the pool can ever give it
};

struct BatchPlan {
    int64_t step_id = -1;             // assigned by the Scheduler to non-empty plans, consecutive from 0
    std::vector<PlanEntry> entries;   // prefill chunks (the continued mid-chunk request first), then decode steps
    std::vector<Rejection> rejected;  // waiting requests that can never be admitted
    StopReason stop = StopReason::kQueueEmpty;
    int64_t n_prefill_tokens = 0;
    int64_t n_decode_tokens = 0;
    int64_t n_admitted = 0;
    int64_t n_pages_reserved = 0;  // pages the admissions take
    double predicted_cost = 0;     // sum of cost-model costs of the entries (dynamic chunking only)

    bool empty() const { return entries.empty(); }
    int64_t n_tokens() const { return n_prefill_tokens + n_decode_tokens; }
};

struct AdderInput {
    std::span<const Request* const> waiting = {};    // waiting requests in policy order
    const Request* mid_chunk = nullptr;              // the admitted request with unplanned prompt tokens, or nullptr
    std::span<const Request* const> decodable = {};  // requests ready for a decode step, oldest first
    int64_t n_running = 0;                           // admitted requests (prefilling + decoding)
    int64_t n_free_pages = 0;
    int64_t n_total_pages = 0;
};

// Rules, in order (SGLang PrefillAdder semantics, whole-KV reservation):
//  1. Decode-ready requests take one token each (until the token, cost or micro-batch cap is reached).
//  2. The mid-chunk request continues first: its next chunk, pages already reserved.
//  3. Waiting requests in the given order: a request needing more pages than n_total_pages minus the watermark is
//     rejected (and skipped); admission stops at the running cap, the micro-batch cap, or when the head request's
//     whole KV (prompt + max_new_tokens) does not fit the free pages minus the watermark (no skipping: FCFS).
// Chunks: the token budget is step_token_budget() minus the tokens already planned; with dynamic chunking the chunk is
// also limited by the cost left. A prompt that does not fit is cut so that its end is a multiple of 64; when that
// leaves nothing (budget left < one page) it is not split this step. At most one request is mid-chunk after the plan.
// Without chunking prompts are never split; the first prefill of a step is taken whole even beyond the budget, and
// with dynamic chunking the first prefill of a step takes at least one page so every prompt makes progress.
class PrefillAdder final {
public:
    // `cost_model` is required when dynamic chunking is in effect (enable_dynamic_chunking with chunking on) and
    // ignored otherwise. The config must be valid (validate()).
    PrefillAdder(const SchedulerConfig& config, std::optional<ChunkCostModel> cost_model);

    BatchPlan operator()(const AdderInput& in) const;

    bool dynamic_chunking() const { return cost_model_.has_value(); }
    // The per-step cost budget (dynamic chunking only).
    double cost_budget() const { return cost_budget_; }
    const std::optional<ChunkCostModel>& cost_model() const { return cost_model_; }

private:
    struct StepBudget;
    struct Cut {
        int64_t n_tokens = 0;     // 0: not this step
        bool cost_bound = false;  // the cost budget (not the token budget) set the length
    };
    // The next prefill chunk of `r` under what is left of the step's budgets.
    Cut next_cut(const Request& r, const StepBudget& b) const;
    void add_prefill(const Request& r, int64_t n_tokens, bool admitted, StepBudget* b, BatchPlan* plan) const;

    SchedulerConfig config_;
    std::optional<ChunkCostModel> cost_model_;
    double cost_budget_ = 0;
};

}  // namespace penstock::scheduler
