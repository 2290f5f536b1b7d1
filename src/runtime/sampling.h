// Token sampling for one step, wherever the logits are: the single process, or the last pipeline stage, which samples
// and returns token ids to stage 0 (SPEC §3 "First token"). A draw is a pure function of (logits row, parameters,
// seed, token index): the uniform comes from a counter-based RNG (Philox4x32-10) keyed by the request's seed with the
// token's index as the counter, so no RNG state lives anywhere and any rank computes the same token from the same
// logits. Host memory only; every function is pure and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/forward_batch.h"

namespace penstock::runtime {

// The most alternatives a sampled token can come back with (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

// How one sequence of a step is sampled (carried per sequence in the pipeline's stage plan).
struct SeqSampling {
    bool sample = false;       // draw one token from this sequence's last logit row (its logits mode must give rows)
    float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties); > 0 divides the logits
    float top_p = 1.0f;        // (0, 1]: keep the smallest prefix of the sorted distribution with mass >= top_p
    int32_t top_k = -1;        // <= 0 (or >= vocab): all tokens; 1 = greedy
    float min_p = 0.0f;        // [0, 1]: drop tokens with p < min_p * p_max
    uint64_t seed = 0;         // the request's seed (the RNG key)
    int64_t token_index = 0;   // which output token of the request this is (0 = the first); the RNG counter
    // [0, kMaxTopLogprobs]: also return this many most likely tokens of the row with their log-probabilities.
    int32_t top_logprobs = 0;
    // Prompt log-probabilities (the sequence's logits mode must be kAll): row j of the chunk scores the prompt token
    // that follows it, token_ids[j + 1], and the last row scores next_token (the first token of the prompt's next
    // chunk; -1 when the chunk ends the prompt, whose last row is the sampled one and scores nothing).
    bool prompt_logprobs = false;
    int32_t next_token = -1;
    // OpenAI penalties over the request's output so far (`history`: its generated tokens, in order; empty unless a
    // penalty is non-zero): before the draw each token t's logit drops by frequency_penalty x count(t) +
    // presence_penalty x [count(t) > 0]. Both in [-2, 2]. The reported log-probabilities stay the raw row's.
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    std::vector<int32_t> history = {};
    // Repetition penalty (transformers / vLLM / SGLang), applied first: each token of the prompt (`prompt_tokens`: its
    // distinct ids; empty unless the penalty is not 1) or of `history` has its logit divided by it when positive,
    // multiplied when not. Finite in (0, 10].
    float repetition_penalty = 1.0f;
    std::vector<int32_t> prompt_tokens = {};
    // Tokens this draw may not produce (their logits become -inf first): a request's stop tokens while it has fewer
    // than min_new_tokens outputs. The reported log-probabilities stay the raw row's.
    std::vector<int32_t> banned = {};
    // OpenAI logit_bias: (token, bias in [-100, 100]) added to the token's logit before the penalties.
    std::vector<std::pair<int32_t, float>> logit_bias = {};
};

// One alternative: a token and its log-probability under the model's own distribution (as Sampled::logprob).
struct TopLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
    bool operator==(const TopLogprob&) const = default;
};

struct Sampled {
    int32_t token = 0;
    // log p(token) under the model's own distribution: log-softmax of the raw logits row (temperature 1, no
    // filters), in double, rounded to f32; -inf when the row has no finite logit.
    float logprob = 0.0f;
    // SeqSampling::top_logprobs most likely tokens (fewer when the row has fewer finite logits), by descending
    // logit, ties to the lower id; whatever filters the draw used.
    std::vector<TopLogprob> top;
};

// What one step returns to its driver: one token per sampled sequence, in batch order.
struct StepOutput {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;  // of each token (Sampled::logprob)
    // Per token its alternatives (Sampled::top); empty when no sequence of the step asked for any.
    std::vector<std::vector<TopLogprob>> top;
    // Per sequence with SeqSampling::prompt_logprobs (batch order): each scored prompt token in order (token, its
    // log-probability, top_logprobs alternatives).
    std::vector<std::vector<Sampled>> prompt;
    Tensor logits;  // [n_logit_rows, vocab] f32 on the host, only when the caller asked for them
};

// Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32_10): 10 rounds, key bumped between rounds.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
// Uniform in [0, 1) with 53 bits: Philox4x32-10 with key = seed (low word first) and counter = (token_index low,
// token_index high, 0, 0); the first two output words, high word first.
double sampling_uniform(uint64_t seed, int64_t token_index);

bool is_greedy(const SeqSampling& s);
// InvalidArgument naming the field: temperature finite and >= 0, top_p finite in (0, 1], top_k >= -1, min_p finite
// in [0, 1], token_index >= 0, top_logprobs in [0, kMaxTopLogprobs], next_token >= -1, presence / frequency
// penalties finite in [-2, 2], repetition_penalty finite in (0, 10], logit biases finite in [-100, 100] on ids >= 0.
[[nodiscard]] Status validate(const SeqSampling& s);

// The raw row's log-probability of `token` and its `top` most likely tokens (Sampled without a draw).
Sampled score_token(std::span<const float> logits, int32_t token, int32_t top);

// One token from `logits` ([vocab] f32). Non-finite logits are treated as -inf (never drawn unless all are, then id
// 0). Greedy: argmax. Otherwise: a stable sort of the finite logits, top-k, softmax at the temperature (double),
// min-p, top-p (smallest prefix with mass >= top_p), renormalise, one draw sampling_uniform(seed, token_index).
// Penalties (SeqSampling::history) adjust the row first. The logprob and the alternatives are the raw row's whatever
// the parameters.
Sampled sample_token(std::span<const float> logits, const SeqSampling& s);

// The distribution sample_token draws from (probabilities over [vocab], zeros for filtered tokens); for tests.
void sampling_distribution(std::span<const float> logits, const SeqSampling& s, std::span<double> probs);

// Samples every sequence of `batch` with sampling[i].sample from its last row of `logits` ([n_logit_rows, vocab] f32
// host, batch logit-row order: kNone 0 rows, kLast 1, kAll n_tokens), and scores the prompt tokens of those with
// prompt_logprobs. Keeps `logits` in the output when `keep_logits`. InvalidArgument when sampling.size() != n_seqs, a
// sampled sequence has no logit row, a prompt-scored one is not kAll, a token is outside the vocabulary, a parameter
// is out of range or the logits' shape is not [n_logit_rows, vocab].
[[nodiscard]] Result<StepOutput> sample_step(const models::ForwardBatch& batch, std::span<const SeqSampling> sampling,
                                             Tensor logits, int64_t vocab, bool keep_logits);

}  // namespace penstock::runtime
