// kernels/cuda/div_u32.h DivU32 (division by a multiply-high, add and shift) against the hardware division, on
// the host (the device form differs only in computing the high word with __umulhi): every divisor up to 4096 and
// seeded random ones up to 2^31 - 1, each against the numerators around its multiples, around 2^31 and random ones.
// Needs no GPU.
#include "kernels/cuda/div_u32.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tests/kernels/ref_test_util.h"

namespace penstock::test {
namespace {

constexpr uint32_t kMaxN = (1u << 31) - 1;

// Numerators where a wrong multiplier shows first: 0, the top of the range, and either side of multiples of d.
std::vector<uint32_t> numerators(uint32_t d, std::mt19937& rng) {
    std::vector<uint32_t> n = {0, 1, kMaxN, kMaxN - 1, kMaxN / 2};
    for (const uint64_t q : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{kMaxN / d}, uint64_t{kMaxN / d - 1}}) {
        const uint64_t base = q * d;
        for (const int64_t off : {-1, 0, 1}) {
            const int64_t v = static_cast<int64_t>(base) + off;
            if (v >= 0 && v <= kMaxN) n.push_back(static_cast<uint32_t>(v));
        }
    }
    for (int i = 0; i < 64; ++i) n.push_back(rng() & kMaxN);
    return n;
}

TEST(DivU32Test, EqualsDivisionOverTheRange) {
    PENSTOCK_SEEDED(4242);
    std::mt19937 rng(4242);
    std::vector<uint32_t> divisors;
    for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
    for (int i = 0; i < 20000; ++i) divisors.push_back(1 + (rng() % kMaxN));
    for (const uint32_t d : {kMaxN, kMaxN - 1, 1u << 30, (1u << 30) + 1, (1u << 30) - 1}) divisors.push_back(d);
    int64_t bad = 0, checked = 0;
    for (const uint32_t d : divisors) {
        const cuda::DivU32 div(d);
        for (const uint32_t n : numerators(d, rng)) {
            ++checked;
            if (div.div(n) != n / d && bad++ < 5) ADD_FAILURE() << n << " / " << d << ": " << div.div(n);
        }
    }
    EXPECT_EQ(bad, 0) << "of " << checked;
    EXPECT_GT(checked, 1000000);
}

TEST(DivU32Test, RejectsZeroAndTooLarge) {
    EXPECT_DEATH(cuda::DivU32(0u), "DivU32");
    EXPECT_DEATH(cuda::DivU32(1u << 31), "DivU32");
}

}  // namespace
}  // namespace penstock::test
