// Pieces shared by Penstock's two flash-attention forward kernels on Hopper's wgmma (attention_bf16_wgmma.cu and
// attention_fp8_wgmma.cu): a CTA's work and a consumer thread's rows, the warpgroups' ping-pong turns, the exp2 of
// the softmax, the causal / length mask of a score tile, the tile's row maxima, the accumulator's rescale, and the
// host-side checks of the AttentionParams contract that both kernels share. Both kernels hold a score tile
// as the f32 accumulator of wgmma.m64n128 over one warpgroup: per thread 64 values, sc[4 nb + e] at row r (this
// thread's row, lane / 4 within its warp's 16) and sc[4 nb + 2 + e] at row r + 8, both at key column 8 nb + 2 t + e
// (t = lane % 4, e = 0, 1). Device helpers are used from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_check.h"  // (tma_util.cuh uses its macros)
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/ops.h"

namespace penstock::cuda::attn_wgmma {

// 2^x by the special-function unit alone (ex2.approx.ftz: relative error ~2^-22, subnormal results flushed to 0);
// exp2f adds range handling around it, and the softmax is bound by these instructions.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two exponentials on the FMA pipes, for the share of a score tile's exponentials that the FP8 softmax moves off the
// special-function unit (16 results per clock per SM, against 128 FMAs: with e4m3 products the exponentials, not the
// tensor cores, bound the softmax; FlashAttention-4 splits them the same way), as the e4m3 bytes of a 16-bit word
// (2^x0 in the low byte). In f16x2, so that each instruction does two: x0, x1 <= 8 (the FP8 softmax's arguments, the
// 2^8 probability scale in them) are rounded to f16 (|error| <= 2^-8 for |x| < 16: 0.27% of the result), clamped at
// -10.5 (2^-10.5 and below round to e4m3's 0, as a masked -inf must), rounded to the nearest integer j by adding and
// subtracting 1547 = 1536 + 11 (the f16 step is 1 on [1024, 2048), and the low six mantissa bits of the sum hold
// j + 11, in [0, 19]), 2^(x - j) taken from a degree-2 polynomial fitted for relative error on [-0.5, 0.5] (1.73e-3)
// with its coefficients times 2^-11 (so that the value, 2^-11.5 .. 2^-10.5, is a normal f16 whose exponent field takes
// j + 11 without a carry out of its half), then j + 11 added to both exponent fields by one integer multiply-add:
// 2^(x - j) 2^-11 2^(j + 11). Relative error about 0.5% (a host model of the f16 roundings) before the e4m3 cast,
// whose rounding step is 6.25%; nine instructions per pair (session 48: the f32 version took eight per exponential).
__device__ __forceinline__ uint16_t ex2_h2_e4m3x2(float x0, float x1) {
    uint16_t out;
    asm("{\n"
        ".reg .b32 h, t, r, f, p, j;\n"
        "cvt.rn.f16x2.f32 h, %2, %1;\n"     // x1 in the high half
        "max.f16x2 h, h, %3;\n"             // -10.5
        "add.rn.f16x2 t, h, %4;\n"          // + 1547: rounds to an integer
        "sub.rn.f16x2 r, t, %4;\n"          // j
        "sub.rn.f16x2 f, h, r;\n"           // x - j in [-0.5, 0.5], exact
        "fma.rn.f16x2 p, f, %5, %6;\n"      // 0.23842676 2^-11, 0.70344490 2^-11
        "fma.rn.f16x2 p, p, f, %7;\n"       // 1.00044305 2^-11 (rounds to 2^-11)
        "and.b32 j, t, 0x003F003F;\n"       // j + 11 in each half
        "mad.lo.u32 p, j, 1024, p;\n"       // into the exponent fields
        "cvt.rn.satfinite.e4m3x2.f16x2 %0, p;\n"
        "}\n"
        : "=h"(out)
        : "f"(x0), "f"(x1), "r"(0xC940C940u), "r"(0x660B660Bu), "r"(0x07A107A1u), "r"(0x0DA10DA1u), "r"(0x10001000u));
    return out;
}

// The e4m3 bytes of two floats (a in the low byte).
__device__ __forceinline__ uint16_t e4m3x2(float a, float b) {
    uint16_t out;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(out) : "f"(a), "f"(b));
    return out;
}

// The FP8 softmax's exponentials of one score tile, straight into the value product's A fragments: 2^(sc c + b) with
// (c, b) = (c_lo, b_lo) on the thread's first row and (c_hi, b_hi) on its second, cast to e4m3. kFma of every 16
// column blocks (8 keys each, spread over the tile: block nb when nb kFma mod 16 < kFma) take their exponentials on
// the FMA pipes (ex2_h2_e4m3x2, two keys at a time), the rest on the special-function unit (ex2). pa[kk] is the A
// fragment of key step kk (32 keys): word 2 q + hf holds row hf's column blocks 4 kk + 2 q and 4 kk + 2 q + 1, two
// keys each, in the score accumulator's column order (the value tiles' keys are stored in that order,
// attention_fp8_wgmma.cu's vt_perm).
template <int kFma>
__device__ __forceinline__ void exp2_pack_e4m3(const float (&sc)[64], float c_lo, float c_hi, float b_lo, float b_hi,
                                               uint32_t (&pa)[4][4]) {
    static_assert(kFma >= 0 && kFma <= 16, "column blocks on the FMA pipes");
    uint16_t e[16][2];
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
        const bool fma_pipe = (nb * kFma) % 16 < kFma;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const float c = hf == 0 ? c_lo : c_hi, b = hf == 0 ? b_lo : b_hi;
            const float x0 = fmaf(sc[4 * nb + 2 * hf], c, b), x1 = fmaf(sc[4 * nb + 2 * hf + 1], c, b);
            e[nb][hf] = fma_pipe ? ex2_h2_e4m3x2(x0, x1) : e4m3x2(ex2(x0), ex2(x1));
        }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int nb = 4 * kk + 2 * (w >> 1), hf = w & 1;
            asm("mov.b32 %0, {%1, %2};\n" : "=r"(pa[kk][w]) : "h"(e[nb][hf]), "h"(e[nb + 1][hf]));
        }
    }
}

// Sets to -inf the scores of the keys past each of the thread's two rows' last visible key (lim_lo / lim_hi, the
// sequence's key index) in the tile whose first key is tile_key0; a tile entirely visible to both rows is untouched.
__device__ __forceinline__ void mask_tile(float (&sc)[64], int tile_key0, int t4, int lim_lo, int lim_hi) {
    if (tile_key0 + 127 <= lim_lo && tile_key0 + 127 <= lim_hi) return;
    const int key0 = tile_key0 + 2 * t4;
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int key = key0 + 8 * nb + e;
            if (key > lim_lo) sc[4 * nb + e] = -INFINITY;
            if (key > lim_hi) sc[4 * nb + 2 + e] = -INFINITY;
        }
    }
}

// The maxima of this thread's own 32 scores of each of its two rows (lo, hi), by a tree (depth 5 instead of a chain of
// 32 dependent max operations); the quad of lanes that shares the rows holds the rest (quad_max).
__device__ __forceinline__ void thread_row_max(const float (&sc)[64], float& t_lo, float& t_hi) {
    float x_lo[16], x_hi[16];
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
        x_lo[nb] = fmaxf(sc[4 * nb], sc[4 * nb + 1]);
        x_hi[nb] = fmaxf(sc[4 * nb + 2], sc[4 * nb + 3]);
    }
#pragma unroll
    for (int lvl = 0; lvl < 4; ++lvl) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int w = 8 >> lvl;
            if (i < w) {
                x_lo[i] = fmaxf(x_lo[i], x_lo[i + w]);
                x_hi[i] = fmaxf(x_hi[i], x_hi[i + w]);
            }
        }
    }
    t_lo = x_lo[0];
    t_hi = x_hi[0];
}

// The maximum of x over the quad of lanes that holds a row.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// The running maxima of the thread's two rows after this tile: max(m, the tile's row max), by thread_row_max's tree
// and then across the quad that shares the rows.
__device__ __forceinline__ void tile_row_max(const float (&sc)[64], float m_lo, float m_hi, float& mx_lo,
                                             float& mx_hi) {
    float t_lo, t_hi;
    thread_row_max(sc, t_lo, t_hi);
    mx_lo = fmaxf(m_lo, t_lo);
    mx_hi = fmaxf(m_hi, t_hi);
    mx_lo = quad_max(mx_lo);
    mx_hi = quad_max(mx_hi);
}

// One work item: 128 query rows [m0, m0 + 128) of sequence `seq` and head `head`, with its key range: bottom-right
// causal rows i see keys j <= i + off, off = len_k - len_q; n_tiles 128-key tiles (0 when no row sees a key). valid is
// false when the rows lie past the sequence. All int, so that the producer can hand an item to the consumers through
// shared memory word by word (publish_work / read_work).
constexpr int kItemRows = 128;  // query rows per item: both kernels' CTA tile

struct CtaWork {
    int seq, head, kv_head;
    int32_t q_start, len_q, k_start, len_k;
    int m0, off, n_tiles;
    int valid;
};
constexpr int kWorkWords = sizeof(CtaWork) / 4;
static_assert(sizeof(CtaWork) % 4 == 0, "CtaWork: whole words");

template <int kBN>
__device__ __forceinline__ CtaWork work_of(int seq, int head, int m0, const int32_t* cu_q, const int32_t* cu_k,
                                           int group, bool causal) {
    CtaWork w{};
    w.seq = seq;
    w.head = head;
    w.kv_head = head / group;
    w.q_start = cu_q[seq];
    w.len_q = cu_q[seq + 1] - w.q_start;
    w.k_start = cu_k[seq];
    w.len_k = cu_k[seq + 1] - w.k_start;
    w.m0 = m0;
    w.valid = m0 < w.len_q ? 1 : 0;
    w.off = w.len_k - w.len_q;
    int last_key = w.len_k - 1;
    if (causal) last_key = min(last_key, m0 + kItemRows - 1 + w.off);
    w.n_tiles = last_key >= 0 ? last_key / kBN + 1 : 0;
    return w;
}

// The work of one CTA of a per-CTA grid (the bf16 kernel): blockIdx.z's sequence, blockIdx.y's head, and the query
// tiles along x reversed, so that the longest rows start first.
template <int kBM, int kBN>
__device__ __forceinline__ CtaWork cta_work(const int32_t* cu_q, const int32_t* cu_k, int group, bool causal) {
    static_assert(kBM == kItemRows, "work_of's query tile");
    return work_of<kBN>(static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.y),
                        (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kBM, cu_q, cu_k, group,
                        causal);
}

// ------------------------------------------------------------------------------------------------ persistent items
// The FP8 kernel is persistent: one CTA per SM takes work items from tile_sched's counter (tile_sched.h: the producer
// takes the next item once the q tile is free, and hands it to the consumers through shared memory), so the next
// item's q and first key tiles load while the consumers finish the current one. The items are the (sequence, head,
// 128-row query tile) triples, sequence-major, then head, then the query tiles from the last (most keys) to the
// first, so the items running at once share one head's keys in L2 and the longest of a head start first. On the H200
// (docs/perf/2026-12-04-s29.md) the attention of DeepSeek-V3's FP8 layer at T = 4096 ran 8% faster than with one CTA
// per item, and at T = 16384 the same. The rest of the per-item cost (the MMA-only probe: 1045 TFLOP/s at 4K against
// 1230 at 16K) is the consumers' own drain (an item's first scores alone, its last value product alone, the
// epilogue). Issuing the next item's first scores beside the last value product gained the probe 3% but lost the
// kernel 2-4% (the consumers' registers; dropped, diff in that page's folder).
// The bf16 kernel stays one CTA per item: made persistent the same way it ran 2% slower at 16K and no faster at 4K.
// With up to prefix_cap sequences (as many as the kernel's shared memory has room for) the items are the GEMMs'
// grouped tiles (tile_util.cuh: the sequences as groups of query rows, the heads as n-tiles of width 1): the whole CTA
// scans the sequences' item counts (ceil(len_q / 128) x heads) into a prefix in shared memory before the warp roles
// split, and only valid items are handed out. With more, the items are a dense grid of n_xt = ceil(max_seqlen_q / 128)
// tiles per (sequence, head), and the producer skips the ones past their sequence (many sequences with a long maximum
// are then slow to skip).
struct ItemSpace {
    int n_seqs, n_heads, n_xt;  // n_xt: the dense grid's query tiles per (sequence, head)
    int total_q;                // query rows of the launch (cu_q is clamped to it)
    int prefix_cap;             // the most sequences the shared-memory prefix takes
};

// Every thread of the CTA, before the warp roles split (ends with a barrier): when n_seqs <= prefix_cap,
// tile::build_group_tile_prefix over cu_q (offs[0..n_seqs] the clamped cu_q, prefix[0..n_seqs] the items before each
// sequence, scan 32 ints of scratch). Returns the item count (dense: n_xt x heads x sequences).
__device__ __forceinline__ int build_item_prefix(const ItemSpace& sp, const int32_t* cu_q, int* prefix, int* offs,
                                                 int* scan) {
    if (sp.n_seqs > sp.prefix_cap) return sp.n_xt * sp.n_heads * sp.n_seqs;
    return tile::build_group_tile_prefix<kItemRows>(cu_q, sp.total_q, sp.n_seqs, sp.n_heads, prefix, offs, scan);
}

// Work item u (< the count build_item_prefix returned): sequence-major, then head, then the query tiles from the last
// (tile::decode_group_tile's m-tiles reversed); valid == 0 only on the dense grid.
template <int kBN>
__device__ __forceinline__ CtaWork work_item(int u, const ItemSpace& sp, const int* prefix, const int* offs,
                                             const int32_t* cu_q, const int32_t* cu_k, int group, bool causal) {
    if (sp.n_seqs > sp.prefix_cap) {
        const int x = u % sp.n_xt, rest = u / sp.n_xt;
        return work_of<kBN>(rest / sp.n_heads, rest % sp.n_heads, (sp.n_xt - 1 - x) * kItemRows, cu_q, cu_k, group,
                            causal);
    }
    const tile::GroupTile t = tile::decode_group_tile<kItemRows, 1>(u, prefix, offs, sp.n_seqs);
    const int first = offs[t.group];
    const int n_xt = (offs[t.group + 1] - first + kItemRows - 1) / kItemRows;  // this sequence's query tiles
    return work_of<kBN>(t.group, t.n0, (n_xt - 1 - (t.row0 - first) / kItemRows) * kItemRows, cu_q, cu_k, group,
                        causal);
}

// The producer's item to the consumers (its words into shared memory, published by the q tile's barrier arrive),
// and the consumers' copy after that barrier's wait, broadcast from lane 0 so that ptxas knows every field is
// warp-uniform (uniform registers and branches, as for blockIdx-derived values).
__device__ __forceinline__ void publish_work(int* slot, const CtaWork& w) {
    const int* src = reinterpret_cast<const int*>(&w);
#pragma unroll
    for (int i = 0; i < kWorkWords; ++i) slot[i] = src[i];
}
__device__ __forceinline__ CtaWork read_work(const int* slot) {
    CtaWork w;
    int* dst = reinterpret_cast<int*>(&w);
#pragma unroll
    for (int i = 0; i < kWorkWords; ++i) {
        dst[i] = __shfl_sync(0xffffffffu, static_cast<const volatile int*>(slot)[i], 0);
    }
    return w;
}

// A consumer thread's two rows (r_lo and r_lo + 8 of the sequence: consumer warpgroup cw holds rows [64 cw, +64) of
// the tile, its warps 16 each) and each row's last visible key.
struct ConsumerRows {
    int r_lo, lim_lo, lim_hi;
};

__device__ __forceinline__ ConsumerRows consumer_rows(const CtaWork& w, int cw, int tid, bool causal) {
    ConsumerRows r{};
    r.r_lo = w.m0 + 64 * cw + 16 * ((tid >> 5) & 3) + ((tid & 31) >> 2);
    r.lim_lo = causal ? min(r.r_lo + w.off, w.len_k - 1) : w.len_k - 1;
    r.lim_hi = causal ? min(r.r_lo + 8 + w.off, w.len_k - 1) : w.len_k - 1;
    return r;
}

// The two consumer warpgroups taking turns at issuing their wgmma (FlashAttention-3's ping-pong): named barrier
// 1 + cw lets warpgroup cw issue, and each hands the turn to the other after issuing, so one's softmax overlaps the
// other's tensor-core work. Both issue n_tiles + 1 times; warpgroup 1 opens with a hand-over (open()) and skips its
// last one, so every barrier phase gets its 256 threads. Everything is a no-op when off.
struct PingPong {
    bool on;
    int cw;
    __device__ __forceinline__ void open() const {
        if (on && cw == 1) tma::named_arrive(1, 256);
    }
    __device__ __forceinline__ void begin() const {
        if (on) tma::named_sync(1 + cw, 256);
    }
    __device__ __forceinline__ void end(bool final_turn) const {
        if (on && !(cw == 1 && final_turn)) tma::named_arrive(2 - cw, 256);
    }
};

// Multiplies the accumulator's rows by the softmax's corrections (N / 4 column pairs per row, rows r and r + 8).
template <int N>
__device__ __forceinline__ void rescale_rows(float (&o)[N], float corr_lo, float corr_hi) {
#pragma unroll
    for (int nb = 0; nb < N / 4; ++nb) {
        o[4 * nb] *= corr_lo;
        o[4 * nb + 1] *= corr_lo;
        o[4 * nb + 2] *= corr_hi;
        o[4 * nb + 3] *= corr_hi;
    }
}

// ------------------------------------------------------------------------------------------------ host side

inline bool env_is(const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::strcmp(v, value) == 0;
}

inline bool on_gpu(const TensorView& t) { return t.device == Device::kCUDA && t.data != nullptr; }

// A TMA-loadable [rows, heads, d] operand: last dim contiguous, 16-byte aligned start and row / head strides.
inline bool tma_rows(const TensorView& t, bool head_bcast = false) {
    const auto bytes = static_cast<int64_t>(dtype_bytes(t.dtype, 1));
    return t.ndim == 3 && t.stride(2) == 1 && t.stride(0) > 0 &&
           (t.stride(1) > 0 || (head_bcast && t.stride(1) == 0)) && (t.stride(0) * bytes) % 16 == 0 &&
           (t.stride(1) * bytes) % 16 == 0 && (reinterpret_cast<uintptr_t>(t.data) & 15u) == 0;
}

// The contract checks both kernels share (everything but the dtypes and head dims): the promised masks
// (kCausalBottomRight with causal and q_pos_step 1, or kAllVisible), positive scale, 3-d q / k / v / out on the GPU
// with matching sizes and TMA-loadable q / k / v, out in element pairs (stride(2) 1, even strides, 4-byte aligned),
// an optional f32 lse [total_q, H] with contiguous rows, GQA, and int32 cu_seqlens of up to 65535 sequences. With
// k_rope (AttentionParams), k and k_rope each whole 64-column TMA boxes of rows ([total_k, H_kv, *], k_rope's head
// stride may be 0) in k's dtype, their widths adding up to d_qk.
inline bool covers_common(const kernels::AttentionParams& p) {
    using kernels::AttentionMaskKind;
    if (p.mask_kind == AttentionMaskKind::kGeneral) return false;
    if (p.mask_kind == AttentionMaskKind::kCausalBottomRight && (!p.causal || p.q_pos_step != 1)) return false;
    if (!(p.scale > 0.0f)) return false;
    if (p.q.ndim != 3 || p.k.ndim != 3 || p.v.ndim != 3 || p.out.ndim != 3) return false;
    for (const TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.cu_seqlens_q, &p.cu_seqlens_k}) {
        if (!on_gpu(*t)) return false;
    }
    const int64_t total_q = p.q.size(0), h = p.q.size(1), d_qk = p.q.size(2);
    const int64_t total_k = p.k.size(0), h_kv = p.k.size(1), d_v = p.v.size(2);
    if (h == 0 || h_kv == 0 || h % h_kv != 0 || h > 65535) return false;
    const int64_t d_rope = p.k_rope.data != nullptr ? p.k_rope.size(2) : 0;
    if (p.k.size(2) + d_rope != d_qk || p.v.size(0) != total_k || p.v.size(1) != h_kv) return false;
    if (p.k_rope.data != nullptr) {
        if (!on_gpu(p.k_rope) || !tma_rows(p.k_rope, /*head_bcast=*/true) || p.k_rope.dtype != p.k.dtype ||
            p.k_rope.size(0) != total_k || p.k_rope.size(1) != h_kv || p.k.size(2) % 64 != 0 || d_rope % 64 != 0) {
            return false;
        }
    }
    if (p.out.size(0) != total_q || p.out.size(1) != h || p.out.size(2) != d_v) return false;
    if (total_q >= (int64_t{1} << 31) || total_k >= (int64_t{1} << 31)) return false;
    if (!tma_rows(p.q) || !tma_rows(p.k) || !tma_rows(p.v)) return false;
    if (p.out.stride(2) != 1 || p.out.stride(0) % 2 != 0 || p.out.stride(1) % 2 != 0 ||
        (reinterpret_cast<uintptr_t>(p.out.data) & 3u) != 0) {
        return false;
    }
    if (p.lse.data != nullptr && (p.lse.device != Device::kCUDA || p.lse.dtype != DType::kF32 || p.lse.ndim != 2 ||
                                  p.lse.size(0) != total_q || p.lse.size(1) != h || p.lse.stride(1) != 1)) {
        return false;
    }
    return p.cu_seqlens_q.ndim == 1 && p.cu_seqlens_k.ndim == 1 && p.cu_seqlens_q.size(0) >= 2 &&
           p.cu_seqlens_k.size(0) == p.cu_seqlens_q.size(0) && p.cu_seqlens_q.size(0) - 1 <= 65535 &&
           p.cu_seqlens_q.dtype == DType::kI32 && p.cu_seqlens_k.dtype == DType::kI32 &&
           p.cu_seqlens_q.stride(0) == 1 && p.cu_seqlens_k.stride(0) == 1;
}

}  // namespace penstock::cuda::attn_wgmma
