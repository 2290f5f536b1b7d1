// kernels::Fork on CUDA (contract kernels/fork.h): the fork's work runs on the side stream after the parent's earlier
// work, the parent's work after the join waits for it, memory freed on the fork is not handed out again before the
// join, and a profiled context runs the fork in line.
#include "kernels/fork.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/ops.h"
#include "kernels/profile.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace penstock::test {
namespace {

class ForkCudaTest : public CudaTest {
protected:
    void SetUp() override {
        CudaTest::SetUp();
        if (IsSkipped()) return;
        side_ = std::make_unique<cuda::Stream>(/*device=*/0);
    }
    kernels::Context ctx() {
        return {.device = Device::kCUDA, .stream = raw_stream(), .alloc = &alloc(), .side_stream = side_->handle()};
    }

private:
    std::unique_ptr<cuda::Stream> side_;
};

// Counts the elements of a host f32 tensor that differ from `value`.
int64_t count_not(const Tensor& host, float value) {
    int64_t bad = 0;
    for (int64_t i = 0; i < host.numel(); ++i) bad += host.ptr<float>()[i] != value ? 1 : 0;
    return bad;
}

TEST_F(ForkCudaTest, OrdersTheForkAfterEarlierWorkAndLaterWorkAfterTheJoin) {
    const kernels::Context c = ctx();
    constexpr int64_t kN = int64_t{48} << 20;  // 192 MB: each pass takes long enough for a missing wait to show
    const Tensor a = Tensor::empty({kN}, DType::kF32, alloc());
    const Tensor b = Tensor::empty({kN}, DType::kF32, alloc());
    kernels::fill({.out = a, .value = 0.0f}, c);
    kernels::fill({.out = b, .value = 0.0f}, c);
    stream().synchronize();
    for (int rep = 0; rep < 3; ++rep) {
        const auto v = static_cast<float>(3 + rep);
        for (int i = 0; i < 4; ++i) kernels::fill({.out = a, .value = v - 1.0f + static_cast<float>(i) / 3.0f}, c);
        kernels::fill({.out = a, .value = v}, c);  // the parent's last write before the fork
        kernels::Fork fork(c);
        ASSERT_TRUE(fork.overlaps());
        EXPECT_EQ(fork.ctx().stream, c.side_stream);
        EXPECT_EQ(fork.ctx().side_stream, nullptr);
        kernels::copy({.out = b, .in = a}, fork.ctx());                                    // must see v
        for (int i = 0; i < 4; ++i) kernels::add({.out = b, .a = b, .b = b}, fork.ctx());  // b = 16 v
        fork.join();
        EXPECT_EQ(fork.ctx().stream, c.stream);
        EXPECT_FALSE(fork.overlaps());
        const Tensor host = cuda::to_host(b, stream());  // on the parent's stream: after the join
        EXPECT_EQ(count_not(host, 16.0f * v), 0) << "rep " << rep;
    }
}

TEST_F(ForkCudaTest, HoldsTheForksFreedBlocksUntilTheJoin) {
    const kernels::Context c = ctx();
    constexpr int64_t kBytes = int64_t{1} << 20;
    const size_t in_use = alloc().stats().bytes_in_use;
    kernels::Fork fork(c);
    ASSERT_TRUE(fork.overlaps());
    const void* freed = nullptr;
    {
        const Tensor t = Tensor::empty({kBytes}, DType::kU8, kernels::allocator_of(fork.ctx()));
        freed = t.view().data;
    }
    {
        // The same size class on the parent: not the block the fork freed (its work may still be running).
        const Tensor u = Tensor::empty({kBytes}, DType::kU8, alloc());
        EXPECT_NE(u.view().data, freed);
    }
    EXPECT_GT(alloc().stats().bytes_in_use, in_use);  // the held block still counts as live
    fork.join();
    EXPECT_EQ(alloc().stats().bytes_in_use, in_use);
}

TEST_F(ForkCudaTest, RunsInLineWithAProfilerOrWithoutASideStream) {
    kernels::Context c = ctx();
    kernels::Profiler profiler(Device::kCUDA);
    c.profiler = &profiler;
    {
        const kernels::Fork fork(c);
        EXPECT_FALSE(fork.overlaps());
        EXPECT_EQ(fork.ctx().stream, c.stream);
        EXPECT_EQ(fork.ctx().alloc, c.alloc);
    }
    c.profiler = nullptr;
    c.side_stream = nullptr;
    const kernels::Fork fork(c);
    EXPECT_FALSE(fork.overlaps());
    EXPECT_EQ(fork.ctx().stream, c.stream);
}

}  // namespace
}  // namespace penstock::test
