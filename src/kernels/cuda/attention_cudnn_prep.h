// Small device kernels around the cuDNN SDPA call of kernels/cuda/attention_cudnn.cc: the per-sequence lengths and
// ragged offsets cuDNN reads (built from cu_seqlens on the device, so nothing is read back to the host), and the
// rows that see no key (cuDNN leaves them undefined; the contract says out 0, lse -inf). Host-compilable.
#pragma once

#include <cstdint>

namespace penstock::cuda {

// seq_len_q[s] = cu_q[s+1] - cu_q[s], seq_len_k likewise; off_x[s] = cu_x[s] * x_row_stride for s in [0, n_seqs]
// (element offsets of each sequence's first row, as cuDNN's ragged-offset tensors). One thread per entry.
struct SdpaMetadataArgs {
    const int32_t* cu_q;  // [n_seqs + 1]
    const int32_t* cu_k;  // [n_seqs + 1]
    int32_t* seq_len_q;   // [n_seqs] (out)
    int32_t* seq_len_k;   // [n_seqs] (out)
    int64_t* off_q;       // [n_seqs + 1] (out), and off_k, off_v, off_o, off_lse the same
    int64_t* off_k;
    int64_t* off_v;
    int64_t* off_o;
    int64_t* off_lse;
    int64_t q_row, k_row, v_row, o_row, lse_row;  // stride(0) of q, k, v, out, lse (elements)
    int n_seqs;
};
void sdpa_prepare_metadata(const SdpaMetadataArgs& a, void* stream);

// Writes out = 0 and lse = -inf on every row that sees no key under the AttentionParams rule (a sequence without keys,
// or causal rows whose position precedes k_pos0). out is a 2-byte dtype (bf16). Grid: n_seqs x kBlocksPerSeq blocks,
// each returning at once when its sequence has no such row.
struct SdpaEmptyRowsArgs {
    void* out;   // [total_q, n_heads, d_v] 2-byte elements, strided on dims 0/1
    float* lse;  // [total_q, n_heads]
    const int32_t* cu_q;
    const int32_t* cu_k;
    const int32_t* q_pos0;
    const int32_t* k_pos0;
    int64_t o0, o1, l0, l1;  // strides (elements)
    int n_seqs;
    int n_heads;
    int d_v;
    int q_pos_step;
    bool causal;
};
void sdpa_fill_empty_rows(const SdpaEmptyRowsArgs& a, void* stream);

}  // namespace penstock::cuda
