// Page pool accounting, request page tables and the paged row cache.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kv_cache/page_pool.h"
#include "kv_cache/paged_cache.h"

namespace penstock::kv_cache {
namespace {

TEST(PagePool, AllocateAndReleaseKeepAccounting) {
    PagePool pool(10);
    auto a = pool.allocate(4);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(pool.n_free(), 6);
    auto b = pool.allocate(7);
    EXPECT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(pool.n_free(), 6) << "a failed allocation takes nothing";
    auto c = pool.allocate(6);
    ASSERT_TRUE(c.ok());
    std::set<int32_t> ids(a->begin(), a->end());
    ids.insert(c->begin(), c->end());
    EXPECT_EQ(ids.size(), 10u) << "page ids are distinct";
    pool.release(*a);
    pool.release(*c);
    EXPECT_EQ(pool.n_free(), 10);
}

TEST(PagePoolDeathTest, DoubleFreeAborts) {
    PagePool pool(2);
    auto a = pool.allocate(1);
    ASSERT_TRUE(a.ok());
    pool.release(*a);
    EXPECT_DEATH(pool.release(*a), "double free");
}

TEST(RequestTables, ReserveGrowsByPagesAndReleaseReturnsThem) {
    PagePool pool(8);
    RequestTables tables(&pool);
    ASSERT_TRUE(tables.reserve(1, 1).ok());
    EXPECT_EQ(tables.table(1).pages.size(), 1u);
    ASSERT_TRUE(tables.reserve(1, 64).ok());
    EXPECT_EQ(tables.table(1).pages.size(), 1u) << "64 tokens fit one page";
    ASSERT_TRUE(tables.reserve(1, 65).ok());
    EXPECT_EQ(tables.table(1).pages.size(), 2u) << "65 tokens need two pages";
    ASSERT_TRUE(tables.reserve(2, 6 * kPageSize).ok());
    EXPECT_FALSE(tables.reserve(3, 1).ok());
    EXPECT_FALSE(tables.contains(3)) << "a failed reservation leaves no table behind";
    EXPECT_EQ(tables.pages_owned(), pool.n_used());
    tables.release(1);
    tables.release(2);
    EXPECT_EQ(pool.n_used(), 0);
}

TEST(PagedRowCache, WriteThenGatherAcrossPageBoundaries) {
    constexpr int64_t kRowDim = 5;
    PagePool pool(16);
    RequestTables tables(&pool);
    // Interleave two requests so their pages are not contiguous.
    ASSERT_TRUE(tables.reserve(1, 10).ok());
    ASSERT_TRUE(tables.reserve(2, 10).ok());
    ASSERT_TRUE(tables.reserve(1, 200).ok());
    ASSERT_TRUE(tables.reserve(2, 130).ok());
    PagedRowCache cache(16, kRowDim, /*layer_begin=*/2, /*layer_end=*/4, DType::kF32);
    EXPECT_FALSE(cache.has_layer(1));
    EXPECT_TRUE(cache.has_layer(3));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    // Request 1 written in chunks that end exactly on and one past page boundaries: [0,64), [64,65), [65,129), [129,200).
    Tensor all1 = Tensor::empty({200, kRowDim}, DType::kF32);
    for (int64_t i = 0; i < all1.numel(); ++i) all1.ptr<float>()[i] = dist(rng);
    const int64_t cuts[] = {0, 64, 65, 129, 200};
    for (int k = 0; k < 4; ++k) {
        cache.write(3, tables.table(1), cuts[k], all1.view().slice(0, cuts[k], cuts[k + 1]));
    }
    Tensor all2 = Tensor::empty({130, kRowDim}, DType::kF32);
    for (int64_t i = 0; i < all2.numel(); ++i) all2.ptr<float>()[i] = dist(rng);
    cache.write(3, tables.table(2), 0, all2);
    Tensor back = Tensor::empty({200, kRowDim}, DType::kF32);
    cache.gather(3, tables.table(1), 0, back);
    for (int64_t i = 0; i < back.numel(); ++i) ASSERT_EQ(back.ptr<float>()[i], all1.ptr<float>()[i]) << i;
    Tensor mid = Tensor::empty({3, kRowDim}, DType::kF32);
    cache.gather(3, tables.table(2), 63, mid);
    for (int64_t i = 0; i < mid.numel(); ++i) ASSERT_EQ(mid.ptr<float>()[i], all2.ptr<float>()[63 * kRowDim + i]);
}

TEST(PagedRowCacheDeathTest, WritingPastTheReservationAborts) {
    PagePool pool(2);
    RequestTables tables(&pool);
    ASSERT_TRUE(tables.reserve(1, 64).ok());
    PagedRowCache cache(2, 3, 0, 1, DType::kF32);
    Tensor rows = Tensor::zeros({2, 3}, DType::kF32);
    EXPECT_DEATH(cache.write(0, tables.table(1), 63, rows), "reserved");
}

}  // namespace
}  // namespace penstock::kv_cache
