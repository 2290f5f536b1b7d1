// Row access for the reference ops that take f32 or bf16 activations (silu_mul, situ_mul, sigmoid_gate,
// attn_res_mix): a row is read as f32 (bf16 widens exactly) and written once, rounded to the row's dtype (bf16: round
// to nearest even, penstock::float_to_bf16). The math between the two is the op's f32 / double math, so a bf16 result
// is the f32 result rounded once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace penstock::ref {

inline bool is_activation_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16; }

// The address of element idx (a multi-index prefix, remaining dims at 0) of any dtype.
inline void* element_ptr(const TensorView& v, std::initializer_list<int64_t> idx) {
    int64_t off = 0;
    int d = 0;
    for (int64_t i : idx) off += i * v.strides[static_cast<size_t>(d++)];
    return static_cast<char*>(v.data) + off * static_cast<int64_t>(dtype_bytes(v.dtype, 1));
}

// The `dim` contiguous elements at `row` as f32: the row itself when f32, else widened into `buf`.
inline const float* row_as_f32(const void* row, DType dtype, int64_t dim, std::vector<float>& buf) {
    if (dtype == DType::kF32) return static_cast<const float*>(row);
    PENSTOCK_CHECK(dtype == DType::kBF16) << "activation rows are f32 or bf16, got " << dtype_name(dtype);
    buf.resize(static_cast<size_t>(dim));
    const auto* h = static_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < dim; ++i) buf[static_cast<size_t>(i)] = bf16_to_float(h[i]);
    return buf.data();
}

// row[i] = value(i) for i in [0, dim), stored in `dtype` (f32 or bf16). value(i) returns float or double; it is
// rounded to f32 and, for bf16, that f32 is rounded to bf16, as a GPU kernel rounds its f32 result.
template <class Fn>
void write_row(void* row, DType dtype, int64_t dim, Fn&& value) {
    if (dtype == DType::kF32) {
        auto* y = static_cast<float*>(row);
        for (int64_t i = 0; i < dim; ++i) y[i] = static_cast<float>(value(i));
        return;
    }
    PENSTOCK_CHECK(dtype == DType::kBF16) << "activation rows are f32 or bf16, got " << dtype_name(dtype);
    auto* y = static_cast<uint16_t*>(row);
    for (int64_t i = 0; i < dim; ++i) y[i] = float_to_bf16(static_cast<float>(value(i)));
}

}  // namespace penstock::ref
