// Vectorised passes over [n_rows, dim] views with row strides (the GLU activations, sigmoid_gate, attn_res_mix): a
// row is cut into chunks of V elements; a chunk is loaded and stored as 16-byte accesses when the view allows it
// (rows_vectorizable) and element by element otherwise, and the last chunk of a row may be partial (dim need not be a
// multiple of V). Values travel as f32 in registers whatever the storage dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/vec.cuh"

namespace penstock::cuda {

// Elements per chunk of the vectorised kernels: 16 bytes of bf16 (an f32 chunk is two 16-byte accesses).
constexpr int kRowVec = 8;

// True when every chunk start of `v` ([n_rows, dim], last dim contiguous) is 16-byte aligned: the base pointer and
// the row stride in bytes are multiples of 16 (chunks start at multiples of kRowVec elements, >= 16 bytes).
inline bool rows_vectorizable(const TensorView& v) {
    if (v.data == nullptr) return true;  // absent optional operand
    const auto es = static_cast<int64_t>(dtype_bytes(v.dtype, 1));
    return is_aligned16(v.data) && (v.size(0) <= 1 || (v.stride(0) * es) % 16 == 0);
}

// Launch geometry: blockDim.x threads along a row's chunks (a multiple of 32, <= 256, sized so that the chunks split
// evenly over gridDim.x blocks), blockDim.y rows per block (256 threads in all), gridDim.y row tiles (<= 65535; the
// kernels stride rows by gridDim.y * blockDim.y).
struct RowGrid {
    dim3 grid;
    dim3 block;
};

inline RowGrid row_grid(int64_t n_rows, int64_t dim, int vec) {
    const int64_t chunks = (dim + vec - 1) / vec;
    const int64_t col_blocks = (chunks + 255) / 256;
    int64_t bx = (chunks + col_blocks - 1) / col_blocks;
    bx = (bx + 31) / 32 * 32;
    const int64_t by = 256 / bx;
    int64_t gy = (n_rows + by - 1) / by;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    return {.grid = dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(gy)),
            .block = dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by))};
}

// Loads elements [c0, c0 + V) of `row` (those < dim) as f32; kVec: one packed access when the chunk is whole.
template <class T, int V, bool kVec>
__device__ __forceinline__ void load_chunk(const T* row, int64_t c0, int64_t dim, float (&x)[V]) {
    if (kVec && c0 + V <= dim) {
        const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(row + c0);
#pragma unroll
        for (int j = 0; j < V; ++j) x[j] = to_f32(p.v[j]);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[j] = c0 + j < dim ? to_f32(row[c0 + j]) : 0.0f;
    }
}

// Stores y[0, V) as elements [c0, c0 + V) of `row` (those < dim), converting from f32 (bf16: round to nearest even).
template <class T, int V, bool kVec>
__device__ __forceinline__ void store_chunk(T* row, int64_t c0, int64_t dim, const float (&y)[V]) {
    if (kVec && c0 + V <= dim) {
        Pack<T, V> p;
#pragma unroll
        for (int j = 0; j < V; ++j) p.v[j] = from_f32<T>(y[j]);
        *reinterpret_cast<Pack<T, V>*>(row + c0) = p;
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
            if (c0 + j < dim) row[c0 + j] = from_f32<T>(y[j]);
        }
    }
}

// out[r, :] = op(a[r, :], b[r, :]) elementwise (b absent: op(a, 0)). Row strides in elements. out may alias a or b:
// every element is read and written by the same thread, the read first.
template <class TO, class TA, class TB>
struct BinaryRows {
    TO* out;
    const TA* a;
    const TB* b;  // null: unary
    int64_t out0, a0, b0;
    int64_t n_rows, dim;
};

// Mapping: thread (x, y) of block (bx, by) owns chunk bx * blockDim.x + x of rows by * blockDim.y + y + k * stride
// (stride = gridDim.y * blockDim.y); two rows per iteration, both loaded before either is stored, so that each thread
// keeps 2-4 independent 16-byte loads in flight (the compiler cannot hoist the next row's loads above a store that
// may alias them).
template <class Op, class TO, class TA, class TB, bool kVec>
__global__ void __launch_bounds__(256) binary_rows_kernel(BinaryRows<TO, TA, TB> e, Op op) {
    constexpr int V = kRowVec;
    const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
    if (c0 >= e.dim) return;
    const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < e.n_rows; r += 2 * stride) {
        const int64_t r2 = r + stride;
        const bool two = r2 < e.n_rows;
        float x0[V], y0[V], x1[V], y1[V];
        load_chunk<TA, V, kVec>(e.a + r * e.a0, c0, e.dim, x0);
        if (e.b != nullptr) load_chunk<TB, V, kVec>(e.b + r * e.b0, c0, e.dim, y0);
        if (two) {
            load_chunk<TA, V, kVec>(e.a + r2 * e.a0, c0, e.dim, x1);
            if (e.b != nullptr) load_chunk<TB, V, kVec>(e.b + r2 * e.b0, c0, e.dim, y1);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) x0[j] = op(x0[j], e.b != nullptr ? y0[j] : 0.0f);
        store_chunk<TO, V, kVec>(e.out + r * e.out0, c0, e.dim, x0);
        if (two) {
#pragma unroll
            for (int j = 0; j < V; ++j) x1[j] = op(x1[j], e.b != nullptr ? y1[j] : 0.0f);
            store_chunk<TO, V, kVec>(e.out + r2 * e.out0, c0, e.dim, x1);
        }
    }
}

// Launches binary_rows_kernel, vectorised when every operand allows it (`vec`), element-wise otherwise.
template <class Op, class TO, class TA, class TB>
void launch_binary_rows(const BinaryRows<TO, TA, TB>& e, const Op& op, bool vec, cudaStream_t stream) {
    if (e.n_rows == 0 || e.dim == 0) return;
    const RowGrid g = row_grid(e.n_rows, e.dim, kRowVec);
    if (vec) {
        binary_rows_kernel<Op, TO, TA, TB, true><<<g.grid, g.block, 0, stream>>>(e, op);
    } else {
        binary_rows_kernel<Op, TO, TA, TB, false><<<g.grid, g.block, 0, stream>>>(e, op);
    }
}

// The logistic function. kFast (bf16 outputs): ex2.approx and a fast divide, relative error ~1e-7, far below one
// bf16 rounding (2^-9); otherwise the accurate expf and an IEEE divide (f32 outputs keep f32 accuracy).
template <bool kFast>
__device__ __forceinline__ float sigmoid_of(float x) {
    if constexpr (kFast) {
        return __fdividef(1.0f, 1.0f + __expf(-x));  // x < -88: 1 / inf = 0
    } else {
        return 1.0f / (1.0f + expf(-x));
    }
}

}  // namespace penstock::cuda
