// bf16 flash attention forward on Hopper tensor cores (contract: attention_bf16_wgmma.h). sm_90a.
//
// Tiling as the FP8 kernel (attention_fp8_wgmma.cu): a CTA owns 128 query rows of one sequence and one head and walks
// that sequence's key tiles of 128 keys, the diagonal tile first (causal) so that only the first tiles need a mask.
// 384 threads = a producer warpgroup (one thread issues the TMA loads; setmaxnreg 24) and two consumer warpgroups of
// 64 query rows each (setmaxnreg 240).
//  - Shared memory, every box in TMA's 128-byte swizzle (64 bf16 per row, 8-row atoms of 1024 bytes): the q tile
//    (d_qk / 64 boxes of 128 rows), a ring of k slots (d_qk / 64 boxes of 128 keys) and a ring of v slots (d_v / 64
//    boxes of 128 keys), loaded straight from q / k / v (v needs no transpose: the value product reads it N-major);
//    with AttentionParams::k_rope, a k slot's last boxes come from k_rope (broadcast over heads: head coordinate 0).
//    Two rings because the consumers use tile i's k with tile i - 1's v: a k slot is free as soon as its scores are
//    done, a v slot when its value product is, and the producer loads v one tile behind k. With one ring of (k, v)
//    stages the next tile's load waited for the value product and the MMA-only pipeline (PENSTOCK_ATTN_PROBE) ran
//    below cuDNN at d 192 (547 TFLOP/s at 16K). Every slot has a "full" mbarrier (the producer's expect_tx) and an
//    "empty" one (one arrive per consumer warpgroup).
//  - Scores: S[64 x 128] = q k^T by d_qk / 16 wgmma.m64n128k16.bf16, both operands K-major from shared memory, f32
//    accumulate.
//  - Online softmax in registers: keys past a row's causal limit or the sequence set to -inf, the row max by a tree,
//    exp2 on the special-function unit with the log2(e)-folded scale, the output rescaled when the max grows (skipped
//    by a warp whose rows' maxima held), the row sums of the f32 probabilities by four independent chains per row. A
//    warp keeps its rows' running maxima, with no shuffles across the quads and no correction, while no row's tile
//    max exceeds its running max by more than a slack (PENSTOCK_ATTN_MAX_SLACK, log2 units, default 8: the
//    probabilities then reach at most 2^8).
//  - Values: O[64 x d_v] += P V with P in registers: bf16's A fragment of a k16 step is exactly the score
//    accumulator's layout of 16 key columns (rows r, r + 8; columns 2t, 2t + 1, 8 + 2t, 9 + 2t), so packing is one
//    cvt per pair; B = the v tile read N-major (transpose bit; LBO = one 128-key box between 64-column blocks, SBO
//    1024 bytes between 8-key groups).
//  - Schedule per consumer warpgroup (FlashAttention-3's intra-warpgroup overlap): tile i's score wgmma and tile
//    i - 1's value wgmma are issued back to back, and tile i's softmax runs while the value product is in flight. P's
//    A fragments live in two register sets used in turn, so tile i's probabilities are packed while tile i - 1's
//    value product still reads the other set (as the FP8 kernel, docs/perf/2026-12-04-s31.md).
//  - Epilogue: O / l to bf16 pairs; lse = m * scale + ln l (natural log) when asked; a row without keys gets 0, -inf.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_bf16_wgmma.h"
#include "kernels/cuda/attention_wgmma_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

using attn_wgmma::ex2;

constexpr int kBM = 128;       // query rows per CTA (two consumer warpgroups of 64)
constexpr int kBN = 128;       // keys per tile
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kBox = 64;       // bf16 columns per TMA box = the 128-byte swizzle span
constexpr int kBoxRowBytes = 128;
// Bf16AttnArgs::max_slack in log2 units unless PENSTOCK_ATTN_MAX_SLACK says otherwise.
constexpr float kMaxSlackLog2Default = 8.0f;

template <int kDqk, int kDv>
struct Layout {
    static constexpr int kQBoxes = kDqk / kBox;
    static constexpr int kVBoxes = kDv / kBox;
    static constexpr int kQBytes = kQBoxes * kBM * kBoxRowBytes;
    static constexpr int kKBytes = kQBoxes * kBN * kBoxRowBytes;
    static constexpr int kVBytes = kVBoxes * kBN * kBoxRowBytes;
    static constexpr int kStageBytes = kKBytes + kVBytes;  // one k and one v slot
    static constexpr int kFixed = kQBytes + 1024 + 128;    // + alignment slack + barriers
    // kStages k slots and kStages v slots (two rings: a k slot frees when its scores are done, a v slot when its
    // value product is)
    static constexpr int kStages = kFixed + 4 * kStageBytes <= 227 * 1024   ? 4
                                   : kFixed + 3 * kStageBytes <= 227 * 1024 ? 3
                                                                            : 2;
    static constexpr int kVOffset = kQBytes + kStages * kKBytes;
    // q_full, k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages]
    static constexpr int kBarOffset = kQBytes + kStages * kStageBytes;
    static constexpr int kSmemBytes = kBarOffset + 8 * (1 + 4 * kStages) + 1024;
    static_assert(kDqk % 64 == 0 && kDv % 64 == 0, "head dims: multiples of 64");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

struct Bf16AttnArgs {
    bf16* out;
    float* lse;  // null: not wanted
    const int32_t* cu_q;
    const int32_t* cu_k;
    int64_t o0, o1, l0;  // out / lse strides (elements)
    int group;           // n_heads / n_kv_heads
    // K's 64-column boxes [0, k_boxes) come from tm_k, the rest from tm_kr (AttentionParams::k_rope; k_boxes is
    // d_qk / 64 without it), whose head coordinate is 0 when k_rope is broadcast over the heads (kr_bcast).
    int k_boxes;
    bool kr_bcast;
    float scale;
    bool causal;
    // The two consumer warpgroups take turns issuing their wgmma (named barriers; PENSTOCK_ATTN_PINGPONG, on unless
    // 0): one warpgroup's softmax then overlaps the other's products (FlashAttention-3's inter-warpgroup schedule).
    bool pingpong;
    // The softmax keeps a warp's running maxima, with no correction of O and l and no reduction across the quads,
    // while no row's tile max exceeds its running max by more than this (score units: the log2-unit slack of
    // PENSTOCK_ATTN_MAX_SLACK, default kMaxSlackLog2Default, divided by scale * log2(e)); the probabilities then reach
    // at most 2^slack, which bf16 and the f32 sums hold exactly as well as 1.
    float max_slack;
    // Measurement probe (PENSTOCK_ATTN_PROBE=mma): every probability 1 and no softmax, the same loads and products
    // (the kernel's tensor-core and memory pipeline alone); the output is then not attention.
    bool mma_only;
};

// ------------------------------------------------------------------------------------------------ wgmma

// D[64 x 128] (+)= A[64 x 16] B[16 x 128] in bf16, f32 accumulate, A and B K-major from shared memory; scale_d 0
// overwrites D.
__device__ __forceinline__ void m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " PENSTOCK_WGMMA_D64
        "%64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : PENSTOCK_WGMMA_D64_OUT(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 128] += A[64 x 16] B[16 x 128] in bf16, f32 accumulate, A from registers (the thread's four words of the
// 16-bit A fragment), B N-major from shared memory (transpose bit).
__device__ __forceinline__ void m64n128k16_rs_nmajor(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " PENSTOCK_WGMMA_D64
        "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
        "}\n"
        : PENSTOCK_WGMMA_D64_OUT(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// D[64 x 64] += A[64 x 16] B[16 x 64], as m64n128k16_rs_nmajor.
__device__ __forceinline__ void m64n64k16_rs_nmajor(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

template <int kDv>
__device__ __forceinline__ void pv_mma(float (&o)[kDv / 2], const uint32_t (&a)[4], uint64_t desc_b) {
    if constexpr (kDv == 128) {
        m64n128k16_rs_nmajor(o, a, desc_b);
    } else {
        m64n64k16_rs_nmajor(o, a, desc_b);
    }
}

// Two f32 as the bf16 pair of one A-fragment word, lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;\n" : "=r"(r) : "f"(lo), "f"(hi));
    return r;
}

// K-major operand rows (q or k) in 128-byte swizzle: SBO 1024 bytes between 8-row groups (LBO unused).
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

// ------------------------------------------------------------------------------------------------ attention
template <int kDqk, int kDv>
__global__ void __launch_bounds__(kThreads, 1)
    attention_bf16_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_kr, const __grid_constant__ CUtensorMap tm_v,
                          Bf16AttnArgs a) {
    using L = Layout<kDqk, kDv>;
    constexpr int kStages = L::kStages;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t sbase = raw + ((1024u - (raw & 1023u)) & 1023u);
    const uint32_t s_q = sbase;
    const uint32_t bars = sbase + L::kBarOffset;
    const uint32_t q_full = bars;
    auto k_full = [&](int st) { return bars + 8u * (1 + st); };
    auto k_empty = [&](int st) { return bars + 8u * (1 + kStages + st); };
    auto v_full = [&](int st) { return bars + 8u * (1 + 2 * kStages + st); };
    auto v_empty = [&](int st) { return bars + 8u * (1 + 3 * kStages + st); };
    auto s_k = [&](int st) { return sbase + L::kQBytes + static_cast<uint32_t>(st) * L::kKBytes; };
    auto s_v = [&](int st) { return sbase + L::kVOffset + static_cast<uint32_t>(st) * L::kVBytes; };

    const attn_wgmma::CtaWork cta = attn_wgmma::cta_work<kBM, kBN>(a.cu_q, a.cu_k, a.group, a.causal);
    if (!cta.valid) return;
    const int n_tiles = cta.n_tiles;

    const int tid = static_cast<int>(threadIdx.x);
    if (tid == 0) {
        tma::mbar_init(q_full, 1);
        for (int i = 0; i < kStages; ++i) {
            tma::mbar_init(k_full(i), 1);
            tma::mbar_init(k_empty(i), 2);
            tma::mbar_init(v_full(i), 1);
            tma::mbar_init(v_empty(i), 2);
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (tid == 0 && n_tiles > 0) {
            tma::prefetch_map(&tm_q);
            tma::prefetch_map(&tm_k);
            if (a.k_boxes < L::kQBoxes) tma::prefetch_map(&tm_kr);
            tma::prefetch_map(&tm_v);
            tma::mbar_expect_tx(q_full, L::kQBytes);
#pragma unroll
            for (int b = 0; b < L::kQBoxes; ++b) {
                tma::load_3d(s_q + b * kBM * kBoxRowBytes, &tm_q, b * kBox, cta.head, cta.q_start + cta.m0, q_full);
            }
            // The consumers use k of tile it with v of tile it - 1: load in that order, v one tile behind k.
            for (int it = 0; it <= n_tiles; ++it) {
                if (it < n_tiles) {
                    const int j = n_tiles - 1 - it;
                    const int st = it % kStages;
                    tma::mbar_wait(k_empty(st), ((it / kStages) & 1) ^ 1);
                    tma::mbar_expect_tx(k_full(st), L::kKBytes);
#pragma unroll
                    for (int b = 0; b < L::kQBoxes; ++b) {
                        if (b < a.k_boxes) {
                            tma::load_3d(s_k(st) + b * kBN * kBoxRowBytes, &tm_k, b * kBox, cta.kv_head,
                                         cta.k_start + j * kBN, k_full(st));
                        } else {
                            tma::load_3d(s_k(st) + b * kBN * kBoxRowBytes, &tm_kr, (b - a.k_boxes) * kBox,
                                         a.kr_bcast ? 0 : cta.kv_head, cta.k_start + j * kBN, k_full(st));
                        }
                    }
                }
                if (it >= 1) {
                    const int iv = it - 1, j = n_tiles - 1 - iv;
                    const int st = iv % kStages;
                    tma::mbar_wait(v_empty(st), ((iv / kStages) & 1) ^ 1);
                    tma::mbar_expect_tx(v_full(st), L::kVBytes);
#pragma unroll
                    for (int b = 0; b < L::kVBoxes; ++b) {
                        tma::load_3d(s_v(st) + b * kBN * kBoxRowBytes, &tm_v, b * kBox, cta.kv_head,
                                     cta.k_start + j * kBN, v_full(st));
                    }
                }
            }
        }
        return;
    }
    // ------------------------------------------------------------ consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int cw = wg - 1;
    const int t4 = tid & 3;
    const attn_wgmma::ConsumerRows rows = attn_wgmma::consumer_rows(cta, cw, tid, a.causal);
    const float c = a.scale * 1.4426950408889634f;  // score -> log2 units (scale > 0: a masked -inf stays -inf)

    constexpr int kAcc = kDv / 2;
    float o[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) o[i] = 0.0f;
    float m_lo = -INFINITY, m_hi = -INFINITY;
    float l_lo = 0.0f, l_hi = 0.0f;  // this thread's share of the rows' sums (the quad adds them up at the end)
    // Descriptors: one per tile base, the k steps' offsets added as constants (a descriptor's address field is the
    // byte address / 16 and shared memory stays below 256 KiB, so desc(a + off) = desc(a) + off / 16 never carries).
    const uint64_t q_desc = kmajor_desc(s_q + static_cast<uint32_t>(cw) * 64 * kBoxRowBytes);
    auto issue_scores = [&](int st, float(&sc)[64]) {
        const uint64_t k_desc = kmajor_desc(s_k(st));
        wgmma::reg_fence(sc);
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kDqk / 16; ++ks) {
            const uint64_t qoff = static_cast<uint64_t>(((ks >> 2) * kBM * kBoxRowBytes + (ks & 3) * 32) >> 4);
            const uint64_t koff = static_cast<uint64_t>(((ks >> 2) * kBN * kBoxRowBytes + (ks & 3) * 32) >> 4);
            m64n128k16_ss(sc, q_desc + qoff, k_desc + koff, ks != 0 ? 1 : 0);
        }
        wgmma::commit();
    };
    auto issue_values = [&](int st, const uint32_t(&pa)[8][4]) {
        const uint64_t v_desc = wgmma::desc(s_v(st), kBN * kBoxRowBytes, 1024);
        wgmma::reg_fence(o);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) pv_mma<kDv>(o, pa[kk], v_desc + static_cast<uint64_t>((kk * 16 * 128) >> 4));
        wgmma::commit();
    };
    // Mask, running max, exp2 and row sums of one tile's scores (in place: sc becomes the probabilities); returns
    // the correction of the previous accumulators (O and l) for the two rows and applies it to l.
    auto softmax = [&](float(&sc)[64], int j, float& corr_lo, float& corr_hi) {
        attn_wgmma::mask_tile(sc, j * kBN, t4, rows.lim_lo, rows.lim_hi);
        float mx_lo, mx_hi;
        attn_wgmma::thread_row_max(sc, mx_lo, mx_hi);  // this thread's own 32 scores of each row
        if (__all_sync(0xffffffffu, mx_lo <= m_lo + a.max_slack && mx_hi <= m_hi + a.max_slack)) {
            // No row of the warp's tile exceeds its running max by more than max_slack: the maxima stay, O and l need
            // no correction and the quads' shuffles are skipped. (A row without a visible key so far, m -inf, takes
            // this path only when the tile shows it none either.)
            corr_lo = corr_hi = 1.0f;
        } else {
            mx_lo = fmaxf(m_lo, attn_wgmma::quad_max(mx_lo));
            mx_hi = fmaxf(m_hi, attn_wgmma::quad_max(mx_hi));
            // A row with no visible key so far keeps max -inf: its terms are exp2(-inf) = 0 and its state unchanged.
            corr_lo = m_lo == -INFINITY ? 0.0f : ex2((m_lo - mx_lo) * c);  // 0: nothing accumulated yet
            corr_hi = m_hi == -INFINITY ? 0.0f : ex2((m_hi - mx_hi) * c);
            m_lo = mx_lo;
            m_hi = mx_hi;
        }
        const float base_lo = m_lo == -INFINITY ? 0.0f : m_lo * c;
        const float base_hi = m_hi == -INFINITY ? 0.0f : m_hi * c;
        float sl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sh[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int nb = 0; nb < 16; ++nb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                sc[4 * nb + e] = ex2(fmaf(sc[4 * nb + e], c, -base_lo));
                sc[4 * nb + 2 + e] = ex2(fmaf(sc[4 * nb + 2 + e], c, -base_hi));
                sl[(2 * nb + e) & 3] += sc[4 * nb + e];
                sh[(2 * nb + e) & 3] += sc[4 * nb + 2 + e];
            }
        }
        l_lo = fmaf(l_lo, corr_lo, (sl[0] + sl[1]) + (sl[2] + sl[3]));
        l_hi = fmaf(l_hi, corr_hi, (sh[0] + sh[1]) + (sh[2] + sh[3]));
    };
    // P as the A fragments of the eight k16 steps: step kk's 16 keys are the accumulator's n-blocks 2 kk, 2 kk + 1.
    auto pack = [&](const float(&x)[64], uint32_t(&pa)[8][4]) {
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            const float* y = x + 8 * kk;
            pa[kk][0] = pack_bf16x2(y[0], y[1]);
            pa[kk][1] = pack_bf16x2(y[2], y[3]);
            pa[kk][2] = pack_bf16x2(y[4], y[5]);
            pa[kk][3] = pack_bf16x2(y[6], y[7]);
        }
    };
    auto release = [&](uint32_t bar) {
        if ((tid & 127) == 0) tma::mbar_arrive(bar);
    };

    const attn_wgmma::PingPong pp{a.pingpong && n_tiles > 0, cw};  // (a.pingpong: the warpgroups take turns)
    pp.open();

    float s[64];
    // P's A fragments in two sets: tile it's probabilities are packed into one while tile it - 1's value product still
    // reads the other, so that the pack runs beside that product instead of after its wait (as the FP8 kernel).
    uint32_t pa0[8][4], pa1[8][4];
    if (n_tiles > 0) {
        tma::mbar_wait(q_full, 0);
        tma::mbar_wait(k_full(0), 0);
        pp.begin();
        issue_scores(0, s);
        pp.end(false);
        wgmma::wait<0>();
        wgmma::reg_fence(s);
        release(k_empty(0));
        float corr_lo, corr_hi;
        if (a.mma_only) {
#pragma unroll
            for (int i = 0; i < 32; ++i) pa0[i / 4][i % 4] = pa1[i / 4][i % 4] = 0x3F803F80u;  // bf16 ones
        } else {
            softmax(s, n_tiles - 1, corr_lo, corr_hi);  // o is 0: no rescale
            pack(s, pa0);
        }
    }
    // Tile it's k sits in k slot it % kStages, tile it - 1's v in v slot (it - 1) % kStages.
    int ks = 0, vs = 0;
    uint32_t k_phase = 0, v_phase = 0;
    // Tile it: its scores issued with tile it - 1's value product (from pa_prev), its softmax and pack (into pa_next)
    // while that product runs, then the wait, the v slot's release and O's rescale.
    auto step = [&](int it, uint32_t(&pa_prev)[8][4], uint32_t(&pa_next)[8][4]) {
        if (++ks == kStages) {
            ks = 0;
            k_phase ^= 1u;
        }
        tma::mbar_wait(k_full(ks), k_phase);
        tma::mbar_wait(v_full(vs), v_phase);
        pp.begin();
        issue_scores(ks, s);
        issue_values(vs, pa_prev);
        pp.end(false);
        wgmma::wait<1>();  // the scores (committed first)
        wgmma::reg_fence(s);
        release(k_empty(ks));
        float corr_lo = 1.0f, corr_hi = 1.0f;
        if (!a.mma_only) {
            softmax(s, n_tiles - 1 - it, corr_lo, corr_hi);
            pack(s, pa_next);
        }
        wgmma::wait<0>();  // the value product
        wgmma::reg_fence(o);
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                asm volatile("" : "+r"(pa_prev[kk][w])::"memory");  // live until the MMA is done
            }
        }
        release(v_empty(vs));
        if (++vs == kStages) {
            vs = 0;
            v_phase ^= 1u;
        }
        // (a warp whose rows kept their max skips the multiplications: exact, corr is 1)
        if (__any_sync(0xffffffffu, corr_lo != 1.0f || corr_hi != 1.0f)) attn_wgmma::rescale_rows(o, corr_lo, corr_hi);
    };
    int it = 1;
    for (; it + 1 < n_tiles; it += 2) {
        step(it, pa0, pa1);
        step(it + 1, pa1, pa0);
    }
    const bool odd = it < n_tiles;  // one tile left: its probabilities end in pa1
    if (odd) step(it, pa0, pa1);
    if (n_tiles > 0) {
        tma::mbar_wait(v_full(vs), v_phase);
        pp.begin();
        if (odd) {  // the last tile's v
            issue_values(vs, pa1);
        } else {
            issue_values(vs, pa0);
        }
        pp.end(true);
        wgmma::wait<0>();
        wgmma::reg_fence(o);
        release(v_empty(vs));
    }
    // Epilogue: the rows' sums over the quad, then the rows this thread holds.
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = rows.r_lo + 8 * hf;
        if (r >= cta.len_q) continue;
        const float l = hf == 0 ? l_lo : l_hi;
        const float m = hf == 0 ? m_lo : m_hi;
        const float f = l > 0.0f ? 1.0f / l : 0.0f;
        const int64_t row = static_cast<int64_t>(cta.q_start) + r;
        bf16* orow = a.out + row * a.o0 + static_cast<int64_t>(cta.head) * a.o1 + 2 * t4;
#pragma unroll
        for (int nb = 0; nb < kDv / 8; ++nb) {
            tile::store2<bf16>(orow + 8 * nb, o[4 * nb + 2 * hf] * f, o[4 * nb + 2 * hf + 1] * f);
        }
        if (a.lse != nullptr && t4 == 0)
            a.lse[row * a.l0 + cta.head] = l > 0.0f ? fmaf(m, a.scale, logf(l)) : -INFINITY;
    }
}

// A [rows, heads, d] bf16 operand as a 3-d tensor map with 64-column x 128-row boxes of one head (a view broadcast
// over the heads, head stride 0, as one head).
CUtensorMap map_rows(const TensorView& t, int64_t d) {
    const bool bcast = t.stride(1) == 0;
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(bcast ? 1 : t.size(1)),
                                static_cast<cuuint64_t>(std::max<int64_t>(t.size(0), 1))};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>((bcast ? t.stride(0) : t.stride(1)) * 2),
                                   static_cast<cuuint64_t>(t.stride(0) * 2)};
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(kBox), 1u, 128u};
    return tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, t.data, 3, dims, strides, box);
}

template <int kDqk, int kDv>
void launch(const kernels::AttentionParams& p, const Bf16AttnArgs& args, int64_t max_q, int n_seqs,
            cudaStream_t stream) {
    using L = Layout<kDqk, kDv>;
    const CUtensorMap tm_q = map_rows(p.q, kDqk);
    const CUtensorMap tm_k = map_rows(p.k, p.k.size(2));
    const CUtensorMap tm_kr = p.k_rope.data != nullptr ? map_rows(p.k_rope, p.k_rope.size(2)) : tm_k;
    const CUtensorMap tm_v = map_rows(p.v, kDv);
    auto* kernel = attention_bf16_kernel<kDqk, kDv>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
    const dim3 grid(static_cast<unsigned>((max_q + kBM - 1) / kBM), static_cast<unsigned>(p.q.size(1)),
                    static_cast<unsigned>(n_seqs));
    kernel<<<grid, kThreads, L::kSmemBytes, stream>>>(tm_q, tm_k, tm_kr, tm_v, args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool attention_bf16_wgmma_covers(const kernels::AttentionParams& p) {
    if (attn_wgmma::env_is("PENSTOCK_ATTENTION_KERNEL", "cudnn")) return false;
    if (p.q.dtype != DType::kBF16 || p.k.dtype != DType::kBF16 || p.v.dtype != DType::kBF16 ||
        p.out.dtype != DType::kBF16 || (p.k_rope.data != nullptr && p.k_rope.dtype != DType::kBF16)) {
        return false;
    }
    if (!attn_wgmma::covers_common(p)) return false;
    const int64_t d_qk = p.q.size(2), d_v = p.v.size(2);
    if (!((d_qk == 64 && d_v == 64) || (d_qk == 128 && d_v == 128) || (d_qk == 192 && d_v == 128))) return false;
    return fp8::device_major() == 9;
}

bool attention_bf16_wgmma(const kernels::AttentionParams& p, cudaStream_t stream) {
    if (!attention_bf16_wgmma_covers(p)) return false;
    const int64_t total_q = p.q.size(0), d_qk = p.q.size(2);
    if (total_q == 0) return true;
    const int n_seqs = static_cast<int>(p.cu_seqlens_q.size(0) - 1);
    const int64_t max_q = p.max_seqlen_q > 0 ? p.max_seqlen_q : total_q;
    Bf16AttnArgs args{};
    args.out = p.out.ptr<bf16>();
    args.lse = p.lse.data != nullptr ? p.lse.ptr<float>() : nullptr;
    args.cu_q = p.cu_seqlens_q.ptr<const int32_t>();
    args.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
    args.o0 = p.out.stride(0);
    args.o1 = p.out.stride(1);
    args.l0 = p.lse.data != nullptr ? p.lse.stride(0) : 0;
    args.group = static_cast<int>(p.q.size(1) / p.k.size(1));
    args.k_boxes = static_cast<int>(p.k.size(2) / kBox);
    args.kr_bcast = p.k_rope.data != nullptr && p.k_rope.stride(1) == 0;
    args.scale = p.scale;
    args.causal = p.mask_kind == kernels::AttentionMaskKind::kCausalBottomRight;
    args.pingpong = !attn_wgmma::env_is("PENSTOCK_ATTN_PINGPONG", "0");
    float slack = kMaxSlackLog2Default;
    if (const char* e = std::getenv("PENSTOCK_ATTN_MAX_SLACK"); e != nullptr) {
        char* end = nullptr;
        slack = std::strtof(e, &end);
        PENSTOCK_CHECK(end != e && *end == '\0' && slack >= 0.0f && slack <= 16.0f)
            << "PENSTOCK_ATTN_MAX_SLACK: a number in [0, 16] (log2 units), not " << e;
    }
    args.max_slack = slack / (args.scale * 1.4426950408889634f);
    args.mma_only = attn_wgmma::env_is("PENSTOCK_ATTN_PROBE", "mma");
    if (d_qk == 64) {
        launch<64, 64>(p, args, max_q, n_seqs, stream);
    } else if (d_qk == 128) {
        launch<128, 128>(p, args, max_q, n_seqs, stream);
    } else {
        launch<192, 128>(p, args, max_q, n_seqs, stream);
    }
    return true;
}

}  // namespace penstock::cuda
