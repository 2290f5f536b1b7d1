// RMSNorm on the GPU: same contract as penstock::ref::rms_norm (kernels/ops.h RmsNormParams), plus bf16 in/out and
// a bf16 weight. Variants (RmsNormVariant) share one kernel template: kThreadsPerRow threads own a row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vec.cuh"

namespace penstock::cuda {

namespace {

constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// Parallel mapping: a block holds kRowsPerBlock rows; kThreadsPerRow threads (a warp, or the whole block when
// kRowsPerBlock == 1) own one row and stride its dim in packs of kVec elements (16-byte accesses when kVec > 1;
// the launcher picks kVec = 1 unless dim, the row strides and all pointers allow it).
//   row   in [0, n_rows)           = blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow
//   pack  in [0, dim / kVec)       = lane, lane + kThreadsPerRow, ...
// Numerics: sum of squares in fp32 (per-thread serial, then a shuffle tree, then across warps through shared
// memory); r = rsqrtf(sum / dim + eps); out = weight * (x * r) in fp32, rounded once to T.
// Two passes over the row (the second re-reads x, an L1/L2 hit) keep registers independent of dim. No __restrict__
// and no read-only loads on `in`: out may alias in (each element is read and then written by the same thread).
template <class T, class W, int kVec, int kThreadsPerRow, int kRowsPerBlock>
__global__ void __launch_bounds__(kThreadsPerRow* kRowsPerBlock)
    rms_norm_kernel(T* out, const T* in, const W* __restrict__ weight, int64_t n_rows, int dim, int64_t out_stride,
                    int64_t in_stride, float eps) {
    static_assert(kThreadsPerRow % kWarpSize == 0, "rows are owned by whole warps");
    static_assert(kThreadsPerRow == kWarpSize || kRowsPerBlock == 1, "multi-warp rows need one row per block");
    constexpr int kWarpsPerRow = kThreadsPerRow / kWarpSize;
    using TPack = Pack<T, kVec>;
    using WPack = Pack<W, kVec>;

    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
    if (row >= n_rows) return;  // whole rows leave together; with several warps per row the whole block does
    const int lane = static_cast<int>(threadIdx.x % kThreadsPerRow);
    const T* x = in + row * in_stride;
    T* y = out + row * out_stride;
    const int n_packs = dim / kVec;

    float sum = 0.0f;
    for (int i = lane; i < n_packs; i += kThreadsPerRow) {
        const TPack v = reinterpret_cast<const TPack*>(x)[i];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const float f = to_f32(v.v[j]);
            sum += f * f;
        }
    }
    sum = warp_sum(sum);
    if constexpr (kWarpsPerRow > 1) {
        __shared__ float partial[kWarpsPerRow];
        if (threadIdx.x % kWarpSize == 0) partial[threadIdx.x / kWarpSize] = sum;
        __syncthreads();
        sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarpsPerRow; ++w) sum += partial[w];  // same order in every thread: same r everywhere
    }
    const float r = rsqrtf(sum / static_cast<float>(dim) + eps);

    for (int i = lane; i < n_packs; i += kThreadsPerRow) {
        const TPack v = reinterpret_cast<const TPack*>(x)[i];
        const WPack w = reinterpret_cast<const WPack*>(weight)[i];
        TPack o;
#pragma unroll
        for (int j = 0; j < kVec; ++j) o.v[j] = from_f32<T>(to_f32(w.v[j]) * (to_f32(v.v[j]) * r));
        reinterpret_cast<TPack*>(y)[i] = o;
    }
}

constexpr int kWarpRowsPerBlock = 4;   // warp per row: 128-thread blocks
constexpr int kBlockThreads = 256;     // block per row
constexpr int kAutoWarpMaxDim = 1024;  // kAuto: warp per row up to this dim

template <class T, class W, int kVec>
void launch(const kernels::RmsNormParams& p, RmsNormVariant variant, cudaStream_t stream) {
    const int64_t n_rows = p.in.size(0);
    const int dim = static_cast<int>(p.in.size(1));
    if (variant == RmsNormVariant::kAuto) {
        variant = dim <= kAutoWarpMaxDim ? RmsNormVariant::kWarpPerRow : RmsNormVariant::kBlockPerRow;
    }
    auto* out = static_cast<T*>(p.out.data);
    const auto* in = static_cast<const T*>(p.in.data);
    const auto* weight = static_cast<const W*>(p.weight.data);
    switch (variant) {
        case RmsNormVariant::kAuto:
        case RmsNormVariant::kWarpPerRow: {
            const auto blocks = static_cast<unsigned>((n_rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
            rms_norm_kernel<T, W, kVec, kWarpSize, kWarpRowsPerBlock>
                <<<blocks, kWarpSize * kWarpRowsPerBlock, 0, stream>>>(out, in, weight, n_rows, dim, p.out.stride(0),
                                                                       p.in.stride(0), p.eps);
            break;
        }
        case RmsNormVariant::kBlockPerRow:
            rms_norm_kernel<T, W, kVec, kBlockThreads, 1><<<static_cast<unsigned>(n_rows), kBlockThreads, 0, stream>>>(
                out, in, weight, n_rows, dim, p.out.stride(0), p.in.stride(0), p.eps);
            break;
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

// 16-byte packs when every row start and the weight are 16-byte aligned and dim is a whole number of packs.
template <class T, class W>
void dispatch_vec(const kernels::RmsNormParams& p, RmsNormVariant variant, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    const int64_t dim = p.in.size(1);
    const bool vec_ok = dim % kVec == 0 && is_aligned16(p.in.data) && is_aligned16(p.out.data) &&
                        is_aligned16(p.weight.data) && (p.in.stride(0) * sizeof(T)) % 16 == 0 &&
                        (p.out.stride(0) * sizeof(T)) % 16 == 0;
    if (vec_ok) {
        launch<T, W, kVec>(p, variant, stream);
    } else {
        launch<T, W, 1>(p, variant, stream);
    }
}

template <class T>
void dispatch_weight(const kernels::RmsNormParams& p, RmsNormVariant variant, cudaStream_t stream) {
    if (p.weight.dtype == DType::kF32) {
        dispatch_vec<T, float>(p, variant, stream);
    } else {
        dispatch_vec<T, __nv_bfloat16>(p, variant, stream);
    }
}

void check_params(const kernels::RmsNormParams& p) {
    PENSTOCK_CHECK(p.in.device == Device::kCUDA && p.out.device == Device::kCUDA && p.weight.device == Device::kCUDA)
        << "rms_norm: tensors must be on the GPU";
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << "rms_norm: in " << p.in.shape_string();
    PENSTOCK_CHECK_EQ(p.out.ndim, 2) << "rms_norm: out " << p.out.shape_string();
    PENSTOCK_CHECK(p.out.size(0) == p.in.size(0) && p.out.size(1) == p.in.size(1))
        << "rms_norm: out " << p.out.shape_string() << " vs in " << p.in.shape_string();
    PENSTOCK_CHECK(p.weight.ndim == 1 && p.weight.size(0) == p.in.size(1))
        << "rms_norm: weight " << p.weight.shape_string() << " vs in " << p.in.shape_string();
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << "rms_norm: in dtype " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == p.in.dtype)
        << "rms_norm: out " << dtype_name(p.out.dtype) << " vs in " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.weight.dtype == DType::kF32 || p.weight.dtype == DType::kBF16)
        << "rms_norm: weight dtype " << dtype_name(p.weight.dtype);
    PENSTOCK_CHECK(p.in.stride(1) == 1 && p.out.stride(1) == 1 && p.weight.stride(0) == 1)
        << "rms_norm: the last dim must be contiguous";
    PENSTOCK_CHECK(p.in.size(1) > 0 && p.in.size(1) <= (int64_t{1} << 30)) << "rms_norm: dim " << p.in.size(1);
    PENSTOCK_CHECK(p.in.size(0) < (int64_t{1} << 31)) << "rms_norm: n_rows " << p.in.size(0);
}

}  // namespace

void rms_norm(const kernels::RmsNormParams& p, RmsNormVariant variant, void* stream) {
    check_params(p);
    if (p.in.size(0) == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    if (p.in.dtype == DType::kF32) {
        dispatch_weight<float>(p, variant, s);
    } else {
        dispatch_weight<__nv_bfloat16>(p, variant, s);
    }
}

void rms_norm(const kernels::RmsNormParams& p, void* stream) { rms_norm(p, RmsNormVariant::kAuto, stream); }

}  // namespace penstock::cuda
