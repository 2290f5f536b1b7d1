// DivU32: division of 32-bit unsigned integers by a run-time divisor fixed at launch, without a division instruction
// on the device. Host-includable (tests/kernels/cuda/div_u32_test.cc checks it on the host); launch_util.cuh
// includes it for the kernels.
#pragma once

#include <cstdint>

#include "core/check.h"

#if defined(__CUDACC__)
#define PENSTOCK_DIV_HD __host__ __device__ __forceinline__
#else
#define PENSTOCK_DIV_HD inline
#endif

namespace penstock::cuda {

// n / d for 32-bit n < 2^31 and 1 <= d < 2^31 by a multiply-high, an add and a shift (Granlund and Montgomery's
// round-up method): l = ceil(log2 d), mul = floor(2^32 (2^l - d) / d) + 1, n / d = (umulhi(n, mul) + n) >> l. The sum
// stays below 2^32 because n < 2^31. For the flat thread -> (row, column block) mappings of the row-wise kernels,
// where a 64-bit division (a called routine: the GPU has no divide instruction) costs dozens of instructions per
// thread.
struct DivU32 {
    uint32_t mul = 0, shift = 0, d = 1;
    DivU32() = default;
    explicit DivU32(uint32_t divisor) : d(divisor) {
        PENSTOCK_CHECK(divisor >= 1 && divisor < (1u << 31)) << "DivU32: divisor " << divisor;
        while ((uint64_t{1} << shift) < divisor) ++shift;
        mul = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor) / divisor + 1);
    }
    PENSTOCK_DIV_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
        const uint32_t hi = __umulhi(n, mul);
#else
        const auto hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> 32);
#endif
        return (hi + n) >> shift;
    }
};

}  // namespace penstock::cuda
