// Host-side weight conversions used by the checkpoint loader: float dtype casts and DeepSeek block-FP8
// dequantisation. Sources are raw (possibly unaligned, read-only) views into a mapped file; every element is read
// with memcpy. Numeric policy: decode to fp32, compute in fp32, round once to the target (bf16: nearest even).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"

namespace penstock::loader {

// True for the dtypes convert_float accepts as a source (F32, BF16, F16).
bool is_float_source(DType dtype);

// Copies a contiguous host view of F32/BF16/F16 into a new contiguous host tensor of `target` (F32 or BF16).
[[nodiscard]] Result<Tensor> convert_float(const TensorView& src, DType target);

// Dequantises a DeepSeek-style FP8 weight:
//   weight    [n_rows, n_cols] f8_e4m3fn (row major, `out` x `in`)
//   scale_inv [ceil(n_rows / block_n), ceil(n_cols / block_k)] f32 (bf16/f16 also accepted), a multiplier
//   out[r, c] = e4m3(weight[r, c]) * scale_inv[r / block_n, c / block_k]   in fp32, then rounded to `target`.
// Edge blocks may be partial. Shape or dtype mismatches -> InvalidArgument describing both shapes.
[[nodiscard]] Result<Tensor> dequantize_fp8_blocks(const TensorView& weight, const TensorView& scale_inv,
                                                   int64_t block_n, int64_t block_k, DType target);

// A contiguous host copy of a view's bytes in its own dtype.
Tensor copy_raw(const TensorView& src);

}  // namespace penstock::loader
