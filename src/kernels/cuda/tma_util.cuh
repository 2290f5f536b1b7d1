// sm_90 TMA and mbarrier helpers for warp-specialised kernels (dsa_indexer_wgmma.cu; fp8_gemm_tma.cu keeps its own
// copies for now): mbarrier init / expect_tx / arrive / parity wait, 2-d and 3-d bulk tensor loads that complete on
// an mbarrier, named-barrier sync / arrive, and the host-side encoder of a uint8 tensor map with 128-byte swizzle.
// Include from .cu files.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder comes through the runtime)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace penstock::cuda::tma {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the inits visible to the async proxy (TMA); follow with a CTA barrier.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` completed (a fresh barrier counts its phase "before 0", parity 1, done).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (done == 0);
}
// Box at coordinates (c0 innermost, c1) of `map` into shared memory at `dst`; completes `bytes` on `bar`.
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
// Named barrier `id` (1..15; 0 is __syncthreads) over `n` threads: sync waits, arrive does not.
__device__ __forceinline__ void named_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// A rank-`rank` (2 or 3) uint8 tensor map over `base` with 128-byte swizzle and zero fill out of bounds: dims and
// box innermost first, byte strides of dims 1... The caller guarantees TMA's conditions (16-byte aligned base and
// strides, box dims <= 256, inner box 128 bytes).
inline CUtensorMap encode_u8_sw128(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                                   const cuuint32_t* box) {
    static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        PENSTOCK_CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        PENSTOCK_CHECK(f != nullptr && q == cudaDriverEntryPointSuccess) << "cuTensorMapEncodeTiled not found";
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    CUtensorMap map{};
    const cuuint32_t elem_strides[3] = {1u, 1u, 1u};
    const CUresult r = encoder(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(rank),
                               const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    PENSTOCK_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << "), rank " << rank
                                      << " dims " << dims[0] << " x " << dims[1];
    return map;
}

}  // namespace penstock::cuda::tma
