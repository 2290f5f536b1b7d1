// Host and device helpers shared by the CUDA launchers of kernels/ops.h: dtype dispatch, N-d strided indexing,
// row copies of arbitrary byte length, warp/block reductions, shape checks that name the op, and the resident-cluster
// launch configuration and resident-cluster count of a kernel, the current device's SM count.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "core/check.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/div_u32.h"
#include "kernels/cuda/vec.cuh"

namespace penstock::cuda {

using bf16 = __nv_bfloat16;

// Calls fn(T{}) with T = float or bf16 for `dtype` (aborts on anything else).
template <class Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
    switch (dtype) {
        case DType::kF32:
            fn(float{});
            return;
        case DType::kBF16:
            fn(bf16{});
            return;
        default:
            PENSTOCK_CHECK(false) << op << ": unsupported dtype " << dtype_name(dtype) << " (f32 or bf16)";
    }
}

inline bool is_float_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16; }

inline void check_on_gpu(const TensorView& v, const char* op, const char* name) {
    PENSTOCK_CHECK(v.device == Device::kCUDA) << op << ": " << name << " must be a GPU tensor";
}

// Shape and strides of a view (up to kMaxDims dims) by value, for kernels that walk arbitrary strided tensors.
struct StridedDesc {
    int ndim = 0;
    int64_t shape[kMaxDims] = {};
    int64_t stride[kMaxDims] = {};
};

inline StridedDesc strided_desc(const TensorView& v) {
    StridedDesc d;
    d.ndim = v.ndim;
    for (int i = 0; i < v.ndim; ++i) {
        d.shape[i] = v.size(i);
        d.stride[i] = v.stride(i);
    }
    return d;
}

// Element offset of row-major flat index `flat` in a strided view.
__device__ __forceinline__ int64_t strided_offset(const StridedDesc& d, int64_t flat) {
    int64_t off = 0;
    for (int i = d.ndim - 1; i >= 0; --i) {
        const int64_t n = d.shape[i];
        off += (flat % n) * d.stride[i];
        flat /= n;
    }
    return off;
}

// Copies `bytes` bytes from src to dst with the threads [tid, tid + n_threads, ...): 16-byte accesses when both
// pointers and the length allow, else 4-byte, else bytes.
__device__ __forceinline__ void copy_row_bytes(void* dst, const void* src, int64_t bytes, int tid, int n_threads) {
    const auto a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(bytes);
    if (a % 16 == 0) {
        auto* d = static_cast<uint4*>(dst);
        const auto* s = static_cast<const uint4*>(src);
        const int64_t n = bytes / 16;
        // Up to four 16-byte loads in flight per thread before their stores (the compiler cannot hoist loads over
        // stores that may alias), the last batch too: a row of 3.5 batches' worth (a 7168-byte e4m3 row over 128
        // threads) otherwise copied its tail one load latency per 16 bytes.
        for (int64_t i = tid; i < n; i += 4 * static_cast<int64_t>(n_threads)) {
            uint4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (i + k * static_cast<int64_t>(n_threads) < n) v[k] = s[i + k * static_cast<int64_t>(n_threads)];
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (i + k * static_cast<int64_t>(n_threads) < n) d[i + k * static_cast<int64_t>(n_threads)] = v[k];
            }
        }
    } else if (a % 4 == 0) {
        auto* d = static_cast<uint32_t*>(dst);
        const auto* s = static_cast<const uint32_t*>(src);
        for (int64_t i = tid; i < bytes / 4; i += n_threads) d[i] = s[i];
    } else {
        auto* d = static_cast<uint8_t*>(dst);
        const auto* s = static_cast<const uint8_t*>(src);
        for (int64_t i = tid; i < bytes; i += n_threads) d[i] = s[i];
    }
}

__device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ float warp_reduce_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Block-wide reduction (blockDim.x a multiple of 32, at most 1024); every thread gets the result. `scratch` holds 32
// floats of shared memory; the call ends with a barrier so scratch can be reused at once.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float x, float* scratch) {
    x = kMax ? warp_reduce_max(x) : warp_reduce_sum(x);
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int n_warps = static_cast<int>(blockDim.x) / 32;
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float r = kMax ? -INFINITY : 0.0f;
    for (int w = 0; w < n_warps; ++w) r = kMax ? fmaxf(r, scratch[w]) : r + scratch[w];  // same order everywhere
    __syncthreads();
    return r;
}

// Launch configuration of a 1-d grid of 1-d clusters of `cluster` CTAs: `cfg` for cudaLaunchKernelEx and
// cudaOccupancyMaxActiveClusters. Not copyable: cfg.attrs points into the object.
struct ClusterLaunch {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1]{};

    ClusterLaunch(int grid, int threads, int smem, int cluster, cudaStream_t stream = nullptr) {
        cfg.gridDim = dim3(static_cast<unsigned>(grid));
        cfg.blockDim = dim3(static_cast<unsigned>(threads));
        cfg.dynamicSmemBytes = static_cast<size_t>(smem);
        cfg.stream = stream;
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    ClusterLaunch(const ClusterLaunch&) = delete;
    ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// How many clusters of `cluster` CTAs of `kernel` (threads per CTA, dynamic shared memory bytes) can be resident at
// once on the current device (0: none, e.g. where clusters are not available); sets the kernel's shared memory limit.
inline int max_active_clusters(const void* kernel, int threads, int smem, int cluster) {
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const ClusterLaunch cl(cluster, threads, smem, cluster);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cl.cfg) != cudaSuccess) {
        (void)cudaGetLastError();  // not a sticky error: no clusters here
        return 0;
    }
    return n;
}

// Streaming multiprocessors of the current device.
inline int current_device_sms() {
    int dev = 0, sms = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

// PENSTOCK_MEMBW_BASELINE=1 selects the kernels from before each memory-bandwidth pass, for same-run A/B benchmarks
// only (docs/perf/2026-12-01-memory-bound.md and later pages): the copy paths (data_movement.cu), short_conv's and the
// two-pass bf16 attn_res_mix (kda.cu), fp8_act_quant's 8-column mapping. Read once per process.
inline bool membw_baseline() {
    static const bool v = [] {
        const char* e = std::getenv("PENSTOCK_MEMBW_BASELINE");
        return e != nullptr && e[0] == '1';
    }();
    return v;
}

inline unsigned blocks_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > (int64_t{1} << 30)) b = int64_t{1} << 30;  // grid-stride loops cover the rest
    return static_cast<unsigned>(b > 0 ? b : 1);
}

}  // namespace penstock::cuda
