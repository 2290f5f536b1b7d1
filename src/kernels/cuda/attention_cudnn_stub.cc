// The cuDNN SDPA path when the build has no cuDNN (PENSTOCK_CUDNN OFF or not found): every call declines, so
// cuda::attention runs its own kernel.
#include "kernels/cuda/attention_cudnn.h"

namespace penstock::cuda {

bool attention_cudnn(const kernels::AttentionParams& /*p*/, void* /*stream*/, const float* /*fp8_scale_o*/) {
    return false;
}

bool attention_cudnn_built() { return false; }

}  // namespace penstock::cuda
