// kernels/cuda/stl_select.cuh (the device port of libstdc++'s nth_element / partial_sort that dsa_topk uses to break
// ties exactly as the CPU reference) against the std:: originals, on the host: the whole permutation must be equal
// for tie-heavy arrays (few levels, NaN, -FLT_MAX) of lengths 1..5000 on both paths. Needs no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/stl_select.cuh"
#include "tests/kernels/ref_test_util.h"

namespace penstock::test {
namespace {

using Entry = std::pair<float, int64_t>;

// The reference's comparator (kernels/ref/dsa.cc): NaN first, then descending.
struct Greater {
    bool operator()(const Entry& x, const Entry& y) const {
        return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
    }
};

TEST(StlSelectPort, SamePermutationAsLibstdcxx) {
    const uint32_t seed = 4600;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    for (int it = 0; it < 4000; ++it) {
        const int n = 1 + static_cast<int>(rng() % (it < 2000 ? 200 : 5000));
        const int k = 1 + static_cast<int>(rng() % static_cast<uint32_t>(n));
        const int levels = 1 + static_cast<int>(rng() % 6);
        std::vector<Entry> a(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
            float v = (rng() % 3 == 0) ? static_cast<float>(rng() % static_cast<uint32_t>(levels)) : 0.0f;
            if (rng() % 50 == 0) v = NAN;
            if (rng() % 40 == 0) v = -FLT_MAX;
            a[static_cast<size_t>(i)] = {v, i};
        }
        std::vector<Entry> b = a;
        const bool partial = it % 2 == 1;
        if (partial) {
            std::partial_sort(a.begin(), a.begin() + k, a.end(), Greater{});
            cuda::stl::partial_sort(b.data(), b.data() + k, b.data() + n, Greater{});
        } else {
            std::nth_element(a.begin(), a.begin() + (k - 1), a.end(), Greater{});
            cuda::stl::nth_element(b.data(), b.data() + (k - 1), b.data() + n, Greater{});
        }
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(a[static_cast<size_t>(i)].second, b[static_cast<size_t>(i)].second)
                << "iteration " << it << " n " << n << " k " << k << (partial ? " partial_sort" : " nth_element")
                << " position " << i;
        }
    }
}

}  // namespace
}  // namespace penstock::test
