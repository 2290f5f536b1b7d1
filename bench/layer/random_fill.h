// Seeded random fills on the device for the layer benchmark's weights and activations (a host fill of one
// DeepSeek-V3 MoE layer's 22.5 GB of expert weights would take minutes). Host-compilable (no CUDA headers).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace penstock::bench {

// Every element of `t` (contiguous, f32 or bf16) = mean + stddev * u, u uniform in [-sqrt(3), sqrt(3)) from a counter
// hash of (seed, index): unit variance, never all zeros. Enqueued on `stream` (a cudaStream_t).
void fill_uniform(const TensorView& t, uint64_t seed, float mean, float stddev, void* stream);

}  // namespace penstock::bench
