// Fatal checks for CUDA runtime and cuBLAS(Lt) calls (error tier 2 of STYLE.md): a failing call prints the device,
// function, file:line, the statement and the error's name and text, then aborts. Expected failures (no GPU at all)
// are not checked this way: kernels/cuda/device.h returns Status for those.
#pragma once

#include <cuda_runtime_api.h>

namespace penstock::cuda::detail {

[[noreturn]] void cuda_check_failed(cudaError_t err, const char* stmt, const char* func, const char* file, int line);
// `status` is a cublasStatus_t (0 is CUBLAS_STATUS_SUCCESS); taken as int so this header needs no cuBLAS headers.
[[noreturn]] void cublas_check_failed(int status, const char* stmt, const char* func, const char* file, int line);

}  // namespace penstock::cuda::detail

#define PENSTOCK_CUDA_CHECK(expr)                                                                                 \
    do {                                                                                                          \
        const cudaError_t penstock_cuda_err_ = (expr);                                                            \
        if (penstock_cuda_err_ != cudaSuccess) [[unlikely]] {                                                     \
            ::penstock::cuda::detail::cuda_check_failed(penstock_cuda_err_, #expr, __func__, __FILE__, __LINE__); \
        }                                                                                                         \
    } while (0)

#define PENSTOCK_CUBLAS_CHECK(expr)                                                                           \
    do {                                                                                                      \
        const int penstock_cublas_status_ = static_cast<int>(expr);                                           \
        if (penstock_cublas_status_ != 0) [[unlikely]] {                                                      \
            ::penstock::cuda::detail::cublas_check_failed(penstock_cublas_status_, #expr, __func__, __FILE__, \
                                                          __LINE__);                                          \
        }                                                                                                     \
    } while (0)

// After every kernel launch. Debug builds: cudaGetLastError() catches bad launch configurations at the launch site.
// Release builds: nothing (a launch error then surfaces at the next checked call on the stream).
#ifdef NDEBUG
#define PENSTOCK_CUDA_LAUNCH_CHECK() \
    do {                             \
    } while (0)
#else
#define PENSTOCK_CUDA_LAUNCH_CHECK() PENSTOCK_CUDA_CHECK(cudaGetLastError())
#endif
