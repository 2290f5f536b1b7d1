// DSA (DeepSeek Sparse Attention) ops: the lightning-indexer logits, the causal top-k that turns them into key
// indices, the FP8 index-K quantiser (Hadamard rotation + e4m3 with one scale per row) and sparse MLA attention over
// gathered latent rows. Same conventions as kernels/ops.h (Params structs, "[shape] dtype" comments, optional views
// have data == nullptr); the CPU reference lives in kernels/ref/dsa.cc. See reference/MODELS.md §2.3-2.5.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace penstock::kernels {

// Lightning-indexer logits for one sequence's query rows against its index keys:
//   f32 keys:  logits[r, s] = sum_h weights[r, h] * ReLU(scale * (q[r, h] . k[s]))
//   fp8 keys:  logits[r, s] = k_scale[s] * sum_h ReLU(q[r, h] . k[s]) * (weights[r, h] * q_scale[r, h] * scale)
// (the fp8 form is DeepSeek-V3.2's fp8_index: e4m3 values dequantised to f32 products, scales factored out; the two
// are equal when every scale is 1). `weights` already carries any head normalisation (HF: n_heads^-0.5). Without
// q_pos every key is scored. With q_pos (the rows' absolute positions, as dsa_topk takes them) logits[r, s] is
// written for every visible key s <= q_pos[r]; entries of keys past q_pos[r] are unspecified (kernels skip whole
// tiles of them and may leave them unwritten): dsa_topk never reads them. The causal mask itself is applied by
// dsa_topk, not here. q and k are both f32 or both kF8E4M3.
struct DsaIndexerLogitsParams {
    TensorView logits;   // [n_rows, n_keys] f32 (out), rows may be strided
    TensorView q;        // [n_rows, n_heads, head_dim] f32 or f8e4m3, strided on dims 0 and 1
    TensorView k;        // [n_keys, head_dim] f32 or f8e4m3, rows may be strided
    TensorView weights;  // [n_rows, n_heads] f32, rows may be strided
    TensorView q_scale;  // [n_rows, n_heads] f32, fp8 only (data == nullptr for f32)
    TensorView k_scale;  // [n_keys] f32 (stride(0) may be > 1), fp8 only (data == nullptr for f32)
    TensorView q_pos;    // [n_rows] i32 (optional, data == nullptr: score every key), stride(0) may be > 1
    float scale = 1.0f;  // softmax_scale = head_dim^-0.5
    // fp8 only: a backend may sum each head's q.k inside its fp8 tensor-core instruction, whose accumulator keeps fewer
    // bits than f32 (Hopper: ~1e-4 relative here), the numerics of DeepSeek-V3.2's fp8 indexer kernels, at twice the
    // f16 rate. false: exact e4m3 products with f32 sums. The CPU reference is exact either way.
    bool fp8_accumulate = false;
};

// Causal top-k over indexer logits. Key s is visible to row r iff s <= q_pos[r] (and s < n_keys); logits of keys that
// are not visible are never read (the mask is applied inside the selection). Row r writes the visible keys it selects
// in ascending key order, then -1 padding:
//   visible <= top_k: every visible key (a dense-causal row);
//   visible >  top_k: the top_k keys exactly as torch.topk on the CPU (ATen topk_impl_loop: nth_element, or
//     partial_sort when top_k * 64 <= row length, with the comparator x > y) selects them from a row of
//     `torch_row_len` entries whose masked entries all hold -FLT_MAX (Hugging Face adds finfo.min to masked scores).
// The emulated row length matters only for keys whose logits are exactly equal at the top-k boundary (ReLU zeros):
// torch's choice among them depends on the row length, so pass the length the reference forward saw (the whole
// prompt for an unchunked run); 0 means n_keys.
struct DsaTopkParams {
    TensorView indices;         // [n_rows, top_k] i32 (out): selected key indices, ascending, then -1
    TensorView logits;          // [n_rows, n_keys] f32, rows may be strided
    TensorView q_pos;           // [n_rows] i32: the absolute position of each query row
    int64_t torch_row_len = 0;  // >= n_keys, or 0 (= n_keys)
};

// FP8 index-K / index-q quantisation (DeepSeek-V3.2 indexer, reference/MODELS.md §2.5), one row at a time:
//   y = rotate ? (H_d x) * d^-0.5 : x       (H_d the Sylvester Hadamard matrix, d = row length, a power of two)
//   s = max(max|y|, 1e-4) / 448;  ue8m0: s = 2^ceil(log2 s)
//   out = e4m3(clamp(y / s, -448, 448)) (penstock::float_to_e4m3), scale = s
// so that y ~= e4m3_to_float(out) * scale.
struct DsaQuantizeFp8Params {
    TensorView out;    // [n_rows, dim] f8e4m3 (out), rows may be strided
    TensorView scale;  // [n_rows] f32 (out), stride(0) may be > 1
    TensorView in;     // [n_rows, dim] f32, rows may be strided
    bool rotate = true;
    bool ue8m0 = true;
};

// Sparse MLA attention in the absorbed (MQA) form: query row r attends, with every head, to the kv rows listed in
// indices[r] (-1 entries are skipped; a row may list each kv row at most once):
//   out[r, h] = softmax_j(scale * q[r, h] . kv[indices[r, j]]) @ v[indices[r, j]],  lse = log(sum exp(...)).
// kv is typically a paged latent cache layer viewed as [n_pages * page_size, latent_dim] with indices = slots, and v
// the first d_v columns of the same rows. A row with no index gets out = 0, lse = -inf. With indices = every visible
// key in ascending order this is exactly (bit for bit, in the reference) the causal kernels::attention over those rows.
// The reference is f32 only. On CUDA, q / kv / v may also be bf16 (out bf16 or f32, lse f32): a tensor-core kernel
// (kernels/cuda/mla_tc.h) that needs d_qk 576 / d_v 512, v = kv[:, :512] and 16-byte aligned rows.
struct SparseMlaAttentionParams {
    TensorView out;      // [n_rows, n_heads, d_v] f32 (out)
    TensorView lse;      // [n_rows, n_heads] f32 (out)
    TensorView q;        // [n_rows, n_heads, d_qk] f32, strided on dims 0 and 1
    TensorView kv;       // [n_slots, d_qk] f32, rows may be strided
    TensorView v;        // [n_slots, d_v] f32, rows may be strided (e.g. kv.slice(1, 0, d_v))
    TensorView indices;  // [n_rows, top_k] i32: rows of kv, -1 = unused
    float scale = 1.0f;
};

void dsa_indexer_logits(const DsaIndexerLogitsParams& p, const Context& ctx);
void dsa_topk(const DsaTopkParams& p, const Context& ctx);
void dsa_quantize_fp8(const DsaQuantizeFp8Params& p, const Context& ctx);
void sparse_mla_attention(const SparseMlaAttentionParams& p, const Context& ctx);

}  // namespace penstock::kernels
