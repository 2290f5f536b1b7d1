// Sampling: filters (top-k, min-p, top-p) over a stably sorted candidate list, then one counter-based uniform draw.
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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

// log-softmax of the raw row at `token` (finite logits only), in double.
float log_prob(std::span<const float> logits, int32_t token) {
    const float x = logits[static_cast<size_t>(token)];
    if (!std::isfinite(x)) return -std::numeric_limits<float>::infinity();
    double top = -std::numeric_limits<double>::infinity();
    for (float v : logits) {
        if (std::isfinite(v)) top = std::max(top, static_cast<double>(v));
    }
    double sum = 0;
    for (float v : logits) {
        if (std::isfinite(v)) sum += std::exp(static_cast<double>(v) - top);
    }
    return static_cast<float>(static_cast<double>(x) - top - std::log(sum));
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
    return ok_status();
}

Sampled sample_token(std::span<const float> logits, const SeqSampling& s) {
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
    return Sampled{.token = token, .logprob = logits.empty() ? 0.0f : log_prob(logits, token)};
}

void sampling_distribution(std::span<const float> logits, const SeqSampling& s, std::span<double> probs) {
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
        if (!sampling[i].sample) continue;
        if (n_rows == 0) return invalid_argument("sequence " + std::to_string(i) + " is sampled but has no logit row");
        PENSTOCK_RETURN_IF_ERROR(validate(sampling[i]));
        const std::span<const float> last(logits.ptr<const float>() + (row - 1) * vocab, static_cast<size_t>(vocab));
        const Sampled s = sample_token(last, sampling[i]);
        out.tokens.push_back(s.token);
        out.logprobs.push_back(s.logprob);
    }
    if (keep_logits) out.logits = std::move(logits);
    return out;
}

}  // namespace penstock::runtime
