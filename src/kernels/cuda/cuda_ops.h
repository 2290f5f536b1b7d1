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

// The ops of kernels/ops.h. Same Params and semantics as the CPU reference (kernels/ref/), with these extensions and
// limits (checked on the host; device-side metadata such as ids and offsets is not validated: a bad index skips its
// row instead of aborting):
//  - Activations f32 or bf16 wherever the reference takes f32: fp32 math, bf16 outputs rounded once (nearest even).
//    All activation tensors of one call share a dtype unless noted; weights (layer_norm) f32 or bf16; index and
//    metadata tensors i32 on the device; attention lse, routing logits/weights and unpermute weights stay f32.
//  - copy: any same-dtype copy of 1/2/4-byte elements, or f32 <-> bf16. fill: f32, bf16, i32.
//  - gather_rows, paged_write, paged_gather, moe_permute: byte copies of rows (any dtype).
//  - embedding: table f32 or bf16, out f32 or bf16.
//  - gemm, grouped_gemm: cuBLASLt, CUBLAS_COMPUTE_32F; a and b both f32 or both bf16; out a's dtype or f32.
//    grouped_gemm: bf16 calls with small groups (or under stream capture) run the device-side kernel (offsets read on
//    the device, no sync; grouped_gemm.h); the rest read the offsets back to the host (copy + stream sync).
//  - attention: q, k, v, out one dtype; d_qk <= 576, d_v <= 512. The bf16 MLA absorbed form (n_kv_heads 1, d_qk 576,
//    v = k[..., :512], aligned rows: mla_tc.h) runs on tensor cores; everything else on the CUDA-core kernel.
//  - fp8_act_quant, fp8_gemm, fp8_grouped_gemm: kernels/cuda/fp8_gemm.h (cuBLASLt block scaling for dense calls,
//    a wgmma kernel with device offsets for grouped ones, CUDA-core fallbacks for the rest).
//  - moe_routing: logits f32 or bf16; n_group <= 64, n_experts such that 4 warps' scores fit 48 KiB (<= ~1500).
//  - moe_align / moe_unpermute take stream-ordered scratch (cudaMallocAsync). TODO(#7): from the Workspace.
// kernels::device_memory on CUDA (allocator.cc): cudaMemGetInfo on alloc's device (the current one when alloc is null),
// free plus the bytes a CudaCachingAllocator alloc holds cached for reuse.
kernels::DeviceMemory device_memory(Allocator* alloc);
void transfer(const kernels::TransferParams& p, void* stream);  // cudaMemcpyAsync, any direction
void copy(const kernels::CopyParams& p, void* stream);
void fill(const kernels::FillParams& p, void* stream);
void fill_random(const kernels::FillRandomParams& p, void* stream);
void gather_rows(const kernels::GatherRowsParams& p, void* stream);
void grouped_gemm(const kernels::GroupedGemmParams& p, void* stream);
// Fused into the device kernel's epilogue (grouped_gemm.h grouped_gemm_glu_tma) when out is bf16, I % 128 == 0 and
// cuda::grouped_gemm would take the device kernel for the [2 I] problem; else grouped_gemm into the caller's gate_up
// buffer and the activation op. PENSTOCK_GROUPED_GLU=unfused forces the second (A/B measurements).
void grouped_gemm_glu(const kernels::GroupedGluGemmParams& p, void* stream);
// Whether grouped_gemm_glu takes the unfused form for these parameters (kernels::grouped_gemm_glu_needs_scratch).
bool grouped_gemm_glu_needs_scratch(const kernels::GroupedGluGemmParams& p, void* stream);
// The unfused tail of both gated GEMMs: out = act(gate) * up over gate_up = [gate | up] ([n_rows, 2 I], halves of I
// columns; out [n_rows, I] may be gate_up's gate half), GroupedGluGemmParams' activation (silu_mul / situ_mul).
void glu_from_gate_up(kernels::GluKind act, float situ_beta, float situ_linear_beta, const TensorView& out,
                      const TensorView& gate_up, void* stream);
// PENSTOCK_GROUPED_GLU=unfused (read once per process): both gated GEMMs take their unfused form.
bool grouped_glu_forced_unfused();
void paged_write(const kernels::PagedWriteParams& p, void* stream);
void paged_gather(const kernels::PagedGatherParams& p, void* stream);
void fp8_act_quant(const kernels::Fp8ActQuantParams& p, void* stream);
void fp8_gemm(const kernels::Fp8GemmParams& p, void* stream);
void fp8_quantize_tensor(const kernels::Fp8TensorScaleParams& p, void* stream);
void fp8_dequantize_tensor(const kernels::Fp8TensorScaleParams& p, void* stream);
void fp8_quantize_heads(const kernels::Fp8HeadQuantParams& p, void* stream);
// out = e4m3(in * mult[0]) (mult a device f32 scalar), NaN -> 0x7f; same-shaped 1- to 3-d views (last dims
// contiguous), in f32 or bf16. Not an op: FP8 attention's fallback path (attention.cu) uses it.
void fp8_cast_scaled(const TensorView& out, const TensorView& in, const float* mult, void* stream);
void fp8_grouped_gemm(const kernels::Fp8GroupedGemmParams& p, void* stream);
// Fused into the FP8 TMA kernel's epilogue (fp8_gemm.h fp8_wgmma_tma_glu) when gate_up is bf16, I % 128 == 0 and
// that kernel takes the call; else fp8_grouped_gemm into gate_up, the activation op and fp8_act_quant.
// PENSTOCK_GROUPED_GLU=unfused forces the second (A/B measurements).
void fp8_grouped_gemm_glu(const kernels::Fp8GroupedGluGemmParams& p, void* stream);
bool fp8_grouped_gemm_glu_needs_scratch(const kernels::Fp8GroupedGluGemmParams& p, void* stream);
void embedding(const kernels::EmbeddingParams& p, void* stream);
void layer_norm(const kernels::LayerNormParams& p, void* stream);
void rope(const kernels::RopeParams& p, void* stream);
void gemm(const kernels::GemmParams& p, void* stream);
void silu_mul(const kernels::SiluMulParams& p, void* stream);
void add(const kernels::AddParams& p, void* stream);
void softmax(const kernels::SoftmaxParams& p, void* stream);
void attention(const kernels::AttentionParams& p, void* stream);
void merge_attention(const kernels::MergeAttentionParams& p, void* stream);
void moe_routing(const kernels::MoeRoutingParams& p, void* stream);
void moe_align(const kernels::MoeAlignParams& p, void* stream);
void moe_permute(const kernels::MoePermuteParams& p, void* stream);
void moe_unpermute(const kernels::MoeUnpermuteParams& p, void* stream);

}  // namespace penstock::cuda
