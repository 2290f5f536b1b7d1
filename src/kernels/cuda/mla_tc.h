// Tensor-core (bf16 wgmma / mma.sync) attention for the MLA absorbed form: one shared latent KV head of d_qk = 576
// (kv_lora 512 + rope 64) whose first d_v = 512 columns are the values. Two entry points share the kernels:
//  - dense: kernels::AttentionParams (varlen, causal in absolute positions, q_pos_step), dispatched from
//    cuda::attention when mla_tc_attention_supported(p);
//  - sparse (DSA): kernels::SparseMlaAttentionParams (per-row key index lists, -1 = unused), dispatched from
//    cuda::sparse_mla_attention for bf16 inputs.
// Same semantics as the CPU references (kernels/ref/attention.cc, kernels/ref/dsa.cc); fp32 accumulation and online
// softmax, P rounded to bf16 before P V. Host-compilable (no CUDA headers).
#pragma once

#include <cstdint>

#include "kernels/ops.h"
#include "kernels/ops_dsa.h"

namespace penstock::cuda {

// Kernel variants (tests and benchmarks run each; kAuto is the shipped one: kWgmma for dense calls, kWgmmaPair for
// sparse ones):
// kMmaSync (mla_tc.cu: mma.sync m16n8k16 fed by ldmatrix), kWgmma (mla_wgmma.cu: sm_90a warpgroup MMA reading its
// operands from shared memory; every warp also gathers), kWgmmaWs (mla_wgmma.cu, sparse only: the same consumers fed
// by a producer warpgroup through mbarriers; a dense call runs kWgmma), kWgmmaPair (mla_wgmma_pair.cu, sparse only:
// each consumer warpgroup takes a whole 64-key tile of a pair, S with N = 64, the two staggered; the pairs after a
// row's last valid index are skipped; a dense call runs kWgmma), kWgmmaPairFull (the same kernel without the skip:
// every pair of top_k runs; the same-run baseline of the skip's cost; a dense call runs kWgmma).
enum class MlaTcVariant : uint8_t { kAuto, kMmaSync, kWgmma, kWgmmaWs, kWgmmaPair, kWgmmaPairFull };

// Whether the dense tensor-core path takes `p`: q, k, v, out bf16 and lse f32; n_kv_heads == 1; d_qk == 576 and
// d_v == 512; v the first 512 columns of k's rows (same data pointer and row stride); last dims contiguous;
// 16-byte aligned q / k base pointers and q / k strides (dims 0 and 1) multiples of 8 elements; out strides even;
// total_q * n_heads < 2^31. Anything else stays on the CUDA-core kernel of attention.cu.
bool mla_tc_attention_supported(const kernels::AttentionParams& p);
// Enqueues the dense kernel on `stream` (a cudaStream_t). Precondition: mla_tc_attention_supported(p) and the shape
// checks of cuda::attention.
void mla_tc_attention(const kernels::AttentionParams& p, void* stream);
void mla_tc_attention(const kernels::AttentionParams& p, MlaTcVariant variant, void* stream);

// Whether the sparse tensor-core path takes `p`: q, kv, v bf16; out bf16 or f32; lse f32; d_qk == 576, d_v == 512;
// v the first 512 columns of kv's rows; 16-byte aligned q / kv rows (strides multiples of 8 elements); out strides
// even; indices [n_rows, top_k] i32 with a contiguous last dim.
bool mla_tc_sparse_supported(const kernels::SparseMlaAttentionParams& p);
// Checks shapes and enqueues; CHECK-fails (naming the unmet condition) when !mla_tc_sparse_supported(p).
// Indices outside [0, n_slots) count as -1 (skipped).
void mla_tc_sparse_attention(const kernels::SparseMlaAttentionParams& p, void* stream);
void mla_tc_sparse_attention(const kernels::SparseMlaAttentionParams& p, MlaTcVariant variant, void* stream);

}  // namespace penstock::cuda
