// Dynamic chunking cost model (SPEC §3): cost(L, x) = k_g·x + k_e·(L + x) + k_a·x·(L + 0.5·x) FLOPs for a chunk of x
// new tokens after L cached ones (plus a capped-pairs term for DSA's sparse attention), counted per pipeline stage
// from a ModelConfig and each layer's kind; the model's cost is the maximum over stages (GEMM-heavy stages bind at
// short prefixes, attention-heavy ones at long prefixes). Pure host arithmetic.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"

namespace penstock::scheduler {

// FLOPs (multiply-add = 2) of one layer range, split by how they scale, counted per layer by its kind
// (models::layer_kinds, from the family's own config parser). Norms, RoPE, activations and gates (O(H) per
// token), embedding, final norm and lm_head (one row per request) are left out.
//   MLA (DeepSeek-V3; Kimi's full-attention layers), MHA form:
//     k_g, per new token: q_a_proj 2·H·q_lora + q_b_proj 2·q_lora·n_heads·qk_head_dim (or q_proj 2·H·n_heads·
//       qk_head_dim without q_lora) + kv_a_proj_with_mqa 2·H·(kv_lora + rope) + o_proj 2·n_heads·v_head_dim·H
//       (+ Kimi's output gate 2·H·n_heads·v_head_dim);
//     k_e, per context token (prefix + chunk) per chunk: kv_b_proj re-expands every key's latent,
//       2·kv_lora·n_heads·(qk_nope + v_head_dim);
//     k_a, per causal query-key pair: QK^T and PV, 2·n_heads·(qk_head_dim + v_head_dim); a chunk has x·(L + 0.5·x)
//       pairs (the 0.5·x counts the causal triangle).
//   DSA (GLM-5.x, DeepSeek-V3.2), the absorbed sparse form: the MLA projections above, plus per token the absorption
//     of q and of the output through kv_b, 2·n_heads·kv_lora·(qk_nope + v_head_dim) (the same FLOPs as expanding
//     one latent: the dense one-shot form that runs while the KV is <= index_topk expands L + x latents instead);
//     k_s, per selected pair: 2·n_heads·(kv_lora + rope + kv_lora) over the 576-d latents, each query reading at most
//     s_cap = index_topk keys. "full" indexer layers add wq_b 2·q_lora·index_heads·index_dim, wk 2·H·index_dim and
//     weights_proj 2·H·index_heads per token and the logits 2·index_heads·index_dim per causal pair (k_a); "shared"
//     layers reuse the indices.
//   KDA (Kimi linear attention), no term that grows with the prefix: q/k/v_proj 3·2·H·qkv, the short conv
//     2·conv·3·qkv, f_a / f_b 2·H·d + 2·d·qkv, b_proj 2·H·n_heads, the output gate (2·H·qkv full rank, else
//     2·H·d + 2·d·qkv), o_proj 2·qkv·H, and the chunked delta rule per head 6·d² (the state read by q and by the
//     chunk's keys, the state update) + 8·C·d (the chunk's K·K^T, Q·K^T, UT transform and intra-chunk output), with
//     d the head dim, qkv = n_heads·d and C the chunk length (64).
//   FFN, by the family's dense / sparse layer list: dense 6·H·intermediate; MoE 6·H·moe_intermediate·(top_k +
//     n_shared) + router 2·H·n_experts (only active experts count); Kimi K3's latent MoE runs the routed experts at
//     latent_dim (6·latent·moe_intermediate·top_k) between a down and an up projection (2·2·H·latent).
struct CostCoefficients {
    double k_g = 0;     // FLOPs per new token
    double k_e = 0;     // FLOPs per context token per chunk
    double k_a = 0;     // FLOPs per causal query-key pair
    double k_s = 0;     // FLOPs per selected pair: each query reads at most s_cap keys (DSA sparse attention)
    int64_t s_cap = 0;  // index_topk; 0 where k_s is 0
};

// What each counted FLOP runs on, for a time model with one measured rate per class (the layout planner; the chunk
// budget of SPEC §3 uses only the total).
enum class OpClass : uint8_t {
    kGemm,             // dense linears: the attention and indexer projections, kv_b's expansion / absorption, the dense
                       // MLP, shared experts, router, Kimi's output gate and latent down / up projections
    kExperts,          // the routed experts' grouped GEMMs
    kAttention,        // the MHA form's causal pairs (MLA)
    kSparseAttention,  // DSA's sparse MLA over the selected latents (k_s)
    kIndexer,          // the DSA indexer's logits per causal pair on "full" layers
    kKda,              // KDA's short conv and chunked delta rule
};
inline constexpr size_t kNumOpClasses = 6;
const char* op_class_name(OpClass c);

// The counts of count_layer_costs split by OpClass; total() is count_layer_costs' result.
struct CostBreakdown {
    std::array<CostCoefficients, kNumOpClasses> by_class{};
    CostCoefficients& operator[](OpClass c) { return by_class[static_cast<size_t>(c)]; }
    const CostCoefficients& operator[](OpClass c) const { return by_class[static_cast<size_t>(c)]; }
    CostCoefficients total() const;
};

// The selected pairs of a chunk of n_tokens queries after prefix_len keys when each reads at most `cap` of the keys
// at and before it: sum over positions p in [prefix_len, prefix_len + n_tokens) of min(p + 1, cap). Closed form.
double capped_pairs(int64_t prefix_len, int64_t n_tokens, int64_t cap);

// cost(L, x) = k_g·x + k_e·(L + x) + k_a·x·(L + 0.5·x) + k_s·capped_pairs(L, x, s_cap) (SPEC §3's form, with the
// sparse term of DSA layers; it is 0 for the other families).
double chunk_cost(const CostCoefficients& c, int64_t prefix_len, int64_t n_tokens);

// Counts layers [layer_begin, layer_end) of `m` as documented above. InvalidArgument for an empty or out-of-range
// layer range, or a family config that does not parse.
[[nodiscard]] Result<CostCoefficients> count_layer_costs(const loader::ModelConfig& m, int64_t layer_begin,
                                                         int64_t layer_end);
// The same counts by the class of work each runs on.
[[nodiscard]] Result<CostBreakdown> count_layer_cost_breakdown(const loader::ModelConfig& m, int64_t layer_begin,
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
