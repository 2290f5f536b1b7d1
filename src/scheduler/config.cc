// SchedulerConfig validation, derived budgets and the ineffective-option report.
#include "scheduler/config.h"

#include <algorithm>
#include <cmath>

#include "kv_cache/page_pool.h"

namespace penstock::scheduler {

std::string_view policy_name(Policy p) {
    switch (p) {
        case Policy::kFcfs:
            return "fcfs";
        case Policy::kLongestPrefix:
            return "lpm";
    }
    return "?";
}

int64_t effective_pp_max_micro_batch_size(const SchedulerConfig& c) {
    if (c.pp_max_micro_batch_size) return *c.pp_max_micro_batch_size;
    return std::max<int64_t>(c.max_running_requests / std::max<int64_t>(c.pp_size, 1), 1);
}

int64_t micro_batch_cap(const SchedulerConfig& c) {
    return c.pp_size > 1 ? effective_pp_max_micro_batch_size(c) : c.max_running_requests;
}

bool chunking_enabled(const SchedulerConfig& c) { return c.chunked_prefill_size > 0; }

int64_t step_token_budget(const SchedulerConfig& c) {
    return chunking_enabled(c) ? std::min(c.chunked_prefill_size, c.max_prefill_tokens) : c.max_prefill_tokens;
}

int64_t watermark_pages(const SchedulerConfig& c, int64_t n_pages) {
    return static_cast<int64_t>(std::ceil(c.watermark * static_cast<double>(n_pages)));
}

Status validate(const SchedulerConfig& c) {
    auto bad = [](const std::string& field, int64_t v, const std::string& rule) {
        return invalid_argument("scheduler option " + field + " = " + std::to_string(v) + ": " + rule);
    };
    if (c.max_running_requests < 1) return bad("max_running_requests", c.max_running_requests, "must be >= 1");
    if (c.max_queue_size < 1) return bad("max_queue_size", c.max_queue_size, "must be >= 1");
    if (c.max_prefill_tokens < 1) return bad("max_prefill_tokens", c.max_prefill_tokens, "must be >= 1");
    if (c.pp_size < 1) return bad("pp_size", c.pp_size, "must be >= 1");
    if (c.max_context_len < 0) return bad("max_context_len", c.max_context_len, "must be >= 0 (0 = no limit)");
    if (c.chunked_prefill_size > 0 && c.chunked_prefill_size < kv_cache::kPageSize) {
        return bad("chunked_prefill_size", c.chunked_prefill_size, "must be <= 0 (no chunking) or >= 64 (one page)");
    }
    if (c.pp_max_micro_batch_size && *c.pp_max_micro_batch_size < 1) {
        return bad("pp_max_micro_batch_size", *c.pp_max_micro_batch_size, "must be >= 1");
    }
    if (c.dynamic_chunking_budget_tokens && *c.dynamic_chunking_budget_tokens < kv_cache::kPageSize) {
        return bad("dynamic_chunking_budget_tokens", *c.dynamic_chunking_budget_tokens, "must be >= 64 (one page)");
    }
    if (!(c.watermark >= 0.0 && c.watermark < 1.0)) {
        return invalid_argument("scheduler option watermark = " + std::to_string(c.watermark) + ": must be in [0, 1)");
    }
    return ok_status();
}

std::vector<std::string> describe_ineffective_options(const SchedulerConfig& c) {
    std::vector<std::string> out;
    if (c.pp_max_micro_batch_size && c.pp_size == 1) {
        out.push_back("pp_max_micro_batch_size = " + std::to_string(*c.pp_max_micro_batch_size) +
                      " has no effect with pp_size 1 (max_running_requests caps the batch)");
    }
    if (c.dynamic_chunking_budget_tokens && !c.enable_dynamic_chunking) {
        out.push_back("dynamic_chunking_budget_tokens = " + std::to_string(*c.dynamic_chunking_budget_tokens) +
                      " has no effect without enable_dynamic_chunking");
    }
    if (c.enable_dynamic_chunking && !chunking_enabled(c)) {
        out.push_back("enable_dynamic_chunking has no effect: chunked prefill is disabled (chunked_prefill_size = " +
                      std::to_string(c.chunked_prefill_size) + ")");
    }
    if (chunking_enabled(c) && c.max_prefill_tokens < c.chunked_prefill_size) {
        out.push_back("chunked_prefill_size = " + std::to_string(c.chunked_prefill_size) +
                      " has no effect beyond max_prefill_tokens = " + std::to_string(c.max_prefill_tokens) +
                      ": chunks are limited to " + std::to_string(c.max_prefill_tokens) + " tokens");
    }
    if (c.policy == Policy::kLongestPrefix) {
        // TODO(#4): drop this once a prefix cache sets Request::matched_prefix_len.
        out.push_back("policy lpm orders the queue like fcfs: no prefix cache supplies matched prefixes yet");
    }
    if (effective_pp_max_micro_batch_size(c) >= c.max_running_requests && c.pp_size > 1 && c.pp_max_micro_batch_size) {
        out.push_back(
            "pp_max_micro_batch_size = " + std::to_string(*c.pp_max_micro_batch_size) +
            " has no effect: it is not below max_running_requests = " + std::to_string(c.max_running_requests));
    }
    return out;
}

}  // namespace penstock::scheduler
