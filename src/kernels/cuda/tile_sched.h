// Dynamic tile scheduling for the persistent GEMM kernels (grouped_gemm_tma.cu's kTmaDyn, fp8_gemm_tma.cu) and the
// persistent FP8 attention kernel (attention_fp8_wgmma.cu, whose tiles are query-row items): a launch's CTAs take
// tiles from one global counter (atomicAdd) in the order they become free, so the tiles running at any moment stay a
// contiguous window of the tile order and the CTAs that share a weight tile start within a few k-steps of each other
// (the static round-robin order lets them drift apart; docs/perf/2026-12-01-grouped-gemm-ws.md).
//
// Counter protocol (device side: tile_sched.cuh's next_tile / finish): int c[2] = {next tile, CTAs done}, zero between launches. Each CTA's
// producer takes t = atomicAdd(&c[0], 1) until t >= the tile count, then atomicAdd(&c[1], 1); the CTA that brings c[1]
// to gridDim.x (every c[0] increment is done by then) sets both back to zero, so the next launch that uses the pair
// starts from zero. Launches that share a pair must therefore not overlap: the pair is per (device, stream), and
// launches on one stream run in order. A captured launch keeps the pair of the stream it was captured on, so a graph
// must not be replayed concurrently with itself or with other launches that use that pair (the tests replay on the
// capturing stream; the runtime captures no graphs yet).
// A CTA that starts after the tiles ran out just finds the counter exhausted: no co-residency is assumed.
#pragma once

#include <cuda_runtime.h>

namespace penstock::cuda {

// The counter pair of `stream` on the current device (device memory, zeroed once; kDynamicTileSlots pairs per device,
// handed out to streams in first-use order, so up to that many streams never share one).
inline constexpr int kDynamicTileSlots = 64;
int* dynamic_tile_counter(cudaStream_t stream);

}  // namespace penstock::cuda
