// Reference data-movement ops: copy (strided, broadcast, bf16), fill, gather_rows, grouped_gemm vs per-group gemm,
// paged write/gather round trips across page boundaries with interleaved page tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ref/ref_ops.h"
#include "ref_test_util.h"

namespace penstock {
namespace {

TEST(RefCopy, StridedBroadcastAndBf16RoundTrip) {
    std::mt19937 rng(101);
    SCOPED_TRACE("seed 101");
    // in: [5, 1 -> broadcast to 3, 4] via stride 0 on dim 1.
    test::Buffer in = test::random_buffer(rng, {5, 4}, /*strided=*/true);
    TensorView bcast = in.view.as_strided(0, {5, 3, 4}, {in.view.stride(0), 0, 1});
    Tensor out = Tensor::zeros({5, 3, 4}, DType::kF32);
    ref::copy({.out = out, .in = bcast}, nullptr);
    for (int64_t i = 0; i < 5; ++i)
        for (int64_t h = 0; h < 3; ++h)
            for (int64_t j = 0; j < 4; ++j) ASSERT_EQ(*out.view().at<float>({i, h, j}), *in.view.at<float>({i, j}));
    // f32 -> bf16 -> f32 equals float_to_bf16 rounding.
    Tensor b = Tensor::empty({5, 3, 4}, DType::kBF16);
    ref::copy({.out = b, .in = out}, nullptr);
    Tensor back = Tensor::empty({5, 3, 4}, DType::kF32);
    ref::copy({.out = back, .in = b}, nullptr);
    for (int64_t i = 0; i < back.numel(); ++i) {
        ASSERT_EQ(back.ptr<float>()[i], bf16_to_float(float_to_bf16(out.ptr<float>()[i])));
    }
}

TEST(RefFillRandom, DeterministicUnitVarianceAndBf16IsRoundedF32) {
    const int64_t n = 200001;
    Tensor a = Tensor::empty({n}, DType::kF32);
    Tensor b = Tensor::empty({n}, DType::kF32);
    ref::fill_random({.out = a, .seed = 7, .mean = 0.5f, .stddev = 2.0f}, nullptr);
    ref::fill_random({.out = b, .seed = 7, .mean = 0.5f, .stddev = 2.0f}, nullptr);
    double sum = 0.0, sq = 0.0;
    float lo = 1e30f, hi = -1e30f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = a.ptr<float>()[i];
        ASSERT_EQ(v, b.ptr<float>()[i]) << i;  // same seed, same bits
        sum += v;
        sq += static_cast<double>(v) * v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    const double mean = sum / n;
    const double var = sq / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.02);
    EXPECT_NEAR(var, 4.0, 0.05);
    EXPECT_GE(lo, 0.5f - 2.0f * 1.7320508f);  // uniform support [mean - sqrt(3) sd, mean + sqrt(3) sd)
    EXPECT_LT(hi, 0.5f + 2.0f * 1.7320508f);
    // Another seed: another stream.
    ref::fill_random({.out = b, .seed = 8, .mean = 0.5f, .stddev = 2.0f}, nullptr);
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += a.ptr<float>()[i] == b.ptr<float>()[i];
    EXPECT_LT(same, n / 1000);
    // bf16 = the f32 values rounded to nearest even; the thread pool does not change the bits.
    Tensor h = Tensor::empty({n}, DType::kBF16);
    ThreadPool pool(2);
    ref::fill_random({.out = h, .seed = 7, .mean = 0.5f, .stddev = 2.0f}, &pool);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h.ptr<uint16_t>()[i], float_to_bf16(a.ptr<float>()[i])) << i;
    // stddev 0: exactly the mean (norm weights of dummy checkpoints).
    ref::fill_random({.out = b, .seed = 9, .mean = 1.0f, .stddev = 0.0f}, nullptr);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b.ptr<float>()[i], 1.0f);
}

TEST(RefFill, StridedViewLeavesPaddingAlone) {
    Tensor t = Tensor::from_f32({2, 4}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
    ref::fill({.out = t.view().slice(1, 1, 3), .value = -2.5f}, nullptr);
    const std::vector<float> want{1, -2.5f, -2.5f, 4, 5, -2.5f, -2.5f, 8};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(t.ptr<float>()[i], want[i]) << i;
}

TEST(RefGatherRows, PicksRowsByIndex) {
    std::mt19937 rng(5);
    test::Buffer in = test::random_buffer(rng, {6, 7}, true);
    Tensor idx = test::i32_tensor({5, 0, 0, 3});
    Tensor out = Tensor::zeros({4, 7}, DType::kF32);
    ref::gather_rows({.out = out, .in = in.view, .index = idx}, nullptr);
    for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 7; ++j) {
            ASSERT_EQ(*out.view().at<float>({i, j}), *in.view.at<float>({idx.ptr<int32_t>()[i], j}));
        }
}

TEST(RefGroupedGemm, EqualsOneGemmPerGroupIncludingEmptyGroups) {
    std::mt19937 rng(77);
    SCOPED_TRACE("seed 77");
    const int64_t k = 13, n = 9, groups = 5;
    const std::vector<int32_t> offsets{0, 3, 3, 10, 11, 11};  // groups 1 and 4 empty
    const int64_t rows = offsets.back() + 2;                  // two rows past the last group stay untouched
    Tensor a = Tensor::from_f32({rows, k}, test::random_floats(rng, rows * k));
    Tensor b = Tensor::from_f32({groups, n, k}, test::random_floats(rng, groups * n * k));
    Tensor out = Tensor::empty({rows, n}, DType::kF32);
    for (int64_t i = 0; i < out.numel(); ++i) out.ptr<float>()[i] = 123.0f;
    ref::grouped_gemm({.out = out, .a = a, .b = b, .offsets = test::i32_tensor(offsets)}, nullptr);
    for (int64_t g = 0; g < groups; ++g) {
        for (int64_t r = offsets[static_cast<size_t>(g)]; r < offsets[static_cast<size_t>(g) + 1]; ++r) {
            for (int64_t c = 0; c < n; ++c) {
                double want = 0;
                for (int64_t j = 0; j < k; ++j) {
                    want += static_cast<double>(a.ptr<float>()[r * k + j]) * b.ptr<float>()[(g * n + c) * k + j];
                }
                ASSERT_NEAR(out.ptr<float>()[r * n + c], want, 1e-5) << "group " << g << " row " << r;
            }
        }
    }
    for (int64_t i = offsets.back() * n; i < out.numel(); ++i) ASSERT_EQ(out.ptr<float>()[i], 123.0f);
}

TEST(RefPaged, WriteThenGatherAcrossPageEdges) {
    std::mt19937 rng(9);
    const int64_t page = 4, row_dim = 3, n_pages = 12;
    Tensor cache = Tensor::zeros({n_pages, page, row_dim}, DType::kF32);
    // Two sequences with interleaved, out-of-order pages.
    Tensor table = Tensor::from_i32({2, 4}, std::vector<int32_t>{7, 2, 9, 0, 1, 11, 4, 3});
    // Sequence 0 writes positions [3, 9) (crossing two page edges), sequence 1 positions [0, 5).
    Tensor cu = test::i32_tensor({0, 6, 11});
    Tensor pos0 = test::i32_tensor({3, 0});
    test::Buffer rows = test::random_buffer(rng, {11, row_dim}, true);
    ref::paged_write({.cache = cache, .rows = rows.view, .page_table = table, .cu_rows = cu, .pos0 = pos0}, nullptr);
    // Row 0 of seq 0 is position 3: page table[0][0] = 7, slot 3.
    EXPECT_EQ(cache.ptr<float>()[(7 * page + 3) * row_dim + 1], *rows.view.at<float>({0, 1}));
    // Position 4 of seq 0 lands on page 2 slot 0.
    EXPECT_EQ(cache.ptr<float>()[(2 * page + 0) * row_dim + 2], *rows.view.at<float>({1, 2}));
    Tensor back = Tensor::zeros({11, row_dim}, DType::kF32);
    ref::paged_gather({.out = back, .cache = cache, .page_table = table, .cu_rows = cu, .pos0 = pos0}, nullptr);
    for (int64_t r = 0; r < 11; ++r)
        for (int64_t j = 0; j < row_dim; ++j) ASSERT_EQ(*back.view().at<float>({r, j}), *rows.view.at<float>({r, j}));
}

}  // namespace
}  // namespace penstock
