// Simulated MoE routing for the grouped-GEMM benchmarks (grouped_gemm_bench.cc, fp8_gemm_bench.cc): each of
// `tokens` tokens picks `topk` distinct experts with probabilities from log-normal popularity weights (sigma 0.5), so
// rows per expert ~ tokens * topk / experts with realistic variance. Returns the expert offsets [experts + 1].
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace penstock::bench {

inline std::vector<int32_t> simulate_moe_routing(int64_t tokens, int experts, int topk, std::mt19937& rng) {
    std::normal_distribution<double> normal(0.0, 0.5);
    std::vector<double> w(static_cast<size_t>(experts));
    for (double& x : w) x = std::exp(normal(rng));
    std::discrete_distribution<int> pick(w.begin(), w.end());
    std::vector<int32_t> counts(static_cast<size_t>(experts), 0);
    std::vector<int> chosen;
    for (int64_t t = 0; t < tokens; ++t) {
        chosen.clear();
        while (static_cast<int>(chosen.size()) < topk) {
            const int e = pick(rng);
            if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
        }
        for (int e : chosen) ++counts[static_cast<size_t>(e)];
    }
    std::vector<int32_t> off(1, 0);
    for (int32_t c : counts) off.push_back(off.back() + c);
    return off;
}

}  // namespace penstock::bench
