// Page pool and per-request page tables. A page holds kPageSize consecutive token positions of one request, for every
// layer of the stage (the per-layer caches index the same page ids). Host-side bookkeeping only: no device memory is
// touched here, so the scheduler can reason about pages without a GPU. Not thread-safe: owned by the scheduler thread.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace penstock::kv_cache {

inline constexpr int64_t kPageSize = 64;

inline int64_t pages_for_tokens(int64_t n_tokens) { return (n_tokens + kPageSize - 1) / kPageSize; }

// Page ids of one request, in position order: position p lives in pages[p / kPageSize], slot p % kPageSize.
struct PageTable {
    std::vector<int32_t> pages;
    int64_t capacity_tokens() const { return static_cast<int64_t>(pages.size()) * kPageSize; }
};

class PagePool final {
public:
    explicit PagePool(int64_t n_pages);

    int64_t n_pages() const { return n_pages_; }
    int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
    int64_t n_used() const { return n_pages_ - n_free(); }

    // Takes n pages, or returns ResourceExhausted (and takes none) when fewer are free.
    [[nodiscard]] Result<std::vector<int32_t>> allocate(int64_t n);
    // Returns pages to the pool. Freeing a page that is not allocated aborts (double free is a bug).
    void release(std::span<const int32_t> pages);

private:
    int64_t n_pages_;
    std::vector<int32_t> free_;  // stack of free ids
    std::vector<uint8_t> in_use_;
};

// Request id -> page table, with reservation against a shared PagePool.
class RequestTables final {
public:
    explicit RequestTables(PagePool* pool) : pool_(pool) {}

    // Grows request `id`'s table to hold at least n_tokens positions (creating it if new). All-or-nothing.
    [[nodiscard]] Status reserve(int64_t id, int64_t n_tokens);
    // Frees every page of request `id` (no-op for unknown ids).
    void release(int64_t id);
    // Removes request `id`'s table without freeing its pages and returns it (empty for unknown ids): the caller now
    // owns the pages and must give them back to the pool.
    PageTable detach(int64_t id);
    // The table of a known request (aborts for unknown ids).
    const PageTable& table(int64_t id) const;
    bool contains(int64_t id) const { return tables_.count(id) != 0; }
    int64_t n_requests() const { return static_cast<int64_t>(tables_.size()); }
    // Sum of pages owned by live requests; equals pool->n_used() when this is the pool's only client.
    int64_t pages_owned() const;

private:
    PagePool* pool_;
    std::unordered_map<int64_t, PageTable> tables_;
};

}  // namespace penstock::kv_cache
