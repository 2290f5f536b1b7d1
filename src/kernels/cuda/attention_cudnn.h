// cuDNN SDPA path of cuda::attention (docs/design/kernels.md "attention on CUDA"): dense attention through the cuDNN
// frontend's graph API (sdpa node, padding mask over a ragged THD layout, bottom-right causal diagonal or no mask,
// stats = natural-log lse). Same AttentionParams contract as kernels/ref/attention.cc; taken only when the caller's
// host-side hints (max_seqlen_q/k, mask_kind) let the graph be planned without reading device metadata.
// Host-compilable (no CUDA or cuDNN headers). Built with cuDNN when CMake finds it (PENSTOCK_CUDNN, cmake/cudnn.cmake);
// otherwise attention_cudnn_stub.cc compiles in and every call answers false.
#pragma once

#include "kernels/ops.h"

namespace penstock::cuda {

// Enqueues p on `stream` through cuDNN and returns true when this build has the cuDNN path and p is a case it covers:
// q, k, v, out bf16 and lse f32 on the current device; mask_kind kCausalBottomRight (causal, q_pos_step 1) or
// kAllVisible; d_qk and d_v multiples of 8 up to 256; n_heads a multiple of n_kv_heads; last dims contiguous, dims
// 0/1 strides multiples of 8 elements, 16-byte aligned pointers, lse rows contiguous (stride(1) == 1); a graph that
// cuDNN supports (check_support). Otherwise returns false having enqueued nothing, and the caller runs its own
// kernel; a graph cuDNN refuses is logged once per shape. Rows that see no key get out 0 and lse -inf (a small
// kernel after the SDPA call writes them). Plans are cached per host thread and (device, stream), keyed by shape,
// strides, mask and dtype; the first call of a shape builds its graph (tens of ms), later calls only enqueue. Device
// scratch (per-sequence lengths, ragged offsets, cuDNN's workspace) is held per (device, stream) and grows by
// cudaMalloc outside stream capture only (a capture that would need more answers false). Not thread-safe across
// threads sharing one stream.
//
// FP8 (kernels/ops.h, per-tensor scaling): q, k, v and out all f8e4m3 with their device descales, out_descale
// already written by the caller and fp8_scale_o = 1 / out_descale on the device; head dims multiples of 16; every
// sequence as long in keys as in queries (the equal_lengths hint, or one sequence with total_q == total_k), since on
// Hopper cuDNN's FP8 SDPA aligns the causal diagonal top-left only. The probabilities are scaled by 448 into e4m3.
[[nodiscard]] bool attention_cudnn(const kernels::AttentionParams& p, void* stream, const float* fp8_scale_o = nullptr);

// True when this build compiled the cuDNN path (it may still decline a call or fail to load the library).
bool attention_cudnn_built();

}  // namespace penstock::cuda
