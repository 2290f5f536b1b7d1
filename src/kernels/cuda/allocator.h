// Device memory for the CUDA backend. CudaCachingAllocator: per-device cache of freed cudaMalloc blocks in size
// classes, so steady-state serving makes no cudaMalloc. Workspace: a bump allocator over one preallocated buffer,
// reset at the start of every forward, so a forward makes no allocation call at all (docs/design/cuda_backend.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace penstock::cuda {

// Every block the CUDA allocators hand out starts on a 256-byte boundary (cudaMalloc's own guarantee; enough for
// 16-byte vector loads, TMA's 128-byte tiles and cuBLASLt's 256-byte preference).
inline constexpr size_t kDeviceAlignment = 256;

// Caching device allocator bound to one device. Freed blocks go to a free list per size class and are handed out
// again for any request of the same class; cudaFree happens in empty_cache(), the destructor, and when cudaMalloc runs
// out of memory (see allocate()).
// Size classes: requests round up to 256 bytes, then to a quarter of their power of two (waste <= 25%, e.g. 5000
// -> 5120, 1.1 MiB -> 1.25 MiB). Thread-safe (one mutex). Not stream-aware: a freed block is reused at once, which
// is safe when every kernel touching memory from this allocator runs on one stream (the stage's compute stream) or
// the caller has synchronised; cross-stream users must record/wait an Event before freeing.
class CudaCachingAllocator final : public Allocator {
public:
    struct Stats {
        size_t bytes_in_use = 0;    // size-class bytes of live blocks
        size_t bytes_reserved = 0;  // bytes held from cudaMalloc: live + cached
        size_t peak_bytes_in_use = 0;
        size_t peak_bytes_reserved = 0;
        int64_t n_cuda_malloc = 0;  // cudaMalloc calls that succeeded
        int64_t n_cuda_free = 0;
        int64_t n_allocations = 0;     // allocate() / try_allocate() calls that succeeded
        int64_t n_cache_hits = 0;      // of which served from the cache
        int64_t n_oversized_hits = 0;  // of those, by a block of a larger class (only when cudaMalloc failed)
    };

    // Binds to `device`; allocates nothing until the first request.
    explicit CudaCachingAllocator(int device);
    // Frees the cached blocks. Blocks still live are reported and leaked (their Tensors outlived the allocator).
    ~CudaCachingAllocator() override;
    CudaCachingAllocator(const CudaCachingAllocator&) = delete;
    CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

    // A block of at least `bytes` (0 allowed), 256-byte aligned, uninitialised. When cudaMalloc fails with blocks
    // cached, it hands out a cached block of up to twice the class, else frees cached blocks (the smallest larger
    // one, then the largest first) until cudaMalloc succeeds: not the whole cache, since every cudaFree waits for the
    // device and the blocks are asked for again in the next forward. Then it aborts with the stats (use try_allocate
    // where running out is expected).
    void* allocate(size_t bytes) override;
    // As allocate(), but returns kResourceExhausted instead of aborting when the device is out of memory.
    [[nodiscard]] Result<void*> try_allocate(size_t bytes);
    // Returns a block to the cache. `bytes` must be what the block was requested with (checked by size class: the
    // block's class is the request's, or up to twice it after an oversized hit).
    void deallocate(void* p, size_t bytes) override;
    Device device() const override { return Device::kCUDA; }
    int device_index() const override { return device_; }

    // cudaFree's every cached (not live) block.
    void empty_cache();
    Stats stats() const;

    // The size class a request of `bytes` is served from (exposed for tests).
    static size_t size_class(size_t bytes);

private:
    void* allocate_locked(size_t cls);  // nullptr when cudaMalloc fails with nothing (useful) left cached
    void* take_cached_locked(size_t cls, size_t block_cls);  // a cached block of block_cls for a request of cls
    void free_cached_locked(size_t block_cls);               // cudaFree one cached block of that class
    void empty_cache_locked();

    const int device_;
    mutable std::mutex mu_;
    std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
    std::unordered_map<void*, size_t> live_;               // block -> size class
    Stats stats_;
};

// Bump allocator over one buffer taken from `backing` at construction: allocate() returns 256-byte aligned slices in
// order; deallocate() only counts; reset() makes the whole buffer available again. Meant for per-forward scratch
// (activations, kernel workspaces): the runtime sizes it once from the largest BatchPlan and resets it at the start
// of every forward. Every block must be released (its Tensor destroyed) before reset(), which checks this.
// Running past the capacity is a sizing bug and aborts. Owned by one thread (the stage worker); not thread-safe.
// Does no CUDA call itself, so it also works over cpu_allocator() (tests).
class Workspace final : public Allocator {
public:
    Workspace(Allocator& backing, size_t capacity_bytes);
    ~Workspace() override;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    void* allocate(size_t bytes) override;
    void deallocate(void* p, size_t bytes) override;
    Device device() const override { return backing_.device(); }
    int device_index() const override { return backing_.device_index(); }

    // Rewinds to the start of the buffer. Aborts if a block is still live.
    void reset();
    size_t capacity() const { return capacity_; }
    size_t used() const { return offset_; }
    // High-water mark of used() since construction (to size the capacity).
    size_t peak() const { return peak_; }
    int64_t n_live() const { return n_live_; }

private:
    Allocator& backing_;
    const size_t capacity_;
    void* raw_ = nullptr;  // from backing_: raw_bytes_ long, base_ its first 256-byte aligned address
    size_t raw_bytes_ = 0;
    char* base_ = nullptr;
    size_t offset_ = 0;
    size_t peak_ = 0;
    int64_t n_live_ = 0;
};

}  // namespace penstock::cuda
