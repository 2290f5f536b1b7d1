// Reference elementwise ops: silu_mul (rows may be strided; f32 or bf16 with f32 math, bf16 rounded once at the
// output), add (contiguous, any shape) and row-wise softmax over the last dim (max-subtracted; exp in f32, row sum in
// double). out may alias an input: every element is read before the
// same element is written, and softmax re-reads its input only before the final write pass.
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/ref/ref_rows.h"

namespace penstock::ref {

namespace {

void check_rows(const TensorView& v, int64_t n_rows, int64_t dim, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 2) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.size(0), n_rows) << name;
    PENSTOCK_CHECK_EQ(v.size(1), dim) << name;
    PENSTOCK_CHECK_EQ(v.stride(1), 1) << name << ": last dim must be contiguous";
}

}  // namespace

void silu_mul(const kernels::SiluMulParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.gate.ndim, 2);
    const int64_t n_rows = p.gate.size(0);
    const int64_t dim = p.gate.size(1);
    PENSTOCK_CHECK(is_activation_dtype(p.gate.dtype) && p.up.dtype == p.gate.dtype && p.out.dtype == p.gate.dtype)
        << "silu_mul: gate, up and out must share one dtype, f32 or bf16";
    for (const auto& [v, name] :
         {std::pair{&p.gate, "silu_mul gate"}, std::pair{&p.up, "silu_mul up"}, std::pair{&p.out, "silu_mul out"}}) {
        PENSTOCK_CHECK_EQ(v->ndim, 2) << name;
        PENSTOCK_CHECK_EQ(v->size(0), n_rows) << name;
        PENSTOCK_CHECK_EQ(v->size(1), dim) << name;
        PENSTOCK_CHECK(v->stride(1) == 1 || dim <= 1) << name << ": last dim must be contiguous";
    }
    parallel_for(pool, n_rows, /*grain=*/8, [&](int64_t begin, int64_t end) {
        std::vector<float> gb, ub;
        for (int64_t r = begin; r < end; ++r) {
            const float* g = row_as_f32(element_ptr(p.gate, {r}), p.gate.dtype, dim, gb);
            const float* u = row_as_f32(element_ptr(p.up, {r}), p.up.dtype, dim, ub);
            write_row(element_ptr(p.out, {r}), p.out.dtype, dim, [&](int64_t i) {
                const float silu = g[i] / (1.0f + std::exp(-g[i]));
                return silu * u[i];
            });
        }
    });
}

void add(const kernels::AddParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK(p.out.dtype == DType::kF32 && p.a.dtype == DType::kF32 && p.b.dtype == DType::kF32)
        << "add: f32 only";
    PENSTOCK_CHECK(p.out.shape_vec() == p.a.shape_vec() && p.out.shape_vec() == p.b.shape_vec())
        << "add: shapes differ: out " << p.out.shape_string() << " a " << p.a.shape_string() << " b "
        << p.b.shape_string();
    PENSTOCK_CHECK(p.out.is_contiguous() && p.a.is_contiguous() && p.b.is_contiguous()) << "add: contiguous only";
    const float* a = p.a.ptr<const float>();
    const float* b = p.b.ptr<const float>();
    float* out = p.out.ptr<float>();
    parallel_for(pool, p.out.numel(), /*grain=*/4096, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
    });
}

void softmax(const kernels::SoftmaxParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, "softmax in");
    check_rows(p.out, n_rows, dim, "softmax out");
    parallel_for(pool, n_rows, /*grain=*/8, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* x = p.in.at<const float>({r});
            float* y = p.out.at<float>({r});
            float max_x = -INFINITY;
            for (int64_t i = 0; i < dim; ++i) max_x = std::fmax(max_x, x[i]);
            double sum = 0.0;
            for (int64_t i = 0; i < dim; ++i) sum += std::exp(x[i] - max_x);
            const auto inv_sum = static_cast<float>(1.0 / sum);
            for (int64_t i = 0; i < dim; ++i) y[i] = std::exp(x[i] - max_x) * inv_sum;
        }
    });
}

}  // namespace penstock::ref
