// Kernels of kernels/cuda/attention_cudnn_prep.h. Both are tiny next to the attention itself (n_seqs + 1 entries; the
// empty-row pass touches only rows that see no key and returns at once for a sequence that has none).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention_cudnn_prep.h"
#include "kernels/cuda/cuda_check.h"

namespace penstock::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSeq = 32;  // spreads a sequence's empty rows (all of them when it has no key) over blocks

// One thread per entry s in [0, n_seqs].
__global__ void sdpa_metadata_kernel(SdpaMetadataArgs a) {
    const int s = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (s > a.n_seqs) return;
    const int64_t q = a.cu_q[s];
    const int64_t k = a.cu_k[s];
    a.off_q[s] = q * a.q_row;
    a.off_o[s] = q * a.o_row;
    a.off_lse[s] = q * a.lse_row;
    a.off_k[s] = k * a.k_row;
    a.off_v[s] = k * a.v_row;
    if (s < a.n_seqs) {
        a.seq_len_q[s] = a.cu_q[s + 1] - a.cu_q[s];
        a.seq_len_k[s] = a.cu_k[s + 1] - a.cu_k[s];
    }
}

// Block (s, b): rows [0, n_empty) of sequence s, elements strided over the kBlocksPerSeq blocks of s.
__global__ void sdpa_empty_rows_kernel(SdpaEmptyRowsArgs a) {
    const int s = static_cast<int>(blockIdx.x);
    const int64_t q_begin = a.cu_q[s];
    const int64_t len_q = a.cu_q[s + 1] - q_begin;
    const int64_t len_k = a.cu_k[s + 1] - a.cu_k[s];
    int64_t n_empty = 0;
    if (len_k == 0) {
        n_empty = len_q;
    } else if (a.causal) {
        // Row i sits at q_pos0 + i * step and sees no key iff that is < k_pos0: i < ceil((k_pos0 - q_pos0) / step).
        const int64_t gap = static_cast<int64_t>(a.k_pos0[s]) - a.q_pos0[s];
        if (gap > 0) n_empty = min(len_q, (gap + a.q_pos_step - 1) / a.q_pos_step);
    }
    if (n_empty == 0) return;
    const int64_t per_row = static_cast<int64_t>(a.n_heads) * a.d_v;
    const int64_t n = n_empty * per_row;
    auto* out = static_cast<uint16_t*>(a.out);
    const int64_t stride = static_cast<int64_t>(kBlocksPerSeq) * blockDim.x;
    for (int64_t e = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; e < n; e += stride) {
        const int64_t r = q_begin + e / per_row;
        const int64_t h = (e % per_row) / a.d_v;
        const int64_t c = e % a.d_v;
        out[r * a.o0 + h * a.o1 + c] = 0;  // +0.0 in bf16 / f16
        if (c == 0 && a.lse != nullptr) a.lse[r * a.l0 + h * a.l1] = -INFINITY;  // null: an lse-less call
    }
}

}  // namespace

void sdpa_prepare_metadata(const SdpaMetadataArgs& a, void* stream) {
    const int n = a.n_seqs + 1;
    sdpa_metadata_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void sdpa_fill_empty_rows(const SdpaEmptyRowsArgs& a, void* stream) {
    if (a.n_seqs == 0) return;
    const dim3 grid(static_cast<unsigned>(a.n_seqs), kBlocksPerSeq);
    sdpa_empty_rows_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
