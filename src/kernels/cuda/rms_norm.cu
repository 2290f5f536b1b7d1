// RMSNorm on the GPU: same contract as penstock::ref::rms_norm (kernels/ops.h RmsNormParams, including the fused
// residual add and FP8 quantisation), plus bf16 in/out and a bf16 weight. Variants (RmsNormVariant) share one kernel
// template: kThreadsPerRow threads own a row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/vec.cuh"

namespace penstock::cuda {

namespace {

constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// Everything a launch reads; residual / q are null when that fusion is off (RmsNormParams).
struct NormArgs {
    void* out;
    void* in;  // written back when residual is set
    const void* residual;
    const void* weight;
    uint8_t* q;
    float* q_scale;
    int64_t n_rows, out_stride, in_stride, res_stride, q_stride, qs_row, qs_col;
    int dim;
    float eps;
};

// Parallel mapping: a block holds kRowsPerBlock rows; kThreadsPerRow threads (a warp, or the whole block when
// kRowsPerBlock == 1) own one row and stride its dim in packs of kVec elements (16-byte accesses when kVec > 1;
// the launcher picks kVec = 1 unless dim, the row strides and all pointers allow it).
//   row   in [0, n_rows)           = blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow
//   pack  in [0, dim / kVec)       = lane, lane + kThreadsPerRow, ...
// Numerics: sum of squares in fp32 (per-thread serial, then a shuffle tree, then across warps through shared
// memory); r = rsqrtf(sum / dim + eps); out = weight * (x * r) in fp32, rounded once to T.
// Two passes over the row (the second re-reads x, an L1/L2 hit) keep registers independent of dim. No __restrict__
// and no read-only loads on `in`: out may alias in (each element is read and then written by the same thread).
// kResidual: pass 1 reads in + residual, rounds the sum to T (the add op's rounding) and writes it back to in; pass 2
// re-reads that sum from the same thread. The reduction order does not change, so out is the unfused norm's.
// kQuant (kVec = 16 / sizeof(T)): a 128-column quantisation group is 128 / kVec consecutive lanes of one warp in
// pass 2 (kThreadsPerRow is a multiple of 32, so every iteration's packs start on a group boundary); the group's
// amax by xor-shuffles inside those lanes, then fp8.cuh act_quant_group on the rounded outputs: fp8_act_quant's
// bytes and scales. Pass 2 then runs a warp-uniform number of iterations so that every lane takes the shuffles.
template <class T, class W, int kVec, int kThreadsPerRow, int kRowsPerBlock, bool kResidual, bool kQuant>
__global__ void __launch_bounds__(kThreadsPerRow* kRowsPerBlock) rms_norm_kernel(NormArgs a) {
    static_assert(kThreadsPerRow % kWarpSize == 0, "rows are owned by whole warps");
    static_assert(kThreadsPerRow == kWarpSize || kRowsPerBlock == 1, "multi-warp rows need one row per block");
    static_assert(!kQuant || kVec * static_cast<int>(sizeof(T)) == 16, "the fused quantisation takes 16-byte packs");
    constexpr int kWarpsPerRow = kThreadsPerRow / kWarpSize;
    using TPack = Pack<T, kVec>;
    using WPack = Pack<W, kVec>;

    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
    if (row >= a.n_rows) return;  // whole rows leave together; with several warps per row the whole block does
    const int lane = static_cast<int>(threadIdx.x % kThreadsPerRow);
    T* x = static_cast<T*>(a.in) + row * a.in_stride;
    T* y = static_cast<T*>(a.out) + row * a.out_stride;
    const W* weight = static_cast<const W*>(a.weight);
    const int n_packs = a.dim / kVec;

    float sum = 0.0f;
    for (int i = lane; i < n_packs; i += kThreadsPerRow) {
        TPack v = reinterpret_cast<const TPack*>(x)[i];
        if constexpr (kResidual) {
            const TPack d = reinterpret_cast<const TPack*>(static_cast<const T*>(a.residual) + row * a.res_stride)[i];
#pragma unroll
            for (int j = 0; j < kVec; ++j) v.v[j] = from_f32<T>(to_f32(v.v[j]) + to_f32(d.v[j]));
            reinterpret_cast<TPack*>(x)[i] = v;
        }
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
    const float r = rsqrtf(sum / static_cast<float>(a.dim) + a.eps);

    if constexpr (!kQuant) {
        for (int i = lane; i < n_packs; i += kThreadsPerRow) {
            const TPack v = reinterpret_cast<const TPack*>(x)[i];
            const WPack w = reinterpret_cast<const WPack*>(weight)[i];
            TPack o;
#pragma unroll
            for (int j = 0; j < kVec; ++j) o.v[j] = from_f32<T>(to_f32(w.v[j]) * (to_f32(v.v[j]) * r));
            reinterpret_cast<TPack*>(y)[i] = o;
        }
    } else {
        constexpr int kGroupLanes = static_cast<int>(kernels::kFp8Block) / kVec;  // 16 (bf16) or 32 (f32)
        uint8_t* qrow = a.q + row * a.q_stride;
        for (int i0 = 0; i0 < n_packs; i0 += kThreadsPerRow) {
            const int i = i0 + lane;
            const bool valid = i < n_packs;  // dim % 8 == 0 here, but dim % 128 need not be: a short last group
            float f[kVec];
            if (valid) {
                const TPack v = reinterpret_cast<const TPack*>(x)[i];
                const WPack w = reinterpret_cast<const WPack*>(weight)[i];
                TPack o;
#pragma unroll
                for (int j = 0; j < kVec; ++j) {
                    o.v[j] = from_f32<T>(to_f32(w.v[j]) * (to_f32(v.v[j]) * r));
                    f[j] = to_f32(o.v[j]);
                }
                reinterpret_cast<TPack*>(y)[i] = o;
            } else {
#pragma unroll
                for (int j = 0; j < kVec; ++j) f[j] = 0.0f;
            }
            float amax = 0.0f;
#pragma unroll
            for (int j = 0; j < kVec; ++j) amax = fmaxf(amax, fabsf(f[j]));
#pragma unroll
            for (int d = kGroupLanes / 2; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
            uint32_t q[kVec / 4];
            const float s = act_quant_group(f, amax, q);
            if (valid) {
                if constexpr (kVec == 8) {
                    reinterpret_cast<uint2*>(qrow)[i] = make_uint2(q[0], q[1]);
                } else {
                    reinterpret_cast<uint32_t*>(qrow)[i] = q[0];
                }
                if (lane % kGroupLanes == 0) a.q_scale[row * a.qs_row + (i / kGroupLanes) * a.qs_col] = s;
            }
        }
    }
}

constexpr int kWarpRowsPerBlock = 4;   // warp per row: 128-thread blocks
constexpr int kBlockThreads = 256;     // block per row
constexpr int kAutoWarpMaxDim = 1024;  // kAuto: warp per row up to this dim

template <class T, class W, int kVec, bool kResidual, bool kQuant>
void launch(const NormArgs& a, RmsNormVariant variant, cudaStream_t stream) {
    if (variant == RmsNormVariant::kAuto) {
        variant = a.dim <= kAutoWarpMaxDim ? RmsNormVariant::kWarpPerRow : RmsNormVariant::kBlockPerRow;
    }
    switch (variant) {
        case RmsNormVariant::kAuto:
        case RmsNormVariant::kWarpPerRow: {
            const auto blocks = static_cast<unsigned>((a.n_rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
            rms_norm_kernel<T, W, kVec, kWarpSize, kWarpRowsPerBlock, kResidual, kQuant>
                <<<blocks, kWarpSize * kWarpRowsPerBlock, 0, stream>>>(a);
            break;
        }
        case RmsNormVariant::kBlockPerRow:
            rms_norm_kernel<T, W, kVec, kBlockThreads, 1, kResidual, kQuant>
                <<<static_cast<unsigned>(a.n_rows), kBlockThreads, 0, stream>>>(a);
            break;
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

bool rows_aligned16(const TensorView& v) {
    return is_aligned16(v.data) && (v.stride(0) * static_cast<int64_t>(dtype_bits(v.dtype) / 8)) % 16 == 0;
}

// 16-byte packs when every row start and the weight are 16-byte aligned and dim is a whole number of packs; the
// quantisation fuses on that path when its output rows are aligned for the pack's e4m3 bytes. Returns false when the
// caller has to quantise out itself.
template <class T, class W, bool kResidual>
bool dispatch_vec(const NormArgs& a, const kernels::RmsNormParams& p, RmsNormVariant variant, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    const bool vec_ok = a.dim % kVec == 0 && rows_aligned16(p.in) && rows_aligned16(p.out) &&
                        is_aligned16(p.weight.data) && (!kResidual || rows_aligned16(p.residual));
    const bool quant = a.q != nullptr;
    if (vec_ok && quant && reinterpret_cast<uintptr_t>(a.q) % kVec == 0 && a.q_stride % kVec == 0) {
        launch<T, W, kVec, kResidual, true>(a, variant, stream);
        return true;
    }
    if (vec_ok) {
        launch<T, W, kVec, kResidual, false>(a, variant, stream);
    } else {
        launch<T, W, 1, kResidual, false>(a, variant, stream);
    }
    return !quant;
}

template <class T>
bool dispatch_weight(const NormArgs& a, const kernels::RmsNormParams& p, RmsNormVariant variant, cudaStream_t stream) {
    const bool residual = a.residual != nullptr;
    if (p.weight.dtype == DType::kF32) {
        return residual ? dispatch_vec<T, float, true>(a, p, variant, stream)
                        : dispatch_vec<T, float, false>(a, p, variant, stream);
    }
    return residual ? dispatch_vec<T, __nv_bfloat16, true>(a, p, variant, stream)
                    : dispatch_vec<T, __nv_bfloat16, false>(a, p, variant, stream);
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
    if (p.residual.data != nullptr) {
        PENSTOCK_CHECK(p.residual.device == Device::kCUDA && p.residual.ndim == 2 &&
                       p.residual.size(0) == p.in.size(0) && p.residual.size(1) == p.in.size(1) &&
                       p.residual.dtype == p.in.dtype && p.residual.stride(1) == 1)
            << "rms_norm: residual " << p.residual.shape_string() << " " << dtype_name(p.residual.dtype) << " vs in "
            << p.in.shape_string() << " " << dtype_name(p.in.dtype);
        PENSTOCK_CHECK(p.residual.data != p.in.data && p.residual.data != p.out.data)
            << "rms_norm: residual may not alias in or out";
    }
    if (p.quant_out.data != nullptr) {
        const int64_t n = p.in.size(0), dim = p.in.size(1), kb = (dim + kernels::kFp8Block - 1) / kernels::kFp8Block;
        PENSTOCK_CHECK(p.quant_out.device == Device::kCUDA && p.quant_out.ndim == 2 && p.quant_out.size(0) == n &&
                       p.quant_out.size(1) == dim && p.quant_out.dtype == DType::kF8E4M3 && p.quant_out.stride(1) == 1)
            << "rms_norm: quant_out " << p.quant_out.shape_string() << " " << dtype_name(p.quant_out.dtype)
            << ", expected [" << n << ", " << dim << "] f8e4m3, last dim contiguous";
        PENSTOCK_CHECK(p.quant_scale.device == Device::kCUDA && p.quant_scale.ndim == 2 && p.quant_scale.size(0) == n &&
                       p.quant_scale.size(1) == kb && p.quant_scale.dtype == DType::kF32)
            << "rms_norm: quant_scale " << p.quant_scale.shape_string() << ", expected [" << n << ", " << kb << "] f32";
    }
}

}  // namespace

void rms_norm(const kernels::RmsNormParams& p, RmsNormVariant variant, void* stream) {
    check_params(p);
    if (p.in.size(0) == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    const bool quant = p.quant_out.data != nullptr;
    NormArgs a{};
    a.out = p.out.data;
    a.in = p.in.data;
    a.residual = p.residual.data;
    a.weight = p.weight.data;
    a.q = quant ? p.quant_out.ptr<uint8_t>() : nullptr;
    a.q_scale = quant ? p.quant_scale.ptr<float>() : nullptr;
    a.n_rows = p.in.size(0);
    a.dim = static_cast<int>(p.in.size(1));
    a.out_stride = p.out.stride(0);
    a.in_stride = p.in.stride(0);
    a.res_stride = a.residual != nullptr ? p.residual.stride(0) : 0;
    a.q_stride = quant ? p.quant_out.stride(0) : 0;
    a.qs_row = quant ? p.quant_scale.stride(0) : 0;
    a.qs_col = quant ? p.quant_scale.stride(1) : 0;
    a.eps = p.eps;
    const bool fused = p.in.dtype == DType::kF32 ? dispatch_weight<float>(a, p, variant, s)
                                                 : dispatch_weight<__nv_bfloat16>(a, p, variant, s);
    // Shapes or alignments off the fused path: the quantiser reads the finished out (the same bytes, one pass more).
    if (!fused) fp8_act_quant({.out = p.quant_out, .scale = p.quant_scale, .in = p.out}, stream);
}

void rms_norm(const kernels::RmsNormParams& p, void* stream) { rms_norm(p, RmsNormVariant::kAuto, stream); }

}  // namespace penstock::cuda
