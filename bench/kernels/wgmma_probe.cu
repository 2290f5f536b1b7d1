// `--only wgmma_probe`: the e4m3 wgmma issue pattern of the FP8 GEMMs (fp8_gemm_tma.cu) without memory traffic, to
// tell the tensor cores' own limits from the kernel's. One CTA per SM, one to four active warpgroups, operands loaded
// into shared memory once (e4m3 1.0 everywhere) and reused by every k-step; each k-step is `chains` chains of four
// m64nNk32 wgmmas (one 128-deep k block). Modes:
//   free:    no wait inside the loop: the chains accumulate back to back (the tensor cores' throughput for that N);
//   wait:    a wait for the chain after each one (wgmma.wait_group 0), nothing else (the chain's issue-to-done
//            latency). The chains accumulate as in free: a chain that overwrites its block and is never read is dead
//            code to ptxas, which dropped it (session 27's call A read "7600 TFLOP/s" before this; not re-run since);
//   promote: the wait, then the block scaled into f32 accumulators (32 to 96 FFMAs per chain per thread): the GEMM's
//            own per-k-block promotion;
//   pipe:    two block-register sets in turn: chain c is issued, then wait_group 1 (chain c - 1 done) and chain
//            c - 1's block promoted while chain c runs (the promotion off the chain's critical path; needs
//            kChains * NA + 2 NA registers, so only narrow chains: 4 x m64n64 or 1 x m64n128 per k-step); drained
//            every two k-steps (see the loop);
//   promote_yield: promote with a __nanosleep(0) after every 16 FFMAs (a scheduling point for the other warpgroup's
//            next chain).
// CTAs of two, three or four warpgroups (kWgs). By default three, the third idle with the GEMMs' setmaxnreg 40 / 232
// (kRegs), as the FP8 GEMMs launch: ptxas interleaves yields into the promotion's FFMAs only in such CTAs, not in
// CTAs of 256 threads (session 51). Three or four active: more chains in flight per SM, a 192 x 128 or 256 x 128
// tile's pattern.
// Operands: e4m3 1.0 by default; the last rows rerun the wide GEMM's pattern for ~0.5 s each with 1.0 and with random
// bytes (a GEMM's switching activity, so its power and clock).
// Forms: ss (A and B from shared memory, the GEMM's), rs (A from registers, m64n64 / m64n128: one warpgroup's A no
// longer read from shared memory by every chain).
// Session 26 (docs/perf/2026-12-04-s26.md) found the FP8 grouped GEMM's tensor pipe 47-58% busy, neither memory level
// at its limit, and neither a warpgroup order nor one m64n192 chain instead of two m64n128 ones faster. Session 27's
// results (docs/perf/2026-12-04-s27.md, CTAs of 256 threads): promote reaches 1500 TFLOP/s with two m64n128 chains
// per k-step and two warpgroups, 1650 with four m64n64 chains, but the GEMM on m64n64 chains ran 12-15% slower: the
// probe bounds the issue pattern, not the kernel. Session 51 (docs/perf/2026-12-06-s51.md): in a 384-thread CTA one
// m64n128 chain per k-step with two warpgroups promotes at the free rate (1742 vs 1287 TFLOP/s, the same loop), so
// the promotion is not what holds the GEMM at ~64% of the tensor pipe. TFLOP/s count 2 * 64 * N * 128 per chain and
// warpgroup.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "bench/kernels/bench_harness.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::bench {

namespace {

constexpr int kProbeSteps = 2048;                            // k-steps per warpgroup and launch
constexpr int kProbeABytes = 4 * 64 * 128;                   // A: up to four warpgroups' 64 rows of 128 bytes
constexpr int kProbeSmem = kProbeABytes + 32 * 1024 + 1024;  // + B 32 KiB (256 rows), aligned
constexpr int kModeFree = 0, kModeWait = 1, kModePromote = 2, kModePipe = 3, kModeYield = 4;
constexpr int kFormSs = 0, kFormRs = 1;

__device__ __forceinline__ uint64_t probe_desc(uint32_t saddr) { return cuda::wgmma::desc(saddr, 16, 1024); }

// One chain of four m64nNk32 (N = 2 * NA) into blk; the first overwrites unless `accumulate`.
template <int NA, int kForm>
__device__ __forceinline__ void probe_chain(float (&blk)[NA], uint32_t a, const uint32_t (&ar)[4], uint32_t b,
                                            bool accumulate) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        const uint64_t da = probe_desc(a + ks * 32), db = probe_desc(b + ks * 32);
        const int scale_d = ks != 0 || accumulate ? 1 : 0;
        if constexpr (kForm == kFormRs) {
            if constexpr (NA == 32) {
                cuda::wgmma::m64n64k32_e4m3_rs(blk, ar, db, scale_d);
            } else {
                static_assert(NA == 64, "rs: m64n64 and m64n128");
                cuda::wgmma::m64n128k32_e4m3_rs(blk, ar, db, scale_d);
            }
        } else if constexpr (NA == 32) {
            cuda::wgmma::m64n64k32_e4m3(blk, da, db, scale_d);
        } else if constexpr (NA == 64) {
            cuda::wgmma::m64n128k32_e4m3(blk, da, db, scale_d);
        } else if constexpr (NA == 96) {
            cuda::wgmma::m64n192k32_e4m3(blk, da, db, scale_d);
        } else {
            cuda::wgmma::m64n256k32_e4m3(blk, da, db, scale_d);
        }
    }
}

// NA: accumulators per chain (N / 2); kChains: chains per k-step (their B offsets 128 rows apart); kWgs: warpgroups
// of the CTA (2, 3 or 4: the register budget per thread is 65536 / (128 kWgs), so three warpgroups hold a promoted
// m64n128 chain in 168 and four only m64n64 chains in 128), active_wgs of them run. Promote mode needs
// kChains * NA + NA registers (acc + blk), pipe mode kChains * NA + 2 NA.
template <int NA, int kChains, int kMode, int kForm, int kWgs = 3, int kRegs = 232>
__global__ void __launch_bounds__(128 * kWgs, 1) wgmma_probe_kernel(int active_wgs, int random_operands, float* sink) {
    extern __shared__ __align__(1024) uint8_t probe_smem[];
    const auto raw = static_cast<uint32_t>(__cvta_generic_to_shared(probe_smem));
    const uint32_t base = (raw + 1023u) & ~1023u;
    const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;
    // e4m3 1.0 (0x38) in every operand byte, or (random_operands) hashed bytes with bit 6 clear: random signs and
    // mantissas, exponent fields 0-7 (|x| < 2, never NaN), as switching-heavy as a real GEMM's operands.
    for (int i = tid; i < (kProbeABytes + 32 * 1024) / 4; i += 128 * kWgs) {
        uint32_t v = 0x38383838u;
        if (random_operands != 0) {
            v = static_cast<uint32_t>(i) * 0x9E3779B1u + 0x7F4A7C15u;
            v ^= v >> 15;
            v *= 0x2C1B3C6Du;
            v ^= v >> 12;
            v &= 0xBFBFBFBFu;
        }
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(base + 4u * static_cast<uint32_t>(i)), "r"(v));
    }
    cuda::wgmma::fence_proxy_async();  // the stores above, before the wgmmas read them
    __syncthreads();
    if (wg >= active_wgs) {
        if constexpr (kRegs != 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        return;
    }
    if constexpr (kRegs != 0) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs) : "memory");
    const uint32_t a = base + static_cast<uint32_t>(wg) * 64 * 128, b = base + kProbeABytes;
    const uint32_t ar[4] = {0x38383838u, 0x38383838u, 0x38383838u, 0x38383838u};
    constexpr int kBufs = kMode == kModePipe ? 2 : 1;
    float blk[kBufs][NA];
    float acc[kChains][NA];
#pragma unroll
    for (int i = 0; i < NA; ++i) {
#pragma unroll
        for (int j = 0; j < kBufs; ++j) blk[j][i] = 0.0f;
#pragma unroll
        for (int h = 0; h < kChains; ++h) acc[h][i] = 0.0f;
    }
    const float scale = 1.0f + 1e-7f * static_cast<float>(tid);
    for (int kt = 0; kt < kProbeSteps; kt += 2) {  // two k-steps per iteration: the pipe's sets alternate by chain
#pragma unroll
        for (int c = 0; c < 2 * kChains; ++c) {
            const int h = c % kChains;
            const int cur = kBufs == 2 ? (c & 1) : 0;
            cuda::wgmma::reg_fence(blk[cur]);
            cuda::wgmma::fence();
            probe_chain<NA, kForm>(blk[cur], a, ar, b + static_cast<uint32_t>(h) * (2 * NA) * 128,
                                   (kMode == kModeFree || kMode == kModeWait) && (kt | c) != 0);
            cuda::wgmma::commit();
            if constexpr (kMode == kModeWait || kMode == kModePromote || kMode == kModeYield) {
                cuda::wgmma::wait<0>();
                cuda::wgmma::reg_fence(blk[0]);
            }
            if constexpr (kMode == kModePromote) {
#pragma unroll
                for (int i = 0; i < NA; ++i) acc[h][i] = fmaf(blk[0][i], scale, acc[h][i]);
            }
            if constexpr (kMode == kModeYield) {
                // promote, with a nanosleep of 0 after every 16 FFMAs: a point where the warp scheduler may issue
                // the other warpgroup's warp (its next chain) instead of this warp's next FFMA (DeepGEMM flips the
                // FFMAs' yield bits in the binary for that effect)
#pragma unroll
                for (int i = 0; i < NA; ++i) {
                    acc[h][i] = fmaf(blk[0][i], scale, acc[h][i]);
                    if (i % 16 == 15 && i + 1 < NA) __nanosleep(0);
                }
            }
            if constexpr (kMode == kModePipe) {
                // ptxas tracks wgmma groups only within the loop body (a wait_group 1 whose other group was issued
                // in the previous iteration serialises every wgmma, warning C7514), so the pipe drains at the end of
                // each iteration: the first chain's promotion waits for the second chain, the last one's for
                // nothing.
                if (c != 0) {
                    cuda::wgmma::wait<1>();  // the previous chain (the other set) is done
                    cuda::wgmma::reg_fence(blk[cur ^ 1]);
                    const int ph = (h + kChains - 1) % kChains;
#pragma unroll
                    for (int i = 0; i < NA; ++i) acc[ph][i] = fmaf(blk[cur ^ 1][i], scale, acc[ph][i]);
                }
                if (c == 2 * kChains - 1) {
                    cuda::wgmma::wait<0>();
                    cuda::wgmma::reg_fence(blk[cur]);
#pragma unroll
                    for (int i = 0; i < NA; ++i) acc[h][i] = fmaf(blk[cur][i], scale, acc[h][i]);
                }
            }
        }
    }
    cuda::wgmma::wait<0>();
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kBufs; ++j) {
        cuda::wgmma::reg_fence(blk[j]);
#pragma unroll
        for (int i = 0; i < NA; ++i) sum += blk[j][i];
    }
#pragma unroll
    for (int i = 0; i < NA; ++i) {
#pragma unroll
        for (int h = 0; h < kChains; ++h) sum += acc[h][i];
    }
    if (sum == 12345.0f) sink[tid] = sum;  // keeps the work observable; never true for these inputs
}

const char* mode_name(int mode) {
    switch (mode) {
        case kModeFree:
            return "free";
        case kModeWait:
            return "wait";
        case kModePromote:
            return "promote";
        case kModePipe:
            return "pipe";
        default:
            return "promote_yield";
    }
}

// random_operands: hashed operand bytes instead of 1.0 (see the kernel), timed over `reps` launches (the default 10
// run ~15 ms, too short for the power limit to act; 400 run ~0.5 s).
template <int NA, int kChains, int kMode, int kForm = kFormSs, int kWgs = 3, int kRegs = 232>
void probe_one(BenchContext& ctx, float* sink, int active_wgs, int random_operands = 0, int reps = 10) {
    auto* kernel = wgmma_probe_kernel<NA, kChains, kMode, kForm, kWgs, kRegs>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
    const int sms = ctx.props().n_sms;
    const auto s = static_cast<cudaStream_t>(ctx.stream().handle());
    const Timing t = ctx.time(
        [&] {
            kernel<<<sms, 128 * kWgs, kProbeSmem, s>>>(active_wgs, random_operands, sink);
            PENSTOCK_CUDA_LAUNCH_CHECK();
        },
        reps > 10 ? 20 : 2, reps);
    const int n = 2 * NA;
    const double flops = 2.0 * 64 * n * 128 * kChains * static_cast<double>(kProbeSteps) * active_wgs * sms;
    nlohmann::json r = ctx.base_record("wgmma_probe");
    r["n"] = n;
    r["chains_per_kstep"] = kChains;
    r["mode"] = mode_name(kMode);
    r["warpgroups"] = active_wgs;
    r["cta_warpgroups"] = kWgs;
    r["maxnreg"] = kRegs;
    r["form"] = kForm == kFormRs ? "rs" : "ss";
    r["operands"] = random_operands != 0 ? "random" : "ones";
    r["tflops"] = flops / (t.median_us * 1e-6) * 1e-12;
    // Cycles per chain at the device's maximum SM clock (under load the clock is lower: a lower bound).
    r["us_per_chain"] = t.median_us / (static_cast<double>(kProbeSteps) * kChains);
    ctx.report(r, t, 0.0);
}

template <int NA, int kChains>
void probe_modes(BenchContext& ctx, float* sink) {
    for (const int wgs : {1, 2}) {
        probe_one<NA, kChains, kModeFree>(ctx, sink, wgs);
        probe_one<NA, kChains, kModeWait>(ctx, sink, wgs);
        probe_one<NA, kChains, kModePromote>(ctx, sink, wgs);
    }
}

}  // namespace

void run_wgmma_probe_bench(BenchContext& ctx) {
    Tensor sink = Tensor::empty({512}, DType::kF32, ctx.alloc());
    float* s = sink.ptr<float>();
    // Two rows in session 27's 256-thread CTAs, for the comparison with the 384-thread default (see the top).
    probe_one<64, 2, kModePromote, kFormSs, 2, 0>(ctx, s, 2);
    probe_one<64, 1, kModePromote, kFormSs, 2, 0>(ctx, s, 2);
    probe_modes<64, 2>(ctx, s);               // the wide FP8 kernel: two m64n128 chains per k-step
    probe_modes<96, 1>(ctx, s);               // one m64n192 chain
    probe_one<128, 1, kModeFree>(ctx, s, 1);  // m64n256 (no room for promotion: 128 + 128 registers)
    probe_one<128, 1, kModeFree>(ctx, s, 2);
    probe_one<128, 1, kModeWait>(ctx, s, 1);
    probe_one<128, 1, kModeWait>(ctx, s, 2);
    // A from registers (two m64n128 chains per k-step)
    for (const int wgs : {1, 2}) {
        probe_one<64, 2, kModeFree, kFormRs>(ctx, s, wgs);
        probe_one<64, 2, kModePromote, kFormRs>(ctx, s, wgs);
    }
    // the promotion off the chain's critical path: 4 x m64n64 (n256 per warpgroup) and 1 x m64n128 per k-step
    for (const int wgs : {1, 2}) {
        probe_one<32, 4, kModeFree>(ctx, s, wgs);
        probe_one<32, 4, kModePromote>(ctx, s, wgs);
        probe_one<32, 4, kModePipe>(ctx, s, wgs);
        probe_one<64, 1, kModePromote>(ctx, s, wgs);
        probe_one<64, 1, kModePipe>(ctx, s, wgs);
        probe_one<32, 4, kModePipe, kFormRs>(ctx, s, wgs);
    }
    // Three warpgroups each waiting for its own chain (a 192 x 128 tile), four with m64n64 chains (256 x 128)
    probe_one<64, 1, kModeFree, kFormSs, 3, 0>(ctx, s, 3);
    probe_one<64, 1, kModePromote, kFormSs, 3, 0>(ctx, s, 3);
    probe_one<32, 2, kModeFree, kFormSs, 4, 0>(ctx, s, 4);
    probe_one<32, 2, kModePromote, kFormSs, 4, 0>(ctx, s, 4);
    // yield points (nanosleep) in the promotion: slower in session 51 (1241 vs 1492 with two warpgroups)
    probe_one<64, 2, kModeYield>(ctx, s, 2);
    // The wide FP8 GEMM's pattern (two m64n128 chains per k-step, two warpgroups) for ~0.5 s each, 1.0 then random
    // operands: the tensor cores' rate at the power limit with operands like a GEMM's (session 52).
    for (const int rnd : {0, 1}) {
        probe_one<64, 2, kModeFree>(ctx, s, 2, rnd, 400);
        probe_one<64, 2, kModePromote>(ctx, s, 2, rnd, 400);
    }
}

}  // namespace penstock::bench
