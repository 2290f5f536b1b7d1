// A paged per-layer row cache: for each layer of a stage's range, [n_pages, kPageSize, row_dim] rows. Used for the
// MLA latent (row = kv_lora_rank + qk_rope_head_dim: the normalised latent c followed by the roped shared k_pe) and,
// in later issues, the DSA index-K cache. Rows are written and read through a request's PageTable.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kv_cache/page_pool.h"

namespace penstock::kv_cache {

// One paged buffer as raw memory (for disaggregated KV transfer): page p's bytes are [base + p * page_stride,
// + page_bytes), on the host or on a device. `layer` and `kind` say what it holds, so that a pipeline stage holding
// some of the layers finds its buffers' counterparts at a peer holding others (or all).
enum class BufferKind : uint8_t {
    kLatent = 0,        // MLA latent rows (c_kv then k_pe)
    kIndexKeys = 1,     // DSA index keys (f32 or FP8)
    kIndexScales = 2,   // DSA FP8 index keys' scales
    kKdaRecurrent = 3,  // KDA recurrent state (per slot)
    kKdaConv = 4,       // KDA short-convolution state (per slot)
};
struct PagedBuffer {
    int64_t layer = -1;
    BufferKind kind = BufferKind::kLatent;
    void* base = nullptr;
    uint64_t page_bytes = 0;
    uint64_t page_stride = 0;
    int64_t n_pages = 0;
    bool on_device = false;
};

class PagedRowCache final {
public:
    // Layers [layer_begin, layer_end) each get n_pages * kPageSize rows of row_dim elements of dtype (host memory,
    // or `alloc`'s device).
    PagedRowCache(int64_t n_pages, int64_t row_dim, int64_t layer_begin, int64_t layer_end, DType dtype,
                  Allocator& alloc = cpu_allocator());

    int64_t row_dim() const { return row_dim_; }
    int64_t n_pages() const { return n_pages_; }
    bool has_layer(int64_t layer) const { return layer >= layer_begin_ && layer < layer_end_; }
    // [n_pages, kPageSize, row_dim] storage of one layer.
    const TensorView& layer_view(int64_t layer) const;
    // Bytes per token per layer.
    size_t row_bytes() const { return dtype_bytes(dtype_, static_cast<size_t>(row_dim_)); }
    // Each layer's storage as a paged buffer, in layer order.
    std::vector<PagedBuffer> buffers() const;

    // Host caches: rows[i] -> position pos0 + i of the request owning `table`. rows: [n, row_dim] f32 (strided rows
    // ok).
    void write(int64_t layer, const PageTable& table, int64_t pos0, const TensorView& rows);
    // Host caches: out[i] = row at position pos0 + i. out: [n, row_dim] f32 contiguous.
    void gather(int64_t layer, const PageTable& table, int64_t pos0, const TensorView& out) const;

private:
    float* row_ptr(int64_t layer, const PageTable& table, int64_t pos) const;

    int64_t n_pages_;
    int64_t row_dim_;
    int64_t layer_begin_;
    int64_t layer_end_;
    DType dtype_;
    std::vector<Tensor> layers_;
};

}  // namespace penstock::kv_cache
