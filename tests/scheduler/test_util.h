// Helpers shared by the scheduler tests: requests in a chosen state, without a Scheduler.
#pragma once

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "scheduler/request.h"

namespace penstock::scheduler::testing {

// Prompt token ids 0, 1, ..., n - 1 (offset by `first`).
inline std::vector<int32_t> iota_prompt(int64_t n, int32_t first = 0) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    std::iota(p.begin(), p.end(), first);
    return p;
}

inline std::unique_ptr<Request> waiting_request(int64_t id, int64_t prompt_len, int64_t max_new_tokens = 1) {
    return std::make_unique<Request>(id, iota_prompt(prompt_len), SamplingParams{.max_new_tokens = max_new_tokens},
                                     TimePoint{}, kNoDeadline);
}

// Admitted, with `computed` prompt tokens planned and computed (mid-chunk when computed < prompt_len).
inline std::unique_ptr<Request> mid_chunk_request(int64_t id, int64_t prompt_len, int64_t computed,
                                                  int64_t max_new_tokens = 1) {
    auto r = waiting_request(id, prompt_len, max_new_tokens);
    r->admit();
    r->schedule_prefill(computed);
    r->complete_positions(computed);
    return r;
}

// Prompt computed and `n_generated` >= 1 tokens generated: ready for a decode step.
inline std::unique_ptr<Request> decoding_request(int64_t id, int64_t prompt_len, int64_t n_generated,
                                                 int64_t max_new_tokens) {
    auto r = mid_chunk_request(id, prompt_len, prompt_len, max_new_tokens);
    r->append_token(1000);
    for (int64_t i = 1; i < n_generated; ++i) {
        r->schedule_decode();
        r->complete_positions(1);
        r->append_token(static_cast<int32_t>(1000 + i));
    }
    return r;
}

inline std::vector<const Request*> ptrs(const std::vector<std::unique_ptr<Request>>& rs) {
    std::vector<const Request*> out;
    for (const auto& r : rs) out.push_back(r.get());
    return out;
}

}  // namespace penstock::scheduler::testing
