// FP8 flash attention forward of Penstock's own (attention_fp8_wgmma.cu): e4m3 q / k / v (kernels/ops.h
// AttentionParams) with q and k descales per tensor or per row (per-row k ones only with k_descale_block ==
// kFp8AttnKeyBlock, the kernel's key tile) and v's per tensor, f32 accumulation on Hopper's e4m3 tensor cores (wgmma),
// the probabilities rounded to e4m3 for the value product, out bf16 or e4m3 (out = e4m3(o * scale_o[0]), scale_o = 1 /
// out_descale, which the caller has written). Covers, on an sm_90 device:
//  - the promised masks: kCausalBottomRight (causal, q_pos_step 1; any len_k >= or < len_q per sequence: rows before
//    the diagonal get out 0, lse -inf) and kAllVisible; not kGeneral;
//  - (d_qk, d_v) in {(64, 64), (128, 128), (192, 128), (256, 128)}; GQA by head groups;
//  - q, k, v with the last dim contiguous and 16-byte strides and starts; out pairs aligned; lse optional, [total_q,
//    H] with stride(1) == 1; positive scale.
// Anything else returns false (the caller's other paths run it). PENSTOCK_FP8_ATTENTION_KERNEL=cudnn declines every
// call (the A/B against cuDNN's FP8 SDPA). Accuracy: the reference's exact softmax to FP8 accuracy (the
// probabilities' e4m3 rounding), like cuDNN's FP8 SDPA (tests/kernels/cuda/fp8_attention_test.cc).
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops.h"

namespace penstock::cuda {

// Whether attention_fp8_wgmma takes the call (host checks only: reads no device memory).
bool attention_fp8_wgmma_covers(const kernels::AttentionParams& p);

// Runs the call and returns true when covered; scale_o: 1 / out_descale on the device (FP8 out only). Stream-ordered
// scratch (the transposed v), graph capturable. The kernel is persistent and takes its work items from the stream's
// tile counter (tile_sched.h), so a captured launch must not replay concurrently with other users of that counter.
[[nodiscard]] bool attention_fp8_wgmma(const kernels::AttentionParams& p, const float* scale_o, cudaStream_t stream);

}  // namespace penstock::cuda
