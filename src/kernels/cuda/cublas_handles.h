// cuBLASLt handles and workspaces for the CUDA backend's GEMMs.
//
// Ownership and lifetime (docs/design/cuda_backend.md "cuBLASLt handles"): there is no global mutable handle. Each
// host thread owns a thread_local cache of LtContext entries keyed by (device, stream); an entry is created on the
// first GEMM a thread enqueues on that stream and holds one cublasLtHandle_t and a kLtWorkspaceBytes device workspace
// that only work on that stream uses (so concurrent streams never share scratch). Entries live until the thread
// exits (the stage worker's lifetime), when the handle is destroyed and the workspace freed. A stream that is
// destroyed and whose address is reused by a new stream reuses the entry, which is safe: the workspace is only
// stream-ordered scratch. Host-compilable callers never see this header; only kernels/cuda/*.cu include it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace penstock::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;  // 32 MiB: NVIDIA's recommendation for Hopper

struct LtContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};

// The calling thread's context for (current device, stream); created on first use.
LtContext& lt_context(cudaStream_t stream);

}  // namespace penstock::cuda
