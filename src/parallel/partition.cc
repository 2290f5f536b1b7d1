// Pipeline partitions.
#include "parallel/partition.h"

#include <algorithm>
#include <string>

#include "scheduler/cost_model.h"

namespace penstock::parallel {

Result<std::vector<int64_t>> parse_partition(std::string_view text, int pp_size, int64_t num_layers) {
    std::vector<int64_t> counts;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = text.find(',', pos);
        const std::string tok(text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(tok, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (tok.empty() || used != tok.size() || v < 1) {
            return invalid_argument("--pp-layer-partition: '" + tok + "' is not a positive layer count");
        }
        counts.push_back(v);
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
    }
    if (static_cast<int>(counts.size()) != pp_size) {
        return invalid_argument("--pp-layer-partition has " + std::to_string(counts.size()) + " stages, --pp is " +
                                std::to_string(pp_size));
    }
    int64_t sum = 0;
    for (int64_t c : counts) sum += c;
    if (sum != num_layers) {
        return invalid_argument("--pp-layer-partition sums to " + std::to_string(sum) + " layers, the model has " +
                                std::to_string(num_layers));
    }
    return counts;
}

Result<std::vector<int64_t>> balance_partition(const loader::ModelConfig& config, int pp_size, int64_t chunk_tokens,
                                               int64_t prefix_tokens) {
    const int64_t n = config.num_hidden_layers;
    if (pp_size < 1 || pp_size > n) {
        return invalid_argument("--pp " + std::to_string(pp_size) + " must be in [1, " + std::to_string(n) + "]");
    }
    std::vector<double> cost(static_cast<size_t>(n));
    for (int64_t l = 0; l < n; ++l) {
        PENSTOCK_ASSIGN_OR_RETURN(scheduler::CostCoefficients c, scheduler::count_layer_costs(config, l, l + 1));
        cost[static_cast<size_t>(l)] = scheduler::chunk_cost(c, prefix_tokens, chunk_tokens);
    }
    // The head: final norm + lm_head on the chunk's last positions, counted as one token per sequence is too little
    // to matter; charge a full-vocabulary GEMM row per chunk token as an upper bound for all-logits runs.
    const double head = 2.0 * static_cast<double>(config.hidden_size) * static_cast<double>(config.vocab_size);
    // Binary search on the largest stage cost, greedy fill from the front (last stage carries the head).
    double lo = 0, hi = head;
    for (double c : cost) hi += c;
    const auto fits = [&](double limit, std::vector<int64_t>* counts) {
        counts->assign(static_cast<size_t>(pp_size), 0);
        int64_t layer = 0;
        for (int s = 0; s < pp_size; ++s) {
            const int64_t stages_left = pp_size - s - 1;
            double acc = s == pp_size - 1 ? head : 0.0;
            int64_t taken = 0;
            while (layer < n && n - layer > stages_left &&
                   (taken == 0 || acc + cost[static_cast<size_t>(layer)] <= limit || s == pp_size - 1)) {
                acc += cost[static_cast<size_t>(layer)];
                ++layer;
                ++taken;
            }
            if (taken == 0 || acc > limit * (1 + 1e-12)) return false;
            (*counts)[static_cast<size_t>(s)] = taken;
        }
        return layer == n;
    };
    std::vector<int64_t> best, trial;
    for (int it = 0; it < 100; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (fits(mid, &trial)) {
            hi = mid;
            best = trial;
        } else {
            lo = mid;
        }
    }
    if (best.empty()) {
        best.assign(static_cast<size_t>(pp_size), n / pp_size);
        for (int64_t i = 0; i < n % pp_size; ++i) ++best[static_cast<size_t>(i)];
    }
    return best;
}

std::vector<loader::LayerRange> partition_ranges(const std::vector<int64_t>& counts) {
    std::vector<loader::LayerRange> out;
    int64_t begin = 0;
    for (int64_t c : counts) {
        out.push_back({begin, begin + c});
        begin += c;
    }
    return out;
}

}  // namespace penstock::parallel
