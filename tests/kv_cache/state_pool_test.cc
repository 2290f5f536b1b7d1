// KDA state pool: slot accounting (all-or-nothing, distinct ids, double free aborts), zero-filled slots on
// allocation, and request -> slot mapping with release.
#include "kv_cache/state_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace penstock::kv_cache {
namespace {

constexpr KdaStateShape kShape{.n_heads = 2, .k_dim = 4, .v_dim = 3, .conv_kernel = 4, .conv_channels = 5};

TEST(KdaStatePool, ShapesBytesAndGrowth) {
    KdaStatePool pool(5, 2, kShape);
    EXPECT_EQ(pool.n_layers(), 2);
    EXPECT_EQ(pool.capacity(), 0) << "no storage before the first admission";
    EXPECT_EQ(pool.slot_bytes(), static_cast<size_t>(2 * (2 * 4 * 3 + 3 * 5) * 4));
    std::vector<int32_t> slots;
    for (int i = 0; i < 3; ++i) {
        auto s = pool.allocate();
        ASSERT_TRUE(s.ok());
        slots.push_back(*s);
        // Mark the slot so growth can be checked to keep it.
        pool.recurrent(1).ptr<float>()[*s * 24 + 5] = 10.0f + static_cast<float>(*s);
        pool.conv(0).ptr<float>()[*s * 15 + 14] = -10.0f - static_cast<float>(*s);
    }
    EXPECT_EQ(pool.capacity(), 4) << "1 -> 2 -> 4";
    EXPECT_EQ(pool.recurrent(1).shape_vec(), (Shape{4, 2, 4, 3}));
    EXPECT_EQ(pool.conv(0).shape_vec(), (Shape{4, 3, 5}));
    for (int32_t s : slots) {
        EXPECT_EQ(pool.recurrent(1).ptr<float>()[s * 24 + 5], 10.0f + static_cast<float>(s));
        EXPECT_EQ(pool.conv(0).ptr<float>()[s * 15 + 14], -10.0f - static_cast<float>(s));
    }
    ASSERT_TRUE(pool.allocate().ok());
    ASSERT_TRUE(pool.allocate().ok());
    EXPECT_EQ(pool.capacity(), 5) << "growth stops at n_slots";
    EXPECT_EQ(pool.n_free(), 0);
    EXPECT_FALSE(pool.allocate().ok());
}

TEST(KdaStatePool, AllocateReleaseAccounting) {
    KdaStatePool pool(3, 1, kShape);
    std::set<int32_t> ids;
    for (int i = 0; i < 3; ++i) {
        auto s = pool.allocate();
        ASSERT_TRUE(s.ok());
        ids.insert(*s);
    }
    EXPECT_EQ(ids.size(), 3u);
    EXPECT_EQ(pool.n_free(), 0);
    auto full = pool.allocate();
    EXPECT_FALSE(full.ok());
    EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(pool.n_used(), 3);
    for (int32_t id : ids) pool.release(id);
    EXPECT_EQ(pool.n_free(), 3);
}

TEST(KdaStatePool, FreshSlotsAreZero) {
    KdaStatePool pool(2, 2, kShape);
    auto a = pool.allocate();
    ASSERT_TRUE(a.ok());
    for (int64_t l = 0; l < 2; ++l) {  // dirty the slot as a forward would
        float* r = pool.recurrent(l).ptr<float>() + *a * 24;
        for (int i = 0; i < 24; ++i) r[i] = 1.5f;
        float* c = pool.conv(l).ptr<float>() + *a * 15;
        for (int i = 0; i < 15; ++i) c[i] = -2.0f;
    }
    pool.reset(*a);
    for (int64_t l = 0; l < 2; ++l) {
        for (int i = 0; i < 24; ++i) EXPECT_EQ(pool.recurrent(l).ptr<float>()[*a * 24 + i], 0.0f) << "reset";
        pool.recurrent(l).ptr<float>()[*a * 24 + 3] = 7.0f;
    }
    pool.release(*a);
    auto b = pool.allocate();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, *a) << "LIFO reuse";
    for (int64_t l = 0; l < 2; ++l) {
        for (int i = 0; i < 24; ++i) EXPECT_EQ(pool.recurrent(l).ptr<float>()[*b * 24 + i], 0.0f);
        for (int i = 0; i < 15; ++i) EXPECT_EQ(pool.conv(l).ptr<float>()[*b * 15 + i], 0.0f);
    }
}

TEST(KdaStatePoolDeathTest, DoubleFreeAborts) {
    KdaStatePool pool(2, 1, kShape);
    auto a = pool.allocate();
    ASSERT_TRUE(a.ok());
    pool.release(*a);
    EXPECT_DEATH(pool.release(*a), "double free");
}

TEST(RequestStateSlots, AcquireIsIdempotentAndAllOrNothing) {
    KdaStatePool pool(2, 1, kShape);
    RequestStateSlots slots(&pool);
    ASSERT_TRUE(slots.acquire(7).ok());
    const int32_t s7 = slots.slot(7);
    ASSERT_TRUE(slots.acquire(7).ok());
    EXPECT_EQ(slots.slot(7), s7);
    EXPECT_EQ(pool.n_used(), 1);
    ASSERT_TRUE(slots.acquire(8).ok());
    Status st = slots.acquire(9);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_FALSE(slots.contains(9));
    EXPECT_EQ(slots.n_requests(), 2);
    slots.release(7);
    slots.release(7);  // unknown now: no-op
    slots.release(8);
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_EQ(slots.n_requests(), 0);
}

}  // namespace
}  // namespace penstock::kv_cache
