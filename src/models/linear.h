// Linear layers over the op interface: y = x W^T (+ b), W a torch Linear weight [out, in].
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "models/forward_batch.h"
#include "models/weights.h"

namespace penstock::models {

struct Linear {
    Tensor weight;  // [out_features, in_features] f32
    Tensor bias;    // [out_features] f32, or undefined
    int64_t out_features() const { return weight.size(0); }
    int64_t in_features() const { return weight.size(1); }
};

// A temporary on ctx's device (uninitialised), and one filled with `value`.
Tensor scratch(const kernels::Context& ctx, const Shape& shape, DType dtype = DType::kF32);
Tensor scratch_filled(const kernels::Context& ctx, const Shape& shape, float value, DType dtype = DType::kF32);

// The logits head shared by every family: out[i] = lm_head(RMSNorm(hidden[logit_rows[i]])), [n_logit_rows, vocab] f32.
// hidden: [n_tokens, hidden_size] (f32 or bf16) on ctx's device; norm: [hidden_size] f32; lm_head: [vocab,
// hidden_size].
Tensor head_logits(const BatchLayout& layout, const TensorView& hidden, const Tensor& norm, const Tensor& lm_head,
                   float eps, const kernels::Context& ctx);

// Reads `<prefix>.weight` (and `<prefix>.bias` when has_bias) with the given shape.
[[nodiscard]] Result<Linear> take_linear(WeightReader& reader, const std::string& prefix, int64_t out_features,
                                         int64_t in_features, bool has_bias);

// out[n, out_features] = x[n, in_features] @ W^T + b. Rows of x and out may be strided.
void linear_forward(const Linear& layer, const TensorView& x, const TensorView& out, const kernels::Context& ctx);

// A new tensor on ctx's device [n_rows, out_features] = linear(x), in x's dtype.
Tensor linear_new(const Linear& layer, const TensorView& x, const kernels::Context& ctx);

}  // namespace penstock::models
