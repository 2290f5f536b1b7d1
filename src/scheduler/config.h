// SchedulerConfig: admission budgets, caps and policy of the prefill-first scheduler (SGLang flag names where SGLang
// has the concept), its validation, and the report of options that have no effect in a given configuration
// (SPEC §6: reported at start-up, never silently ignored).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace penstock::scheduler {

// Order in which waiting requests are offered to the PrefillAdder (see policy.h).
enum class Policy : uint8_t {
    kFcfs,           // arrival order
    kLongestPrefix,  // most cached prompt tokens first, FCFS among equals (= FCFS until a prefix cache exists)
};

std::string_view policy_name(Policy p);

// Reserved decode tokens: a request's whole KV (prompt + max_new_tokens) is reserved at admission, all or nothing,
// so a running request never needs pages again and nothing is ever preempted. This is the rule, not an option.
struct SchedulerConfig {
    // --chunked-prefill-size: prefill tokens per step (all requests together); a longer prompt is cut into chunks.
    // <= 0 disables chunking: every prompt runs whole (the first one of a step even beyond max_prefill_tokens).
    int64_t chunked_prefill_size = 8192;
    // --max-prefill-tokens: tokens per step (prefill + decode), the second token budget.
    int64_t max_prefill_tokens = 16384;
    // --max-running-requests: admitted (prefilling + decoding) requests at any time.
    int64_t max_running_requests = 256;
    // Waiting-queue bound; add_request answers ResourceExhausted beyond it (the server's 429).
    int64_t max_queue_size = 4096;
    // prompt + max_new_tokens limit (the model's max_position_embeddings); 0 = no limit beyond the KV pool.
    int64_t max_context_len = 0;
    int64_t pp_size = 1;
    // --pp-max-micro-batch-size: requests per micro-batch when pp_size > 1 (decode entries + prefill chunks);
    // unset = max(max_running_requests / pp_size, 1). Ignored with pp_size 1 (SGLang: the PP scheduler's cap).
    std::optional<int64_t> pp_max_micro_batch_size;
    Policy policy = Policy::kFcfs;
    // --enable-dynamic-chunking: chunk sizes from the cost model (SPEC §3) instead of a fixed token budget.
    bool enable_dynamic_chunking = false;
    // Cost-model option: the chunk length whose cost at prefix 0 is the per-step budget (unset: chunked_prefill_size).
    std::optional<int64_t> dynamic_chunking_budget_tokens;
    // Fraction of KV pages held back from admission, in [0, 1): admission needs free - need >= ceil(watermark *
    // n_pages). A request needing more than n_pages - that is rejected at once.
    double watermark = 0.0;
};

// Derived values every consumer must agree on.
int64_t effective_pp_max_micro_batch_size(const SchedulerConfig& c);
// Requests per micro-batch, or max_running_requests when pp_size == 1 (no separate cap).
int64_t micro_batch_cap(const SchedulerConfig& c);
// Prefill tokens per step: min(chunked_prefill_size, max_prefill_tokens), or max_prefill_tokens without chunking.
int64_t step_token_budget(const SchedulerConfig& c);
bool chunking_enabled(const SchedulerConfig& c);
// Pages held back by the watermark for a pool of n_pages.
int64_t watermark_pages(const SchedulerConfig& c, int64_t n_pages);

// InvalidArgument naming the first bad field: max_running_requests/max_queue_size/max_prefill_tokens/pp_size >= 1,
// chunked_prefill_size <= 0 or >= 64 (one page), pp_max_micro_batch_size >= 1, dynamic_chunking_budget_tokens >= 64,
// watermark in [0, 1), max_context_len >= 0. (Dynamic chunking without chunking is reported, not refused.)
[[nodiscard]] Status validate(const SchedulerConfig& c);

// One message per option that has no effect in this configuration (empty when every option given matters).
std::vector<std::string> describe_ineffective_options(const SchedulerConfig& c);

}  // namespace penstock::scheduler
