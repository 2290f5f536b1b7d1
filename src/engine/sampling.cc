// SamplingOptions validation and translation.
#include "engine/sampling.h"

namespace penstock::engine {

Status validate(const SamplingOptions& o) {
    runtime::SeqSampling s{
        .sample = true, .temperature = o.temperature, .top_p = o.top_p, .top_k = o.top_k, .min_p = o.min_p};
    s.presence_penalty = o.presence_penalty;
    s.frequency_penalty = o.frequency_penalty;
    s.repetition_penalty = o.repetition_penalty;
    s.logit_bias = o.logit_bias;
    return runtime::validate(s);
}

uint64_t derive_seed(uint64_t engine_seed, int64_t request_id) {
    uint64_t z = engine_seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(request_id) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

runtime::SeqSampling seq_sampling(const SamplingOptions& o, uint64_t seed, int64_t token_index) {
    return runtime::SeqSampling{.sample = true,
                                .temperature = o.temperature,
                                .top_p = o.top_p,
                                .top_k = o.top_k,
                                .min_p = o.min_p,
                                .seed = seed,
                                .token_index = token_index,
                                .presence_penalty = o.presence_penalty,
                                .frequency_penalty = o.frequency_penalty,
                                .repetition_penalty = o.repetition_penalty,
                                .logit_bias = o.logit_bias};
}

}  // namespace penstock::engine
