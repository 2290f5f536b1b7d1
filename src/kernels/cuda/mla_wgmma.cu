// The wgmma variant of the MLA absorbed-form tensor-core kernel (MlaTcVariant::kWgmma; contract kernels/cuda/mla_tc.h,
// shared pieces mla_tc_common.cuh). sm_90a only.
//
// Mapping: one CTA = 2 warpgroups (256 threads) = 64 query rows (the same work units as the mma.sync variant). Key
// tiles of 64 latent rows (72 KiB) are gathered by cp.async into two shared-memory stages as in mla_tc.cu, but laid
// out for the tensor cores' 128-byte swizzle: a tile is 9 column blocks of [64 rows][64 bf16 = 128 B], 16-byte chunk c
// of row r stored at chunk c ^ (r & 7) (the hardware's 128B swizzle of a 1024-byte aligned atom of 8 rows). Q (64 x
// 576) and P (64 x 64, bf16) use the same layout.
// Per tile, warpgroup j (0, 1):
//   S_j = Q K_j^T over keys [32 j, 32 j + 32): 36 wgmma.m64n32k16 (A = Q, B = K rows, both K-major in shared memory);
//   row maxima exchanged with the other warpgroup through shared memory; P_j = exp2(S_j - m) written as bf16 into
//   the P tile (columns [32 j, +32)); after a barrier (and fence.proxy.async: P is written by ordinary stores and read
//   by the tensor cores' async proxy) O_j[64, 256 j .. 256 j + 256) += P V_j: 4 wgmma.m64n256k16 with A = P (K-major)
//   and B = the tile's first 512 columns read N-major (transposed; LBO = 8 KiB between 64-column blocks, SBO = 1 KiB
//   between 8-key groups). The accumulator of a warpgroup's 64 x 256 O block is 128 fp32 registers per thread.
// Numerics as mla_tc.cu (fp32 accumulation, base-2 online softmax, P rounded to bf16 for P V).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/mla_tc_common.cuh"
#include "kernels/cuda/mla_wgmma_common.cuh"
#include "kernels/cuda/tma_util.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace penstock::cuda::mla_detail {

namespace {

constexpr int kQOff = 0;
constexpr int kKvOff = kTileBytes;  // two stages
constexpr int kPOff = kKvOff + 2 * kTileBytes;
constexpr int kRedOff = kPOff + kBlockBytes;  // [64 rows][2 warpgroups] f32
constexpr int kOkOff = kRedOff + kM * 2 * 4;  // [2 stages][64] i32
constexpr int kSmemUsed = kOkOff + 2 * kN * 4;
constexpr int kSmemBytes = kSmemUsed + 1024;  // + slack to align the base to 1024 bytes
static_assert(kSmemBytes <= 227 * 1024, "shared memory");
// The warp-specialised sparse kernel adds its mbarriers: full[2] (a stage's tile and flags landed), empty[2] (both
// consumer warpgroups are done with a stage).
constexpr int kBarOff = kSmemUsed;
constexpr int kWsSmemBytes = kBarOff + 4 * 8 + 1024;
static_assert(kWsSmemBytes <= 227 * 1024, "shared memory");
constexpr int kWsThreads = 384;      // 2 consumer warpgroups (warps 0-7) + a producer warpgroup (warps 8-11)
constexpr int kWsRowsPerPass = 16;  // producer: 8 threads per row (16-byte chunks p % 8 + 8 j), 16 rows per pass
constexpr int kWsPasses = kM / kWsRowsPerPass;


// D[64 x 32] (+)= A[64 x 16] B[16 x 32], A and B from shared memory (descriptors), f32 accumulate;
// scale_d 0 overwrites D. B K-major.
__device__ __forceinline__ void wgmma_m64n32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, "
        "%16, %17, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}


// ------------------------------------------------------------------------------------------------ the consumers' work
// Shared by mla_wgmma_kernel (every warp also loads; CTA barriers) and mla_wgmma_ws_kernel (consumer warpgroups only;
// named barrier 1 over their 256 threads): `sync` is the barrier between the two consumer warpgroups. Thread layout
// of a consumer: warpgroup wg (S keys [32 wg, +32), O columns [256 wg, +256)), warp wr of it (rows [16 wr, +16)),
// lane quad g and position t (the state: MlaConsumerState, mla_wgmma_common.cuh).

// One 64-key tile in stage kv_base: S_wg = Q K_wg^T (36 wgmma.m64n32k16); mask (`valid(col, hf)` for key column col
// of the tile and row half hf), base-2 logits and row max exchanged with the other warpgroup through red_s; P_wg
// (bf16) into the P tile; O rescaled; O_wg += P V_wg (4 wgmma.m64n256k16, V read N-major from the tile).
template <class Valid, class Sync>
__device__ __forceinline__ void mla_consume_tile(MlaConsumerState& cs, uint32_t sbase, uint32_t kv_base, float* red_s,
                                                 uint8_t* p_tile, float scale_log2, int wg, int wr, int g, int t,
                                                 const Valid& valid, const Sync& sync) {
    constexpr uint32_t kLboUnused = 16;  // K-major swizzled: not used ("assumed 1")
    float s[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = 0.0f;  // overwritten (scale_d 0); defined for the compiler
    wgmma::fence();
#pragma unroll
    for (int kb = 0; kb < kDqk / 64; ++kb) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const uint64_t da = wgmma::desc(sbase + kQOff + kb * kBlockBytes + ks * 32, kLboUnused, 1024);
            const uint64_t db = wgmma::desc(kv_base + kb * kBlockBytes + wg * 32 * 128 + ks * 32, kLboUnused, 1024);
            wgmma_m64n32(s, da, db, (kb | ks) != 0 ? 1 : 0);
        }
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::reg_fence(s);

    // ---- mask, base-2 logits, row max over the tile's 64 keys (exchange with the other warpgroup)
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int hf = e >> 1;
            const int col = 32 * wg + 8 * i + 2 * t + (e & 1);
            float& x = s[4 * i + e];
            x = valid(col, hf) ? x * scale_log2 : -INFINITY;
            mx[hf] = fmaxf(mx[hf], x);
        }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float v = mx[hf];
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
        if (t == 0) red_s[(16 * wr + 8 * hf + g) * 2 + wg] = v;
    }
    sync();  // row maxima exchanged; both warpgroups are past P V of their last tile (P is free)
    float corr[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const float* rs = red_s + (16 * wr + 8 * hf + g) * 2;
        const float m_new = fmaxf(cs.m_run[hf], fmaxf(rs[0], rs[1]));
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        corr[hf] = ex2(cs.m_run[hf] - m_use);
        cs.m_run[hf] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = s[4 * i + 2 * hf + e];
                x = ex2(x - m_use);
                sum += x;
            }
        }
        cs.l_run[hf] = cs.l_run[hf] * corr[hf] + sum;
    }
    // ---- P_wg (bf16) into the P tile: row 16 wr + 8 hf + g, key chunk 4 wg + i (swizzled by the row)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = 16 * wr + 8 * hf + g;
            const int chunk = (4 * wg + i) ^ (r & 7);
            *reinterpret_cast<uint32_t*>(p_tile + r * 128 + chunk * 16 + 4 * t) =
                pack_bf16(s[4 * i + 2 * hf], s[4 * i + 2 * hf + 1]);
        }
    }
    scale_o(cs, corr);
    wgmma::fence_proxy_async();  // P written by ordinary stores, read next by the tensor cores
    sync();

    // ---- O_wg += P V_wg: K = 64 keys in 4 steps of 16; N = columns [256 wg, +256) (4 blocks of 64)
    wgmma::reg_fence(cs.o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t da = wgmma::desc(sbase + kPOff + kk * 32, kLboUnused, 1024);
        const uint64_t db = wgmma::desc(kv_base + 4 * wg * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024);
        wgmma::m64n256k16_bf16<1>(cs.o, da, db, 1);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::reg_fence(cs.o);
}


template <bool kSparse, class OutT>
__global__ void __launch_bounds__(kThreads, 1) mla_wgmma_kernel(MlaTcArgs a) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    // Align the working base to 1024 bytes (the swizzle atom) whatever the dynamic base is.
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    float* red_s = reinterpret_cast<float*>(smem + kRedOff);
    int* ok_s = reinterpret_cast<int*>(smem + kOkOff);
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32;
    const int wg = tid / 128;          // warpgroup: S keys [32 wg, +32); O columns [256 wg, +256)
    const int wr = (tid / 32) % 4;     // warp in the warpgroup: rows [16 wr, 16 wr + 16)
    const int g = lane / 4;
    const int t = lane % 4;

    const MlaWork w = mla_work<kSparse>(a);
    if (!w.active) return;  // uniform across the CTA
    const int n_valid = w.n_valid;
    const int n_tiles = w.n_tiles;

    // ---------------------------------------------------------------- loaders (as mla_tc.cu, swizzled for wgmma)
    const int ld_row = tid / 8;
    const int ld_c = tid % 8;
    for (int pass = 0; pass < 2; ++pass) {
        const int row = ld_row + 32 * pass;
        const bool ok = row < n_valid;
        const bf16* src = ok ? a.q + mla_row_token<kSparse>(a, w, row) * a.q0 +
                                   static_cast<int64_t>(mla_row_head<kSparse>(a, w, row)) * a.q1
                             : a.q;
#pragma unroll
        for (int j = 0; j < kChunks / 8; ++j) {
            const int c = ld_c + 8 * j;
            cp_async_16(sbase + kQOff + swz128(row, c), src + 8 * c, ok);
        }
    }
    const int32_t* idx_row = kSparse ? a.indices + w.tok_base * a.i0 : nullptr;
    auto swz_fn = [](int row, int chunk) { return swz128(row, chunk); };
    MlaKvLoader<kSparse, decltype(swz_fn)> kv{a, w, idx_row, ok_s, sbase + kKvOff, kTileBytes, ld_row, ld_c, swz_fn};
    kv.prologue(n_tiles);

    // ---------------------------------------------------------------- per-thread rows: r(hf) = 16 wr + 8 hf + g
    int n_vis[2] = {0, 0};
    if constexpr (!kSparse) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = 16 * wr + 8 * hf + g;
            n_vis[hf] = r < n_valid ? mla_visible(a, w, r) : 0;
        }
    }
    MlaConsumerState cs;
#pragma unroll
    for (int i = 0; i < 128; ++i) cs.o[i] = 0.0f;
    uint8_t* p_tile = smem + kPOff;
    const auto sync = [] { __syncthreads(); };

    for (int kt = 0; kt < n_tiles; ++kt) {
        cp_async_wait_all();
        wgmma::fence_proxy_async();  // this thread's cp.async writes -> visible to the tensor cores' async proxy
        // Tile kt landed everywhere; both warpgroups are done with tile kt - 1 (and P, red). Sparse: the same barrier
        // ORs whether any row of tile kt holds a key (each loader thread knows its own rows: kv.tile_any).
        bool tile_has_keys = true;
        if constexpr (kSparse) {
            tile_has_keys = __syncthreads_or(kv.tile_any ? 1 : 0) != 0;
        } else {
            __syncthreads();
        }
        if (kt + 1 < n_tiles) {
            kv.issue(kt + 1, (kt + 1) & 1);
            if constexpr (kSparse) {
                if (kt + 2 < n_tiles) kv.fetch_slots(kt + 2);
            }
        }
        cp_async_commit();
        const int st = kt & 1;
        const uint32_t kv_base = sbase + kKvOff + st * kTileBytes;
        // CTA-uniform skips: a sparse tile with no valid index; a dense tile past every row's causal limit.
        if constexpr (kSparse) {
            if (!tile_has_keys) continue;
        } else {
            if (kt * kN >= w.block_keys) continue;
        }
        const auto valid = [&](int col, int hf) {
            if constexpr (kSparse) {
                return ok_s[st * kN + col] != 0;
            } else {
                return kt * kN + col < n_vis[hf];
            }
        };
        mla_consume_tile(cs, sbase, kv_base, red_s, p_tile, a.scale_log2, wg, wr, g, t, valid, sync);
    }
    cp_async_wait_all();
    mla_store_rows<kSparse, OutT>(cs, a, w, red_s, wg, wr, g, t, sync);
}


// Sparse (DSA) only, warp-specialised (MlaTcVariant::kWgmmaWs). Warpgroup 2 (threads 256-383) is the producer: it
// gathers Q and the selected latent rows with cp.async (thread p: rows p / 8 + 16 i, chunks p % 8 + 8 j) into the two
// stages and signals full[stage] with cp.async.mbarrier.arrive.noinc (fires when the thread's copies have landed; 128
// arrivals) plus a plain release arrive from each thread that wrote row flags (16 arrivals); the index list is read
// one tile ahead into registers, so its load latency hides behind the wait for a free stage. Warpgroups 0 and 1 are
// the consumers of mla_wgmma_kernel (S over keys [32 wg, +32), O columns [256 wg, +256)), now without any loads,
// meeting each other at named barrier 1 (256 threads) instead of __syncthreads, and freeing a stage with one arrival
// per warp on empty. setmaxnreg: producer 40, consumers 232 (128 x 40 + 256 x 232 <= 64K). ptxas reports the launch
// share (168 registers) for the kernel but allocates the consumer code up to 232; a producer of one warp holding 16
// rows' indices spilled at 24-40 registers, so the producer is a whole warpgroup with 4 rows per thread.
template <class OutT>
__global__ void __launch_bounds__(kWsThreads, 1) mla_wgmma_ws_kernel(MlaTcArgs a) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    float* red_s = reinterpret_cast<float*>(smem + kRedOff);
    int* ok_s = reinterpret_cast<int*>(smem + kOkOff);
    const uint32_t full_bar = sbase + kBarOff;       // + 8 st
    const uint32_t empty_bar = sbase + kBarOff + 16;  // + 8 st
    const int tid = static_cast<int>(threadIdx.x);
    const MlaWork w = mla_work<true>(a);
    const int n_valid = w.n_valid;
    const int n_tiles = w.n_tiles;
    if (tid == 0) {
        for (int st = 0; st < 2; ++st) {
            tma::mbar_init(full_bar + 8 * st, 128 + 16);
            tma::mbar_init(empty_bar + 8 * st, 8);
        }
        tma::fence_mbar_init();
    }
    __syncthreads();

    if (tid >= 256) {
        // ------------------------------------------------------------ producer (warpgroup 2)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
        const int ld_row = (tid - 256) / 8;
        const int ld_c = tid % 8;
#pragma unroll 1
        for (int pass = 0; pass < kWsPasses; ++pass) {
            const int row = ld_row + kWsRowsPerPass * pass;
            const bool ok = row < n_valid;
            const bf16* src = ok ? a.q + w.tok_base * a.q0 + static_cast<int64_t>(w.row_flat0 + row) * a.q1 : a.q;
#pragma unroll
            for (int j = 0; j < kChunks / 8; ++j) {
                const int c = ld_c + 8 * j;
                cp_async_16(sbase + kQOff + swz128(row, c), src + 8 * c, ok);
            }
        }
        const int32_t* idx_row = a.indices + w.tok_base * a.i0;
        int slot[kWsPasses];
#pragma unroll
        for (int i = 0; i < kWsPasses; ++i) {
            const int key = ld_row + kWsRowsPerPass * i;
            slot[i] = key < a.top_k ? idx_row[key] : -1;
        }
#pragma unroll 1
        for (int kt = 0; kt < n_tiles; ++kt) {
            const int st = kt & 1;
            if (kt >= 2) tma::mbar_wait(empty_bar + 8 * st, ((kt >> 1) - 1) & 1);
            const uint32_t dst0 = sbase + kKvOff + static_cast<uint32_t>(st * kTileBytes);
#pragma unroll
            for (int i = 0; i < kWsPasses; ++i) {
                const int row = ld_row + kWsRowsPerPass * i;
                const int sl = slot[i];
                const bool ok = sl >= 0 && sl < a.n_slots;
                const bf16* src = ok ? a.kv + static_cast<int64_t>(sl) * a.kv0 : a.kv;
                if (ld_c == 0) ok_s[st * kN + row] = ok ? 1 : 0;
#pragma unroll
                for (int j = 0; j < kChunks / 8; ++j) {
                    const int c = ld_c + 8 * j;
                    cp_async_16(dst0 + swz128(row, c), src + 8 * c, ok);
                }
            }
            cp_async_mbar_arrive_noinc(full_bar + 8 * st);
            if (ld_c == 0) tma::mbar_arrive(full_bar + 8 * st);  // release: this thread's ok_s flags
            if (kt + 1 < n_tiles) {
#pragma unroll
                for (int i = 0; i < kWsPasses; ++i) {
                    const int key = (kt + 1) * kN + ld_row + kWsRowsPerPass * i;
                    slot[i] = key < a.top_k ? idx_row[key] : -1;
                }
            }
        }
        return;
    }

    // ---------------------------------------------------------------- consumers (warpgroups 0, 1)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    const int ct = tid;
    const int lane = ct % 32;
    const int wg = ct / 128;       // S keys [32 wg, +32); O columns [256 wg, +256)
    const int wr = (ct / 32) % 4;  // rows [16 wr, 16 wr + 16)
    const int g = lane / 4;
    const int t = lane % 4;
    MlaConsumerState cs;
#pragma unroll
    for (int i = 0; i < 128; ++i) cs.o[i] = 0.0f;
    uint8_t* p_tile = smem + kPOff;
    const auto sync = [] { tma::named_sync(1, 256); };

#pragma unroll 1
    for (int kt = 0; kt < n_tiles; ++kt) {
        const int st = kt & 1;
        tma::mbar_wait(full_bar + 8 * st, (kt >> 1) & 1);
        wgmma::fence_proxy_async();  // the landed cp.async rows -> the tensor cores' async proxy
        const uint32_t kv_base = sbase + kKvOff + st * kTileBytes;
        // The same flags in every consumer warp: a uniform skip of a tile with no key.
        const int* ok_t = ok_s + st * kN;
        if (__any_sync(0xffffffffu, ok_t[lane] != 0 || ok_t[32 + lane] != 0)) {
            const auto valid = [&](int col, int) { return ok_t[col] != 0; };
            mla_consume_tile(cs, sbase, kv_base, red_s, p_tile, a.scale_log2, wg, wr, g, t, valid, sync);
        }
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(empty_bar + 8 * st);  // this warp is done with the stage
    }
    mla_store_rows<true, OutT>(cs, a, w, red_s, wg, wr, g, t, sync);
}

}  // namespace

void launch_wgmma_ws_sparse(const MlaTcArgs& a, bool out_f32, int64_t n_ctas, cudaStream_t stream) {
    if (out_f32) {
        launch_mla_kernel(mla_wgmma_ws_kernel<float>, kWsThreads, kWsSmemBytes, a, n_ctas, stream);
    } else {
        launch_mla_kernel(mla_wgmma_ws_kernel<bf16>, kWsThreads, kWsSmemBytes, a, n_ctas, stream);
    }
}

void launch_wgmma(const MlaTcArgs& a, bool sparse, bool out_f32, int64_t n_ctas, cudaStream_t stream) {
    if (!sparse) {
        launch_mla_kernel(mla_wgmma_kernel<false, bf16>, kThreads, kSmemBytes, a, n_ctas, stream);
    } else if (out_f32) {
        launch_mla_kernel(mla_wgmma_kernel<true, float>, kThreads, kSmemBytes, a, n_ctas, stream);
    } else {
        launch_mla_kernel(mla_wgmma_kernel<true, bf16>, kThreads, kSmemBytes, a, n_ctas, stream);
    }
}

}  // namespace penstock::cuda::mla_detail
