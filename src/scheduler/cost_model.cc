// FLOP counting per layer range and the chunk-length search of the dynamic chunking cost model.
#include "scheduler/cost_model.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"
#include "kv_cache/page_pool.h"

namespace penstock::scheduler {

double chunk_cost(const CostCoefficients& c, int64_t prefix_len, int64_t n_tokens) {
    const double l = static_cast<double>(prefix_len), x = static_cast<double>(n_tokens);
    return c.k_g * x + c.k_e * (l + x) + c.k_a * x * (l + 0.5 * x);
}

Result<CostCoefficients> count_layer_costs(const loader::ModelConfig& m, int64_t layer_begin, int64_t layer_end) {
    if (layer_begin < 0 || layer_end > m.num_hidden_layers || layer_begin >= layer_end) {
        return invalid_argument("cost model layer range [" + std::to_string(layer_begin) + ", " +
                                std::to_string(layer_end) + ") is empty or outside the model's " +
                                std::to_string(m.num_hidden_layers) + " layers");
    }
    const double h = static_cast<double>(m.hidden_size), heads = static_cast<double>(m.num_attention_heads);
    const double qk = static_cast<double>(m.qk_head_dim()), v = static_cast<double>(m.v_head_dim);
    const double kv_lora = static_cast<double>(m.kv_lora_rank), rope = static_cast<double>(m.qk_rope_head_dim);
    const double q_gemm = m.q_lora_rank > 0 ? 2.0 * h * static_cast<double>(m.q_lora_rank) +
                                                  2.0 * static_cast<double>(m.q_lora_rank) * heads * qk
                                            : 2.0 * h * heads * qk;
    const double attn_gemm = q_gemm + 2.0 * h * (kv_lora + rope) + 2.0 * heads * v * h;
    const double dense_ffn = 6.0 * h * static_cast<double>(m.intermediate_size);
    const double moe_ffn = 6.0 * h * static_cast<double>(m.moe_intermediate_size) *
                               static_cast<double>(m.num_experts_per_tok + m.n_shared_experts) +
                           2.0 * h * static_cast<double>(m.n_routed_experts);
    CostCoefficients c;
    for (int64_t layer = layer_begin; layer < layer_end; ++layer) {
        c.k_g += attn_gemm + (m.is_moe_layer(layer) ? moe_ffn : dense_ffn);
        c.k_e += 2.0 * kv_lora * heads * (static_cast<double>(m.qk_nope_head_dim) + v);
        c.k_a += 2.0 * heads * (qk + v);
    }
    return c;
}

int64_t page_aligned_cut(int64_t start, int64_t remaining, int64_t limit) {
    PENSTOCK_CHECK_GE(start, 0);
    PENSTOCK_CHECK_GE(remaining, 0);
    if (remaining <= limit) return remaining;
    if (limit <= 0) return 0;
    const int64_t end = (start + limit) / kv_cache::kPageSize * kv_cache::kPageSize;
    return std::max<int64_t>(end - start, 0);
}

ChunkCostModel::ChunkCostModel(std::vector<CostCoefficients> stages) : stages_(std::move(stages)) {
    PENSTOCK_CHECK(!stages_.empty()) << "a cost model needs at least one stage";
    for (const CostCoefficients& c : stages_) {
        PENSTOCK_CHECK(c.k_g > 0 && c.k_e >= 0 && c.k_a >= 0)
            << "cost coefficients k_g " << c.k_g << " k_e " << c.k_e << " k_a " << c.k_a;
    }
}

Result<ChunkCostModel> ChunkCostModel::from_model(const loader::ModelConfig& m,
                                                  std::span<const int64_t> layers_per_stage) {
    const std::vector<int64_t> whole{m.num_hidden_layers};
    if (layers_per_stage.empty()) layers_per_stage = whole;
    int64_t sum = 0;
    std::string listed;
    for (int64_t n : layers_per_stage) {
        if (n < 1)
            return invalid_argument("pp layer partition: every stage needs >= 1 layer, got " + std::to_string(n));
        sum += n;
        if (!listed.empty()) listed.push_back(',');
        listed.append(std::to_string(n));
    }
    if (sum != m.num_hidden_layers) {
        return invalid_argument("pp layer partition " + listed + " sums to " + std::to_string(sum) +
                                " layers; the model has " + std::to_string(m.num_hidden_layers));
    }
    std::vector<CostCoefficients> stages;
    int64_t begin = 0;
    for (int64_t n : layers_per_stage) {
        PENSTOCK_ASSIGN_OR_RETURN(CostCoefficients c, count_layer_costs(m, begin, begin + n));
        stages.push_back(c);
        begin += n;
    }
    return ChunkCostModel(std::move(stages));
}

double ChunkCostModel::cost(int64_t prefix_len, int64_t n_tokens) const {
    double worst = 0;
    for (const CostCoefficients& c : stages_) worst = std::max(worst, chunk_cost(c, prefix_len, n_tokens));
    return worst;
}

int64_t ChunkCostModel::max_tokens_within(int64_t prefix_len, double budget, int64_t limit) const {
    PENSTOCK_CHECK_GE(limit, 0);
    if (cost(prefix_len, 0) > budget) return 0;
    int64_t lo = 0, hi = limit;  // cost(prefix_len, lo) <= budget holds throughout
    while (lo < hi) {
        const int64_t mid = hi - (hi - lo) / 2;
        if (cost(prefix_len, mid) <= budget) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

int64_t ChunkCostModel::next_chunk(int64_t prefix_len, int64_t remaining, double budget) const {
    const int64_t fits = max_tokens_within(prefix_len, budget, remaining);
    const int64_t cut = page_aligned_cut(prefix_len, remaining, fits);
    if (cut > 0) return cut;
    return page_aligned_cut(prefix_len, remaining, kv_cache::kPageSize);
}

}  // namespace penstock::scheduler
