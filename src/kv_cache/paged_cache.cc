// Paged row cache: host read/write paths (device kernels write pages directly through layer_view()).
#include "kv_cache/paged_cache.h"

#include <cstring>

#include "core/check.h"

namespace penstock::kv_cache {

PagedRowCache::PagedRowCache(int64_t n_pages, int64_t row_dim, int64_t layer_begin, int64_t layer_end, DType dtype,
                             Allocator& alloc)
    : n_pages_(n_pages), row_dim_(row_dim), layer_begin_(layer_begin), layer_end_(layer_end), dtype_(dtype) {
    PENSTOCK_CHECK_LE(layer_begin, layer_end);
    for (int64_t l = layer_begin; l < layer_end; ++l) {
        layers_.push_back(Tensor::empty({n_pages, kPageSize, row_dim}, dtype, alloc));
    }
}

const TensorView& PagedRowCache::layer_view(int64_t layer) const {
    PENSTOCK_CHECK(has_layer(layer)) << "layer " << layer << " not in [" << layer_begin_ << ", " << layer_end_ << ")";
    return layers_[static_cast<size_t>(layer - layer_begin_)].view();
}

std::vector<PagedBuffer> PagedRowCache::buffers() const {
    std::vector<PagedBuffer> out;
    const uint64_t page_bytes = static_cast<uint64_t>(row_bytes()) * kPageSize;
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Tensor& t = layers_[i];
        out.push_back({.layer = layer_begin_ + static_cast<int64_t>(i),
                       .base = t.view().data,
                       .page_bytes = page_bytes,
                       .page_stride = page_bytes,
                       .n_pages = n_pages_,
                       .on_device = t.view().device != Device::kCPU});
    }
    return out;
}

float* PagedRowCache::row_ptr(int64_t layer, const PageTable& table, int64_t pos) const {
    PENSTOCK_CHECK(pos >= 0 && pos < table.capacity_tokens())
        << "position " << pos << " outside the request's " << table.capacity_tokens() << " reserved tokens";
    const int32_t page = table.pages[static_cast<size_t>(pos / kPageSize)];
    PENSTOCK_CHECK(page >= 0 && page < n_pages_) << "page id " << page;
    const TensorView& v = layer_view(layer);
    return v.ptr<float>() + (static_cast<int64_t>(page) * kPageSize + pos % kPageSize) * row_dim_;
}

void PagedRowCache::write(int64_t layer, const PageTable& table, int64_t pos0, const TensorView& rows) {
    PENSTOCK_CHECK(dtype_ == DType::kF32 && rows.dtype == DType::kF32) << "host row cache path is f32";
    PENSTOCK_CHECK_EQ(rows.ndim, 2);
    PENSTOCK_CHECK_EQ(rows.size(1), row_dim_);
    PENSTOCK_CHECK_EQ(rows.stride(1), 1);
    for (int64_t i = 0; i < rows.size(0); ++i) {
        std::memcpy(row_ptr(layer, table, pos0 + i), rows.ptr<const float>() + i * rows.stride(0),
                    static_cast<size_t>(row_dim_) * sizeof(float));
    }
}

void PagedRowCache::gather(int64_t layer, const PageTable& table, int64_t pos0, const TensorView& out) const {
    PENSTOCK_CHECK(dtype_ == DType::kF32 && out.dtype == DType::kF32) << "host row cache path is f32";
    PENSTOCK_CHECK_EQ(out.ndim, 2);
    PENSTOCK_CHECK_EQ(out.size(1), row_dim_);
    PENSTOCK_CHECK(out.is_contiguous());
    for (int64_t i = 0; i < out.size(0); ++i) {
        std::memcpy(out.ptr<float>() + i * row_dim_, row_ptr(layer, table, pos0 + i),
                    static_cast<size_t>(row_dim_) * sizeof(float));
    }
}

}  // namespace penstock::kv_cache
