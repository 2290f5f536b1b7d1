// Parallel layout: how world ranks map to pipeline (pp), context (cp), tensor (tp) and expert (ep) coordinates.
// Rank order, tp innermost: world_rank = (pp_rank * cp_size + cp_rank) * tp_size + tp_rank.
// EP lives inside a TP group (tp_size % ep_size == 0): with moe_tp = tp_size / ep_size,
// ep_rank = tp_rank / moe_tp and moe_tp_rank = tp_rank % moe_tp; an EP group is the tp ranks sharing moe_tp_rank.
// Pure functions: no MPI, no CUDA; the communicator factory turns these groups into communicators.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace penstock::parallel {

struct ParallelSizes {
    int pp = 1;
    int tp = 1;
    int ep = 1;
    int cp = 1;
    int world() const { return pp * cp * tp; }
    std::string to_string() const;
};

struct RankCoords {
    int world_rank = 0;
    int pp_rank = 0;
    int cp_rank = 0;
    int tp_rank = 0;
    int ep_rank = 0;
    int moe_tp_rank = 0;
};

enum class GroupKind { kWorld, kPipeline, kTensor, kExpert, kContext };

const char* group_name(GroupKind kind);

// Validates sizes (all >= 1, tp % ep == 0) and, when world_size > 0, that they multiply to world_size.
[[nodiscard]] Status validate_sizes(const ParallelSizes& sizes, int world_size);

RankCoords coords_of(const ParallelSizes& sizes, int world_rank);
int world_rank_of(const ParallelSizes& sizes, int pp_rank, int cp_rank, int tp_rank);

// World ranks of the `kind` group that contains `world_rank`, in group-rank order.
std::vector<int> group_ranks(const ParallelSizes& sizes, GroupKind kind, int world_rank);
// A number identifying that group among all groups of the same kind (the MPI_Comm_split color).
int group_color(const ParallelSizes& sizes, GroupKind kind, int world_rank);

}  // namespace penstock::parallel
