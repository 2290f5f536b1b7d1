// Token sampling on the last stage: greedy, temperature, top-k, top-p, from one row of logits, with a per-request
// seeded RNG so that a request's tokens depend only on its logits and its seed (never on batching or on other
// requests). Pure functions over host memory; not thread-safe per Rng (one Rng per request, owned by the engine).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/status.h"

namespace penstock::engine {

struct SamplingOptions {
    float temperature = 1.0f;  // 0 = greedy (argmax, lowest id on ties); > 0 divides the logits
    float top_p = 1.0f;        // (0, 1]: keep the smallest prefix of the sorted distribution with mass >= top_p
    int32_t top_k = -1;        // <= 0 (or >= vocab): all tokens; 1 = greedy
    float min_p = 0.0f;        // [0, 1]: drop tokens with p < min_p * p_max
    std::optional<uint64_t> seed = std::nullopt;  // unset: the engine draws one from its own seeded counter
};

// InvalidArgument naming the field: temperature finite and >= 0, top_p finite in (0, 1], top_k >= -1 (0 is taken
// as "all"), min_p finite in [0, 1].
[[nodiscard]] Status validate(const SamplingOptions& o);

// splitmix64-seeded xoshiro256** (fixed algorithm, identical on every platform and standard library).
class Rng final {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    // Uniform in [0, 1) with 53 random bits.
    double uniform();

private:
    uint64_t s_[4];
};

// Samples one token id from `logits` ([vocab] f32). Non-finite logits are treated as -inf (never sampled unless all
// are, then the lowest id). Deterministic for a given (logits, options, rng state); consumes exactly one uniform
// draw when not greedy.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, Rng* rng);

// The distribution sample_token draws from (probabilities over [vocab], zeros for filtered tokens); for tests.
void sampling_distribution(std::span<const float> logits, const SamplingOptions& o, std::span<double> probs);

}  // namespace penstock::engine
