// Reference data-movement ops: copy (strided, broadcast, f32<->bf16), fill, gather_rows, grouped_gemm, paged
// write/gather. Plain loops; grouped_gemm runs one reference gemm per group.
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/ops_kda.h"
#include "kernels/random_hash.h"
#include "kernels/ref/ref_kda.h"
#include "kernels/ref/ref_ops.h"

namespace penstock::ref {

namespace {

float load(const TensorView& v, int64_t offset) {
    switch (v.dtype) {
        case DType::kF32:
            return static_cast<const float*>(v.data)[offset];
        case DType::kBF16:
            return bf16_to_float(static_cast<const uint16_t*>(v.data)[offset]);
        case DType::kI32:
            return static_cast<float>(static_cast<const int32_t*>(v.data)[offset]);
        default:
            PENSTOCK_CHECK(false) << "unsupported dtype " << dtype_name(v.dtype);
            return 0.0f;
    }
}

void store(const TensorView& v, int64_t offset, float x) {
    switch (v.dtype) {
        case DType::kF32:
            static_cast<float*>(v.data)[offset] = x;
            return;
        case DType::kBF16:
            static_cast<uint16_t*>(v.data)[offset] = float_to_bf16(x);
            return;
        case DType::kI32:
            static_cast<int32_t*>(v.data)[offset] = static_cast<int32_t>(x);
            return;
        default:
            PENSTOCK_CHECK(false) << "unsupported dtype " << dtype_name(v.dtype);
    }
}

// Calls fn(out_offset, in_offset) for every index of `shape` (row major).
template <class Fn>
void for_each_index(const TensorView& out, const TensorView* in, Fn fn) {
    const int nd = out.ndim;
    std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
    const int64_t n = out.numel();
    for (int64_t flat = 0; flat < n; ++flat) {
        int64_t oo = 0, io = 0;
        for (int d = 0; d < nd; ++d) {
            oo += idx[static_cast<size_t>(d)] * out.stride(d);
            if (in) io += idx[static_cast<size_t>(d)] * in->stride(d);
        }
        fn(oo, io);
        for (int d = nd - 1; d >= 0; --d) {
            if (++idx[static_cast<size_t>(d)] < out.size(d)) break;
            idx[static_cast<size_t>(d)] = 0;
        }
    }
}

void check_paged(const TensorView& cache, const TensorView& rows, const TensorView& page_table,
                 const TensorView& cu_rows, const TensorView& pos0) {
    PENSTOCK_CHECK_EQ(cache.ndim, 3);
    PENSTOCK_CHECK(cache.is_contiguous());
    PENSTOCK_CHECK_EQ(rows.ndim, 2);
    PENSTOCK_CHECK_EQ(rows.size(1), cache.size(2));
    PENSTOCK_CHECK_EQ(rows.stride(1), 1);
    PENSTOCK_CHECK(rows.dtype == cache.dtype);
    PENSTOCK_CHECK_EQ(page_table.ndim, 2);
    PENSTOCK_CHECK(page_table.dtype == DType::kI32 && cu_rows.dtype == DType::kI32 && pos0.dtype == DType::kI32);
    PENSTOCK_CHECK_EQ(cu_rows.numel(), page_table.size(0) + 1);
    PENSTOCK_CHECK_EQ(pos0.numel(), page_table.size(0));
    PENSTOCK_CHECK_EQ(cu_rows.ptr<const int32_t>()[page_table.size(0)], rows.size(0));
}

// Byte address of position `pos` of sequence s in the cache.
char* paged_row(const TensorView& cache, const TensorView& page_table, int64_t s, int64_t pos) {
    const int64_t page_size = cache.size(1);
    const int64_t slot = pos / page_size;
    PENSTOCK_CHECK(pos >= 0 && slot < page_table.size(1)) << "position " << pos << " outside the page table";
    const int32_t page = page_table.ptr<const int32_t>()[s * page_table.stride(0) + slot];
    PENSTOCK_CHECK(page >= 0 && page < cache.size(0)) << "page id " << page;
    const size_t row_bytes = dtype_bytes(cache.dtype, static_cast<size_t>(cache.size(2)));
    return static_cast<char*>(cache.data) + (page * page_size + pos % page_size) * static_cast<int64_t>(row_bytes);
}

}  // namespace

void transfer(const kernels::TransferParams& p, ThreadPool* /*pool*/) {
    PENSTOCK_CHECK(p.out.device == Device::kCPU && p.in.device == Device::kCPU) << "CPU transfer of device memory";
    PENSTOCK_CHECK(p.out.is_contiguous() && p.in.is_contiguous());
    PENSTOCK_CHECK_EQ(p.out.nbytes(), p.in.nbytes());
    if (p.out.nbytes() > 0) std::memcpy(p.out.data, p.in.data, p.out.nbytes());
}

void copy(const kernels::CopyParams& p, ThreadPool* /*pool*/) {
    PENSTOCK_CHECK_EQ(p.out.ndim, p.in.ndim);
    for (int d = 0; d < p.out.ndim; ++d) PENSTOCK_CHECK_EQ(p.out.size(d), p.in.size(d)) << "dim " << d;
    for_each_index(p.out, &p.in, [&](int64_t oo, int64_t io) { store(p.out, oo, load(p.in, io)); });
}

void fill(const kernels::FillParams& p, ThreadPool* /*pool*/) {
    for_each_index(p.out, nullptr, [&](int64_t oo, int64_t) { store(p.out, oo, p.value); });
}

void fill_random(const kernels::FillRandomParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK(p.out.is_contiguous()) << "fill_random: " << p.out.shape_string() << " is not contiguous";
    PENSTOCK_CHECK(p.out.dtype == DType::kF32 || p.out.dtype == DType::kBF16) << "fill_random: f32 or bf16";
    const bool bf16 = p.out.dtype == DType::kBF16;
    parallel_for(pool, p.out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float v = kernels::random_value(p.seed, static_cast<uint64_t>(i), p.mean, p.stddev);
            if (bf16) {
                static_cast<uint16_t*>(p.out.data)[i] = float_to_bf16(v);
            } else {
                static_cast<float*>(p.out.data)[i] = v;
            }
        }
    });
}

void gather_rows(const kernels::GatherRowsParams& p, ThreadPool* /*pool*/) {
    PENSTOCK_CHECK_EQ(p.out.ndim, 2);
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    PENSTOCK_CHECK_EQ(p.out.size(1), p.in.size(1));
    PENSTOCK_CHECK_EQ(p.index.numel(), p.out.size(0));
    PENSTOCK_CHECK(p.out.dtype == p.in.dtype);
    PENSTOCK_CHECK(p.out.stride(1) == 1 && p.in.stride(1) == 1);
    const size_t row_bytes = dtype_bytes(p.in.dtype, static_cast<size_t>(p.in.size(1)));
    const size_t elem = dtype_bytes(p.in.dtype, 1);
    for (int64_t i = 0; i < p.out.size(0); ++i) {
        const int32_t src = p.index.ptr<const int32_t>()[i];
        PENSTOCK_CHECK(src >= 0 && src < p.in.size(0)) << "gather index " << src;
        std::memcpy(static_cast<char*>(p.out.data) + i * p.out.stride(0) * static_cast<int64_t>(elem),
                    static_cast<const char*>(p.in.data) + src * p.in.stride(0) * static_cast<int64_t>(elem), row_bytes);
    }
}

void grouped_gemm(const kernels::GroupedGemmParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.b.ndim, 3);
    PENSTOCK_CHECK(p.b.is_contiguous());
    const int64_t n_groups = p.b.size(0);
    PENSTOCK_CHECK_EQ(p.offsets.numel(), n_groups + 1);
    const int32_t* off = p.offsets.ptr<const int32_t>();
    PENSTOCK_CHECK_EQ(off[0], 0);
    PENSTOCK_CHECK_LE(static_cast<int64_t>(off[n_groups]), p.a.size(0));
    for (int64_t g = 0; g < n_groups; ++g) {
        PENSTOCK_CHECK_LE(off[g], off[g + 1]);
        if (off[g] == off[g + 1]) continue;
        gemm({.out = p.out.slice(0, off[g], off[g + 1]),
              .a = p.a.slice(0, off[g], off[g + 1]),
              .b = p.b.select(0, g),
              .trans_b = true},
             pool);
    }
}

void paged_write(const kernels::PagedWriteParams& p, ThreadPool* /*pool*/) {
    check_paged(p.cache, p.rows, p.page_table, p.cu_rows, p.pos0);
    const size_t row_bytes = dtype_bytes(p.cache.dtype, static_cast<size_t>(p.cache.size(2)));
    const int64_t elem = static_cast<int64_t>(dtype_bytes(p.rows.dtype, 1));
    const int32_t* cu = p.cu_rows.ptr<const int32_t>();
    for (int64_t s = 0; s < p.page_table.size(0); ++s) {
        for (int64_t r = cu[s]; r < cu[s + 1]; ++r) {
            const int64_t pos = p.pos0.ptr<const int32_t>()[s] + (r - cu[s]);
            std::memcpy(paged_row(p.cache, p.page_table, s, pos),
                        static_cast<const char*>(p.rows.data) + r * p.rows.stride(0) * elem, row_bytes);
        }
    }
}

void paged_gather(const kernels::PagedGatherParams& p, ThreadPool* /*pool*/) {
    check_paged(p.cache, p.out, p.page_table, p.cu_rows, p.pos0);
    PENSTOCK_CHECK(p.out.is_contiguous());
    const size_t row_bytes = dtype_bytes(p.cache.dtype, static_cast<size_t>(p.cache.size(2)));
    const int32_t* cu = p.cu_rows.ptr<const int32_t>();
    for (int64_t s = 0; s < p.page_table.size(0); ++s) {
        for (int64_t r = cu[s]; r < cu[s + 1]; ++r) {
            const int64_t pos = p.pos0.ptr<const int32_t>()[s] + (r - cu[s]);
            std::memcpy(static_cast<char*>(p.out.data) + r * static_cast<int64_t>(row_bytes),
                        paged_row(p.cache, p.page_table, s, pos), row_bytes);
        }
    }
}

void grouped_gemm_glu(const kernels::GroupedGluGemmParams& p, ThreadPool* pool) {
    const char* op = "grouped_gemm_glu";
    PENSTOCK_CHECK(p.b.ndim == 3 && p.b.size(1) % 2 == 0) << op << ": b [n_groups, 2 I, k], got " << p.b.shape_string();
    PENSTOCK_CHECK(p.out.ndim == 2 && p.a.ndim == 2 && p.out.size(0) == p.a.size(0) && 2 * p.out.size(1) == p.b.size(1))
        << op << ": out " << p.out.shape_string() << ", a " << p.a.shape_string() << ", b " << p.b.shape_string();
    const int64_t n_rows = p.a.size(0), inter = p.out.size(1);
    // [gate ; up] in out's dtype in the caller's buffer, then the activation.
    PENSTOCK_CHECK(p.gate_up.ndim == 2 && p.gate_up.size(0) == n_rows && p.gate_up.size(1) == 2 * inter &&
                   p.gate_up.dtype == p.out.dtype)
        << op << ": gate_up scratch " << p.gate_up.shape_string();
    grouped_gemm({.out = p.gate_up, .a = p.a, .b = p.b, .offsets = p.offsets}, pool);
    const TensorView gate = p.gate_up.slice(1, 0, inter), up = p.gate_up.slice(1, inter, 2 * inter);
    switch (p.act) {
        case kernels::GluKind::kSilu:
            silu_mul({.out = p.out, .gate = gate, .up = up}, pool);
            return;
        case kernels::GluKind::kSitu:
            situ_mul({.out = p.out, .gate = gate, .up = up, .beta = p.situ_beta, .linear_beta = p.situ_linear_beta},
                     pool);
            return;
    }
}

}  // namespace penstock::ref
