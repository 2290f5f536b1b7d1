// dsa_indexer_logits on Hopper tensor cores (IndexerVariant::kWgmma; contract kernels/ops_dsa.h, dispatch dsa.cu).
// sm_90a. fp8 only: head_dim 128, n_heads kHeads = 32 (GLM-5) or 64 (DeepSeek-V3.2).
//
// The GEMM per CTA is keys x (query row, head): A = a 64-key tile of k (M = 64 keys, K = head_dim), B = the CTA's
// query rows with all their heads (N = 256 (row, head) pairs = kRows = 256 / kHeads rows per consumer warpgroup).
// 384 threads: a producer warpgroup (one thread issues TMA; setmaxnreg 40) and two consumer warpgroups (setmaxnreg
// 232), each with its own kRows query rows (the CTA: 2 kRows rows), both consuming every key tile. The CTA's q rows
// (2 x 32 KiB) are loaded once; the key tiles (8 KiB) stream through an 8-stage ring ("full" mbarrier: the
// producer's expect_tx; "empty": one arrive per consumer warpgroup once its wgmma retired). 128-byte swizzle on both
// operands (a head_dim-128 e4m3 row is exactly one swizzle row), so the descriptors step K by 32 bytes.
// Per key tile a consumer issues 4 wgmma.m64n256k32 (f32 accumulators, 128 per thread), then the epilogue:
//   accumulator (key row, column n = 8j + 2t + e) = q[row j * 8 / kHeads, head (8j + 2t + e) % kHeads] . k[key],
//   so each thread's 8 columns of a query row are 8 heads: it sums gate * ReLU(acc) over them (gate = weights *
//   q_scale * scale, kept in 64 registers for the CTA's life), a 2-step quad reduce-scatter (shuffles xor 2, xor 1)
//   leaves each lane kRows / 4 rows x its 2 keys, and it stores them times k_scale[key].
// The two consumers alternate their wgmma issue with two named barriers (ping-pong), so one warpgroup's epilogue runs
// under the other's tensor-core work instead of both idling the tensor cores at once.
// Causal skipping: with q_pos the CTA scores keys [0, max q_pos of its rows] only (tiles past it are never loaded
// and their logits are not written: unspecified by the contract); CTAs run latest rows (most keys) first.
// Numerics: exact e4m3 products, f32 accumulation inside the tensor core over head_dim (the hardware's reduced-
// precision fp8 accumulation, as the mma.sync variant), f32 gate / ReLU / head sum. TMA zero-fills keys past n_keys
// and rows past n_rows; their outputs are not stored.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dsa_indexer_wgmma.h"
#include "kernels/cuda/fp8_gemm_common.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_util.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda {

namespace {

constexpr int kHeadDim = 128;                  // bytes of one e4m3 row = one 128-byte swizzle row
constexpr int kKeys = 64;                      // keys per tile (wgmma M)
constexpr int kPairs = 256;                    // (row, head) pairs per consumer warpgroup (wgmma N)
constexpr int kStages = 8;                     // key-tile ring depth
constexpr int kThreads = 384;                  // producer + 2 consumer warpgroups
constexpr int kKeyTileBytes = kKeys * kHeadDim;  // 8 KiB
constexpr int kQBytes = kPairs * kHeadDim;       // 32 KiB per consumer warpgroup
constexpr int kBarBytes = (2 * kStages + 1) * 8;
constexpr int kSmemBytes = 1024 + 2 * kQBytes + kStages * kKeyTileBytes + kBarBytes;
static_assert(kSmemBytes <= 227 * 1024, "shared memory");

struct WgArgs {
    float* logits;
    const float* weights;
    const float* q_scale;
    const float* k_scale;
    const int32_t* q_pos;  // nullptr: score every key
    int64_t lg0, w0, qs0, qs1, ks0, qp0;
    int n_rows, n_keys;
    float scale;
};

__device__ __forceinline__ uint64_t make_desc(uint32_t saddr) { return wgmma::desc(saddr, 16, 1024); }

template <int kHeads>
__global__ void __launch_bounds__(kThreads, 1) dsa_indexer_logits_wgmma_kernel(const __grid_constant__ CUtensorMap tm_q,
                                                                               const __grid_constant__ CUtensorMap tm_k,
                                                                               WgArgs a) {
    constexpr int kRows = kPairs / kHeads;  // query rows per consumer warpgroup
    constexpr int kCtaRows = 2 * kRows;
    constexpr int kHalf = kRows / 2;     // rows kept after the xor-2 step
    constexpr int kQuarter = kRows / 4;  // rows kept after the xor-1 step (each lane's rows)
    static_assert(kQuarter >= 1 && kPairs % kHeads == 0 && kHeads % 8 == 0, "kHeads 32 or 64");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = tile::smem_u32(smem_raw);
    const uint32_t sbase = raw + ((1024u - (raw & 1023u)) & 1023u);
    const uint32_t q_s = sbase;                                     // [2][kPairs][128] e4m3, swizzled
    const uint32_t k_s = sbase + 2 * kQBytes;                       // [kStages][kKeys][128] e4m3, swizzled
    const uint32_t bars = k_s + kStages * kKeyTileBytes;            // full[kStages], empty[kStages], q
    const uint32_t q_bar = bars + 16 * kStages;
    const int tid = static_cast<int>(threadIdx.x);
    const int row0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kCtaRows;  // latest first

    // Keys [0, key_end) are scored: with q_pos, up to the last key any of the CTA's rows sees.
    int key_end = a.n_keys;
    if (a.q_pos != nullptr) {
        int m = -1;
        for (int i = 0; i < kCtaRows && row0 + i < a.n_rows; ++i) {
            m = max(m, __ldg(a.q_pos + static_cast<int64_t>(row0 + i) * a.qp0));
        }
        key_end = m >= a.n_keys ? a.n_keys : m + 1;
    }
    const int n_tiles = key_end > 0 ? (key_end + kKeys - 1) / kKeys : 0;
    if (n_tiles == 0) return;  // CTA-uniform, before any barrier

    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            tma::mbar_init(bars + 8 * i, 1);              // full: the producer's expect_tx
            tma::mbar_init(bars + 8 * (kStages + i), 2);  // empty: one arrive per consumer warpgroup
        }
        tma::mbar_init(q_bar, 1);
        tma::mbar_init_fence();
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
        // ------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            tma::mbar_expect_tx(q_bar, 2 * kQBytes);
            tma::load_3d(q_s, &tm_q, 0, 0, row0, q_bar);  // box 128 x kHeads x kCtaRows
            for (int it = 0; it < n_tiles; ++it) {
                const int stage = it % kStages;
                const auto use = static_cast<uint32_t>(it / kStages);
                tma::mbar_wait(bars + 8 * (kStages + stage), (use & 1u) ^ 1u);
                const uint32_t full = bars + 8 * stage;
                tma::mbar_expect_tx(full, kKeyTileBytes);
                tma::load_2d(k_s + static_cast<uint32_t>(stage) * kKeyTileBytes, &tm_k, 0, it * kKeys, full);
            }
        }
        return;
    }
    // ---------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wg - 1;
    const int lane = tid & 31;
    const int warp = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int crow0 = row0 + c * kRows;  // this warpgroup's rows [crow0, crow0 + kRows)

    // gate[j][e] for column n = 8j + 2t + e: row crow0 + 8j / kHeads, head (8j + 2t + e) % kHeads; 0 past n_rows.
    float gate[32][2];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int r = crow0 + (8 * j) / kHeads;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int h = (8 * j + 2 * t + e) % kHeads;
            gate[j][e] = r < a.n_rows ? __ldg(a.weights + static_cast<int64_t>(r) * a.w0 + h) *
                                            __ldg(a.q_scale + static_cast<int64_t>(r) * a.qs0 +
                                                  static_cast<int64_t>(h) * a.qs1) *
                                            a.scale
                                      : 0.0f;
        }
    }
    // Lane t's rows after the reduce-scatter: [rbase, rbase + kQuarter).
    const bool up1 = (t & 2) != 0;
    const bool up2 = (t & 1) != 0;
    const int rbase = (up1 ? kHalf : 0) + (up2 ? kQuarter : 0);

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    const int bar_mine = 1 + c;       // "this warpgroup may issue"
    const int bar_other = 1 + (1 - c);
    if (c == 1) tma::named_arrive(1, 256);  // warpgroup 0 issues first
    tma::mbar_wait(q_bar, 0);
    const uint32_t qc = q_s + static_cast<uint32_t>(c) * kQBytes;

    for (int it = 0; it < n_tiles; ++it) {
        const int stage = it % kStages;
        const auto use = static_cast<uint32_t>(it / kStages);
        const int key_lo = it * kKeys + 16 * warp + g;  // this thread's accumulator rows: key_lo, key_lo + 8
        const int key_hi = key_lo + 8;
        const float ks_lo = key_lo < a.n_keys ? __ldg(a.k_scale + static_cast<int64_t>(key_lo) * a.ks0) : 0.0f;
        const float ks_hi = key_hi < a.n_keys ? __ldg(a.k_scale + static_cast<int64_t>(key_hi) * a.ks0) : 0.0f;
        tma::mbar_wait(bars + 8 * stage, use & 1u);
        tma::named_sync(bar_mine, 256);
        const uint32_t ka = k_s + static_cast<uint32_t>(stage) * kKeyTileBytes;
        wgmma::reg_fence(acc);
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 32; ++ks) {
            wgmma::m64n256k32_e4m3(acc, make_desc(ka + 32 * ks), make_desc(qc + 32 * ks), ks != 0 ? 1 : 0);
        }
        wgmma::commit();
        // Hand the tensor cores to the other warpgroup; warpgroup 1 skips its last hand-over so that every arrive
        // on a named barrier meets exactly one sync.
        if (c == 0 || it + 1 < n_tiles) tma::named_arrive(bar_other, 256);
        wgmma::wait<0>();
        wgmma::reg_fence(acc);
        if ((tid & 127) == 0) tma::mbar_arrive(bars + 8 * (kStages + stage));  // stage consumed

        // Gate * ReLU summed over this thread's 8 heads of each row, for its two keys (f32, fixed order).
        float part[2][kRows];
#pragma unroll
        for (int q = 0; q < kRows; ++q) part[0][q] = part[1][q] = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int q = (8 * j) / kHeads;
            part[0][q] = fmaf(fmaxf(acc[4 * j + 0], 0.0f), gate[j][0], part[0][q]);
            part[0][q] = fmaf(fmaxf(acc[4 * j + 1], 0.0f), gate[j][1], part[0][q]);
            part[1][q] = fmaf(fmaxf(acc[4 * j + 2], 0.0f), gate[j][0], part[1][q]);
            part[1][q] = fmaf(fmaxf(acc[4 * j + 3], 0.0f), gate[j][1], part[1][q]);
        }
        // Quad reduce-scatter over t: lanes with (t & 2) keep the upper half of the rows, then (t & 1) the upper
        // quarter of that; each step sends the half the partner keeps.
        float p1[2][kHalf];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
#pragma unroll
            for (int i = 0; i < kHalf; ++i) {
                const float send = up1 ? part[k][i] : part[k][i + kHalf];
                const float keep = up1 ? part[k][i + kHalf] : part[k][i];
                p1[k][i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
            }
        }
        float p2[2][kQuarter];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
#pragma unroll
            for (int i = 0; i < kQuarter; ++i) {
                const float send = up2 ? p1[k][i] : p1[k][i + kQuarter];
                const float keep = up2 ? p1[k][i + kQuarter] : p1[k][i];
                p2[k][i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
            }
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int s = k == 0 ? key_lo : key_hi;
            const float ks = k == 0 ? ks_lo : ks_hi;
            if (s >= a.n_keys) continue;
#pragma unroll
            for (int i = 0; i < kQuarter; ++i) {
                const int r = crow0 + rbase + i;
                if (r < a.n_rows) a.logits[static_cast<int64_t>(r) * a.lg0 + s] = p2[k][i] * ks;
            }
        }
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kHeads>
void launch(const kernels::DsaIndexerLogitsParams& p, const WgArgs& args, cudaStream_t stream) {
    constexpr int kCtaRows = 2 * (kPairs / kHeads);
    const int64_t n_rows = p.q.size(0), n_keys = p.k.size(0);
    const cuuint64_t q_dims[3] = {static_cast<cuuint64_t>(kHeadDim), static_cast<cuuint64_t>(kHeads),
                                  static_cast<cuuint64_t>(n_rows)};
    const cuuint64_t q_strides[2] = {static_cast<cuuint64_t>(p.q.stride(1)), static_cast<cuuint64_t>(p.q.stride(0))};
    const cuuint32_t q_box[3] = {static_cast<cuuint32_t>(kHeadDim), static_cast<cuuint32_t>(kHeads),
                                 static_cast<cuuint32_t>(kCtaRows)};
    const cuuint64_t k_dims[2] = {static_cast<cuuint64_t>(kHeadDim), static_cast<cuuint64_t>(n_keys)};
    const cuuint64_t k_strides[1] = {static_cast<cuuint64_t>(p.k.stride(0))};
    const cuuint32_t k_box[2] = {static_cast<cuuint32_t>(kHeadDim), static_cast<cuuint32_t>(kKeys)};
    const CUtensorMap tm_q = tma::encode_u8_sw128(p.q.data, 3, q_dims, q_strides, q_box);
    const CUtensorMap tm_k = tma::encode_u8_sw128(p.k.data, 2, k_dims, k_strides, k_box);
    const int64_t grid = (n_rows + kCtaRows - 1) / kCtaRows;
    auto* kernel = dsa_indexer_logits_wgmma_kernel<kHeads>;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, stream>>>(tm_q, tm_k, args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool dsa_indexer_wgmma_supported(const kernels::DsaIndexerLogitsParams& p) {
    if (p.q.dtype != DType::kF8E4M3 || p.k.dtype != DType::kF8E4M3 || p.q.ndim != 3 || p.k.ndim != 2) return false;
    const int64_t n_heads = p.q.size(1);
    return p.q.size(2) == kHeadDim && (n_heads == 32 || n_heads == 64) && aligned16(p.q.data) &&
           aligned16(p.k.data) && p.q.stride(0) % 16 == 0 && p.q.stride(1) % 16 == 0 && p.k.stride(0) % 16 == 0 &&
           p.q.stride(0) > 0 && p.q.stride(1) > 0 && p.k.stride(0) > 0 && p.q.size(0) < (int64_t{1} << 31) &&
           p.k.size(0) < (int64_t{1} << 31) && fp8::device_major() == 9;
}

void dsa_indexer_logits_wgmma(const kernels::DsaIndexerLogitsParams& p, void* stream) {
    const int64_t n_rows = p.q.size(0), n_keys = p.k.size(0);
    if (n_rows == 0 || n_keys == 0) return;
    WgArgs a{};
    a.logits = p.logits.ptr<float>();
    a.weights = p.weights.ptr<const float>();
    a.q_scale = p.q_scale.ptr<const float>();
    a.k_scale = p.k_scale.ptr<const float>();
    a.q_pos = p.q_pos.data != nullptr ? p.q_pos.ptr<const int32_t>() : nullptr;
    a.lg0 = p.logits.stride(0);
    a.w0 = p.weights.stride(0);
    a.qs0 = p.q_scale.stride(0);
    a.qs1 = p.q_scale.stride(1);
    a.ks0 = p.k_scale.stride(0);
    a.qp0 = p.q_pos.data != nullptr ? p.q_pos.stride(0) : 0;
    a.n_rows = static_cast<int>(n_rows);
    a.n_keys = static_cast<int>(n_keys);
    a.scale = p.scale;
    const auto s = static_cast<cudaStream_t>(stream);
    if (p.q.size(1) == 32) {
        launch<32>(p, a, s);
    } else {
        launch<64>(p, a, s);
    }
}

}  // namespace penstock::cuda
