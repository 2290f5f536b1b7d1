// kernels::Fork on the CPU: always in line (the same context, join a no-op), and a fork's tensors are ordinary host
// tensors. The CUDA side (ordering across the two streams, held frees) is tests/kernels/cuda/fork_test.cc.
#include "kernels/fork.h"

#include <gtest/gtest.h>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace penstock::test {
namespace {

TEST(ForkTest, RunsInLineOnTheCpu) {
    int dummy_side = 0;
    const kernels::Context ctx{.device = Device::kCPU, .side_stream = &dummy_side};  // ignored on the CPU
    kernels::Fork fork(ctx);
    EXPECT_FALSE(fork.overlaps());
    EXPECT_EQ(fork.ctx().stream, ctx.stream);
    EXPECT_EQ(fork.ctx().alloc, ctx.alloc);
    const Tensor t = Tensor::empty({4}, DType::kF32, kernels::allocator_of(fork.ctx()));
    kernels::fill({.out = t, .value = 2.5f}, fork.ctx());  // runs at once
    EXPECT_EQ(t.ptr<float>()[3], 2.5f);
    fork.join();
    fork.join();  // idempotent
    EXPECT_FALSE(fork.overlaps());
}

}  // namespace
}  // namespace penstock::test
