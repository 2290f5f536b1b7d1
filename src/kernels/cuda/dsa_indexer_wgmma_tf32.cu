// dsa_indexer_logits with f32 q / k on Hopper's tensor cores, three products per dot: on tf32 wgmma
// (IndexerVariant::kWgmmaTf32) and on f16 wgmma with power-of-two scaling (kWgmmaF16x3, kAuto's; below). Contract
// kernels/ops_dsa.h, dispatch dsa.cu. sm_90a; head_dim 128, n_heads 32 or 64. Measured (2048 x 8192, 32 heads,
// docs/perf/2026-12-05-s36.md): f16x3 168 TFLOP/s, tf32 140, the CUDA-core kernel 40.
//
// Numerics (as the mma.sync kMmaTf32 kernel of dsa.cu): each f32 x is split as hi = x with its low 13 mantissa bits
// cleared (what a tf32 operand keeps) and lo = x - hi (exact in f32); q.k ~ lo_k.hi_q + hi_k.lo_q + hi_k.hi_q with f32
// accumulation (the tensor cores drop lo's own low 13 bits: ~2^-22 relative per product). Each logit is computed the
// same way whatever the call's rows, keys or key split: chunked prefill gives the logits of one call.
//
// The GEMM per CTA is keys x (query row, head): A = a 64-key tile of k (M = 64), B = the CTA's kPairs = 128 (row,
// head) pairs (N = 128: 4 query rows of 32 heads or 2 of 64), K = 128. 384 threads: a producer warpgroup (one thread
// issues a TMA per key tile, f32 rows unswizzled, into a kStages ring) and two consumer warpgroups that share the
// CTA's q tile and take the key tiles in turn (consumer c the tiles c, c + 2, ...; each its own 64 accumulators), so
// one's epilogue and loads overlap the other's products.
// - q (B) is staged once, split into hi and lo tiles (2 x 64 KiB), K-major with 128-byte swizzle (16-byte chunk c of
//   B row n at chunk c ^ (n & 7) of 8-row, 1024-byte atoms; four 32-column blocks), its columns permuted within
//   each 16-column group (below) so that A's fragments are 16-byte loads.
// - A (keys) goes through registers: per 16-column group a thread loads 4 consecutive f32 of its two rows (g and
//   g + 8 of its warp's 16 keys) as two float4 loads and splits them; those 4 columns are the k steps' columns t and
//   t + 4 of two consecutive k8 steps. B's columns are stored in the same order, so each product pairs the right
//   q and k values. (Logical column 8 s' + j of a 16-column group holds original column 4 (j % 4) + 2 s' + j / 4.)
// - Per key tile a consumer issues 16 k steps x 3 wgmma.m64n128k8 in four groups of 4 steps (its A registers in
//   two slots: a group's loads and splits while the previous group's wgmmas run), then scores the tile.
// Accumulator column n = 8j + 2t + e (t = lane % 4) is the B row holding the pair (row t / L, head 32 (t % L) +
// 2j + e), L = 4 / rows per CTA lanes per row: a lane sums gate * ReLU(scale * acc) over its 32 heads by itself (and
// with 64 heads, one xor shuffle with the other half of the row's heads), for its two keys.
// Causal skipping: with q_pos the CTA scores keys [0, max q_pos of its rows] only (tiles past it are not loaded and
// their logits not written: unspecified by the contract); CTAs run latest rows (most keys) first. Calls of few rows
// split the key tiles over grid.y so that the grid fills the GPU twice.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/dsa_indexer_wgmma.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

constexpr int kD = 128;                        // head_dim
constexpr int kKeys = 64;                      // keys per tile (wgmma M)
constexpr int kPairs = 128;                    // (row, head) pairs per CTA (wgmma N)
constexpr int kStages = 3;                     // key-tile ring depth
constexpr int kThreads = 384;                  // producer + 2 consumer warpgroups
constexpr int kKeyTileBytes = kKeys * kD * 4;  // 32 KiB, f32 rows of 512 bytes
constexpr int kQTileBytes = kPairs * kD * 4;   // 64 KiB for each of hi and lo
constexpr int kQBlockBytes = kPairs * 128;     // one 32-column block of a q tile
constexpr int kSmemBytes = 1024 + 2 * kQTileBytes + kStages * kKeyTileBytes + 2 * kStages * 8;
static_assert(kSmemBytes <= 227 * 1024, "shared memory");

struct Tf32Args {
    float* logits;
    const float* q;
    const float* weights;
    const int32_t* q_pos;  // nullptr: score every key
    int64_t lg0, w0, qp0, q0, q1;
    int n_rows, n_keys;
    int tiles_per_split;  // key tiles per grid.y slice
    float scale;
};

__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

__device__ __forceinline__ void tf32_split(float x, uint32_t& hi, uint32_t& lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

// Keys [0, key_end) are scored: with q_pos, up to the last key any of rows [row0, row0 + n) sees. CTA-uniform.
__device__ __forceinline__ int key_end_of(const Tf32Args& a, int row0, int n) {
    if (a.q_pos == nullptr) return a.n_keys;
    int m = -1;
    for (int i = 0; i < n && row0 + i < a.n_rows; ++i)
        m = max(m, __ldg(a.q_pos + static_cast<int64_t>(row0 + i) * a.qp0));
    return m >= a.n_keys ? a.n_keys : m + 1;
}

template <int kHeads>
__global__ void __launch_bounds__(kThreads, 1)
    dsa_indexer_logits_wgmma_tf32_kernel(const __grid_constant__ CUtensorMap tm_k, Tf32Args a) {
    constexpr int kRows = kPairs / kHeads;  // query rows per CTA: 4 or 2
    constexpr int kL = 4 / kRows;           // lanes of a quad per query row: 1 or 2
    static_assert(kRows * kHeads == kPairs && kL * kRows == 4, "kHeads 32 or 64");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    const uint32_t sbase = raw + pad;
    const uint32_t q_hi = sbase;                              // [4 blocks][kPairs][128 B], swizzled
    const uint32_t q_lo = sbase + kQTileBytes;                // the same
    const uint32_t k_s = sbase + 2 * kQTileBytes;             // [kStages][kKeys][kD] f32
    const uint32_t bars = k_s + kStages * kKeyTileBytes;      // full[kStages], empty[kStages]
    const uint8_t* k_gen = smem_raw + pad + 2 * kQTileBytes;  // k_s as a generic pointer (the A fragment loads)
    const int tid = static_cast<int>(threadIdx.x);
    const int row0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kRows;  // latest first
    const int key_end = key_end_of(a, row0, kRows);
    const int n_tiles = key_end > 0 ? (key_end + kKeys - 1) / kKeys : 0;
    const int t_begin = static_cast<int>(blockIdx.y) * a.tiles_per_split;
    const int t_end = min(n_tiles, t_begin + a.tiles_per_split);
    if (t_begin >= t_end) return;  // CTA-uniform, before any barrier
    const int n_local = t_end - t_begin;

    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            tma::mbar_init(bars + 8 * i, 1);              // full: the producer's expect_tx
            tma::mbar_init(bars + 8 * (kStages + i), 1);  // empty: the consuming warpgroup
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer: one thread issues the TMA loads
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            tma::prefetch_map(&tm_k);
            for (int i = 0; i < n_local; ++i) {
                const int stage = i % kStages;
                const auto use = static_cast<uint32_t>(i / kStages);
                tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                const uint32_t full = bars + 8 * stage;
                tma::mbar_expect_tx(full, kKeyTileBytes);
                tma::load_2d(k_s + static_cast<uint32_t>(stage) * kKeyTileBytes, &tm_k, 0, (t_begin + i) * kKeys, full);
            }
        }
        return;
    }
    // ---------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wg - 1;
    const int ctid = tid - 128;  // 0..255 over both consumers
    const int lane = tid & 31;
    const int warp = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    // q: B row n = 8j + 2t' + e holds (row t' / kL, head 32 (t' % kL) + 2j + e); float4 m of its 128 columns (original
    // columns 4m .. 4m + 3) goes to logical columns 16 (m / 4) + {0, 4, 8, 12} + m % 4, split into hi and lo.
    for (int i = ctid; i < kPairs * (kD / 4); i += 256) {
        const int n = i / (kD / 4), m = i % (kD / 4);
        const int tq = (n % 8) / 2;
        const int r = row0 + tq / kL;
        const int h = 32 * (tq % kL) + 2 * (n / 8) + n % 2;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < a.n_rows) {
            x = __ldg(reinterpret_cast<const float4*>(a.q + static_cast<int64_t>(r) * a.q0 +
                                                      static_cast<int64_t>(h) * a.q1 + 4 * m));
        }
        const float v[4] = {x.x, x.y, x.z, x.w};
        const int kp = m / 4, tp = m % 4;
#pragma unroll
        for (int rr = 0; rr < 4; ++rr) {
            const int col = 16 * kp + 8 * (rr / 2) + 4 * (rr % 2) + tp;  // logical column
            const int chunk = (col % 32) / 4;
            const uint32_t off =
                static_cast<uint32_t>((col / 32) * kQBlockBytes + n * 128 + ((chunk ^ (n & 7)) << 4) + 4 * (col % 4));
            uint32_t hi, lo;
            tf32_split(v[rr], hi, lo);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_hi + off), "r"(hi) : "memory");
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_lo + off), "r"(lo) : "memory");
        }
    }
    wgmma::fence_proxy_async();  // the q tiles' generic-proxy stores before the wgmma reads
    tma::named_sync(1, 256);
    // This lane's query row, its gates (weights of heads 32 (t % kL) + 2j + e) and its logits row.
    const int my_row = row0 + t / kL;
    float gate[16][2];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            gate[j][e] = my_row < a.n_rows
                             ? __ldg(a.weights + static_cast<int64_t>(my_row) * a.w0 + 32 * (t % kL) + 2 * j + e)
                             : 0.0f;
        }
    }
    float* out = my_row < a.n_rows ? a.logits + static_cast<int64_t>(my_row) * a.lg0 : nullptr;

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    uint32_t ahi[2][4][4], alo[2][4][4];  // [slot][k step of the group][fragment register]
    for (int li = c; li < n_local; li += 2) {
        const int stage = li % kStages;
        const auto use = static_cast<uint32_t>(li / kStages);
        tma::mbar_wait(bars + 8 * stage, use & 1u);
        const float* rows_a = reinterpret_cast<const float*>(k_gen + stage * kKeyTileBytes) + (16 * warp + g) * kD;
        const float* rows_b = rows_a + 8 * kD;
#pragma unroll
        for (int grp = 0; grp < 4; ++grp) {
            const int slot = grp & 1;
            if (grp >= 2) {
                wgmma::wait<1>();  // group grp - 2 (this slot's last reader) retired
#pragma unroll
                for (int s = 0; s < 4; ++s) {
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        asm volatile("" : "+r"(ahi[slot][s][i]), "+r"(alo[slot][s][i])::"memory");
                }
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // the group's two 16-column blocks: k steps 2h, 2h + 1 of the group
                const int col = 16 * (2 * grp + h) + 4 * t;
                const float4 xa = *reinterpret_cast<const float4*>(rows_a + col);
                const float4 xb = *reinterpret_cast<const float4*>(rows_b + col);
                tf32_split(xa.x, ahi[slot][2 * h][0], alo[slot][2 * h][0]);
                tf32_split(xb.x, ahi[slot][2 * h][1], alo[slot][2 * h][1]);
                tf32_split(xa.y, ahi[slot][2 * h][2], alo[slot][2 * h][2]);
                tf32_split(xb.y, ahi[slot][2 * h][3], alo[slot][2 * h][3]);
                tf32_split(xa.z, ahi[slot][2 * h + 1][0], alo[slot][2 * h + 1][0]);
                tf32_split(xb.z, ahi[slot][2 * h + 1][1], alo[slot][2 * h + 1][1]);
                tf32_split(xa.w, ahi[slot][2 * h + 1][2], alo[slot][2 * h + 1][2]);
                tf32_split(xb.w, ahi[slot][2 * h + 1][3], alo[slot][2 * h + 1][3]);
            }
            wgmma::reg_fence(acc);
            wgmma::fence();
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int step = 4 * grp + s;  // global k step: block step / 4, 32 bytes per step within the row
                const uint32_t off = static_cast<uint32_t>((step / 4) * kQBlockBytes + 32 * (step % 4));
                wgmma::m64n128k8_tf32_rs(acc, alo[slot][s], make_desc(q_hi + off), step != 0 ? 1 : 0);
                wgmma::m64n128k8_tf32_rs(acc, ahi[slot][s], make_desc(q_lo + off), 1);
                wgmma::m64n128k8_tf32_rs(acc, ahi[slot][s], make_desc(q_hi + off), 1);
            }
            wgmma::commit();
        }
        wgmma::wait<0>();
        wgmma::reg_fence(acc);
#pragma unroll
        for (int slot = 0; slot < 2; ++slot) {
#pragma unroll
            for (int s = 0; s < 4; ++s) {
#pragma unroll
                for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(ahi[slot][s][i]), "+r"(alo[slot][s][i])::"memory");
            }
        }
        if ((tid & 127) == 0) tma::mbar_arrive(bars + 8 * (kStages + stage));  // stage consumed
        // acc[4j + e]: key 16 warp + g, pair column 8j + 2t + e; acc[4j + 2 + e]: key + 8.
        float s0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float v0 = a.scale * acc[4 * j + e], v1 = a.scale * acc[4 * j + 2 + e];
                s0[j % 4] += gate[j][e] * (v0 > 0.0f ? v0 : 0.0f);
                s1[j % 4] += gate[j][e] * (v1 > 0.0f ? v1 : 0.0f);
            }
        }
        float o0 = (s0[0] + s0[1]) + (s0[2] + s0[3]);
        float o1 = (s1[0] + s1[1]) + (s1[2] + s1[3]);
        if constexpr (kL == 2) {
            // The row's other 32 heads are in lane t ^ 1; both add in the same order (heads 0-31 first).
            const float p0 = __shfl_xor_sync(0xffffffffu, o0, 1);
            const float p1 = __shfl_xor_sync(0xffffffffu, o1, 1);
            o0 = (t % 2 == 0) ? o0 + p0 : p0 + o0;
            o1 = (t % 2 == 0) ? o1 + p1 : p1 + o1;
        }
        const int key = (t_begin + li) * kKeys + 16 * warp + g;
        if (out != nullptr && t % kL == 0) {
            if (key < a.n_keys) out[key] = o0;
            if (key + 8 < a.n_keys) out[key + 8] = o1;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The f16 form (IndexerVariant::kWgmmaF16x3): the same three products on f16 wgmma at twice tf32's rate. f16 has
// tf32's 11-bit significand but not its exponent range, so each key and each (row, head) q vector is first scaled by
// a power of two that puts its largest |x| in [2^14, 2^15) (exact; the scale comes off in the epilogue, also
// exactly), then split as hi = f16(x) (round to nearest) and lo = f16(x - hi): ~2^-22 relative per value, values
// below 2^-28 of the vector's largest lose bits. Same CTA shape as the tf32 kernel; q's hi / lo tiles are 32 KiB each
// (so the ring has 4 stages), per 16 columns a thread's float4 of a key row gives the f16 pairs at k-step columns
// (2t, 2t + 1) and (2t + 8, 2t + 9) (B's columns stored in that order), and a key's scale comes from its 128 values
// (a first pass over the tile's rows, max reduced over the quad that holds the row).
constexpr int kStagesH = 4;
constexpr int kQTileBytesH = kPairs * kD * 2;  // 32 KiB for each of hi and lo
constexpr int kQBlockBytesH = kPairs * 128;    // one 64-column block
constexpr int kSmemBytesH = 1024 + 2 * kQTileBytesH + kPairs * 4 + kStagesH * kKeyTileBytes + 2 * kStagesH * 8;
static_assert(kSmemBytesH <= 227 * 1024, "shared memory");

// The power of two that scales a vector of largest |x| = m into [2^14, 2^15), and its inverse (1, 1 for m = 0).
__device__ __forceinline__ void pow2_scale(float m, float& s, float& inv) {
    int shift = 0;
    if (m > 0.0f) {
        const int e = static_cast<int>((__float_as_uint(m) >> 23) & 0xffu) - 127;
        shift = min(max(14 - e, -126), 126);
    }
    s = __uint_as_float(static_cast<uint32_t>(127 + shift) << 23);
    inv = __uint_as_float(static_cast<uint32_t>(127 - shift) << 23);
}

// (x, y) scaled -> the f16 pairs hi and lo (low half x).
__device__ __forceinline__ void f16x2_split(float x, float y, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
}

template <int kHeads>
__global__ void __launch_bounds__(kThreads, 1)
    dsa_indexer_logits_wgmma_f16x3_kernel(const __grid_constant__ CUtensorMap tm_k, Tf32Args a) {
    constexpr int kRows = kPairs / kHeads;
    constexpr int kL = 4 / kRows;
    static_assert(kRows * kHeads == kPairs && kL * kRows == 4, "kHeads 32 or 64");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    const uint32_t sbase = raw + pad;
    const uint32_t q_hi = sbase;                                 // [2 blocks][kPairs][128 B] f16, swizzled
    const uint32_t q_lo = sbase + kQTileBytesH;                  // the same
    const uint32_t k_s = sbase + 2 * kQTileBytesH + kPairs * 4;  // [kStagesH][kKeys][kD] f32 (after q's scales)
    const uint32_t bars = k_s + kStagesH * kKeyTileBytes;
    float* q_inv = reinterpret_cast<float*>(smem_raw + pad + 2 * kQTileBytesH);  // [kPairs]: 2^-shift of each pair
    const uint8_t* k_gen = smem_raw + pad + 2 * kQTileBytesH + kPairs * 4;
    const int tid = static_cast<int>(threadIdx.x);
    const int row0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kRows;
    const int key_end = key_end_of(a, row0, kRows);
    const int n_tiles = key_end > 0 ? (key_end + kKeys - 1) / kKeys : 0;
    const int t_begin = static_cast<int>(blockIdx.y) * a.tiles_per_split;
    const int t_end = min(n_tiles, t_begin + a.tiles_per_split);
    if (t_begin >= t_end) return;
    const int n_local = t_end - t_begin;

    if (tid == 0) {
        for (int i = 0; i < kStagesH; ++i) {
            tma::mbar_init(bars + 8 * i, 1);
            tma::mbar_init(bars + 8 * (kStagesH + i), 1);
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            tma::prefetch_map(&tm_k);
            for (int i = 0; i < n_local; ++i) {
                const int stage = i % kStagesH;
                const auto use = static_cast<uint32_t>(i / kStagesH);
                tma::mbar_wait(bars + 8 * (kStagesH + stage), (use & 1u) ^ 1u);
                const uint32_t full = bars + 8 * stage;
                tma::mbar_expect_tx(full, kKeyTileBytes);
                tma::load_2d(k_s + static_cast<uint32_t>(stage) * kKeyTileBytes, &tm_k, 0, (t_begin + i) * kKeys, full);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wg - 1;
    const int ctid = tid - 128;
    const int lane = tid & 31;
    const int warp = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    // q: one pair per warp and step, lane m its original columns 4m .. 4m + 3 -> logical columns 16 (m / 4) +
    // 2 (m % 4) + {0, 1} and + {8, 9}; the pair's scale from the warp's max.
    for (int n = ctid / 32; n < kPairs; n += 8) {
        const int m = lane;
        const int tq = (n % 8) / 2;
        const int r = row0 + tq / kL;
        const int h = 32 * (tq % kL) + 2 * (n / 8) + n % 2;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < a.n_rows) {
            x = __ldg(reinterpret_cast<const float4*>(a.q + static_cast<int64_t>(r) * a.q0 +
                                                      static_cast<int64_t>(h) * a.q1 + 4 * m));
        }
        float mx = fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w)));
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sc, inv;
        pow2_scale(mx, sc, inv);
        if (lane == 0) q_inv[n] = inv;
        uint32_t hi0, lo0, hi1, lo1;
        f16x2_split(x.x * sc, x.y * sc, hi0, lo0);
        f16x2_split(x.z * sc, x.w * sc, hi1, lo1);
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            const int col = 16 * (m / 4) + 2 * (m % 4) + 8 * part;  // even: the pair's two f16 at col, col + 1
            const int chunk = (col % 64) / 8;
            const uint32_t off =
                static_cast<uint32_t>((col / 64) * kQBlockBytesH + n * 128 + ((chunk ^ (n & 7)) << 4) + 2 * (col % 8));
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_hi + off), "r"(part == 0 ? hi0 : hi1) : "memory");
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_lo + off), "r"(part == 0 ? lo0 : lo1) : "memory");
        }
    }
    wgmma::fence_proxy_async();
    tma::named_sync(1, 256);
    // Gates times each pair's inverse q scale (exact: a power of two).
    const int my_row = row0 + t / kL;
    float gate[16][2];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int n = 8 * j + 2 * t + e;
            gate[j][e] =
                my_row < a.n_rows
                    ? __ldg(a.weights + static_cast<int64_t>(my_row) * a.w0 + 32 * (t % kL) + 2 * j + e) * q_inv[n]
                    : 0.0f;
        }
    }
    float* out = my_row < a.n_rows ? a.logits + static_cast<int64_t>(my_row) * a.lg0 : nullptr;

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    uint32_t ahi[2][2][4], alo[2][2][4];  // [slot][k step of the group][fragment register]
    for (int li = c; li < n_local; li += 2) {
        const int stage = li % kStagesH;
        const auto use = static_cast<uint32_t>(li / kStagesH);
        tma::mbar_wait(bars + 8 * stage, use & 1u);
        const float* rows_a = reinterpret_cast<const float*>(k_gen + stage * kKeyTileBytes) + (16 * warp + g) * kD;
        const float* rows_b = rows_a + 8 * kD;
        // The two key rows' scales (max over the quad's 4 x 32 values).
        float ma = 0.0f, mb = 0.0f;
#pragma unroll
        for (int st = 0; st < 8; ++st) {
            const float4 xa = *reinterpret_cast<const float4*>(rows_a + 16 * st + 4 * t);
            const float4 xb = *reinterpret_cast<const float4*>(rows_b + 16 * st + 4 * t);
            ma = fmaxf(ma, fmaxf(fmaxf(fabsf(xa.x), fabsf(xa.y)), fmaxf(fabsf(xa.z), fabsf(xa.w))));
            mb = fmaxf(mb, fmaxf(fmaxf(fabsf(xb.x), fabsf(xb.y)), fmaxf(fabsf(xb.z), fabsf(xb.w))));
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            ma = fmaxf(ma, __shfl_xor_sync(0xffffffffu, ma, o));
            mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, o));
        }
        float sa, inv_a, sb, inv_b;
        pow2_scale(ma, sa, inv_a);
        pow2_scale(mb, sb, inv_b);
#pragma unroll
        for (int grp = 0; grp < 4; ++grp) {
            const int slot = grp & 1;
            if (grp >= 2) {
                wgmma::wait<1>();
#pragma unroll
                for (int s = 0; s < 2; ++s) {
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        asm volatile("" : "+r"(ahi[slot][s][i]), "+r"(alo[slot][s][i])::"memory");
                }
            }
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int col = 16 * (2 * grp + s) + 4 * t;
                const float4 xa = *reinterpret_cast<const float4*>(rows_a + col);
                const float4 xb = *reinterpret_cast<const float4*>(rows_b + col);
                f16x2_split(xa.x * sa, xa.y * sa, ahi[slot][s][0], alo[slot][s][0]);
                f16x2_split(xb.x * sb, xb.y * sb, ahi[slot][s][1], alo[slot][s][1]);
                f16x2_split(xa.z * sa, xa.w * sa, ahi[slot][s][2], alo[slot][s][2]);
                f16x2_split(xb.z * sb, xb.w * sb, ahi[slot][s][3], alo[slot][s][3]);
            }
            wgmma::reg_fence(acc);
            wgmma::fence();
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int step = 2 * grp + s;  // k16 step: block step / 4, 32 bytes per step within the row
                const uint32_t off = static_cast<uint32_t>((step / 4) * kQBlockBytesH + 32 * (step % 4));
                wgmma::m64n128k16_f16_rs(acc, alo[slot][s], make_desc(q_hi + off), step != 0 ? 1 : 0);
                wgmma::m64n128k16_f16_rs(acc, ahi[slot][s], make_desc(q_lo + off), 1);
                wgmma::m64n128k16_f16_rs(acc, ahi[slot][s], make_desc(q_hi + off), 1);
            }
            wgmma::commit();
        }
        wgmma::wait<0>();
        wgmma::reg_fence(acc);
#pragma unroll
        for (int slot = 0; slot < 2; ++slot) {
#pragma unroll
            for (int s = 0; s < 2; ++s) {
#pragma unroll
                for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(ahi[slot][s][i]), "+r"(alo[slot][s][i])::"memory");
            }
        }
        if ((tid & 127) == 0) tma::mbar_arrive(bars + 8 * (kStagesH + stage));
        float s0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float v0 = a.scale * (acc[4 * j + e] * inv_a), v1 = a.scale * (acc[4 * j + 2 + e] * inv_b);
                s0[j % 4] += gate[j][e] * (v0 > 0.0f ? v0 : 0.0f);
                s1[j % 4] += gate[j][e] * (v1 > 0.0f ? v1 : 0.0f);
            }
        }
        float o0 = (s0[0] + s0[1]) + (s0[2] + s0[3]);
        float o1 = (s1[0] + s1[1]) + (s1[2] + s1[3]);
        if constexpr (kL == 2) {
            const float p0 = __shfl_xor_sync(0xffffffffu, o0, 1);
            const float p1 = __shfl_xor_sync(0xffffffffu, o1, 1);
            o0 = (t % 2 == 0) ? o0 + p0 : p0 + o0;
            o1 = (t % 2 == 0) ? o1 + p1 : p1 + o1;
        }
        const int key = (t_begin + li) * kKeys + 16 * warp + g;
        if (out != nullptr && t % kL == 0) {
            if (key < a.n_keys) out[key] = o0;
            if (key + 8 < a.n_keys) out[key + 8] = o1;
        }
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool dsa_indexer_wgmma_tf32_supported(const kernels::DsaIndexerLogitsParams& p) {
    if (p.q.dtype != DType::kF32 || p.k.dtype != DType::kF32 || p.q.ndim != 3 || p.k.ndim != 2) return false;
    const int64_t n_heads = p.q.size(1);
    return p.q.size(2) == kD && (n_heads == 32 || n_heads == 64) && p.q.stride(2) == 1 && p.k.stride(1) == 1 &&
           aligned16(p.q.data) && aligned16(p.k.data) && p.q.stride(0) % 4 == 0 && p.q.stride(1) % 4 == 0 &&
           p.k.stride(0) % 4 == 0 && p.q.stride(0) > 0 && p.q.stride(1) > 0 && p.k.stride(0) > 0 &&
           p.q.size(0) < (int64_t{1} << 31) && p.k.size(0) < (int64_t{1} << 31) && fp8::device_major() == 9;
}

void dsa_indexer_logits_wgmma_tf32(const kernels::DsaIndexerLogitsParams& p, bool f16, void* stream) {
    const int64_t n_rows = p.q.size(0), n_keys = p.k.size(0), n_heads = p.q.size(1);
    if (n_rows == 0 || n_keys == 0) return;
    Tf32Args a{};
    a.logits = p.logits.ptr<float>();
    a.q = p.q.ptr<const float>();
    a.weights = p.weights.ptr<const float>();
    a.q_pos = p.q_pos.data != nullptr ? p.q_pos.ptr<const int32_t>() : nullptr;
    a.lg0 = p.logits.stride(0);
    a.w0 = p.weights.stride(0);
    a.qp0 = p.q_pos.data != nullptr ? p.q_pos.stride(0) : 0;
    a.q0 = p.q.stride(0);
    a.q1 = p.q.stride(1);
    a.n_rows = static_cast<int>(n_rows);
    a.n_keys = static_cast<int>(n_keys);
    a.scale = p.scale;
    const int64_t rows_per_cta = kPairs / n_heads;
    const int64_t groups = (n_rows + rows_per_cta - 1) / rows_per_cta;
    const int64_t tiles = (n_keys + kKeys - 1) / kKeys;
    // Few rows: split the key tiles so that the grid is at least twice the SMs (one CTA per SM).
    const int64_t want = 2 * static_cast<int64_t>(fp8::device_sms());  // cached per thread and device
    const int64_t splits = std::clamp<int64_t>((want + groups - 1) / groups, 1, std::min<int64_t>(tiles, 65535));
    a.tiles_per_split = static_cast<int>((tiles + splits - 1) / splits);
    const int64_t grid_y = (tiles + a.tiles_per_split - 1) / a.tiles_per_split;
    PENSTOCK_CHECK_LE(groups, int64_t{0x7fffffff}) << "dsa_indexer_logits: too many rows";

    const cuuint64_t k_dims[2] = {static_cast<cuuint64_t>(kD), static_cast<cuuint64_t>(n_keys)};
    const cuuint64_t k_strides[1] = {static_cast<cuuint64_t>(p.k.stride(0)) * sizeof(float)};
    const cuuint32_t k_box[2] = {static_cast<cuuint32_t>(kD), static_cast<cuuint32_t>(kKeys)};
    const CUtensorMap tm_k = tma::encode_tiled(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.k.data, 2, k_dims, k_strides, k_box,
                                               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    auto* kernel =
        f16 ? (n_heads == 32 ? dsa_indexer_logits_wgmma_f16x3_kernel<32> : dsa_indexer_logits_wgmma_f16x3_kernel<64>)
            : (n_heads == 32 ? dsa_indexer_logits_wgmma_tf32_kernel<32> : dsa_indexer_logits_wgmma_tf32_kernel<64>);
    const int smem = f16 ? kSmemBytesH : kSmemBytes;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(grid_y));
    kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(tm_k, a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
