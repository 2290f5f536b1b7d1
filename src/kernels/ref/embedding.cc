// Reference embedding lookup: out[t, :] = table[ids[t], :] (f32 or bf16 table, f32 out). One token row per task.
#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

void embedding(const kernels::EmbeddingParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.out.ndim, 2);
    PENSTOCK_CHECK_EQ(p.table.ndim, 2);
    PENSTOCK_CHECK_EQ(p.ids.ndim, 1);
    PENSTOCK_CHECK(p.out.dtype == DType::kF32) << "embedding: out must be f32";
    PENSTOCK_CHECK(p.table.dtype == DType::kF32 || p.table.dtype == DType::kBF16)
        << "embedding: table must be f32 or bf16, got " << dtype_name(p.table.dtype);
    PENSTOCK_CHECK(p.ids.dtype == DType::kI32) << "embedding: ids must be i32";
    PENSTOCK_CHECK_EQ(p.out.size(0), p.ids.size(0));
    PENSTOCK_CHECK_EQ(p.out.size(1), p.table.size(1));
    PENSTOCK_CHECK_EQ(p.out.stride(1), 1);
    PENSTOCK_CHECK_EQ(p.table.stride(1), 1);

    const int64_t n_tokens = p.out.size(0);
    const int64_t hidden = p.out.size(1);
    const int64_t vocab = p.table.size(0);
    // Validate every id up front so an abort never happens half-way through a parallel region.
    for (int64_t t = 0; t < n_tokens; ++t) {
        const int64_t id = *p.ids.at<const int32_t>({t});
        PENSTOCK_CHECK(0 <= id && id < vocab) << "embedding: token " << t << " has id " << id << ", vocab " << vocab;
    }
    parallel_for(pool, n_tokens, /*grain=*/16, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t id = *p.ids.at<const int32_t>({t});
            float* dst = p.out.at<float>({t});
            if (p.table.dtype == DType::kF32) {
                const float* src = p.table.at<const float>({id});
                for (int64_t i = 0; i < hidden; ++i) dst[i] = src[i];
            } else {
                const uint16_t* src = p.table.at<const uint16_t>({id});
                for (int64_t i = 0; i < hidden; ++i) dst[i] = bf16_to_float(src[i]);
            }
        }
    });
}

}  // namespace penstock::ref
