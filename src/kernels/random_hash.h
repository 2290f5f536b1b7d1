// The counter-based uniform of kernels::fill_random, shared by the CPU reference and the CUDA kernel so that both
// produce the same bits: splitmix64 of (seed, index) -> 24 random bits -> u in [-sqrt(3), sqrt(3)) (unit variance),
// value = mean + stddev * u with each operation rounded separately (no fused multiply-add on either side).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PENSTOCK_HOST_DEVICE __host__ __device__
#else
#define PENSTOCK_HOST_DEVICE
#endif

namespace penstock::kernels {

PENSTOCK_HOST_DEVICE inline float random_unit_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    // (2 * k - 2^24) / 2^24 is exact in f32 for k < 2^24; one rounded multiply by sqrt(3).
    const auto k = static_cast<int32_t>(z >> 40);
    const float centred = static_cast<float>(2 * k - (1 << 24)) * (1.0f / 16777216.0f);
#if defined(__CUDA_ARCH__)
    return __fmul_rn(centred, 1.7320508f);
#else
    return centred * 1.7320508f;
#endif
}

PENSTOCK_HOST_DEVICE inline float random_value(uint64_t seed, uint64_t i, float mean, float stddev) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(mean, __fmul_rn(stddev, random_unit_uniform(seed, i)));
#else
    const volatile float scaled = stddev * random_unit_uniform(seed, i);  // no contraction into an FMA
    return mean + scaled;
#endif
}

// A 64-bit seed derived from a base seed and a name (FNV-1a of the name mixed with the base): per-tensor streams.
inline uint64_t random_seed_for(uint64_t base, const char* name, uint64_t extra = 0) {
    uint64_t h = 0xcbf29ce484222325ull ^ base;
    for (const char* c = name; *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
    h ^= extra + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

}  // namespace penstock::kernels
