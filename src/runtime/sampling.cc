// Sampling: filters (top-k, min-p, top-p) over a stably sorted candidate list, then one counter-based uniform draw.
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace penstock::runtime {
namespace {

int32_t argmax(std::span<const float> logits) {
    int32_t best = -1;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (!std::isfinite(logits[i])) continue;
        if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best < 0 ? 0 : best;
}

// log of the raw row's softmax denominator (finite logits only), in double; -inf when none is finite.
double log_sum_exp(std::span<const float> logits) {
    double top = -std::numeric_limits<double>::infinity();
    for (float v : logits) {
        if (std::isfinite(v)) top = std::max(top, static_cast<double>(v));
    }
    if (!std::isfinite(top)) return top;
    double sum = 0;
    for (float v : logits) {
        if (std::isfinite(v)) sum += std::exp(static_cast<double>(v) - top);
    }
    return top + std::log(sum);
}

// log-softmax of the raw row at `token`, given its log_sum_exp.
float log_prob(std::span<const float> logits, int32_t token, double lse) {
    const float x = logits[static_cast<size_t>(token)];
    if (!std::isfinite(x)) return -std::numeric_limits<float>::infinity();
    return static_cast<float>(static_cast<double>(x) - lse);
}

// The n most likely finite tokens of the raw row, by descending logit, ties to the lower id.
std::vector<TopLogprob> top_tokens(std::span<const float> logits, int32_t n, double lse) {
    std::vector<int32_t> ids;
    ids.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        if (std::isfinite(logits[i])) ids.push_back(static_cast<int32_t>(i));
    }
    const size_t keep = std::min(ids.size(), static_cast<size_t>(std::max(n, 0)));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(),
                      [&](int32_t a, int32_t b) {
                          const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
                          return la > lb || (la == lb && a < b);
                      });
    std::vector<TopLogprob> out;
    out.reserve(keep);
    for (size_t k = 0; k < keep; ++k) out.push_back({.token = ids[k], .logprob = log_prob(logits, ids[k], lse)});
    return out;
}

struct Candidate {
    int32_t id;
    double p;
};

// Candidates with their probabilities after every filter, sorted by descending probability (ties: lower id first).
std::vector<Candidate> filtered(std::span<const float> logits, const SeqSampling& o) {
    std::vector<Candidate> c;
    c.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        if (std::isfinite(logits[i])) c.push_back({static_cast<int32_t>(i), static_cast<double>(logits[i])});
    }
    if (c.empty()) return c;
    const auto by_logit = [](const Candidate& a, const Candidate& b) {
        return a.p > b.p || (a.p == b.p && a.id < b.id);
    };
    const auto n = static_cast<int64_t>(c.size());
    if (o.top_k > 0 && o.top_k < n) {
        std::partial_sort(c.begin(), c.begin() + o.top_k, c.end(), by_logit);
        c.resize(static_cast<size_t>(o.top_k));
    } else {
        std::sort(c.begin(), c.end(), by_logit);
    }
    const double inv_t = 1.0 / static_cast<double>(o.temperature);
    const double top = c.front().p;
    double sum = 0;
    for (Candidate& x : c) {
        x.p = std::exp((x.p - top) * inv_t);
        sum += x.p;
    }
    for (Candidate& x : c) x.p /= sum;
    if (o.min_p > 0.0f) {
        const double floor = static_cast<double>(o.min_p) * c.front().p;
        while (c.size() > 1 && c.back().p < floor) c.pop_back();
    }
    if (o.top_p < 1.0f) {
        double cum = 0;
        size_t keep = 0;
        while (keep < c.size()) {
            cum += c[keep++].p;
            if (cum >= static_cast<double>(o.top_p)) break;
        }
        c.resize(keep);
    }
    sum = 0;
    for (const Candidate& x : c) sum += x.p;
    for (Candidate& x : c) x.p /= sum;
    return c;
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
    constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            key[0] += kW0;
            key[1] += kW1;
        }
        const uint64_t p0 = kM0 * ctr[0];
        const uint64_t p1 = kM1 * ctr[2];
        ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    }
    return ctr;
}

double sampling_uniform(uint64_t seed, int64_t token_index) {
    const auto index = static_cast<uint64_t>(token_index);
    const std::array<uint32_t, 4> x =
        philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    const uint64_t bits = (static_cast<uint64_t>(x[0]) << 32) | x[1];
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

bool is_greedy(const SeqSampling& s) { return s.temperature == 0.0f || s.top_k == 1; }

Status validate(const SeqSampling& s) {
    if (!std::isfinite(s.temperature) || s.temperature < 0.0f) {
        return invalid_argument("temperature must be a finite number >= 0");
    }
    if (!std::isfinite(s.top_p) || s.top_p <= 0.0f || s.top_p > 1.0f) {
        return invalid_argument("top_p must be a finite number in (0, 1]");
    }
    if (s.top_k < -1) return invalid_argument("top_k must be -1 (all), 0 (all) or a positive count");
    if (!std::isfinite(s.min_p) || s.min_p < 0.0f || s.min_p > 1.0f) {
        return invalid_argument("min_p must be a finite number in [0, 1]");
    }
    if (s.token_index < 0) return invalid_argument("token_index must be >= 0");
    if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
        return invalid_argument("top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "]");
    }
    if (s.next_token < -1) return invalid_argument("next_token must be -1 (none) or a token id");
    for (auto [name, v] :
         {std::pair{"presence_penalty", s.presence_penalty}, {"frequency_penalty", s.frequency_penalty}}) {
        if (!std::isfinite(v) || v < -2.0f || v > 2.0f) {
            return invalid_argument(std::string(name) + " must be a finite number in [-2, 2]");
        }
    }
    if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0.0f || s.repetition_penalty > 10.0f) {
        return invalid_argument("repetition_penalty must be a finite number in (0, 10]");
    }
    for (const auto& [t, b] : s.logit_bias) {
        if (t < 0 || !std::isfinite(b) || b < -100.0f || b > 100.0f) {
            return invalid_argument("logit_bias: a token id >= 0 with a bias in [-100, 100]");
        }
    }
    return ok_status();
}

Sampled score_token(std::span<const float> logits, int32_t token, int32_t top) {
    const double lse = log_sum_exp(logits);
    return Sampled{.token = token,
                   .logprob = log_prob(logits, token, lse),
                   .top = top > 0 ? top_tokens(logits, top, lse) : std::vector<TopLogprob>{}};
}

namespace {

// The row the draw uses: the raw one, or a copy with the logit biases added, the banned tokens at -inf and the
// penalties applied (repetition first, as vLLM, then frequency and presence); out-of-vocabulary ids are ignored.
std::span<const float> penalized(std::span<const float> logits, const SeqSampling& s, std::vector<float>* storage) {
    const bool additive = (s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f) && !s.history.empty();
    const bool repetition = s.repetition_penalty != 1.0f && (!s.history.empty() || !s.prompt_tokens.empty());
    if (!additive && !repetition && s.banned.empty() && s.logit_bias.empty()) return logits;
    storage->assign(logits.begin(), logits.end());
    const auto in_vocab = [&](int32_t t) { return t >= 0 && static_cast<size_t>(t) < logits.size(); };
    for (const auto& [t, b] : s.logit_bias) {
        if (in_vocab(t)) (*storage)[static_cast<size_t>(t)] += b;
    }
    for (int32_t t : s.banned) {
        if (in_vocab(t)) (*storage)[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    }
    if (repetition) {
        std::vector<int32_t> seen = s.prompt_tokens;
        seen.insert(seen.end(), s.history.begin(), s.history.end());
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        for (int32_t t : seen) {
            if (!in_vocab(t)) continue;
            float& x = (*storage)[static_cast<size_t>(t)];
            x = x > 0.0f ? x / s.repetition_penalty : x * s.repetition_penalty;
        }
    }
    if (additive) {
        std::vector<int32_t> sorted = s.history;
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 0; i < sorted.size();) {
            size_t j = i;
            while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
            if (in_vocab(sorted[i])) {
                (*storage)[static_cast<size_t>(sorted[i])] -=
                    s.frequency_penalty * static_cast<float>(j - i) + s.presence_penalty;
            }
            i = j;
        }
    }
    return *storage;
}

}  // namespace

Sampled sample_token(std::span<const float> raw, const SeqSampling& s) {
    std::vector<float> storage;
    const std::span<const float> logits = penalized(raw, s, &storage);
    int32_t token = 0;
    if (is_greedy(s)) {
        token = argmax(logits);
    } else {
        const std::vector<Candidate> c = filtered(logits, s);
        if (!c.empty()) {
            const double u = sampling_uniform(s.seed, s.token_index);
            token = c.back().id;
            double cum = 0;
            for (const Candidate& x : c) {
                cum += x.p;
                if (u < cum) {
                    token = x.id;
                    break;
                }
            }
        }
    }
    if (raw.empty()) return Sampled{.token = token, .logprob = 0.0f, .top = {}};
    return score_token(raw, token, s.top_logprobs);
}

void sampling_distribution(std::span<const float> raw, const SeqSampling& s, std::span<double> probs) {
    std::vector<float> storage;
    const std::span<const float> logits = penalized(raw, s, &storage);
    std::fill(probs.begin(), probs.end(), 0.0);
    if (is_greedy(s)) {
        probs[static_cast<size_t>(argmax(logits))] = 1.0;
        return;
    }
    for (const Candidate& x : filtered(logits, s)) probs[static_cast<size_t>(x.id)] = x.p;
}

Result<StepOutput> sample_step(const models::ForwardBatch& batch, std::span<const SeqSampling> sampling, Tensor logits,
                               int64_t vocab, bool keep_logits) {
    if (sampling.size() != batch.seqs.size()) {
        return invalid_argument("sampling parameters for " + std::to_string(sampling.size()) + " of " +
                                std::to_string(batch.seqs.size()) + " sequences");
    }
    const int64_t rows = batch.n_logit_rows();
    if (logits.ndim() != 2 || logits.size(0) != rows || logits.size(1) != vocab || logits.dtype() != DType::kF32 ||
        logits.device() != Device::kCPU) {
        return invalid_argument("logits " + logits.view().shape_string() + " for " + std::to_string(rows) +
                                " rows of vocabulary " + std::to_string(vocab));
    }
    StepOutput out;
    const bool any_top = std::any_of(sampling.begin(), sampling.end(),
                                     [](const SeqSampling& s) { return s.sample && s.top_logprobs > 0; });
    int64_t row = 0;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const models::SeqChunk& c = batch.seqs[i];
        const auto n = static_cast<int64_t>(c.token_ids.size());
        int64_t n_rows = 0;
        switch (c.logits) {
            case models::LogitsMode::kNone:
                break;
            case models::LogitsMode::kLast:
                n_rows = n > 0 ? 1 : 0;
                break;
            case models::LogitsMode::kAll:
                n_rows = n;
                break;
        }
        row += n_rows;
        if (sampling[i].prompt_logprobs) {
            PENSTOCK_RETURN_IF_ERROR(validate(sampling[i]));
            if (c.logits != models::LogitsMode::kAll) {
                return invalid_argument("sequence " + std::to_string(i) +
                                        " scores its prompt but has no row per token");
            }
            std::vector<Sampled>& scored = out.prompt.emplace_back();
            for (int64_t j = 0; j < n; ++j) {
                const int32_t target = j + 1 < n ? c.token_ids[static_cast<size_t>(j + 1)] : sampling[i].next_token;
                if (target < 0) break;
                if (target >= vocab)
                    return invalid_argument("prompt token " + std::to_string(target) + " out of range");
                const std::span<const float> r(logits.ptr<const float>() + (row - n + j) * vocab,
                                               static_cast<size_t>(vocab));
                scored.push_back(score_token(r, target, sampling[i].top_logprobs));
            }
        }
        if (!sampling[i].sample) continue;
        if (n_rows == 0) return invalid_argument("sequence " + std::to_string(i) + " is sampled but has no logit row");
        PENSTOCK_RETURN_IF_ERROR(validate(sampling[i]));
        const std::span<const float> last(logits.ptr<const float>() + (row - 1) * vocab, static_cast<size_t>(vocab));
        Sampled s = sample_token(last, sampling[i]);
        out.tokens.push_back(s.token);
        out.logprobs.push_back(s.logprob);
        if (any_top) out.top.push_back(std::move(s.top));
    }
    if (keep_logits) out.logits = std::move(logits);
    return out;
}

}  // namespace penstock::runtime
