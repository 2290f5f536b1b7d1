// Reference rotary embedding, in place on x [n_tokens, n_heads, rot_dim] (strided on dims 0 and 1). One token per
// task: its cos/sin table is built once (angle = float(position) * inv_freq[i] in f32, then std::cos/std::sin of that
// f32, times attention_factor), then each head's rot_dim vector is copied to a temporary and rotated back into x.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

void rope(const kernels::RopeParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.x.ndim, 3);
    PENSTOCK_CHECK(p.x.dtype == DType::kF32) << "rope: x must be f32";
    PENSTOCK_CHECK_EQ(p.x.stride(2), 1) << "rope: last dim of x must be contiguous";
    PENSTOCK_CHECK_EQ(p.positions.ndim, 1);
    PENSTOCK_CHECK(p.positions.dtype == DType::kI32) << "rope: positions must be i32";
    PENSTOCK_CHECK_EQ(p.inv_freq.ndim, 1);
    PENSTOCK_CHECK(p.inv_freq.dtype == DType::kF32) << "rope: inv_freq must be f32";
    PENSTOCK_CHECK_EQ(p.inv_freq.stride(0), 1);

    const int64_t n_tokens = p.x.size(0);
    const int64_t n_heads = p.x.size(1);
    const int64_t rot_dim = p.x.size(2);
    PENSTOCK_CHECK_EQ(rot_dim % 2, 0) << "rope: rot_dim must be even";
    const int64_t half = rot_dim / 2;
    PENSTOCK_CHECK_EQ(p.positions.size(0), n_tokens);
    PENSTOCK_CHECK_EQ(p.inv_freq.size(0), half);
    const float* inv_freq = p.inv_freq.ptr<const float>();

    parallel_for(pool, n_tokens, /*grain=*/4, [&](int64_t begin, int64_t end) {
        std::vector<float> cos_t(static_cast<size_t>(half));
        std::vector<float> sin_t(static_cast<size_t>(half));
        std::vector<float> tmp(static_cast<size_t>(rot_dim));
        for (int64_t t = begin; t < end; ++t) {
            const auto pos = static_cast<float>(*p.positions.at<const int32_t>({t}));
            for (int64_t i = 0; i < half; ++i) {
                const float angle = pos * inv_freq[i];
                cos_t[static_cast<size_t>(i)] = std::cos(angle) * p.attention_factor;
                sin_t[static_cast<size_t>(i)] = std::sin(angle) * p.attention_factor;
            }
            for (int64_t h = 0; h < n_heads; ++h) {
                float* x = p.x.at<float>({t, h});
                for (int64_t i = 0; i < rot_dim; ++i) tmp[static_cast<size_t>(i)] = x[i];
                for (int64_t i = 0; i < half; ++i) {
                    // Pair i: interleaved (x[2i], x[2i+1]); half-split (x[i], x[i + half]). Output is always
                    // [rotated first elements; rotated second elements].
                    const float x1 = p.interleaved ? tmp[static_cast<size_t>(2 * i)] : tmp[static_cast<size_t>(i)];
                    const float x2 =
                        p.interleaved ? tmp[static_cast<size_t>(2 * i + 1)] : tmp[static_cast<size_t>(i + half)];
                    const float c = cos_t[static_cast<size_t>(i)];
                    const float s = sin_t[static_cast<size_t>(i)];
                    x[i] = x1 * c - x2 * s;
                    x[i + half] = x2 * c + x1 * s;
                }
            }
        }
    });
}

}  // namespace penstock::ref
