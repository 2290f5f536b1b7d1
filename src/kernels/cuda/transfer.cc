// Cross-device byte copies: cudaMemcpyAsync with the direction inferred by unified addressing.
#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace penstock::cuda {

void transfer(const kernels::TransferParams& p, void* stream) {
    PENSTOCK_CHECK(p.out.is_contiguous() && p.in.is_contiguous()) << "transfer of a non-contiguous view";
    PENSTOCK_CHECK_EQ(p.out.nbytes(), p.in.nbytes());
    if (p.out.nbytes() == 0) return;
    PENSTOCK_CUDA_CHECK(cudaMemcpyAsync(p.out.data, p.in.data, p.out.nbytes(), cudaMemcpyDefault,
                                        static_cast<cudaStream_t>(stream)));
}

}  // namespace penstock::cuda
