// Data movement on the GPU: copy (strided, broadcast, f32 <-> bf16), fill, gather_rows, paged_write, paged_gather and
// embedding. Same contracts as kernels/ref/data_movement.cc and ref/embedding.cc. Row ops move bytes (16-byte
// accesses when aligned), so they take any dtype; index tensors are i32 on the device and are not validated there
// (an out-of-range index skips the row instead of aborting: the host cannot see device data without a sync).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/random_hash.h"

namespace penstock::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRowCopyUnroll = 4;        // words in flight per thread in copy_rows_kernel
constexpr int64_t kCopy2dMinBytes = 1024;  // shorter dense rows: copy_rows_kernel instead of cudaMemcpy2DAsync

template <class TO, class TI>
__global__ void copy_kernel(TO* out, const TI* in, StridedDesc od, StridedDesc id, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        out[strided_offset(od, i)] = from_f32<TO>(to_f32(in[strided_offset(id, i)]));
    }
}

// Same-dtype copy of any element size: moves E-byte words.
template <class E>
__global__ void copy_raw_kernel(E* out, const E* in, StridedDesc od, StridedDesc id, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        out[strided_offset(od, i)] = in[strided_offset(id, i)];
    }
}

// Copies whose last dim is contiguous on both sides, by rows: up to kMaxDims - 1 outer dims (byte strides; a 0 stride
// broadcasts), `words` W-byte words per row. Thread per word; the outer index is decomposed once per word in 32-bit
// arithmetic (the launcher guarantees every count fits).
struct RowCopyDesc {
    int n_outer = 0;
    uint32_t shape[kMaxDims] = {};
    int64_t ostride[kMaxDims] = {};
    int64_t istride[kMaxDims] = {};
    uint32_t words = 0;
};

// Output and input offsets of word idx (kUnit: the size of a word in the strides' unit: sizeof(W) for byte strides, 1
// for element strides).
template <int64_t kUnit>
__device__ __forceinline__ void row_copy_offsets(const RowCopyDesc& d, uint32_t idx, int64_t& oo, int64_t& io) {
    uint32_t row = idx / d.words;
    const uint32_t col = idx - row * d.words;
    oo = static_cast<int64_t>(col) * kUnit;
    io = oo;
    for (int i = d.n_outer - 1; i >= 0; --i) {
        const uint32_t q = row / d.shape[i];
        const uint32_t r = row - q * d.shape[i];
        oo += r * d.ostride[i];
        io += r * d.istride[i];
        row = q;
    }
}

// kUnroll words per thread and iteration, all loaded before any is stored (the views may overlap only when they are
// identical, which the launcher returns early on), so a thread keeps kUnroll independent loads in flight; 1 is the
// kernel before docs/perf/2026-12-01-memory-bound.md (PENSTOCK_MEMBW_BASELINE=1).
template <class W, int kUnroll>
__global__ void copy_rows_kernel(char* out, const char* in, RowCopyDesc d, uint32_t n_words) {
    const uint32_t step = gridDim.x * blockDim.x * kUnroll;
    for (uint32_t base = blockIdx.x * blockDim.x * kUnroll + threadIdx.x; base < n_words; base += step) {
        W v[kUnroll];
        int64_t oo[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const uint32_t idx = base + u * blockDim.x;
            if (idx < n_words) {
                int64_t io = 0;
                row_copy_offsets<sizeof(W)>(d, idx, oo[u], io);
                v[u] = *reinterpret_cast<const W*>(in + io);
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (base + u * blockDim.x < n_words) *reinterpret_cast<W*>(out + oo[u]) = v[u];
        }
    }
}

// The same walk for a dtype-converting copy, element by element (strides in elements).
template <class TO, class TI>
__global__ void copy_rows_convert_kernel(TO* out, const TI* in, RowCopyDesc d, uint32_t n) {
    for (uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        int64_t oo = 0, io = 0;
        row_copy_offsets<1>(d, idx, oo, io);
        out[oo] = from_f32<TO>(to_f32(in[io]));
    }
}

template <class E>
__global__ void fill_kernel(E* out, StridedDesc od, E value, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        out[strided_offset(od, i)] = value;
    }
}

// Contiguous out of `n_words` 16-byte words, each the value's bit pattern repeated (the tail past the last whole word
// is written by fill_kernel).
__global__ void fill_words_kernel(uint4* out, uint4 word, int64_t n_words) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_words;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        out[i] = word;
    }
}

// Contiguous out: element i = kernels::random_value(seed, i, mean, stddev), as the CPU reference computes it.
template <bool kBf16>
__global__ void fill_random_kernel(void* out, int64_t n, uint64_t seed, float mean, float stddev) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float v = kernels::random_value(seed, static_cast<uint64_t>(i), mean, stddev);
        if constexpr (kBf16) {
            static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
        } else {
            static_cast<float*>(out)[i] = v;
        }
    }
}

// One block per output row: out row i = in row index[i] (bytes).
__global__ void gather_rows_kernel(char* out, const char* in, const int32_t* index, int64_t n, int64_t m,
                                   int64_t out_stride_bytes, int64_t in_stride_bytes, int64_t row_bytes) {
    const int64_t i = blockIdx.x;
    const int32_t src = index[i];
    if (src < 0 || src >= m) return;
    copy_row_bytes(out + i * out_stride_bytes, in + src * in_stride_bytes, row_bytes, static_cast<int>(threadIdx.x),
                   static_cast<int>(blockDim.x));
}

// Sequence of row r: the s with cu[s] <= r < cu[s + 1] (cu non-decreasing), by binary search.
__device__ __forceinline__ int seq_of_row(const int32_t* cu, int n_seqs, int64_t r) {
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= r) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// One block per row. kWrite: cache <- rows; else out <- cache.
template <bool kWrite>
__global__ void paged_kernel(char* cache, char* rows, const int32_t* page_table, const int32_t* cu_rows,
                             const int32_t* pos0, int n_seqs, int64_t max_pages, int64_t pt_stride, int64_t n_pages,
                             int64_t page_size, int64_t rows_stride_bytes, int64_t row_bytes) {
    const int64_t r = blockIdx.x;
    const int s = seq_of_row(cu_rows, n_seqs, r);
    const int64_t pos = static_cast<int64_t>(pos0[s]) + (r - cu_rows[s]);
    const int64_t slot = pos / page_size;
    if (pos < 0 || slot >= max_pages) return;
    const int32_t page = page_table[s * pt_stride + slot];
    if (page < 0 || page >= n_pages) return;
    char* cache_row = cache + (page * page_size + pos % page_size) * row_bytes;
    char* row = rows + r * rows_stride_bytes;
    if constexpr (kWrite) {
        copy_row_bytes(cache_row, row, row_bytes, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    } else {
        copy_row_bytes(row, cache_row, row_bytes, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    }
}

template <class TO, class TI>
__global__ void embedding_kernel(TO* out, const TI* table, const int32_t* ids, int64_t vocab, int64_t hidden,
                                 int64_t out_stride, int64_t table_stride) {
    const int64_t t = blockIdx.x;
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) return;
    const TI* src = table + id * table_stride;
    TO* dst = out + t * out_stride;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = from_f32<TO>(to_f32(src[i]));
}

int row_threads(int64_t row_bytes) {
    const int64_t words = (row_bytes + 15) / 16;
    return words >= 256 ? 256 : (words >= 128 ? 128 : (words >= 64 ? 64 : 32));
}

void check_row_view(const TensorView& v, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK_EQ(v.ndim, 2) << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.stride(1) == 1 || v.size(1) <= 1) << op << ": " << name << " last dim must be contiguous";
}

void check_i32_vec(const TensorView& v, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.dtype == DType::kI32) << op << ": " << name << " must be i32";
    PENSTOCK_CHECK(v.ndim == 1 && (v.stride(0) == 1 || v.size(0) <= 1)) << op << ": " << name << " contiguous 1-d";
}

void check_paged(const TensorView& cache, const TensorView& rows, const TensorView& page_table,
                 const TensorView& cu_rows, const TensorView& pos0, const char* op) {
    check_on_gpu(cache, op, "cache");
    PENSTOCK_CHECK_EQ(cache.ndim, 3) << op;
    PENSTOCK_CHECK(cache.is_contiguous()) << op << ": cache must be contiguous";
    check_row_view(rows, op, "rows");
    PENSTOCK_CHECK_EQ(rows.size(1), cache.size(2)) << op;
    PENSTOCK_CHECK(rows.dtype == cache.dtype) << op << ": rows and cache dtypes differ";
    check_on_gpu(page_table, op, "page_table");
    PENSTOCK_CHECK(page_table.ndim == 2 && page_table.dtype == DType::kI32 && page_table.stride(1) == 1)
        << op << ": page_table [n_seqs, max_pages] i32";
    check_i32_vec(cu_rows, op, "cu_rows");
    check_i32_vec(pos0, op, "pos0");
    PENSTOCK_CHECK_EQ(cu_rows.numel(), page_table.size(0) + 1) << op;
    PENSTOCK_CHECK_EQ(pos0.numel(), page_table.size(0)) << op;
}

template <bool kWrite>
void paged(const TensorView& cache, const TensorView& rows, const TensorView& page_table, const TensorView& cu_rows,
           const TensorView& pos0, cudaStream_t stream) {
    const int64_t n_rows = rows.size(0);
    const int n_seqs = static_cast<int>(page_table.size(0));
    if (n_rows == 0 || n_seqs == 0) return;
    const auto elem = static_cast<int64_t>(dtype_bytes(cache.dtype, 1));
    const auto row_bytes = static_cast<int64_t>(dtype_bytes(cache.dtype, static_cast<size_t>(cache.size(2))));
    paged_kernel<kWrite><<<static_cast<unsigned>(n_rows), row_threads(row_bytes), 0, stream>>>(
        static_cast<char*>(cache.data), static_cast<char*>(rows.data), page_table.ptr<const int32_t>(),
        cu_rows.ptr<const int32_t>(), pos0.ptr<const int32_t>(), n_seqs, page_table.size(1), page_table.stride(0),
        cache.size(0), cache.size(1), rows.stride(0) * elem, row_bytes);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

// Drops size-1 dims and merges neighbours that are contiguous in both views (stride[i] == stride[i+1] * shape[i+1]),
// so that fewer divisions index each element and dense row copies become 2-D.
void collapse_dims(StridedDesc* a, StridedDesc* b) {
    StridedDesc ra, rb;
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] == 1) continue;
        if (ra.ndim > 0 && ra.stride[ra.ndim - 1] == a->stride[i] * a->shape[i] &&
            rb.stride[rb.ndim - 1] == b->stride[i] * b->shape[i]) {
            ra.shape[ra.ndim - 1] *= a->shape[i];
            ra.stride[ra.ndim - 1] = a->stride[i];
            rb.shape[rb.ndim - 1] *= b->shape[i];
            rb.stride[rb.ndim - 1] = b->stride[i];
            continue;
        }
        ra.shape[ra.ndim] = a->shape[i];
        ra.stride[ra.ndim] = a->stride[i];
        rb.shape[rb.ndim] = b->shape[i];
        rb.stride[rb.ndim] = b->stride[i];
        ++ra.ndim;
        ++rb.ndim;
    }
    if (ra.ndim == 0) {  // a single element
        ra.ndim = rb.ndim = 1;
        ra.shape[0] = rb.shape[0] = 1;
        ra.stride[0] = rb.stride[0] = 1;
    }
    *a = ra;
    *b = rb;
}

}  // namespace

void copy(const kernels::CopyParams& p, void* stream) {
    check_on_gpu(p.out, "copy", "out");
    check_on_gpu(p.in, "copy", "in");
    PENSTOCK_CHECK_EQ(p.out.ndim, p.in.ndim) << "copy";
    for (int d = 0; d < p.out.ndim; ++d) PENSTOCK_CHECK_EQ(p.out.size(d), p.in.size(d)) << "copy: dim " << d;
    const int64_t n = p.out.numel();
    if (n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    StridedDesc od = strided_desc(p.out);
    StridedDesc id = strided_desc(p.in);
    collapse_dims(&od, &id);
    const unsigned blocks = blocks_for(n, kThreads);
    if (p.out.dtype == p.in.dtype) {
        // Dense rows on both sides (after merging dims that are contiguous in both views): the copy engine's 2-D
        // memcpy, which streams at close to copy bandwidth; strided or broadcast views take the element kernel.
        const auto elem = static_cast<size_t>(dtype_bits(p.out.dtype) / 8);
        if (elem > 0 && od.ndim <= 2 && od.stride[od.ndim - 1] == 1 && id.stride[id.ndim - 1] == 1) {
            const int64_t width = od.shape[od.ndim - 1];
            const int64_t rows = od.ndim == 2 ? od.shape[0] : 1;
            const int64_t opitch = od.ndim == 2 ? od.stride[0] : width;
            const int64_t ipitch = id.ndim == 2 ? id.stride[0] : width;
            if (p.out.data == p.in.data && opitch == ipitch) return;  // the same elements: nothing to move
            // Rows under kCopy2dMinBytes (the MLA K build's 256-byte k_nope rows) go to the row kernel below: the
            // copy engine moves short rows well under copy bandwidth (docs/perf/2026-12-01-memory-bound.md).
            const bool short_rows = !membw_baseline() && rows > 1 && n <= INT32_MAX &&
                                    width * static_cast<int64_t>(elem) < kCopy2dMinBytes;
            if (opitch >= width && ipitch >= width && !short_rows) {
                PENSTOCK_CUDA_CHECK(cudaMemcpy2DAsync(p.out.data, static_cast<size_t>(opitch) * elem, p.in.data,
                                                      static_cast<size_t>(ipitch) * elem, static_cast<size_t>(width) * elem,
                                                      static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s));
                return;
            }
        }
        // Contiguous last dim on both sides (strided or broadcast outer dims): whole words per thread, the widest
        // that the row length, both base pointers and every outer stride allow.
        if (elem > 0 && od.stride[od.ndim - 1] == 1 && id.stride[id.ndim - 1] == 1) {
            const int64_t row_bytes = od.shape[od.ndim - 1] * static_cast<int64_t>(elem);
            uint64_t a = reinterpret_cast<uintptr_t>(p.out.data) | reinterpret_cast<uintptr_t>(p.in.data) |
                         static_cast<uint64_t>(row_bytes);
            RowCopyDesc rd;
            rd.n_outer = od.ndim - 1;
            bool fits = n <= INT32_MAX;
            for (int i = 0; i < rd.n_outer; ++i) {
                rd.shape[i] = static_cast<uint32_t>(od.shape[i]);
                rd.ostride[i] = od.stride[i] * static_cast<int64_t>(elem);
                rd.istride[i] = id.stride[i] * static_cast<int64_t>(elem);
                a |= static_cast<uint64_t>(rd.ostride[i]) | static_cast<uint64_t>(rd.istride[i]);
                fits = fits && od.shape[i] <= INT32_MAX;
            }
            if (fits) {
                auto launch = [&](auto word) {
                    using W = decltype(word);
                    rd.words = static_cast<uint32_t>(row_bytes / static_cast<int64_t>(sizeof(W)));
                    const auto n_words = static_cast<uint32_t>(n * static_cast<int64_t>(elem) / static_cast<int64_t>(sizeof(W)));
                    if (membw_baseline()) {
                        copy_rows_kernel<W, 1><<<blocks_for(n_words, kThreads), kThreads, 0, s>>>(
                            static_cast<char*>(p.out.data), static_cast<const char*>(p.in.data), rd, n_words);
                    } else {
                        copy_rows_kernel<W, kRowCopyUnroll>
                            <<<blocks_for((n_words + kRowCopyUnroll - 1) / kRowCopyUnroll, kThreads), kThreads, 0, s>>>(
                                static_cast<char*>(p.out.data), static_cast<const char*>(p.in.data), rd, n_words);
                    }
                };
                if (a % 16 == 0) {
                    launch(uint4{});
                } else if (a % 8 == 0) {
                    launch(uint2{});
                } else if (a % 4 == 0) {
                    launch(uint32_t{});
                } else if (a % 2 == 0) {
                    launch(uint16_t{});
                } else {
                    launch(uint8_t{});
                }
                PENSTOCK_CUDA_LAUNCH_CHECK();
                return;
            }
        }
        switch (dtype_bits(p.out.dtype)) {
            case 8:
                copy_raw_kernel<uint8_t>
                    <<<blocks, kThreads, 0, s>>>(p.out.ptr<uint8_t>(), p.in.ptr<const uint8_t>(), od, id, n);
                break;
            case 16:
                copy_raw_kernel<uint16_t>
                    <<<blocks, kThreads, 0, s>>>(p.out.ptr<uint16_t>(), p.in.ptr<const uint16_t>(), od, id, n);
                break;
            case 32:
                copy_raw_kernel<uint32_t>
                    <<<blocks, kThreads, 0, s>>>(p.out.ptr<uint32_t>(), p.in.ptr<const uint32_t>(), od, id, n);
                break;
            default:
                PENSTOCK_CHECK(false) << "copy: unsupported dtype " << dtype_name(p.out.dtype);
        }
    } else if (od.stride[od.ndim - 1] == 1 && id.stride[id.ndim - 1] == 1 && n <= INT32_MAX) {
        RowCopyDesc rd;
        rd.n_outer = od.ndim - 1;
        rd.words = static_cast<uint32_t>(od.shape[od.ndim - 1]);
        for (int i = 0; i < rd.n_outer; ++i) {
            rd.shape[i] = static_cast<uint32_t>(od.shape[i]);
            rd.ostride[i] = od.stride[i];
            rd.istride[i] = id.stride[i];
        }
        dispatch_float(p.out.dtype, "copy out", [&](auto to) {
            dispatch_float(p.in.dtype, "copy in", [&](auto ti) {
                using TO = decltype(to);
                using TI = decltype(ti);
                copy_rows_convert_kernel<TO, TI><<<blocks, kThreads, 0, s>>>(p.out.ptr<TO>(), p.in.ptr<const TI>(), rd,
                                                                              static_cast<uint32_t>(n));
            });
        });
    } else {
        dispatch_float(p.out.dtype, "copy out", [&](auto to) {
            dispatch_float(p.in.dtype, "copy in", [&](auto ti) {
                using TO = decltype(to);
                using TI = decltype(ti);
                copy_kernel<TO, TI><<<blocks, kThreads, 0, s>>>(p.out.ptr<TO>(), p.in.ptr<const TI>(), od, id, n);
            });
        });
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void fill(const kernels::FillParams& p, void* stream) {
    check_on_gpu(p.out, "fill", "out");
    const int64_t n = p.out.numel();
    if (n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    // Contiguous: zero through cudaMemsetAsync, any other value as 16-byte words (the strided kernel's per-element
    // index arithmetic ran at ~100 GB/s on a [16384, 7168] bf16 MoE output).
    const size_t es = dtype_bytes(p.out.dtype, 1);
    uint32_t bits = 0;
    switch (p.out.dtype) {
        case DType::kF32: {
            std::memcpy(&bits, &p.value, sizeof(bits));
            break;
        }
        case DType::kBF16: bits = static_cast<uint32_t>(float_to_bf16(p.value)) * 0x10001u; break;
        case DType::kI32: bits = static_cast<uint32_t>(static_cast<int32_t>(p.value)); break;
        default: PENSTOCK_CHECK(false) << "fill: unsupported dtype " << dtype_name(p.out.dtype);
    }
    if (p.out.is_contiguous() && (es == 2 || es == 4) && is_aligned16(p.out.data)) {
        const size_t bytes = static_cast<size_t>(n) * es;
        if (bits == 0) {
            PENSTOCK_CUDA_CHECK(cudaMemsetAsync(p.out.data, 0, bytes, s));
            return;
        }
        const auto n_words = static_cast<int64_t>(bytes / 16);
        if (n_words > 0) {
            fill_words_kernel<<<blocks_for(n_words, kThreads), kThreads, 0, s>>>(static_cast<uint4*>(p.out.data),
                                                                                make_uint4(bits, bits, bits, bits),
                                                                                n_words);
            PENSTOCK_CUDA_LAUNCH_CHECK();
            // The tail (under 16 bytes) goes to the per-element kernel: it holds no whole word.
            const auto done = static_cast<int64_t>(static_cast<size_t>(n_words) * 16 / es);
            if (done < n) fill({.out = p.out.reshape({n}).slice(0, done, n), .value = p.value}, stream);
            return;
        }
        // Under 16 bytes in all: the per-element kernel below.
    }
    const StridedDesc od = strided_desc(p.out);
    const unsigned blocks = blocks_for(n, kThreads);
    switch (p.out.dtype) {
        case DType::kF32:
            fill_kernel<float><<<blocks, kThreads, 0, s>>>(p.out.ptr<float>(), od, p.value, n);
            break;
        case DType::kBF16:
            fill_kernel<uint16_t><<<blocks, kThreads, 0, s>>>(p.out.ptr<uint16_t>(), od, float_to_bf16(p.value), n);
            break;
        case DType::kI32:
            fill_kernel<int32_t>
                <<<blocks, kThreads, 0, s>>>(p.out.ptr<int32_t>(), od, static_cast<int32_t>(p.value), n);
            break;
        default:
            PENSTOCK_CHECK(false) << "fill: unsupported dtype " << dtype_name(p.out.dtype);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void fill_random(const kernels::FillRandomParams& p, void* stream) {
    check_on_gpu(p.out, "fill_random", "out");
    PENSTOCK_CHECK(p.out.is_contiguous()) << "fill_random: " << p.out.shape_string() << " is not contiguous";
    const int64_t n = p.out.numel();
    if (n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    const unsigned blocks = blocks_for(n, kThreads);
    switch (p.out.dtype) {
        case DType::kF32:
            fill_random_kernel<false><<<blocks, kThreads, 0, s>>>(p.out.data, n, p.seed, p.mean, p.stddev);
            break;
        case DType::kBF16:
            fill_random_kernel<true><<<blocks, kThreads, 0, s>>>(p.out.data, n, p.seed, p.mean, p.stddev);
            break;
        default:
            PENSTOCK_CHECK(false) << "fill_random: f32 or bf16, got " << dtype_name(p.out.dtype);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void gather_rows(const kernels::GatherRowsParams& p, void* stream) {
    check_row_view(p.out, "gather_rows", "out");
    check_row_view(p.in, "gather_rows", "in");
    check_i32_vec(p.index, "gather_rows", "index");
    PENSTOCK_CHECK_EQ(p.out.size(1), p.in.size(1)) << "gather_rows";
    PENSTOCK_CHECK_EQ(p.index.numel(), p.out.size(0)) << "gather_rows";
    PENSTOCK_CHECK(p.out.dtype == p.in.dtype) << "gather_rows: dtypes differ";
    const int64_t n = p.out.size(0);
    if (n == 0) return;
    const auto elem = static_cast<int64_t>(dtype_bytes(p.in.dtype, 1));
    const auto row_bytes = static_cast<int64_t>(dtype_bytes(p.in.dtype, static_cast<size_t>(p.in.size(1))));
    gather_rows_kernel<<<static_cast<unsigned>(n), row_threads(row_bytes), 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<char*>(p.out.data), static_cast<const char*>(p.in.data), p.index.ptr<const int32_t>(), n,
        p.in.size(0), p.out.stride(0) * elem, p.in.stride(0) * elem, row_bytes);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void paged_write(const kernels::PagedWriteParams& p, void* stream) {
    check_paged(p.cache, p.rows, p.page_table, p.cu_rows, p.pos0, "paged_write");
    paged<true>(p.cache, p.rows, p.page_table, p.cu_rows, p.pos0, static_cast<cudaStream_t>(stream));
}

void paged_gather(const kernels::PagedGatherParams& p, void* stream) {
    check_paged(p.cache, p.out, p.page_table, p.cu_rows, p.pos0, "paged_gather");
    paged<false>(p.cache, p.out, p.page_table, p.cu_rows, p.pos0, static_cast<cudaStream_t>(stream));
}

void embedding(const kernels::EmbeddingParams& p, void* stream) {
    check_row_view(p.out, "embedding", "out");
    check_row_view(p.table, "embedding", "table");
    check_i32_vec(p.ids, "embedding", "ids");
    PENSTOCK_CHECK_EQ(p.out.size(1), p.table.size(1)) << "embedding";
    PENSTOCK_CHECK_EQ(p.ids.numel(), p.out.size(0)) << "embedding";
    const int64_t n = p.out.size(0);
    const int64_t hidden = p.out.size(1);
    if (n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.out.dtype, "embedding out", [&](auto to) {
        dispatch_float(p.table.dtype, "embedding table", [&](auto ti) {
            using TO = decltype(to);
            using TI = decltype(ti);
            embedding_kernel<TO, TI><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
                p.out.ptr<TO>(), p.table.ptr<const TI>(), p.ids.ptr<const int32_t>(), p.table.size(0), hidden,
                p.out.stride(0), p.table.stride(0));
        });
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
