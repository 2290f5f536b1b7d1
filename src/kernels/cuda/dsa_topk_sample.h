// The stream top-k's sampled bound (dsa_topk.cu, dsa_topk_stream_kernel): how many keys a long row's strided sample
// takes, and which sample rank bounds the row's candidates. Host-compilable and free of CUDA headers, so that a CPU
// test can simulate how often the bound misses (tests/kernels/dsa_topk_sample_test.cc).
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define PENSTOCK_TOPK_HD __host__ __device__ __forceinline__
#else
#define PENSTOCK_TOPK_HD inline
#endif

namespace penstock::cuda::topk_sample {

// The candidate list's capacity (keys and indices in shared memory): 2.75 top_k rounded up to 256, at least 4096
// (5632 at top 2048). The launcher also checks it fits the device's shared memory.
PENSTOCK_TOPK_HD int64_t candidate_cap(int64_t top_k) {
    const int64_t cap = (top_k * 11 / 4 + 255) / 256 * 256;
    return cap < 4096 ? 4096 : cap;
}

// Keys in the sample of a row of `visible` keys: about 32 expected at or above the row's top_k-th key
// (n_sample * top_k / visible >= 32), at least 256, at most max_sample (the shared memory the sample is held in).
PENSTOCK_TOPK_HD int sample_size(int visible, int top_k, int max_sample) {
    const int64_t want = (int64_t{32} * visible + top_k - 1) / top_k;
    const int64_t at_least = want < 256 ? 256 : want;
    return static_cast<int>(at_least < max_sample ? at_least : max_sample);
}

// The sample rank whose key bounds the candidates (the keys at or above it): the expected count of sample keys at or
// above the row's top_k-th key (fs) plus 3.5 standard deviations (binomial: sqrt(fs)) plus 2. Fewer than top_k
// candidates (a miss: the kernel then selects from global memory) is then rare, and the candidates number about
// top_k (1 + 3.5 / sqrt(fs)): 1.6 top_k at fs = 32.
PENSTOCK_TOPK_HD unsigned sample_rank(int n_sample, int visible, int top_k) {
    const float fs = static_cast<float>(top_k) * static_cast<float>(n_sample) / static_cast<float>(visible);
    const float r = ceilf(fs + 3.5f * sqrtf(fs) + 2.0f);
    return static_cast<unsigned>(r < static_cast<float>(n_sample) ? r : static_cast<float>(n_sample));
}

}  // namespace penstock::cuda::topk_sample
