// Dynamic chunking cost model (SPEC §3): cost(L, x) = k_g·x + k_e·(L + x) + k_a·x·(L + 0.5·x) FLOPs for a chunk of x
// new tokens after L cached ones, counted per pipeline stage from a ModelConfig; the model's cost is the maximum over
// stages (GEMM-heavy stages bind at short prefixes, attention-heavy ones at long prefixes). Pure host arithmetic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"

namespace penstock::scheduler {

// FLOPs (multiply-add = 2) of one layer range, split by how they scale. Counting, per layer (DeepSeek-V3 MLA form):
//   k_g, per new token: q_a_proj 2·H·q_lora + q_b_proj 2·q_lora·n_heads·qk_head_dim (or q_proj 2·H·n_heads·
//       qk_head_dim without q_lora) + kv_a_proj_with_mqa 2·H·(kv_lora + rope) + o_proj 2·n_heads·v_head_dim·H, plus
//       the FFN: dense 6·H·intermediate, or MoE 6·H·moe_intermediate·(top_k + n_shared) + router 2·H·n_experts
//       (only active experts count).
//   k_e, per context token (prefix + chunk) per chunk: the MHA form re-expands every key's latent through kv_b_proj,
//       2·kv_lora·n_heads·(qk_nope + v_head_dim). Norms, RoPE and activations (O(H) per token) are left out.
//   k_a, per causal query-key pair: QK^T over qk_head_dim plus PV over v_head_dim, 2·n_heads·(qk_head_dim +
//       v_head_dim); a chunk has x·(L + 0.5·x) pairs (the 0.5·x counts the causal triangle).
// Embedding, final norm and lm_head run on one row per request, not per token, and are left out. Every layer is
// counted as MLA + dense/MoE: KDA layers (no L-dependent term) and DSA layers (attention capped at index_topk keys)
// are over-estimated, which keeps chunks within budget but shorter than needed. TODO(#4): count them by layer kind.
struct CostCoefficients {
    double k_g = 0;  // FLOPs per new token
    double k_e = 0;  // FLOPs per context token per chunk
    double k_a = 0;  // FLOPs per query-key pair
};

double chunk_cost(const CostCoefficients& c, int64_t prefix_len, int64_t n_tokens);

// Counts layers [layer_begin, layer_end) of `m` as documented above. InvalidArgument for an empty or out-of-range
// layer range.
[[nodiscard]] Result<CostCoefficients> count_layer_costs(const loader::ModelConfig& m, int64_t layer_begin,
                                                         int64_t layer_end);

// The chunk length a request may take: all of `remaining` when it is <= limit, else the largest x <= limit with
// (start + x) a multiple of kPageSize (0 when there is none: the request is not split further this step).
int64_t page_aligned_cut(int64_t start, int64_t remaining, int64_t limit);

class ChunkCostModel final {
public:
    // One entry per pipeline stage; needs >= 1 stage with non-negative coefficients and k_g > 0.
    explicit ChunkCostModel(std::vector<CostCoefficients> stages);

    // One stage per entry of layers_per_stage (consecutive layers; empty = the whole model as one stage).
    // InvalidArgument when a count is < 1 or the counts do not sum to num_hidden_layers.
    [[nodiscard]] static Result<ChunkCostModel> from_model(const loader::ModelConfig& m,
                                                           std::span<const int64_t> layers_per_stage);

    const std::vector<CostCoefficients>& stages() const { return stages_; }
    // max over stages of chunk_cost(stage, prefix_len, n_tokens).
    double cost(int64_t prefix_len, int64_t n_tokens) const;
    // The per-step budget: the cost of one `chunk_tokens` chunk at prefix 0.
    double budget(int64_t chunk_tokens) const { return cost(0, chunk_tokens); }
    // Largest x in [0, limit] with cost(prefix_len, x) <= budget (binary search: cost is non-decreasing in x).
    int64_t max_tokens_within(int64_t prefix_len, double budget, int64_t limit) const;
    // The next chunk of a request alone in a step: page_aligned_cut of what fits the budget, but at least one page
    // (or the whole remainder when it is smaller) so that every prompt makes progress.
    int64_t next_chunk(int64_t prefix_len, int64_t remaining, double budget) const;

private:
    std::vector<CostCoefficients> stages_;
};

}  // namespace penstock::scheduler
