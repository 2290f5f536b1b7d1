// FLOP counting per layer range and the chunk-length search of the dynamic chunking cost model.
#include "scheduler/cost_model.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"
#include "kv_cache/page_pool.h"
#include "models/layer_kinds.h"

namespace penstock::scheduler {

double capped_pairs(int64_t prefix_len, int64_t n_tokens, int64_t cap) {
    if (n_tokens <= 0 || cap <= 0) return 0.0;
    // Position p reads min(p + 1, cap) keys; over p + 1 in [a, b]:
    const double a = static_cast<double>(prefix_len) + 1.0, b = static_cast<double>(prefix_len + n_tokens);
    const double c = static_cast<double>(cap);
    if (b <= c) return 0.5 * (a + b) * (b - a + 1.0);
    if (a > c) return c * (b - a + 1.0);
    return 0.5 * (a + c) * (c - a + 1.0) + c * (b - c);
}

double chunk_cost(const CostCoefficients& c, int64_t prefix_len, int64_t n_tokens) {
    const double l = static_cast<double>(prefix_len), x = static_cast<double>(n_tokens);
    double cost = c.k_g * x + c.k_e * (l + x) + c.k_a * x * (l + 0.5 * x);
    if (c.k_s > 0) cost += c.k_s * capped_pairs(prefix_len, n_tokens, c.s_cap);
    return cost;
}

const char* op_class_name(OpClass c) {
    switch (c) {
        case OpClass::kGemm:
            return "gemm";
        case OpClass::kExperts:
            return "experts";
        case OpClass::kAttention:
            return "attention";
        case OpClass::kSparseAttention:
            return "sparse_attention";
        case OpClass::kIndexer:
            return "indexer";
        case OpClass::kKda:
            return "kda";
    }
    return "?";
}

CostCoefficients CostBreakdown::total() const {
    CostCoefficients t;
    for (const CostCoefficients& c : by_class) {
        t.k_g += c.k_g;
        t.k_e += c.k_e;
        t.k_a += c.k_a;
        t.k_s += c.k_s;
        t.s_cap = std::max(t.s_cap, c.s_cap);
    }
    return t;
}

namespace {

// The per-layer counts of cost_model.h, one function per layer kind, each FLOP term added to its OpClass.
struct LayerCounter {
    const loader::ModelConfig& m;
    double h = static_cast<double>(m.hidden_size), heads = static_cast<double>(m.num_attention_heads);
    double qk = static_cast<double>(m.qk_head_dim()), v = static_cast<double>(m.v_head_dim);
    double nope = static_cast<double>(m.qk_nope_head_dim);
    double kv_lora = static_cast<double>(m.kv_lora_rank), rope = static_cast<double>(m.qk_rope_head_dim);
    double q_lora = static_cast<double>(m.q_lora_rank);

    // q_a / q_b (or q_proj), kv_a_proj_with_mqa, o_proj.
    double mla_projections() const {
        const double q = m.q_lora_rank > 0 ? 2.0 * h * q_lora + 2.0 * q_lora * heads * qk : 2.0 * h * heads * qk;
        return q + 2.0 * h * (kv_lora + rope) + 2.0 * heads * v * h;
    }
    void mla(CostBreakdown& b, bool output_gate) const {
        b[OpClass::kGemm].k_g += mla_projections() + (output_gate ? 2.0 * h * heads * v : 0.0);
        b[OpClass::kGemm].k_e += 2.0 * kv_lora * heads * (nope + v);
        b[OpClass::kAttention].k_a += 2.0 * heads * (qk + v);
    }
    void dsa(CostBreakdown& b, const models::LayerKinds& k, bool full_indexer) const {
        b[OpClass::kGemm].k_g += mla_projections() + 2.0 * heads * kv_lora * (nope + v);
        CostCoefficients& sparse = b[OpClass::kSparseAttention];
        PENSTOCK_CHECK(sparse.s_cap == 0 || sparse.s_cap == k.index_topk)
            << "one index_topk per model: " << sparse.s_cap << " vs " << k.index_topk;
        sparse.k_s += 2.0 * heads * (kv_lora + rope + kv_lora);
        sparse.s_cap = k.index_topk;
        if (full_indexer) {
            const double ih = static_cast<double>(k.index_n_heads), id = static_cast<double>(k.index_head_dim);
            b[OpClass::kGemm].k_g += 2.0 * q_lora * ih * id + 2.0 * h * id + 2.0 * h * ih;
            b[OpClass::kIndexer].k_a += 2.0 * ih * id;
        }
    }
    void kda(CostBreakdown& b, const models::KdaOptions& o) const {
        const double d = static_cast<double>(o.dims.head_dim), n = static_cast<double>(o.dims.n_heads);
        const double qkv = n * d, chunk = static_cast<double>(o.chunk_size);
        const double gate = o.full_rank_output_gate ? 2.0 * h * qkv : 2.0 * h * d + 2.0 * d * qkv;
        b[OpClass::kGemm].k_g +=
            3.0 * 2.0 * h * qkv + (2.0 * h * d + 2.0 * d * qkv) + 2.0 * h * n + gate + 2.0 * qkv * h;
        b[OpClass::kKda].k_g +=
            2.0 * static_cast<double>(o.dims.conv_kernel) * 3.0 * qkv + n * (6.0 * d * d + 8.0 * chunk * d);
    }
    void ffn(CostBreakdown& b, bool moe, int64_t latent_dim = 0) const {
        if (!moe) {
            b[OpClass::kGemm].k_g += 6.0 * h * static_cast<double>(m.intermediate_size);
            return;
        }
        const double inter = static_cast<double>(m.moe_intermediate_size);
        const double top_k = static_cast<double>(m.num_experts_per_tok);
        const double shared = 6.0 * h * inter * static_cast<double>(m.n_shared_experts);
        const double router = 2.0 * h * static_cast<double>(m.n_routed_experts);
        b[OpClass::kGemm].k_g += shared + router;
        if (latent_dim > 0) {
            const double latent = static_cast<double>(latent_dim);
            b[OpClass::kExperts].k_g += 6.0 * latent * inter * top_k;
            b[OpClass::kGemm].k_g += 4.0 * h * latent;
        } else {
            b[OpClass::kExperts].k_g += 6.0 * h * inter * top_k;
        }
    }
};

}  // namespace

Result<CostBreakdown> count_layer_cost_breakdown(const loader::ModelConfig& m, int64_t layer_begin, int64_t layer_end) {
    if (layer_begin < 0 || layer_end > m.num_hidden_layers || layer_begin >= layer_end) {
        return invalid_argument("cost model layer range [" + std::to_string(layer_begin) + ", " +
                                std::to_string(layer_end) + ") is empty or outside the model's " +
                                std::to_string(m.num_hidden_layers) + " layers");
    }
    const LayerCounter count{.m = m};
    PENSTOCK_ASSIGN_OR_RETURN(const models::LayerKinds kinds, models::layer_kinds(m));
    CostBreakdown b;
    for (int64_t layer = layer_begin; layer < layer_end; ++layer) {
        const models::LayerKind& l = kinds.layers[static_cast<size_t>(layer)];
        switch (l.attention) {
            case models::AttentionKind::kMla:
                count.mla(b, kinds.mla_output_gate);
                break;
            case models::AttentionKind::kDsa:
                count.dsa(b, kinds, l.full_indexer);
                break;
            case models::AttentionKind::kKda:
                count.kda(b, kinds.kda);
                break;
        }
        count.ffn(b, l.moe, kinds.latent_dim);
    }
    return b;
}

Result<CostCoefficients> count_layer_costs(const loader::ModelConfig& m, int64_t layer_begin, int64_t layer_end) {
    PENSTOCK_ASSIGN_OR_RETURN(const CostBreakdown b, count_layer_cost_breakdown(m, layer_begin, layer_end));
    return b.total();
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
        PENSTOCK_CHECK(c.k_g > 0 && c.k_e >= 0 && c.k_a >= 0 && c.k_s >= 0 && (c.k_s == 0 || c.s_cap > 0))
            << "cost coefficients k_g " << c.k_g << " k_e " << c.k_e << " k_a " << c.k_a << " k_s " << c.k_s
            << " s_cap " << c.s_cap;
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
