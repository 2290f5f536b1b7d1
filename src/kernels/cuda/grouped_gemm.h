// The device-side grouped GEMM (issue #7): out[rows of group g] = a[rows of group g] @ b[g]^T with the group offsets
// read on the device (no host copy, no stream sync: CUDA-graph capturable). cuda::grouped_gemm (kAuto) takes the
// default device kernel (kDevice = kTmaDynCluster) when grouped_gemm_device_supported() holds and either the groups are
// small (n_rows / n_groups <= 512) or the stream is being captured; else the cuBLASLt path (host copy of the offsets +
// one cublasLtMatmul per non-empty group), which cannot run under capture: an unsupported call on a capturing stream
// fails with the reason. Env PENSTOCK_GROUPED_GEMM=cublaslt / device forces either under kAuto (capture: device).
// Measured on the H200: docs/perf/2026-12-01-grouped-gemm-ws.md (the static kernels), 2026-12-01-grouped-gemm-dyn.md.
#pragma once

#include "kernels/ops.h"

namespace penstock::cuda {

enum class GroupedGemmVariant {
    kAuto,           // the rule above
    kCublasLt,       // host copy of the offsets + one cuBLASLt GEMM per non-empty group
    kDevice,         // the default device kernel (grouped_gemm_default_device_kernel()); checks
                     // grouped_gemm_device_supported()
    kTma,            // grouped_gemm_tma.cu: TMA producer warpgroup + 2 wgmma consumer warpgroups, one CTA per SM,
                     // static round-robin tile order
    kTmaCluster,     // the same in 2-CTA clusters that multicast the shared weight tile (slower on the H200)
    kTmaK32,         // kTma with a 32-wide k-step (64-byte rows): 8 stages of 24 KiB instead of 4 of 48 KiB (slower)
    kWsCpAsync,      // kTma's warp specialisation with a cp.async producer warpgroup instead of TMA
    kTmaDyn,         // kTma with tiles handed out by a global counter in order (tile_sched.h)
    kTmaDynCluster,  // kTmaDyn in 2-CTA clusters: units of two tiles that share the weight (or activation) tile
                     // handed out in order, each CTA loading half of the shared tile multicast to both: the
                     // default (kDevice)
    kCpAsync,        // grouped_gemm.cu: cp.async loads by all 256 threads, a CTA barrier per k-step (first version)
};

// Why the device kernels cannot take this call, or nullptr when they can. They need: bf16 a / b, out bf16 or f32,
// k > 0 and k % 8 == 0 (16-byte rows for TMA / cp.async), n % 8 == 0, 16-byte aligned a / b, a's row stride a
// multiple of 8, 1 <= n_groups <= 4096, an sm_90 device (wgmma).
const char* grouped_gemm_device_unsupported(const kernels::GroupedGemmParams& p);
inline bool grouped_gemm_device_supported(const kernels::GroupedGemmParams& p) {
    return grouped_gemm_device_unsupported(p) == nullptr;
}

// Runs device kernel `kernel` (kDevice or one of the named kernels). Validated by the caller (cuda::grouped_gemm's
// checks) and supported.
void grouped_gemm_device(const kernels::GroupedGemmParams& p, GroupedGemmVariant kernel, void* stream);

// The warp-specialised kernel (grouped_gemm_tma.cu), in the configurations the variants name: {cluster 1, k_step 64}
// (kTma), {2, 64} (kTmaCluster), {1, 32} (kTmaK32), {1, 64, cp_async_producer} (kWsCpAsync), {1, 64, dynamic_tiles}
// (kTmaDyn), {2, 64, dynamic_tiles} (kTmaDynCluster).
struct TmaKernelConfig {
    int cluster = 1;
    int k_step = 64;
    bool cp_async_producer = false;
    bool dynamic_tiles = false;  // kTmaDyn
};
// sms = the multiprocessor count.
void grouped_gemm_tma(const kernels::GroupedGemmParams& p, const TmaKernelConfig& cfg, int sms, void* stream);
// The grid of kTmaCluster on this device: 2 x the co-resident 2-CTA clusters (0 when none).
int grouped_gemm_tma_cluster_ctas();

// The kTmaDyn kernel with the gated activation in its epilogue (cuda::grouped_gemm_glu): b [n_groups, 2 I, k] with
// the gate rows first, out [n_rows, I] bf16 = act(bf16(a @ gate^T), bf16(a @ up^T)); I a multiple of 128. The same
// accumulators as kTmaDyn on the [2 I] problem (same tiles along k, wgmma per element), the same rounding and
// glu_act.cuh's formulas: bit-exact with kTmaDyn followed by silu_mul / situ_mul.
enum class GluEpilogue { kSilu, kSitu };
// pairs: kTmaDynCluster's 2-CTA clusters instead (the same values: each element's products in the same order).
void grouped_gemm_glu_tma(const kernels::GroupedGemmParams& p, GluEpilogue act, float situ_beta, float situ_linear_beta,
                          int sms, void* stream, bool pairs = false);
// The kernel kDevice runs (and whether the fused gated form runs in pairs): kTmaDynCluster, or kTmaDyn when the
// environment sets PENSTOCK_GG_PAIRS=0 (measurement knob, read once). Where no 2-CTA cluster can be resident, the
// pairs' launch falls back to kTmaDyn's.
GroupedGemmVariant grouped_gemm_default_device_kernel();
// Whether cuda::grouped_gemm (kAuto) would run `p` on the default device kernel on this stream (the rule above).
bool grouped_gemm_auto_takes_device(const kernels::GroupedGemmParams& p, void* stream);

// cuda::grouped_gemm with an explicit variant (benches, tests).
void grouped_gemm_variant(const kernels::GroupedGemmParams& p, GroupedGemmVariant variant, void* stream);

}  // namespace penstock::cuda
