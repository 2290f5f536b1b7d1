// float -> float8_e4m3fn on the GPU, bit-exact with penstock::float_to_e4m3 (core/dtype.h, PyTorch's
// Tensor.to(torch.float8_e4m3fn)): round to nearest even on the e4m3 grid; |x| > 464, +-inf and NaN give the signed
// NaN pattern 0x7f / 0xff (and the exact inverse, e4m3_to_f32_exact). Not the hardware cvt.rn.satfinite.e4m3x2 (which saturates to 448). Integer arithmetic
// only, so the result does not depend on -ftz / fast-math. Host-callable too (tests check it against core).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PENSTOCK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PENSTOCK_HOST_DEVICE inline
#endif

namespace penstock::cuda {

// `bits` is the IEEE-754 binary32 pattern of the input.
PENSTOCK_HOST_DEVICE uint8_t e4m3_from_f32_bits(uint32_t bits) {
    const uint32_t sign = (bits >> 24) & 0x80u;
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x43e80000u) return static_cast<uint8_t>(sign | 0x7fu);  // > 464, inf, NaN
    if (abs >= 0x3c800000u) {
        // Normal e4m3 (|x| >= 2^-6): keep 3 mantissa bits, round to nearest even on the 20 dropped bits. A carry
        // out of the mantissa bumps the exponent, which is exactly right; 464 rounds to even, i.e. 448 (0x7e).
        const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
        const uint32_t exp = (rounded >> 23) - 120u;  // rebias 127 -> 7
        const uint32_t man = (rounded >> 20) & 0x7u;
        return static_cast<uint8_t>(sign | (exp << 3) | man);
    }
    // Subnormal e4m3: q = round_even(|x| * 2^9) in [0, 8] (8 is the smallest normal, 0x08). |x| = s * 2^(e - 150)
    // with s the 24-bit significand, so q = s >> (141 - e) rounded; the shift is >= 21 here, and >= 25 gives 0
    // (|x| * 2^9 < 0.5). f32 subnormals (e == 0) are below 2^-126 and give 0 too.
    const uint32_t e = abs >> 23;
    const uint32_t shift = 141u - e;
    if (e == 0 || shift >= 25u) return static_cast<uint8_t>(sign);
    const uint32_t s = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t q = s >> shift;
    const uint32_t rem = s & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    const uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
    return static_cast<uint8_t>(sign | (q + up));
}

// float8_e4m3fn -> float, exact (penstock::e4m3_to_float): S.EEEE.MMM, bias 7, subnormals at exponent 0, and
// S.1111.111 is NaN (there is no infinity).
PENSTOCK_HOST_DEVICE float e4m3_to_f32_exact(uint8_t v) {
    const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
    const uint32_t exp = (v >> 3) & 0xfu;
    const uint32_t man = v & 0x7u;
    uint32_t bits;
    if ((v & 0x7fu) == 0x7fu) {
        bits = sign | 0x7fc00000u;
    } else if (exp == 0) {
        // man * 2^-9: exact in f32 (man < 8), built from its own normal pattern.
        if (man == 0) {
            bits = sign;
        } else {
            const uint32_t lz = man >= 4 ? 0u : (man >= 2 ? 1u : 2u);  // leading zeros in the 3-bit mantissa
            const uint32_t e = 127u - 9u + 2u - lz;                    // value = 1.f * 2^(2 - lz - 9)
            const uint32_t f = (man << (lz + 1u)) & 0x7u;              // drop the leading one
            bits = sign | (e << 23) | (f << 20);
        }
    } else {
        bits = sign | ((exp + 120u) << 23) | (man << 20);
    }
    float out;
    __builtin_memcpy(&out, &bits, sizeof(out));
    return out;
}

// x / s from r = 1 / s (both IEEE round-to-nearest) by Markstein's correction: q = x r, e = x - q s (exact in one
// fma), q + e r. Markstein's theorem makes that the correctly rounded quotient, i.e. IEEE x / s, whenever no step
// overflows or underflows. The FP8 quantisers' operands (s = max(amax, 1e-4) / 448 finite, |x| <= amax) satisfy that
// for every quotient the e4m3 cast can tell apart: |x / s| <= 448.0001, and a quotient >= 2^-10 (below it the cast
// gives +-0) has |x| >= 2e-10, far from f32 underflow. Smaller quotients may differ from x / s in the last f32 bits
// but cast to the same e4m3 byte (a zero keeps x's sign); NaN x gives NaN. The caller divides instead when r is 0 (s
// infinite).
// Element-wise, no branch and no call: what the fused FP8 epilogues use instead of a division per element
// (tests/kernels/cuda/quantize_e4m3_test.cc checks it against x / s on the host).
PENSTOCK_HOST_DEVICE float div_by_recip(float x, float s, float r) {
    const float q = x * r;
    const float e = fmaf(-q, s, x);
    return e == 0.0f ? q : fmaf(e, r, q);  // q exact: q itself, which keeps the sign of a zero quotient
}

#if defined(__CUDACC__)
__device__ __forceinline__ uint8_t float_to_e4m3(float x) { return e4m3_from_f32_bits(__float_as_uint(x)); }

// The e4m3 bytes of (lo, hi) (lo in bits 0-7, hi in bits 8-15) by the hardware cast, cvt.rn.satfinite.e4m3x2.f32
// (sm_89+; one instruction for two values), with NaN stored as 0x7f as the quantisers store it. Equal to
// e4m3_from_f32_bits for |x| <= 464 (round to nearest even, subnormals included); above, the hardware saturates to
// +-448 where the software gives NaN, so callers pass only |x| <= 464: the block quantisers' quotients x / s with
// s = amax / 448 are at most 448.0001. tests/kernels/cuda/fp8_gemm_test.cc (ActQuantCastsEveryTiePoint) checks every
// e4m3 rounding tie and its neighbours, every bf16 value and 2^20 f32 patterns in that range.
__device__ __forceinline__ uint32_t e4m3x2_in_range(float lo, float hi) {
    uint32_t r;
    asm("{\n\t.reg .b16 t;\n\tcvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\n\tcvt.u32.u16 %0, t;\n\t}"
        : "=r"(r)
        : "f"(lo), "f"(hi));
    if (isnan(lo)) r = (r & 0xff00u) | 0x7fu;
    if (isnan(hi)) r = (r & 0x00ffu) | 0x7f00u;
    return r;
}

// The e4m3 bytes of four values (a in bits 0-7 .. d in bits 24-31) by two hardware casts, for values that are not NaN
// and |x| <= 464: e4m3x2_in_range without its NaN fix-ups. The quantisers take it for a block whose amax and 1 / s
// are finite (then no quotient is NaN, and each is <= 448.0001), which saves the fix-ups' compare, mask and select per
// value: the per-row quantiser of FP8 attention's q was held by its integer pipe at 2.4 TB/s
// (docs/perf/2026-12-04-s30.md).
__device__ __forceinline__ uint32_t e4m3x4_finite(float a, float b, float c, float d) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo, hi;\n\tcvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\tcvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;"
        "\n\tmov.b32 %0, {lo, hi};\n\t}"
        : "=r"(r)
        : "f"(a), "f"(b), "f"(c), "f"(d));
    return r;
}

// fp8_act_quant's scale of a group (kernels/ops.h Fp8ActQuantParams), s = max(amax, 1e-4) / 448, and its
// reciprocal; quotient(v) is v / s from that one reciprocal (div_by_recip: the division's bytes; an infinite amax
// makes rc 0 and divides), ready for the hardware cast (e4m3x2_in_range: |v / s| <= 448.0001). Every writer of
// fp8_act_quant's bytes takes them from here (act_quant_group; the FP8 attention's per-row-and-head epilogue).
// (A template so that only the device pass compiles the rounding intrinsics.)
template <class F = float>
struct ActQuantStepOf {
    F s, rc;
    __device__ __forceinline__ explicit ActQuantStepOf(F amax)
        : s(__fdiv_rn(fmaxf(amax, F{1e-4f}), F{448.0f})), rc(__frcp_rn(s)) {}
    __device__ __forceinline__ F quotient(F v) const { return rc != F{0} ? div_by_recip(v, s, rc) : __fdiv_rn(v, s); }
};
using ActQuantStep = ActQuantStepOf<>;

// fp8_act_quant's per-group step for a thread holding N (a multiple of 4) of the group's values, once the group's
// amax is known: returns s (ActQuantStep) and writes the e4m3 bytes of v[j] / s, four per word (v[4 i] in the low
// byte of q[i]).
template <int N>
__device__ __forceinline__ float act_quant_group(const float (&v)[N], float amax, uint32_t (&q)[N / 4]) {
    static_assert(N % 4 == 0, "whole words of e4m3 bytes");
    const ActQuantStep step(amax);
    float y[N];
    if (step.rc != 0.0f) {  // step.quotient, its branch taken once for the group rather than per element
#pragma unroll
        for (int j = 0; j < N; ++j) y[j] = div_by_recip(v[j], step.s, step.rc);
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) y[j] = __fdiv_rn(v[j], step.s);
    }
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
        q[i] = e4m3x2_in_range(y[4 * i], y[4 * i + 1]) | (e4m3x2_in_range(y[4 * i + 2], y[4 * i + 3]) << 16);
    }
    return step.s;
}
#endif

}  // namespace penstock::cuda
