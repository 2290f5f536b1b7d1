// Per-layer kinds from the families' config parsers (layer_kinds.h).
#include "models/layer_kinds.h"

#include <algorithm>

#include "models/glm_dsa.h"
#include "models/kimi_linear.h"

namespace penstock::models {

bool LayerKinds::any(AttentionKind k) const {
    return std::any_of(layers.begin(), layers.end(), [k](const LayerKind& l) { return l.attention == k; });
}

Result<LayerKinds> layer_kinds(const loader::ModelConfig& config) {
    const int64_t n = config.num_hidden_layers;
    LayerKinds out;
    out.bank_rows_at.assign(static_cast<size_t>(n) + 1, 0);
    if (config.model_type == "glm_moe_dsa" || config.model_type == "deepseek_v32") {
        PENSTOCK_ASSIGN_OR_RETURN(const DsaConfig d, parse_dsa_config(config));
        out.index_topk = d.index_topk;
        out.index_n_heads = d.index_n_heads;
        out.index_head_dim = d.index_head_dim;
        for (int64_t i = 0; i < n; ++i) {
            const auto l = static_cast<size_t>(i);
            out.layers.push_back(
                {.attention = AttentionKind::kDsa, .full_indexer = d.full_indexer[l] != 0, .moe = d.moe_mlp[l] != 0});
        }
    } else if (config.model_type == "kimi_linear") {
        PENSTOCK_ASSIGN_OR_RETURN(const KimiConfig k, KimiConfig::parse(config));
        out.mla_output_gate = k.mla_output_gate;
        out.latent_dim = k.latent_dim;
        out.kda = k.kda;
        for (int64_t i = 0; i < n; ++i) {
            const auto l = static_cast<size_t>(i);
            out.layers.push_back({.attention = k.is_kda[l] ? AttentionKind::kKda : AttentionKind::kMla,
                                  .full_indexer = false,
                                  .moe = static_cast<bool>(k.is_moe[l])});
        }
        for (int64_t i = 0; i <= n; ++i) out.bank_rows_at[static_cast<size_t>(i)] = k.n_bank_rows(i);
    } else {
        for (int64_t i = 0; i < n; ++i) out.layers.push_back({.moe = config.is_moe_layer(i)});
    }
    return out;
}

}  // namespace penstock::models
