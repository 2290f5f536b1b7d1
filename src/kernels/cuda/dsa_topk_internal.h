// Shared between dsa_topk.cu (the default kernels) and dsa_topk_legacy.cu (TopkVariant::kLegacy): the launchers'
// shape checks and the legacy launcher. Host-compilable; not part of the public cuda_ops_dsa.h interface.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops_dsa.h"

namespace penstock::cuda {

struct TopkShape {
    int64_t n_rows, top_k, n_keys;
    int64_t row_len;  // the emulated torch row length (torch_row_len, or n_keys)
};

// CHECK-fails unless `p` is a valid dsa_topk call on GPU tensors with a CUDA scratch allocator.
TopkShape check_topk_params(const kernels::DsaTopkParams& p, const Allocator& alloc);

// TopkVariant::kLegacy: per-row 4-pass 8-bit radix select from global memory, serial replay of tied rows.
void dsa_topk_legacy(const kernels::DsaTopkParams& p, Allocator& alloc, void* stream);

}  // namespace penstock::cuda
