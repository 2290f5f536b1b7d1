// Host-side weight conversions used by the checkpoint loader: float dtype casts, DeepSeek block-FP8 and
// compressed-tensors FP8 / MXFP4 dequantisation. Sources are raw (possibly unaligned, read-only) views into a mapped
// file; every element is read with memcpy. Numeric policy: decode to fp32, compute in fp32, round once to the target
// (bf16: nearest even).
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

// Dequantises a compressed-tensors FP8 weight (`X.weight` e4m3fn + `X.weight_scale`, a multiplier):
//   scale [] or [1] (per tensor), [n_rows] or [n_rows, 1] (per output channel), or [ceil(n_rows / block_n),
//   ceil(n_cols / block_k)] (per block); f32, bf16 or f16.  out[r, c] = e4m3(weight[r, c]) * scale(r, c).
[[nodiscard]] Result<Tensor> dequantize_fp8_scaled(const TensorView& weight, const TensorView& scale, int64_t block_n,
                                                   int64_t block_k, DType target);

// Dequantises an MXFP4 weight (compressed-tensors "mxfp4-pack-quantized": `X.weight_packed` + `X.weight_scale`):
//   packed [..., n_cols / 2] u8 or i8 (or [..., n_cols] fp4): element 2i in the low nibble of byte i, 2i + 1 in the
//     high nibble; each nibble is e2m1 (sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6)
//   scale  [..., ceil(n_cols / 32)] u8, i8 or e8m0: one power of two 2^(s - 127) per group of 32 consecutive columns
//   out[..., c] = e2m1(nibble(c)) * 2^(scale[..., c / 32] - 127), exact in f32, then rounded to `target`.
// A scale of 0xff (e8m0 NaN) or a shape mismatch -> InvalidArgument.
[[nodiscard]] Result<Tensor> dequantize_mxfp4(const TensorView& packed, const TensorView& scale, DType target);

// An MXFP4 weight (as dequantize_mxfp4 takes it) re-encoded in DeepSeek's block FP8 for the native FP8 kernels:
//   weight    [..., n_rows, n_cols] f8_e4m3fn
//   scale_inv [..., ceil(n_rows / block_n), ceil(n_cols / block_k)] f32, a power of two per block
// so that e4m3(weight) * scale_inv reproduces e2m1 * 2^(s - 127). Per block, scale_inv = 2^k with the smallest k such
// that the block's largest magnitude / 2^k <= 448; every element is then x / 2^k rounded to e4m3 (nearest even).
// e2m1 values have at most two significant bits, so an element is exact unless its group's exponent lies more than
// about 12 binades below the block's largest (it then falls into e4m3's subnormals and rounds, or flushes to 0);
// `n_inexact` (optional) counts those elements. Same errors as dequantize_mxfp4, and block sizes must be positive.
struct Fp8Blocks {
    Tensor weight;
    Tensor scale_inv;
    int64_t n_inexact = 0;
};
[[nodiscard]] Result<Fp8Blocks> mxfp4_to_fp8_blocks(const TensorView& packed, const TensorView& scale, int64_t block_n,
                                                    int64_t block_k);

// A contiguous host copy of a view's bytes in its own dtype.
Tensor copy_raw(const TensorView& src);

}  // namespace penstock::loader
