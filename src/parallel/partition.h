// Pipeline layer partitions: an explicit `--pp-layer-partition 7,5,...` (validated: count = pp size, sum = layers,
// each >= 1) or one chosen by balancing per-layer cost (scheduler's FLOP counts; the last stage also pays the final
// norm and lm_head).
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"

namespace penstock::parallel {

// Parses "a,b,c" into layer counts, validating against pp_size and num_layers (errors name the setting).
[[nodiscard]] Result<std::vector<int64_t>> parse_partition(std::string_view text, int pp_size, int64_t num_layers);

// Layer counts per stage minimising the most expensive stage, costing each layer by its prefill FLOPs for a chunk of
// `chunk_tokens` new tokens after `prefix_tokens` cached ones (MLA cost grows with the prefix; dense/MoE does not).
[[nodiscard]] Result<std::vector<int64_t>> balance_partition(const loader::ModelConfig& config, int pp_size,
                                                             int64_t chunk_tokens, int64_t prefix_tokens);

std::vector<loader::LayerRange> partition_ranges(const std::vector<int64_t>& counts);

}  // namespace penstock::parallel
