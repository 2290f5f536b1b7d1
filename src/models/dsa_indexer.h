// The DSA lightning indexer (glm_moe_dsa, deepseek_v32) and its paged index-K cache. See reference/MODELS.md §2.2-2.5.
//   k = LayerNorm(x @ wk^T) (eps 1e-6, with bias), q = (cq @ wq_b^T).view(n_heads, head_dim); RoPE on the FIRST
//   rope_dim dims of q and k (interleaved pairs written de-interleaved, or half-split); w = (x @ weights_proj^T) *
//   n_heads^-0.5; logits[t, s] = sum_h w[t, h] * ReLU(head_dim^-0.5 * q[t, h] . k[s]); top-k under the causal mask.
// FP8 mode (DeepSeek-V3.2 reference): q and k are Hadamard-rotated and quantised to e4m3 with one ue8m0 scale per
// (token, head) / token; the cache row is head_dim e4m3 bytes + a 4-byte f32 scale (132 bytes for head_dim 128).
// Logits are computed per sequence in row slices of at most `logits_budget_bytes` ([rows, L] f32, SPEC §3).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv_cache/paged_cache.h"
#include "models/forward_batch.h"
#include "models/linear.h"
#include "models/rope_table.h"

namespace penstock::models {

// The CPU default logits budget (bytes of one row slice of [rows, L] f32 logits).
inline constexpr int64_t kDsaCpuLogitsBudgetBytes = int64_t{256} << 20;

// SPEC §3 GPU budget: min(20% of the memory free outside the static pool, 30% of device memory), re-read at run time.
int64_t dsa_gpu_logits_budget_bytes(int64_t free_outside_pool_bytes, int64_t device_total_bytes);

// Query rows per logits slice for n_keys keys: the most rows whose [rows, n_keys] f32 logits fit the budget, >= 1.
int64_t dsa_rows_per_slice(int64_t budget_bytes, int64_t n_keys);

// Index keys of a stage's `full` indexer layers (shared layers store nothing), paged on the request page tables, on
// the cache allocator's device: f32 rows [head_dim], or in FP8 mode e4m3 rows [head_dim] plus one f32 scale per row
// (two paged caches with the same slots).
class DsaIndexKCache final {
public:
    DsaIndexKCache(int64_t n_pages, int64_t head_dim, const std::vector<int64_t>& full_layers, bool fp8,
                   Allocator& alloc = cpu_allocator());

    bool fp8() const { return fp8_; }
    int64_t head_dim() const { return head_dim_; }
    bool has_layer(int64_t layer) const;
    // Bytes per token per full layer (4 * head_dim, or head_dim + 4 in FP8 mode).
    size_t row_bytes() const;
    // The keys of every full layer in order, then (FP8 mode) their scales.
    std::vector<kv_cache::PagedBuffer> buffers() const;

    // k: [layout.n_tokens, head_dim] f32 roped index keys of the layout's chunk rows (sequence s: positions q_pos0[s]
    // + i). FP8 mode: rotated and quantised here.
    void write(int64_t layer, const BatchLayout& layout, const TensorView& k, const kernels::Context& ctx);

    struct Keys {
        Tensor k;      // [layout.total_keys, head_dim] f32, or f8e4m3 in FP8 mode
        Tensor scale;  // [layout.total_keys] f32 (FP8 mode), else undefined
    };
    // Every sequence's keys of positions [0, prefix + chunk): rows [cu_seqlens_k[s], cu_seqlens_k[s+1]) are sequence
    // s's (one paged gather for the batch).
    Keys gather(int64_t layer, const BatchLayout& layout, const kernels::Context& ctx) const;

private:
    size_t index(int64_t layer) const;

    int64_t head_dim_;
    bool fp8_;
    std::vector<int64_t> layers_;                                   // absolute layer ids, ascending
    std::vector<std::unique_ptr<kv_cache::PagedRowCache>> caches_;  // one per entry of layers_: the keys
    std::vector<std::unique_ptr<kv_cache::PagedRowCache>> scales_;  // FP8 mode: [1] f32 rows, one per entry
};

struct DsaIndexerDims {
    int64_t hidden = 0;
    int64_t q_lora_rank = 0;
    int64_t n_heads = 0;   // index_n_heads
    int64_t head_dim = 0;  // index_head_dim
    int64_t rope_dim = 0;  // qk_rope_head_dim (the first rope_dim dims of q and k are rotated)
    int64_t top_k = 0;     // index_topk
    bool rope_interleaved = false;
};

class DsaIndexer final {
public:
    // Reads `<prefix>.{wq_b, wk, k_norm (weight, bias), weights_proj}`.
    [[nodiscard]] static Result<DsaIndexer> load(WeightReader& reader, const std::string& prefix,
                                                 const DsaIndexerDims& dims);

    // The indexer runs in f32 whatever the activation dtype (its ops are f32-only): its projections of bf16
    // activations produce f32 directly (bf16 weights, fp32 accumulation).

    // Computes the batch's index keys from x [n_tokens, hidden] (the attention input, f32 or bf16) and writes them to
    // `layer`.
    void write_keys(const BatchLayout& layout, const TensorView& x, const RopeTable& rope, int64_t layer,
                    DsaIndexKCache* cache, const kernels::Context& ctx) const;

    // Key positions [n_tokens, top_k] i32 on ctx's device each query row attends to (ascending, -1 padded): every
    // visible key when a row sees <= top_k of them (rows filled from the host, once per sequence), else the indexer's
    // causal top-k over the sequence's cached keys (write_keys first). cq: [n_tokens, q_lora_rank], the MLA q latent.
    // Exact ties are broken as torch.topk does on a row of the sequence's prompt_len keys (when known, else prefix +
    // chunk), i.e. as the unchunked transformers forward does.
    // logits_budget_bytes: see the header comment; fp8_accumulate: kernels::DsaIndexerLogitsParams::fp8_accumulate
    // for an fp8 cache (ModelOptions::dsa_fp8_accumulate).
    Tensor select(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& x, const TensorView& cq,
                  const RopeTable& rope, int64_t layer, const DsaIndexKCache& cache, int64_t logits_budget_bytes,
                  bool fp8_accumulate, const kernels::Context& ctx) const;

    const DsaIndexerDims& dims() const { return dims_; }

private:
    DsaIndexerDims dims_;
    Linear wq_b_;           // [n_heads * head_dim, q_lora_rank]
    Linear wk_;             // [head_dim, hidden]
    Tensor k_norm_weight_;  // [head_dim] f32
    Tensor k_norm_bias_;    // [head_dim] f32
    Linear weights_proj_;   // [n_heads, hidden]
};

}  // namespace penstock::models
