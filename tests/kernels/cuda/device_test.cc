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

}  // namespace
}  // namespace penstock::test
