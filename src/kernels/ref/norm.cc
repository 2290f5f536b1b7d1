// Reference RMSNorm and LayerNorm over the last dim. One row per task; the row's reductions accumulate in double and
// the scale factors are rounded to f32 once, so a row's result never depends on the thread count. Rows may be strided
// (stride(0)); the last dim is contiguous. out may alias in (each element is read before it is written).
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

namespace {

void check_rows(const TensorView& v, int64_t n_rows, int64_t dim, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 2) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.size(0), n_rows) << name;
    PENSTOCK_CHECK_EQ(v.size(1), dim) << name;
    PENSTOCK_CHECK_EQ(v.stride(1), 1) << name << ": last dim must be contiguous";
}

void check_vec(const TensorView& v, int64_t dim, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 1) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.size(0), dim) << name;
    PENSTOCK_CHECK_EQ(v.stride(0), 1) << name << " must be contiguous";
}

}  // namespace

void rms_norm(const kernels::RmsNormParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, "rms_norm in");
    check_rows(p.out, n_rows, dim, "rms_norm out");
    check_vec(p.weight, dim, "rms_norm weight");
    const bool residual = p.residual.data != nullptr;
    if (residual) {
        check_rows(p.residual, n_rows, dim, "rms_norm residual");
        PENSTOCK_CHECK(p.residual.data != p.in.data && p.residual.data != p.out.data)
            << "rms_norm: residual may not alias in or out";
    }
    const float* w = p.weight.ptr<const float>();

    parallel_for(pool, n_rows, /*grain=*/8, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            if (residual) {  // the fused residual add (ref::add's f32 sum), in place, before the norm reads the row
                float* xs = p.in.at<float>({r});
                const float* add = p.residual.at<const float>({r});
                for (int64_t i = 0; i < dim; ++i) xs[i] = xs[i] + add[i];
            }
            const float* x = p.in.at<const float>({r});
            float* y = p.out.at<float>({r});
            double sum_sq = 0.0;
            for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
            const double mean_sq = dim > 0 ? sum_sq / static_cast<double>(dim) : 0.0;
            const auto inv_rms = static_cast<float>(1.0 / std::sqrt(mean_sq + static_cast<double>(p.eps)));
            for (int64_t i = 0; i < dim; ++i) y[i] = w[i] * (x[i] * inv_rms);
        }
    });
    // The fused quantisation is fp8_act_quant of the finished output (ops.h).
    if (p.quant_out.data != nullptr) fp8_act_quant({.out = p.quant_out, .scale = p.quant_scale, .in = p.out}, pool);
}

void layer_norm(const kernels::LayerNormParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, "layer_norm in");
    check_rows(p.out, n_rows, dim, "layer_norm out");
    check_vec(p.weight, dim, "layer_norm weight");
    const bool has_bias = p.bias.data != nullptr;
    if (has_bias) check_vec(p.bias, dim, "layer_norm bias");
    const float* w = p.weight.ptr<const float>();
    const float* b = has_bias ? p.bias.ptr<const float>() : nullptr;

    parallel_for(pool, n_rows, /*grain=*/8, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* x = p.in.at<const float>({r});
            float* y = p.out.at<float>({r});
            // Two passes: mean, then biased variance of (x - mean).
            double sum = 0.0;
            for (int64_t i = 0; i < dim; ++i) sum += x[i];
            const double mean_d = dim > 0 ? sum / static_cast<double>(dim) : 0.0;
            double sum_sq = 0.0;
            for (int64_t i = 0; i < dim; ++i) {
                const double c = x[i] - mean_d;
                sum_sq += c * c;
            }
            const double var = dim > 0 ? sum_sq / static_cast<double>(dim) : 0.0;
            const auto mean = static_cast<float>(mean_d);
            const auto rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(p.eps)));
            for (int64_t i = 0; i < dim; ++i) {
                const float v = ((x[i] - mean) * rstd) * w[i];
                y[i] = has_bias ? v + b[i] : v;
            }
        }
    });
}

}  // namespace penstock::ref
