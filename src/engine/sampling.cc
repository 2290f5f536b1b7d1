// Sampling: filters (top-k, min-p, top-p) over a stably sorted candidate list, then one uniform draw.
#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace penstock::engine {
namespace {

uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

bool is_greedy(const SamplingOptions& o) { return o.temperature == 0.0f || o.top_k == 1; }

int32_t argmax(std::span<const float> logits) {
    int32_t best = -1;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (!std::isfinite(logits[i])) continue;
        if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best < 0 ? 0 : best;
}

struct Candidate {
    int32_t id;
    double p;
};

// Candidates with their probabilities after every filter, sorted by descending probability (ties: lower id first).
std::vector<Candidate> filtered(std::span<const float> logits, const SamplingOptions& o) {
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

Status validate(const SamplingOptions& o) {
    if (!std::isfinite(o.temperature) || o.temperature < 0.0f) {
        return invalid_argument("temperature must be a finite number >= 0");
    }
    if (!std::isfinite(o.top_p) || o.top_p <= 0.0f || o.top_p > 1.0f) {
        return invalid_argument("top_p must be a finite number in (0, 1]");
    }
    if (o.top_k < -1) return invalid_argument("top_k must be -1 (all), 0 (all) or a positive count");
    if (!std::isfinite(o.min_p) || o.min_p < 0.0f || o.min_p > 1.0f) {
        return invalid_argument("min_p must be a finite number in [0, 1]");
    }
    return ok_status();
}

Rng::Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& s : s_) s = splitmix64(&x);
}

uint64_t Rng::next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, Rng* rng) {
    if (is_greedy(o)) return argmax(logits);
    const std::vector<Candidate> c = filtered(logits, o);
    const double u = rng->uniform();
    if (c.empty()) return 0;
    double cum = 0;
    for (const Candidate& x : c) {
        cum += x.p;
        if (u < cum) return x.id;
    }
    return c.back().id;
}

void sampling_distribution(std::span<const float> logits, const SamplingOptions& o, std::span<double> probs) {
    std::fill(probs.begin(), probs.end(), 0.0);
    if (is_greedy(o)) {
        probs[static_cast<size_t>(argmax(logits))] = 1.0;
        return;
    }
    for (const Candidate& x : filtered(logits, o)) probs[static_cast<size_t>(x.id)] = x.p;
}

}  // namespace penstock::engine
