// Linear layer helpers.
#include "models/linear.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "kernels/profile.h"

namespace penstock::models {

namespace {

// The weight of `prefix` (sliced along `dim` when `sliced`; reader.take() otherwise), FP8 where allowed.
Result<Linear> take_weight(WeightReader& reader, const std::string& prefix, const Shape& shape, int dim, IndexRange r,
                           bool sliced, WeightFormat format) {
    const std::string name = prefix + ".weight";
    Linear l;
    if (format == WeightFormat::kFp8Native && reader.fp8_native(name)) {
        PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor w, reader.take_fp8_slice(name, shape, dim, r.begin, r.end));
        l.weight = std::move(w.weight);
        l.scale = std::move(w.scale);
        return l;
    }
    if (!sliced) {
        PENSTOCK_ASSIGN_OR_RETURN(l.weight, reader.take(name, shape));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(l.weight, reader.take_slice(name, shape, dim, r.begin, r.end));
    }
    return l;
}

}  // namespace

Result<Linear> take_linear(WeightReader& reader, const std::string& prefix, int64_t out_features, int64_t in_features,
                           bool has_bias, WeightFormat format) {
    PENSTOCK_ASSIGN_OR_RETURN(Linear l, take_weight(reader, prefix, {out_features, in_features}, 0,
                                                    IndexRange{0, out_features}, /*sliced=*/false, format));
    if (has_bias) {
        PENSTOCK_ASSIGN_OR_RETURN(l.bias, reader.take(prefix + ".bias", {out_features}));
    }
    return l;
}

Result<Linear> take_linear_rows(WeightReader& reader, const std::string& prefix, int64_t out_features,
                                int64_t in_features, IndexRange rows, bool has_bias, WeightFormat format) {
    PENSTOCK_ASSIGN_OR_RETURN(
        Linear l, take_weight(reader, prefix, {out_features, in_features}, 0, rows, /*sliced=*/true, format));
    if (has_bias) {
        PENSTOCK_ASSIGN_OR_RETURN(l.bias, reader.take_slice(prefix + ".bias", {out_features}, 0, rows.begin, rows.end));
    }
    return l;
}

Result<Linear> take_linear_cols(WeightReader& reader, const std::string& prefix, int64_t out_features,
                                int64_t in_features, IndexRange cols, bool has_bias, bool keep_bias,
                                WeightFormat format) {
    PENSTOCK_ASSIGN_OR_RETURN(
        Linear l, take_weight(reader, prefix, {out_features, in_features}, 1, cols, /*sliced=*/true, format));
    if (has_bias) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor b, reader.take(prefix + ".bias", {out_features}));
        if (keep_bias) l.bias = std::move(b);
    }
    return l;
}

Tensor scratch(const kernels::Context& ctx, const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, kernels::allocator_of(ctx));
}

Tensor scratch_filled(const kernels::Context& ctx, const Shape& shape, float value, DType dtype) {
    Tensor t = scratch(ctx, shape, dtype);
    kernels::fill({.out = t, .value = value}, ctx);
    return t;
}

Fp8Activations fp8_rows_scratch(int64_t m, int64_t k, const kernels::Context& ctx) {
    const int64_t kb = (k + kernels::kFp8Block - 1) / kernels::kFp8Block;
    Tensor scale_store = scratch(ctx, {kb * m});
    const TensorView scale = scale_store.view().as_strided(0, {m, kb}, {1, m});
    return {.data = scratch(ctx, {m, k}, DType::kF8E4M3), .scale_store = std::move(scale_store), .scale = scale};
}

Fp8Activations fp8_quantize_rows(const TensorView& x, const kernels::Context& ctx) {
    Fp8Activations q = fp8_rows_scratch(x.size(0), x.size(1), ctx);
    if (x.size(0) > 0) kernels::fp8_act_quant({.out = q.data, .scale = q.scale, .in = x}, ctx);
    return q;
}

const Fp8Activations* fp8_rows_of(const TensorView& x, const Fp8Activations* xq, std::optional<Fp8Activations>& own,
                                  const kernels::Context& ctx) {
    if (xq != nullptr || x.size(0) == 0) return xq;
    const kernels::ProfileScope scope(ctx, "act_quant");
    own = fp8_quantize_rows(x, ctx);
    return &*own;
}

void linear_forward(const Linear& layer, const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                    const Fp8Activations* xq) {
    if (layer.fp8()) {
        if (x.size(0) == 0) return;
        std::optional<Fp8Activations> own;
        const Fp8Activations& q = *fp8_rows_of(x, xq, own, ctx);
        PENSTOCK_CHECK(q.data.size(0) == x.size(0) && q.data.size(1) == x.size(1))
            << "linear_forward: the shared FP8 activations do not match x";
        kernels::fp8_gemm({.out = out, .a = q.data, .a_scale = q.scale, .b = layer.weight, .b_scale = layer.scale},
                          ctx);
        if (layer.bias.defined()) {  // out += bias, through a contiguous copy when out is strided
            Tensor b = scratch(ctx, {out.size(0), out.size(1)}, out.dtype);
            kernels::copy({.out = b, .in = layer.bias.view().as_strided(0, {out.size(0), out.size(1)}, {0, 1})}, ctx);
            Tensor sum = scratch(ctx, {out.size(0), out.size(1)}, out.dtype);
            kernels::copy({.out = sum, .in = out}, ctx);
            kernels::add({.out = sum, .a = sum, .b = b}, ctx);
            kernels::copy({.out = out, .in = sum}, ctx);
        }
        return;
    }
    float beta = 0.0f;
    if (layer.bias.defined()) {
        // Every row starts as the bias (a stride-0 broadcast), then the GEMM accumulates onto it.
        kernels::copy({.out = out, .in = layer.bias.view().as_strided(0, {out.size(0), out.size(1)}, {0, 1})}, ctx);
        beta = 1.0f;
    }
    kernels::gemm({.out = out, .a = x, .b = layer.weight, .trans_b = true, .alpha = 1.0f, .beta = beta}, ctx);
}

Tensor linear_new(const Linear& layer, const TensorView& x, const kernels::Context& ctx, const Fp8Activations* xq) {
    Tensor out = scratch(ctx, {x.size(0), layer.out_features()}, x.dtype);
    linear_forward(layer, x, out, ctx, xq);
    return out;
}

Tensor linear_new_f32(const Linear& layer, const TensorView& x, const kernels::Context& ctx, const Fp8Activations* xq) {
    Tensor out = scratch(ctx, {x.size(0), layer.out_features()}, DType::kF32);
    linear_forward(layer, x, out, ctx, xq);
    return out;
}

Tensor to_f32_scratch(const Tensor& x, const kernels::Context& ctx) {
    if (x.dtype() == DType::kF32) return x;
    Tensor out = scratch(ctx, x.view().shape_vec(), DType::kF32);
    kernels::copy({.out = out, .in = x}, ctx);
    return out;
}

void block_rms_norm(const TensorView& weight, const TensorView& in, const TensorView& out, float eps,
                    const kernels::Context& ctx, const TensorView& residual, const Fp8Activations* xq) {
    const kernels::ProfileScope scope(ctx, "norm");
    kernels::rms_norm({.out = out,
                       .in = in,
                       .weight = weight,
                       .eps = eps,
                       .residual = residual,
                       .quant_out = xq != nullptr ? xq->data.view() : TensorView{},
                       .quant_scale = xq != nullptr ? xq->scale : TensorView{}},
                      ctx);
}

const Fp8Activations* BlockNorms::apply(const TensorView& weight, const TensorView& hidden, const TensorView& sub_out,
                                        const TensorView& out, bool fp8_out) {
    const Fp8Activations* xq = fp8_rows(fp8_out);
    block_rms_norm(weight, hidden, out, eps_, ctx_, pending_ ? sub_out : TensorView{}, xq);
    pending_ = true;
    return xq;
}

const Fp8Activations* BlockNorms::fp8_rows(bool want) {
    if (!want || n_rows_ == 0) return nullptr;
    if (!xq_) xq_ = fp8_rows_scratch(n_rows_, dim_, ctx_);
    return &*xq_;
}

void BlockNorms::finish(const TensorView& hidden, const TensorView& sub_out) {
    if (pending_) residual_add(hidden, sub_out, ctx_);
    pending_ = false;
}

void residual_add(const TensorView& hidden, const TensorView& sub_out, const kernels::Context& ctx) {
    const kernels::ProfileScope scope(ctx, "residual");
    kernels::add({.out = hidden, .a = hidden, .b = sub_out}, ctx);
}

Result<EmbedHead> EmbedHead::load(WeightReader& r, const loader::ModelConfig& config, bool first_stage,
                                  bool last_stage, const TensorParallel& tp) {
    EmbedHead e;
    e.vocab = config.vocab_size;
    e.eps = static_cast<float>(config.rms_norm_eps);
    e.tp = tp;
    const int64_t h = config.hidden_size;
    const bool tie = config.tie_word_embeddings;
    // Vocab-parallel rows: rank r holds [r * Vp, min((r + 1) * Vp, V)), Vp = ceil(V / tp).
    const int64_t vp = tp.vocab_per_rank(e.vocab);
    const IndexRange rows{std::min(e.vocab, tp.rank() * vp), std::min(e.vocab, (tp.rank() + 1) * vp)};
    if (first_stage || (tie && last_stage)) {
        PENSTOCK_ASSIGN_OR_RETURN(e.embed, r.take("model.embed_tokens.weight", {e.vocab, h}));
    }
    if (last_stage) {
        PENSTOCK_ASSIGN_OR_RETURN(e.norm, r.take("model.norm.weight", {h}));
        if (tie) {
            e.lm_head = e.embed;
            e.head_rows = rows;
        } else {
            PENSTOCK_ASSIGN_OR_RETURN(e.lm_head, r.take_slice("lm_head.weight", {e.vocab, h}, 0, rows.begin, rows.end));
            e.head_rows = {0, rows.size()};
        }
    }
    return e;
}

Tensor EmbedHead::logits(const BatchLayout& layout, const TensorView& hidden, const kernels::Context& ctx) const {
    PENSTOCK_CHECK(lm_head.defined()) << "logits requested on a stage without the head";
    if (layout.cp) {  // context parallelism: the hidden rows back in batch order (one gather per forward)
        const Tensor full = cp_gather_rows(layout, hidden, ctx);
        return logits(layout.cp->full, full, ctx);
    }
    const auto rows = static_cast<int64_t>(layout.logit_rows.size());
    Tensor selected = scratch(ctx, {rows, hidden.size(1)}, hidden.dtype);
    kernels::gather_rows({.out = selected, .in = hidden, .index = layout.logit_index}, ctx);
    kernels::rms_norm({.out = selected, .in = selected, .weight = norm, .eps = eps}, ctx);
    const TensorView w = lm_head.view().slice(0, head_rows.begin, head_rows.end);
    if (!tp.active()) {
        Tensor out = scratch(ctx, {rows, vocab});
        kernels::gemm({.out = out, .a = selected, .b = w, .trans_b = true}, ctx);
        return out;
    }
    // Each rank's logit columns padded to Vp, gathered as [tp, rows, Vp], then laid out as [rows, V].
    const int64_t vp = tp.vocab_per_rank(vocab);
    Tensor local = scratch_filled(ctx, {rows, vp}, 0.0f);
    if (head_rows.size() > 0) {
        kernels::gemm({.out = local.view().slice(1, 0, head_rows.size()), .a = selected, .b = w, .trans_b = true}, ctx);
    }
    Tensor gathered = scratch(ctx, {tp.size() * rows, vp});
    tp.all_gather(gathered, local, ctx);
    Tensor out = scratch(ctx, {rows, vocab});
    for (int r = 0; r < tp.size(); ++r) {
        const int64_t begin = std::min(vocab, r * vp);
        const int64_t end = std::min(vocab, (r + 1) * vp);
        if (end == begin) continue;
        kernels::copy({.out = out.view().slice(1, begin, end),
                       .in = gathered.view().slice(0, r * rows, (r + 1) * rows).slice(1, 0, end - begin)},
                      ctx);
    }
    return out;
}

}  // namespace penstock::models
