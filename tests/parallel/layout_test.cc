// Parallel layout arithmetic: rank coordinates, group membership and validation (pure; no MPI).
#include "parallel/layout.h"

#include <gtest/gtest.h>

#include <set>

namespace penstock::parallel {
namespace {

TEST(Layout, TensorRanksAreInnermost) {
    const ParallelSizes s{.pp = 2, .tp = 4, .ep = 2, .cp = 1};
    EXPECT_EQ(group_ranks(s, GroupKind::kTensor, 5), (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(group_ranks(s, GroupKind::kPipeline, 5), (std::vector<int>{1, 5}));
    // moe_tp = 2: ep_rank = tp_rank / 2, ep groups = tp ranks sharing tp_rank % 2.
    EXPECT_EQ(group_ranks(s, GroupKind::kExpert, 5), (std::vector<int>{5, 7}));
    EXPECT_EQ(group_ranks(s, GroupKind::kExpert, 6), (std::vector<int>{4, 6}));
    const RankCoords c = coords_of(s, 7);
    EXPECT_EQ(c.pp_rank, 1);
    EXPECT_EQ(c.tp_rank, 3);
    EXPECT_EQ(c.ep_rank, 1);
    EXPECT_EQ(c.moe_tp_rank, 1);
}

TEST(Layout, ContextSitsBetweenPipelineAndTensor) {
    const ParallelSizes s{.pp = 2, .tp = 2, .ep = 1, .cp = 3};
    ASSERT_EQ(s.world(), 12);
    const RankCoords c = coords_of(s, 9);  // 9 = (1 * 3 + 1) * 2 + 1
    EXPECT_EQ(c.pp_rank, 1);
    EXPECT_EQ(c.cp_rank, 1);
    EXPECT_EQ(c.tp_rank, 1);
    EXPECT_EQ(group_ranks(s, GroupKind::kContext, 9), (std::vector<int>{7, 9, 11}));
}

TEST(Layout, GroupsOfEachKindPartitionTheWorld) {
    for (const ParallelSizes s : {ParallelSizes{8, 1, 1, 1}, ParallelSizes{2, 4, 4, 1}, ParallelSizes{1, 8, 2, 1},
                                  ParallelSizes{2, 2, 1, 2}, ParallelSizes{4, 2, 2, 1}}) {
        for (GroupKind k : {GroupKind::kPipeline, GroupKind::kTensor, GroupKind::kExpert, GroupKind::kContext}) {
            std::set<int> seen;
            std::set<int> colors;
            for (int r = 0; r < s.world(); ++r) {
                const auto g = group_ranks(s, k, r);
                EXPECT_NE(std::find(g.begin(), g.end(), r), g.end()) << s.to_string() << " " << group_name(k);
                colors.insert(group_color(s, k, r));
                for (int m : g) EXPECT_EQ(group_color(s, k, m), group_color(s, k, r));
                seen.insert(r);
            }
            EXPECT_EQ(static_cast<int>(seen.size()), s.world());
            const int group_size = static_cast<int>(group_ranks(s, k, 0).size());
            EXPECT_EQ(static_cast<int>(colors.size()) * group_size, s.world()) << s.to_string() << " " << group_name(k);
        }
    }
}

TEST(Layout, ValidationNamesTheProblem) {
    EXPECT_TRUE(validate_sizes({.pp = 2, .tp = 2, .ep = 2, .cp = 1}, 4).ok());
    const Status bad_ep = validate_sizes({.pp = 1, .tp = 4, .ep = 3, .cp = 1}, 4);
    EXPECT_FALSE(bad_ep.ok());
    EXPECT_NE(bad_ep.message().find("--ep 3"), std::string::npos) << bad_ep.to_string();
    const Status bad_world = validate_sizes({.pp = 2, .tp = 2, .ep = 1, .cp = 1}, 3);
    EXPECT_FALSE(bad_world.ok());
    EXPECT_NE(bad_world.message().find("3 launched ranks"), std::string::npos) << bad_world.to_string();
    EXPECT_FALSE(validate_sizes({.pp = 0, .tp = 1, .ep = 1, .cp = 1}, 0).ok());
}

}  // namespace
}  // namespace penstock::parallel
