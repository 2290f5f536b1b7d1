// A request's sampling options (what the API accepts) and their translation into the per-step parameters the sampler
// runs with (runtime/sampling.h), wherever it runs: in this process, or on the last pipeline stage. A token is a pure
// function of its logits row, the options, the request's seed and the token's index, never of batching, of other
// requests or of the rank that samples.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "core/status.h"
#include "runtime/sampling.h"

namespace penstock::engine {

struct SamplingOptions {
    float temperature = 1.0f;  // 0 = greedy (argmax, lowest id on ties); > 0 divides the logits
    float top_p = 1.0f;        // (0, 1]: keep the smallest prefix of the sorted distribution with mass >= top_p
    int32_t top_k = -1;        // <= 0 (or >= vocab): all tokens; 1 = greedy
    float min_p = 0.0f;        // [0, 1]: drop tokens with p < min_p * p_max
    std::optional<uint64_t> seed = std::nullopt;  // unset: derive_seed(engine seed, request id)
    // [-2, 2]: OpenAI's penalties over the request's output so far (runtime::SeqSampling::history).
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;  // (0, 10]: over the prompt and the output (runtime::SeqSampling)
    std::vector<std::pair<int32_t, float>> logit_bias = {};  // (token, [-100, 100]) added to the logit
};

// InvalidArgument naming the field: temperature finite and >= 0, top_p finite in (0, 1], top_k >= -1 (0 is taken
// as "all"), min_p finite in [0, 1].
[[nodiscard]] Status validate(const SamplingOptions& o);

// The seed of a request that brings none: splitmix64 of the engine seed and the request id (ids are assigned in
// submission order, so a fresh server with the same --random-seed repeats itself).
uint64_t derive_seed(uint64_t engine_seed, int64_t request_id);

// The sampler parameters of a request's `token_index`-th output token (sample = true).
runtime::SeqSampling seq_sampling(const SamplingOptions& o, uint64_t seed, int64_t token_index);

}  // namespace penstock::engine
