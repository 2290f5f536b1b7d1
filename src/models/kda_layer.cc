// KDA layer: loading (checkpoint and transformers-internal names) and the forward composition over kernels/ops_kda.h.
#include "models/kda_layer.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace penstock::models {

namespace {

// `<prefix>.<name>` when the checkpoint has `<prefix>.<name><probe>`, else `<prefix>.<alt>` (transformers' internal
// module path, e.g. `forget_gate.f_a_proj`).
std::string pick(const WeightReader& r, const std::string& prefix, const std::string& name, const std::string& alt,
                 const std::string& probe) {
    return r.contains(prefix + "." + name + probe) || !r.contains(prefix + "." + alt + probe) ? prefix + "." + name
                                                                                              : prefix + "." + alt;
}

// Reads a depthwise conv weight [channels, 1, kernel] or [channels, kernel] as [channels, kernel].
Result<Tensor> take_conv(WeightReader& r, const std::string& name, int64_t channels, int64_t kernel) {
    if (r.shape_of(name) == Shape{channels, 1, kernel}) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor t, r.take(name, {channels, 1, kernel}));
        return t.reshape({channels, kernel});
    }
    return r.take(name, {channels, kernel});
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

Result<KdaAttention> KdaAttention::load(WeightReader& r, const std::string& prefix, const KdaOptions& o) {
    KdaAttention a;
    a.options_ = o;
    const KdaDims& d = o.dims;
    const int64_t qkv = d.qkv_dim();
    PENSTOCK_ASSIGN_OR_RETURN(Linear q, take_linear(r, prefix + ".q_proj", qkv, d.hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(Linear k, take_linear(r, prefix + ".k_proj", qkv, d.hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(Linear v, take_linear(r, prefix + ".v_proj", qkv, d.hidden, false));
    a.qkv_proj_.weight = stack_rows({&q.weight, &k.weight, &v.weight});

    if (r.contains(prefix + ".conv1d.weight")) {
        PENSTOCK_ASSIGN_OR_RETURN(a.conv_weight_, take_conv(r, prefix + ".conv1d.weight", 3 * qkv, d.conv_kernel));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor cq, take_conv(r, prefix + ".q_conv1d.weight", qkv, d.conv_kernel));
        PENSTOCK_ASSIGN_OR_RETURN(Tensor ck, take_conv(r, prefix + ".k_conv1d.weight", qkv, d.conv_kernel));
        PENSTOCK_ASSIGN_OR_RETURN(Tensor cv, take_conv(r, prefix + ".v_conv1d.weight", qkv, d.conv_kernel));
        a.conv_weight_ = stack_rows({&cq, &ck, &cv});
    }

    PENSTOCK_ASSIGN_OR_RETURN(
        a.f_a_proj_,
        take_linear(r, pick(r, prefix, "f_a_proj", "forget_gate.f_a_proj", ".weight"), d.head_dim, d.hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(
        a.f_b_proj_,
        take_linear(r, pick(r, prefix, "f_b_proj", "forget_gate.f_b_proj", ".weight"), qkv, d.head_dim, false));
    const std::string a_log_name = pick(r, prefix, "A_log", "forget_gate.A_log", "");
    if (r.shape_of(a_log_name) == Shape{1, 1, d.n_heads, 1}) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor t, r.take(a_log_name, {1, 1, d.n_heads, 1}));
        a.a_log_ = t.reshape({d.n_heads});
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(a.a_log_, r.take(a_log_name, {d.n_heads}));
    }
    PENSTOCK_ASSIGN_OR_RETURN(a.dt_bias_, r.take(pick(r, prefix, "dt_bias", "forget_gate.dt_bias", ""), {qkv}));
    PENSTOCK_ASSIGN_OR_RETURN(a.b_proj_, take_linear(r, prefix + ".b_proj", d.n_heads, d.hidden, false));
    if (o.full_rank_output_gate) {
        PENSTOCK_ASSIGN_OR_RETURN(a.g_proj_, take_linear(r, prefix + ".g_proj", qkv, d.hidden, false));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(a.g_a_proj_, take_linear(r, prefix + ".g_a_proj", d.head_dim, d.hidden, false));
        PENSTOCK_ASSIGN_OR_RETURN(a.g_b_proj_, take_linear(r, prefix + ".g_b_proj", qkv, d.head_dim, false));
    }
    PENSTOCK_ASSIGN_OR_RETURN(a.o_norm_, r.take(prefix + ".o_norm.weight", {d.head_dim}));
    PENSTOCK_ASSIGN_OR_RETURN(a.o_proj_, take_linear(r, prefix + ".o_proj", d.hidden, qkv, false));
    return a;
}

void KdaAttention::forward(const BatchLayout& layout, const TensorView& x, const TensorView& recurrent_state,
                           const TensorView& conv_state, const TensorView& state_slots, const TensorView& out,
                           const kernels::Context& ctx) const {
    const KdaDims& d = options_.dims;
    const int64_t n = layout.n_tokens;
    const int64_t qkv = d.qkv_dim();
    const int64_t hd = d.head_dim;

    // [n, 3 qkv] = short_conv_silu(x @ [Wq; Wk; Wv]^T), continuing each request's conv window.
    Tensor mixed = linear_new(qkv_proj_, x, ctx);
    Tensor conv = Tensor::empty({n, 3 * qkv}, DType::kF32);
    kernels::short_conv({.out = conv,
                         .in = mixed,
                         .weight = conv_weight_,
                         .conv_state = conv_state,
                         .cu_seqlens = layout.cu_seqlens_q,
                         .state_slots = state_slots,
                         .silu = true},
                        ctx);
    auto heads = [&](int64_t part) { return conv.view().as_strided(part * qkv, {n, d.n_heads, hd}, {3 * qkv, hd, 1}); };
    const TensorView q = heads(0), k = heads(1), v = heads(2);
    kernels::l2norm({.out = q, .in = q, .eps = 1e-6f}, ctx);
    kernels::l2norm({.out = k, .in = k, .eps = 1e-6f}, ctx);

    // g [n, n_heads, head_dim] from the low-rank forget gate; beta [n, n_heads].
    Tensor f = linear_new(f_b_proj_, linear_new(f_a_proj_, x, ctx), ctx);
    const TensorView f3 = f.view().reshape({n, d.n_heads, hd});
    kernels::kda_gate({.out = f3,
                       .f = f3,
                       .a_log = a_log_,
                       .dt_bias = dt_bias_,
                       .form = options_.gate_form,
                       .lower_bound = options_.gate_lower_bound},
                      ctx);
    Tensor beta = linear_new(b_proj_, x, ctx);
    kernels::sigmoid({.out = beta, .in = beta}, ctx);

    Tensor o = Tensor::empty({n, d.n_heads, hd}, DType::kF32);
    kernels::gated_delta_rule_chunk({.out = o,
                                     .q = q,
                                     .k = k,
                                     .v = v,
                                     .g = f3,
                                     .beta = beta,
                                     .state = recurrent_state,
                                     .cu_seqlens = layout.cu_seqlens_q,
                                     .state_slots = state_slots,
                                     .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                                     .chunk_size = options_.chunk_size},
                                    ctx);

    Tensor gate = g_proj_.weight.defined() ? linear_new(g_proj_, x, ctx)
                                           : linear_new(g_b_proj_, linear_new(g_a_proj_, x, ctx), ctx);
    const TensorView o_rows = o.view().reshape({n * d.n_heads, hd});
    kernels::gated_rms_norm({.out = o_rows,
                             .in = o_rows,
                             .gate = gate.view().reshape({n * d.n_heads, hd}),
                             .weight = o_norm_,
                             .eps = options_.norm_eps},
                            ctx);
    linear_forward(o_proj_, o.view().reshape({n, qkv}), out, ctx);
}

}  // namespace penstock::models
