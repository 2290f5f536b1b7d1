// fill_uniform: splitmix64 of (seed, index) -> a uniform in [-sqrt(3), sqrt(3)), scaled and shifted.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "bench/layer/random_fill.h"
#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace penstock::bench {

namespace {

__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    return (2.0f * u - 1.0f) * 1.7320508f;
}

template <class T>
__global__ void fill_kernel(T* out, int64_t n, uint64_t seed, float mean, float stddev) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = mean + stddev * hash_uniform(seed, static_cast<uint64_t>(i));
        if constexpr (sizeof(T) == 2) {
            out[i] = __float2bfloat16_rn(v);
        } else {
            out[i] = v;
        }
    }
}

}  // namespace

void fill_uniform(const TensorView& t, uint64_t seed, float mean, float stddev, void* stream) {
    PENSTOCK_CHECK(t.is_contiguous()) << "fill_uniform: contiguous tensors only";
    const int64_t n = t.numel();
    if (n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 132 * 32));
    if (t.dtype == DType::kBF16) {
        fill_kernel<<<blocks, threads, 0, s>>>(static_cast<__nv_bfloat16*>(t.data), n, seed, mean, stddev);
    } else {
        PENSTOCK_CHECK(t.dtype == DType::kF32) << "fill_uniform: f32 or bf16";
        fill_kernel<<<blocks, threads, 0, s>>>(static_cast<float*>(t.data), n, seed, mean, stddev);
    }
    PENSTOCK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace penstock::bench
