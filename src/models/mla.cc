// MLA forward on the op interface (CPU reference composition; the CUDA path reuses the same structure).
#include "models/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/ops_kda.h"
#include "kernels/profile.h"

namespace penstock::models {

namespace {
// transformers 5.17 builds q_a_layernorm / kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;
}  // namespace

MlaDims MlaDims::from_config(const loader::ModelConfig& c) {
    return MlaDims{.hidden = c.hidden_size,
                   .n_heads = c.num_attention_heads,
                   .q_lora_rank = c.q_lora_rank,
                   .kv_lora_rank = c.kv_lora_rank,
                   .qk_nope_head_dim = c.qk_nope_head_dim,
                   .qk_rope_head_dim = c.qk_rope_head_dim,
                   .v_head_dim = c.v_head_dim};
}

Result<MlaAttention> MlaAttention::load(WeightReader& r, const std::string& prefix, const loader::ModelConfig& c,
                                        const MlaVariant& variant, const TensorParallel& tp) {
    MlaAttention a;
    a.dims_ = MlaDims::from_config(c);
    a.variant_ = variant;
    a.tp_ = tp;
    a.rms_eps_ = static_cast<float>(c.rms_norm_eps);
    MlaDims& d = a.dims_;
    const int64_t all_heads = d.n_heads;
    const IndexRange heads = tp.shard(all_heads);
    if (heads.size() == 0) {
        return invalid_argument("tensor parallel size " + std::to_string(tp.size()) + " exceeds num_attention_heads " +
                                std::to_string(all_heads));
    }
    d.n_heads = heads.size();
    auto rows_of = [&](int64_t per_head) { return IndexRange{heads.begin * per_head, heads.end * per_head}; };
    // FP8 checkpoints: the projections run fp8_gemm when the reader hands out native FP8; kv_b stays dense (the
    // absorbed form multiplies per-head slices of it with kernels::gemm; docs/design/models.md "FP8 weights"), and
    // FP8 attention also keeps its e4m3 form (kv_b_fp8_).
    constexpr WeightFormat kFp8 = WeightFormat::kFp8Native;
    const bool bias = c.attention_bias;
    if (d.q_lora_rank > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(a.q_a_proj_,
                                  take_linear(r, prefix + ".q_a_proj", d.q_lora_rank, d.hidden, bias, kFp8));
        PENSTOCK_ASSIGN_OR_RETURN(a.q_a_norm_, r.take(prefix + ".q_a_layernorm.weight", {d.q_lora_rank}));
        PENSTOCK_ASSIGN_OR_RETURN(a.q_b_proj_, take_linear_rows(r, prefix + ".q_b_proj", all_heads * d.qk_head_dim(),
                                                                d.q_lora_rank, rows_of(d.qk_head_dim()), false, kFp8));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(a.q_proj_, take_linear_rows(r, prefix + ".q_proj", all_heads * d.qk_head_dim(),
                                                              d.hidden, rows_of(d.qk_head_dim()), false, kFp8));
    }
    PENSTOCK_ASSIGN_OR_RETURN(a.kv_a_proj_,
                              take_linear(r, prefix + ".kv_a_proj_with_mqa", d.latent_dim(), d.hidden, bias, kFp8));
    PENSTOCK_ASSIGN_OR_RETURN(a.kv_a_norm_, r.take(prefix + ".kv_a_layernorm.weight", {d.kv_lora_rank}));
    const int64_t kvb_per_head = d.qk_nope_head_dim + d.v_head_dim;
    const std::string kv_b = prefix + ".kv_b_proj";
    const IndexRange kv_b_rows = rows_of(kvb_per_head);
    // A native FP8 kv_b whose slice keeps whole 128-row blocks is read in e4m3, and its dense form (the absorbed
    // form's and the bf16 MHA path's) is that read's dequantisation, so both forms are the same weight (dummy weights
    // too, whatever the options); FP8 attention keeps the e4m3 form for its K / V GEMM (kv_b_fp8_).
    const int64_t block = r.fp8_mode().block_n;
    if (r.fp8_native(kv_b + ".weight") && kv_b_rows.begin % block == 0 &&
        (kv_b_rows.end % block == 0 || kv_b_rows.end == all_heads * kvb_per_head)) {
        PENSTOCK_ASSIGN_OR_RETURN(
            Linear e4m3, take_linear_rows(r, kv_b, all_heads * kvb_per_head, d.kv_lora_rank, kv_b_rows, false, kFp8));
        PENSTOCK_ASSIGN_OR_RETURN(a.kv_b_proj_.weight, r.dense_of({.weight = e4m3.weight, .scale = e4m3.scale}));
        if (variant.fp8_attention) a.kv_b_fp8_ = std::move(e4m3);
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(
            a.kv_b_proj_, take_linear_rows(r, kv_b, all_heads * kvb_per_head, d.kv_lora_rank, kv_b_rows, false));
    }
    PENSTOCK_ASSIGN_OR_RETURN(a.o_proj_, take_linear_cols(r, prefix + ".o_proj", d.hidden, all_heads * d.v_head_dim,
                                                          rows_of(d.v_head_dim), bias, tp.rank() == 0, kFp8));
    if (variant.output_gate) {
        PENSTOCK_ASSIGN_OR_RETURN(a.g_proj_, take_linear_rows(r, prefix + ".g_proj", all_heads * d.v_head_dim, d.hidden,
                                                              rows_of(d.v_head_dim), false, kFp8));
    }
    return a;
}

bool MlaAttention::fp8_input() const {
    const Linear& q_first = dims_.q_lora_rank > 0 ? q_a_proj_ : q_proj_;
    return q_first.fp8() && kv_a_proj_.fp8();
}

MlaAttention::Projection MlaAttention::project(const BatchLayout& layout, const TensorView& x, const RopeTable& rope,
                                               const kernels::Context& ctx, const Fp8Activations* xq,
                                               bool rope_q) const {
    const MlaDims& d = dims_;
    const int64_t n = layout.n_tokens;
    const int64_t qk = d.qk_head_dim();
    Projection p;

    // FP8 q_a (or q) and kv_a read the same x: the caller's FP8 rows, or one quantisation here for both
    // (bit-identical to one each).
    if (!fp8_input()) xq = nullptr;
    // q: [n, n_heads, qk_head_dim]
    {
        const kernels::ProfileScope scope(ctx, "q_proj");
        if (fp8_input()) xq = fp8_rows_of(x, xq, p.x_rows, ctx);
        if (d.q_lora_rank > 0) {
            p.cq = linear_new(q_a_proj_, x, ctx, xq);
            // An FP8 q_b reads the q latent's FP8 rows, made by its norm (bit-identical to quantising cq).
            std::optional<Fp8Activations> cq_q;
            if (q_b_proj_.fp8() && n > 0) cq_q = fp8_rows_scratch(n, d.q_lora_rank, ctx);
            kernels::rms_norm({.out = p.cq,
                               .in = p.cq,
                               .weight = q_a_norm_,
                               .eps = kLatentNormEps,
                               .quant_out = cq_q ? cq_q->data.view() : TensorView{},
                               .quant_scale = cq_q ? cq_q->scale : TensorView{}},
                              ctx);
            p.q = linear_new(q_b_proj_, p.cq, ctx, cq_q ? &*cq_q : nullptr);
        } else {
            p.q = linear_new(q_proj_, x, ctx, xq);
        }
    }
    p.q = p.q.reshape({n, d.n_heads, qk});
    const TensorView q3 = p.q.view();

    // latent rows [n, kv_lora + rope] = [RMSNorm(c) ; RoPE(k_pe)]
    {
        const kernels::ProfileScope scope(ctx, "kv_proj");
        p.kv = linear_new(kv_a_proj_, x, ctx, xq);
        const TensorView c = p.kv.view().slice(1, 0, d.kv_lora_rank);
        kernels::rms_norm({.out = c, .in = c, .weight = kv_a_norm_, .eps = kLatentNormEps}, ctx);
    }
    const Tensor& kv = p.kv;
    const TensorView k_pe =
        kv.view().as_strided(d.kv_lora_rank, {n, 1, d.qk_rope_head_dim}, {d.latent_dim(), d.qk_rope_head_dim, 1});
    if (variant_.rope) {
        const kernels::ProfileScope scope(ctx, "rope");
        const TensorView q_pe = q3.slice(2, d.qk_nope_head_dim, qk);
        const kernels::RopeParams q_params{.x = q_pe,
                                           .positions = layout.positions,
                                           .inv_freq = rope.inv_freq,
                                           .attention_factor = rope.attention_factor,
                                           .interleaved = rope.interleaved};
        if (rope_q) kernels::rope(q_params, ctx);
        kernels::RopeParams rope_k = q_params;
        rope_k.x = k_pe;
        kernels::rope(rope_k, ctx);
    }
    return p;
}

void MlaAttention::forward(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& x, int64_t layer,
                           kv_cache::PagedRowCache* cache, const RopeTable& rope, float softmax_scale,
                           const ModelOptions& options, const TensorView& out, const kernels::Context& ctx,
                           const Fp8Activations* xq) const {
    const MlaDims& d = dims_;
    const int64_t n = layout.n_tokens;
    // FP8 attention in one key round (attend_mha's FP8 path): q's RoPE rides on its quantiser, so q_pe is not rotated
    // in a pass of its own (bit for bit the same e4m3 q).
    const bool fuse_q_rope = variant_.rope && n > 0 && options.mla_form == MlaForm::kMha &&
                             fp8_mha_path(batch, layout, options.fp8_attention, options.max_kv_chunk_capacity);
    const Projection p = project(layout, x, rope, ctx, xq, /*rope_q=*/!fuse_q_rope);
    const TensorView q3 = p.q.view();
    const kernels::RopeParams q_rope{.x = {},
                                     .positions = layout.positions,
                                     .inv_freq = rope.inv_freq,
                                     .attention_factor = rope.attention_factor,
                                     .interleaved = rope.interleaved};

    // The chunk's latents join the cache before attention reads prefix + chunk from it. Under context parallelism
    // each rank projected its own rows; every rank caches the whole chunk (one all-gather of the latent rows).
    {
        const kernels::ProfileScope scope(ctx, "kv_write");
        const Tensor kv_rows = layout.cp ? cp_gather_rows(layout, p.kv, ctx) : p.kv;
        const BatchLayout& whole = layout.cp ? layout.cp->full : layout;
        kernels::paged_write({.cache = cache->layer_view(layer),
                              .rows = kv_rows,
                              .page_table = whole.page_table,
                              .cu_rows = whole.cu_seqlens_q,
                              .pos0 = whole.q_pos0},
                             ctx);
    }

    Tensor attn_out = scratch(ctx, {n, d.n_heads * d.v_head_dim}, x.dtype);
    // FP8 attention before an FP8 o_proj: the attention's epilogue quantises its rows for o_proj (one 128-column
    // block per head), so neither a bf16 attn_out nor o_proj's activation quantisation is needed.
    std::optional<Fp8Activations> attn_rows;
    if (options.fp8_attention && options.fp8_attention_rows && options.mla_form == MlaForm::kMha && o_proj_.fp8() &&
        !variant_.output_gate && d.v_head_dim == kernels::kFp8AttnOutScaleBlock && n > 0) {
        attn_rows = fp8_rows_scratch(n, d.n_heads * d.v_head_dim, ctx);
    }
    bool rows_written = false;
    {
        const kernels::ProfileScope scope(ctx, "core");
        switch (options.mla_form) {
            case MlaForm::kMha:
                rows_written = attend_mha(batch, layout, q3, layer, *cache, softmax_scale,
                                          options.max_kv_chunk_capacity, options.fp8_attention, attn_out,
                                          attn_rows ? &*attn_rows : nullptr, ctx, fuse_q_rope ? &q_rope : nullptr);
                break;
            case MlaForm::kAbsorbed:
                attend_absorbed(batch, layout, q3, layer, *cache, softmax_scale, attn_out, ctx);
                break;
        }
    }
    // An FP8 output gate reads x's FP8 rows too: the caller's, or the ones project() made.
    const Fp8Activations* x_rows = xq != nullptr ? xq : (p.x_rows ? &*p.x_rows : nullptr);
    output(x, attn_out, out, ctx, rows_written ? &*attn_rows : nullptr, x_rows);
}

void MlaAttention::output(const TensorView& x, const TensorView& attn_out, const TensorView& out,
                          const kernels::Context& ctx, const Fp8Activations* attn_rows,
                          const Fp8Activations* x_rows) const {
    PENSTOCK_CHECK(attn_rows == nullptr || (!variant_.output_gate && o_proj_.fp8()))
        << "MLA output: FP8 attention rows need an FP8 o_proj and no output gate";
    if (variant_.output_gate) {
        const kernels::ProfileScope scope(ctx, "out_gate");
        // The gate stays f32 (the GEMM's accumulator, unrounded); attn_out is gated in place in its own dtype (bf16:
        // f32 math, rounded once).
        Tensor gate = linear_new_f32(g_proj_, x, ctx, x_rows);
        kernels::sigmoid_gate({.out = attn_out, .in = attn_out, .gate = gate}, ctx);
    }
    const kernels::ProfileScope scope(ctx, "o_proj");
    linear_forward(o_proj_, attn_out, out, ctx, attn_rows);
    tp_.all_reduce_sum(out, ctx);
}

int64_t MlaAttention::mha_key_rounds(const ForwardBatch& batch, int64_t n_seqs, int64_t capacity) {
    const int64_t piece = std::max<int64_t>(1, capacity / std::max<int64_t>(n_seqs, 1));
    int64_t n_rounds = 0;
    for (const SeqChunk& s : batch.seqs) {
        const int64_t keys = s.prefix_len + static_cast<int64_t>(s.token_ids.size());
        n_rounds = std::max(n_rounds, (keys + piece - 1) / piece);
    }
    return n_rounds;
}

bool MlaAttention::fp8_mha_path(const ForwardBatch& batch, const BatchLayout& layout, bool fp8_attention,
                                int64_t capacity) {
    return fp8_attention && layout.q_pos_step == 1 && !layout.cp && mha_key_rounds(batch, layout.n_seqs, capacity) == 1;
}

bool MlaAttention::attend_mha(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& q, int64_t layer,
                              const kv_cache::PagedRowCache& cache, float softmax_scale, int64_t capacity,
                              bool fp8_attention, const TensorView& attn_out, Fp8Activations* attn_rows,
                              const kernels::Context& ctx, const kernels::RopeParams* q_rope) const {
    const MlaDims& d = dims_;
    const int64_t n = layout.n_tokens;
    const int64_t n_seqs = layout.n_seqs;
    // Each round expands at most `piece` keys per sequence, so a round holds <= capacity keys in total.
    const int64_t piece = std::max<int64_t>(1, capacity / std::max<int64_t>(n_seqs, 1));
    const int64_t n_rounds = mha_key_rounds(batch, n_seqs, capacity);

    const DType act = q.dtype;
    // One round (every sequence's keys fit the capacity): attention writes attn_out itself, with no merge buffers
    // (merging one piece into an empty accumulator returns the piece unchanged, so the result is the same).
    const TensorView out3 = attn_out.reshape({n, d.n_heads, d.v_head_dim});
    const bool direct = n_rounds == 1 && attn_out.dtype == act;
    // Every sequence attends to exactly its own chunk (no cached prefix, one round, no context-parallel row split):
    // the attention's equal_lengths hint.
    bool equal_lengths = n_rounds == 1 && !layout.cp && layout.q_pos_step == 1;
    for (const SeqChunk& s : batch.seqs) equal_lengths = equal_lengths && s.prefix_len == 0;
    // FP8 attention (ModelOptions::fp8_attention) on the one-round path: e4m3 q, k (per-row and per-block scales), v,
    // the output straight in the activation dtype. Chunks with a cached prefix take it too (the CUDA backend's FP8
    // kernel aligns the causal diagonal bottom-right); context-parallel row splits (no promised mask) stay in the
    // activation dtype.
    const bool fp8 = direct && fp8_mha_path(batch, layout, fp8_attention, capacity);
    PENSTOCK_CHECK(q_rope == nullptr || fp8) << "MLA: q's RoPE was left to the FP8 path, which is not taken";
    Tensor acc_out, acc_lse, piece_out;
    if (!direct) {
        acc_out = scratch_filled(ctx, {n, d.n_heads, d.v_head_dim}, 0.0f, act);
        acc_lse = scratch_filled(ctx, {n, d.n_heads}, -std::numeric_limits<float>::infinity());
        piece_out = scratch(ctx, {n, d.n_heads, d.v_head_dim}, act);
    }
    Tensor piece_lse;
    if (!direct) piece_lse = scratch(ctx, {n, d.n_heads});
    bool rows_written = false;  // attn_rows written by the FP8 path (one round with keys)
    Tensor cu_k_host = Tensor::empty({n_seqs + 1}, DType::kI32);
    Tensor k_pos0_host = Tensor::empty({n_seqs}, DType::kI32);
    Tensor cu_k = scratch(ctx, {n_seqs + 1}, DType::kI32);
    Tensor k_pos0 = scratch(ctx, {n_seqs}, DType::kI32);

    for (int64_t r = 0; r < n_rounds; ++r) {
        // Key range of each sequence in this round: [r * piece, min((r + 1) * piece, keys)). The attention hints
        // (kernels/ops.h) say what holds for every sequence with keys in this round: the piece ends at the chunk's
        // last position (bottom-right causal, not under context parallelism) or lies wholly before the chunk.
        int32_t* cu = cu_k_host.ptr<int32_t>();
        cu[0] = 0;
        bool bottom_right = layout.q_pos_step == 1, all_visible = true;
        int64_t max_q = 0, max_k = 0;
        for (int64_t s = 0; s < n_seqs; ++s) {
            const SeqChunk& sc = batch.seqs[static_cast<size_t>(s)];
            const int64_t keys = sc.prefix_len + static_cast<int64_t>(sc.token_ids.size());
            const int64_t begin = std::min(keys, r * piece);
            const int64_t end = std::min(keys, (r + 1) * piece);
            cu[s + 1] = static_cast<int32_t>(cu[s] + (end - begin));
            k_pos0_host.ptr<int32_t>()[s] = static_cast<int32_t>(r * piece);
            if (end > begin && !sc.token_ids.empty()) {
                bottom_right = bottom_right && end == keys;
                all_visible = all_visible && end <= sc.prefix_len;
            }
            max_q = std::max(max_q, static_cast<int64_t>(sc.token_ids.size()));
            max_k = std::max(max_k, end - begin);
        }
        const int64_t total = cu[n_seqs];
        if (total == 0) continue;
        std::optional<kernels::ProfileScope> expand_scope(std::in_place, ctx, "kv_expand");
        kernels::transfer({.out = cu_k, .in = cu_k_host}, ctx);
        kernels::transfer({.out = k_pos0, .in = k_pos0_host}, ctx);
        // This round's latent rows of every sequence, from its pages: [total, kv_lora + rope].
        Tensor latent = scratch(ctx, {total, d.latent_dim()}, cache.layer_view(layer).dtype);
        kernels::paged_gather({.out = latent,
                               .cache = cache.layer_view(layer),
                               .page_table = layout.page_table,
                               .cu_rows = cu_k,
                               .pos0 = k_pos0},
                              ctx);
        // K = [k_nope_h ; k_pe] and V per head from c (the latent's first kv_lora columns): [k_nope_h ; v_h] =
        // c @ W_kv_b_h^T for every head in one GEMM into kv_rows [total, H * (nope + v)], read by the attention as
        // strided views (no copy). k_pe (the latent's one rope head) goes to the attention as AttentionParams::k_rope,
        // broadcast over the heads by a stride-0 view, so K's rope columns are never written per head (a backend
        // kernel that does not read k_rope gets the two concatenated). FP8 attention with an e4m3 kv_b writes
        // kv_rows by a block-scaled FP8 linear and quantises views of it and of k_pe.
        const TensorView w = kv_b_proj_.weight;  // [H * (nope + v), kv_lora]
        const int64_t head_rows = d.qk_nope_head_dim + d.v_head_dim;
        PENSTOCK_CHECK(w.stride(1) == 1) << "kv_b: last dim must be contiguous";
        Tensor kv_rows = scratch(ctx, {total, d.n_heads * head_rows}, act);
        if (fp8 && kv_b_fp8_.fp8()) {
            // (the latents quantised per 128 columns)
            linear_forward(kv_b_fp8_, latent.view().slice(1, 0, d.kv_lora_rank), kv_rows, ctx);
        } else {
            kernels::gemm({.out = kv_rows, .a = latent.view().slice(1, 0, d.kv_lora_rank), .b = w, .trans_b = true},
                          ctx);
        }
        const TensorView kv3 = kv_rows.view().reshape({total, d.n_heads, head_rows});
        const TensorView k_nope = kv3.slice(2, 0, d.qk_nope_head_dim);
        const TensorView v = kv3.slice(2, d.qk_nope_head_dim, head_rows);
        const TensorView k_pe =
            latent.view().as_strided(d.kv_lora_rank, {total, d.n_heads, d.qk_rope_head_dim}, {d.latent_dim(), 0, 1});
        expand_scope.reset();
        const kernels::AttentionParams ap{.out = direct ? out3 : piece_out.view(),
                                          .lse = direct ? TensorView{} : piece_lse.view(),  // one round: no merge
                                          .q = q,
                                          .k = fp8 ? TensorView{} : k_nope,  // (FP8: k_nope and k_pe)
                                          .v = v,
                                          .k_rope = fp8 ? TensorView{} : k_pe,
                                          .cu_seqlens_q = layout.cu_seqlens_q,
                                          .cu_seqlens_k = cu_k,
                                          .q_pos0 = layout.q_pos0,
                                          .k_pos0 = k_pos0,
                                          .scale = softmax_scale,
                                          .causal = true,
                                          .q_pos_step = layout.q_pos_step,
                                          .max_seqlen_q = static_cast<int32_t>(max_q),
                                          .max_seqlen_k = static_cast<int32_t>(max_k),
                                          .mask_kind = bottom_right  ? kernels::AttentionMaskKind::kCausalBottomRight
                                                       : all_visible ? kernels::AttentionMaskKind::kAllVisible
                                                                     : kernels::AttentionMaskKind::kGeneral,
                                          .equal_lengths = equal_lengths};
        if (fp8) {
            attend_mha_fp8(ap, k_nope, k_pe, attn_rows, ctx, q_rope);
            rows_written = attn_rows != nullptr;
            continue;
        }
        const kernels::ProfileScope attention_scope(ctx, "attention");
        kernels::attention(ap, ctx);
        if (!direct) {
            kernels::merge_attention({.out = acc_out, .lse = acc_lse, .in_out = piece_out, .in_lse = piece_lse}, ctx);
        }
    }
    if (direct) {
        if (cu_k_host.ptr<int32_t>()[n_seqs] == 0) {
            kernels::fill({.out = out3, .value = 0.0f}, ctx);  // no keys at all: the empty accumulator
        }
        return rows_written;
    }
    kernels::copy({.out = out3, .in = acc_out}, ctx);
    return false;
}

void MlaAttention::attend_mha_fp8(const kernels::AttentionParams& ap, const TensorView& k_nope, const TensorView& k_pe,
                                  Fp8Activations* attn_rows, const kernels::Context& ctx,
                                  const kernels::RopeParams* q_rope) const {
    const TensorView &q = ap.q, &v = ap.v;
    const int64_t n = q.size(0), total = k_nope.size(0), heads = k_nope.size(1);
    Tensor q_scale = scratch(ctx, {n, q.size(1)});
    Tensor k_scale = scratch(ctx, {total, heads});
    Tensor v_scale = scratch(ctx, {1});
    Tensor qf = scratch(ctx, {n, q.size(1), q.size(2)}, DType::kF8E4M3);
    Tensor kf = scratch(ctx, {total, heads, k_nope.size(2) + k_pe.size(2)}, DType::kF8E4M3);
    Tensor vf = scratch(ctx, {total, v.size(1), v.size(2)}, DType::kF8E4M3);
    {
        const kernels::ProfileScope scope(ctx, "fp8_quant");
        // (q_rope: q's rope columns, the last qk_rope_head_dim, rotated by the quantiser first)
        kernels::fp8_quantize_heads({.out = qf,
                                     .scale = q_scale,
                                     .in = q,
                                     .rope = q_rope != nullptr ? *q_rope : kernels::RopeParams{},
                                     .rope_col = q_rope != nullptr ? q.size(2) - k_pe.size(2) : 0},
                                    ctx);
        kernels::fp8_quantize_heads({.out = kf,
                                     .scale = k_scale,
                                     .in = k_nope,
                                     .in_tail = k_pe,
                                     .cu_seqlens = ap.cu_seqlens_k,
                                     .block = kernels::kFp8AttnKeyBlock},
                                    ctx);
        kernels::fp8_quantize_tensor({.out = vf, .scale = v_scale, .in = v}, ctx);
    }
    {
        const kernels::ProfileScope scope(ctx, "attention");
        kernels::AttentionParams f = ap;  // out: out3 in the activation dtype
        f.q = qf;
        f.k = kf;
        f.v = vf;
        f.q_descale = q_scale;
        f.k_descale = k_scale;
        f.v_descale = v_scale;
        f.k_descale_block = kernels::kFp8AttnKeyBlock;
        if (attn_rows != nullptr) {  // o_proj's FP8 rows: [n, H * 128] e4m3, scales [n, H] (strides {1, n})
            f.out = attn_rows->data.view().reshape({n, q.size(1), v.size(2)});
            f.out_scale = attn_rows->scale;
            f.out_scale_from = ap.out.dtype;  // the activation dtype the unfused attn_out would have
        }
        kernels::attention(f, ctx);
    }
}

Tensor MlaAttention::absorb_q(const TensorView& q, const kernels::Context& ctx) const {
    Tensor q_abs = scratch(ctx, {q.size(0), dims_.n_heads, dims_.latent_dim()}, q.dtype);
    absorb_q(q, q_abs, ctx);
    return q_abs;
}

void MlaAttention::absorb_q(const TensorView& q, const TensorView& q_abs, const kernels::Context& ctx) const {
    const MlaDims& d = dims_;
    const int64_t n = q.size(0);
    const int64_t latent_dim = d.latent_dim();
    const int64_t head_rows = d.qk_nope_head_dim + d.v_head_dim;  // kv_b rows per head
    const TensorView& w = kv_b_proj_.weight;                      // [n_heads * head_rows, kv_lora]
    PENSTOCK_CHECK(q_abs.ndim == 3 && q_abs.size(0) == n && q_abs.size(1) == d.n_heads && q_abs.size(2) == latent_dim &&
                   q_abs.dtype == q.dtype && q_abs.is_contiguous())
        << "absorb_q: q_abs " << q_abs.shape_string();
    // q_abs[:, h] = [q_nope_h @ W_UK_h ; q_pe_h]  (W_UK_h = kv_b rows [h * head_rows, + nope), [nope, kv_lora]): one
    // GEMM batched over the heads (strided views; the CPU reference loops over them, CUDA makes one cuBLASLt call).
    PENSTOCK_CHECK(q.stride(2) == 1 && w.stride(1) == 1) << "absorb_q: last dims must be contiguous";
    kernels::gemm({.out = q_abs.as_strided(0, {d.n_heads, n, d.kv_lora_rank}, {latent_dim, d.n_heads * latent_dim, 1}),
                   .a = q.as_strided(0, {d.n_heads, n, d.qk_nope_head_dim}, {q.stride(1), q.stride(0), 1}),
                   .b = w.as_strided(0, {d.n_heads, d.qk_nope_head_dim, d.kv_lora_rank},
                                     {head_rows * w.stride(0), w.stride(0), 1}),
                   .trans_b = false},
                  ctx);
    kernels::copy(
        {.out = q_abs.slice(2, d.kv_lora_rank, latent_dim), .in = q.slice(2, d.qk_nope_head_dim, d.qk_head_dim())},
        ctx);
}

void MlaAttention::absorb_out(const TensorView& o_lat, const TensorView& attn_out, const kernels::Context& ctx) const {
    const MlaDims& d = dims_;
    const int64_t n = o_lat.size(0);
    const int64_t head_rows = d.qk_nope_head_dim + d.v_head_dim;
    const TensorView& w = kv_b_proj_.weight;
    // attn_out[:, h] = o_lat_h @ W_UV_h^T  (W_UV_h = kv_b rows [h * head_rows + nope, + v), [v, kv_lora]), batched
    // over the heads as in absorb_q.
    PENSTOCK_CHECK(o_lat.stride(2) == 1 && w.stride(1) == 1) << "absorb_out: last dims must be contiguous";
    kernels::gemm(
        {.out = attn_out.as_strided(0, {d.n_heads, n, d.v_head_dim}, {d.v_head_dim, d.n_heads * d.v_head_dim, 1}),
         .a = o_lat.as_strided(0, {d.n_heads, n, d.kv_lora_rank}, {o_lat.stride(1), o_lat.stride(0), 1}),
         .b = w.as_strided(d.qk_nope_head_dim * w.stride(0), {d.n_heads, d.v_head_dim, d.kv_lora_rank},
                           {head_rows * w.stride(0), w.stride(0), 1}),
         .trans_b = true},
        ctx);
}

void MlaAttention::attend_absorbed(const ForwardBatch& batch, const BatchLayout& layout, const TensorView& q,
                                   int64_t layer, const kv_cache::PagedRowCache& cache, float softmax_scale,
                                   const TensorView& attn_out, const kernels::Context& ctx) const {
    const MlaDims& d = dims_;
    const int64_t n = layout.n_tokens;
    const int64_t latent_dim = d.latent_dim();
    std::optional<kernels::ProfileScope> absorb_scope(std::in_place, ctx, "absorb_q");
    const Tensor q_abs = absorb_q(q, ctx);
    absorb_scope.reset();
    std::optional<kernels::ProfileScope> attention_scope(std::in_place, ctx, "attention");

    // Every sequence's whole context (prefix + chunk) as one varlen key set: K = latent (1 head), V = its c part.
    const int64_t total = layout.total_keys;
    Tensor latent = scratch(ctx, {total, latent_dim}, cache.layer_view(layer).dtype);
    kernels::paged_gather({.out = latent,
                           .cache = cache.layer_view(layer),
                           .page_table = layout.page_table,
                           .cu_rows = layout.cu_seqlens_k,
                           .pos0 = layout.k_pos0},
                          ctx);
    const TensorView k = latent.view().as_strided(0, {total, 1, latent_dim}, {latent_dim, latent_dim, 1});
    const TensorView v = latent.view().as_strided(0, {total, 1, d.kv_lora_rank}, {latent_dim, latent_dim, 1});
    Tensor o_lat = scratch(ctx, {n, d.n_heads, d.kv_lora_rank}, q.dtype);
    Tensor lse = scratch(ctx, {n, d.n_heads});
    kernels::attention({.out = o_lat,
                        .lse = lse,
                        .q = q_abs,
                        .k = k,
                        .v = v,
                        .cu_seqlens_q = layout.cu_seqlens_q,
                        .cu_seqlens_k = layout.cu_seqlens_k,
                        .q_pos0 = layout.q_pos0,
                        .k_pos0 = layout.k_pos0,
                        .scale = softmax_scale,
                        .causal = true,
                        .q_pos_step = layout.q_pos_step},
                       ctx);
    attention_scope.reset();
    const kernels::ProfileScope out_scope(ctx, "absorb_out");
    absorb_out(o_lat, attn_out, ctx);
}

}  // namespace penstock::models
