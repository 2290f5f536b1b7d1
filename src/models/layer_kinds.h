// What each decoder layer of a supported family is (attention kind, DSA indexer role, MoE or dense FFN), read by the
// family's own config parser, for the code that counts per layer without building a model: the scheduler's chunk
// cost model and the layout planner.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "models/kda_layer.h"

namespace penstock::models {

enum class AttentionKind : uint8_t {
    kMla,  // DeepSeek-V3, Kimi's full-attention layers (dense MLA)
    kDsa,  // GLM-5.x / DeepSeek-V3.2 (MLA with the lightning indexer's sparse top-k)
    kKda,  // Kimi linear attention
};

struct LayerKind {
    AttentionKind attention = AttentionKind::kMla;
    bool full_indexer = false;  // DSA: the layer runs its indexer ("full"); false: it reuses the last one's ("shared")
    bool moe = false;           // routed experts, else the dense MLP
};

struct LayerKinds {
    std::vector<LayerKind> layers;  // [num_hidden_layers]
    bool mla_output_gate = false;   // Kimi: the MLA layers' output gate
    int64_t latent_dim = 0;         // Kimi K3: the routed experts' latent width (0: plain MoE)
    int64_t index_topk = 0, index_n_heads = 0, index_head_dim = 0;  // DSA
    KdaOptions kda;                                                 // Kimi KDA layers
    std::vector<int64_t> bank_rows_at;  // [num_hidden_layers + 1]: AttnRes bank rows that exist before layer l
    bool any(AttentionKind k) const;
};

// DeepSeek-V3 and unknown families: MLA with MoE per ModelConfig::is_moe_layer. Errors are the family parsers'.
[[nodiscard]] Result<LayerKinds> layer_kinds(const loader::ModelConfig& config);

}  // namespace penstock::models
