// The sampler (runtime/sampling.h) and the engine's translation of request options (engine/sampling.h): Philox4x32-10
// against Random123's known-answer vectors; a draw depends only on (logits, parameters, seed, token index), so the
// same token comes out whichever process samples, in whatever batch and order; greedy ties and non-finite logits;
// distributions after top-k / top-p / min-p; empirical frequencies over token indices; log-probabilities;
// sample_step's row mapping and its refusals.
#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "runtime/sampling.h"

namespace penstock::runtime {
namespace {

TEST(Philox, KnownAnswerVectors) {
    // Random123 kat_vectors, philox4x32 with 10 rounds.
    EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
              (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
    EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
              (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
    EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
              (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsAPureFunctionOfSeedAndIndex) {
    std::set<double> seen;
    for (uint64_t seed : {0ull, 1ull, 0xdeadbeefcafef00dull}) {
        for (int64_t i = 0; i < 1000; ++i) {
            const double u = sampling_uniform(seed, i);
            EXPECT_GE(u, 0.0);
            EXPECT_LT(u, 1.0);
            EXPECT_EQ(u, sampling_uniform(seed, i));  // no hidden state
            seen.insert(u);
        }
    }
    EXPECT_EQ(seen.size(), 3000u);  // distinct across seeds and indices
    // The index's high word matters too.
    EXPECT_NE(sampling_uniform(5, 1), sampling_uniform(5, (int64_t{1} << 32) + 1));
}

SeqSampling params(float t, float top_p = 1.0f, int32_t top_k = -1, float min_p = 0.0f) {
    return SeqSampling{.sample = true, .temperature = t, .top_p = top_p, .top_k = top_k, .min_p = min_p};
}

TEST(Sampler, GreedyTakesLowestIdOnTiesAndSkipsNonFinite) {
    const std::vector<float> l = {1.0f, std::nanf(""), 3.0f, 3.0f, INFINITY};
    EXPECT_EQ(sample_token(l, params(0)).token, 2);
    EXPECT_EQ(sample_token(l, params(1, 1.0f, 1)).token, 2);
    const std::vector<float> none = {NAN, -INFINITY};
    EXPECT_EQ(sample_token(none, params(0)).token, 0);
    EXPECT_EQ(sample_token(none, params(1)).token, 0);
    EXPECT_EQ(sample_token(none, params(1)).logprob, -INFINITY);
}

TEST(Sampler, DistributionsMatchFilters) {
    const std::vector<float> l = {2.0f, 1.0f, 0.0f, -1.0f};
    std::vector<double> p(4);
    sampling_distribution(l, params(1), p);
    const double z = std::exp(2.0) + std::exp(1.0) + 1 + std::exp(-1.0);
    EXPECT_NEAR(p[0], std::exp(2.0) / z, 1e-12);
    EXPECT_NEAR(p[3], std::exp(-1.0) / z, 1e-12);
    sampling_distribution(l, params(1, 1.0f, 2), p);
    EXPECT_NEAR(p[0], std::exp(1.0) / (std::exp(1.0) + 1), 1e-12);
    EXPECT_EQ(p[2], 0.0);
    sampling_distribution(l, params(1, 0.5f), p);  // p0 ~ 0.64 >= 0.5: only token 0
    EXPECT_EQ(p[0], 1.0);
    sampling_distribution(l, params(0.5f), p);
    const double z2 = std::exp(4.0) + std::exp(2.0) + 1 + std::exp(-2.0);
    EXPECT_NEAR(p[1], std::exp(2.0) / z2, 1e-12);
    sampling_distribution(l, params(1, 1.0f, -1, 0.3f), p);  // p1/p0 = e^-1 ~ 0.37 stays, p2 goes
    EXPECT_GT(p[1], 0.0);
    EXPECT_EQ(p[2], 0.0);
}

// One request's token stream: token_index 0, 1, 2, ... with one seed. Frequencies over 200k indices match the
// distribution within 5 sigma; the same (seed, index) gives the same token in any order.
TEST(Sampler, EmpiricalFrequenciesOverTokenIndices) {
    const std::vector<float> l = {0.5f, 1.5f, -0.3f, 1.0f, 0.0f};
    SeqSampling o = params(0.8f, 0.95f, 4);
    o.seed = 42;
    std::vector<double> p(l.size());
    sampling_distribution(l, o, p);
    const int n = 200000;
    std::vector<int> count(l.size(), 0);
    std::vector<int32_t> forward;
    for (int i = 0; i < n; ++i) {
        o.token_index = i;
        const int32_t t = sample_token(l, o).token;
        ++count[static_cast<size_t>(t)];
        if (i < 1000) forward.push_back(t);
    }
    for (size_t v = 0; v < l.size(); ++v) {
        const double sd = std::sqrt(p[v] * (1 - p[v]) / n);
        EXPECT_NEAR(count[v] / static_cast<double>(n), p[v], 5 * sd + 1e-9) << "token " << v;
    }
    for (int i = 999; i >= 0; --i) {  // backwards: no state carried between draws
        o.token_index = i;
        EXPECT_EQ(sample_token(l, o).token, forward[static_cast<size_t>(i)]) << "index " << i;
    }
}

TEST(Sampler, LogprobIsTheRawLogSoftmax) {
    const std::vector<float> l = {2.0f, 1.0f, NAN, -1.0f};
    const double z = std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
    EXPECT_NEAR(sample_token(l, params(0)).logprob, 2.0 - std::log(z), 1e-6);
    SeqSampling o = params(5.0f);  // the temperature does not change the reported log-probability
    for (int64_t i = 0; i < 50; ++i) {
        o.token_index = i;
        const Sampled s = sample_token(l, o);
        EXPECT_NE(s.token, 2);
        EXPECT_NEAR(s.logprob, l[static_cast<size_t>(s.token)] - std::log(z), 1e-6);
    }
}

// The alternatives: the most likely finite tokens of the raw row by descending logit, ties to the lower id, with
// the raw log-softmax, whatever the draw's filters; fewer when fewer are finite.
TEST(Sampler, TopLogprobsAreTheRawRowsMostLikelyTokens) {
    const std::vector<float> l = {1.0f, 3.0f, NAN, 3.0f, -2.0f, INFINITY, 0.5f};
    double z = 0;
    for (float v : l) z += std::isfinite(v) ? std::exp(static_cast<double>(v)) : 0.0;
    for (float temperature : {0.0f, 0.8f, 3.0f}) {
        SeqSampling o = params(temperature, 0.5f, 2);
        o.top_logprobs = 3;
        const Sampled s = sample_token(l, o);
        ASSERT_EQ(s.top.size(), 3u);
        EXPECT_EQ(s.top[0].token, 1);  // 3.0 at ids 1 and 3: the lower id first
        EXPECT_EQ(s.top[1].token, 3);
        EXPECT_EQ(s.top[2].token, 0);
        for (const TopLogprob& t : s.top) {
            EXPECT_NEAR(t.logprob, l[static_cast<size_t>(t.token)] - std::log(z), 1e-6);
        }
        const auto it =
            std::find_if(s.top.begin(), s.top.end(), [&](const TopLogprob& t) { return t.token == s.token; });
        ASSERT_NE(it, s.top.end()) << "top_k 2 / top_p 0.5 draw from the top two";
        EXPECT_EQ(it->logprob, s.logprob);
    }
    SeqSampling many = params(0);
    many.top_logprobs = kMaxTopLogprobs;
    EXPECT_EQ(sample_token(l, many).top.size(), 5u) << "five finite logits";
    EXPECT_TRUE(sample_token(l, params(0)).top.empty());
    many.top_logprobs = kMaxTopLogprobs + 1;
    EXPECT_FALSE(validate(many).ok());
    many.top_logprobs = -1;
    EXPECT_FALSE(validate(many).ok());
}

// OpenAI presence / frequency penalties: the draw uses logit - frequency x count - presence x [count > 0] over the
// output so far; the reported log-probability stays the raw row's.
TEST(Sampler, PresenceAndFrequencyPenaltiesAdjustTheDrawNotTheReportedValues) {
    const std::vector<float> l = {3.0f, 2.5f, 1.0f, 0.0f};
    SeqSampling o = params(0);
    o.history = {0, 0, 1};
    EXPECT_EQ(sample_token(l, o).token, 0) << "no penalty: the history changes nothing";
    o.presence_penalty = 0.6f;  // 0: 3.0 - 0.6 = 2.4; 1: 2.5 - 0.6 = 1.9
    EXPECT_EQ(sample_token(l, o).token, 0);
    o.frequency_penalty = 0.5f;  // 0: 3 - 1 - 0.6 = 1.4; 1: 2.5 - 0.5 - 0.6 = 1.4; 2: 1.0 -> tie, lower id
    EXPECT_EQ(sample_token(l, o).token, 0);
    o.frequency_penalty = 0.6f;  // 0: 1.2; 1: 1.3; 2: 1.0
    const Sampled s = sample_token(l, o);
    EXPECT_EQ(s.token, 1);
    const double z = std::exp(3.0) + std::exp(2.5) + std::exp(1.0) + 1.0;
    EXPECT_NEAR(s.logprob, 2.5 - std::log(z), 1e-6) << "the raw row's value";
    // The distribution the draw uses is the penalized softmax.
    SeqSampling t = o;
    t.temperature = 1.0f;
    std::vector<double> probs(4);
    sampling_distribution(l, t, probs);
    const std::vector<double> adj = {3.0 - 1.2 - 0.6, 2.5 - 0.6 - 0.6, 1.0, 0.0};
    double sum = 0;
    for (double a : adj) sum += std::exp(a);
    for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(probs[k], std::exp(adj[k]) / sum, 1e-6) << k;  // f32 logits
    o.history.push_back(99);  // outside the vocabulary: ignored
    EXPECT_EQ(sample_token(l, o).token, 1);
    o.presence_penalty = 2.5f;
    EXPECT_FALSE(validate(o).ok());
    o.presence_penalty = NAN;
    EXPECT_FALSE(validate(o).ok());
}

// Repetition penalty (as transformers / vLLM): a seen token's logit is divided by it when positive, multiplied when
// not; seen = the prompt's ids and the output so far. Applied before frequency / presence.
TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeSeenLogits) {
    const std::vector<float> l = {2.0f, 1.8f, -0.5f, -0.2f};
    SeqSampling o = params(1.0f);
    o.repetition_penalty = 2.0f;
    o.prompt_tokens = {0, 3};
    o.history = {3};
    std::vector<double> probs(4);
    sampling_distribution(l, o, probs);
    const std::vector<double> adj = {1.0, 1.8, -0.5, -0.4};  // 0: 2 / 2; 3: -0.2 x 2 (seen twice, once counted)
    double sum = 0;
    for (double a : adj) sum += std::exp(a);
    for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(probs[k], std::exp(adj[k]) / sum, 1e-6) << k;
    SeqSampling g = o;
    g.temperature = 0;
    EXPECT_EQ(sample_token(l, g).token, 1) << "the seen top token lost its lead";
    SeqSampling f = o;
    f.frequency_penalty = 1.0f;  // after the repetition penalty, 3: -0.4 - 1 = -1.4; nothing else changes
    sampling_distribution(l, f, probs);
    const std::vector<double> adj2 = {1.0, 1.8, -0.5, -1.4};
    sum = 0;
    for (double a : adj2) sum += std::exp(a);
    for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(probs[k], std::exp(adj2[k]) / sum, 1e-6) << k;
    o.repetition_penalty = 0;
    EXPECT_FALSE(validate(o).ok());
    o.repetition_penalty = 11;
    EXPECT_FALSE(validate(o).ok());
}

// Banned tokens (a request's stop tokens before min_new_tokens) are never drawn; the reported value stays raw.
TEST(Sampler, BannedTokensAreNeverDrawn) {
    const std::vector<float> l = {3.0f, 2.0f, 1.0f};
    SeqSampling g = params(0);
    g.banned = {0, 7};  // 7: outside the vocabulary, ignored
    const Sampled s = sample_token(l, g);
    EXPECT_EQ(s.token, 1);
    EXPECT_NEAR(s.logprob, 2.0 - std::log(std::exp(3.0) + std::exp(2.0) + std::exp(1.0)), 1e-6);
    SeqSampling t = params(1.0f);
    t.banned = {0};
    std::vector<double> probs(3);
    sampling_distribution(l, t, probs);
    EXPECT_EQ(probs[0], 0.0);
    EXPECT_NEAR(probs[1] + probs[2], 1.0, 1e-12);
    for (int64_t i = 0; i < 200; ++i) {
        t.token_index = i;
        EXPECT_NE(sample_token(l, t).token, 0);
    }
}

// logit_bias adds to the row before the draw (and before the penalties); the reported value stays raw.
TEST(Sampler, LogitBiasShiftsTheDraw) {
    const std::vector<float> l = {3.0f, 2.0f, 1.0f};
    SeqSampling g = params(0);
    g.logit_bias = {{2, 2.5f}};
    EXPECT_EQ(sample_token(l, g).token, 2);
    g.logit_bias = {{0, -100.0f}, {9, 5.0f}};  // 9: outside the vocabulary, ignored
    const Sampled s = sample_token(l, g);
    EXPECT_EQ(s.token, 1);
    EXPECT_NEAR(s.logprob, 2.0 - std::log(std::exp(3.0) + std::exp(2.0) + std::exp(1.0)), 1e-6);
    g.logit_bias = {{0, 100.5f}};
    EXPECT_FALSE(validate(g).ok());
    g.logit_bias = {{-1, 1.0f}};
    EXPECT_FALSE(validate(g).ok());
}

models::SeqChunk chunk(int64_t id, int n_tokens, models::LogitsMode mode) {
    models::SeqChunk c;
    c.request_id = id;
    c.token_ids.assign(static_cast<size_t>(n_tokens), 1);
    c.prompt_len = n_tokens;
    c.logits = mode;
    return c;
}

// Seeded random logits; a batch of sequences with kNone / kLast / kAll rows. Each sampled sequence's token equals
// sample_token on its own last row, whatever the batch composition and order: the last pipeline stage, a single
// process and a re-batched step all agree.
TEST(Sampler, SampleStepUsesEachSequencesLastRowAndIgnoresBatching) {
    const int64_t vocab = 97;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    models::ForwardBatch batch;
    batch.seqs = {chunk(10, 5, models::LogitsMode::kNone), chunk(11, 3, models::LogitsMode::kLast),
                  chunk(12, 4, models::LogitsMode::kAll), chunk(13, 2, models::LogitsMode::kLast)};
    std::vector<SeqSampling> s(4);
    s[1] = params(0.7f, 0.9f, 20);
    s[1].seed = 1;
    s[1].token_index = 3;
    s[2] = params(0);
    s[3] = params(1.3f, 1.0f, -1, 0.05f);
    s[3].seed = 1;  // same seed and index as s[1], different logits
    s[3].token_index = 3;
    Tensor logits = Tensor::empty({batch.n_logit_rows(), vocab}, DType::kF32);
    ASSERT_EQ(logits.size(0), 6);
    for (int64_t i = 0; i < logits.numel(); ++i) logits.ptr<float>()[i] = normal(rng);
    const float* l = logits.ptr<const float>();
    auto out = sample_step(batch, s, logits, vocab, /*keep_logits=*/false);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->tokens.size(), 3u);
    EXPECT_FALSE(out->logits.defined());
    const auto row = [&](int64_t r) { return std::span<const float>(l + r * vocab, static_cast<size_t>(vocab)); };
    EXPECT_EQ(out->tokens[0], sample_token(row(0), s[1]).token);  // kLast of seq 1: row 0
    EXPECT_EQ(out->tokens[1], sample_token(row(4), s[2]).token);  // kAll of seq 2: rows 1..4, the last is 4
    EXPECT_EQ(out->tokens[2], sample_token(row(5), s[3]).token);
    EXPECT_EQ(out->logprobs[1], sample_token(row(4), s[2]).logprob);
    EXPECT_TRUE(out->top.empty()) << "no sequence asked for alternatives";
    std::vector<SeqSampling> with_top = s;
    with_top[2].top_logprobs = 4;
    auto top = sample_step(batch, with_top, logits, vocab, /*keep_logits=*/false);
    ASSERT_TRUE(top.ok());
    ASSERT_EQ(top->top.size(), 3u);  // one entry per sampled token
    EXPECT_TRUE(top->top[0].empty());
    EXPECT_EQ(top->top[1], sample_token(row(4), with_top[2]).top);
    EXPECT_EQ(top->top[1].size(), 4u);
    EXPECT_TRUE(top->top[2].empty());
    // The same sequence alone in a step of its own.
    models::ForwardBatch alone;
    alone.seqs = {batch.seqs[3]};
    Tensor one = Tensor::empty({1, vocab}, DType::kF32);
    std::copy(l + 5 * vocab, l + 6 * vocab, one.ptr<float>());
    auto solo = sample_step(alone, std::span(&s[3], 1), one, vocab, /*keep_logits=*/true);
    ASSERT_TRUE(solo.ok());
    EXPECT_EQ(solo->tokens[0], out->tokens[2]);
    EXPECT_TRUE(solo->logits.defined());
    // Refusals: parameters for the wrong number of sequences, a sampled sequence without logit rows, bad shapes,
    // parameters out of range.
    EXPECT_FALSE(sample_step(batch, std::span(s.data(), 3), logits, vocab, false).ok());
    std::vector<SeqSampling> bad = s;
    bad[0] = params(0);
    EXPECT_FALSE(sample_step(batch, bad, logits, vocab, false).ok());
    EXPECT_FALSE(sample_step(batch, s, logits, vocab + 1, false).ok());
    bad = s;
    bad[1].top_p = 0;
    EXPECT_FALSE(sample_step(batch, bad, logits, vocab, false).ok());
}

TEST(EngineSampling, RequestOptionsBecomeStepParameters) {
    const engine::SamplingOptions o{.temperature = 0.5f, .top_p = 0.8f, .top_k = 7, .min_p = 0.1f, .seed = 3};
    const SeqSampling s = engine::seq_sampling(o, 77, 4);
    EXPECT_TRUE(s.sample);
    EXPECT_EQ(s.temperature, 0.5f);
    EXPECT_EQ(s.top_p, 0.8f);
    EXPECT_EQ(s.top_k, 7);
    EXPECT_EQ(s.min_p, 0.1f);
    EXPECT_EQ(s.seed, 77u);
    EXPECT_EQ(s.token_index, 4);
    // Derived seeds: a pure function of (engine seed, request id), distinct across ids and engine seeds.
    EXPECT_EQ(engine::derive_seed(5, 1), engine::derive_seed(5, 1));
    std::set<uint64_t> seeds;
    for (uint64_t e = 0; e < 4; ++e) {
        for (int64_t id = 1; id <= 100; ++id) seeds.insert(engine::derive_seed(e, id));
    }
    EXPECT_EQ(seeds.size(), 400u);
}

}  // namespace
}  // namespace penstock::runtime
