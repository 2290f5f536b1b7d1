// DSA lightning indexer and index-K cache, device-agnostic over kernels/ops.h + kernels/ops_dsa.h.
#include "models/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/ops_dsa.h"
#include "kernels/profile.h"
#include "models/tensor_parallel.h"

namespace penstock::models {

namespace {
constexpr float kIndexKNormEps = 1e-6f;  // transformers: nn.LayerNorm(index_head_dim, eps=1e-6)
}  // namespace

int64_t dsa_gpu_logits_budget_bytes(int64_t free_outside_pool_bytes, int64_t device_total_bytes) {
    return std::min(free_outside_pool_bytes / 5, device_total_bytes * 3 / 10);
}

int64_t dsa_rows_per_slice(int64_t budget_bytes, int64_t n_keys) {
    const int64_t row_bytes = std::max<int64_t>(n_keys, 1) * static_cast<int64_t>(sizeof(float));
    return std::max<int64_t>(1, budget_bytes / row_bytes);
}

// ---------------------------------------------------------------------------------------------------------------
DsaIndexKCache::DsaIndexKCache(int64_t n_pages, int64_t head_dim, const std::vector<int64_t>& full_layers, bool fp8,
                               Allocator& alloc)
    : head_dim_(head_dim), fp8_(fp8), layers_(full_layers) {
    PENSTOCK_CHECK(std::is_sorted(layers_.begin(), layers_.end()));
    for (int64_t l : layers_) {
        caches_.push_back(std::make_unique<kv_cache::PagedRowCache>(n_pages, head_dim, l, l + 1,
                                                                    fp8 ? DType::kF8E4M3 : DType::kF32, alloc));
        if (fp8) scales_.push_back(std::make_unique<kv_cache::PagedRowCache>(n_pages, 1, l, l + 1, DType::kF32, alloc));
    }
}

bool DsaIndexKCache::has_layer(int64_t layer) const {
    return std::binary_search(layers_.begin(), layers_.end(), layer);
}

std::vector<kv_cache::PagedBuffer> DsaIndexKCache::buffers() const {
    std::vector<kv_cache::PagedBuffer> out;
    for (const auto* list : {&caches_, &scales_}) {
        for (const auto& c : *list) {
            for (kv_cache::PagedBuffer b : c->buffers()) {
                b.kind = list == &caches_ ? kv_cache::BufferKind::kIndexKeys : kv_cache::BufferKind::kIndexScales;
                out.push_back(b);
            }
        }
    }
    return out;
}

size_t DsaIndexKCache::row_bytes() const {
    return fp8_ ? static_cast<size_t>(head_dim_) + sizeof(float) : static_cast<size_t>(head_dim_) * sizeof(float);
}

size_t DsaIndexKCache::index(int64_t layer) const {
    const auto it = std::lower_bound(layers_.begin(), layers_.end(), layer);
    PENSTOCK_CHECK(it != layers_.end() && *it == layer) << "layer " << layer << " has no index-K cache (not full)";
    return static_cast<size_t>(it - layers_.begin());
}

void DsaIndexKCache::write(int64_t layer, const BatchLayout& layout, const TensorView& k, const kernels::Context& ctx) {
    PENSTOCK_CHECK_EQ(k.ndim, 2);
    PENSTOCK_CHECK_EQ(k.size(1), head_dim_);
    const size_t i = index(layer);
    const int64_t n = k.size(0);
    auto write_rows = [&](const kv_cache::PagedRowCache& cache, const TensorView& rows) {
        kernels::paged_write({.cache = cache.layer_view(layer),
                              .rows = rows,
                              .page_table = layout.page_table,
                              .cu_rows = layout.cu_seqlens_q,
                              .pos0 = layout.q_pos0},
                             ctx);
    };
    if (!fp8_) {
        write_rows(*caches_[i], k);
        return;
    }
    Tensor q8 = scratch(ctx, {n, head_dim_}, DType::kF8E4M3);
    Tensor scale = scratch(ctx, {n, 1}, DType::kF32);
    kernels::dsa_quantize_fp8({.out = q8, .scale = scale.view().reshape({n}), .in = k, .rotate = true, .ue8m0 = true},
                              ctx);
    write_rows(*caches_[i], q8);
    write_rows(*scales_[i], scale);
}

DsaIndexKCache::Keys DsaIndexKCache::gather(int64_t layer, const BatchLayout& layout,
                                            const kernels::Context& ctx) const {
    const size_t i = index(layer);
    const int64_t total = layout.total_keys;
    auto gather_rows = [&](const kv_cache::PagedRowCache& cache, const TensorView& out) {
        kernels::paged_gather({.out = out,
                               .cache = cache.layer_view(layer),
                               .page_table = layout.page_table,
                               .cu_rows = layout.cu_seqlens_k,
                               .pos0 = layout.k_pos0},
                              ctx);
    };
    Keys keys;
    keys.k = scratch(ctx, {total, head_dim_}, fp8_ ? DType::kF8E4M3 : DType::kF32);
    gather_rows(*caches_[i], keys.k);
    if (fp8_) {
        keys.scale = scratch(ctx, {total}, DType::kF32);
        gather_rows(*scales_[i], keys.scale.view().reshape({total, 1}));
    }
    return keys;
}

// ---------------------------------------------------------------------------------------------------------------
Result<DsaIndexer> DsaIndexer::load(WeightReader& r, const std::string& prefix, const DsaIndexerDims& d) {
    DsaIndexer ix;
    ix.dims_ = d;
    PENSTOCK_ASSIGN_OR_RETURN(ix.wq_b_, take_linear(r, prefix + ".wq_b", d.n_heads * d.head_dim, d.q_lora_rank, false));
    PENSTOCK_ASSIGN_OR_RETURN(ix.wk_, take_linear(r, prefix + ".wk", d.head_dim, d.hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(ix.k_norm_weight_, r.take(prefix + ".k_norm.weight", {d.head_dim}));
    PENSTOCK_ASSIGN_OR_RETURN(ix.k_norm_bias_, r.take(prefix + ".k_norm.bias", {d.head_dim}));
    PENSTOCK_ASSIGN_OR_RETURN(ix.weights_proj_, take_linear(r, prefix + ".weights_proj", d.n_heads, d.hidden, false));
    return ix;
}

void DsaIndexer::write_keys(const BatchLayout& layout, const TensorView& x, const RopeTable& rope, int64_t layer,
                            DsaIndexKCache* cache, const kernels::Context& ctx) const {
    const int64_t n = layout.n_tokens;
    const int64_t hd = dims_.head_dim;
    Tensor k = linear_new_f32(wk_, x, ctx);  // [n, head_dim]
    kernels::layer_norm({.out = k, .in = k, .weight = k_norm_weight_, .bias = k_norm_bias_, .eps = kIndexKNormEps},
                        ctx);
    kernels::rope({.x = k.view().as_strided(0, {n, 1, dims_.rope_dim}, {hd, hd, 1}),
                   .positions = layout.positions,
                   .inv_freq = rope.inv_freq,
                   .attention_factor = rope.attention_factor,
                   .interleaved = dims_.rope_interleaved},
                  ctx);
    // Context parallelism: each rank projected its own rows; the chunk's index K is all-gathered so that every rank
    // caches the whole chunk (SPEC §4: the one collective of a full DSA layer besides the MLA latents).
    if (layout.cp) {
        cache->write(layer, layout.cp->full, cp_gather_rows(layout, k, ctx), ctx);
    } else {
        cache->write(layer, layout, k, ctx);
    }
}

Tensor DsaIndexer::select(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& x,
                          const TensorView& cq, const RopeTable& rope, int64_t layer, const DsaIndexKCache& cache,
                          int64_t logits_budget_bytes, bool fp8_accumulate, const kernels::Context& ctx) const {
    const int64_t n = layout.n_tokens;
    const int64_t n_heads = dims_.n_heads;
    const int64_t hd = dims_.head_dim;
    const int64_t top_k = dims_.top_k;
    Tensor positions = scratch(ctx, {n, top_k}, DType::kI32);

    // q [n, n_heads, head_dim] with RoPE on the first rope_dim dims of every head; w = weights_proj(x) * n_heads^-0.5
    // (the scale applied by the GEMM's alpha to the fp32 accumulator).
    std::optional<kernels::ProfileScope> scope(std::in_place, ctx, "q_proj");
    std::optional<kernels::ProfileScope> part(std::in_place, ctx, "wq_b");
    Tensor q = linear_new_f32(wq_b_, cq, ctx).reshape({n, n_heads, hd});
    part.emplace(ctx, "rope");
    kernels::rope({.x = q.view().slice(2, 0, dims_.rope_dim),
                   .positions = layout.positions,
                   .inv_freq = rope.inv_freq,
                   .attention_factor = rope.attention_factor,
                   .interleaved = dims_.rope_interleaved},
                  ctx);
    const auto head_norm = static_cast<float>(std::pow(static_cast<double>(n_heads), -0.5));
    Tensor w = scratch(ctx, {n, n_heads}, DType::kF32);
    part.emplace(ctx, "weights_proj");
    kernels::gemm({.out = w, .a = x, .b = weights_proj_.weight, .trans_b = true, .alpha = head_norm}, ctx);
    part.reset();
    Tensor q8;
    Tensor q_scale;
    if (cache.fp8()) {
        const kernels::ProfileScope quant_scope(ctx, "quant");
        q8 = scratch(ctx, {n, n_heads, hd}, DType::kF8E4M3);
        q_scale = scratch(ctx, {n, n_heads}, DType::kF32);
        kernels::dsa_quantize_fp8({.out = q8.view().reshape({n * n_heads, hd}),
                                   .scale = q_scale.view().reshape({n * n_heads}),
                                   .in = q.view().reshape({n * n_heads, hd}),
                                   .rotate = true,
                                   .ue8m0 = true},
                                  ctx);
    }
    const auto softmax_scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));

    // The cached keys of every sequence (rows [cu_seqlens_k[s], +prefix + chunk)), when some row is scored.
    bool scored = false;
    for (const SeqChunk& s : batch.seqs) {
        scored = scored || s.prefix_len + static_cast<int64_t>(s.token_ids.size()) > top_k;
    }
    scope.emplace(ctx, "k_gather");
    const DsaIndexKCache::Keys keys = scored ? cache.gather(layer, layout, ctx) : DsaIndexKCache::Keys{};
    scope.reset();

    // This layout's rows only: under context parallelism a rank scores its own rows (row r of sequence s at position
    // seq_pos0[s] + r * q_pos_step) against the whole cached key set.
    const int64_t step = layout.q_pos_step;
    int64_t row = 0;
    int64_t key0 = 0;  // the sequence's first row in `keys`
    for (size_t si = 0; si < batch.seqs.size(); ++si) {
        const SeqChunk& s = batch.seqs[si];
        const int64_t len = layout.seq_rows[si];
        const int64_t pos0 = layout.seq_pos0[si];
        const int64_t n_keys = s.prefix_len + static_cast<int64_t>(s.token_ids.size());
        // A sequence with at most top_k keys is not scored: every row takes all the keys it sees (built here, one
        // transfer). In a longer one the rows at positions < top_k go through the logits and dsa_topk with the rest
        // (dsa_topk returns every visible key of such a row, the same indices): building them on the host cost 2.2 ms
        // of a 16K GLM-5.3 layer (a 2048 x 2048 block), their logits and top-k about 0.1 ms.
        const bool seq_scored = n_keys > top_k;
        const int64_t dense_rows = seq_scored ? 0 : std::clamp<int64_t>((top_k - pos0 + step - 1) / step, 0, len);
        if (dense_rows > 0) {
            const kernels::ProfileScope dense_scope(ctx, "dense_rows");
            Tensor dense = Tensor::empty({dense_rows, top_k}, DType::kI32);
            for (int64_t r = 0; r < dense_rows; ++r) {
                int32_t* out = dense.ptr<int32_t>() + r * top_k;
                const int64_t visible = pos0 + r * step + 1;
                for (int64_t j = 0; j < top_k; ++j) out[j] = j < visible ? static_cast<int32_t>(j) : -1;
            }
            kernels::transfer({.out = positions.view().slice(0, row, row + dense_rows), .in = dense}, ctx);
        }
        if (dense_rows < len) {
            const TensorView k_seq = keys.k.view().slice(0, key0, key0 + n_keys);
            const int64_t slice = dsa_rows_per_slice(logits_budget_bytes, n_keys);
            Tensor logits = scratch(ctx, {std::min(slice, len - dense_rows), n_keys}, DType::kF32);
            for (int64_t r0 = row + dense_rows; r0 < row + len; r0 += slice) {
                const int64_t r1 = std::min(r0 + slice, row + len);
                const TensorView lg = logits.view().slice(0, 0, r1 - r0);
                kernels::DsaIndexerLogitsParams lp{.logits = lg,
                                                   .q = q.view().slice(0, r0, r1),
                                                   .k = k_seq,
                                                   .weights = w.view().slice(0, r0, r1),
                                                   .q_scale = {},
                                                   .k_scale = {},
                                                   // keys past a row's position are never read by the top-k
                                                   .q_pos = layout.positions.view().slice(0, r0, r1),
                                                   .scale = softmax_scale};
                if (cache.fp8()) {
                    lp.q = q8.view().slice(0, r0, r1);
                    lp.q_scale = q_scale.view().slice(0, r0, r1);
                    lp.k_scale = keys.scale.view().slice(0, key0, key0 + n_keys);
                    lp.fp8_accumulate = fp8_accumulate;
                }
                {
                    const kernels::ProfileScope step(ctx, "logits");
                    kernels::dsa_indexer_logits(lp, ctx);
                }
                const kernels::ProfileScope step(ctx, "topk");
                kernels::dsa_topk({.indices = positions.view().slice(0, r0, r1),
                                   .logits = lg,
                                   .q_pos = layout.positions.view().slice(0, r0, r1),
                                   .torch_row_len = std::max(s.prompt_len, n_keys)},
                                  ctx);
            }
        }
        row += len;
        key0 += n_keys;
    }
    return positions;
}

}  // namespace penstock::models
