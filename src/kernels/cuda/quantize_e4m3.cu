// float / bf16 -> float8_e4m3fn, elementwise (Fp8QuantParams in kernels/cuda/cuda_ops.h). The conversion itself is
// fp8.cuh's integer routine, bit-exact with penstock::float_to_e4m3.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/vec.cuh"

namespace penstock::cuda {

namespace {

// Raw input bits -> the f32 pattern: identity for f32, a 16-bit shift for bf16 (exact).
__device__ __forceinline__ uint32_t f32_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t f32_bits(__nv_bfloat16 x) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(x)) << 16;
}

// Parallel mapping: thread t of the grid converts packs t, t + grid_threads, ... of kVec elements each
// (grid-stride loop over packs in [0, n / kVec)); the tail n % kVec elements are done by the first threads.
// kVec = 16 / sizeof(In): 16-byte loads and kVec-byte stores when the launcher found both pointers aligned.
template <class In, int kVec>
__global__ void quantize_e4m3_kernel(uint8_t* __restrict__ out, const In* __restrict__ in, int64_t n) {
    using InPack = Pack<In, kVec>;
    using OutPack = Pack<uint8_t, kVec>;
    const int64_t n_packs = n / kVec;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t i = tid; i < n_packs; i += stride) {
        const InPack v = reinterpret_cast<const InPack*>(in)[i];
        OutPack o;
#pragma unroll
        for (int j = 0; j < kVec; ++j) o.v[j] = e4m3_from_f32_bits(f32_bits(v.v[j]));
        reinterpret_cast<OutPack*>(out)[i] = o;
    }
    const int64_t tail = n_packs * kVec + tid;
    if (tail < n) out[tail] = e4m3_from_f32_bits(f32_bits(in[tail]));
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;  // enough to fill any GPU; larger n loops

template <class In>
void launch(const kernels::Fp8QuantParams& p, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(In);
    const int64_t n = p.in.numel();
    auto* out = static_cast<uint8_t*>(p.out.data);
    const auto* in = static_cast<const In*>(p.in.data);
    const bool vec_ok = is_aligned16(in) && reinterpret_cast<uintptr_t>(out) % kVec == 0;
    const int64_t per_thread = vec_ok ? kVec : 1;
    const int64_t blocks = std::min(kMaxBlocks, std::max<int64_t>(1, (n / per_thread + kThreads - 1) / kThreads));
    if (vec_ok) {
        quantize_e4m3_kernel<In, kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, in, n);
    } else {
        quantize_e4m3_kernel<In, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, in, n);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void quantize_e4m3(const kernels::Fp8QuantParams& p, void* stream) {
    PENSTOCK_CHECK(p.in.device == Device::kCUDA && p.out.device == Device::kCUDA)
        << "quantize_e4m3: tensors must be on the GPU";
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << "quantize_e4m3: in dtype " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3 || p.out.dtype == DType::kU8)
        << "quantize_e4m3: out dtype " << dtype_name(p.out.dtype);
    PENSTOCK_CHECK_EQ(p.out.numel(), p.in.numel())
        << "quantize_e4m3: out " << p.out.shape_string() << " vs in " << p.in.shape_string();
    PENSTOCK_CHECK(p.in.is_contiguous() && p.out.is_contiguous()) << "quantize_e4m3: views must be contiguous";
    if (p.in.numel() == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    if (p.in.dtype == DType::kF32) {
        launch<float>(p, s);
    } else {
        launch<__nv_bfloat16>(p, s);
    }
}

}  // namespace penstock::cuda
