// Helpers for the CPU reference tests: seeded random tensors (optionally strided views into a larger buffer),
// strided reads, and all_close, which fails with the worst element, max abs/rel error, NMSE and the first mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "tolerance.h"

namespace penstock::test {

// Uniform f32 values in [lo, hi) from a seeded generator.
inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    return v;
}

inline int64_t numel_of(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// A view of `shape` over `backing`. When strided, every dim but the first is padded by 3 in the backing buffer and
// the view starts at index 1 there, so rows (and heads) are strided and the padding can be checked for stray writes.
struct Buffer {
    Tensor backing;
    TensorView view;
};

inline Buffer random_buffer(std::mt19937& rng, const Shape& shape, bool strided, float lo = -1.0f, float hi = 1.0f) {
    Shape padded = shape;
    if (strided) {
        for (size_t d = 1; d < padded.size(); ++d) padded[d] += 3;
    }
    Buffer b;
    b.backing = Tensor::from_f32(padded, random_floats(rng, numel_of(padded), lo, hi));
    b.view = b.backing.view();
    if (strided) {
        for (size_t d = 1; d < shape.size(); ++d) {
            b.view = b.view.slice(static_cast<int>(d), 1, 1 + shape[d]);
        }
    }
    return b;
}

inline Tensor i32_tensor(const std::vector<int32_t>& values) {
    return Tensor::from_i32({static_cast<int64_t>(values.size())}, values);
}

// Visits every multi-index of `shape` in row-major order.
template <class Fn>
void for_each_index(const Shape& shape, Fn&& fn) {
    const int64_t n = numel_of(shape);
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t flat = 0; flat < n; ++flat) {
        fn(idx);
        for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
            if (++idx[static_cast<size_t>(d)] < shape[static_cast<size_t>(d)]) break;
            idx[static_cast<size_t>(d)] = 0;
        }
    }
}

inline int64_t offset_of(const TensorView& v, const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * v.strides[d];
    return off;
}

// The elements of a (possibly strided) f32 view, row-major.
inline std::vector<float> read_f32(const TensorView& v) {
    std::vector<float> out;
    out.reserve(static_cast<size_t>(v.numel()));
    for_each_index(v.shape_vec(),
                   [&](const std::vector<int64_t>& idx) { out.push_back(v.ptr<float>()[offset_of(v, idx)]); });
    return out;
}

// The elements of a (possibly strided) bf16 view, row-major, widened to f32 (exact).
inline std::vector<float> read_bf16(const TensorView& v) {
    std::vector<float> out;
    out.reserve(static_cast<size_t>(v.numel()));
    for_each_index(v.shape_vec(), [&](const std::vector<int64_t>& idx) {
        out.push_back(bf16_to_float(v.ptr<uint16_t>()[offset_of(v, idx)]));
    });
    return out;
}

// A bf16 copy of an f32 buffer with the same layout (backing and view), every value rounded to nearest even; and the
// f32 buffer's values replaced by those rounded values, so both sides hold the same numbers.
inline Buffer to_bf16_buffer(Buffer& f32) {
    Buffer b;
    b.backing = Tensor::empty(f32.backing.view().shape_vec(), DType::kBF16);
    const int64_t n = f32.backing.numel();
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_bf16(f32.backing.ptr<float>()[i]);
        b.backing.ptr<uint16_t>()[i] = h;
        f32.backing.ptr<float>()[i] = bf16_to_float(h);
    }
    b.view = f32.view;
    b.view.dtype = DType::kBF16;
    b.view.data = b.backing.ptr<uint16_t>() + (f32.view.ptr<float>() - f32.backing.ptr<float>());
    return b;
}

// float_to_bf16 of each value, widened back: what one rounding of an f32 result to bf16 gives.
inline std::vector<float> rounded_bf16(const std::vector<float>& v) {
    std::vector<float> out;
    out.reserve(v.size());
    for (float x : v) out.push_back(bf16_to_float(float_to_bf16(x)));
    return out;
}

// Writes row-major `values` into a (possibly strided) f32 view.
inline void write_f32(const TensorView& v, const std::vector<float>& values) {
    size_t i = 0;
    for_each_index(v.shape_vec(),
                   [&](const std::vector<int64_t>& idx) { v.ptr<float>()[offset_of(v, idx)] = values[i++]; });
}

inline std::string index_string(int64_t flat, const Shape& shape) {
    if (shape.empty()) return std::to_string(flat);
    std::vector<int64_t> idx(shape.size());
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
        const int64_t n = shape[static_cast<size_t>(d)] > 0 ? shape[static_cast<size_t>(d)] : 1;
        idx[static_cast<size_t>(d)] = flat % n;
        flat /= n;
    }
    std::ostringstream s;
    s << "[";
    for (size_t d = 0; d < idx.size(); ++d) s << (d ? ", " : "") << idx[d];
    s << "]";
    return s.str();
}

// Per element |got - ref| <= atol + rtol * |ref|; NaN matches only NaN and an infinity only the same infinity.
// `shape` (optional) turns flat indices into multi-indices in the failure message.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref,
                                            Tolerance tol, const Shape& shape = {}) {
    if (got.size() != ref.size()) {
        return ::testing::AssertionFailure() << "size mismatch: got " << got.size() << " vs ref " << ref.size();
    }
    int64_t n_bad = 0;
    int64_t worst = -1;
    double worst_excess = -1.0;
    double max_abs = 0.0;
    double max_rel = 0.0;
    double err_sq = 0.0;
    double ref_sq = 0.0;
    std::ostringstream first;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i];
        const double r = ref[i];
        bool ok;
        double excess;
        if (std::isnan(r) || std::isnan(g) || std::isinf(r) || std::isinf(g)) {
            ok = (std::isnan(r) && std::isnan(g)) || (g == r);
            excess = ok ? 0.0 : INFINITY;
        } else {
            const double diff = std::fabs(g - r);
            const double allowed = tol.atol + tol.rtol * std::fabs(r);
            ok = diff <= allowed;
            excess = allowed > 0.0 ? diff / allowed : (diff > 0.0 ? INFINITY : 0.0);
            max_abs = std::max(max_abs, diff);
            if (r != 0.0) max_rel = std::max(max_rel, diff / std::fabs(r));
            err_sq += diff * diff;
            ref_sq += r * r;
        }
        if (!ok) {
            if (n_bad < 5) {
                first << "\n  " << index_string(static_cast<int64_t>(i), shape) << ": got " << g << " ref " << r;
            }
            ++n_bad;
        }
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = static_cast<int64_t>(i);
        }
    }
    if (n_bad == 0) return ::testing::AssertionSuccess();
    const auto w = static_cast<size_t>(worst);
    return ::testing::AssertionFailure() << n_bad << " of " << got.size() << " elements exceed atol " << tol.atol
                                         << " + rtol " << tol.rtol << " * |ref|; worst at "
                                         << index_string(worst, shape) << ": got " << got[w] << " ref " << ref[w]
                                         << " (|diff| " << std::fabs(got[w] - ref[w]) << "); max abs err " << max_abs
                                         << ", max rel err " << max_rel << ", NMSE "
                                         << (ref_sq > 0 ? err_sq / ref_sq : err_sq)
                                         << "; first mismatches:" << first.str();
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// True when two host buffers hold identical bytes.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Seeds are fixed per test and printed with every failure of the enclosing scope.
#define PENSTOCK_SEEDED(seed) SCOPED_TRACE(::testing::Message() << "seed=" << (seed))

}  // namespace penstock::test
