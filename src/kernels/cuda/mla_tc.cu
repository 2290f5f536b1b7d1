// MLA absorbed-form attention on tensor cores (bf16 mma.sync.m16n8k16, fp32 accumulation, online softmax), dense
// (varlen, causal) and sparse (DSA index lists). Contract: kernels/cuda/mla_tc.h; the spec is the CPU reference.
//
// Mapping: one CTA of 8 warps = 64 query rows x all 512 output columns. Sparse: the rows are heads
// [64 b, 64 b + 64) of one query token (H > 64 takes ceil(H / 64) CTAs per token; rows past H are zero and never
// written). Dense: the rows are 64 consecutive (token, head) pairs of one sequence, flattened token-major (MQA: every
// head reads the same keys, so several tokens share a CTA when H < 64). The CTA walks its keys in tiles of 64: a key
// tile is 64 latent rows x 576 (72 KiB), gathered with cp.async (16-byte, .cg) into one of two shared-memory stages
// while the previous tile is computed; V is the first 512 columns of the same rows (no second load).
// The 8 warps form two groups of 4 (rows [0, 32) and [32, 64)); a group syncs on its own named barrier. Warp w of a
// group computes S = Q K^T for its group's 32 rows and keys [16 w, 16 w + 16) of the tile (Q and K fragments by
// ldmatrix), the group exchanges row maxima in shared memory, each warp writes its P = exp(S - m) as bf16 to a
// shared [64 x 64] tile, and then warp w accumulates O[32 rows, 128 w .. 128 w + 128) += P V (V fragments by
// ldmatrix.trans). So each warp holds 2 x 16 m16n8 accumulator tiles of O (128 fp32 registers per thread).
// Shared memory: Q 72 KiB + 2 KV stages 144 KiB + P 8 KiB + row exchange 1 KiB + valid flags 0.5 KiB = 225.5 KiB
// (one CTA per SM). Rows of Q / K / P are XOR-swizzled in 16-byte chunks (chunk ^ (row & 7) inside each 128-byte
// group) so that the 8 row addresses of every ldmatrix phase hit distinct banks.
// Numerics: S and O accumulate in fp32; the softmax runs in base 2 on scale * log2(e) * S (any sign of scale) with
// ex2.approx; the row sum l accumulates the fp32 p, while P V uses p rounded to bf16 (as FlashAttention). A row with
// no visible / valid key writes out 0 and lse -inf. Masked entries (-1, index >= n_slots, past the causal limit) score -inf and their
// rows are zero-filled, so no garbage reaches the P V product.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/mla_tc.h"
#include "kernels/cuda/mla_tc_common.cuh"

namespace penstock::cuda {

namespace mla_detail {

namespace {

constexpr int kRowBytes = kDqk * 2;          // 1152
constexpr int kTileBytes = kN * kRowBytes;   // 73728
constexpr int kQOff = 0;
constexpr int kKvOff = kM * kRowBytes;       // two stages
constexpr int kPOff = kKvOff + 2 * kTileBytes;
constexpr int kRedOff = kPOff + kM * kN * 2;  // [64 rows][4 warps] f32
constexpr int kOkOff = kRedOff + kM * 4 * 4;  // [2 stages][64] i32
constexpr int kSmemBytes = kOkOff + 2 * kN * 4;
static_assert(kSmemBytes <= 227 * 1024, "shared memory");
static_assert(kChunks % 8 == 0, "swizzle groups");

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][kChunks] bf16 tile.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
    return static_cast<uint32_t>(row * kRowBytes + ((((chunk & ~7) | ((chunk ^ row) & 7))) << 4));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Named barrier for the 4 warps (128 threads) of group `grp` (ids 1, 2; 0 is __syncthreads).
__device__ __forceinline__ void group_sync(int grp) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(grp + 1) : "memory");
}

template <bool kSparse, class OutT>
__global__ void __launch_bounds__(kThreads, 1) mla_tc_kernel(MlaTcArgs a) {
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t sbase = smem_u32(smem);
    float* red_s = reinterpret_cast<float*>(smem + kRedOff);
    int* ok_s = reinterpret_cast<int*>(smem + kOkOff);
    const int tid = static_cast<int>(threadIdx.x);
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int grp = warp / 4;  // row group: rows [32 grp, 32 grp + 32)
    const int wi = warp % 4;   // S: keys [16 wi, +16) of a tile; O: columns [128 wi, +128)
    const int g = lane / 4;
    const int t = lane % 4;
    const int x7 = lane & 7;  // the swizzle key of every row this lane addresses in ldmatrix

    // ---------------------------------------------------------------- work unit
    const MlaWork w = mla_work<kSparse>(a);
    if (!w.active) return;  // a spare CTA of the dense grid (uniform across the CTA)
    const int64_t tok_base = w.tok_base;
    const int n_valid = w.n_valid;
    const int n_tiles = w.n_tiles;
    auto visible = [&](int i) { return mla_visible(a, w, i); };
    auto row_token = [&](int i) { return mla_row_token<kSparse>(a, w, i); };
    auto row_head = [&](int i) { return mla_row_head<kSparse>(a, w, i); };

    // ---------------------------------------------------------------- loaders
    // Thread tid copies rows tid / 8 and tid / 8 + 32 of a [64 x 576] tile, chunks tid % 8 + 8 j (128 contiguous
    // bytes per 8 threads).
    const int ld_row = tid / 8;
    const int ld_c = tid % 8;
    {
        for (int pass = 0; pass < 2; ++pass) {
            const int row = ld_row + 32 * pass;
            const bool ok = row < n_valid;
            const bf16* src = ok ? a.q + row_token(row) * a.q0 + static_cast<int64_t>(row_head(row)) * a.q1 : a.q;
#pragma unroll
            for (int j = 0; j < kChunks / 8; ++j) {
                const int c = ld_c + 8 * j;
                cp_async_16(sbase + kQOff + swz(row, c), src + 8 * c, ok);
            }
        }
    }
    const int32_t* idx_row = kSparse ? a.indices + tok_base * a.i0 : nullptr;
    // K/V tiles: tile 0 now, then one tile ahead inside the loop (sparse slots two ahead).
    auto swz_fn = [](int row, int chunk) { return swz(row, chunk); };
    MlaKvLoader<kSparse, decltype(swz_fn)> kv{a, w, idx_row, ok_s, sbase + kKvOff, kTileBytes, ld_row, ld_c, swz_fn};
    kv.prologue(n_tiles);

    // ---------------------------------------------------------------- per-thread row state
    // This thread's rows: r(mt, hf) = 32 grp + 16 mt + 8 hf + g, for S fragments and O fragments alike.
    const bool group_has_rows = 32 * grp < n_valid;
    int n_vis[2][2] = {{0, 0}, {0, 0}};
    int group_keys = 0;  // dense: keys visible to the group's last valid row
    if constexpr (!kSparse) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = 32 * grp + 16 * mt + 8 * hf + g;
                n_vis[mt][hf] = r < n_valid ? visible(r) : 0;
            }
        }
        if (group_has_rows) group_keys = visible(min(32 * grp + 31, n_valid - 1));
    }
    float m_run[2][2], l_run[2][2];
    float o[2][16][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            m_run[mt][hf] = -INFINITY;
            l_run[mt][hf] = 0.0f;
        }
#pragma unroll
        for (int n = 0; n < 16; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }

    // Per-lane ldmatrix offsets. A (16 x 16, rows ar, chunk 2i + ac), B from K (keys br, chunk 2i + bc),
    // B from V by .trans (keys vr, column chunk 2 np + vc).
    const int ar = (lane & 7) + 8 * ((lane >> 3) & 1);
    const int ac = lane >> 4;
    const int br = (lane & 7) + 8 * (lane >> 4);
    const int bc = (lane >> 3) & 1;
    uint32_t xa[4], xb[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        xa[i] = static_cast<uint32_t>(((2 * i + ac) ^ x7) << 4);
        xb[i] = static_cast<uint32_t>(((2 * i + bc) ^ x7) << 4);
    }
    const uint32_t q_a0 = sbase + kQOff + static_cast<uint32_t>((32 * grp + ar) * kRowBytes);
    const uint32_t p_a0 = sbase + kPOff + static_cast<uint32_t>((32 * grp + ar) * 128);
    uint8_t* p_tile = smem + kPOff;

    for (int kt = 0; kt < n_tiles; ++kt) {
        cp_async_wait_all();
        __syncthreads();  // tile kt landed for every thread; every warp is done with tile kt - 1
        if (kt + 1 < n_tiles) {
            kv.issue(kt + 1, (kt + 1) & 1);
            if constexpr (kSparse) {
                if (kt + 2 < n_tiles) kv.fetch_slots(kt + 2);
            }
        }
        cp_async_commit();
        const int st = kt & 1;
        const uint32_t kv_base = sbase + kKvOff + st * kTileBytes;

        // Uniform skips: a sparse tile with no valid index (CTA-wide); a group with no rows / no visible key in
        // this tile.
        if constexpr (kSparse) {
            if (!__syncthreads_or(tid < kN && ok_s[st * kN + tid] != 0)) continue;
        }
        if (!group_has_rows) continue;
        if constexpr (!kSparse) {
            if (kt * kN >= group_keys) continue;
        }

        // ---- S = Q K^T: rows 32 grp + [0, 32), keys 16 wi + [0, 16)
        float s[2][2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
        }
        const uint32_t k_b0 = kv_base + static_cast<uint32_t>((16 * wi + br) * kRowBytes);
#pragma unroll
        for (int kb = 0; kb < kChunks / 8; ++kb) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                uint32_t qa0[4], qa1[4], kb4[4];
                ldsm_x4(q_a0 + kb * 128 + xa[i], qa0);
                ldsm_x4(q_a0 + 16 * kRowBytes + kb * 128 + xa[i], qa1);
                ldsm_x4(k_b0 + kb * 128 + xb[i], kb4);
                mma_bf16(s[0][0], qa0, kb4[0], kb4[1]);
                mma_bf16(s[0][1], qa0, kb4[2], kb4[3]);
                mma_bf16(s[1][0], qa1, kb4[0], kb4[1]);
                mma_bf16(s[1][1], qa1, kb4[2], kb4[3]);
            }
        }

        // ---- mask, row max over the group's 64 keys
        float mx[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float v = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = 16 * wi + 8 * nt + 2 * t + e;
                        bool ok;
                        if constexpr (kSparse) {
                            ok = ok_s[st * kN + col] != 0;
                        } else {
                            ok = kt * kN + col < n_vis[mt][hf];
                        }
                        float& x = s[mt][nt][2 * hf + e];
                        x = ok ? x * a.scale_log2 : -INFINITY;  // base-2 logits from here on
                        v = fmaxf(v, x);
                    }
                }
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
                mx[mt][hf] = v;
                if (t == 0) red_s[(32 * grp + 16 * mt + 8 * hf + g) * 4 + wi] = v;
            }
        }
        group_sync(grp);
        float corr[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float* rs = red_s + (32 * grp + 16 * mt + 8 * hf + g) * 4;
                const float tile_max = fmaxf(fmaxf(rs[0], rs[1]), fmaxf(rs[2], rs[3]));
                const float m_new = fmaxf(m_run[mt][hf], tile_max);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key yet: keep p = 0, avoid inf - inf
                corr[mt][hf] = ex2(m_run[mt][hf] - m_use);                // 0 while m_run = -inf
                m_run[mt][hf] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = s[mt][nt][2 * hf + e];
                        x = ex2(x - m_use);  // -inf -> 0
                        sum += x;
                    }
                }
                l_run[mt][hf] = l_run[mt][hf] * corr[mt][hf] + sum;  // this thread's columns only; summed at the end
            }
        }
        // ---- P (bf16) to shared memory: rows 32 grp + 16 mt + 8 hf + g, key chunk 2 wi + nt (swizzled by g)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = 32 * grp + 16 * mt + 8 * hf + g;
                    const int chunk = (2 * wi + nt) ^ g;
                    *reinterpret_cast<uint32_t*>(p_tile + r * 128 + chunk * 16 + 4 * t) =
                        pack_bf16(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int n = 0; n < 16; ++n) {
                o[mt][n][0] *= corr[mt][0];
                o[mt][n][1] *= corr[mt][0];
                o[mt][n][2] *= corr[mt][1];
                o[mt][n][3] *= corr[mt][1];
            }
        }
        group_sync(grp);

        // ---- O[32 rows, 128 wi + [0, 128)) += P[32 x 64] V[64 x 128]
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            uint32_t pa0[4], pa1[4];
            ldsm_x4(p_a0 + xa[kk], pa0);
            ldsm_x4(p_a0 + 16 * 128 + xa[kk], pa1);
            const uint32_t v_row = kv_base + static_cast<uint32_t>((16 * kk + ar) * kRowBytes) +
                                   static_cast<uint32_t>(16 * wi * 16);
#pragma unroll
            for (int np = 0; np < 8; ++np) {
                uint32_t vb[4];
                // column chunk 16 wi + 2 np + ac: group (np / 4) of 8 chunks, in-group chunk 2 (np % 4) + ac.
                ldsm_x4_t(v_row + (np / 4) * 128 + xa[np % 4], vb);
                mma_bf16(o[0][2 * np], pa0, vb[0], vb[1]);
                mma_bf16(o[0][2 * np + 1], pa0, vb[2], vb[3]);
                mma_bf16(o[1][2 * np], pa1, vb[0], vb[1]);
                mma_bf16(o[1][2 * np + 1], pa1, vb[2], vb[3]);
            }
        }
    }
    cp_async_wait_all();  // nothing may be in flight at exit (empty groups complete at once)

    // ---------------------------------------------------------------- epilogue
    if (!group_has_rows) return;
    float l_tot[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float v = l_run[mt][hf];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            // Every warp of the group passed the last tile's second barrier, so red_s is free.
            if (t == 0) red_s[(32 * grp + 16 * mt + 8 * hf + g) * 4 + wi] = v;
        }
    }
    group_sync(grp);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const float* rs = red_s + (32 * grp + 16 * mt + 8 * hf + g) * 4;
            l_tot[mt][hf] = (rs[0] + rs[1]) + (rs[2] + rs[3]);
        }
    }
    OutT* out = static_cast<OutT*>(a.out);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = 32 * grp + 16 * mt + 8 * hf + g;
            if (r >= n_valid) continue;
            const int64_t tok = row_token(r);
            const int64_t h = row_head(r);
            const float l = l_tot[mt][hf];
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            OutT* orow = out + tok * a.o0 + h * a.o1 + 128 * wi + 2 * t;
#pragma unroll
            for (int n = 0; n < 16; ++n) {
                store2<OutT>(orow + 8 * n, o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv);
            }
            if (wi == 0 && t == 0) {
                // m_run is in base-2 units: lse = ln 2 * (m + log2 l).
                a.lse[tok * a.l0 + h * a.l1] = l > 0.0f ? (m_run[mt][hf] + log2f(l)) * 0.6931471805599453f : -INFINITY;
            }
        }
    }
}

template <bool kSparse, class OutT>
void launch(const MlaTcArgs& args, int64_t n_ctas, cudaStream_t stream) {
    PENSTOCK_CUDA_CHECK(
        cudaFuncSetAttribute(mla_tc_kernel<kSparse, OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    mla_tc_kernel<kSparse, OutT><<<static_cast<unsigned>(n_ctas), kThreads, kSmemBytes, stream>>>(args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_mma_sync(const MlaTcArgs& a, bool sparse, bool out_f32, int64_t n_ctas, cudaStream_t stream) {
    if (!sparse) {
        launch<false, bf16>(a, n_ctas, stream);
    } else if (out_f32) {
        launch<true, float>(a, n_ctas, stream);
    } else {
        launch<true, bf16>(a, n_ctas, stream);
    }
}

}  // namespace mla_detail

namespace {

using mla_detail::kDqk;
using mla_detail::kDv;
using mla_detail::kM;
using mla_detail::MlaTcArgs;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void launch_variant(const MlaTcArgs& a, bool sparse, bool out_f32, int64_t n_ctas, MlaTcVariant variant,
                    cudaStream_t stream) {
    PENSTOCK_CHECK(n_ctas > 0 && n_ctas < (int64_t{1} << 31)) << "mla_tc: grid " << n_ctas;
    switch (variant) {
        case MlaTcVariant::kMmaSync:
            mla_detail::launch_mma_sync(a, sparse, out_f32, n_ctas, stream);
            return;
        case MlaTcVariant::kAuto:
        case MlaTcVariant::kWgmmaWs:
        case MlaTcVariant::kWgmmaPair:
        case MlaTcVariant::kWgmmaPairFull:
            // kAuto: dense calls take kWgmma, 1.3-1.5x mma.sync on the H200 (docs/perf/2026-11-30-mla-tensor-core.md);
            // sparse calls the paired-tile kernel, 1.18-1.35x kWgmmaWs and 1.29-1.48x kWgmma at 64 / 128 heads and
            // 16K-128K prefixes (docs/perf/2026-12-03-s22.md). kWgmmaWs and kWgmmaPair(Full) are sparse only: a dense
            // call runs kWgmma.
            if (!sparse) {
                mla_detail::launch_wgmma(a, sparse, out_f32, n_ctas, stream);
            } else if (variant == MlaTcVariant::kWgmmaWs) {
                mla_detail::launch_wgmma_ws_sparse(a, out_f32, n_ctas, stream);
            } else {
                mla_detail::launch_wgmma_pair_sparse(a, out_f32, variant != MlaTcVariant::kWgmmaPairFull, n_ctas,
                                                     stream);
            }
            return;
        case MlaTcVariant::kWgmma:
            mla_detail::launch_wgmma(a, sparse, out_f32, n_ctas, stream);
            return;
    }
}

}  // namespace

bool mla_tc_attention_supported(const kernels::AttentionParams& p) {
    if (p.q.ndim != 3 || p.k.ndim != 3 || p.v.ndim != 3 || p.out.ndim != 3 || p.lse.ndim != 2) return false;
    if (p.q.dtype != DType::kBF16 || p.k.dtype != DType::kBF16 || p.v.dtype != DType::kBF16 ||
        p.out.dtype != DType::kBF16 || p.lse.dtype != DType::kF32) {
        return false;
    }
    if (p.k.size(1) != 1 || p.q.size(2) != kDqk || p.k.size(2) != kDqk || p.v.size(2) != kDv) return false;
    if (p.v.data != p.k.data || (p.k.size(0) > 1 && p.v.stride(0) != p.k.stride(0))) return false;
    if (p.q.stride(2) != 1 || p.k.stride(2) != 1 || p.out.stride(2) != 1) return false;
    if (!aligned16(p.q.data) || !aligned16(p.k.data) || p.q.stride(0) % 8 != 0 || p.q.stride(1) % 8 != 0 ||
        p.k.stride(0) % 8 != 0) {
        return false;
    }
    if (reinterpret_cast<uintptr_t>(p.out.data) % 4 != 0 || p.out.stride(0) % 2 != 0 || p.out.stride(1) % 2 != 0) {
        return false;
    }
    return p.q.size(0) * p.q.size(1) < (int64_t{1} << 31) && p.k.size(0) < (int64_t{1} << 31);
}

void mla_tc_attention(const kernels::AttentionParams& p, void* stream) {
    mla_tc_attention(p, MlaTcVariant::kAuto, stream);
}

void mla_tc_attention(const kernels::AttentionParams& p, MlaTcVariant variant, void* stream) {
    PENSTOCK_CHECK(mla_tc_attention_supported(p)) << "mla_tc_attention: unsupported layout";
    const int64_t total_q = p.q.size(0);
    const int64_t n_heads = p.q.size(1);
    const int64_t n_seqs = p.cu_seqlens_q.size(0) - 1;
    PENSTOCK_CHECK_GE(p.q_pos_step, 1) << "mla_tc_attention: q_pos_step";
    if (total_q == 0 || n_heads == 0 || n_seqs <= 0) return;
    MlaTcArgs a{};
    a.q = p.q.ptr<const bf16>();
    a.kv = p.k.ptr<const bf16>();
    a.out = p.out.data;
    a.lse = p.lse.ptr<float>();
    a.q0 = p.q.stride(0);
    a.q1 = p.q.stride(1);
    a.kv0 = p.k.stride(0);
    a.o0 = p.out.stride(0);
    a.o1 = p.out.stride(1);
    a.l0 = p.lse.stride(0);
    a.l1 = p.lse.stride(1);
    a.cu_q = p.cu_seqlens_q.ptr<const int32_t>();
    a.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
    a.q_pos0 = p.q_pos0.ptr<const int32_t>();
    a.k_pos0 = p.k_pos0.ptr<const int32_t>();
    a.n_seqs = static_cast<int>(n_seqs);
    a.q_pos_step = p.q_pos_step;
    a.causal = p.causal;
    a.n_heads = static_cast<int>(n_heads);
    a.n_head_blocks = 1;
    a.scale_log2 = p.scale * 1.4426950408889634f;
    // sum_s ceil(len_s * H / 64) <= ceil(total_q * H / 64) + n_seqs; spare CTAs exit at once.
    const int64_t n_ctas = (total_q * n_heads + kM - 1) / kM + n_seqs;
    launch_variant(a, /*sparse=*/false, /*out_f32=*/false, n_ctas, variant, static_cast<cudaStream_t>(stream));
}

bool mla_tc_sparse_supported(const kernels::SparseMlaAttentionParams& p) {
    if (p.q.ndim != 3 || p.kv.ndim != 2 || p.v.ndim != 2 || p.out.ndim != 3 || p.lse.ndim != 2 ||
        p.indices.ndim != 2) {
        return false;
    }
    if (p.q.dtype != DType::kBF16 || p.kv.dtype != DType::kBF16 || p.v.dtype != DType::kBF16 ||
        (p.out.dtype != DType::kBF16 && p.out.dtype != DType::kF32) || p.lse.dtype != DType::kF32 ||
        p.indices.dtype != DType::kI32) {
        return false;
    }
    if (p.q.size(2) != kDqk || p.kv.size(1) != kDqk || p.v.size(1) != kDv) return false;
    if (p.v.data != p.kv.data || (p.kv.size(0) > 1 && p.v.stride(0) != p.kv.stride(0))) return false;
    if (p.q.stride(2) != 1 || p.kv.stride(1) != 1 || p.out.stride(2) != 1 ||
        (p.indices.size(1) > 1 && p.indices.stride(1) != 1)) {
        return false;
    }
    if (!aligned16(p.q.data) || !aligned16(p.kv.data) || p.q.stride(0) % 8 != 0 || p.q.stride(1) % 8 != 0 ||
        p.kv.stride(0) % 8 != 0) {
        return false;
    }
    const size_t out_align = p.out.dtype == DType::kF32 ? 8 : 4;
    return reinterpret_cast<uintptr_t>(p.out.data) % out_align == 0 && p.out.stride(0) % 2 == 0 &&
           p.out.stride(1) % 2 == 0;
}

void mla_tc_sparse_attention(const kernels::SparseMlaAttentionParams& p, void* stream) {
    mla_tc_sparse_attention(p, MlaTcVariant::kAuto, stream);
}

void mla_tc_sparse_attention(const kernels::SparseMlaAttentionParams& p, MlaTcVariant variant, void* stream) {
    const char* op = "sparse_mla_attention (bf16 tensor cores)";
    PENSTOCK_CHECK(p.q.ndim == 3 && p.kv.ndim == 2 && p.out.ndim == 3 && p.indices.ndim == 2 && p.lse.ndim == 2)
        << op << ": ranks";
    const int64_t n_rows = p.q.size(0), n_heads = p.q.size(1);
    for (const TensorView* v : {&p.q, &p.kv, &p.v, &p.out, &p.lse, &p.indices}) check_on_gpu(*v, op, "tensor");
    PENSTOCK_CHECK(p.out.size(0) == n_rows && p.out.size(1) == n_heads && p.out.size(2) == p.v.size(1))
        << op << ": out " << p.out.shape_string();
    PENSTOCK_CHECK(p.lse.size(0) == n_rows && p.lse.size(1) == n_heads) << op << ": lse " << p.lse.shape_string();
    PENSTOCK_CHECK(p.v.size(0) == p.kv.size(0)) << op << ": kv / v rows";
    PENSTOCK_CHECK_EQ(p.indices.size(0), n_rows) << op << ": indices";
    PENSTOCK_CHECK(mla_tc_sparse_supported(p))
        << op << ": needs bf16 q / kv / v (out bf16 or f32, lse f32), d_qk 576 / d_v 512 with v = kv[:, :512], "
        << "16-byte aligned rows (strides multiples of 8), contiguous index rows; got q " << p.q.shape_string()
        << " kv " << p.kv.shape_string() << " v " << p.v.shape_string();
    PENSTOCK_CHECK(p.kv.size(0) < (int64_t{1} << 31) && p.indices.size(1) < (int64_t{1} << 31)) << op << ": sizes";
    if (n_rows == 0 || n_heads == 0) return;
    MlaTcArgs a{};
    a.q = p.q.ptr<const bf16>();
    a.kv = p.kv.ptr<const bf16>();
    a.out = p.out.data;
    a.lse = p.lse.ptr<float>();
    a.q0 = p.q.stride(0);
    a.q1 = p.q.stride(1);
    a.kv0 = p.kv.stride(0);
    a.o0 = p.out.stride(0);
    a.o1 = p.out.stride(1);
    a.l0 = p.lse.stride(0);
    a.l1 = p.lse.stride(1);
    a.indices = p.indices.ptr<const int32_t>();
    a.i0 = p.indices.stride(0);
    a.top_k = static_cast<int>(p.indices.size(1));
    a.n_slots = static_cast<int>(p.kv.size(0));
    a.causal = false;
    a.n_heads = static_cast<int>(n_heads);
    a.n_head_blocks = static_cast<int>((n_heads + kM - 1) / kM);
    a.scale_log2 = p.scale * 1.4426950408889634f;
    const int64_t n_ctas = n_rows * a.n_head_blocks;
    launch_variant(a, /*sparse=*/true, /*out_f32=*/p.out.dtype == DType::kF32, n_ctas, variant,
                   static_cast<cudaStream_t>(stream));
}

}  // namespace penstock::cuda
