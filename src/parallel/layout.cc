// Parallel layout arithmetic.
#include "parallel/layout.h"

#include "core/check.h"

namespace penstock::parallel {

std::string ParallelSizes::to_string() const {
    return "pp=" + std::to_string(pp) + " tp=" + std::to_string(tp) + " ep=" + std::to_string(ep) +
           " cp=" + std::to_string(cp);
}

const char* group_name(GroupKind kind) {
    switch (kind) {
        case GroupKind::kWorld:
            return "world";
        case GroupKind::kPipeline:
            return "pp";
        case GroupKind::kTensor:
            return "tp";
        case GroupKind::kExpert:
            return "ep";
        case GroupKind::kContext:
            return "cp";
    }
    return "?";
}

Status validate_sizes(const ParallelSizes& s, int world_size) {
    if (s.pp < 1 || s.tp < 1 || s.ep < 1 || s.cp < 1) {
        return invalid_argument("parallel sizes must be >= 1 (" + s.to_string() + ")");
    }
    if (s.tp % s.ep != 0) {
        return invalid_argument("--ep " + std::to_string(s.ep) + " must divide --tp " + std::to_string(s.tp));
    }
    if (world_size > 0 && s.world() != world_size) {
        return invalid_argument("pp * cp * tp = " + std::to_string(s.world()) + " does not match the " +
                                std::to_string(world_size) + " launched ranks (" + s.to_string() + ")");
    }
    return ok_status();
}

RankCoords coords_of(const ParallelSizes& s, int world_rank) {
    PENSTOCK_CHECK(world_rank >= 0 && world_rank < s.world()) << "rank " << world_rank << " of " << s.to_string();
    RankCoords c;
    c.world_rank = world_rank;
    c.tp_rank = world_rank % s.tp;
    c.cp_rank = (world_rank / s.tp) % s.cp;
    c.pp_rank = world_rank / (s.tp * s.cp);
    const int moe_tp = s.tp / s.ep;
    c.ep_rank = c.tp_rank / moe_tp;
    c.moe_tp_rank = c.tp_rank % moe_tp;
    return c;
}

int world_rank_of(const ParallelSizes& s, int pp_rank, int cp_rank, int tp_rank) {
    return (pp_rank * s.cp + cp_rank) * s.tp + tp_rank;
}

std::vector<int> group_ranks(const ParallelSizes& s, GroupKind kind, int world_rank) {
    const RankCoords c = coords_of(s, world_rank);
    std::vector<int> out;
    switch (kind) {
        case GroupKind::kWorld:
            for (int r = 0; r < s.world(); ++r) out.push_back(r);
            break;
        case GroupKind::kPipeline:
            for (int p = 0; p < s.pp; ++p) out.push_back(world_rank_of(s, p, c.cp_rank, c.tp_rank));
            break;
        case GroupKind::kTensor:
            for (int t = 0; t < s.tp; ++t) out.push_back(world_rank_of(s, c.pp_rank, c.cp_rank, t));
            break;
        case GroupKind::kContext:
            for (int q = 0; q < s.cp; ++q) out.push_back(world_rank_of(s, c.pp_rank, q, c.tp_rank));
            break;
        case GroupKind::kExpert: {
            const int moe_tp = s.tp / s.ep;
            for (int e = 0; e < s.ep; ++e) {
                out.push_back(world_rank_of(s, c.pp_rank, c.cp_rank, e * moe_tp + c.moe_tp_rank));
            }
            break;
        }
    }
    return out;
}

int group_color(const ParallelSizes& s, GroupKind kind, int world_rank) {
    // The smallest world rank of the group identifies it.
    const std::vector<int> ranks = group_ranks(s, kind, world_rank);
    int m = ranks.front();
    for (int r : ranks) m = r < m ? r : m;
    return m;
}

}  // namespace penstock::parallel
