// CudaCachingAllocator (size-class free lists over cudaMalloc) and Workspace (bump allocator).
#include "kernels/cuda/allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <string>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"

namespace penstock::cuda {

namespace {

constexpr size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

}  // namespace

size_t CudaCachingAllocator::size_class(size_t bytes) {
    const size_t n = round_up(std::max<size_t>(bytes, 1), kDeviceAlignment);
    // A quarter of the largest power of two <= n, at least the alignment: four classes per octave.
    const size_t step = std::max(kDeviceAlignment, std::bit_floor(n) / 4);
    return round_up(n, step);
}

CudaCachingAllocator::CudaCachingAllocator(int device) : device_(device) {
    // Stream-ordered scratch (cudaMallocAsync: moe_align / moe_unpermute) comes from the device's default memory pool,
    // whose default release threshold (0) hands its memory back to the driver at every synchronisation, so that the
    // next forward's first cudaMallocAsync maps fresh pages. Keep it: the pool then only grows to the largest
    // scratch in flight.
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        PENSTOCK_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    } else {
        (void)cudaGetLastError();  // no stream-ordered allocator on this device: nothing to keep
    }
}

CudaCachingAllocator::~CudaCachingAllocator() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!live_.empty()) {
        std::fprintf(stderr, "CudaCachingAllocator(device %d): %zu blocks (%zu bytes) still live at destruction\n",
                     device_, live_.size(), stats_.bytes_in_use);
    }
    empty_cache_locked();
}

void* CudaCachingAllocator::take_cached_locked(size_t cls, size_t block_cls) {
    auto it = free_.find(block_cls);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    stats_.n_allocations++;
    stats_.n_cache_hits++;
    if (block_cls != cls) stats_.n_oversized_hits++;
    live_.emplace(p, block_cls);
    stats_.bytes_in_use += block_cls;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return p;
}

void CudaCachingAllocator::free_cached_locked(size_t block_cls) {
    auto it = free_.find(block_cls);
    PENSTOCK_CHECK(it != free_.end() && !it->second.empty());
    PENSTOCK_CUDA_CHECK(cudaFree(it->second.back()));
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    stats_.n_cuda_free++;
    stats_.bytes_reserved -= block_cls;
}

void* CudaCachingAllocator::allocate_locked(size_t cls) {
    if (void* p = take_cached_locked(cls, cls)) return p;
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, cls);
    if (err == cudaErrorMemoryAllocation && !free_.empty()) {
        // Out of memory with blocks cached. Every cudaFree waits for the device, and a block freed now is likely
        // asked for again later in the same forward, so give back as little as serves this request:
        (void)cudaGetLastError();
        // 1. a cached block of a larger class, up to twice this one, is handed out as it is;
        size_t larger = 0;  // the smallest cached class above cls
        for (const auto& [c, blocks] : free_) {
            if (c > cls && !blocks.empty() && (larger == 0 || c < larger)) larger = c;
        }
        if (larger != 0 && larger <= 2 * cls) return take_cached_locked(cls, larger);
        // 2. else that one larger block is freed, then blocks from the largest class down, retrying once the freed
        //    bytes cover the request and after every block from then on (fragmentation).
        size_t freed = 0;
        if (larger != 0) {
            free_cached_locked(larger);
            freed += larger;
            err = cudaMalloc(&p, cls);
        }
        while (err == cudaErrorMemoryAllocation && !free_.empty()) {
            (void)cudaGetLastError();
            size_t largest = 0;
            for (const auto& [c, blocks] : free_) largest = std::max(largest, c);
            free_cached_locked(largest);
            freed += largest;
            if (freed >= cls || free_.empty()) err = cudaMalloc(&p, cls);
        }
    }
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return nullptr;
    }
    PENSTOCK_CUDA_CHECK(err);
    stats_.n_cuda_malloc++;
    stats_.n_allocations++;
    live_.emplace(p, cls);
    stats_.bytes_in_use += cls;
    stats_.bytes_reserved += cls;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
    return p;
}

void* CudaCachingAllocator::allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    void* p = allocate_locked(size_class(bytes));
    PENSTOCK_CHECK(p != nullptr) << "CUDA device " << device_ << " out of memory allocating " << bytes
                                 << " bytes (class " << size_class(bytes) << "); in use " << stats_.bytes_in_use
                                 << ", reserved " << stats_.bytes_reserved;
    return p;
}

Result<void*> CudaCachingAllocator::try_allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    void* p = allocate_locked(size_class(bytes));
    if (p == nullptr) {
        return resource_exhausted("CUDA device " + std::to_string(device_) + " out of memory allocating " +
                                  std::to_string(bytes) + " bytes; in use " + std::to_string(stats_.bytes_in_use));
    }
    return p;
}

void CudaCachingAllocator::deallocate(void* p, size_t bytes) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    PENSTOCK_CHECK(it != live_.end()) << "CudaCachingAllocator: freeing " << p
                                      << ", which is not a live block of device " << device_;
    // The block's class is the request's, or up to twice it when a larger cached block served the request.
    PENSTOCK_CHECK(size_class(bytes) <= it->second && it->second <= 2 * size_class(bytes))
        << "freeing " << p << " with a different size than allocated";
    const size_t cls = it->second;
    live_.erase(it);
    free_[cls].push_back(p);
    stats_.bytes_in_use -= cls;
}

void CudaCachingAllocator::empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    empty_cache_locked();
}

void CudaCachingAllocator::empty_cache_locked() {
    if (free_.empty()) return;
    DeviceGuard guard(device_);
    for (auto& [cls, blocks] : free_) {
        for (void* p : blocks) {
            PENSTOCK_CUDA_CHECK(cudaFree(p));
            stats_.n_cuda_free++;
            stats_.bytes_reserved -= cls;
        }
    }
    free_.clear();
}

CudaCachingAllocator::Stats CudaCachingAllocator::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
}

kernels::DeviceMemory device_memory(Allocator* alloc) {
    int dev = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    if (alloc != nullptr && alloc->device() == Device::kCUDA) dev = alloc->device_index();
    size_t free_bytes = 0, total_bytes = 0;
    {
        const DeviceGuard guard(dev);
        PENSTOCK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    }
    size_t cached = 0;
    if (const auto* caching = dynamic_cast<const CudaCachingAllocator*>(alloc)) {
        const CudaCachingAllocator::Stats st = caching->stats();
        cached = st.bytes_reserved - st.bytes_in_use;
    }
    return {.free_bytes = static_cast<int64_t>(free_bytes + cached), .total_bytes = static_cast<int64_t>(total_bytes)};
}

Workspace::Workspace(Allocator& backing, size_t capacity_bytes)
    : backing_(backing), capacity_(round_up(capacity_bytes, kDeviceAlignment)) {
    raw_bytes_ = capacity_;
    raw_ = backing_.allocate(raw_bytes_);
    if (reinterpret_cast<uintptr_t>(raw_) % kDeviceAlignment != 0) {
        // A backing allocator with a weaker alignment (the host's is 64): over-allocate and align the base.
        backing_.deallocate(raw_, raw_bytes_);
        raw_bytes_ = capacity_ + kDeviceAlignment;
        raw_ = backing_.allocate(raw_bytes_);
    }
    base_ = static_cast<char*>(raw_) +
            (kDeviceAlignment - reinterpret_cast<uintptr_t>(raw_) % kDeviceAlignment) % kDeviceAlignment;
}

Workspace::~Workspace() {
    if (n_live_ != 0) {
        std::fprintf(stderr, "Workspace: %lld blocks still live at destruction\n", static_cast<long long>(n_live_));
    }
    backing_.deallocate(raw_, raw_bytes_);
}

void* Workspace::allocate(size_t bytes) {
    const size_t size = round_up(std::max<size_t>(bytes, 1), kDeviceAlignment);
    PENSTOCK_CHECK_LE(size, capacity_ - offset_)
        << "Workspace exhausted: " << bytes << " bytes requested with " << offset_ << " of " << capacity_ << " in use";
    void* p = base_ + offset_;
    offset_ += size;
    peak_ = std::max(peak_, offset_);
    n_live_++;
    return p;
}

void Workspace::deallocate(void* p, size_t bytes) {
    if (p == nullptr) return;
    PENSTOCK_CHECK(static_cast<char*>(p) >= base_ && static_cast<char*>(p) < base_ + capacity_)
        << "Workspace: freeing " << p << ", which is not from this workspace";
    PENSTOCK_CHECK_GT(n_live_, 0) << "Workspace: more frees than allocations";
    n_live_--;
}

void Workspace::reset() {
    PENSTOCK_CHECK_EQ(n_live_, 0) << "Workspace::reset() with blocks still live (a tensor outlived its forward)";
    offset_ = 0;
}

}  // namespace penstock::cuda
