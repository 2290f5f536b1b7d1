// Linear layer helpers.
#include "models/linear.h"

#include <cstring>

namespace penstock::models {

Result<Linear> take_linear(WeightReader& reader, const std::string& prefix, int64_t out_features, int64_t in_features,
                           bool has_bias) {
    Linear l;
    PENSTOCK_ASSIGN_OR_RETURN(l.weight, reader.take(prefix + ".weight", {out_features, in_features}));
    if (has_bias) {
        PENSTOCK_ASSIGN_OR_RETURN(l.bias, reader.take(prefix + ".bias", {out_features}));
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

void linear_forward(const Linear& layer, const TensorView& x, const TensorView& out, const kernels::Context& ctx) {
    float beta = 0.0f;
    if (layer.bias.defined()) {
        // Every row starts as the bias (a stride-0 broadcast), then the GEMM accumulates onto it.
        kernels::copy({.out = out, .in = layer.bias.view().as_strided(0, {out.size(0), out.size(1)}, {0, 1})}, ctx);
        beta = 1.0f;
    }
    kernels::gemm({.out = out, .a = x, .b = layer.weight, .trans_b = true, .alpha = 1.0f, .beta = beta}, ctx);
}

Tensor linear_new(const Linear& layer, const TensorView& x, const kernels::Context& ctx) {
    Tensor out = scratch(ctx, {x.size(0), layer.out_features()}, x.dtype);
    linear_forward(layer, x, out, ctx);
    return out;
}

Tensor head_logits(const BatchLayout& layout, const TensorView& hidden, const Tensor& norm, const Tensor& lm_head,
                   float eps, const kernels::Context& ctx) {
    PENSTOCK_CHECK(lm_head.defined()) << "logits requested on a stage without the head";
    const auto rows = static_cast<int64_t>(layout.logit_rows.size());
    Tensor selected = scratch(ctx, {rows, hidden.size(1)}, hidden.dtype);
    kernels::gather_rows({.out = selected, .in = hidden, .index = layout.logit_index}, ctx);
    kernels::rms_norm({.out = selected, .in = selected, .weight = norm, .eps = eps}, ctx);
    Tensor logits = scratch(ctx, {rows, lm_head.size(0)});
    kernels::gemm({.out = logits, .a = selected, .b = lm_head, .trans_b = true}, ctx);
    return logits;
}

}  // namespace penstock::models
