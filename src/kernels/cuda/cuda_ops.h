// The CUDA launchers: one per op, same name and Params as kernels/ops.h and the reference in kernels/ref/, namespace
// penstock::cuda. Each checks shapes once on the host, then enqueues on `stream` (a cudaStream_t as void*) and
// returns without synchronising. Tensors must be device views on the current device; the stream must belong to it.
// Host-compilable (no CUDA headers): kernels/ops.cc includes it for dispatch.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace penstock::kernels {

// float -> float8_e4m3fn, elementwise, bit-exact with penstock::float_to_e4m3 (PyTorch semantics: round to nearest
// even, |x| > 464 / inf / NaN -> signed NaN 0x7f). Any shape, both contiguous with equal numel.
// TODO(#6): moves to kernels/ops.h once ref::quantize_e4m3 exists.
struct Fp8QuantParams {
    TensorView out;  // [n] f8_e4m3 or u8
    TensorView in;   // [n] f32 or bf16
};

}  // namespace penstock::kernels

namespace penstock::cuda {

// Launch mapping of rms_norm. kAuto picks per shape (warp per row up to dim 1024, else block per row); the others
// force one mapping so tests and benchmarks cover every variant.
enum class RmsNormVariant : uint8_t { kAuto, kWarpPerRow, kBlockPerRow };

// in/out: f32 (as kernels/ops.h) or bf16 (both the same dtype); weight f32 or bf16. fp32 accumulation; bf16 output
// is rounded once (nearest even) from the fp32 result. out may alias in; rows may be strided, last dim contiguous.
void rms_norm(const kernels::RmsNormParams& p, void* stream);
void rms_norm(const kernels::RmsNormParams& p, RmsNormVariant variant, void* stream);

void quantize_e4m3(const kernels::Fp8QuantParams& p, void* stream);

}  // namespace penstock::cuda
