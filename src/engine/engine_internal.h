// What engine.cc and engine_disagg.cc share inside the engine: the per-request state of the engine thread
// (Engine::Live) and small output helpers. Not part of the engine's interface.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "engine/tokenizer.h"

namespace penstock::engine {

struct Engine::Live {
    std::shared_ptr<RequestHandle> handle;
    GenerateParams params;
    uint64_t seed = 0;  // the sampling RNG key (runtime/sampling.h)
    std::unique_ptr<DecodeStream> detok;
    std::string held;  // decoded text not yet published (it may be the start of a stop string)
    std::string rid;
    Clock::time_point arrival;
    std::optional<Clock::time_point> first_token;
    int64_t prompt_len = 0;
    int64_t n_generated = 0;
    std::optional<AbortReason> abort_reason;
    Status error;
    bool stopped_by_string = false;
    std::string matched_stop;
    // GenerateParams::logprob_start_len >= 0: the prompt's scored positions from there (entry k: position start + k),
    // filled as the chunks come back (a recomputed chunk overwrites), published with the first output token.
    std::vector<OutputLogprob> prompt_lp;
    std::vector<int32_t> prompt_ids;  // the prompt's distinct ids, sorted (repetition_penalty only)
    bool prompt_lp_published = false;
};

// A finished event with `reason` and `error` (counts and times are filled by the caller).
inline RequestOutput finished_output(std::string reason, Status error) {
    RequestOutput out;
    out.finished = true;
    out.finish_reason = std::move(reason);
    out.error = std::move(error);
    return out;
}

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace penstock::engine
