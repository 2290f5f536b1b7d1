// Chunkwise KDA gated delta rule on tensor cores (mma.sync m16n8k8, tf32 operands rounded to nearest, fp32
// accumulation). Same contract and formulas as the fp32 chunk kernel in kda_delta_rule.cu and the reference
// (kernels/ref/kda.cc); design notes in docs/design/kernels.md ("KDA chunk kernel on tensor cores").
//
// One CTA of 8 warps per (sequence, head) walks the sequence's chunks of C = 64 rows. The state S [K][V] never leaves
// registers: warp w owns the 16 value columns j in [16w, 16w + 16) of S^T (16 x 128 fp32 accumulators), so every
// state product (V' = U - W S, Q S, S += K^T V') runs on the warp's own rows and an accumulator tile is fed straight
// back as an A operand (the k index of every fragment is permuted the same way on both operands: column 2t / 2t+1 of
// an 8-wide slab sits where mma expects t / t+4, which leaves the products unchanged).
//
// Per chunk, with G the inclusive cumulative log decay from the chunk start (padded rows have g = 0, k = q = v = 0):
//   the 64 rows form four 16-row blocks b with reference rows 16b; R(b+1) = 16(b+1) (R(4) = 63).
//   Ksc_i = k_i e^{G_i - G_16b},  Qsc_i = scale q_i e^{G_i - G_16b},  F_m = k_m e^{G_R(bm+1) - G_m}  (all <= |k|, |q|)
//   off-diagonal blocks bi > bm:  sum_d k_i k_m e^{G_i - G_m} = sum_d Ksc_i e^{G_16bi - G_R(bm+1)} F_m  (factors <= 1)
//   diagonal blocks: reference row 16b + 8, A = Ksc_i e^{G_16b - G_16b+8}, B = F_m e^{G_16b+8 - G_R(b+1)}; the
//     factors reach e^{span} with span = max_d (G_16b - G_R(b+1)); a block whose span exceeds kMaxSpan (no f32
//     overflow or underflow below it) is computed exactly on CUDA cores instead (per-element exponentials).
//   L = beta (K K^T) strictly lower, A = (scale Q) K^T lower with the diagonal; T_bb = (I + L_bb)^-1 per block;
//   [W | U] = (I + L)^-1 [beta K e^G | beta V] by block forward substitution (warp-local columns);
//   V' = U - W S;  O = (Q e^G) S + A V';  S = e^{G_63} S + (K e^{G_63 - G})^T V'.
// Operands that several warps read (-L, T_bb, Ksc / Qsc / F, the right-hand sides and X blocks of the solve, W, Q e^G,
// Kd) are rounded to tf32 once, when written to shared memory, so that the products load them unconverted.
//
// Two forms:
//   kTensorCore (delta_rule_chunk_tc_kernel): prepare_chunk (the above up to [W | U], tf32), then the state products
//     in the same CTA, chunk after chunk;
//   kTensorCoreSplit (delta_rule_chunk_split): a persistent kernel (delta_rule_prep_kernel, two 16-warp CTAs per SM)
//     forms the same per-chunk products for every (chunk, head) on bf16 tensor cores and stores bf16 records;
//     delta_rule_state_kernel then runs only the state products per (sequence, head) on bf16 tensor cores
//     (m16n8k16, ldmatrix), the next chunk's record double-buffered.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kda_chunk_tc.h"
#include "kernels/cuda/tile_util.cuh"

namespace penstock::cuda {

namespace {

using tile::cp_async_16;
using tile::cp_async_commit;
using tile::cp_async_wait;
using tile::cp_async_wait_all;
using tile::smem_u32;

constexpr int kC = 64;         // chunk rows
constexpr int kD = 128;        // padded k_dim and v_dim
constexpr int kThreads = 256;  // 8 warps
constexpr int kP = 136;        // pitch (floats) of the [row][d] buffer G: = 8 mod 32
constexpr int kPW = 144;       // pitch of K and Q (W, Q e^G are read as 16-byte B fragments): = 16 mod 32
constexpr int kPV = 132;       // pitch of the [row][j] V / U buffer: = 4 mod 32
constexpr int kPL = 72;        // pitch of the 64 x 64 L and A buffers
constexpr int kPT = 24;        // pitch of the 16 x 16 T_bb blocks
constexpr float kMaxSpan = 80.0f;  // e^80 = 5.5e34 < FLT_MAX, e^-80 = 1.8e-35 > FLT_MIN

// Per-column vectors kept for the chunk (index into vec[kVecs][kD]).
enum Vec : int {
    kV1 = 0,     // 4: e^{G_16b - G_16b+8}
    kV2 = 4,     // 4: e^{G_16b+8 - G_R(b+1)}
    kD02 = 8,    // e^{G_32 - G_16}   (bm 0 -> bi 2)
    kD03 = 9,    // e^{G_48 - G_16}   (bm 0 -> bi 3)
    kD13 = 10,   // e^{G_48 - G_32}   (bm 1 -> bi 3)
    kEG = 11,    // 4: e^{G_16b}
    kKdF = 15,   // 3: e^{G_63 - G_R(b+1)}, b < 3
    kGn = 18,    // e^{G_63}
    kGr = 19,    // 5: G_0, G_16, G_32, G_48, G_63 (the reference rows 16b and R(b+1))
    kOnes = 24,  // 1.0 (an unscaled operand)
    kVecs = 25,
};

// PW: the pitch of k and q. The fused kernel reads W and Q e^G as 16-byte B fragments (PW = 144, = 16 mod 32).
template <int PW>
struct SmemT {
    static constexpr int kPW = PW;
    float k[kC * PW];   // k -> Ksc -> beta K e^G -> W
    float q[kC * PW];   // q -> Qsc -> scale Q e^G
    float g[kC * kP];   // g -> G -> F -> K e^{G_63 - G}
    float v[kC * kPV];  // v -> beta V -> U
    float l[kC * kPL];  // L (strictly lower, beta-scaled)
    float a[kC * kPL];  // A (lower with the diagonal)
    float t[4 * 16 * kPT];
    float vec[kVecs * kD];
    float beta[kC];
    int span_bad[4];
};
using Smem = SmemT<kPW>;

__device__ __forceinline__ uint32_t tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// e^x through the SFU (ex2.approx, relative error ~2^-22): the factors feed tf32 operands (2^-11) anyway.
__device__ __forceinline__ float fexp(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
    return r;
}
__device__ __forceinline__ float round_tf32(float x) { return __uint_as_float(tf32(x)); }

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Fragments with the permuted k index (lane = 4 g + t): A[g][2t], A[g+8][2t], A[g][2t+1], A[g+8][2t+1];
// B[k = 2t][n = g], B[k = 2t+1][n = g]. p points at element [0][0] of the 16 x 8 (A) or 8 x 8 (B) slab.
struct FragA {
    uint32_t x[4];
};
// A from values already rounded to tf32 in shared memory (no conversion).
__device__ __forceinline__ FragA load_a_raw(const float* p, int pitch, int g, int t) {
    const float2 lo = *reinterpret_cast<const float2*>(p + g * pitch + 2 * t);
    const float2 hi = *reinterpret_cast<const float2*>(p + (g + 8) * pitch + 2 * t);
    return {{__float_as_uint(lo.x), __float_as_uint(hi.x), __float_as_uint(lo.y), __float_as_uint(hi.y)}};
}
// A whose columns are scaled by a per-k vector s (s points at the slab's first k).
__device__ __forceinline__ FragA load_a_scaled(const float* p, int pitch, const float* s, int g, int t, float sign) {
    const float2 lo = *reinterpret_cast<const float2*>(p + g * pitch + 2 * t);
    const float2 hi = *reinterpret_cast<const float2*>(p + (g + 8) * pitch + 2 * t);
    const float s0 = sign * s[2 * t], s1 = sign * s[2 * t + 1];
    return {{tf32(lo.x * s0), tf32(hi.x * s0), tf32(lo.y * s1), tf32(hi.y * s1)}};
}
// B stored as B^T, i.e. [n][k] rows (p at [n0][k0]), columns scaled by a per-k vector s.
__device__ __forceinline__ void load_b_nk_scaled(const float* p, int pitch, const float* s, int g, int t,
                                                 uint32_t& b0, uint32_t& b1) {
    const float2 x = *reinterpret_cast<const float2*>(p + g * pitch + 2 * t);
    b0 = tf32(x.x * s[2 * t]);
    b1 = tf32(x.y * s[2 * t + 1]);
}
// The same for operands already rounded to tf32 in shared memory.
__device__ __forceinline__ void load_b_nk_raw(const float* p, int pitch, int g, int t, uint32_t& b0, uint32_t& b1) {
    const float2 x = *reinterpret_cast<const float2*>(p + g * pitch + 2 * t);
    b0 = __float_as_uint(x.x);
    b1 = __float_as_uint(x.y);
}
// B stored [k][n] (p at [k0][n0]), values already rounded to tf32.
__device__ __forceinline__ void load_b_kn_raw(const float* p, int pitch, int g, int t, uint32_t& b0, uint32_t& b1) {
    b0 = __float_as_uint(p[(2 * t) * pitch + g]);
    b1 = __float_as_uint(p[(2 * t + 1) * pitch + g]);
}
// The state's column order: S^T n-tile nd (16 of them over d), column c (0..7) holds d = dmap(nd, c). Pairs of tiles
// (2p, 2p+1) cover d in [16p, 16p + 16) so that lane t's four k values of two consecutive slabs, d = 16p + 4t .. +3,
// are contiguous: one 16-byte load gives the B fragments of both slabs.
__device__ __forceinline__ int dmap(int nd, int c) { return 16 * (nd >> 1) + 4 * (c >> 1) + 2 * (nd & 1) + (c & 1); }

// An accumulator tile (rows g / g+8, columns 2t / 2t+1) as the A operand of the next product.
__device__ __forceinline__ FragA acc_as_a(const float (&c)[4], float sign) {
    return {{tf32(sign * c[0]), tf32(sign * c[2]), tf32(sign * c[1]), tf32(sign * c[3])}};
}

// Stage rows [c0, c0 + n) of head h of the tensors in `mask` (kStageK | kStageQ | kStageG | kStageV), zero-padded to
// 64 rows and 128 columns: 16-byte cp.async (not committed here) when every row is 16-byte aligned (kVec), plain loads
// otherwise.
constexpr int kStageK = 1, kStageQ = 2, kStageG = 4, kStageV = 8, kStageAll = 15;
template <int kThreadsT, bool kVec, class Sm>
__device__ __forceinline__ void stage_rows(Sm& sm, const DeltaArgs& a, int h, int c0, int n, int tid, int mask) {
    const int K = a.k_dim, V = a.v_dim;
    constexpr int PW = Sm::kPW;
    float* const vbuf = sm.v;
    if constexpr (kVec) {
        for (int e = tid; e < kC * (kD / 4); e += kThreadsT) {
            const int i = e >> 5, d = 4 * (e & 31);
            const bool row_ok = i < n;
            const int64_t r = c0 + (row_ok ? i : 0);
            const bool k_ok = row_ok && d < K, v_ok = row_ok && d < V;
            const int64_t dk = k_ok ? d : 0, dv = v_ok ? d : 0;
            if (mask & kStageK) {
                cp_async_16(smem_u32(&sm.k[i * PW + d]), a.k + r * a.k0 + static_cast<int64_t>(h) * a.k1 + dk, k_ok);
            }
            if (mask & kStageQ) {
                cp_async_16(smem_u32(&sm.q[i * PW + d]), a.q + r * a.q0 + static_cast<int64_t>(h) * a.q1 + dk, k_ok);
            }
            if (mask & kStageG) {
                cp_async_16(smem_u32(&sm.g[i * kP + d]), a.g + r * a.g0 + static_cast<int64_t>(h) * a.g1 + dk, k_ok);
            }
            if (mask & kStageV) {
                cp_async_16(smem_u32(&vbuf[i * kPV + d]), a.v + r * a.v0 + static_cast<int64_t>(h) * a.v1 + dv, v_ok);
            }
        }
    } else {
        for (int e = tid; e < kC * kD; e += kThreadsT) {
            const int i = e >> 7, d = e & (kD - 1);
            const int64_t r = c0 + i;
            const bool k_ok = i < n && d < K, v_ok = i < n && d < V;
            const int64_t hk = static_cast<int64_t>(h);
            if (mask & kStageK) sm.k[i * PW + d] = k_ok ? a.k[r * a.k0 + hk * a.k1 + d] : 0.0f;
            if (mask & kStageQ) sm.q[i * PW + d] = k_ok ? a.q[r * a.q0 + hk * a.q1 + d] : 0.0f;
            if (mask & kStageG) sm.g[i * kP + d] = k_ok ? a.g[r * a.g0 + hk * a.g1 + d] : 0.0f;
            if (mask & kStageV) vbuf[i * kPV + d] = v_ok ? a.v[r * a.v0 + hk * a.v1 + d] : 0.0f;
        }
    }
}

// Phases 1-6 of a chunk (rows [c0, c0 + n) of head h) of the fused kernel, with kWarps warps (8; the 16- and 32-warp
// job splits are kept generic): stage q, k, g, v; the cumulative decay and the chunk's per-column vectors; the factored
// operands; L and A; T_bb; [W | U]. Leaves in shared memory: W (tf32-rounded) in k, scale Q e^G (tf32-rounded) in q,
// K e^{G_63 - G} (tf32-rounded) in g, U in v, A in a and e^{G_63} in vec[kGn]. Ends with a barrier. mark(phase) is
// the developer profile hook.
template <int kWarps, bool kVec, class Sm, class Mark>
__device__ __forceinline__ void prepare_chunk(Sm& sm, const DeltaArgs& a, int h, int c0, int n, int tid,
                                              Mark&& mark) {
    constexpr int kPW = Sm::kPW;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int K = a.k_dim, V = a.v_dim;
    const int kd_slabs = (K + 7) / 8;
    // 1. stage the chunk
    stage_rows<kWarps * 32, kVec>(sm, a, h, c0, n, tid, kStageAll);
    if constexpr (kVec) cp_async_commit();
    if (tid < kC) sm.beta[tid] = tid < n ? a.beta[static_cast<int64_t>(c0 + tid) * a.b0 + h] : 0.0f;
    if (tid < 4) sm.span_bad[tid] = 0;
    if constexpr (kVec) cp_async_wait_all();
    __syncthreads();
    mark(0);

    // 2. cumulative decay per column and the chunk's vectors; diagonal-block spans. kGroups row groups of kRows rows
    //    per column (thread tid: column tid % 128, group tid / 128): each thread scans its rows in registers, the
    //    groups' totals go through sm.l (free until phase 2b / 4) and each thread adds the totals of the groups above
    //    its own, in group order. Then the chunk's vectors as 7 jobs per column, job j on group j % kGroups.
    constexpr int kGroups = kWarps * 32 / kD;  // 2, 4 or 8
    constexpr int kRows = kC / kGroups;        // 32, 16 or 8
    static_assert(kGroups * kD == kWarps * 32 && kRows * kGroups == kC, "whole row groups");
    const int col = tid & (kD - 1), grp = tid / kD;
    {
        float x[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) x[i] = sm.g[(grp * kRows + i) * kP + col];
#pragma unroll
        for (int i = 1; i < kRows; ++i) x[i] += x[i - 1];
        float* totals = sm.l;  // [kGroups][kD]
        totals[grp * kD + col] = x[kRows - 1];
        __syncthreads();
        float carry = 0.0f;
        for (int j = 0; j < grp; ++j) carry += totals[j * kD + col];
#pragma unroll
        for (int i = 0; i < kRows; ++i) sm.g[(grp * kRows + i) * kP + col] = x[i] + carry;
    }
    __syncthreads();
    for (int job = grp; job < 7; job += kGroups) {  // warp-uniform: a group is four whole warps
        const int d = col;
        auto G = [&](int i) { return sm.g[i * kP + d]; };
        if (job < 4) {
            const int b = job;
            const float gb = G(16 * b), gm = G(16 * b + 8), rb = G(b < 3 ? 16 * (b + 1) : 63);
            sm.vec[(kV1 + b) * kD + d] = fexp(gb - gm);
            sm.vec[(kV2 + b) * kD + d] = fexp(gm - rb);
            sm.vec[(kEG + b) * kD + d] = fexp(gb);
            const bool bad = !(gb - rb <= kMaxSpan);  // NaN-safe
            if (__any_sync(0xffffffffu, bad) && lane == 0) sm.span_bad[b] = 1;
        } else if (job == 4) {
            const float g16 = G(16), g32 = G(32), g48 = G(48);
            sm.vec[kD02 * kD + d] = fexp(g32 - g16);
            sm.vec[kD03 * kD + d] = fexp(g48 - g16);
            sm.vec[kD13 * kD + d] = fexp(g48 - g32);
        } else if (job == 5) {
            const float g63 = G(63);
            sm.vec[(kKdF + 0) * kD + d] = fexp(g63 - G(16));
            sm.vec[(kKdF + 1) * kD + d] = fexp(g63 - G(32));
            sm.vec[(kKdF + 2) * kD + d] = fexp(g63 - G(48));
            sm.vec[kGn * kD + d] = fexp(g63);
        } else {
            sm.vec[(kGr + 0) * kD + d] = G(0);
            sm.vec[(kGr + 1) * kD + d] = G(16);
            sm.vec[(kGr + 2) * kD + d] = G(32);
            sm.vec[(kGr + 3) * kD + d] = G(48);
            sm.vec[(kGr + 4) * kD + d] = G(63);
            sm.vec[kOnes * kD + d] = 1.0f;
        }
    }
    __syncthreads();
    mark(1);
    const bool any_bad = sm.span_bad[0] | sm.span_bad[1] | sm.span_bad[2] | sm.span_bad[3];

    // 2b. diagonal blocks whose decay span is too wide for the factored form: exact, per-element exponentials
    if (any_bad) {
        for (int e = tid; e < 4 * 256; e += kWarps * 32) {
            const int b = e >> 8;
            if (!sm.span_bad[b]) continue;
            const int il = (e >> 4) & 15, ml = e & 15;
            const int i = 16 * b + il, m = 16 * b + ml;
            float kk = 0.0f, qk = 0.0f;
            if (ml <= il) {
                for (int d = 0; d < kD; ++d) {
                    const float x = expf(sm.g[i * kP + d] - sm.g[m * kP + d]) * sm.k[m * kPW + d];
                    kk = fmaf(sm.k[i * kPW + d], x, kk);
                    qk = fmaf(sm.q[i * kPW + d], x, qk);
                }
            }
            sm.l[i * kPL + m] = ml < il ? round_tf32(-sm.beta[i] * kk) : 0.0f;
            sm.a[i * kPL + m] = ml <= il ? round_tf32(a.scale * qk) : 0.0f;
        }
        __syncthreads();
    }

    // 3. factored operands, in place (each element reads only its own G and the per-column reference rows):
    //    F over G, Ksc over k, Qsc over q; beta V over v
    const float* const vin = sm.v;
    for (int e = tid; e < kC * (kD / 4); e += kWarps * 32) {
        const int i = e >> 5, d = 4 * (e & 31), b = i >> 4;
        float4& kr = *reinterpret_cast<float4*>(&sm.k[i * kPW + d]);
        float4& qr = *reinterpret_cast<float4*>(&sm.q[i * kPW + d]);
        float4& gr4 = *reinterpret_cast<float4*>(&sm.g[i * kP + d]);
        float4& vr = *reinterpret_cast<float4*>(&sm.v[i * kPV + d]);
        const float4 gi = gr4, ki = kr, qi = qr, vi = *reinterpret_cast<const float4*>(&vin[i * kPV + d]);
        const float4 gr = *reinterpret_cast<const float4*>(&sm.vec[(kGr + b) * kD + d]);
        const float4 gR = *reinterpret_cast<const float4*>(&sm.vec[(kGr + b + 1) * kD + d]);
        const float bs = sm.beta[i], sc = a.scale;
        const float e0 = fexp(gi.x - gr.x), e1 = fexp(gi.y - gr.y), e2 = fexp(gi.z - gr.z), e3 = fexp(gi.w - gr.w);
        // rounded to tf32 here: the L / A jobs whose factors are all 1 feed them to the tensor cores as they are
        kr = make_float4(round_tf32(ki.x * e0), round_tf32(ki.y * e1), round_tf32(ki.z * e2), round_tf32(ki.w * e3));
        qr = make_float4(round_tf32(qi.x * sc * e0), round_tf32(qi.y * sc * e1), round_tf32(qi.z * sc * e2),
                         round_tf32(qi.w * sc * e3));
        gr4 = make_float4(round_tf32(ki.x * fexp(gR.x - gi.x)), round_tf32(ki.y * fexp(gR.y - gi.y)),
                          round_tf32(ki.z * fexp(gR.z - gi.z)), round_tf32(ki.w * fexp(gR.w - gi.w)));
        vr = make_float4(round_tf32(vi.x * bs), round_tf32(vi.y * bs), round_tf32(vi.z * bs), round_tf32(vi.w * bs));
    }
    __syncthreads();

    mark(2);
    // 4. L and A on tensor cores: 20 16 x 16 outputs (6 off-diagonal block pairs and 4 diagonal blocks, for each
    //    of L and A) = 40 8-column tiles; K = 128 (kd_slabs used). With 8 warps a job is one tile; with 16 or 32
    //    warps a job is the L tile and the A tile of one (pair, half), which share the B fragments (20 jobs).
    constexpr bool kPairJobs = kWarps >= 16;
    constexpr int kJobs = kPairJobs ? 20 : 40;
    for (int job = warp; job < kJobs; job += kWarps) {
        const int which = kPairJobs ? 0 : job / 20;  // 0: L (K K^T) [and A when kPairJobs], 1: A (Q K^T)
        const int pair = (job % 20) >> 1, half = job & 1;
        int bi, bm;
        if (pair < 6) {  // (1,0) (2,0) (2,1) (3,0) (3,1) (3,2)
            bi = pair < 1 ? 1 : pair < 3 ? 2 : 3;
            bm = pair - bi * (bi - 1) / 2;
        } else {
            bi = bm = pair - 6;
            if (sm.span_bad[bi]) continue;  // warp-uniform: done exactly in 2b
        }
        const float* arow = (which == 0 ? sm.k : sm.q) + (16 * bi) * kPW;
        const float* qrow = sm.q + (16 * bi) * kPW;
        const float* brow = sm.g + (16 * bm + 8 * half) * kP;
        const float* avec = nullptr;
        const float* bvec = nullptr;
        if (bi == bm) {
            avec = sm.vec + (kV1 + bi) * kD;
            bvec = sm.vec + (kV2 + bi) * kD;
        } else if (bm + 1 < bi) {
            avec = sm.vec + (bm == 0 ? (bi == 2 ? kD02 : kD03) : kD13) * kD;
        }
        // independent accumulation chains (slab s feeds part[s % kChains]) so loads and mma overlap
        constexpr int kChains = kPairJobs ? 2 : 4;
        float part[kChains][4] = {};
        float part_a[kPairJobs ? kChains : 1][4] = {};
        // adjacent off-diagonal pairs have no factor vector on either side: the stored (tf32-rounded) operands go to
        // the tensor cores unconverted
        const bool plain = avec == nullptr && bvec == nullptr;
        if (avec == nullptr) avec = sm.vec + kOnes * kD;
        if (bvec == nullptr) bvec = sm.vec + kOnes * kD;
        auto slabs = [&](auto plain_c) {
            constexpr bool kPlain = decltype(plain_c)::value;
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                if (s >= kd_slabs) continue;
                uint32_t b0, b1;
                FragA fa;
                if constexpr (kPlain) {
                    load_b_nk_raw(brow + 8 * s, kP, g, t, b0, b1);
                    fa = load_a_raw(arow + 8 * s, kPW, g, t);
                } else {
                    load_b_nk_scaled(brow + 8 * s, kP, bvec + 8 * s, g, t, b0, b1);
                    fa = load_a_scaled(arow + 8 * s, kPW, avec + 8 * s, g, t, 1.0f);
                }
                mma(part[s % kChains], fa.x[0], fa.x[1], fa.x[2], fa.x[3], b0, b1);
                if constexpr (kPairJobs) {
                    const FragA fq = kPlain ? load_a_raw(qrow + 8 * s, kPW, g, t)
                                            : load_a_scaled(qrow + 8 * s, kPW, avec + 8 * s, g, t, 1.0f);
                    mma(part_a[s % kChains], fq.x[0], fq.x[1], fq.x[2], fq.x[3], b0, b1);
                }
            }
        };
        if (plain) {
            slabs(std::true_type{});
        } else {
            slabs(std::false_type{});
        }
        float acc[4], acc_a[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if constexpr (kPairJobs) {
                acc[e] = part[0][e] + part[1][e];
                acc_a[e] = part_a[0][e] + part_a[1][e];
            } else {
                acc[e] = (part[0][e] + part[1][e]) + (part[2][e] + part[3][e]);
                acc_a[e] = acc[e];
            }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = 16 * bi + g + ((e & 2) ? 8 : 0);
            const int m = 16 * bm + 8 * half + 2 * t + (e & 1);
            if (which == 0) sm.l[i * kPL + m] = (m < i) ? round_tf32(-sm.beta[i] * acc[e]) : 0.0f;
            if (which == 1 || kPairJobs) sm.a[i * kPL + m] = (m <= i) ? round_tf32(acc_a[e]) : 0.0f;
        }
    }
    __syncthreads();

    mark(3);
    // 5. T_bb = (I + L_bb)^-1 (warps 0-1: thread per block column); meanwhile the other warps finish the
    //    operands in place: beta K e^G over Ksc, scale Q e^G over Qsc, K e^{G_63 - G} over F.
    if (tid < 64) {
        const int b = tid >> 4, c = tid & 15;
        const float* L = sm.l + (16 * b) * kPL + 16 * b;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            float acc = (r == c) ? 1.0f : 0.0f;
#pragma unroll
            for (int m = 0; m < r; ++m) acc = fmaf(L[r * kPL + m], x[m], acc);  // l holds -L
            x[r] = (r < c) ? 0.0f : acc;
        }
        float* T = sm.t + b * 16 * kPT;
#pragma unroll
        for (int r = 0; r < 16; ++r) T[r * kPT + c] = round_tf32(x[r]);
    } else {
        for (int e = tid - 64; e < kC * (kD / 4); e += kWarps * 32 - 64) {
            const int i = e >> 5, d = 4 * (e & 31), b = i >> 4;
            const float4 eg = *reinterpret_cast<const float4*>(&sm.vec[(kEG + b) * kD + d]);
            const float bs = sm.beta[i];
            float4& kr = *reinterpret_cast<float4*>(&sm.k[i * kPW + d]);
            float4& qr = *reinterpret_cast<float4*>(&sm.q[i * kPW + d]);
            float4& fr = *reinterpret_cast<float4*>(&sm.g[i * kP + d]);
            const float4 k4 = kr, q4 = qr, f4 = fr;
            kr = make_float4(round_tf32(k4.x * bs * eg.x), round_tf32(k4.y * bs * eg.y), round_tf32(k4.z * bs * eg.z),
                             round_tf32(k4.w * bs * eg.w));
            qr = make_float4(round_tf32(q4.x * eg.x), round_tf32(q4.y * eg.y), round_tf32(q4.z * eg.z),
                             round_tf32(q4.w * eg.w));
            float4 kd = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            if (b < 3) kd = *reinterpret_cast<const float4*>(&sm.vec[(kKdF + b) * kD + d]);
            fr = make_float4(round_tf32(f4.x * kd.x), round_tf32(f4.y * kd.y), round_tf32(f4.z * kd.z),
                             round_tf32(f4.w * kd.w));
        }
    }
    __syncthreads();

    mark(4);
    // 6. [W | U] = (I + L)^-1 [beta K e^G | beta V] by block forward substitution X_b = T_bb (R_b - sum_{c<b} L_bc X_c),
    //    in place. The 32 8-column tiles (16 of W, then 16 of U) are split evenly over the warps, kTiles each.
    {
        constexpr int kTiles = 32 / kWarps;
        static_assert(kTiles * kWarps == 32, "8, 16 or 32 warps");
        auto tile_of = [&](int nt) { return warp * kTiles + nt; };
        auto x_on = [&](int nt) {
            const int tl = tile_of(nt);
            return tl < 16 ? 8 * tl < K : 8 * (tl - 16) < V;
        };
        auto x_col = [&](int nt) {
            const int tl = tile_of(nt);
            return tl < 16 ? sm.k + 8 * tl : sm.v + 8 * (tl - 16);
        };
        auto x_pitch = [&](int nt) { return tile_of(nt) < 16 ? kPW : kPV; };
        // accumulator element e of tile nt for block b: row 16 b + g (+8), column 2t (+1)
        auto x_elem = [&](int nt, int b, int e) -> float& {
            const int i = 16 * b + g + ((e & 2) ? 8 : 0), col = 2 * t + (e & 1);
            return x_col(nt)[i * x_pitch(nt) + col];
        };
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            float acc[kTiles][4];
#pragma unroll
            for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[nt][e] = x_elem(nt, b, e);
            }
            for (int c = 0; c < b; ++c) {
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    const float2 lo = *reinterpret_cast<const float2*>(sm.l + (16 * b + g) * kPL + 16 * c + 8 * s +
                                                                        2 * t);
                    const float2 hi = *reinterpret_cast<const float2*>(sm.l + (16 * b + g + 8) * kPL + 16 * c +
                                                                        8 * s + 2 * t);
                    const uint32_t a0 = __float_as_uint(lo.x), a1 = __float_as_uint(hi.x), a2 = __float_as_uint(lo.y),
                                   a3 = __float_as_uint(hi.y);  // -L, rounded in phase 4
#pragma unroll
                    for (int nt = 0; nt < kTiles; ++nt) {
                        if (!x_on(nt)) continue;
                        const float* base = x_col(nt);
                        const int pitch = x_pitch(nt);
                        uint32_t b0, b1;
                        load_b_kn_raw(base + (16 * c + 8 * s) * pitch, pitch, g, t, b0, b1);
                        mma(acc[nt], a0, a1, a2, a3, b0, b1);
                    }
                }
            }
            // R'_b back to its rows, then X_b = T_bb R'_b
#pragma unroll
            for (int nt = 0; nt < kTiles; ++nt) {
                if (!x_on(nt)) continue;
#pragma unroll
                for (int e = 0; e < 4; ++e) x_elem(nt, b, e) = round_tf32(acc[nt][e]);
            }
            __syncwarp();
            float x[kTiles][4] = {};
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const FragA fa = load_a_raw(sm.t + b * 16 * kPT + 8 * s, kPT, g, t);
#pragma unroll
                for (int nt = 0; nt < kTiles; ++nt) {
                    if (!x_on(nt)) continue;
                    const float* base = x_col(nt);
                    const int pitch = x_pitch(nt);
                    uint32_t b0, b1;
                    load_b_kn_raw(base + (16 * b + 8 * s) * pitch, pitch, g, t, b0, b1);
                    mma(x[nt], fa.x[0], fa.x[1], fa.x[2], fa.x[3], b0, b1);
                }
            }
            __syncwarp();
#pragma unroll
            for (int nt = 0; nt < kTiles; ++nt) {
                if (!x_on(nt)) continue;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    x_elem(nt, b, e) = round_tf32(x[nt][e]);  // a B operand of the later blocks (and W of the state)
                }
            }
            __syncwarp();
        }
    }
    __syncthreads();  // W (all columns) is read by every warp below
    mark(5);

}

template <bool kVec>
__global__ void __launch_bounds__(kThreads, 1) delta_rule_chunk_tc_kernel(DeltaArgs a, unsigned long long* prof_out) {
    extern __shared__ __align__(16) unsigned char tc_smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(tc_smem_raw);
    const int seq = static_cast<int>(blockIdx.x) / a.n_heads;
    const int h = static_cast<int>(blockIdx.x) % a.n_heads;
    const int row0 = a.cu[seq];
    const int row1 = a.cu[seq + 1];
    if (row1 <= row0) return;  // block-uniform
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int K = a.k_dim, V = a.v_dim;
    const int kd_slabs = (K + 7) / 8;
    const int j0 = 16 * warp;  // this warp's value columns
    const bool owns_cols = j0 < V;
    float* st = a.state + ((static_cast<int64_t>(a.slots[seq]) * a.n_heads + h) * K) * V;
    // developer profile (PENSTOCK_KDA_TC_PROFILE=1): CTA 0's cycles per phase, else prof_out is null
    const bool prof = prof_out != nullptr && blockIdx.x == 0 && tid == 0;
    long long t_prev = prof ? clock64() : 0;
    auto mark = [&](int phase) {
        if (prof) {
            const long long now = clock64();
            prof_out[phase] += static_cast<unsigned long long>(now - t_prev);
            t_prev = now;
        }
    };

    // S^T rows j0 + g (+8), columns d = 8 nd + 2t (+1): S[nd] = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
    float S[16][4];
#pragma unroll
    for (int nd = 0; nd < 16; ++nd) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + g + ((e & 2) ? 8 : 0), d = dmap(nd, 2 * t + (e & 1));
            S[nd][e] = (j < V && d < K) ? st[static_cast<int64_t>(d) * V + j] : 0.0f;
        }
    }

    for (int c0 = row0; c0 < row1; c0 += kC) {
        const int n = min(kC, row1 - c0);
        __syncthreads();  // the previous chunk's readers are done
        mark(6);
        prepare_chunk<8, kVec>(sm, a, h, c0, n, tid, mark);

        // 7. this warp's value columns: V'^T = U^T - S^T W^T; O^T = S^T (Q e^G)^T + V'^T A^T; S^T = e^{G_63} S^T +
        //    V'^T (K e^{G_63 - G}).
        if (owns_cols) {
            const int i_tiles = (n + 7) / 8;
            float vp[8][4];
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = 8 * ni + 2 * t + (e & 1), j = j0 + g + ((e & 2) ? 8 : 0);
                    vp[ni][e] = sm.v[i * kPV + j];
                }
            }
            // slab pairs: one 16-byte load per (row, pair) gives both slabs' B fragments (dmap)
            const int kd_pairs = (kd_slabs + 1) / 2;
#pragma unroll
            for (int p = 0; p < 8; ++p) {
                if (p >= kd_pairs) continue;
                const FragA f0 = acc_as_a(S[2 * p], -1.0f), f1 = acc_as_a(S[2 * p + 1], -1.0f);
#pragma unroll
                for (int ni = 0; ni < 8; ++ni) {
                    if (ni >= i_tiles) continue;
                    const float4 w = *reinterpret_cast<const float4*>(sm.k + (8 * ni + g) * kPW + 16 * p + 4 * t);
                    mma(vp[ni], f0.x[0], f0.x[1], f0.x[2], f0.x[3], __float_as_uint(w.x), __float_as_uint(w.y));
                    mma(vp[ni], f1.x[0], f1.x[1], f1.x[2], f1.x[3], __float_as_uint(w.z), __float_as_uint(w.w));
                }
            }
            float o[8][4] = {};
#pragma unroll
            for (int p = 0; p < 8; ++p) {
                if (p >= kd_pairs) continue;
                const FragA f0 = acc_as_a(S[2 * p], 1.0f), f1 = acc_as_a(S[2 * p + 1], 1.0f);
#pragma unroll
                for (int ni = 0; ni < 8; ++ni) {
                    if (ni >= i_tiles) continue;
                    const float4 w = *reinterpret_cast<const float4*>(sm.q + (8 * ni + g) * kPW + 16 * p + 4 * t);
                    mma(o[ni], f0.x[0], f0.x[1], f0.x[2], f0.x[3], __float_as_uint(w.x), __float_as_uint(w.y));
                    mma(o[ni], f1.x[0], f1.x[1], f1.x[2], f1.x[3], __float_as_uint(w.z), __float_as_uint(w.w));
                }
            }
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                if (ks >= i_tiles) continue;
                const FragA fa = acc_as_a(vp[ks], 1.0f);
#pragma unroll
                for (int ni = 0; ni < 8; ++ni) {
                    if (ni < ks || ni >= i_tiles) continue;
                    uint32_t b0, b1;
                    load_b_nk_raw(sm.a + (8 * ni) * kPL + 8 * ks, kPL, g, t, b0, b1);
                    mma(o[ni], fa.x[0], fa.x[1], fa.x[2], fa.x[3], b0, b1);
                }
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = 8 * ni + 2 * t + (e & 1), j = j0 + g + ((e & 2) ? 8 : 0);
                    if (i < n && j < V) {
                        a.out[static_cast<int64_t>(c0 + i) * a.o0 + static_cast<int64_t>(h) * a.o1 + j] = o[ni][e];
                    }
                }
            }
            // state
#pragma unroll
            for (int nd = 0; nd < 16; ++nd) {
                const float g0 = sm.vec[kGn * kD + dmap(nd, 2 * t)], g1 = sm.vec[kGn * kD + dmap(nd, 2 * t + 1)];
                S[nd][0] *= g0;
                S[nd][1] *= g1;
                S[nd][2] *= g0;
                S[nd][3] *= g1;
            }
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                if (ks >= i_tiles) continue;
                const FragA fa = acc_as_a(vp[ks], 1.0f);
#pragma unroll
                for (int nd = 0; nd < 16; ++nd) {
                    if (nd >= 2 * kd_pairs) continue;
                    // B (k = i, n = g) = Kd[8 ks + 2t (+1)][dmap(nd, g)]
                    const float* kd = sm.g + (8 * ks + 2 * t) * kP + dmap(nd, g);
                    mma(S[nd], fa.x[0], fa.x[1], fa.x[2], fa.x[3], __float_as_uint(kd[0]), __float_as_uint(kd[kP]));
                }
            }
        }
    }

#pragma unroll
    for (int nd = 0; nd < 16; ++nd) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + g + ((e & 2) ? 8 : 0), d = dmap(nd, 2 * t + (e & 1));
            if (j < V && d < K) st[static_cast<int64_t>(d) * V + j] = S[nd][e];
        }
    }
}


// ------------------------------------------------------------------------------------------------ split form
// kTensorCoreSplit: delta_rule_prep_kernel forms every (chunk, head)'s chunk-parallel products at once and leaves them
// in a global workspace as bf16 records; delta_rule_state_kernel then walks
// each (sequence, head)'s chunks with the state in registers and only the state products on the chain, the next
// chunk's record prefetched by cp.async while the current one is used.
//
// Record of one (chunk, head), 16-byte pieces in this order (rows past the chunk's n and columns past k_dim / v_dim are
// zero): W [64][128] bf16, scale Q e^G [64][128], (K e^{G_63 - G})^T [128][64], U^T [128][64], A [64][64] (zero above
// the diagonal), e^{G_63} [128] f32.
constexpr int kRecW = 0;
constexpr int kRecQ = kRecW + kC * kD * 2;
constexpr int kRecKdT = kRecQ + kC * kD * 2;
constexpr int kRecUT = kRecKdT + kD * kC * 2;
constexpr int kRecA = kRecUT + kD * kC * 2;
constexpr int kRecGn = kRecA + kC * kC * 2;
constexpr int kRecBytes = kRecGn + kD * 4;
constexpr int kRecPieces = kRecBytes / 16;
static_assert(kRecBytes % 16 == 0, "records are copied in 16-byte pieces");
constexpr int kStateThreads = 256;
// Stages are unpadded (rows of 128 or 64 bf16) with the 16-byte chunks of row r stored at chunk index c ^ (r & 7):
// the 8 rows an ldmatrix reads at one logical chunk fall in 8 different bank groups. Three stages fit (72.5 KB each).
constexpr int kPB = kD;  // bf16 row length of the staged W and Q e^G
constexpr int kPS = kC;  // bf16 row length of the staged Kd^T, U^T and A
constexpr int kStages = 3;

struct StateStage {
    __nv_bfloat16 w[kC * kPB];
    __nv_bfloat16 qg[kC * kPB];
    __nv_bfloat16 kdt[kD * kPS];
    __nv_bfloat16 ut[kD * kPS];
    __nv_bfloat16 a[kC * kPS];
    float gn[kD];
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// B fragments (m16n8k16) of n-tiles nt and nt + 1 at k-step kk from a bf16 tile stored [n][k] with `pitch` (a multiple
// of 8): one ldmatrix.x4, b[0..1] for nt, b[2..3] for nt + 1. Lanes 8m..8m+7 address the rows of matrix m = (n-tile
// nt + m / 2, k half m % 2).
// The same from a swizzled state stage (row r's 16-byte chunk c at c ^ (r & 7); pitch = the row length).
__device__ __forceinline__ void load_b_pair_sw(const __nv_bfloat16* tile, int pitch, int nt, int kk, int lane,
                                               uint32_t (&b)[4]) {
    const int m = lane >> 3, r = 8 * (nt + (m >> 1)) + (lane & 7);
    const __nv_bfloat16* p = tile + r * pitch + 8 * ((2 * kk + (m & 1)) ^ (r & 7));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void load_b_pair(const __nv_bfloat16* tile, int pitch, int nt, int kk, int lane,
                                            uint32_t (&b)[4]) {
    const int m = lane >> 3, r = lane & 7;
    const __nv_bfloat16* p = tile + (8 * (nt + (m >> 1)) + r) * pitch + 16 * kk + 8 * (m & 1);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(smem_u32(p)));
}

// coff[s] = the index of sequence s's first chunk among all sequences' chunks (coff[n_seqs] = their count).
__global__ void __launch_bounds__(1024) chunk_offsets_kernel(const int32_t* cu, int n_seqs, int32_t* coff) {
    using Scan = cub::BlockScan<int, 1024>;
    __shared__ typename Scan::TempStorage tmp;
    __shared__ int carry;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (int base = 0; base < n_seqs; base += 1024) {
        const int s = base + static_cast<int>(threadIdx.x);
        const int nc = s < n_seqs ? (cu[s + 1] - cu[s] + kC - 1) / kC : 0;
        int excl = 0, total = 0;
        Scan(tmp).ExclusiveSum(nc, excl, total);
        const int c = carry;
        if (s < n_seqs) coff[s] = c + excl;
        __syncthreads();
        if (threadIdx.x == 0) carry = c + total;
        __syncthreads();
    }
    if (threadIdx.x == 0) coff[n_seqs] = carry;
}

// The sequence and row range of chunk gc (coff as chunk_offsets_kernel wrote it); false past the last chunk.
__device__ __forceinline__ bool locate_chunk(const DeltaArgs& a, const int32_t* coff, int n_seqs, int gc, int& c0,
                                             int& n) {
    if (gc >= coff[n_seqs]) return false;
    int lo = 0, hi = n_seqs;  // coff[lo] <= gc < coff[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (coff[mid] <= gc) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    c0 = a.cu[lo] + kC * (gc - coff[lo]);
    n = min(kC, a.cu[lo + 1] - c0);
    return true;
}

// ------------------------------------------------------------------------------------------------ bf16 prep kernel
// delta_rule_prep_kernel: one persistent loop over the (chunk, head) items (item gc * n_heads + h), built for two CTAs
// of 16 warps per SM (~100 KB of shared memory each, 64 registers), so that one CTA's barriers and loads hide under
// the other's work. Inputs are read straight from global memory (any alignment; no staging buffers):
//   - column pass: thread (b = tid / 128, d = tid % 128) loads g, k, q of block b's 16 rows at column d (coalesced
//     scalar loads, unconditional from clamped addresses so that each tensor's 16 loads issue as one batch) and scans
//     the decay in registers; the blocks' totals and reference rows go through shared memory.
//     Every element-wise product is formed once, in registers, and stored as bf16: the A-side operands
//     Ksc_i = k_i e^{G_i - ref_b}, Qsc_i = scale q_i e^{G_i - ref_b} (ref_b = G at row 16b + 8, or at row 16b when the
//     block's span is past kMaxSpan), the B tiles of every block pair (bi >= bm) B_m = k_m e^{ref_bi - G_m}, and the
//     records scale Q e^G (row-major) and (K e^{G_63 - G})^T (16 consecutive rows of column d: two 16-byte stores).
//   - L and A: 10 block pairs x {L, A} = 20 jobs of 16 x 16 on bf16 mma.sync m16n8k16, operands by ldmatrix.
//   - T_bb = (I + L_bb)^-1 in f32 (64 threads), stored bf16.
//   - [W | U] solved transposed in registers: warp w owns 16 columns of [W | U] and X^T (16 x 64, f32 accumulators);
//     X_b^T = (R_b^T - sum_{c<b} X_c^T L_bc^T) T_bb^T with X_c^T fed back from the accumulators as A operands and
//     L, T as B operands from shared memory: 20 mma per warp and no shared-memory round trip. The right-hand sides:
//     beta K e^G from Ksc e^{ref}, beta V from global memory; W and U^T leave through a staging area over the B tiles.
//   - diagonal blocks past kMaxSpan: exact per-element exponentials from a per-CTA global scratch (rare).
constexpr int kPrepThreads = 512;
constexpr int kP2 = 136;  // bf16 pitch of the [row][d] operand tiles: 68 words, = 4 mod 32 (ldmatrix conflict-free)
constexpr int kP2L = 72;  // bf16 pitch of L (64 x 64) and of the U^T staging rows
constexpr int kP2T = 24;  // bf16 pitch of the 16 x 16 T_bb blocks
constexpr int kScratchFloats = 3 * kC * kD;  // per CTA: G, k, q of the blocks past kMaxSpan

struct PrepSmem {
    __nv_bfloat16 ksc[kC * kP2];
    __nv_bfloat16 qsc[kC * kP2];
    __nv_bfloat16 bt[10 * 16 * kP2];  // B tiles of the pairs (bi, bm), tile bi (bi + 1) / 2 + bm; then W / U^T staging
    __nv_bfloat16 l[kC * kP2L];       // -L, blocks below the diagonal
    __nv_bfloat16 t[4 * 16 * kP2T];
    float ldiag[4 * 16 * 17];  // -L of the diagonal blocks, f32 (strictly lower, zero elsewhere)
    float tot[4 * kD];
    float refg[4 * kD];   // ref_b per column
    float erefg[4 * kD];  // e^{ref_b}
    float beta[kC];
    int bad_w[16];  // per warp of the column pass: its columns' span exceeds kMaxSpan somewhere
};
static_assert(2 * (sizeof(PrepSmem) + 1024) <= 228 * 1024, "two bf16 prep CTAs per SM");
static_assert(kC * kP2 * 2 + kD * kP2L * 2 <= 10 * 16 * kP2 * 2, "W and U^T staging fit the B tiles");

// The A fragment (m16n8k16) of rows 0-15 and k-step kk of a bf16 tile stored [row][k] with `pitch` (a multiple of 8):
// one ldmatrix.x4; lanes 0-15 address rows 0-15 at k 16 kk, lanes 16-31 the same rows at k 16 kk + 8.
__device__ __forceinline__ void ldmatrix_a(const __nv_bfloat16* tile, int pitch, int kk, int lane, uint32_t (&a)[4]) {
    const __nv_bfloat16* p = tile + (lane & 15) * pitch + 16 * kk + 8 * (lane >> 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(smem_u32(p)));
}

__global__ void __launch_bounds__(kPrepThreads, 2)
    delta_rule_prep_kernel(DeltaArgs a, const int32_t* coff, int n_seqs, unsigned char* ws, float* scratch_all,
                                unsigned long long* prof_out) {
    extern __shared__ __align__(16) unsigned char tc_smem_raw[];
    PrepSmem& sm = *reinterpret_cast<PrepSmem*>(tc_smem_raw);
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int cb = tid >> 7, d = tid & (kD - 1);  // column pass: block cb, column d
    const int K = a.k_dim, V = a.v_dim;
    const int k_steps = (K + 15) / 16;
    float* const scratch = scratch_all + static_cast<size_t>(blockIdx.x) * kScratchFloats;
    const bool prof = prof_out != nullptr && blockIdx.x < 128 && tid == 0;
    long long t_prev = prof ? clock64() : 0;
    auto mark = [&](int phase) {
        if (prof) {
            const long long now = clock64();
            atomicAdd(prof_out + phase, static_cast<unsigned long long>(now - t_prev));
            t_prev = now;
        }
    };
    for (int item = static_cast<int>(blockIdx.x);; item += static_cast<int>(gridDim.x)) {
        int c0 = 0, n = 0;
        if (!locate_chunk(a, coff, n_seqs, item / a.n_heads, c0, n)) break;  // block-uniform
        const int h = item % a.n_heads;
        unsigned char* rec = ws + static_cast<size_t>(item) * kRecBytes;
        const int64_t hk = h;

        // 1. g and k of rows 16 cb + r at column d; the decay scanned within the block; span flags and totals
        if (tid < kC) sm.beta[tid] = tid < n ? a.beta[static_cast<int64_t>(c0 + tid) * a.b0 + h] : 0.0f;
        // Loads from clamped addresses (always in bounds: n >= 1), masked after: unconditional loads issue as one batch
        // (a conditional load per row compiles to a load-use pair per row, each waiting its own latency).
        const int dc = min(d, K - 1);
        float G[16], kx[16];
        {
            const float* gp = a.g + hk * a.g1 + dc;
            const float* kp = a.k + hk * a.k1 + dc;
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const int64_t row = c0 + min(16 * cb + r, n - 1);
                G[r] = __ldg(gp + row * a.g0);
                kx[r] = __ldg(kp + row * a.k0);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const bool ok = d < K && 16 * cb + r < n;
                G[r] = ok ? G[r] : 0.0f;
                kx[r] = ok ? kx[r] : 0.0f;
            }
        }
#pragma unroll
        for (int r = 1; r < 16; ++r) G[r] += G[r - 1];
        sm.tot[cb * kD + d] = G[15];
        {
            const bool bad = !(G[0] - G[15] <= kMaxSpan);  // NaN-safe; the span does not depend on the carry
            const unsigned any = __any_sync(0xffffffffu, bad);
            if (lane == 0) sm.bad_w[warp] = any ? 1 : 0;
        }
        __syncthreads();
        mark(0);

        // 2. the carry from the blocks above; the reference rows
        {
            float carry = 0.0f;
            for (int j = 0; j < cb; ++j) carry += sm.tot[j * kD + d];
#pragma unroll
            for (int r = 0; r < 16; ++r) G[r] += carry;
        }
        auto block_bad = [&](int b) {
            return (sm.bad_w[4 * b] | sm.bad_w[4 * b + 1] | sm.bad_w[4 * b + 2] | sm.bad_w[4 * b + 3]) != 0;
        };
        const bool my_bad = block_bad(cb);
        const float my_ref = my_bad ? G[0] : G[8];
        sm.refg[cb * kD + d] = my_ref;
        sm.erefg[cb * kD + d] = fexp(my_ref);
        if (cb == 3) reinterpret_cast<float*>(rec + kRecGn)[d] = fexp(G[15]);
        __syncthreads();
        mark(1);

        // 3. the operands and the row-wise records
        {
            // K e^{G_63 - G}: G_63 = the four blocks' totals added in block 3's order (its carry, then its own)
            float g63 = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) g63 += sm.tot[j * kD + d];
            uint32_t kd_w[8];
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                kd_w[r / 2] = pack_bf16(kx[r] * fexp(g63 - G[r]), kx[r + 1] * fexp(g63 - G[r + 1]));
            }
            uint4* kd_dst = reinterpret_cast<uint4*>(rec + kRecKdT + 2 * (d * kC + 16 * cb));
            kd_dst[0] = make_uint4(kd_w[0], kd_w[1], kd_w[2], kd_w[3]);
            kd_dst[1] = make_uint4(kd_w[4], kd_w[5], kd_w[6], kd_w[7]);
            // Ksc and the B tiles of the pairs (bi, cb), bi >= cb
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const int i = 16 * cb + r;
                sm.ksc[i * kP2 + d] = __float2bfloat16_rn(kx[r] * fexp(G[r] - my_ref));
            }
            for (int bi = cb; bi < 4; ++bi) {  // thread-uniform per warp
                if (bi == cb && my_bad) continue;  // the diagonal block is exact
                const float rb = sm.refg[bi * kD + d];
                __nv_bfloat16* tile = sm.bt + (bi * (bi + 1) / 2 + cb) * 16 * kP2;
#pragma unroll
                for (int r = 0; r < 16; ++r) tile[r * kP2 + d] = __float2bfloat16_rn(kx[r] * fexp(rb - G[r]));
            }
            if (__any_sync(0xffffffffu, my_bad)) {  // warp-uniform (a block is four whole warps): for the exact path
#pragma unroll
                for (int r = 0; r < 16; ++r) {
                    scratch[(0 * kC + 16 * cb + r) * kD + d] = G[r];
                    scratch[(1 * kC + 16 * cb + r) * kD + d] = kx[r];
                }
            }
        }
        {
            float qx[16];
            {
                const float* qp = a.q + hk * a.q1 + dc;
#pragma unroll
                for (int r = 0; r < 16; ++r) qx[r] = __ldg(qp + (c0 + min(16 * cb + r, n - 1)) * a.q0);
#pragma unroll
                for (int r = 0; r < 16; ++r) qx[r] = d < K && 16 * cb + r < n ? qx[r] * a.scale : 0.0f;
            }
            __nv_bfloat16* qg_dst = reinterpret_cast<__nv_bfloat16*>(rec + kRecQ);
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const int i = 16 * cb + r;
                sm.qsc[i * kP2 + d] = __float2bfloat16_rn(qx[r] * fexp(G[r] - my_ref));
                qg_dst[i * kD + d] = __float2bfloat16_rn(qx[r] * fexp(G[r]));
            }
            if (__any_sync(0xffffffffu, my_bad)) {
#pragma unroll
                for (int r = 0; r < 16; ++r) scratch[(2 * kC + 16 * cb + r) * kD + d] = qx[r];
            }
        }
        __syncthreads();
        mark(2);

        // 4. L and A: job = 2 pair + (0: L, 1: A); jobs w and w + 16
        for (int job = warp; job < 20; job += 16) {
            const int pair = job >> 1, is_a = job & 1;
            const int bi = pair < 1 ? 0 : pair < 3 ? 1 : pair < 6 ? 2 : 3;
            const int bm = pair - bi * (bi + 1) / 2;
            if (bi == bm && block_bad(bi)) continue;  // warp-uniform
            const __nv_bfloat16* arow = (is_a ? sm.qsc : sm.ksc) + 16 * bi * kP2;
            const __nv_bfloat16* btile = sm.bt + pair * 16 * kP2;
            float acc[2][4] = {};
            for (int kk = 0; kk < k_steps; ++kk) {
                uint32_t af[4], bf[4];
                ldmatrix_a(arow, kP2, kk, lane, af);
                load_b_pair(btile, kP2, 0, kk, lane, bf);
                mma_bf16(acc[0], af, bf[0], bf[1]);
                mma_bf16(acc[1], af, bf[2], bf[3]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int il = g + 8 * hf, ml = 8 * nt + 2 * t;
                    const int i = 16 * bi + il, m = 16 * bm + ml;
                    const float x0 = acc[nt][2 * hf], x1 = acc[nt][2 * hf + 1];
                    if (is_a) {
                        const float y0 = m <= i ? x0 : 0.0f, y1 = m + 1 <= i ? x1 : 0.0f;
                        *reinterpret_cast<uint32_t*>(rec + kRecA + 2 * (i * kC + m)) = pack_bf16(y0, y1);
                    } else {
                        const float nb = -sm.beta[i];
                        if (bi > bm) {
                            *reinterpret_cast<uint32_t*>(&sm.l[i * kP2L + m]) = pack_bf16(nb * x0, nb * x1);
                        } else {
                            float* ld = sm.ldiag + bi * 16 * 17 + il * 17 + ml;
                            ld[0] = ml < il ? nb * x0 : 0.0f;
                            ld[1] = ml + 1 < il ? nb * x1 : 0.0f;
                        }
                    }
                }
            }
        }
        // A above the diagonal blocks: zero (6 blocks x 16 rows x 2 pieces)
        if (tid < 192) {
            const int blk = tid >> 5, row = (tid >> 1) & 15, half = tid & 1;
            const int bi = blk < 3 ? 0 : blk < 5 ? 1 : 2;
            const int bm = blk < 3 ? blk + 1 : blk < 5 ? blk - 1 : 3;
            *reinterpret_cast<uint4*>(rec + kRecA + 2 * ((16 * bi + row) * kC + 16 * bm + 8 * half)) =
                make_uint4(0u, 0u, 0u, 0u);
        }
        // diagonal blocks past kMaxSpan: exact, per-element exponentials (from this CTA's scratch)
        if (block_bad(0) || block_bad(1) || block_bad(2) || block_bad(3)) {
            for (int e = tid; e < 4 * 256; e += kPrepThreads) {
                const int b = e >> 8;
                if (!block_bad(b)) continue;
                const int il = (e >> 4) & 15, ml = e & 15;
                const int i = 16 * b + il, m = 16 * b + ml;
                float kk = 0.0f, qk = 0.0f;
                if (ml <= il) {
                    const float* Gs = scratch;
                    const float* ks = scratch + kC * kD;
                    const float* qs = scratch + 2 * kC * kD;
                    for (int dd = 0; dd < K; ++dd) {
                        const float x = expf(Gs[i * kD + dd] - Gs[m * kD + dd]) * ks[m * kD + dd];
                        kk = fmaf(ks[i * kD + dd], x, kk);
                        qk = fmaf(qs[i * kD + dd], x, qk);
                    }
                }
                sm.ldiag[b * 16 * 17 + il * 17 + ml] = ml < il ? -sm.beta[i] * kk : 0.0f;
                reinterpret_cast<__nv_bfloat16*>(rec + kRecA)[i * kC + m] = __float2bfloat16_rn(ml <= il ? qk : 0.0f);
            }
        }
        __syncthreads();
        mark(3);

        // 5. T_bb (threads 0-63); the solve's right-hand sides X^T (warps 0-7: W columns d = 16 w + g (+8), from Ksc;
        //    warps 8-15: U columns j = 16 (w - 8) + g (+8), from v). Element e of n-tile nt: X^T[col][i], col = j0 + g +
        //    8 (e >> 1), i = 8 nt + 2 t + (e & 1).
        const bool w_side = warp < 8;
        const int j0 = 16 * (warp & 7);
        float x[8][4];
        if (w_side) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = j0 + g + 8 * (e >> 1), i = 8 * nt + 2 * t + (e & 1);
                    x[nt][e] = sm.beta[i] * __bfloat162float(sm.ksc[i * kP2 + col]) * sm.erefg[(nt >> 1) * kD + col];
                }
            }
        } else {
            const float* vp0 = a.v + hk * a.v1 + min(j0 + g, V - 1);
            const float* vp1 = a.v + hk * a.v1 + min(j0 + g + 8, V - 1);
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int64_t row = c0 + min(8 * nt + 2 * t + (e & 1), n - 1);
                    x[nt][e] = __ldg(((e >> 1) ? vp1 : vp0) + row * a.v0);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = j0 + g + 8 * (e >> 1), i = 8 * nt + 2 * t + (e & 1);
                    x[nt][e] = col < V && i < n ? sm.beta[i] * x[nt][e] : 0.0f;
                }
            }
        }
        if (tid < 64) {
            const int b = tid >> 4, c = tid & 15;
            const float* L = sm.ldiag + b * 16 * 17;
            float xs[16];
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                float acc = (r == c) ? 1.0f : 0.0f;
#pragma unroll
                for (int m = 0; m < r; ++m) acc = fmaf(L[r * 17 + m], xs[m], acc);  // ldiag holds -L
                xs[r] = (r < c) ? 0.0f : acc;
            }
            __nv_bfloat16* T = sm.t + b * 16 * kP2T;
#pragma unroll
            for (int r = 0; r < 16; ++r) T[r * kP2T + c] = __float2bfloat16_rn(xs[r]);
        }
        __syncthreads();
        mark(4);

        // 6. X_b^T = (R_b^T - sum_{c<b} X_c^T L_bc^T) T_bb^T, in registers
#pragma unroll
        for (int b = 0; b < 4; ++b) {
#pragma unroll
            for (int c = 0; c < b; ++c) {
                const uint32_t af[4] = {pack_bf16(x[2 * c][0], x[2 * c][1]), pack_bf16(x[2 * c][2], x[2 * c][3]),
                                        pack_bf16(x[2 * c + 1][0], x[2 * c + 1][1]),
                                        pack_bf16(x[2 * c + 1][2], x[2 * c + 1][3])};
                uint32_t bf[4];
                load_b_pair(sm.l + 16 * b * kP2L + 16 * c, kP2L, 0, 0, lane, bf);  // -L_bc
                mma_bf16(x[2 * b], af, bf[0], bf[1]);
                mma_bf16(x[2 * b + 1], af, bf[2], bf[3]);
            }
            const uint32_t af[4] = {pack_bf16(x[2 * b][0], x[2 * b][1]), pack_bf16(x[2 * b][2], x[2 * b][3]),
                                    pack_bf16(x[2 * b + 1][0], x[2 * b + 1][1]),
                                    pack_bf16(x[2 * b + 1][2], x[2 * b + 1][3])};
            uint32_t bf[4];
            load_b_pair(sm.t + b * 16 * kP2T, kP2T, 0, 0, lane, bf);
            float y0[4] = {}, y1[4] = {};
            mma_bf16(y0, af, bf[0], bf[1]);
            mma_bf16(y1, af, bf[2], bf[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                x[2 * b][e] = y0[e];
                x[2 * b + 1][e] = y1[e];
            }
        }
        // staging in the B tiles (free since step 4's barrier): W [64][kP2], then U^T [128][kP2L]
        __nv_bfloat16* const w_st = sm.bt;
        __nv_bfloat16* const u_st = sm.bt + kC * kP2;
        if (w_side) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = j0 + g + 8 * (e >> 1), i = 8 * nt + 2 * t + (e & 1);
                    w_st[i * kP2 + col] = __float2bfloat16_rn(x[nt][e]);
                }
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int col = j0 + g + 8 * hf, i = 8 * nt + 2 * t;
                    *reinterpret_cast<uint32_t*>(&u_st[col * kP2L + i]) = pack_bf16(x[nt][2 * hf], x[nt][2 * hf + 1]);
                }
            }
        }
        __syncthreads();
        mark(5);

        // 7. W and U^T to the record, 16-byte pieces
        for (int e = tid; e < 2 * 1024; e += kPrepThreads) {
            if (e < 1024) {
                const int i = e >> 4, p = e & 15;
                *reinterpret_cast<uint4*>(rec + kRecW + 16 * e) =
                    *reinterpret_cast<const uint4*>(&w_st[i * kP2 + 8 * p]);
            } else {
                const int f = e - 1024, j = f >> 3, p = f & 7;
                *reinterpret_cast<uint4*>(rec + kRecUT + 16 * f) =
                    *reinterpret_cast<const uint4*>(&u_st[j * kP2L + 8 * p]);
            }
        }
        mark(6);
    }
}

// One chunk's record into a stage (padded rows), as one committed cp.async group. Piece e of a part goes to row e / r
// (r = 16 pieces per W / Q e^G row, 8 per Kd^T / U^T / A row), column piece e % r; thread tid copies pieces tid,
// tid + kThreadsT, ...: the same column piece of rows a fixed stride apart, so every copy is a constant offset from
// the thread's first (straight-line code, no per-piece part test).
template <int kThreadsT>
__device__ __forceinline__ void load_record(StateStage& sg, const unsigned char* rec, int tid) {
    static_assert(kRecPieces == 4640, "walks the record layout");
    static_assert(kRecQ == 16 * 1024 && kRecKdT == 16 * 2048 && kRecUT == 16 * 3072 && kRecA == 16 * 4096 &&
                      kRecGn == 16 * 4608,
                  "W, Q e^G, Kd^T, U^T: 1024 pieces each, A 512, e^{G_63} 32");
    static_assert(512 % kThreadsT == 0 && kThreadsT >= 32, "whole passes over A's 512 pieces");
    const unsigned char* src = rec + 16 * tid;
    // byte offsets in the stage: the W / Q e^G rows (16 pieces each) and the Kd^T / U^T / A rows (8 pieces each)
    const uint32_t base = smem_u32(&sg);
    // rows tid / 16 + 16 j (W, Q e^G) and tid / 8 + 32 j (the others): the swizzle term r & 7 is the same in every pass
    static_assert(kThreadsT % 128 == 0, "rows a multiple of 8 apart between passes");
    const uint32_t ob = base + (tid >> 4) * (kPB * 2) + 16 * ((tid & 15) ^ ((tid >> 4) & 7));
    const uint32_t os = base + (tid >> 3) * (kPS * 2) + 16 * ((tid & 7) ^ ((tid >> 3) & 7));
    constexpr uint32_t kW = offsetof(StateStage, w), kQg = offsetof(StateStage, qg);
    constexpr uint32_t kKdt = offsetof(StateStage, kdt), kUt = offsetof(StateStage, ut), kA = offsetof(StateStage, a);
    constexpr uint32_t kStepB = (kThreadsT / 16) * kPB * 2, kStepS = (kThreadsT / 8) * kPS * 2;  // bytes per pass
#pragma unroll
    for (int j = 0; j < 1024 / kThreadsT; ++j) {
        cp_async_16(ob + kW + j * kStepB, src + kRecW + 16 * kThreadsT * j, true);
        cp_async_16(ob + kQg + j * kStepB, src + kRecQ + 16 * kThreadsT * j, true);
        cp_async_16(os + kKdt + j * kStepS, src + kRecKdT + 16 * kThreadsT * j, true);
        cp_async_16(os + kUt + j * kStepS, src + kRecUT + 16 * kThreadsT * j, true);
    }
#pragma unroll
    for (int j = 0; j < 512 / kThreadsT; ++j) cp_async_16(os + kA + j * kStepS, src + kRecA + 16 * kThreadsT * j, true);
    if (tid < 32) cp_async_16(smem_u32(sg.gn + 4 * tid), src + kRecGn, true);
    cp_async_commit();
}

__global__ void __launch_bounds__(kStateThreads, 1)
    delta_rule_state_kernel(DeltaArgs a, const int32_t* coff, const unsigned char* ws) {
    extern __shared__ __align__(16) unsigned char tc_smem_raw[];
    StateStage* stage = reinterpret_cast<StateStage*>(tc_smem_raw);
    const int seq = static_cast<int>(blockIdx.x) / a.n_heads;
    const int h = static_cast<int>(blockIdx.x) % a.n_heads;
    const int row0 = a.cu[seq], row1 = a.cu[seq + 1];
    if (row1 <= row0) return;  // block-uniform
    const int chunk0 = coff[seq], n_chunks = coff[seq + 1] - chunk0;
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int K = a.k_dim, V = a.v_dim;
    const int j0 = 16 * warp;  // this warp's value columns
    const bool owns_cols = j0 < V;
    float* st = a.state + ((static_cast<int64_t>(a.slots[seq]) * a.n_heads + h) * K) * V;

    auto load = [&](int c, int buf) {
        load_record<kStateThreads>(stage[buf], ws + (static_cast<size_t>(chunk0 + c) * a.n_heads + h) * kRecBytes, tid);
    };

    // S^T rows j0 + g (+8), columns d = 8 nd + 2t (+1): S[nd] = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
    float S[16][4];
#pragma unroll
    for (int nd = 0; nd < 16; ++nd) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + g + ((e & 2) ? 8 : 0), d = 8 * nd + 2 * t + (e & 1);
            S[nd][e] = (j < V && d < K) ? st[static_cast<int64_t>(d) * V + j] : 0.0f;
        }
    }

    load(0, 0);
    if (n_chunks > 1) load(1, 1);
    for (int c = 0; c < n_chunks; ++c) {
        if (c + 2 < n_chunks) {
            load(c + 2, (c + 2) % kStages);  // that stage held chunk c - 1, freed by its closing barrier
            cp_async_wait<2>();
        } else if (c + 1 < n_chunks) {
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // chunk c's record is in stage[c % kStages]
        const StateStage& sg = stage[c % kStages];
        const int c0 = row0 + kC * c, n = min(kC, row1 - c0);
        if (owns_cols) {
            // V'^T = U^T - S^T W^T (A = S^T as bf16 from the accumulators, B = W rows)
            float vp[8][4];
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int jr = j0 + g + 8 * hf;
                    const __nv_bfloat162 u =
                        *reinterpret_cast<const __nv_bfloat162*>(sg.ut + jr * kPS + 8 * (ni ^ (jr & 7)) + 2 * t);
                    vp[ni][2 * hf] = __low2float(u);
                    vp[ni][2 * hf + 1] = __high2float(u);
                }
            }
            float o[8][4] = {};
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                const uint32_t sn[4] = {pack_bf16(-S[2 * kk][0], -S[2 * kk][1]), pack_bf16(-S[2 * kk][2], -S[2 * kk][3]),
                                        pack_bf16(-S[2 * kk + 1][0], -S[2 * kk + 1][1]),
                                        pack_bf16(-S[2 * kk + 1][2], -S[2 * kk + 1][3])};
                const uint32_t sp[4] = {sn[0] ^ 0x80008000u, sn[1] ^ 0x80008000u, sn[2] ^ 0x80008000u,
                                        sn[3] ^ 0x80008000u};
#pragma unroll
                for (int ni = 0; ni < 8; ni += 2) {
                    uint32_t b[4];
                    load_b_pair_sw(sg.w, kPB, ni, kk, lane, b);
                    mma_bf16(vp[ni], sn, b[0], b[1]);
                    mma_bf16(vp[ni + 1], sn, b[2], b[3]);
                    load_b_pair_sw(sg.qg, kPB, ni, kk, lane, b);
                    mma_bf16(o[ni], sp, b[0], b[1]);
                    mma_bf16(o[ni + 1], sp, b[2], b[3]);
                }
            }
            // V'^T as A operands (k = the chunk's rows)
            uint32_t va[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                va[kk][0] = pack_bf16(vp[2 * kk][0], vp[2 * kk][1]);
                va[kk][1] = pack_bf16(vp[2 * kk][2], vp[2 * kk][3]);
                va[kk][2] = pack_bf16(vp[2 * kk + 1][0], vp[2 * kk + 1][1]);
                va[kk][3] = pack_bf16(vp[2 * kk + 1][2], vp[2 * kk + 1][3]);
            }
            // O^T += V'^T A^T (A is lower triangular: row tiles ni >= 2 kk)
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int ni = 2 * kk; ni < 8; ni += 2) {
                    uint32_t b[4];
                    load_b_pair_sw(sg.a, kPS, ni, kk, lane, b);
                    mma_bf16(o[ni], va[kk], b[0], b[1]);
                    mma_bf16(o[ni + 1], va[kk], b[2], b[3]);
                }
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = 8 * ni + 2 * t + (e & 1), j = j0 + g + ((e & 2) ? 8 : 0);
                    if (i < n && j < V) {
                        a.out[static_cast<int64_t>(c0 + i) * a.o0 + static_cast<int64_t>(h) * a.o1 + j] = o[ni][e];
                    }
                }
            }
            // S^T = e^{G_63} S^T + V'^T (K e^{G_63 - G})
#pragma unroll
            for (int nd = 0; nd < 16; ++nd) {
                const float2 gn = *reinterpret_cast<const float2*>(sg.gn + 8 * nd + 2 * t);
                S[nd][0] *= gn.x;
                S[nd][1] *= gn.y;
                S[nd][2] *= gn.x;
                S[nd][3] *= gn.y;
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int nd = 0; nd < 16; nd += 2) {
                    uint32_t b[4];
                    load_b_pair_sw(sg.kdt, kPS, nd, kk, lane, b);
                    mma_bf16(S[nd], va[kk], b[0], b[1]);
                    mma_bf16(S[nd + 1], va[kk], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // stage[c % kStages] is free for chunk c + 3
    }

#pragma unroll
    for (int nd = 0; nd < 16; ++nd) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + g + ((e & 2) ? 8 : 0), d = 8 * nd + 2 * t + (e & 1);
            if (j < V && d < K) st[static_cast<int64_t>(d) * V + j] = S[nd][e];
        }
    }
}

}  // namespace

bool delta_rule_chunk_tc_supported(int64_t k_dim, int64_t v_dim, int64_t chunk) {
    return chunk == kC && k_dim >= 1 && k_dim <= kD && v_dim >= 1 && v_dim <= kD;
}

void delta_rule_chunk_tc(const DeltaArgs& a, int64_t n_seqs, void* stream) {
    if (n_seqs == 0 || a.n_heads == 0) return;
    // 16-byte rows: every base pointer and row / head stride a multiple of 4 floats, and k_dim, v_dim too
    auto al = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; };
    const bool vec = al(a.q) && al(a.k) && al(a.v) && al(a.g) && a.k_dim % 4 == 0 && a.v_dim % 4 == 0 &&
                     (a.q0 | a.q1 | a.k0 | a.k1 | a.v0 | a.v1 | a.g0 | a.g1) % 4 == 0;
    constexpr size_t kSmem = sizeof(Smem);
    // Developer profile: PENSTOCK_KDA_TC_PROFILE=1 prints CTA 0's cycles per phase (synchronises the stream).
    static const bool kProfile = [] {
        const char* e = std::getenv("PENSTOCK_KDA_TC_PROFILE");
        return e != nullptr && e[0] == '1';
    }();
    constexpr int kPhases = 7;
    unsigned long long* prof = nullptr;
    if (kProfile) {
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&prof), kPhases * sizeof(unsigned long long),
                                            static_cast<cudaStream_t>(stream)));
        PENSTOCK_CUDA_CHECK(cudaMemsetAsync(prof, 0, kPhases * sizeof(unsigned long long),
                                            static_cast<cudaStream_t>(stream)));
    }
    auto launch = [&](auto kernel) {
        PENSTOCK_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
        kernel<<<static_cast<unsigned>(n_seqs * a.n_heads), kThreads, kSmem, static_cast<cudaStream_t>(stream)>>>(
            a, prof);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    };
    if (vec) {
        launch(delta_rule_chunk_tc_kernel<true>);
    } else {
        launch(delta_rule_chunk_tc_kernel<false>);
    }
    if (prof != nullptr) {
        unsigned long long h[kPhases];
        PENSTOCK_CUDA_CHECK(cudaMemcpyAsync(h, prof, sizeof(h), cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)));
        PENSTOCK_CUDA_CHECK(cudaFreeAsync(prof, static_cast<cudaStream_t>(stream)));
        PENSTOCK_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
        const char* names[kPhases] = {"load", "scan", "operands", "L/A", "T/finish", "solve", "state/out"};
        unsigned long long total = 0;
        for (unsigned long long x : h) total += x;
        std::fprintf(stderr, "[kda_tc profile] CTA 0 cycles:");
        for (int i = 0; i < kPhases; ++i) {
            std::fprintf(stderr, " %s %llu (%.1f%%)", names[i], h[i], total ? 100.0 * h[i] / total : 0.0);
        }
        std::fprintf(stderr, "\n");
    }
}


void delta_rule_chunk_split(const DeltaArgs& a, int64_t n_seqs, int64_t n_tokens, void* stream) {
    if (n_seqs == 0 || a.n_heads == 0 || n_tokens == 0) return;
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    // Every sequence adds at most one partial chunk: the grid's upper bound on the chunk count.
    const int64_t max_chunks = (n_tokens + kC - 1) / kC + n_seqs;
    PENSTOCK_CHECK(max_chunks < (int64_t{1} << 31)) << "gated_delta_rule_chunk: " << n_tokens << " tokens";
    int device = 0, sms = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&device));
    PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t prep_items = max_chunks * a.n_heads;
    PENSTOCK_CHECK(prep_items < (int64_t{1} << 31)) << "gated_delta_rule_chunk: " << n_tokens << " tokens";
    // Persistent prep CTAs, two per SM (fewer when there are fewer items).
    const unsigned prep_ctas = static_cast<unsigned>(std::min<int64_t>(prep_items, 2 * sms));
    const size_t head_bytes = (static_cast<size_t>(n_seqs + 1) * sizeof(int32_t) + 255) / 256 * 256;
    const size_t rec_bytes = static_cast<size_t>(max_chunks) * static_cast<size_t>(a.n_heads) * kRecBytes;
    const size_t scratch_bytes = static_cast<size_t>(prep_ctas) * kScratchFloats * sizeof(float);
    const size_t bytes = head_bytes + rec_bytes + scratch_bytes;
    // Stream-ordered workspace (the default pool keeps its memory: CudaCachingAllocator sets its release threshold).
    unsigned char* ws = nullptr;
    PENSTOCK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ws), bytes, st));
    int32_t* coff = reinterpret_cast<int32_t*>(ws);
    chunk_offsets_kernel<<<1, 1024, 0, st>>>(a.cu, static_cast<int>(n_seqs), coff);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    // Developer profile (PENSTOCK_KDA_TC_PROFILE=1, synchronises): the two kernels' times from events.
    static const bool kProfile = [] {
        const char* e = std::getenv("PENSTOCK_KDA_TC_PROFILE");
        return e != nullptr && e[0] == '1';
    }();
    cudaEvent_t ev[3] = {};
    constexpr int kPhases = 7;
    unsigned long long* prof = nullptr;
    if (kProfile) {
        for (cudaEvent_t& e : ev) PENSTOCK_CUDA_CHECK(cudaEventCreate(&e));
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&prof), kPhases * sizeof(unsigned long long), st));
        PENSTOCK_CUDA_CHECK(cudaMemsetAsync(prof, 0, kPhases * sizeof(unsigned long long), st));
        PENSTOCK_CUDA_CHECK(cudaEventRecord(ev[0], st));
    }
    constexpr size_t kPrepSmem = sizeof(PrepSmem);
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kPrepSmem)));
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_prep_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    delta_rule_prep_kernel<<<prep_ctas, kPrepThreads, kPrepSmem, st>>>(
        a, coff, static_cast<int>(n_seqs), ws + head_bytes, reinterpret_cast<float*>(ws + head_bytes + rec_bytes), prof);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    if (kProfile) PENSTOCK_CUDA_CHECK(cudaEventRecord(ev[1], st));
    constexpr size_t kStateSmem = kStages * sizeof(StateStage);
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kStateSmem)));
    delta_rule_state_kernel<<<static_cast<unsigned>(n_seqs * a.n_heads), kStateThreads, kStateSmem, st>>>(
        a, coff, ws + head_bytes);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    PENSTOCK_CUDA_CHECK(cudaFreeAsync(ws, st));
    if (kProfile) {
        PENSTOCK_CUDA_CHECK(cudaEventRecord(ev[2], st));
        PENSTOCK_CUDA_CHECK(cudaEventSynchronize(ev[2]));
        float prep_ms = 0.0f, state_ms = 0.0f;
        PENSTOCK_CUDA_CHECK(cudaEventElapsedTime(&prep_ms, ev[0], ev[1]));
        PENSTOCK_CUDA_CHECK(cudaEventElapsedTime(&state_ms, ev[1], ev[2]));
        unsigned long long h[kPhases];
        PENSTOCK_CUDA_CHECK(cudaMemcpy(h, prof, sizeof(h), cudaMemcpyDeviceToHost));
        PENSTOCK_CUDA_CHECK(cudaFreeAsync(prof, st));
        unsigned long long total = 0;
        for (unsigned long long x : h) total += x;
        std::fprintf(stderr, "[kda_split profile] %lld tokens x %d heads: offsets + prep %.3f ms, state %.3f ms; prep "
                     "phases (128 CTAs):", static_cast<long long>(n_tokens), a.n_heads, prep_ms, state_ms);
        const char* names[kPhases] = {"load", "scan", "operands", "L/A", "T/finish", "solve", "write"};
        for (int i = 0; i < kPhases; ++i) {
            std::fprintf(stderr, " %s %.1f%%", names[i], total ? 100.0 * static_cast<double>(h[i]) / total : 0.0);
        }
        const double profiled_items = static_cast<double>(std::min<unsigned>(prep_ctas, 128)) *
                                      static_cast<double>(prep_items) / static_cast<double>(prep_ctas);
        std::fprintf(stderr, " (~%.0f cycles per item)\n", static_cast<double>(total) / profiled_items);
        for (cudaEvent_t& e : ev) PENSTOCK_CUDA_CHECK(cudaEventDestroy(e));
    }
}

}  // namespace penstock::cuda
