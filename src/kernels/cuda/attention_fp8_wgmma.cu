// FP8 flash attention forward on Hopper tensor cores (contract: attention_fp8_wgmma.h; kernels/ops.h AttentionParams
// with e4m3 q / k / v, q / k descales per tensor or per row, v's per tensor). sm_90a.
//
// Tiling: an item is 128 query rows of one sequence and one head, which walks that sequence's key tiles of 128 keys,
// the diagonal tile first (causal) so that only the first tiles need a mask. Persistent: one CTA per SM takes items
// from the stream's tile counter (attention_wgmma_common.cuh, persistent items). 384 threads = a producer warpgroup
// (one thread takes the items and issues the TMA loads; setmaxnreg 24) and two consumer warpgroups of 64 query rows
// each (setmaxnreg 240). The producer hands each item to the consumers through shared memory with its q tile's
// "full" barrier, and loads the next item's q once the consumers have it in registers (or, with q read from shared
// memory, after the item's last score product).
//  - Shared memory: the q tile (d_qk / 64 boxes of 128 rows x 64 bytes) and a ring of kStages stages, each a k tile
//    (d_qk / 64 boxes of 128 keys x 64 bytes) and a v tile (2 boxes of d_v rows x 64 keys), every box in TMA's
//    64-byte swizzle, the layout the wgmma descriptors read (type 2, stride 512 bytes per 8 rows). Each stage has a
//    "full" mbarrier (the producer's expect_tx) and an "empty" one (one arrive per consumer warpgroup).
//  - Scores: S[64 x 128] = q k^T by d_qk / 32 wgmma.m64n128k32.e4m3 from shared memory (both operands K-major, as
//    e4m3 wgmma requires), f32 accumulate.
//  - Online softmax in registers (exp2 with the log2(e)-folded scale scale * q_descale(row) * k_descale(tile): a
//    thread's two rows have their own q descale, and a key tile one k descale, read at its first key, which
//    k_descale_block promises for per-row k descales; a row's running max in log2 units, the output rescaled when the
//    max grows, skipped by a warp whose rows' maxima held). A share of the exponentials (Fp8AttnArgs::exp_fma) runs
//    on the FMA pipes instead of the special-function unit, in f16x2 (attn_wgmma::exp2_pack_e4m3, which also casts
//    the probabilities into the value product's e4m3 A fragments). The row sums come from the
//    tensor cores: each value tile carries 8 extra rows of e4m3 ones, so the value product's columns d_v .. d_v + 7
//    accumulate sum_j P_ij (of the rounded probabilities, the ones the numerator uses) and are rescaled with O; the
//    softmax does no additions. Masked keys (beyond the row's causal limit or the sequence's keys) are set to -inf
//    before the max, so the garbage a tile reads past its sequence never counts.
//  - Values: O[64 x d_v] += P V with P in registers: the probabilities times 2^8 (added in the exponent of exp2: it
//    moves e4m3's subnormal floor from 2^-9 to 2^-17 of the row max) rounded to e4m3 in the A-operand fragment. The
//    score accumulator holds, per thread and k32 step, the columns {2t, 2t+1, 8+2t, 9+2t, 16+2t, 17+2t, 24+2t, 25+2t}
//    where the A fragment wants {4t..4t+3, 16+4t..16+4t+3}; instead of shuffling the bytes across the quad, the keys
//    of v are stored in that order (vt_perm below), which leaves the sum over keys unchanged.
//  - v must be K-major for e4m3 wgmma, i.e. transposed: a pre-pass (vt_kernel) writes vt [h_kv, d_v, width], each
//    sequence's keys from a 128-aligned column (128 ceil(cu_k[s] / 128) + 128 s: no tile holds two sequences, the
//    padding is zero) in the permuted order within each 32 keys. It moves 2 bytes per v element (~0.15 ms for
//    DeepSeek-V3's 16K x 128 heads x 128), a few percent of the attention.
//  - Schedule per consumer warpgroup (FlashAttention-3's intra-warpgroup overlap): tile i's score wgmma and tile
//    i - 1's value wgmma are issued back to back, and tile i's softmax runs while the value product is in flight. P's
//    A fragments live in two register sets, so tile i's probabilities are packed into one while tile i - 1's value
//    product reads the other: after that product's wait only the stage's release and O's rescale remain before the
//    next issue (DeepSeek-V3 at 16K: the kernel 2-4% faster, the layer's attention 13.3-13.5 ms against 13.7-14.2,
//    docs/perf/2026-12-04-s31.md). Issuing tile i's scores before the wait for tile i - 1's value product (so that the
//    tensor cores always hold this warpgroup's next product) ran 14-17% slower, and a 4-stage ring no faster.
//  - Epilogue: O * v_descale / (256 l) to bf16, or to e4m3 with the caller's 1 / out_descale; lse = (m - 8) ln 2 +
//    ln l (natural log; m the running max in log2 units) when asked; a row without keys gets 0 and -inf.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cuda/attention_fp8_wgmma.h"
#include "kernels/cuda/attention_wgmma_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_sched.cuh"
#include "kernels/cuda/tile_sched.h"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

using attn_wgmma::ex2;

constexpr int kBM = 128;             // query rows per CTA (two consumer warpgroups of 64)
constexpr int kBN = 128;             // keys per tile
constexpr int kThreads = 384;        // producer warpgroup + two consumer warpgroups
constexpr int kBoxBytes = 64;        // TMA box width = the 64-byte swizzle span
constexpr float kPScaleLog2 = 8.0f;  // the probabilities' scale before the e4m3 cast: 2^8, added in the exponent
constexpr int kMaxStages = 3;        // the ring's stages where they fit (Layout::kStages; 4, where they fit, ran no
                                     // faster: docs/perf/2026-12-04-s31.md)
constexpr int kExpFmaDefault = 6;    // Fp8AttnArgs::exp_fma unless PENSTOCK_FP8_ATTN_EXP_FMA says otherwise

// Position p (0..31) of a 32-key block of vt holds key vt_perm(p) of the block: the key that the score accumulator
// puts where the e4m3 A fragment reads column p (the header's comment).
__host__ __device__ constexpr int vt_perm(int p) {
    return 16 * (p >> 4) + 2 * ((p & 15) >> 2) + 8 * ((p & 3) >> 1) + (p & 1);
}

template <int kDqk, int kDv>
struct Layout {
    static constexpr int kQBoxes = kDqk / kBoxBytes;
    static constexpr int kQBytes = kQBoxes * kBM * kBoxBytes;
    static constexpr int kKBytes = kQBoxes * kBN * kBoxBytes;
    // One box: d_v rows x 64 keys (TMA), then 8 rows of e4m3 ones (written once per stage: the row sums' B rows).
    static constexpr int kVBoxBytes = (kDv + 8) * kBoxBytes;
    static constexpr int kVBytes = 2 * kVBoxBytes;
    static constexpr int kStageBytes = kKBytes + kVBytes;
    static constexpr int kTxBytes = kKBytes + 2 * kDv * kBoxBytes;  // what TMA writes into a stage
    // After the ring: the barriers, the consumers' work item, and the items' prefix, the sequences' clamped query
    // offsets and the prefix scan's scratch (persistent items, attn_wgmma::build_item_prefix).
    static constexpr int kPrefixCap = 1024;  // sequences the persistent items' prefix takes (ItemSpace::prefix_cap)
    static constexpr int kItemWords = attn_wgmma::kWorkWords + 2 * (kPrefixCap + 1) + 32;
    // The ring takes as many stages as fit, up to kMaxStages.
    static constexpr bool fits(int n) {
        return kQBytes + n * kStageBytes + 8 * (2 + 2 * n) + 4 * kItemWords + 1024 <= 227 * 1024;
    }
    static constexpr int kStages = fits(kMaxStages) ? kMaxStages : fits(3) ? 3 : 2;
    static constexpr int kBarOffset = kQBytes + kStages * kStageBytes;  // q_full, q_empty, full[kStages], empty[..]
    static constexpr int kSlotOffset = kBarOffset + 8 * (2 + 2 * kStages);
    static constexpr int kSmemBytes = kSlotOffset + 4 * kItemWords + 1024;  // + alignment slack
    static_assert(kDqk % 64 == 0 && kDqk <= 256, "d_qk: a multiple of 64 up to 256");
    static_assert(kDv == 64 || kDv == 128, "d_v: 64 or 128");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

struct Fp8AttnArgs {
    void* out;
    float* lse;  // null: not wanted
    const int32_t* cu_q;
    const int32_t* cu_k;
    const float* q_descale;  // q_descale[row * qd0 + head * qd1]: per row and head, or per tensor (strides 0)
    const float* k_descale;  // k_descale[key * kd0 + kv_head * kd1], read at each tile's first key
    const float* v_descale;
    int64_t qd0, qd1, kd0, kd1;
    const float* scale_o;  // FP8 out: 1 / out_descale
    float* out_scale;      // FP8 out per row and head (AttentionParams::out_scale), else null
    int64_t os0, os1;      // out_scale's strides
    int64_t o0, o1, l0;    // out / lse strides (elements)
    int group;             // n_heads / n_kv_heads
    float scale;
    bool causal;
    bool pingpong;  // the two consumer warpgroups take turns issuing their wgmma (PENSTOCK_FP8_ATTN_PINGPONG)
    // Measurement probe (PENSTOCK_FP8_ATTN_PROBE=mma): every probability 1 and no softmax, the same loads and
    // products (the kernel's tensor-core and memory pipeline alone); the output is then not attention.
    bool mma_only;
    // Of every 16 column blocks of a score tile, how many take their exponentials on the FMA pipes
    // (attn_wgmma::exp2_pack_e4m3): 0, 4, 6 or 8 (PENSTOCK_FP8_ATTN_EXP_FMA); the kernel's kFma, one instantiation
    // each, so that the hot loop holds one exponential body (a runtime switch over the four put all of them in it).
    int exp_fma;
    int* sched;                   // tile_sched.h's counter pair of the launch's stream
    attn_wgmma::ItemSpace items;  // the launch's work items (attention_wgmma_common.cuh, persistent items)
};

// ------------------------------------------------------------------------------------------------ wgmma, A in regs

// D[64 x 136] (+)= A[64 x 32] B[32 x 136] in float8_e4m3fn, f32 accumulate; A from registers (the thread's four
// words of the 8-bit A fragment), B K-major from shared memory (descriptor); scale_d 0 overwrites D.
__device__ __forceinline__ void m64n136k32_e4m3_rs(float (&d)[68], const uint32_t (&a)[4], uint64_t desc_b,
                                                   int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %73, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67"
        "}, "
        "{%68, %69, %70, %71}, %72, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
          "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// D[64 x 72] (+)= A[64 x 32] B[32 x 72] in float8_e4m3fn, f32 accumulate; A from registers (the thread's four
// words of the 8-bit A fragment), B K-major from shared memory (descriptor); scale_d 0 overwrites D.
__device__ __forceinline__ void m64n72k32_e4m3_rs(float (&d)[36], const uint32_t (&a)[4], uint64_t desc_b,
                                                  int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %41, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35"
        "}, "
        "{%36, %37, %38, %39}, %40, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// The value product over d_v + 8 columns: the 8 extra B rows are e4m3 ones (kOnesRows), so the accumulator columns
// d_v .. d_v + 7 all hold the row sum of the rounded probabilities, accumulated (and rescaled) with O itself.
template <int kDv>
__device__ __forceinline__ void pv_mma(float (&o)[kDv / 2 + 4], const uint32_t (&a)[4], uint64_t desc_b) {
    if constexpr (kDv == 128) {
        m64n136k32_e4m3_rs(o, a, desc_b, 1);
    } else {
        m64n72k32_e4m3_rs(o, a, desc_b, 1);
    }
}

__device__ __forceinline__ uint64_t sw64_desc(uint32_t saddr) { return wgmma::desc_swizzle<64>(saddr, 16, 512); }

// ------------------------------------------------------------------------------------------------ v transpose
// vt[h][c][col0(s) + j'] = v[cu_k[s] + j][h][c] for the keys j of each sequence s, with j' the position of j in its
// 32-key block's vt_perm order; the columns of a sequence's last 128-key tile past its keys are zero. Block = 128
// keys x d_v of one (sequence, kv head), staged in shared memory (rows padded by 16 bytes).
template <int kDv>
__global__ void __launch_bounds__(256)
    vt_kernel(const uint8_t* __restrict__ v, int64_t v0, int64_t v1, uint8_t* __restrict__ vt, int64_t width,
              const int32_t* __restrict__ cu_k) {
    constexpr int kRow = kDv + 16;
    __shared__ __align__(16) uint8_t tile[kBN * kRow];
    const int s = static_cast<int>(blockIdx.y);
    const int h = static_cast<int>(blockIdx.z);
    const int32_t k_start = cu_k[s];
    const int32_t len = cu_k[s + 1] - k_start;
    const int32_t j0 = static_cast<int32_t>(blockIdx.x) * kBN;
    if (j0 >= len) return;  // no tile of the attention reads it
    const int tid = static_cast<int>(threadIdx.x);
    constexpr int kChunks = kDv / 16;  // 16-byte chunks per key row
    for (int i = tid; i < kBN * kChunks; i += 256) {
        const int r = i / kChunks, c = i % kChunks;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (j0 + r < len) {
            val = __ldg(
                reinterpret_cast<const uint4*>(v + (static_cast<int64_t>(k_start) + j0 + r) * v0 + h * v1 + 16 * c));
        }
        *reinterpret_cast<uint4*>(tile + r * kRow + 16 * c) = val;
    }
    __syncthreads();
    const int64_t col0 = static_cast<int64_t>(kBN) * ((k_start + kBN - 1) / kBN) + static_cast<int64_t>(kBN) * s + j0;
    uint8_t* base = vt + static_cast<int64_t>(h) * kDv * width + col0;
    for (int i = tid; i < kDv * (kBN / 16); i += 256) {
        const int c = i / (kBN / 16), p0 = 16 * (i % (kBN / 16));
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t x = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int p = p0 + 4 * q + b;
                const int key = (p & ~31) + vt_perm(p & 31);
                x |= static_cast<uint32_t>(tile[key * kRow + c]) << (8 * b);
            }
            w[q] = x;
        }
        *reinterpret_cast<uint4*>(base + static_cast<int64_t>(c) * width + p0) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// ------------------------------------------------------------------------------------------------ attention
// The natural-log lse of a row: (m - 8) ln 2 + ln l, l summing the probabilities times 2^8; -inf without keys.
__device__ __forceinline__ float row_lse(float l, float m) {
    return l > 0.0f ? fmaf(m - kPScaleLog2, 0.6931471805599453f, logf(l)) : -INFINITY;
}

// Two adjacent outputs: bf16 through tile::store2, e4m3 (already scaled into range) as one 2-byte store.
template <class OutT>
__device__ __forceinline__ void store_out2(OutT* p, float x, float y) {
    if constexpr (sizeof(OutT) == 1) {
        *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(e4m3x2_in_range(x, y));
    } else {
        tile::store2<OutT>(p, x, y);
    }
}

// The epilogue of an e4m3 out per row and head (AttentionParams::out_scale, d_v 128): a row's 128 values lie in the
// four lanes of a quad (32 each: columns 2 t4 + 8 nb + {0, 1}). Each value is rounded to bf16 exactly as the bf16
// epilogue stores it, the quad's maximum of |x| gives fp8_act_quant's step (ActQuantStep: its scale and quotients),
// and the hardware cast: the bytes and the scale of a bf16 out followed by fp8_act_quant, bit for bit.
template <int kAcc>
__device__ __forceinline__ void row_block_epilogue(const Fp8AttnArgs& a, float (&o)[kAcc], float l_lo, float l_hi,
                                                   float m_lo, float m_hi, int r_lo, int t4,
                                                   const attn_wgmma::CtaWork& cta) {
    constexpr int kNb = 16;  // 8-column blocks of d_v 128
    const float mult = __ldg(a.v_descale);
    float amax[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {  // (every lane: the quad shuffles below take the whole warp)
        const float l = hf == 0 ? l_lo : l_hi;
        const float f = l > 0.0f ? mult / l : 0.0f;
        float m = 0.0f;
#pragma unroll
        for (int nb = 0; nb < kNb; ++nb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = o[4 * nb + 2 * hf + e];
                x = __bfloat162float(__float2bfloat16_rn(x * f));
                m = fmaxf(m, fabsf(x));
            }
        }
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        amax[hf] = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = r_lo + 8 * hf;
        if (r >= cta.len_q) continue;
        const ActQuantStep step(amax[hf]);
        const int64_t row = static_cast<int64_t>(cta.q_start) + r;
        auto* orow = static_cast<uint8_t*>(a.out) + row * a.o0 + static_cast<int64_t>(cta.head) * a.o1 + 2 * t4;
#pragma unroll
        for (int nb = 0; nb < kNb; ++nb) {
            *reinterpret_cast<uint16_t*>(orow + 8 * nb) = static_cast<uint16_t>(
                e4m3x2_in_range(step.quotient(o[4 * nb + 2 * hf]), step.quotient(o[4 * nb + 2 * hf + 1])));
        }
        if (t4 == 0) {
            a.out_scale[row * a.os0 + static_cast<int64_t>(cta.head) * a.os1] = step.s;
            if (a.lse != nullptr) a.lse[row * a.l0 + cta.head] = row_lse(hf == 0 ? l_lo : l_hi, hf == 0 ? m_lo : m_hi);
        }
    }
}

template <int kDqk, int kDv, class OutT, bool kQRegs, int kFma>
__global__ void __launch_bounds__(kThreads, 1)
    attention_fp8_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_vt, Fp8AttnArgs a) {
    using L = Layout<kDqk, kDv>;
    constexpr int kStages = L::kStages;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    const uint32_t sbase = raw + pad;
    const uint32_t s_q = sbase;
    const uint32_t bars = sbase + L::kBarOffset;
    const uint32_t q_full = bars, q_empty = bars + 8u;
    auto full = [&](int st) { return bars + 8u * (2 + st); };
    auto empty = [&](int st) { return bars + 8u * (2 + kStages + st); };
    auto s_k = [&](int st) { return sbase + L::kQBytes + static_cast<uint32_t>(st) * L::kStageBytes; };
    int* work_slot = reinterpret_cast<int*>(smem_raw + pad + L::kSlotOffset);
    int* prefix = work_slot + attn_wgmma::kWorkWords;
    int* offs = prefix + (L::kPrefixCap + 1);
    int* scan = offs + (L::kPrefixCap + 1);

    const int tid = static_cast<int>(threadIdx.x);
    if (tid == 0) {
        tma::mbar_init(q_full, 1);
        tma::mbar_init(q_empty, 256);  // every consumer thread, once it no longer reads the q tile
        for (int i = 0; i < kStages; ++i) {
            tma::mbar_init(full(i), 1);
            tma::mbar_init(empty(i), 2);
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    // The items' prefix, by every thread (ends with a barrier when it scans); the producer hands the items out.
    const int n_items = attn_wgmma::build_item_prefix(a.items, a.cu_q, prefix, offs, scan);
    // Broadcast from lane 0, ptxas knows the warpgroup index is warp-uniform and keeps the consumers' shared-memory
    // addresses and wgmma descriptors in uniform registers (as in fp8_gemm_tma.cu): without it the persistent
    // kernel ran 3-5% slower than the per-CTA one at T = 16384 (docs/perf/2026-12-04-s29.md).
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    if (wg == 0) {
        // ------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (tid != 0) return;
        tma::prefetch_map(&tm_q);
        tma::prefetch_map(&tm_k);
        tma::prefetch_map(&tm_vt);
        int s = 0;  // ring position of the next key tile
        uint32_t ring_phase = 0;
        for (uint32_t n = 0;; ++n) {
            // The next item (the q tile is free once the consumers have read the previous one).
            tma::mbar_wait(q_empty, (n & 1u) ^ 1u);
            attn_wgmma::CtaWork w{};
            int u = 0;
            do {
                u = tile_sched::next_tile(a.sched);
                if (u >= n_items) break;
                w = attn_wgmma::work_item<kBN>(u, a.items, prefix, offs, a.cu_q, a.cu_k, a.group, a.causal);
            } while (w.valid == 0);
            if (u >= n_items) {
                w.n_tiles = -1;  // the consumers stop
                attn_wgmma::publish_work(work_slot, w);
                tma::mbar_arrive(q_full);
                break;
            }
            attn_wgmma::publish_work(work_slot, w);
            tma::mbar_expect_tx(q_full, L::kQBytes);
#pragma unroll
            for (int b = 0; b < L::kQBoxes; ++b) {
                tma::load_3d(s_q + b * kBM * kBoxBytes, &tm_q, b * kBoxBytes, w.head, w.q_start + w.m0, q_full);
            }
            const int64_t vt_col0 =
                static_cast<int64_t>(kBN) * ((w.k_start + kBN - 1) / kBN) + static_cast<int64_t>(kBN) * w.seq;
            for (int it = 0; it < w.n_tiles; ++it) {
                const int j = w.n_tiles - 1 - it;
                tma::mbar_wait(empty(s), ring_phase ^ 1u);
                tma::mbar_expect_tx(full(s), L::kTxBytes);
                const uint32_t sk = s_k(s);
#pragma unroll
                for (int b = 0; b < L::kQBoxes; ++b) {
                    tma::load_3d(sk + b * kBN * kBoxBytes, &tm_k, b * kBoxBytes, w.kv_head, w.k_start + j * kBN,
                                 full(s));
                }
#pragma unroll
                for (int b = 0; b < 2; ++b) {
                    tma::load_3d(sk + L::kKBytes + b * L::kVBoxBytes, &tm_vt,
                                 static_cast<int>(vt_col0 + j * kBN + b * kBoxBytes), 0, w.kv_head, full(s));
                }
                if (++s == kStages) {
                    s = 0;
                    ring_phase ^= 1u;
                }
            }
        }
        tile_sched::finish(a.sched, static_cast<int>(gridDim.x));
        return;
    }
    // ------------------------------------------------------------ consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int cw = wg - 1;
    const int lane = tid & 31;
    const int t4 = lane & 3;
    // The value tiles' ones rows (TMA never writes them), made visible to the tensor cores' async proxy before the
    // first value product.
    for (int i = tid - 128; i < kStages * 2 * 8 * kBoxBytes / 16; i += 256) {
        const int per_stage = 2 * 8 * kBoxBytes / 16;
        const int st = i / per_stage, r = i % per_stage, b = r / (8 * kBoxBytes / 16), w = r % (8 * kBoxBytes / 16);
        const uint32_t addr = s_k(st) + L::kKBytes + b * L::kVBoxBytes + kDv * kBoxBytes + 16 * w;
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0x38383838u) : "memory");
    }
    wgmma::fence_proxy_async();
    tma::named_sync(3, 256);
    const uint32_t q_rows = s_q + static_cast<uint32_t>(cw) * 64 * kBoxBytes;
    // Per tile it of an item (key tile j = n_tiles - 1 - it): the scores' wgmma is issued together with the
    // previous tile's value wgmma, so that this tile's softmax runs while the tensor cores do the previous tile's
    // P V (FlashAttention-3's intra-warpgroup overlap): issue S_it, issue O += P_(it-1) V_(it-1), wait for S_it,
    // mask / max / exp2 / row sums of S_it, wait for the value product, release the previous tile's stage, rescale O
    // by the max's correction and pack P_it. The last tile's value product runs after the loop. The ring of key tiles
    // runs on across items.
    // kQRegs: q's A fragments live in registers (loaded once per item from the swizzled tile), so the score products
    // read only k from shared memory, and the q tile is free for the next item as soon as they are loaded.
    uint32_t qf[kQRegs ? kDqk / 32 : 1][4];
    // Descriptors: one per tile base, the k steps' offsets added as constants (a descriptor's address field is the
    // byte address / 16 and shared memory stays below 256 KiB, so desc(a + off) = desc(a) + off / 16 never carries).
    const uint64_t q_desc = sw64_desc(q_rows);
    constexpr int kAcc = kDv / 2 + 4;  // O's d_v columns, then 8 columns that all accumulate the row sum l (pv_mma)
    float o[kAcc];
    auto issue_scores = [&](int st, float(&sc)[64]) {
        const uint64_t k_desc = sw64_desc(s_k(st));
        wgmma::reg_fence(sc);
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kDqk / 32; ++ks) {
            const uint64_t koff = static_cast<uint64_t>(((ks >> 1) * kBN * kBoxBytes + (ks & 1) * 32) >> 4);
            if constexpr (kQRegs) {
                wgmma::m64n128k32_e4m3_rs(sc, qf[ks], k_desc + koff, ks != 0 ? 1 : 0);
            } else {
                const uint64_t qoff = static_cast<uint64_t>(((ks >> 1) * kBM * kBoxBytes + (ks & 1) * 32) >> 4);
                wgmma::m64n128k32_e4m3(sc, q_desc + qoff, k_desc + koff, ks != 0 ? 1 : 0);
            }
        }
        wgmma::commit();
    };
    auto issue_values = [&](int st, const uint32_t(&pa)[4][4]) {
        const uint64_t v_desc = sw64_desc(s_k(st) + L::kKBytes);
        wgmma::reg_fence(o);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const uint64_t voff = static_cast<uint64_t>(((kk >> 1) * L::kVBoxBytes + (kk & 1) * 32) >> 4);
            pv_mma<kDv>(o, pa[kk], v_desc + voff);
        }
        wgmma::commit();
    };
    auto release = [&](int st) {
        if ((tid & 127) == 0) tma::mbar_arrive(empty(st));
    };
    int ring = 0;  // ring position of the next key tile
    uint32_t ring_phase = 0;
    auto next_stage = [&] {
        const int st = ring;
        const uint32_t ph = ring_phase;
        if (++ring == kStages) {
            ring = 0;
            ring_phase ^= 1u;
        }
        return std::pair<int, uint32_t>{st, ph};
    };
    for (uint32_t n = 0;; ++n) {
        tma::mbar_wait(q_full, n & 1u);
        const attn_wgmma::CtaWork cta = attn_wgmma::read_work(work_slot);
        if (cta.n_tiles < 0) break;
        const int n_tiles = cta.n_tiles;
        const attn_wgmma::ConsumerRows rows = attn_wgmma::consumer_rows(cta, cw, tid, a.causal);
        // Score units -> log2 units of the logits: scale * log2(e) * q_descale(row) * k_descale(tile), the last factor
        // per key tile (k_descale_block: one descale per tile of keys; per tensor, the same every tile); kept positive
        // so that a masked -inf score stays -inf (a zero descale is a caller's mistake). Rows past the sequence take
        // q_descale 1.
        auto q_descale = [&](int r) {
            return r < cta.len_q ? __ldg(a.q_descale + (static_cast<int64_t>(cta.q_start) + r) * a.qd0 +
                                         static_cast<int64_t>(cta.head) * a.qd1)
                                 : 1.0f;
        };
        const float cq_lo = a.scale * 1.4426950408889634f * q_descale(rows.r_lo);
        const float cq_hi = a.scale * 1.4426950408889634f * q_descale(rows.r_lo + 8);
        // Key tile j's k descale (at its first key): read before the tile's score product is awaited, so that the
        // load's latency stays off the softmax's path.
        auto k_tile_descale = [&](int j) {
            return __ldg(a.k_descale + (static_cast<int64_t>(cta.k_start) + j * kBN) * a.kd0 +
                         static_cast<int64_t>(cta.kv_head) * a.kd1);
        };
        if constexpr (kQRegs) {
            // The A fragment of k32 step ks: rows r, r + 8 (r = this thread's row in the tile), columns 4 t .. 4 t + 3
            // (words 0, 1) and 16 + 4 t .. (words 2, 3) of box ks / 2's half ks % 2; TMA's 64-byte swizzle XORs the
            // 16-byte chunk with (row / 2) % 4 (the same for r and r + 8).
            const int r = 64 * cw + 16 * ((tid >> 5) & 3) + (lane >> 2);
            const uint32_t sw = static_cast<uint32_t>((r >> 1) & 3);
#pragma unroll
            for (int ks = 0; ks < kDqk / 32; ++ks) {
                const uint32_t row_lo =
                    s_q + static_cast<uint32_t>((ks >> 1) * kBM * kBoxBytes + r * kBoxBytes + 4 * t4);
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    const uint32_t chunk = static_cast<uint32_t>(2 * (ks & 1) + (w >> 1));
                    const uint32_t addr = row_lo + (w & 1) * 8 * kBoxBytes + ((chunk ^ sw) << 4);
                    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(qf[ks][w]) : "r"(addr) : "memory");
                }
            }
            tma::mbar_arrive(q_empty);  // (release: the loads above are done before the producer refills the tile)
        }
#pragma unroll
        for (int i = 0; i < kAcc; ++i) o[i] = 0.0f;
        float m_lo = -INFINITY, m_hi = -INFINITY;  // the rows' running maxima of the logits in log2 units
        // Mask, running max and exp2 of one tile's scores, into pa as the probabilities times 2^8 in e4m3 (the value
        // product's A fragments), sk the tile's k descale; returns the correction of the previous accumulators (O and
        // the row sums) for the two rows.
        auto softmax = [&](float(&sc)[64], int j, float sk, float& corr_lo, float& corr_hi, uint32_t(&pa)[4][4]) {
            attn_wgmma::mask_tile(sc, j * kBN, t4, rows.lim_lo, rows.lim_hi);
            const float c_lo = fmaxf(cq_lo * sk, 1e-30f), c_hi = fmaxf(cq_hi * sk, 1e-30f);
            float mx_lo, mx_hi;
            attn_wgmma::tile_row_max(sc, -INFINITY, -INFINITY, mx_lo, mx_hi);
            // (c > 0: the max of the scaled scores is the scaled max, and -inf stays -inf)
            mx_lo = fmaxf(m_lo, mx_lo * c_lo);
            mx_hi = fmaxf(m_hi, mx_hi * c_hi);
            // A row with no visible key so far keeps max -inf: its terms are exp2(-inf) = 0 and its state unchanged.
            const float base_lo = mx_lo == -INFINITY ? 0.0f : mx_lo;
            const float base_hi = mx_hi == -INFINITY ? 0.0f : mx_hi;
            corr_lo = m_lo == -INFINITY ? 0.0f : ex2(m_lo - base_lo);  // 0: nothing accumulated yet
            corr_hi = m_hi == -INFINITY ? 0.0f : ex2(m_hi - base_hi);
            // p * 2^8 = 2^(s c - base + 8): the e4m3 scale folded into the exponent
            const float nb_lo = kPScaleLog2 - base_lo, nb_hi = kPScaleLog2 - base_hi;
            m_lo = mx_lo;
            m_hi = mx_hi;
            attn_wgmma::exp2_pack_e4m3<kFma>(sc, c_lo, c_hi, nb_lo, nb_hi, pa);
        };

        // (a.pingpong: the warpgroups take turns issuing; the O accumulator's row-sum columns are rescaled with it)
        const attn_wgmma::PingPong pp{a.pingpong && n_tiles > 0, cw};
        pp.open();
        float s[64];
        // P's A fragments in two sets: tile it's probabilities are packed into one while tile it - 1's value product
        // still reads the other, so that the pack runs beside that product instead of after its wait.
        uint32_t pa0[4][4], pa1[4][4];
        int prev = 0;  // the stage of the tile whose value product is next
        if (n_tiles > 0) {
            const float sk = k_tile_descale(n_tiles - 1);
            const auto [st, ph] = next_stage();
            tma::mbar_wait(full(st), ph);
            pp.begin();
            issue_scores(st, s);
            pp.end(false);
            wgmma::wait<0>();
            wgmma::reg_fence(s);
            float corr_lo, corr_hi;
            if (a.mma_only) {
#pragma unroll
                for (int i = 0; i < 16; ++i) pa0[i / 4][i % 4] = pa1[i / 4][i % 4] = 0x38383838u;
            } else {
                softmax(s, n_tiles - 1, sk, corr_lo, corr_hi, pa0);  // o is 0: no rescale
            }
            prev = st;
        }
        // Tile it: its scores issued with tile it - 1's value product (from pa_prev), its softmax and pack (into
        // pa_next) while that product runs, then the wait, the stage's release and O's rescale.
        auto step = [&](int it, uint32_t(&pa_prev)[4][4], uint32_t(&pa_next)[4][4]) {
            const float sk = k_tile_descale(n_tiles - 1 - it);
            const auto [st, ph] = next_stage();
            tma::mbar_wait(full(st), ph);
            pp.begin();
            issue_scores(st, s);
            issue_values(prev, pa_prev);
            pp.end(false);
            wgmma::wait<1>();  // the scores (committed first)
            wgmma::reg_fence(s);
            float corr_lo = 1.0f, corr_hi = 1.0f;
            if (!a.mma_only) {
                softmax(s, n_tiles - 1 - it, sk, corr_lo, corr_hi, pa_next);
            }
            wgmma::wait<0>();  // the value product
            wgmma::reg_fence(o);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    asm volatile("" : "+r"(pa_prev[kk][w])::"memory");  // live until the MMA is done
                }
            }
            release(prev);
            // (a warp whose rows kept their max skips the multiplications: exact, corr is 1)
            if (__any_sync(0xffffffffu, corr_lo != 1.0f || corr_hi != 1.0f)) {
                attn_wgmma::rescale_rows(o, corr_lo, corr_hi);
            }
            prev = st;
        };
        int it = 1;
        for (; it + 1 < n_tiles; it += 2) {
            step(it, pa0, pa1);
            step(it + 1, pa1, pa0);
        }
        const bool odd = it < n_tiles;  // one tile left: its probabilities end in pa1
        if (odd) step(it, pa0, pa1);
        if (n_tiles > 0) {
            pp.begin();
            if (odd) {  // the last tile's stage
                issue_values(prev, pa1);
            } else {
                issue_values(prev, pa0);
            }
            pp.end(true);
            wgmma::wait<0>();
            wgmma::reg_fence(o);
            release(prev);
        }
        // Without q in registers the score products read the q tile until here.
        if constexpr (!kQRegs) tma::mbar_arrive(q_empty);
        // Epilogue: the row sums (column d_v of the accumulators), then the rows this thread holds.
        const float l_lo = o[4 * (kDv / 8)], l_hi = o[4 * (kDv / 8) + 2];
        if constexpr (sizeof(OutT) == 1 && kDv == 128) {
            if (a.out_scale != nullptr) {
                row_block_epilogue(a, o, l_lo, l_hi, m_lo, m_hi, rows.r_lo, t4, cta);
                continue;
            }
        }
        float mult = __ldg(a.v_descale);  // l sums the probabilities times 2^8 too
        if constexpr (sizeof(OutT) == 1) mult *= __ldg(a.scale_o);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = rows.r_lo + 8 * hf;
            if (r >= cta.len_q) continue;
            const float l = hf == 0 ? l_lo : l_hi;
            const float m = hf == 0 ? m_lo : m_hi;
            const float f = l > 0.0f ? mult / l : 0.0f;
            const int64_t row = static_cast<int64_t>(cta.q_start) + r;
            OutT* orow = static_cast<OutT*>(a.out) + row * a.o0 + static_cast<int64_t>(cta.head) * a.o1 + 2 * t4;
#pragma unroll
            for (int nb = 0; nb < kDv / 8; ++nb)
                store_out2<OutT>(orow + 8 * nb, o[4 * nb + 2 * hf] * f, o[4 * nb + 2 * hf + 1] * f);
            if (a.lse != nullptr && t4 == 0) {
                a.lse[row * a.l0 + cta.head] = row_lse(l, m);
            }
        }
    }
}

CUtensorMap map_u8(const void* base, const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                   const cuuint32_t (&box)[3]) {
    return tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, base, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

bool scalar_on_gpu(const TensorView& t) { return attn_wgmma::on_gpu(t) && t.dtype == DType::kF32 && t.numel() == 1; }

// A per-tensor ([1]) or per-row ([rows, heads]) f32 descale on the GPU.
bool descale_on_gpu(const TensorView& t, int64_t rows, int64_t heads) {
    if (scalar_on_gpu(t)) return true;
    return attn_wgmma::on_gpu(t) && t.dtype == DType::kF32 && t.ndim == 2 && t.size(0) == rows && t.size(1) == heads;
}

template <int kDqk, int kDv, class OutT, bool kQRegs, int kFma>
void launch(const kernels::AttentionParams& p, const Fp8AttnArgs& args, const uint8_t* vt, int64_t width, int64_t max_q,
            int n_seqs, cudaStream_t stream) {
    using L = Layout<kDqk, kDv>;
    const int64_t h = p.q.size(1), h_kv = p.k.size(1);
    const cuuint32_t qk_box[3] = {kBoxBytes, 1u, static_cast<cuuint32_t>(kBM)};
    const cuuint64_t q_dims[3] = {static_cast<cuuint64_t>(kDqk), static_cast<cuuint64_t>(h),
                                  static_cast<cuuint64_t>(p.q.size(0))};
    const cuuint64_t q_strides[2] = {static_cast<cuuint64_t>(p.q.stride(1)), static_cast<cuuint64_t>(p.q.stride(0))};
    const cuuint64_t k_dims[3] = {static_cast<cuuint64_t>(kDqk), static_cast<cuuint64_t>(h_kv),
                                  static_cast<cuuint64_t>(p.k.size(0))};
    const cuuint64_t k_strides[2] = {static_cast<cuuint64_t>(p.k.stride(1)), static_cast<cuuint64_t>(p.k.stride(0))};
    const cuuint64_t vt_dims[3] = {static_cast<cuuint64_t>(width), static_cast<cuuint64_t>(kDv),
                                   static_cast<cuuint64_t>(h_kv)};
    const cuuint64_t vt_strides[2] = {static_cast<cuuint64_t>(width), static_cast<cuuint64_t>(width * kDv)};
    const cuuint32_t vt_box[3] = {kBoxBytes, static_cast<cuuint32_t>(kDv), 1u};
    const CUtensorMap tm_q = map_u8(p.q.data, q_dims, q_strides, qk_box);
    const CUtensorMap tm_k = map_u8(p.k.data, k_dims, k_strides, qk_box);
    const CUtensorMap tm_vt = map_u8(vt, vt_dims, vt_strides, vt_box);
    auto* kernel = attention_fp8_kernel<kDqk, kDv, OutT, kQRegs, kFma>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
    // Persistent: one CTA per SM (at most one per item), taking items from the stream's counter.
    Fp8AttnArgs a = args;
    a.sched = dynamic_tile_counter(stream);
    a.items = {n_seqs, static_cast<int>(h), static_cast<int>((max_q + kBM - 1) / kBM), static_cast<int>(p.q.size(0)),
               L::kPrefixCap};
    const int64_t item_bound = static_cast<int64_t>(a.items.n_xt) * h * n_seqs;
    PENSTOCK_CHECK_LT(item_bound, int64_t{1} << 31) << "attention: too many query tiles for the FP8 kernel";
    const auto grid = static_cast<unsigned>(std::min<int64_t>(item_bound, fp8::device_sms()));
    kernel<<<grid, kThreads, L::kSmemBytes, stream>>>(tm_q, tm_k, tm_vt, a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

template <int kDqk, int kDv, int kFma>
void run_fma(const kernels::AttentionParams& p, const Fp8AttnArgs& args, const uint8_t* vt, int64_t width,
             int64_t max_q, int n_seqs, bool fp8_out, bool q_regs, cudaStream_t stream) {
    if (q_regs) {
        fp8_out ? launch<kDqk, kDv, uint8_t, true, kFma>(p, args, vt, width, max_q, n_seqs, stream)
                : launch<kDqk, kDv, bf16, true, kFma>(p, args, vt, width, max_q, n_seqs, stream);
    } else {
        fp8_out ? launch<kDqk, kDv, uint8_t, false, kFma>(p, args, vt, width, max_q, n_seqs, stream)
                : launch<kDqk, kDv, bf16, false, kFma>(p, args, vt, width, max_q, n_seqs, stream);
    }
}

template <int kDqk, int kDv>
void run(const kernels::AttentionParams& p, const Fp8AttnArgs& args, const uint8_t* vt, int64_t width, int64_t max_q,
         int n_seqs, bool fp8_out, bool q_regs, cudaStream_t stream) {
    switch (args.exp_fma) {
        case 0:
            run_fma<kDqk, kDv, 0>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
            break;
        case 4:
            run_fma<kDqk, kDv, 4>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
            break;
        case 8:
            run_fma<kDqk, kDv, 8>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
            break;
        default:
            run_fma<kDqk, kDv, kExpFmaDefault>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
            break;
    }
}

}  // namespace

bool attention_fp8_wgmma_covers(const kernels::AttentionParams& p) {
    if (p.k_rope.data != nullptr) return false;  // (the FP8 path takes its k whole)
    if (attn_wgmma::env_is("PENSTOCK_FP8_ATTENTION_KERNEL", "cudnn")) return false;
    if (p.q.dtype != DType::kF8E4M3 || p.k.dtype != DType::kF8E4M3 || p.v.dtype != DType::kF8E4M3) return false;
    if (p.out.dtype != DType::kBF16 && p.out.dtype != DType::kF8E4M3) return false;
    // (the common checks include v's 16-byte rows, which vt_kernel's loads need)
    if (!attn_wgmma::covers_common(p)) return false;
    // q / k descales per tensor or per row; per-row k ones constant over each key tile (k_descale_block == kBN)
    if (!descale_on_gpu(p.q_descale, p.q.size(0), p.q.size(1)) || !scalar_on_gpu(p.v_descale)) return false;
    if (!scalar_on_gpu(p.k_descale) &&
        !(p.k_descale_block == kBN && descale_on_gpu(p.k_descale, p.k.size(0), p.k.size(1)))) {
        return false;
    }
    if (p.out_scale.data != nullptr) {  // per row and head: d_v 128, 2-byte aligned pairs of columns
        if (p.out.dtype != DType::kF8E4M3 || p.v.size(2) != kernels::kFp8AttnOutScaleBlock ||
            p.out_scale_from != DType::kBF16) {
            return false;  // (an f32 out_scale_from: the f32 attention is the fallback's, composed in attention.cu)
        }
        if (!attn_wgmma::on_gpu(p.out_scale) || p.out.stride(2) != 1 || p.out.stride(0) % 2 != 0 ||
            p.out.stride(1) % 2 != 0 || reinterpret_cast<uintptr_t>(p.out.data) % 2 != 0) {
            return false;
        }
    } else if (p.out.dtype == DType::kF8E4M3 && !scalar_on_gpu(p.out_descale)) {
        return false;
    }
    const int64_t d_qk = p.q.size(2), d_v = p.v.size(2);
    if (!((d_qk == 64 && d_v == 64) || (d_qk == 128 && d_v == 128) || (d_qk == 192 && d_v == 128) ||
          (d_qk == 256 && d_v == 128))) {
        return false;
    }
    return fp8::device_major() == 9;
}

bool attention_fp8_wgmma(const kernels::AttentionParams& p, const float* scale_o, cudaStream_t stream) {
    if (!attention_fp8_wgmma_covers(p)) return false;
    const bool fp8_out = p.out.dtype == DType::kF8E4M3;
    PENSTOCK_CHECK(!fp8_out || scale_o != nullptr || p.out_scale.data != nullptr)
        << "attention: FP8 out needs 1 / out_descale on the device";
    const int64_t total_q = p.q.size(0), total_k = p.k.size(0), h_kv = p.k.size(1);
    const int64_t d_qk = p.q.size(2), d_v = p.v.size(2);
    if (total_q == 0) return true;
    const int n_seqs = static_cast<int>(p.cu_seqlens_q.size(0) - 1);
    const int64_t max_q = p.max_seqlen_q > 0 ? p.max_seqlen_q : total_q;
    const int64_t max_k = p.max_seqlen_k > 0 ? p.max_seqlen_k : total_k;
    // vt: every sequence's keys from a 128-aligned column (vt_kernel): at most 128 (ceil(total_k / 128) + n_seqs).
    const int64_t width = static_cast<int64_t>(kBN) * ((total_k + kBN - 1) / kBN + n_seqs);
    PENSTOCK_CHECK_LT(width, int64_t{1} << 31) << "attention: too many keys for the FP8 kernel";
    uint8_t* vt = nullptr;
    const auto vt_bytes = static_cast<size_t>(std::max<int64_t>(width * d_v * h_kv, 1));
    PENSTOCK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&vt), vt_bytes, stream));
    const auto* cu_k = p.cu_seqlens_k.ptr<const int32_t>();
    if (total_k > 0) {
        const dim3 vgrid(static_cast<unsigned>((max_k + kBN - 1) / kBN), static_cast<unsigned>(n_seqs),
                         static_cast<unsigned>(h_kv));
        const auto* v = static_cast<const uint8_t*>(p.v.data);
        if (d_v == 64) {
            vt_kernel<64><<<vgrid, 256, 0, stream>>>(v, p.v.stride(0), p.v.stride(1), vt, width, cu_k);
        } else {
            vt_kernel<128><<<vgrid, 256, 0, stream>>>(v, p.v.stride(0), p.v.stride(1), vt, width, cu_k);
        }
        PENSTOCK_CUDA_LAUNCH_CHECK();
    }
    Fp8AttnArgs args{};
    args.out = p.out.data;
    args.lse = p.lse.data != nullptr ? p.lse.ptr<float>() : nullptr;
    args.cu_q = p.cu_seqlens_q.ptr<const int32_t>();
    args.cu_k = cu_k;
    args.q_descale = p.q_descale.ptr<const float>();
    args.k_descale = p.k_descale.ptr<const float>();
    args.v_descale = p.v_descale.ptr<const float>();
    if (p.q_descale.numel() != 1) {
        args.qd0 = p.q_descale.stride(0);
        args.qd1 = p.q_descale.stride(1);
    }
    if (p.k_descale.numel() != 1) {
        args.kd0 = p.k_descale.stride(0);
        args.kd1 = p.k_descale.stride(1);
    }
    args.scale_o = scale_o;
    if (p.out_scale.data != nullptr) {
        args.out_scale = p.out_scale.ptr<float>();
        args.os0 = p.out_scale.stride(0);
        args.os1 = p.out_scale.stride(1);
    }
    args.o0 = p.out.stride(0);
    args.o1 = p.out.stride(1);
    args.l0 = p.lse.data != nullptr ? p.lse.stride(0) : 0;
    args.group = static_cast<int>(p.q.size(1) / h_kv);
    args.scale = p.scale;
    args.causal = p.mask_kind == kernels::AttentionMaskKind::kCausalBottomRight;
    // The kernel's knobs (read per call: a benchmark flips them between runs): PENSTOCK_FP8_ATTN_PINGPONG=1 (the
    // warpgroups take turns issuing; default off), PENSTOCK_FP8_ATTN_PROBE=mma (measurement only, see
    // Fp8AttnArgs::mma_only), PENSTOCK_FP8_ATTN_QREGS=0 (q's fragments read from shared memory by every score product
    // instead of held in registers).
    args.pingpong = attn_wgmma::env_is("PENSTOCK_FP8_ATTN_PINGPONG", "1");
    args.mma_only = attn_wgmma::env_is("PENSTOCK_FP8_ATTN_PROBE", "mma");
    const bool q_regs = !attn_wgmma::env_is("PENSTOCK_FP8_ATTN_QREGS", "0");
    args.exp_fma = kExpFmaDefault;
    if (const char* e = std::getenv("PENSTOCK_FP8_ATTN_EXP_FMA"); e != nullptr) {
        const int n = std::atoi(e);
        PENSTOCK_CHECK(n == 0 || n == 4 || n == 6 || n == 8)
            << "PENSTOCK_FP8_ATTN_EXP_FMA: 0, 4, 6 or 8 (of 16 column blocks), not " << e;
        args.exp_fma = n;
    }
    if (d_qk == 64) {
        run<64, 64>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
    } else if (d_qk == 128) {
        run<128, 128>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
    } else if (d_qk == 192) {
        run<192, 128>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
    } else {
        run<256, 128>(p, args, vt, width, max_q, n_seqs, fp8_out, q_regs, stream);
    }
    PENSTOCK_CUDA_CHECK(cudaFreeAsync(vt, stream));
    return true;
}

}  // namespace penstock::cuda
