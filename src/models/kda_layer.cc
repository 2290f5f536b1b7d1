// KDA layer: loading (checkpoint and transformers-internal names) and the forward composition over kernels/ops_kda.h.
#include "models/kda_layer.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "kernels/profile.h"
#include "models/tensor_parallel.h"

namespace penstock::models {

namespace {

// The bf16 path's delta-rule form: kTensorCoreSplit; PENSTOCK_KDA_DELTA_FORM=fused (developer A/B knob, read once)
// selects the one-kernel kTensorCore form that the split form replaced (docs/perf/2026-12-01-kda-split.md).
kernels::DeltaRulePrecision bf16_delta_rule_precision() {
    static const kernels::DeltaRulePrecision p = [] {
        const char* e = std::getenv("PENSTOCK_KDA_DELTA_FORM");
        return e != nullptr && std::strcmp(e, "fused") == 0 ? kernels::DeltaRulePrecision::kTensorCore
                                                             : kernels::DeltaRulePrecision::kTensorCoreSplit;
    }();
    return p;
}

// `<prefix>.<name>` when the checkpoint has `<prefix>.<name><probe>`, else `<prefix>.<alt>` (transformers' internal
// module path, e.g. `forget_gate.f_a_proj`).
std::string pick(const WeightReader& r, const std::string& prefix, const std::string& name, const std::string& alt,
                 const std::string& probe) {
    return r.contains(prefix + "." + name + probe) || !r.contains(prefix + "." + alt + probe) ? prefix + "." + name
                                                                                              : prefix + "." + alt;
}

// Reads a depthwise conv weight [channels, 1, kernel] or [channels, kernel] as host [channels, kernel].
Result<Tensor> take_conv(WeightReader& r, const std::string& name, int64_t channels, int64_t kernel) {
    if (r.shape_of(name) == Shape{channels, 1, kernel}) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor t, r.take_host(name, {channels, 1, kernel}));
        return t.reshape({channels, kernel});
    }
    return r.take_host(name, {channels, kernel});
}

// Rows [range) of a host [rows, cols] tensor, contiguous.
Tensor host_rows(const Tensor& t, IndexRange range) {
    Tensor out = Tensor::empty({range.size(), t.size(1)}, t.dtype());
    kernels::copy({.out = out, .in = t.view().slice(0, range.begin, range.end)}, kernels::Context{});
    return out;
}

// Copies rows of `parts` into one [sum rows, cols] tensor.
Tensor stack_rows(const std::vector<const Tensor*>& parts) {
    int64_t rows = 0;
    for (const Tensor* t : parts) rows += t->size(0);
    Tensor out = Tensor::empty({rows, parts.front()->size(1)}, DType::kF32);
    size_t off = 0;
    for (const Tensor* t : parts) {
        std::memcpy(reinterpret_cast<char*>(out.ptr<float>()) + off, t->ptr<const float>(), t->nbytes());
        off += t->nbytes();
    }
    return out;
}

}  // namespace

Result<KdaAttention> KdaAttention::load(WeightReader& r, const std::string& prefix, const KdaOptions& o,
                                        const TensorParallel& tp) {
    KdaAttention a;
    a.options_ = o;
    a.tp_ = tp;
    const KdaDims& d = o.dims;  // the whole layer
    const int64_t qkv = d.qkv_dim();
    const IndexRange heads = tp.shard(d.n_heads);
    if (heads.size() == 0) {
        return invalid_argument("tensor parallel size " + std::to_string(tp.size()) + " exceeds the KDA head count " +
                                std::to_string(d.n_heads));
    }
    a.options_.dims.n_heads = heads.size();
    const IndexRange cols{heads.begin * d.head_dim, heads.end * d.head_dim};  // this rank's channels of one of q/k/v
    constexpr WeightFormat kFp8 = WeightFormat::kFp8Native;
    if (r.fp8_native(prefix + ".q_proj.weight")) {
        // Native FP8 q / k / v stay three e4m3 weights with their block scales (one GEMM each, sharing x's FP8 rows).
        PENSTOCK_ASSIGN_OR_RETURN(a.q_proj_, take_linear_rows(r, prefix + ".q_proj", qkv, d.hidden, cols, false, kFp8));
        PENSTOCK_ASSIGN_OR_RETURN(a.k_proj_, take_linear_rows(r, prefix + ".k_proj", qkv, d.hidden, cols, false, kFp8));
        PENSTOCK_ASSIGN_OR_RETURN(a.v_proj_, take_linear_rows(r, prefix + ".v_proj", qkv, d.hidden, cols, false, kFp8));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(
            Tensor q, r.take_host_slice(prefix + ".q_proj.weight", {qkv, d.hidden}, 0, cols.begin, cols.end));
        PENSTOCK_ASSIGN_OR_RETURN(
            Tensor k, r.take_host_slice(prefix + ".k_proj.weight", {qkv, d.hidden}, 0, cols.begin, cols.end));
        PENSTOCK_ASSIGN_OR_RETURN(
            Tensor v, r.take_host_slice(prefix + ".v_proj.weight", {qkv, d.hidden}, 0, cols.begin, cols.end));
        a.qkv_proj_.weight = r.place(stack_rows({&q, &k, &v}));
    }

    Tensor conv_q, conv_k, conv_v;
    if (r.contains(prefix + ".conv1d.weight")) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor c, take_conv(r, prefix + ".conv1d.weight", 3 * qkv, d.conv_kernel));
        conv_q = host_rows(c, cols);
        conv_k = host_rows(c, {qkv + cols.begin, qkv + cols.end});
        conv_v = host_rows(c, {2 * qkv + cols.begin, 2 * qkv + cols.end});
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor cq, take_conv(r, prefix + ".q_conv1d.weight", qkv, d.conv_kernel));
        PENSTOCK_ASSIGN_OR_RETURN(Tensor ck, take_conv(r, prefix + ".k_conv1d.weight", qkv, d.conv_kernel));
        PENSTOCK_ASSIGN_OR_RETURN(Tensor cv, take_conv(r, prefix + ".v_conv1d.weight", qkv, d.conv_kernel));
        conv_q = host_rows(cq, cols);
        conv_k = host_rows(ck, cols);
        conv_v = host_rows(cv, cols);
    }
    a.conv_weight_ = r.place_f32(stack_rows({&conv_q, &conv_k, &conv_v}));  // short_conv reads it in f32

    PENSTOCK_ASSIGN_OR_RETURN(
        a.f_a_proj_,
        take_linear(r, pick(r, prefix, "f_a_proj", "forget_gate.f_a_proj", ".weight"), d.head_dim, d.hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(a.f_b_proj_, take_linear_rows(r, pick(r, prefix, "f_b_proj", "forget_gate.f_b_proj", ".weight"),
                                                            qkv, d.head_dim, cols, false));
    const std::string a_log_name = pick(r, prefix, "A_log", "forget_gate.A_log", "");
    if (r.shape_of(a_log_name) == Shape{1, 1, d.n_heads, 1}) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor t,
                                  r.take_host_slice(a_log_name, {1, 1, d.n_heads, 1}, 2, heads.begin, heads.end));
        a.a_log_ = r.place_f32(t.reshape({heads.size()}));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(a.a_log_, r.take_slice(a_log_name, {d.n_heads}, 0, heads.begin, heads.end));
    }
    PENSTOCK_ASSIGN_OR_RETURN(a.dt_bias_, r.take_slice(pick(r, prefix, "dt_bias", "forget_gate.dt_bias", ""), {qkv}, 0,
                                                       cols.begin, cols.end));
    PENSTOCK_ASSIGN_OR_RETURN(a.b_proj_, take_linear_rows(r, prefix + ".b_proj", d.n_heads, d.hidden, heads, false));
    if (o.full_rank_output_gate) {
        // The full-rank output gate is as large as q_proj ([qkv, hidden]): e4m3 when the checkpoint stores it so (it
        // then reads x's FP8 rows with q / k / v); the low-rank gates stay dequantised.
        const WeightFormat g_format = r.fp8_native(prefix + ".g_proj.weight") ? kFp8 : WeightFormat::kDense;
        PENSTOCK_ASSIGN_OR_RETURN(a.g_proj_,
                                  take_linear_rows(r, prefix + ".g_proj", qkv, d.hidden, cols, false, g_format));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(a.g_a_proj_, take_linear(r, prefix + ".g_a_proj", d.head_dim, d.hidden, false));
        PENSTOCK_ASSIGN_OR_RETURN(a.g_b_proj_, take_linear_rows(r, prefix + ".g_b_proj", qkv, d.head_dim, cols, false));
    }
    PENSTOCK_ASSIGN_OR_RETURN(a.o_norm_, r.take(prefix + ".o_norm.weight", {d.head_dim}));
    PENSTOCK_ASSIGN_OR_RETURN(a.o_proj_,
                              take_linear_cols(r, prefix + ".o_proj", d.hidden, qkv, cols, false, false, kFp8));
    return a;
}

void KdaAttention::forward(const BatchLayout& layout, const TensorView& x, const TensorView& recurrent_state,
                           const TensorView& conv_state, const TensorView& state_slots, const TensorView& out,
                           const kernels::Context& ctx, const Fp8Activations* xq) const {
    const KdaDims& d = options_.dims;
    const int64_t n = layout.n_tokens;
    const int64_t qkv = d.qkv_dim();
    const int64_t hd = d.head_dim;

    // The KDA ops are f32-only: every projection feeding them produces f32 (bf16 activations and weights multiply
    // with fp32 accumulation), the layer runs in f32 and only o_proj's input returns to the activation dtype.
    // Per-row work (the input projections, the gates, the output gate, norm and o_proj) runs on this layout's rows.
    // [n, 3 qkv] = x @ [Wq; Wk; Wv]^T; f [n, qkv] = the low-rank forget gate; beta [n, n_heads].
    std::optional<kernels::ProfileScope> scope(std::in_place, ctx, "qkv_proj");
    Tensor mixed;
    std::optional<Fp8Activations> own;  // x's FP8 rows when the caller has none: q / k / v and an FP8 g_proj share them
    if (fp8_input()) {
        xq = fp8_rows_of(x, xq, own, ctx);
        mixed = scratch(ctx, {n, 3 * qkv});
        linear_forward(q_proj_, x, mixed.view().slice(1, 0, qkv), ctx, xq);
        linear_forward(k_proj_, x, mixed.view().slice(1, qkv, 2 * qkv), ctx, xq);
        linear_forward(v_proj_, x, mixed.view().slice(1, 2 * qkv, 3 * qkv), ctx, xq);
    } else {
        mixed = linear_new_f32(qkv_proj_, x, ctx);
    }
    scope.emplace(ctx, "gates");
    std::optional<kernels::ProfileScope> step(std::in_place, ctx, "f_proj");
    Tensor f = linear_new_f32(f_b_proj_, linear_new(f_a_proj_, x, ctx), ctx);
    step.emplace(ctx, "decay");
    kernels::kda_gate({.out = f.view().reshape({n, d.n_heads, hd}),
                       .f = f.view().reshape({n, d.n_heads, hd}),
                       .a_log = a_log_,
                       .dt_bias = dt_bias_,
                       .form = options_.gate_form,
                       .lower_bound = options_.gate_lower_bound},
                      ctx);
    step.emplace(ctx, "beta");
    Tensor beta = linear_new_f32(b_proj_, x, ctx);
    kernels::sigmoid({.out = beta, .in = beta}, ctx);
    step.reset();

    // Context parallelism: the short conv and the delta rule are recurrences along each sequence, so the cp ranks
    // all-gather the projected rows (one packed gather of [3 qkv | qkv | n_heads] f32 per row), run both on the
    // whole chunk (identical state updates on every rank) and keep their own output rows for the rest.
    const BatchLayout& seq = layout.cp ? layout.cp->full : layout;
    const int64_t n_seq = seq.n_tokens;
    scope.reset();
    if (layout.cp) {
        const kernels::ProfileScope cp_scope(ctx, "cp_gather");
        const int64_t width = 4 * qkv + d.n_heads;
        Tensor packed = scratch(ctx, {n, width}, DType::kF32);
        if (n > 0) {
            kernels::copy({.out = packed.view().slice(1, 0, 3 * qkv), .in = mixed}, ctx);
            kernels::copy({.out = packed.view().slice(1, 3 * qkv, 4 * qkv), .in = f}, ctx);
            kernels::copy({.out = packed.view().slice(1, 4 * qkv, width), .in = beta}, ctx);
        }
        const Tensor all = cp_gather_rows(layout, packed, ctx);
        mixed = scratch(ctx, {n_seq, 3 * qkv}, DType::kF32);
        f = scratch(ctx, {n_seq, qkv}, DType::kF32);
        beta = scratch(ctx, {n_seq, d.n_heads}, DType::kF32);
        if (n_seq > 0) {
            kernels::copy({.out = mixed, .in = all.view().slice(1, 0, 3 * qkv)}, ctx);
            kernels::copy({.out = f, .in = all.view().slice(1, 3 * qkv, 4 * qkv)}, ctx);
            kernels::copy({.out = beta, .in = all.view().slice(1, 4 * qkv, width)}, ctx);
        }
    }

    // [n_seq, 3 qkv] = short_conv_silu(mixed), continuing each request's conv window; q and k (the first 2 qkv
    // channels) L2-normalised per head in the same pass.
    scope.emplace(ctx, "conv");
    Tensor conv = scratch(ctx, {n_seq, 3 * qkv}, DType::kF32);
    kernels::short_conv({.out = conv,
                         .in = mixed,
                         .weight = conv_weight_,
                         .conv_state = conv_state,
                         .cu_seqlens = seq.cu_seqlens_q,
                         .state_slots = state_slots,
                         .silu = true,
                         .norm_channels = 2 * qkv,
                         .norm_dim = hd,
                         .norm_eps = 1e-6f},
                        ctx);
    auto heads = [&](int64_t part) {
        return conv.view().as_strided(part * qkv, {n_seq, d.n_heads, hd}, {3 * qkv, hd, 1});
    };
    const TensorView q = heads(0), k = heads(1), v = heads(2);

    scope.emplace(ctx, "recurrence");
    Tensor o = scratch(ctx, {n_seq, d.n_heads, hd}, DType::kF32);
    kernels::gated_delta_rule_chunk({.out = o,
                                     .q = q,
                                     .k = k,
                                     .v = v,
                                     .g = f.view().reshape({n_seq, d.n_heads, hd}),
                                     .beta = beta,
                                     .state = recurrent_state,
                                     .cu_seqlens = seq.cu_seqlens_q,
                                     .state_slots = state_slots,
                                     .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                                     .chunk_size = options_.chunk_size,
                                     // the bf16 path takes a tensor-core form; fp32 mode stays exact
                                     .precision = out.dtype == DType::kF32 ? kernels::DeltaRulePrecision::kF32
                                                                           : bf16_delta_rule_precision()},
                                    ctx);
    if (layout.cp) o = cp_own_rows(layout, o.view().reshape({n_seq, qkv}), ctx).reshape({n, d.n_heads, hd});

    scope.emplace(ctx, "out_gate");
    Tensor gate = g_proj_.weight.defined() ? linear_new_f32(g_proj_, x, ctx, xq)
                                           : linear_new_f32(g_b_proj_, linear_new(g_a_proj_, x, ctx), ctx);
    const TensorView o_rows = o.view().reshape({n * d.n_heads, hd});
    scope.emplace(ctx, "o_norm");
    // f32: normed in place; bf16: the norm writes the o_proj input directly (rounded once, no f32 copy in between).
    Tensor o_act;
    if (out.dtype != DType::kF32) o_act = scratch(ctx, {n, qkv}, out.dtype);
    const TensorView o_normed = out.dtype == DType::kF32 ? o.view().reshape({n, qkv}) : o_act.view();
    // An FP8 o_proj reads the FP8 rows the norm writes (a token's heads as one row: the bytes and scales o_proj's own
    // quantisation of o_normed would make), without a quantisation pass of its own; o_normed is then scratch.
    std::optional<Fp8Activations> oq;
    if (o_proj_.fp8() && n > 0) oq = fp8_rows_scratch(n, qkv, ctx);
    kernels::gated_rms_norm({.out = o_normed.reshape({n * d.n_heads, hd}),
                             .in = o_rows,
                             .gate = gate.view().reshape({n * d.n_heads, hd}),
                             .weight = o_norm_,
                             .eps = options_.norm_eps,
                             .quant_out = oq ? oq->data.view() : TensorView{},
                             .quant_scale = oq ? oq->scale : TensorView{},
                             .quant_heads = d.n_heads,
                             .out_scratch = oq.has_value()},
                            ctx);
    scope.emplace(ctx, "o_proj");
    linear_forward(o_proj_, o_normed, out, ctx, oq ? &*oq : nullptr);
    tp_.all_reduce_sum(out, ctx);
}

}  // namespace penstock::models
