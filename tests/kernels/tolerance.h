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
// A bf16 output vs the bf16 reference on the same inputs: both round an f32 (reference: double) result once, so they
// differ by at most one bf16 ulp (<= 2^-7 relative), where the unrounded values straddle a rounding boundary. atol
// covers results below ~1e-30, which the GPU's fast (flush-to-zero) intrinsics may return as 0.
inline constexpr Tolerance kBF16OneUlp{.atol = 1e-30, .rtol = 0.0078125};
// The same for a bf16 result the GPU reduces with f32 partial sums (attn_res_mix on bf16 activations: each thread's
// share of the logits and the mix of the candidate rows in f32) vs the double-accumulating bf16 reference: one ulp,
// plus an absolute f32 accumulation error where the mix cancels to near zero (~1e-6 of the O(1) rows in the tests;
// kBF16OneUlp's purely relative bound cannot hold there).
inline constexpr Tolerance kBF16OneUlpF32Sums{.atol = 2e-5, .rtol = 0.0078125};
// f16 output (11 significand bits) vs the fp32 reference.
inline constexpr Tolerance kF16Tol{.atol = 1e-3, .rtol = 1e-3};
// fp8 e4m3 output (4 significand bits: one rounding is 2^-4 = 6.25% relative) compared as values, when a kernel
// cannot be bit-exact (e.g. it quantises a value it computed itself).
inline constexpr Tolerance kF8E4M3Tol{.atol = 2e-3, .rtol = 1.25e-1};

// CPU reference (f32) vs a naive double computation written in the test (tests/kernels/ref_*_test.cc).
// Bit-exact: copies, gathers, integer outputs.
inline constexpr Tolerance kExact{.atol = 0.0, .rtol = 0.0};
// Elementwise math: one or two f32 roundings plus an f32 transcendental (exp, cos, sin).
inline constexpr Tolerance kF32Elementwise{.atol = 1e-6, .rtol = 1e-6};
// Reductions (norms, softmax, attention, routing weights) whose reference accumulates in double.
inline constexpr Tolerance kF32Reduction{.atol = 1e-5, .rtol = 1e-5};
// sgemm with inner dims up to ~100: f32 accumulation of O(k) terms of magnitude <= 1.
inline constexpr Tolerance kF32Gemm{.atol = 2e-5, .rtol = 1e-4};

// GPU kernels vs the double-accumulating reference (tests/kernels/cuda/).
// Block-scaled FP8 GEMM, f32 out, vs the reference's f32 GEMM over dequantised operands (outputs O(1) in the tests):
// the products are exact, but the tensor cores sum fp8 products inside a 128-wide k block with ~14 mantissa bits
// (DeepSeek-V3 report, H800) before the f32 promotion, and the reference rounds each dequantised operand once.
inline constexpr Tolerance kFp8GemmF32{.atol = 1e-3, .rtol = 1e-3};
// DSA indexer logits: each head's head_dim-long dot product and the sum over heads accumulate in f32 on the GPU
// (the reference: double, rounded once), and the head sum cancels (weights of both signs).
inline constexpr Tolerance kF32IndexerLogits{.atol = 5e-5, .rtol = 1e-4};
// The opt-in IndexerVariant::kWgmmaFp8 only (kAuto never takes it): Hopper's e4m3 wgmma accumulates the head_dim
// products inside the tensor core with reduced precision (~14 bits; DeepSeek-V3 report), measured up to 2.5e-4
// absolute at |logit| ~0.3 (NMSE ~1e-8) on these inputs. Not a loosening of kF32IndexerLogits, which every variant
// kAuto can choose still meets.
inline constexpr Tolerance kFp8AccumIndexerLogits{.atol = 5e-4, .rtol = 1e-3};
// KDA gated delta rule: the GPU carries the state in f32 across every token of a call (the reference: double) and
// the chunkwise form exponentiates differences of f32 cumulative log decays (|G| up to ~1e3 over a chunk).
inline constexpr Tolerance kF32DeltaRule{.atol = 1e-4, .rtol = 1e-3};
// The same on tensor cores (DeltaRulePrecision::kTensorCore): every product operand is rounded once to tf32 (unit
// roundoff 2^-11 ~ 4.9e-4) before fp32 accumulation over 64-128 terms, and the state's own rounding compounds across
// chunks; outputs and state entries are O(0.1-1) in these tests.
inline constexpr Tolerance kTf32DeltaRule{.atol = 2e-3, .rtol = 1e-2};
// The split form (DeltaRulePrecision::kTensorCoreSplit): every product operand (the chunk-parallel pass's Ksc, Qsc, the
// B tiles, -L, T_bb and the solve's X blocks; the state pass's W, U, Q e^G, K e^{G_last - G}, A, V' and the state
// itself) is rounded to bf16 (unit roundoff 2^-9, 4x tf32's), so the tf32 bounds scale by 4.
inline constexpr Tolerance kBf16DeltaRule{.atol = 8e-3, .rtol = 4e-2};

}  // namespace penstock::test
