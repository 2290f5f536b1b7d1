// Per-dtype comparison tolerances for kernel tests: an element passes when |x - ref| <= atol + rtol * |ref|
// (numpy.isclose). One named constant per output dtype; a test that needs a looser bound names a new constant here
// with the reason, never a literal in the test.
#pragma once

namespace penstock::test {

struct Tolerance {
    double atol;
    double rtol;
};

// fp32 output vs the fp32 reference: only the accumulation order differs.
inline constexpr Tolerance kF32Tol{.atol = 1e-5, .rtol = 1e-5};
// bf16 output (8 significand bits: one rounding is 2^-9 ~ 0.2% relative) vs the fp32 reference.
inline constexpr Tolerance kBF16Tol{.atol = 1e-2, .rtol = 1.6e-2};
// f16 output (11 significand bits) vs the fp32 reference.
inline constexpr Tolerance kF16Tol{.atol = 1e-3, .rtol = 1e-3};
// fp8 e4m3 output (4 significand bits: one rounding is 2^-4 = 6.25% relative) compared as values, when a kernel
// cannot be bit-exact (e.g. it quantises a value it computed itself).
inline constexpr Tolerance kF8E4M3Tol{.atol = 2e-3, .rtol = 1.25e-1};

}  // namespace penstock::test
