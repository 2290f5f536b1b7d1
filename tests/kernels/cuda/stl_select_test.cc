// kernels/cuda/stl_select.cuh (the device port of libstdc++'s nth_element / partial_sort that dsa_topk uses to break
// ties exactly as the CPU reference) against the std:: originals, on the host: the whole permutation must be equal
// for tie-heavy arrays (few levels, NaN, -FLT_MAX) of lengths 1..5000 on both paths; and the chunk-screened heap select
// that dsa_topk's replay runs for partial_sort rows keeps heap_select's heap. Needs no GPU.
#include "kernels/cuda/stl_select.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

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

// dsa_topk's block_heap_select keeps only heap_select's heap: each chunk of the row is screened against the root at
// the chunk's start, and heap_select_step runs on the survivors alone. Modelled here serially, the heap must equal
// heap_select's first k entries, in order, for every chunk size; screening against the final root instead (a bound
// too high) must differ somewhere, or the comparison would not see a wrong screen.
std::vector<Entry> screened_heap(const std::vector<Entry>& a, int k, int chunk, bool final_root) {
    const Greater comp;
    std::vector<Entry> heap(a.begin(), a.begin() + k);
    cuda::stl::make_heap(heap.data(), heap.data() + k, comp);
    Entry bound{};
    if (final_root) {
        std::vector<Entry> b = a;
        cuda::stl::heap_select(b.data(), b.data() + k, b.data() + b.size(), comp);
        bound = b[0];
    }
    const auto n = static_cast<int>(a.size());
    for (int c = k; c < n; c += chunk) {
        const Entry root = final_root ? bound : heap[0];
        std::vector<Entry> survivors;
        for (int i = c; i < std::min(n, c + chunk); ++i) {
            if (comp(a[static_cast<size_t>(i)], root)) survivors.push_back(a[static_cast<size_t>(i)]);
        }
        for (const Entry& e : survivors) cuda::stl::heap_select_step(heap.data(), heap.data() + k, e, comp);
    }
    return heap;
}

TEST(StlSelectPort, ScreenedHeapSelectKeepsTheHeap) {
    const uint32_t seed = 4601;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    int wrong_bound_differs = 0;
    for (int it = 0; it < 3000; ++it) {
        const int n = 2 + static_cast<int>(rng() % 5000);
        const int k = 1 + static_cast<int>(rng() % static_cast<uint32_t>(std::max(1, n / (it % 3 == 0 ? 2 : 64))));
        const int levels = 1 + static_cast<int>(rng() % 8);
        const bool rising = it % 5 == 0;
        std::vector<Entry> a(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
            float v = rising ? static_cast<float>(i / 8 + static_cast<int>(rng() % 4))
                             : ((rng() % 3 == 0) ? static_cast<float>(rng() % static_cast<uint32_t>(levels)) : 0.0f);
            if (rng() % 50 == 0) v = NAN;
            if (rng() % 40 == 0) v = -FLT_MAX;
            a[static_cast<size_t>(i)] = {v, i};
        }
        std::vector<Entry> want = a;
        cuda::stl::heap_select(want.data(), want.data() + k, want.data() + n, Greater{});
        for (const int chunk : {1, 7, 256, 8192}) {
            const std::vector<Entry> got = screened_heap(a, k, chunk, false);
            for (int i = 0; i < k; ++i) {
                ASSERT_EQ(got[static_cast<size_t>(i)].second, want[static_cast<size_t>(i)].second)
                    << "iteration " << it << " n " << n << " k " << k << " chunk " << chunk << " position " << i;
            }
        }
        const std::vector<Entry> wrong = screened_heap(a, k, 256, true);
        for (int i = 0; i < k; ++i) {
            if (wrong[static_cast<size_t>(i)].second != want[static_cast<size_t>(i)].second) {
                ++wrong_bound_differs;
                break;
            }
        }
    }
    EXPECT_GT(wrong_bound_differs, 100) << "screening against the final root should change some heaps";
}

}  // namespace
}  // namespace penstock::test
