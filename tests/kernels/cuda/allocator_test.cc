// CudaCachingAllocator (size classes, reuse of freed blocks, stats, empty_cache, alignment, threads) and Workspace
// (bump order, alignment, reset, peak). Workspace tests run over cpu_allocator() too, so they need no GPU; the rest
// skip without one.
#include "kernels/cuda/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace penstock::test {
namespace {

using cuda::CudaCachingAllocator;
using cuda::kDeviceAlignment;
using cuda::Workspace;

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kDeviceAlignment == 0; }

TEST(SizeClassTest, RoundsToQuarterOctavesOf256Bytes) {
    EXPECT_EQ(CudaCachingAllocator::size_class(0), 256u);
    EXPECT_EQ(CudaCachingAllocator::size_class(1), 256u);
    EXPECT_EQ(CudaCachingAllocator::size_class(256), 256u);
    EXPECT_EQ(CudaCachingAllocator::size_class(257), 512u);
    EXPECT_EQ(CudaCachingAllocator::size_class(1000), 1024u);
    EXPECT_EQ(CudaCachingAllocator::size_class(1100), 1280u);
    EXPECT_EQ(CudaCachingAllocator::size_class(5000), 5120u);
    EXPECT_EQ(CudaCachingAllocator::size_class(size_t{1} << 20), size_t{1} << 20);
    EXPECT_EQ(CudaCachingAllocator::size_class((size_t{1} << 20) + 1), (size_t{5} << 18));  // 1.25 MiB
    for (size_t b = 1; b < (size_t{1} << 24); b = b * 3 + 1) {
        const size_t c = CudaCachingAllocator::size_class(b);
        EXPECT_GE(c, b);
        EXPECT_EQ(c % kDeviceAlignment, 0u);
        EXPECT_LE(c, b < 1024 ? b + 1024 : b + b / 4 + kDeviceAlignment) << b;  // waste <= 25% above 1 KiB
    }
}

using CachingAllocatorTest = CudaTest;

TEST_F(CachingAllocatorTest, ReusesFreedBlocksOfTheSameClass) {
    CudaCachingAllocator a(/*device=*/0);
    void* p = a.allocate(1000);
    EXPECT_TRUE(aligned(p));
    auto s = a.stats();
    EXPECT_EQ(s.n_cuda_malloc, 1);
    EXPECT_EQ(s.bytes_in_use, 1024u);
    EXPECT_EQ(s.bytes_reserved, 1024u);
    a.deallocate(p, 1000);
    s = a.stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.bytes_reserved, 1024u);

    void* q = a.allocate(900);  // same class (1024): the cached block, no cudaMalloc
    EXPECT_EQ(q, p);
    s = a.stats();
    EXPECT_EQ(s.n_cuda_malloc, 1);
    EXPECT_EQ(s.n_cache_hits, 1);
    EXPECT_EQ(s.n_allocations, 2);

    void* r = a.allocate(4096);  // another class: a new block
    EXPECT_NE(r, q);
    s = a.stats();
    EXPECT_EQ(s.n_cuda_malloc, 2);
    EXPECT_EQ(s.bytes_in_use, 1024u + 4096u);
    EXPECT_EQ(s.peak_bytes_in_use, 1024u + 4096u);
    a.deallocate(q, 900);
    a.deallocate(r, 4096);
    EXPECT_EQ(a.stats().peak_bytes_in_use, 1024u + 4096u);
    EXPECT_EQ(a.stats().bytes_reserved, 1024u + 4096u);

    a.empty_cache();
    s = a.stats();
    EXPECT_EQ(s.bytes_reserved, 0u);
    EXPECT_EQ(s.n_cuda_free, 2);
    EXPECT_EQ(s.peak_bytes_reserved, 1024u + 4096u);
}

TEST_F(CachingAllocatorTest, SteadyStateTensorLoopMakesNoCudaMalloc) {
    CudaCachingAllocator a(/*device=*/0);
    for (int iter = 0; iter < 10; ++iter) {
        const Tensor x = Tensor::empty({4096, 7168}, DType::kBF16, a);
        const Tensor y = Tensor::empty({4096, 7168}, DType::kBF16, a);
        const Tensor z = Tensor::empty({17}, DType::kF32, a);
        EXPECT_EQ(x.device(), Device::kCUDA);
        EXPECT_TRUE(aligned(z.view().data));
    }
    const auto s = a.stats();
    EXPECT_EQ(s.n_cuda_malloc, 3);
    EXPECT_EQ(s.n_allocations, 30);
    EXPECT_EQ(s.n_cache_hits, 27);
    EXPECT_EQ(s.bytes_in_use, 0u);
}

// kernels::device_memory (the DSA logits budget's "memory left outside the static pool"): a block the caching
// allocator holds cached still counts as free, a live one does not; total is the device's memory.
TEST_F(CachingAllocatorTest, DeviceMemoryCountsCachedBlocksAsFree) {
    CudaCachingAllocator a(/*device=*/0);
    const kernels::Context ctx{.device = Device::kCUDA, .alloc = &a};
    const kernels::DeviceMemory before = kernels::device_memory(ctx);
    ASSERT_GT(before.total_bytes, 0);
    ASSERT_GT(before.free_bytes, 0);
    EXPECT_LE(before.free_bytes, before.total_bytes);
    constexpr size_t kBlock = size_t{512} << 20;
    void* p = a.allocate(kBlock);
    const kernels::DeviceMemory live = kernels::device_memory(ctx);
    EXPECT_EQ(live.total_bytes, before.total_bytes);
    // Other processes may allocate meanwhile: compare with a margin well below the block.
    EXPECT_LT(live.free_bytes, before.free_bytes - static_cast<int64_t>(kBlock) / 2);
    a.deallocate(p, kBlock);
    const kernels::DeviceMemory cached = kernels::device_memory(ctx);
    EXPECT_GT(cached.free_bytes, live.free_bytes + static_cast<int64_t>(kBlock) / 2);
    EXPECT_EQ(kernels::device_memory(kernels::Context{}).total_bytes, 0);  // CPU: not tracked
}

TEST_F(CachingAllocatorTest, TryAllocateReportsOutOfMemory) {
    CudaCachingAllocator a(/*device=*/0);
    const Result<void*> r = a.try_allocate(size_t{1} << 50);  // 1 PiB
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(a.stats().bytes_reserved, 0u);
    const Result<void*> ok = a.try_allocate(1 << 20);  // the device still works afterwards
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    a.deallocate(*ok, 1 << 20);
}

// Out of memory with blocks cached (a forward near the device's capacity): a cached block of a larger class, up to
// twice the request, serves it as it is; else only what the request needs is freed. Before, the whole cache was
// freed (every cudaFree waits for the device) and every block was asked for again in the next forward: Kimi K3's
// bf16 KDA layer at 16K on an 80 GB H100 took 117 ms instead of 78 (docs/perf/2026-12-05-s40.md).
TEST_F(CachingAllocatorTest, UnderPressureReusesOrFreesOnlyWhatARequestNeeds) {
    CudaCachingAllocator a(/*device=*/0);
    constexpr size_t kGiB = size_t{1} << 30;
    constexpr size_t kFill = size_t{64} << 20;
    // Fill the device with 1 GiB blocks, then 64 MiB ones, until cudaMalloc fails (nothing is cached yet).
    std::vector<void*> big, small;
    for (Result<void*> r = a.try_allocate(kGiB); r.ok(); r = a.try_allocate(kGiB)) big.push_back(*r);
    for (Result<void*> r = a.try_allocate(kFill); r.ok(); r = a.try_allocate(kFill)) small.push_back(*r);
    ASSERT_GE(big.size(), 4u);
    EXPECT_EQ(a.stats().n_cuda_free, 0);
    for (void* p : big) a.deallocate(p, kGiB);
    for (void* p : small) a.deallocate(p, kFill);
    const CudaCachingAllocator::Stats full = a.stats();
    ASSERT_EQ(full.bytes_in_use, 0u);

    // 600 MiB (class 640 MiB): none of its class cached and cudaMalloc fails (< 64 MiB free): a 1 GiB block serves.
    constexpr size_t kMid = size_t{600} << 20;
    void* p = a.allocate(kMid);
    CudaCachingAllocator::Stats s = a.stats();
    EXPECT_EQ(s.n_cuda_free, 0);
    EXPECT_EQ(s.n_oversized_hits, 1);
    EXPECT_EQ(s.bytes_in_use, kGiB);
    EXPECT_EQ(s.bytes_reserved, full.bytes_reserved);
    a.deallocate(p, kMid);  // its block's class is within twice the request's
    EXPECT_EQ(a.stats().bytes_in_use, 0u);

    // 1.5 GiB: no cached block is large enough. Two 1 GiB blocks are freed, not the whole cache, and then it fits.
    constexpr size_t kLarge = size_t{3} << 29;
    void* q = a.allocate(kLarge);
    s = a.stats();
    EXPECT_GE(s.n_cuda_free, 2);
    EXPECT_LE(s.n_cuda_free, 3);
    EXPECT_EQ(s.bytes_reserved, full.bytes_reserved - static_cast<size_t>(s.n_cuda_free) * kGiB + kLarge);
    a.deallocate(q, kLarge);
}

TEST_F(CachingAllocatorTest, ConcurrentAllocateAndFreeKeepStatsConsistent) {
    CudaCachingAllocator a(/*device=*/0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&a, t] {
            for (int i = 0; i < 200; ++i) {
                const size_t bytes = static_cast<size_t>(256 * (1 + (i + t) % 7));
                void* p = a.allocate(bytes);
                a.deallocate(p, bytes);
            }
        });
    }
    for (std::thread& th : threads) th.join();
    const auto s = a.stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.n_allocations, 800);
    EXPECT_LE(s.n_cuda_malloc, 4 * 7);
    EXPECT_EQ(s.n_cache_hits + s.n_cuda_malloc, 800);
}

TEST(WorkspaceTest, BumpsAlignedSlicesAndResets) {
    Workspace ws(cpu_allocator(), 4096);
    EXPECT_EQ(ws.device(), Device::kCPU);
    void* a = ws.allocate(10);
    void* b = ws.allocate(300);
    void* c = ws.allocate(0);
    EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256);
    EXPECT_EQ(static_cast<char*>(c) - static_cast<char*>(b), 512);
    EXPECT_TRUE(aligned(a));
    EXPECT_EQ(ws.used(), 1024u);
    EXPECT_EQ(ws.n_live(), 3);
    ws.deallocate(a, 10);
    ws.deallocate(b, 300);
    ws.deallocate(c, 0);
    ws.reset();
    EXPECT_EQ(ws.used(), 0u);
    EXPECT_EQ(ws.peak(), 1024u);
    EXPECT_EQ(ws.allocate(1), a);  // the same memory again after reset
    ws.deallocate(a, 1);
}

TEST(WorkspaceTest, TensorsReleaseTheirBlocks) {
    Workspace ws(cpu_allocator(), 1 << 20);
    {
        const Tensor x = Tensor::empty({64, 64}, DType::kF32, ws);
        const Tensor y = Tensor::empty({64}, DType::kBF16, ws);
        EXPECT_EQ(ws.n_live(), 2);
    }
    EXPECT_EQ(ws.n_live(), 0);
    ws.reset();
}

TEST(WorkspaceDeathTest, ExhaustionAndResetWithLiveBlocksAbort) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            Workspace ws(cpu_allocator(), 1024);
            (void)ws.allocate(2048);
        },
        "Workspace exhausted");
    EXPECT_DEATH(
        {
            Workspace ws(cpu_allocator(), 1024);
            (void)ws.allocate(16);
            ws.reset();
        },
        "still live");
}

using WorkspaceCudaTest = CudaTest;

TEST_F(WorkspaceCudaTest, ForwardLoopOverCachingAllocatorMakesOneCudaMalloc) {
    CudaCachingAllocator a(/*device=*/0);
    Workspace ws(a, 64 << 20);
    EXPECT_EQ(ws.device(), Device::kCUDA);
    for (int forward = 0; forward < 5; ++forward) {
        ws.reset();
        const Tensor h = Tensor::empty({1024, 7168}, DType::kBF16, ws);
        const Tensor g = Tensor::empty({1024, 2048}, DType::kBF16, ws);
        cuda::fill_bytes_async(h, 0, stream());
        cuda::fill_bytes_async(g, 0, stream());
    }
    stream().synchronize();
    EXPECT_EQ(a.stats().n_cuda_malloc, 1);
}

}  // namespace
}  // namespace penstock::test
