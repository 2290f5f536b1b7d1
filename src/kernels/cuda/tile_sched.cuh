// The device side of tile_sched.h's counter protocol, shared by the kernels that hand tiles out dynamically
// (grouped_gemm_tma.cu's kTmaDyn, fp8_gemm_tma.cu, attention_fp8_wgmma.cu). Device-only; include from .cu files.
#pragma once

#include <cuda_runtime.h>

namespace penstock::cuda::tile_sched {

// The next tile of this launch (one thread per CTA takes them; ids past the tile count mean "no more").
__device__ __forceinline__ int next_tile(int* pair) { return atomicAdd(pair, 1); }

// Called once per CTA after its last next_tile (the one that returned an id past the tile count): the last of the
// launch's n_ctas CTAs sets the pair back to zero for the next launch that uses it.
__device__ __forceinline__ void finish(int* pair, int n_ctas) {
    __threadfence();
    if (atomicAdd(pair + 1, 1) == n_ctas - 1) {
        atomicExch(pair, 0);
        atomicExch(pair + 1, 0);
    }
}

}  // namespace penstock::cuda::tile_sched
