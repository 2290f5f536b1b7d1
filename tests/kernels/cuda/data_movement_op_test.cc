// cuda::{copy, fill, gather_rows, paged_write, paged_gather, embedding} against the CPU reference on seeded inputs:
// f32 and bf16, contiguous and strided views, broadcast copies, 1 row, odd widths, and paged sequences that end on,
// one before and one past a page boundary, with cached prefixes (pos0 > 0). Outputs are poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

class DataMovementOpTest : public CudaTest {};

const DType kDtypes[] = {DType::kF32, DType::kBF16};

TEST_F(DataMovementOpTest, CopyStridedAndConverting) {
    const Shape kShapes[] = {{1}, {1, 1}, {5, 7}, {3, 4, 33}, {2, 3, 4, 5}, {129, 257}};
    uint32_t seed = 100;
    for (const Shape& shape : kShapes) {
        for (DType din : kDtypes) {
            for (DType dout : kDtypes) {
                for (int strided = 0; strided < 2; ++strided) {
                    SCOPED_TRACE(::testing::Message()
                                 << "shape " << shape.size() << "d n=" << numel_of(shape) << " " << dtype_name(din)
                                 << "->" << dtype_name(dout) << " strided=" << strided);
                    PENSTOCK_SEEDED(seed);
                    std::mt19937 rng(seed++);
                    const Pair in = random_pair(rng, shape, din, strided, alloc(), stream(), -100.0f, 100.0f);
                    Pair out = poisoned_pair(shape, dout, !strided, alloc(), stream());
                    cuda::copy({.out = out.dv, .in = in.dv}, raw_stream());
                    ref::copy({.out = out.hv, .in = in.hv}, nullptr);
                    // The reference rounds to out's dtype on store too: exact match expected.
                    expect_pair_close(out, out.hv, kExact, stream());
                }
            }
        }
    }
}

TEST_F(DataMovementOpTest, CopyBroadcastsStrideZero) {
    std::mt19937 rng(7);
    const Pair row = random_pair(rng, {1, 37}, DType::kBF16, false, alloc(), stream());
    Pair out = poisoned_pair({9, 37}, DType::kF32, false, alloc(), stream());
    TensorView in_dev = row.dv;
    TensorView in_host = row.hv;
    in_dev.shape[0] = in_host.shape[0] = 9;
    in_dev.strides[0] = in_host.strides[0] = 0;
    cuda::copy({.out = out.dv, .in = in_dev}, raw_stream());
    ref::copy({.out = out.hv, .in = in_host}, nullptr);
    expect_pair_close(out, out.hv, kExact, stream());
}

// The MLA MHA-form K build (models/mla.cc): per-head slices of a wider row filled from a strided per-head source and
// from one row broadcast over the heads (stride 0), at widths that take 16-, 8-, 4- and 2-byte words.
TEST_F(DataMovementOpTest, CopyRowsIntoSlicesAndBroadcast) {
    struct Case {
        int64_t t, h, a, b;  // rows, heads, first part width, second part width
        DType dtype;
    };
    const Case kCases[] = {{5, 3, 128, 64, DType::kBF16}, {4, 96, 12, 4, DType::kBF16}, {3, 5, 6, 2, DType::kBF16},
                           {7, 3, 5, 3, DType::kBF16},    {4, 96, 13, 7, DType::kF32}};
    std::mt19937 rng(4242);
    for (const Case& c : kCases) {
        SCOPED_TRACE(::testing::Message() << c.t << "x" << c.h << " " << c.a << "+" << c.b << " " << dtype_name(c.dtype));
        const int64_t w = c.a + c.b;
        // source rows [t, h * (a + 5)]: the per-head slice of width a sits at the start of each head's stride a + 5
        const Pair src = random_pair(rng, {c.t, c.h * (c.a + 5)}, c.dtype, false, alloc(), stream());
        const Pair pe = random_pair(rng, {c.t, c.b}, c.dtype, false, alloc(), stream());
        Pair out = poisoned_pair({c.t, c.h, w}, c.dtype, false, alloc(), stream());
        auto views = [&](const Pair& s, const Pair& p, const TensorView& o, bool dev) {
            const TensorView sv = dev ? s.dv : s.hv, pv = dev ? p.dv : p.hv;
            return std::array<TensorView, 4>{o.slice(2, 0, c.a), sv.as_strided(0, {c.t, c.h, c.a}, {c.h * (c.a + 5), c.a + 5, 1}),
                                             o.slice(2, c.a, w), pv.as_strided(0, {c.t, c.h, c.b}, {c.b, 0, 1})};
        };
        const auto d = views(src, pe, out.dv, true);
        const auto hst = views(src, pe, out.hv, false);
        cuda::copy({.out = d[0], .in = d[1]}, raw_stream());
        cuda::copy({.out = d[2], .in = d[3]}, raw_stream());
        ref::copy({.out = hst[0], .in = hst[1]}, nullptr);
        ref::copy({.out = hst[2], .in = hst[3]}, nullptr);
        expect_pair_close(out, out.hv, kExact, stream());
    }
}

TEST_F(DataMovementOpTest, FillStrided) {
    for (DType d : {DType::kF32, DType::kBF16}) {
        Pair out = poisoned_pair({5, 33}, d, true, alloc(), stream());
        cuda::fill({.out = out.dv, .value = 1.2345f}, raw_stream());
        ref::fill({.out = out.hv, .value = 1.2345f}, nullptr);
        expect_pair_close(out, out.hv, kExact, stream());
    }
    const Tensor ints = Tensor::empty({1000}, DType::kI32, alloc());
    cuda::fill({.out = ints, .value = -7.0f}, raw_stream());
    for (int32_t v : read_i32(ints, stream())) ASSERT_EQ(v, -7);
}

// Contiguous fills: zero (cudaMemsetAsync) and other values as 16-byte words, with lengths that leave a tail of
// 1..7 elements past the last whole word (written by the strided kernel), and -0.0 (not all-zero bits).
TEST_F(DataMovementOpTest, FillContiguous) {
    for (DType d : {DType::kF32, DType::kBF16}) {
        for (int64_t n : {1, 7, 8, 13, 64, 1001}) {
            for (float value : {0.0f, -0.0f, 3.5f, -1.2345f}) {
                SCOPED_TRACE(::testing::Message() << dtype_name(d) << " n=" << n << " value=" << value);
                Pair out = poisoned_pair({n, 3}, d, false, alloc(), stream());
                cuda::fill({.out = out.dv, .value = value}, raw_stream());
                ref::fill({.out = out.hv, .value = value}, nullptr);
                expect_pair_close(out, out.hv, kExact, stream());
                if (HasFatalFailure()) return;
            }
        }
    }
    const Tensor ints = Tensor::empty({4099}, DType::kI32, alloc());
    cuda::fill({.out = ints, .value = 0.0f}, raw_stream());
    for (int32_t v : read_i32(ints, stream())) ASSERT_EQ(v, 0);
    cuda::fill({.out = ints, .value = 12.0f}, raw_stream());
    for (int32_t v : read_i32(ints, stream())) ASSERT_EQ(v, 12);
}

TEST_F(DataMovementOpTest, FillRandomBitExactWithReference) {
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{1} << 20}) {
        for (DType d : kDtypes) {
            SCOPED_TRACE(::testing::Message() << "n=" << n << " " << dtype_name(d));
            Pair out = poisoned_pair({n}, d, false, alloc(), stream());
            cuda::fill_random({.out = out.dv, .seed = 0x1234567ull + static_cast<uint64_t>(n), .mean = -0.25f,
                               .stddev = 0.75f},
                              raw_stream());
            ref::fill_random({.out = out.hv, .seed = 0x1234567ull + static_cast<uint64_t>(n), .mean = -0.25f,
                              .stddev = 0.75f},
                             nullptr);
            expect_pair_close(out, out.hv, kExact, stream());
        }
    }
}

TEST_F(DataMovementOpTest, GatherRows) {
    const int64_t kDims[] = {1, 7, 64, 1000};
    uint32_t seed = 200;
    for (int64_t d : kDims) {
        for (DType dt : kDtypes) {
            for (int strided = 0; strided < 2; ++strided) {
                SCOPED_TRACE(::testing::Message() << "d=" << d << " " << dtype_name(dt) << " strided=" << strided);
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const int64_t m = 13, n = 29;
                const Pair in = random_pair(rng, {m, d}, dt, strided, alloc(), stream());
                Pair out = poisoned_pair({n, d}, dt, strided, alloc(), stream());
                std::vector<int32_t> idx(static_cast<size_t>(n));
                std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(m - 1));
                for (auto& i : idx) i = pick(rng);
                const Tensor idx_dev = dev_i32(idx, alloc(), stream());
                const Tensor idx_host = i32_tensor(idx);
                cuda::gather_rows({.out = out.dv, .in = in.dv, .index = idx_dev}, raw_stream());
                // Reference on the f32 host copies (bytes of the rounded values: exact).
                ref::gather_rows({.out = out.hv, .in = in.hv, .index = idx_host}, nullptr);
                expect_pair_close(out, out.hv, kExact, stream());
            }
        }
    }
}

struct PagedCase {
    int64_t page_size;
    int64_t row_dim;
    std::vector<int32_t> lens;  // rows per sequence
    std::vector<int32_t> pos0;  // cached prefix per sequence
};

TEST_F(DataMovementOpTest, PagedWriteAndGather) {
    // Sequences ending on a page boundary, one short of it and one past it; cached prefixes; a 1-row sequence.
    const std::vector<PagedCase> kCases = {
        {16, 64, {16}, {0}},
        {16, 64, {15, 17, 1}, {0, 16, 31}},
        {16, 576, {33, 16, 5}, {15, 1, 47}},
        {64, 7, {64, 63, 65}, {0, 64, 1}},
        {1, 3, {4, 1}, {0, 2}},
    };
    uint32_t seed = 300;
    for (const PagedCase& c : kCases) {
        for (DType dt : kDtypes) {
            for (int strided = 0; strided < 2; ++strided) {
                SCOPED_TRACE(::testing::Message() << "page=" << c.page_size << " dim=" << c.row_dim << " n_seqs="
                                                  << c.lens.size() << " " << dtype_name(dt) << " strided=" << strided);
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const auto n_seqs = static_cast<int64_t>(c.lens.size());
                std::vector<int32_t> cu(1, 0);
                int64_t max_pos = 0;
                for (int64_t s = 0; s < n_seqs; ++s) {
                    cu.push_back(cu.back() + c.lens[static_cast<size_t>(s)]);
                    max_pos =
                        std::max<int64_t>(max_pos, c.pos0[static_cast<size_t>(s)] + c.lens[static_cast<size_t>(s)]);
                }
                const int64_t max_pages = (max_pos + c.page_size - 1) / c.page_size + 1;
                const int64_t n_pages = n_seqs * max_pages + 2;
                // A shuffled page table: every sequence gets distinct pages.
                std::vector<int32_t> pages(static_cast<size_t>(n_pages));
                std::iota(pages.begin(), pages.end(), 0);
                std::shuffle(pages.begin(), pages.end(), rng);
                std::vector<int32_t> table(pages.begin(), pages.begin() + n_seqs * max_pages);
                const Tensor table_dev = dev_i32(table, alloc(), stream(), {n_seqs, max_pages});
                const Tensor table_host = Tensor::from_i32({n_seqs, max_pages}, table);
                const Tensor cu_dev = dev_i32(cu, alloc(), stream());
                const Tensor pos_dev = dev_i32(c.pos0, alloc(), stream());
                const Tensor cu_host = i32_tensor(cu);
                const Tensor pos_host = i32_tensor(c.pos0);
                const int64_t n_rows = cu.back();
                const Pair rows = random_pair(rng, {n_rows, c.row_dim}, dt, strided, alloc(), stream());
                // The cache starts as random data (host and device the same), so untouched slots are checked too.
                Pair cache = random_pair(rng, {n_pages, c.page_size, c.row_dim}, dt, false, alloc(), stream());
                cuda::paged_write(
                    {.cache = cache.dv, .rows = rows.dv, .page_table = table_dev, .cu_rows = cu_dev, .pos0 = pos_dev},
                    raw_stream());
                ref::paged_write({.cache = cache.hv,
                                  .rows = rows.hv,
                                  .page_table = table_host,
                                  .cu_rows = cu_host,
                                  .pos0 = pos_host},
                                 nullptr);
                expect_pair_close(cache, cache.hv, kExact, stream(), /*check_padding=*/false);

                Pair out = poisoned_pair({n_rows, c.row_dim}, dt, false, alloc(), stream());
                cuda::paged_gather(
                    {.out = out.dv, .cache = cache.dv, .page_table = table_dev, .cu_rows = cu_dev, .pos0 = pos_dev},
                    raw_stream());
                ref::paged_gather(
                    {.out = out.hv, .cache = cache.hv, .page_table = table_host, .cu_rows = cu_host, .pos0 = pos_host},
                    nullptr);
                expect_pair_close(out, out.hv, kExact, stream());
            }
        }
    }
}

TEST_F(DataMovementOpTest, Embedding) {
    uint32_t seed = 400;
    for (int64_t hidden : {1, 33, 1024}) {
        for (DType table_dt : kDtypes) {
            for (DType out_dt : kDtypes) {
                SCOPED_TRACE(::testing::Message() << "hidden=" << hidden << " table=" << dtype_name(table_dt)
                                                  << " out=" << dtype_name(out_dt));
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const int64_t vocab = 50, n = 17;
                const Pair table = random_pair(rng, {vocab, hidden}, table_dt, false, alloc(), stream());
                Pair out = poisoned_pair({n, hidden}, out_dt, true, alloc(), stream());
                std::vector<int32_t> ids(static_cast<size_t>(n));
                std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
                for (auto& i : ids) i = pick(rng);
                ids[0] = 0;
                ids[1] = static_cast<int32_t>(vocab - 1);
                const Tensor ids_dev = dev_i32(ids, alloc(), stream());
                const Tensor ids_host = i32_tensor(ids);
                cuda::embedding({.out = out.dv, .table = table.dv, .ids = ids_dev}, raw_stream());
                ref::embedding({.out = out.hv, .table = table.hv, .ids = ids_host}, nullptr);
                expect_pair_close(out, out.hv, kExact, stream());
            }
        }
    }
}

}  // namespace
}  // namespace penstock::test
