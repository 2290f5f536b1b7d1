// The CPU reference of every op in kernels/ops.h: deliberately plain, fp32 accumulation, the readable definition the
// CUDA kernels are tested against. `pool` may be null (single-threaded); results never depend on the thread count.
#pragma once

#include "kernels/ops.h"

namespace penstock::ref {

void transfer(const kernels::TransferParams& p, ThreadPool* pool);
void copy(const kernels::CopyParams& p, ThreadPool* pool);
void fill(const kernels::FillParams& p, ThreadPool* pool);
void fill_random(const kernels::FillRandomParams& p, ThreadPool* pool);
void gather_rows(const kernels::GatherRowsParams& p, ThreadPool* pool);
void grouped_gemm(const kernels::GroupedGemmParams& p, ThreadPool* pool);
void grouped_gemm_glu(const kernels::GroupedGluGemmParams& p, ThreadPool* pool);
void fp8_grouped_gemm_glu(const kernels::Fp8GroupedGluGemmParams& p, ThreadPool* pool);
void paged_write(const kernels::PagedWriteParams& p, ThreadPool* pool);
void paged_gather(const kernels::PagedGatherParams& p, ThreadPool* pool);
void fp8_act_quant(const kernels::Fp8ActQuantParams& p, ThreadPool* pool);
void fp8_gemm(const kernels::Fp8GemmParams& p, ThreadPool* pool);
void fp8_grouped_gemm(const kernels::Fp8GroupedGemmParams& p, ThreadPool* pool);
void fp8_quantize_tensor(const kernels::Fp8TensorScaleParams& p, ThreadPool* pool);
void fp8_dequantize_tensor(const kernels::Fp8TensorScaleParams& p, ThreadPool* pool);
void fp8_quantize_heads(const kernels::Fp8HeadQuantParams& p, ThreadPool* pool);
void embedding(const kernels::EmbeddingParams& p, ThreadPool* pool);
void rms_norm(const kernels::RmsNormParams& p, ThreadPool* pool);
void layer_norm(const kernels::LayerNormParams& p, ThreadPool* pool);
void rope(const kernels::RopeParams& p, ThreadPool* pool);
void gemm(const kernels::GemmParams& p, ThreadPool* pool);
void silu_mul(const kernels::SiluMulParams& p, ThreadPool* pool);
void add(const kernels::AddParams& p, ThreadPool* pool);
void softmax(const kernels::SoftmaxParams& p, ThreadPool* pool);
void attention(const kernels::AttentionParams& p, ThreadPool* pool);
void merge_attention(const kernels::MergeAttentionParams& p, ThreadPool* pool);
void moe_routing(const kernels::MoeRoutingParams& p, ThreadPool* pool);
void moe_align(const kernels::MoeAlignParams& p, ThreadPool* pool);
void moe_permute(const kernels::MoePermuteParams& p, ThreadPool* pool);
void moe_unpermute(const kernels::MoeUnpermuteParams& p, ThreadPool* pool);

}  // namespace penstock::ref
