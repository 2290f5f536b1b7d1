// Page pool bookkeeping.
#include "kv_cache/page_pool.h"

#include <string>

#include "core/check.h"

namespace penstock::kv_cache {

PagePool::PagePool(int64_t n_pages) : n_pages_(n_pages), in_use_(static_cast<size_t>(n_pages), 0) {
    PENSTOCK_CHECK_GE(n_pages, 0);
    free_.reserve(static_cast<size_t>(n_pages));
    for (int64_t i = n_pages - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

Result<std::vector<int32_t>> PagePool::allocate(int64_t n) {
    PENSTOCK_CHECK_GE(n, 0);
    if (n > n_free()) {
        return resource_exhausted("KV page pool: " + std::to_string(n) + " pages requested, " +
                                  std::to_string(n_free()) + " of " + std::to_string(n_pages_) + " free");
    }
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const int32_t id = free_.back();
        free_.pop_back();
        in_use_[static_cast<size_t>(id)] = 1;
        out.push_back(id);
    }
    return out;
}

void PagePool::release(std::span<const int32_t> pages) {
    for (int32_t id : pages) {
        PENSTOCK_CHECK(id >= 0 && id < n_pages_) << "page id " << id;
        PENSTOCK_CHECK_EQ(in_use_[static_cast<size_t>(id)], 1) << "double free of page " << id;
        in_use_[static_cast<size_t>(id)] = 0;
        free_.push_back(id);
    }
}

Status RequestTables::reserve(int64_t id, int64_t n_tokens) {
    PageTable& t = tables_[id];
    const int64_t need = pages_for_tokens(n_tokens) - static_cast<int64_t>(t.pages.size());
    if (need <= 0) return ok_status();
    auto pages = pool_->allocate(need);
    if (!pages.ok()) {
        if (t.pages.empty()) tables_.erase(id);
        return pages.status();
    }
    t.pages.insert(t.pages.end(), pages->begin(), pages->end());
    return ok_status();
}

void RequestTables::release(int64_t id) {
    auto it = tables_.find(id);
    if (it == tables_.end()) return;
    pool_->release(it->second.pages);
    tables_.erase(it);
}

PageTable RequestTables::detach(int64_t id) {
    auto it = tables_.find(id);
    if (it == tables_.end()) return {};
    PageTable t = std::move(it->second);
    tables_.erase(it);
    return t;
}

const PageTable& RequestTables::table(int64_t id) const {
    auto it = tables_.find(id);
    PENSTOCK_CHECK(it != tables_.end()) << "unknown request " << id;
    return it->second;
}

int64_t RequestTables::pages_owned() const {
    int64_t n = 0;
    for (const auto& [id, t] : tables_) n += static_cast<int64_t>(t.pages.size());
    return n;
}

}  // namespace penstock::kv_cache
