// cuda::gemm and cuda::grouped_gemm (cuBLASLt) against the CPU reference (OpenBLAS sgemm): f32 inputs must match to
// kF32Gemm (true fp32 compute, never TF32), bf16 inputs (fp32 accumulation) to kBF16Tol after one output rounding.
// Shapes: 1 row, odd m/n/k, k = 0, row-strided views (padded leading dimensions), trans_b both ways, alpha/beta.
// grouped_gemm: empty groups, a single row group, rows past offsets[n_groups] left untouched. Batched (3-D) gemm over
// strided head slices, aligned and not.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

class GemmOpTest : public CudaTest {};

// bf16 inputs against the f32 reference on the same rounded inputs: the products are exact in fp32, so only the
// accumulation order and the final rounding differ; kBF16Tol covers the rounding of an O(sqrt(k)) result.
Tolerance gemm_tol(DType in, DType out) {
    return in == DType::kF32 ? kF32Gemm : (out == DType::kF32 ? kF32Gemm : kBF16Tol);
}

TEST_F(GemmOpTest, MatchesReference) {
    struct G {
        int64_t m, n, k;
    };
    const G kShapes[] = {{1, 1, 1}, {1, 64, 128}, {7, 3, 5}, {33, 65, 17}, {128, 96, 256}, {257, 129, 100}, {5, 7, 0}};
    uint32_t seed = 1100;
    for (const G& g : kShapes) {
        for (DType dt : {DType::kF32, DType::kBF16}) {
            for (DType out_dt : {dt, DType::kF32}) {
                for (int trans_b = 0; trans_b < 2; ++trans_b) {
                    for (int strided = 0; strided < 2; ++strided) {
                        if (out_dt != dt && strided) continue;
                        SCOPED_TRACE(::testing::Message()
                                     << "m=" << g.m << " n=" << g.n << " k=" << g.k << " " << dtype_name(dt) << "->"
                                     << dtype_name(out_dt) << " trans_b=" << trans_b << " strided=" << strided);
                        PENSTOCK_SEEDED(seed);
                        std::mt19937 rng(seed++);
                        const Pair a = random_pair(rng, {g.m, g.k}, dt, strided, alloc(), stream());
                        const Shape b_shape = trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n};
                        const Pair b = random_pair(rng, b_shape, dt, strided, alloc(), stream());
                        // beta != 0 on the strided runs: out starts random (same on both sides).
                        const float beta = strided ? 0.5f : 0.0f;
                        const float alpha = strided ? 1.5f : 1.0f;
                        Pair out = strided ? random_pair(rng, {g.m, g.n}, out_dt, true, alloc(), stream())
                                           : poisoned_pair({g.m, g.n}, out_dt, false, alloc(), stream());
                        cuda::gemm({.out = out.dv,
                                    .a = a.dv,
                                    .b = b.dv,
                                    .trans_b = trans_b != 0,
                                    .alpha = alpha,
                                    .beta = beta},
                                   raw_stream());
                        ref::gemm({.out = out.hv,
                                   .a = a.hv,
                                   .b = b.hv,
                                   .trans_b = trans_b != 0,
                                   .alpha = alpha,
                                   .beta = beta},
                                  nullptr);
                        expect_pair_close(out, out.hv, gemm_tol(dt, out_dt), stream(), false);
                    }
                }
            }
        }
    }
}

// Batched (3-D) products over strided head slices, the layout of MLA's absorption (q [n, H, d] as [H, n, d]; the
// weight's per-head row blocks): one strided-batched cuBLASLt call against the reference's loop. The padded row
// pitch 3 makes bf16 rows 2-byte aligned, which cuBLASLt declines: that case runs the per-batch fallback. With a
// broadcast (batch stride 0) a as well.
TEST_F(GemmOpTest, BatchedStridedMatchesReference) {
    constexpr int64_t kH = 5, kN = 37, kK = 24, kM = 40;
    uint32_t seed = 1150;
    for (DType dt : {DType::kF32, DType::kBF16}) {
        for (int trans_b = 0; trans_b < 2; ++trans_b) {
            for (int64_t pad : {8, 3}) {
                for (const bool bcast : {false, true}) {
                    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " trans_b=" << trans_b << " pad=" << pad
                                                      << " broadcast_a=" << bcast);
                    PENSTOCK_SEEDED(seed);
                    std::mt19937 rng(seed++);
                    const int64_t ka = kK + pad;
                    Pair a = random_pair(rng, {kN, kH, ka}, dt, false, alloc(), stream());
                    const int64_t b_rows = trans_b ? kM + 2 : kK + 2;
                    const int64_t b_cols = trans_b ? kK : kM;
                    Pair b = random_pair(rng, {kH * b_rows, b_cols}, dt, false, alloc(), stream());
                    Pair out = poisoned_pair({kN, kH, kM}, dt, false, alloc(), stream());
                    // broadcast_a: one [n, k] matrix for every batch entry (batch stride 0), MLA's K / V expansion.
                    const auto a3 = [&](const TensorView& v) {
                        return v.as_strided(0, {kH, kN, kK}, {bcast ? 0 : ka, kH * ka, 1});
                    };
                    const auto b3 = [&](const TensorView& v) {
                        return trans_b ? v.as_strided(0, {kH, kM, kK}, {b_rows * kK, kK, 1})
                                       : v.as_strided(0, {kH, kK, kM}, {b_rows * kM, kM, 1});
                    };
                    const auto o3 = [&](const TensorView& v) {
                        return v.as_strided(0, {kH, kN, kM}, {kM, kH * kM, 1});
                    };
                    cuda::gemm({.out = o3(out.dv), .a = a3(a.dv), .b = b3(b.dv), .trans_b = trans_b != 0},
                               raw_stream());
                    ref::gemm({.out = o3(out.hv), .a = a3(a.hv), .b = b3(b.hv), .trans_b = trans_b != 0}, nullptr);
                    expect_pair_close(out, out.hv, gemm_tol(dt, dt), stream(), false);
                }
            }
        }
    }
}

TEST_F(GemmOpTest, GroupedMatchesReference) {
    struct GG {
        int64_t n_rows, n, k;
        std::vector<int32_t> sizes;  // rows per group; sum <= n_rows
    };
    const std::vector<GG> kCases = {
        {1, 16, 32, {1}},
        {10, 7, 9, {0, 3, 0, 7}},
        {100, 64, 128, {1, 33, 0, 60}},  // 6 trailing rows untouched
        {300, 96, 64, {17, 100, 0, 0, 183}},
    };
    uint32_t seed = 1200;
    for (const GG& c : kCases) {
        for (DType dt : {DType::kF32, DType::kBF16}) {
            SCOPED_TRACE(::testing::Message() << "rows=" << c.n_rows << " n=" << c.n << " k=" << c.k
                                              << " groups=" << c.sizes.size() << " " << dtype_name(dt));
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const auto n_groups = static_cast<int64_t>(c.sizes.size());
            std::vector<int32_t> off(1, 0);
            for (int32_t s : c.sizes) off.push_back(off.back() + s);
            const Pair a = random_pair(rng, {c.n_rows, c.k}, dt, true, alloc(), stream());
            const Pair b = random_pair(rng, {n_groups, c.n, c.k}, dt, false, alloc(), stream());
            Pair out = poisoned_pair({c.n_rows, c.n}, dt, true, alloc(), stream());
            const Tensor off_dev = dev_i32(off, alloc(), stream());
            const Tensor off_host = i32_tensor(off);
            cuda::grouped_gemm({.out = out.dv, .a = a.dv, .b = b.dv, .offsets = off_dev}, raw_stream());
            // The reference writes only the grouped rows; compare those, and check the rest kept the poison.
            ref::grouped_gemm({.out = out.hv, .a = a.hv, .b = b.hv, .offsets = off_host}, nullptr);
            const int64_t used = off.back();
            if (used > 0) {
                Pair head = out;
                head.hv = out.hv.slice(0, 0, used);
                head.dv = out.dv.slice(0, 0, used);
                expect_pair_close(head, head.hv, gemm_tol(dt, dt), stream(), false);
            }
            const Readback all = read_pair(out, stream(), false);
            int64_t written_tail = 0;
            for (int64_t i = used * c.n; i < c.n_rows * c.n; ++i)
                written_tail += !std::isnan(all.values[static_cast<size_t>(i)]);
            EXPECT_EQ(written_tail, 0) << "rows past offsets[n_groups] were written";
        }
    }
}

}  // namespace
}  // namespace penstock::test
