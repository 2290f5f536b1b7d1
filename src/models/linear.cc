// Linear layer helpers.
#include "models/linear.h"

#include <cstring>

namespace penstock::models {

Result<Linear> take_linear(WeightReader& reader, const std::string& prefix, int64_t out_features,
                           int64_t in_features, bool has_bias) {
    Linear l;
    PENSTOCK_ASSIGN_OR_RETURN(l.weight, reader.take(prefix + ".weight", {out_features, in_features}));
    if (has_bias) {
        PENSTOCK_ASSIGN_OR_RETURN(l.bias, reader.take(prefix + ".bias", {out_features}));
    }
    return l;
}

void linear_forward(const Linear& layer, const TensorView& x, const TensorView& out, const kernels::Context& ctx) {
    float beta = 0.0f;
    if (layer.bias.defined()) {
        const int64_t n = out.size(1);
        for (int64_t r = 0; r < out.size(0); ++r) {
            std::memcpy(out.ptr<float>() + r * out.stride(0), layer.bias.ptr<const float>(),
                        static_cast<size_t>(n) * sizeof(float));
        }
        beta = 1.0f;
    }
    kernels::gemm({.out = out, .a = x, .b = layer.weight, .trans_b = true, .alpha = 1.0f, .beta = beta}, ctx);
}

Tensor linear_new(const Linear& layer, const TensorView& x, const kernels::Context& ctx) {
    Tensor out = Tensor::empty({x.size(0), layer.out_features()}, DType::kF32);
    linear_forward(layer, x, out, ctx);
    return out;
}

}  // namespace penstock::models
