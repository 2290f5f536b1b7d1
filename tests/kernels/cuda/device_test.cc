// Device queries, Stream/Event and copies. Without a GPU, device_count() must return a non-OK Status (not abort) and
// every other test skips.
#include "kernels/cuda/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/profile.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace penstock::test {
namespace {

TEST(DeviceQueryTest, ReportsDevicesOrUnavailableWithoutAborting) {
    const Result<int> n = cuda::device_count();
    if (!n.ok()) {
        EXPECT_EQ(n.status().code(), StatusCode::kUnavailable) << n.status().to_string();
        EXPECT_FALSE(cuda::device_properties(0).ok());
        return;
    }
    EXPECT_GE(*n, 1);
    const Result<cuda::DeviceProperties> p = cuda::device_properties(0);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_FALSE(p->name.empty());
    EXPECT_GT(p->n_sms, 0);
    EXPECT_GT(p->total_memory_bytes, 0u);
    EXPECT_GE(p->cc_major, 7);
    EXPECT_EQ(cuda::device_properties(*n).status().code(), StatusCode::kOutOfRange);
    std::printf("device 0: %s, %d SMs, %.1f GiB, cc %d.%d, L2 %zu MiB, driver %d, runtime %d\n", p->name.c_str(),
                p->n_sms, static_cast<double>(p->total_memory_bytes) / (1 << 30), p->cc_major, p->cc_minor,
                p->l2_cache_bytes >> 20, p->driver_version, p->runtime_version);
}

using StreamTest = CudaTest;

TEST_F(StreamTest, RoundTripThroughDeviceIsExact) {
    std::vector<int32_t> values(100003);
    std::iota(values.begin(), values.end(), -5000);
    const Tensor host = Tensor::from_i32({static_cast<int64_t>(values.size())}, values);
    const Tensor dev = cuda::to_device(host, alloc(), stream());
    const Tensor dev2 = Tensor::empty(dev.view().shape_vec(), DType::kI32, alloc());
    cuda::copy_async(dev2, dev, stream());
    const Tensor back = cuda::to_host(dev2, stream());
    ASSERT_EQ(back.numel(), host.numel());
    EXPECT_EQ(0, std::memcmp(back.ptr<int32_t>(), values.data(), values.size() * sizeof(int32_t)));
}

TEST_F(StreamTest, EventsTimeQueuedWork) {
    cuda::Event start(/*device=*/0);
    cuda::Event end(/*device=*/0);
    const Tensor buf = Tensor::empty({64 << 20}, DType::kU8, alloc());
    start.record(stream());
    cuda::fill_bytes_async(buf, 1, stream());
    end.record(stream());
    end.synchronize();
    EXPECT_GE(cuda::Event::elapsed_ms(start, end), 0.0f);

    cuda::Stream other(/*device=*/0);  // cross-stream ordering through an event
    end.wait_on(other);
    other.synchronize();
    cuda::Stream moved = std::move(other);
    EXPECT_NE(moved.handle(), nullptr);
    EXPECT_EQ(other.handle(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
}

// kernels::DeviceClock on the stream (the pipeline's per-stage busy / stall): poll() never waits, counts a bracket
// once the stream has passed its end, and sums brackets, not the gaps between them.
TEST_F(StreamTest, DeviceClockCountsFinishedBracketsWithoutWaiting) {
    kernels::DeviceClock clock(Device::kCUDA);
    const kernels::Context ctx{.device = Device::kCUDA, .stream = raw_stream()};
    const Tensor buf = Tensor::empty({int64_t{1} << 30}, DType::kU8, alloc());  // 1 GiB: each fill takes ~0.3 ms
    for (int i = 0; i < 3; ++i) {
        clock.begin(ctx);
        for (int j = 0; j < 40; ++j) cuda::fill_bytes_async(buf, j, stream());
        clock.end(ctx);
        cuda::fill_bytes_async(buf, 7, stream());  // between brackets: not counted
    }
    const int64_t queued = clock.pending();
    EXPECT_EQ(queued, 3);  // recorded, none counted yet
    const double early = clock.poll();
    stream().synchronize();
    const double total = clock.poll();
    EXPECT_EQ(clock.pending(), 0);
    EXPECT_GT(total, early);
    EXPECT_GT(total, 0.0);
    std::printf("[clock] 3 brackets of 40 x 1 GiB fills: %.3f ms (%.3f ms counted before the stream finished)\n", total,
                early);
    clock.begin(ctx);  // an empty bracket counts ~0 and is freed
    clock.end(ctx);
    stream().synchronize();
    EXPECT_LT(clock.poll() - total, 1.0);
    EXPECT_EQ(clock.pending(), 0);
}

}  // namespace
}  // namespace penstock::test
