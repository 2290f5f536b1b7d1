// Device pieces shared by the two wgmma MLA kernel files (mla_wgmma.cu: kWgmma / kWgmmaWs; mla_wgmma_pair.cu:
// kWgmmaPair): the 128-byte-swizzled tile layout, the consumers' running softmax state and output epilogue, the
// cp.async -> mbarrier arrival and the host launcher. Internal to kernels/cuda (namespace mla_detail); include from
// sm_90a .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/mla_tc_common.cuh"

namespace penstock::cuda::mla_detail {

// A 64-row tile of 576 bf16 columns is 9 column blocks of [64 rows][64 bf16 = 128 B]; 16-byte chunk c of row r sits
// at chunk c ^ (r & 7) of its row (the tensor cores' 128B swizzle of a 1024-byte atom of 8 rows).
constexpr int kBlockBytes = 64 * 128;                 // one 64-column block of a 64-row tile
constexpr int kTileBytes = (kDqk / 64) * kBlockBytes;  // 73728: 9 blocks

// Byte offset of 16-byte chunk `chunk` (range [0, 72)) of row `row` (range [0, 64)) in a swizzled tile.
__device__ __forceinline__ uint32_t swz128(int row, int chunk) {
    return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 + (((chunk ^ row) & 7) << 4));
}

// One consumer warpgroup thread's softmax state and O accumulator: rows r(hf) = 16 wr + 8 hf + g of the CTA's 64, O
// columns [256 wg, +256) (an m64n256 accumulator: o[4 i + 2 hf + e] is column 8 i + 2 t + e of row r(hf)).
// m_run is in base-2 logit units.
struct MlaConsumerState {
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2] = {0.0f, 0.0f};
    float o[128];
};

// O's rows r(0), r(1) (the thread's two accumulator rows) times c[0], c[1]: the online-softmax correction.
__device__ __forceinline__ void scale_o(MlaConsumerState& cs, const float (&c)[2]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        cs.o[4 * i + 0] *= c[0];
        cs.o[4 * i + 1] *= c[0];
        cs.o[4 * i + 2] *= c[1];
        cs.o[4 * i + 3] *= c[1];
    }
}

// Row sums (this thread's keys -> the quad -> both warpgroups, through red_s: free once every consumer passed its
// last tile's final barrier), then out = O / l and lse.
template <bool kSparse, class OutT, class Sync>
__device__ __forceinline__ void mla_store_rows(const MlaConsumerState& cs, const MlaTcArgs& a, const MlaWork& w,
                                               float* red_s, int wg, int wr, int g, int t, const Sync& sync) {
    float l_tot[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float v = cs.l_run[hf];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        if (t == 0) red_s[(16 * wr + 8 * hf + g) * 2 + wg] = v;
    }
    sync();
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const float* rs = red_s + (16 * wr + 8 * hf + g) * 2;
        l_tot[hf] = rs[0] + rs[1];
    }
    OutT* out = static_cast<OutT*>(a.out);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * wr + 8 * hf + g;
        if (r >= w.n_valid) continue;
        const int64_t tok = mla_row_token<kSparse>(a, w, r);
        const int64_t h = mla_row_head<kSparse>(a, w, r);
        const float l = l_tot[hf];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        OutT* orow = out + tok * a.o0 + h * a.o1 + 256 * wg + 2 * t;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            store2<OutT>(orow + 8 * i, cs.o[4 * i + 2 * hf] * inv, cs.o[4 * i + 2 * hf + 1] * inv);
        }
        if (wg == 0 && t == 0) {
            a.lse[tok * a.l0 + h * a.l1] = l > 0.0f ? (cs.m_run[hf] + log2f(l)) * 0.6931471805599453f : -INFINITY;
        }
    }
}

// Arrives on `bar` once all of this thread's earlier cp.async copies have landed (the arrival does not raise the
// barrier's expected count: init it with one per arriving thread).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Launches `kernel` (a __global__ taking MlaTcArgs) on n_ctas CTAs of `threads` with `smem_bytes` of dynamic shared
// memory (opted in above the 48 KiB default).
template <class Kernel>
void launch_mla_kernel(Kernel kernel, int threads, int smem_bytes, const MlaTcArgs& a, int64_t n_ctas,
                       cudaStream_t stream) {
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    kernel<<<static_cast<unsigned>(n_ctas), threads, smem_bytes, stream>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda::mla_detail
