// The stream top-k's sampled bound (kernels/cuda/dsa_topk_sample.h), simulated on the host: for causal rows of
// GLM-5.3's top 2048 from 5.7K to 1M keys (and top 16 / 4096), a strided sample's key of rank sample_rank bounds
// the candidates (the row's keys at or above it). The bound misses when fewer than top_k keys reach it or more than
// the candidate list holds; a miss only costs time (the kernel then selects from global memory), so the test holds
// the miss rate, not correctness: under 1% of rows, with the candidates about 1.2-2.4 top_k on average (more for a
// small top_k). Needs no GPU.
#include "kernels/cuda/dsa_topk_sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "ref_test_util.h"

namespace penstock::test {
namespace {

namespace ts = cuda::topk_sample;

struct BoundStats {
    int misses = 0;
    double mean_ratio = 0.0;  // candidates / top_k, averaged over the rows
};

// `rows` rows of `visible` keys drawn by `draw`; the candidate count of each row's sampled bound.
BoundStats simulate(int visible, int top_k, int rows, std::mt19937& rng, const std::function<float()>& draw) {
    const auto cap = static_cast<int>(ts::candidate_cap(top_k));
    BoundStats st;
    std::vector<float> row(static_cast<size_t>(visible));
    for (int r = 0; r < rows; ++r) {
        for (float& x : row) x = draw();
        // The kernel's sample may fill both shared buffers (2 cap keys).
        const int n_sample = ts::sample_size(visible, top_k, 2 * cap);
        std::vector<float> sample(static_cast<size_t>(n_sample));
        for (int j = 0; j < n_sample; ++j) {
            sample[static_cast<size_t>(j)] = row[static_cast<size_t>(static_cast<int64_t>(j) * visible / n_sample)];
        }
        const unsigned rank = ts::sample_rank(n_sample, visible, top_k);
        std::nth_element(sample.begin(), sample.begin() + (rank - 1), sample.end(), std::greater<float>());
        const float bound = sample[rank - 1];
        const auto n_cand = std::count_if(row.begin(), row.end(), [&](float x) { return x >= bound; });
        if (n_cand < top_k || n_cand > cap) ++st.misses;
        st.mean_ratio += static_cast<double>(n_cand) / top_k / rows;
    }
    (void)rng;
    return st;
}

TEST(DsaTopkSample, BoundRarelyMissesFromShortToMillionKeyRows) {
    const uint32_t seed = 4700;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    struct Case {
        int visible, top_k, rows;
    };
    for (const Case& c : std::vector<Case>{{5700, 2048, 400},
                                           {20000, 2048, 400},
                                           {65536, 2048, 300},
                                           {131072, 2048, 200},
                                           {400000, 2048, 60},
                                           {1048576, 2048, 40},
                                           {60000, 16, 300},
                                           {60000, 4096, 300}}) {
        for (const bool gaussian : {true, false}) {
            const BoundStats st =
                simulate(c.visible, c.top_k, c.rows, rng, [&] { return gaussian ? normal(rng) : uniform(rng); });
            std::printf("visible %d top_k %d %s: %d misses of %d rows, candidates %.2f top_k\n", c.visible, c.top_k,
                        gaussian ? "normal" : "uniform", st.misses, c.rows, st.mean_ratio);
            EXPECT_LE(st.misses * 100, c.rows) << "visible " << c.visible << " top_k " << c.top_k;
            EXPECT_GE(st.mean_ratio, 1.2) << "visible " << c.visible << " top_k " << c.top_k;
            // A small top_k keeps a wider relative margin (few sample keys above its top_k-th), far below the cap.
            EXPECT_LE(st.mean_ratio, c.top_k >= 1024 ? 2.4 : 8.0) << "visible " << c.visible << " top_k " << c.top_k;
        }
    }
}

// The capacity and the sample sizes at GLM-5.3's top 2048: the figures dsa_topk.cu's comments and kernels.md quote.
TEST(DsaTopkSample, GlmShapes) {
    EXPECT_EQ(ts::candidate_cap(2048), 5632);
    EXPECT_EQ(ts::candidate_cap(16), 4096);
    EXPECT_EQ(ts::sample_size(65536, 2048, 2 * 5632), 1024);
    EXPECT_EQ(ts::sample_size(131072, 2048, 2 * 5632), 2048);
    EXPECT_EQ(ts::sample_size(1048576, 2048, 2 * 5632), 11264);  // capped: both buffers
    EXPECT_EQ(ts::sample_size(6000, 2048, 2 * 5632), 256);
    EXPECT_EQ(ts::sample_rank(1024, 65536, 2048), 54u);  // fs 32: 32 + 19.8 + 2, rounded up
}

}  // namespace
}  // namespace penstock::test
