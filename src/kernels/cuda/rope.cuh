// RoPE's arithmetic on the GPU, shared by kernels::rope (elementwise.cu) and the FP8 attention's q quantiser that
// rotates q's rope columns itself (fp8_tensor_scale.cu), so that the two agree bit for bit. As the reference
// (kernels/ref/rope.cc): angle = float(position) * inv_freq[i], (c, s) = (cos, sin)(angle) * attention_factor, and the
// pair (x1, x2) becomes (x1 c - x2 s, x2 c + x1 s) with every product rounded before the sum (no FMA contraction).
// Device-only; include from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace penstock::cuda::rope_math {

__device__ __forceinline__ float2 cos_sin(int32_t position, float inv_freq, float attention_factor) {
    const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
    return make_float2(__fmul_rn(cosf(angle), attention_factor), __fmul_rn(sinf(angle), attention_factor));
}

// The rotated pair's first (x1 c - x2 s) and second (x2 c + x1 s) element.
__device__ __forceinline__ float first(float x1, float x2, float2 cs) {
    return __fsub_rn(__fmul_rn(x1, cs.x), __fmul_rn(x2, cs.y));
}
__device__ __forceinline__ float second(float x1, float x2, float2 cs) {
    return __fadd_rn(__fmul_rn(x2, cs.x), __fmul_rn(x1, cs.y));
}

}  // namespace penstock::cuda::rope_math
