// Failure reporting for PENSTOCK_CUDA_CHECK / PENSTOCK_CUBLAS_CHECK.
#include "kernels/cuda/cuda_check.h"

#include <cstdio>
#include <cstdlib>

#if PENSTOCK_ENABLE_CUBLASLT
#include <cublasLt.h>
#endif

namespace penstock::cuda::detail {

namespace {

// The current device, or -1 when even that query fails (e.g. the error is the driver itself).
int current_device_or_minus_one() {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) device = -1;
    return device;
}

}  // namespace

void cuda_check_failed(cudaError_t err, const char* stmt, const char* func, const char* file, int line) {
    std::fprintf(stderr, "%s:%d: CUDA error %s (%d): %s\n  in %s, device %d, statement: %s\n", file, line,
                 cudaGetErrorName(err), static_cast<int>(err), cudaGetErrorString(err), func,
                 current_device_or_minus_one(), stmt);
    std::fflush(stderr);
    std::abort();
}

void cublas_check_failed(int status, const char* stmt, const char* func, const char* file, int line) {
#if PENSTOCK_ENABLE_CUBLASLT
    const auto s = static_cast<cublasStatus_t>(status);
    const char* name = cublasLtGetStatusName(s);
    const char* text = cublasLtGetStatusString(s);
#else
    const char* name = "CUBLAS_STATUS";
    const char* text = "(cuBLASLt not linked: see the cublas_api.h enum for this code)";
#endif
    std::fprintf(stderr, "%s:%d: cuBLAS error %s (%d): %s\n  in %s, device %d, statement: %s\n", file, line, name,
                 status, text, func, current_device_or_minus_one(), stmt);
    std::fflush(stderr);
    std::abort();
}

}  // namespace penstock::cuda::detail
