// The gated activations' bf16 (fast-math) element formulas, shared by the elementwise ops (silu_mul in
// elementwise.cu, situ_mul in kda.cu) and the grouped GEMM's fused gated epilogue (grouped_gemm_tma.cu), so that the
// fused path is bit-exact with the unfused pair: the same instructions on the same bf16-rounded gate and up values.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops_kda.h"

namespace penstock::cuda {

// SiLU(g) * u = g * u / (1 + exp(-g)) with the fast exp / divide (error ~1e-7 relative, far below a bf16 rounding).
// g < -88: the denominator is inf and the result 0.
__device__ __forceinline__ float silu_mul_fast(float g, float u) { return __fdividef(g * u, 1.0f + __expf(-g)); }

// tanh(x) = p / q for SiTU's bf16 path: Eigen's float tanh (a [13/6] rational function of x on [-7.9053, 7.9053],
// saturated outside: tanh(7.9053) = 1 - 2.4e-7), relative error < 3e-7 against tanh in double (checked on a 1e-5
// grid of [-30, 30] and down to 1e-30). No exponential and no branch; q >= 4.9e-3, so SiTU can fold both tanh
// quotients and the sigmoid into one fast divide.
__device__ __forceinline__ void tanh_rational(float x, float& p, float& q) {
    constexpr float kClamp = 7.90531110763549805f;
    x = fminf(fmaxf(x, -kClamp), kClamp);
    const float x2 = x * x;
    p = fmaf(x2, -2.76076847742355e-16f, 2.00018790482477e-13f);
    p = fmaf(x2, p, -8.60467152213735e-11f);
    p = fmaf(x2, p, 5.12229709037114e-08f);
    p = fmaf(x2, p, 1.48572235717979e-05f);
    p = fmaf(x2, p, 6.37261928875436e-04f);
    p = fmaf(x2, p, 4.89352455891786e-03f);
    p *= x;
    q = fmaf(x2, 1.19825839466702e-06f, 1.18534705686654e-04f);
    q = fmaf(x2, q, 2.26843463243900e-03f);
    q = fmaf(x2, q, 4.89352518554385e-03f);
}

// tanh.approx.f32 (one MUFU.TANH; PTX ISA: max relative error 2^-10.987, about a quarter of a bf16 rounding).
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// SiTU(g, u) = beta tanh(g / beta) sigmoid(g) * linear_beta tanh(u / linear_beta) (Kimi K3), bf16 path.
template <SituMath kMath>
__device__ __forceinline__ float situ_mul_fast(float g, float u, float beta, float linear_beta, float inv_beta,
                                               float inv_linear_beta) {
    if constexpr (kMath == SituMath::kRational) {
        // = (beta * linear_beta) * p1 * p2 / (q1 * q2 * (1 + exp(-g))): one exponential and one divide. g < -88
        // makes the denominator inf (or > 2^126) and __fdividef returns 0, the limit.
        float p1, q1, p2, q2;
        tanh_rational(g * inv_beta, p1, q1);
        tanh_rational(u * inv_linear_beta, p2, q2);
        return __fdividef(beta * linear_beta * p1 * p2, q1 * q2 * (1.0f + __expf(-g)));
    } else {
        // Four MUFU operations (two tanh, exp, reciprocal) and a handful of FMA-pipe ones per element.
        return __fdividef(beta * linear_beta * tanh_approx(g * inv_beta) * tanh_approx(u * inv_linear_beta),
                          1.0f + __expf(-g));
    }
}

}  // namespace penstock::cuda
