// The device-side grouped GEMM (issue #7): out[rows of group g] = a[rows of group g] @ b[g]^T with the group offsets
// read on the device (no host copy, no stream sync: CUDA-graph capturable). cuda::grouped_gemm (kAuto) takes it when
// grouped_gemm_device_supported() holds and either n_rows / n_groups <= 192 (small groups, where it beat cuBLASLt and
// torch._grouped_mm on the H200) or the stream is being captured; else the cuBLASLt path (host copy of the offsets +
// one cublasLtMatmul per non-empty group). Env PENSTOCK_GROUPED_GEMM=cublaslt / device forces either under kAuto.
#pragma once

#include "kernels/ops.h"

namespace penstock::cuda {

enum class GroupedGemmVariant {
    kAuto,      // the device kernel where supported, else cuBLASLt (PENSTOCK_GROUPED_GEMM=cublaslt: always cuBLASLt)
    kCublasLt,  // host copy of the offsets + one cuBLASLt GEMM per non-empty group
    kDevice,    // the device kernel; checks grouped_gemm_device_supported()
};

// bf16 a / b, out bf16 or f32, k > 0 and k % 8 == 0, n % 8 == 0, 16-byte aligned rows of a, n_groups <= 4096,
// an sm_90 device (wgmma).
bool grouped_gemm_device_supported(const kernels::GroupedGemmParams& p);

// Validated by the caller (cuda::grouped_gemm's checks) and supported.
void grouped_gemm_device(const kernels::GroupedGemmParams& p, void* stream);

// cuda::grouped_gemm with an explicit variant (benches, tests).
void grouped_gemm_variant(const kernels::GroupedGemmParams& p, GroupedGemmVariant variant, void* stream);

}  // namespace penstock::cuda
