// bf16 flash attention forward of Penstock's own (attention_bf16_wgmma.cu): the dense bf16 attention of
// kernels/ops.h AttentionParams (the MLA MHA form and plain MHA / GQA) on Hopper's bf16 tensor cores (wgmma), f32
// accumulation, the probabilities rounded to bf16 for the value product. Covers, on an sm_90 device:
//  - q, k, v, out bf16; lse optional, f32 [total_q, H] with stride(1) == 1;
//  - the promised masks: kCausalBottomRight (causal, q_pos_step 1; any len_k >= or < len_q per sequence: rows before
//    the diagonal get out 0, lse -inf) and kAllVisible; not kGeneral;
//  - (d_qk, d_v) in {(64, 64), (128, 128), (192, 128)}; GQA by head groups;
//  - q, k, v with the last dim contiguous and 16-byte strides and starts (k and v may be views into kv_b's output); out
//    pairs aligned; positive scale;
//  - k_rope (optional; K = [k ; k_rope]): bf16 rows like k's, its head stride may be 0 (MLA's one rope head), k's and
//    k_rope's widths multiples of 64 adding up to d_qk; the kernel loads K's boxes from the two tensors.
// Anything else returns false (cuda::attention then tries cuDNN's SDPA, then its CUDA-core kernel).
// PENSTOCK_ATTENTION_KERNEL=cudnn declines every call (the A/B against cuDNN). Accuracy: the reference's exact
// softmax to bf16 accuracy (tests/kernels/cuda/attention_cudnn_test.cc, kBF16Tol).
// Keys of a sequence's last tile past its end are read from the next sequence's rows (or zero past the tensor) and
// masked to probability 0, so k and v rows of the whole [total_k] range must hold finite values (any real batch does).
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops.h"

namespace penstock::cuda {

// Whether attention_bf16_wgmma takes the call (host checks only: reads no device memory).
bool attention_bf16_wgmma_covers(const kernels::AttentionParams& p);

// Runs the call and returns true when covered; enqueues nothing otherwise. No scratch, graph capturable.
[[nodiscard]] bool attention_bf16_wgmma(const kernels::AttentionParams& p, cudaStream_t stream);

}  // namespace penstock::cuda
