// Pieces shared by the two tensor-core MLA kernels (mla_tc.cu: mma.sync; mla_wgmma.cu: wgmma): the kernel argument
// block, the CTA work unit (which 64 query rows, which keys), the K/V tile loader, cp.async / ex2 / bf16 helpers, and the launchers'
// declarations. Internal to kernels/cuda (namespace mla_detail); the contract is kernels/cuda/mla_tc.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/tile_util.cuh"

namespace penstock::cuda::mla_detail {

constexpr int kM = 64;            // query rows per CTA
constexpr int kN = 64;            // keys per tile
constexpr int kDqk = 576;         // latent + rope
constexpr int kDv = 512;          // latent (the value columns)
constexpr int kChunks = kDqk / 8;  // 16-byte chunks per row (72)
constexpr int kThreads = 256;     // 8 warps

struct MlaTcArgs {
    const bf16* q;
    const bf16* kv;
    void* out;
    float* lse;
    int64_t q0, q1, kv0, o0, o1, l0, l1;  // strides in elements
    // sparse
    const int32_t* indices;
    int64_t i0;
    int top_k, n_slots;
    // dense
    const int32_t* cu_q;
    const int32_t* cu_k;
    const int32_t* q_pos0;
    const int32_t* k_pos0;
    int n_seqs, q_pos_step;
    bool causal;
    int n_heads;
    int n_head_blocks;  // sparse: ceil(n_heads / 64)
    float scale_log2;   // softmax scale * log2(e): S is taken to base-2 logits before the max
};

// The CTA's 64 query rows and its key range. Row i (range [0, n_valid)) is (token row_token(i), head row_head(i)).
// Sparse: heads [row_flat0, row_flat0 + 64) of token tok_base, keys = its index list in n_tiles tiles of 64.
// Dense: flat (token-major) rows [row_flat0, +64) of the sequence starting at query row tok_base, keys = the
// sequence's first block_keys keys (what its last row sees).
struct MlaWork {
    bool active = false;  // false: a spare CTA of the dense grid's upper bound
    int64_t tok_base = 0;
    int row_flat0 = 0;
    int n_valid = 0;
    int n_tiles = 0;
    int k_begin = 0, len_k = 0;  // dense
    int64_t qp0 = 0, kp0 = 0;    // dense
    int block_keys = 0;          // dense
};

// Dense: keys visible to CTA row i, a prefix [0, n) of the sequence's keys.
__device__ __forceinline__ int mla_visible(const MlaTcArgs& a, const MlaWork& w, int i) {
    if (!a.causal) return w.len_k;
    const int tok = (w.row_flat0 + i) / a.n_heads;
    const int64_t n = w.qp0 + static_cast<int64_t>(tok) * a.q_pos_step - w.kp0 + 1;
    return static_cast<int>(n < 0 ? 0 : (n > w.len_k ? w.len_k : n));
}

template <bool kSparse>
__device__ __forceinline__ int64_t mla_row_token(const MlaTcArgs& a, const MlaWork& w, int i) {
    if constexpr (kSparse) return w.tok_base;
    return w.tok_base + (w.row_flat0 + i) / a.n_heads;
}

template <bool kSparse>
__device__ __forceinline__ int mla_row_head(const MlaTcArgs& a, const MlaWork& w, int i) {
    if constexpr (kSparse) return w.row_flat0 + i;
    return (w.row_flat0 + i) % a.n_heads;
}

template <bool kSparse>
__device__ __forceinline__ MlaWork mla_work(const MlaTcArgs& a) {
    MlaWork w;
    if constexpr (kSparse) {
        const int hb = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.n_head_blocks));
        w.tok_base = static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(a.n_head_blocks));
        w.row_flat0 = hb * kM;
        w.n_valid = min(kM, a.n_heads - w.row_flat0);
        w.n_tiles = (a.top_k + kN - 1) / kN;
        w.active = true;
        return w;
    } else {
        // Heaviest tiles (the ends of sequences) first: walk the tile list from the back.
        int tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
        int s = 0;
        for (; s < a.n_seqs; ++s) {
            const int len = a.cu_q[s + 1] - a.cu_q[s];
            const int tiles = (len * a.n_heads + kM - 1) / kM;
            if (tile < tiles) break;
            tile -= tiles;
        }
        if (s >= a.n_seqs) return w;  // spare
        w.active = true;
        w.tok_base = a.cu_q[s];
        const int len_q = a.cu_q[s + 1] - a.cu_q[s];
        w.row_flat0 = tile * kM;
        w.n_valid = min(kM, len_q * a.n_heads - w.row_flat0);
        w.k_begin = a.cu_k[s];
        w.len_k = a.cu_k[s + 1] - w.k_begin;
        w.qp0 = a.q_pos0[s];
        w.kp0 = a.k_pos0[s];
        w.block_keys = mla_visible(a, w, w.n_valid - 1);  // visibility grows with the row
        w.n_tiles = (w.block_keys + kN - 1) / kN;
        return w;
    }
}

using tile::cp_async_16;
using tile::cp_async_commit;
using tile::cp_async_wait_all;
using tile::smem_u32;

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The K/V tile producer of both kernels. A 64-key tile of 576-wide latent rows is copied by cp.async into shared stage
// `st` (base kv_base + st * stage_bytes, 16-byte chunks placed by `swz(row, chunk)`): each thread issues rows ld_row
// and ld_row + 32, chunks ld_c + 8 j. Sparse: the rows are the token's selected slots, fetched one tile ahead into
// next_slot (invalid or -1 entries load zeros), and ok_s[st][row] records which rows hold a key; dense: keys
// [kt * 64, +64) of the block, past block_keys zero-filled.
// The index loads of fetch_slots are only issued there: their values are first read by the next issue(), a whole tile
// later, so the global-load latency hides behind a tile of compute (checking them at fetch time stalled every warp on
// the load once per tile: 17% of the wgmma kernel's stall samples, ncu 2026-12-01). issue() also leaves in tile_any
// whether this thread placed a key of the tile (sparse), for a CTA-wide OR at the consumer's next barrier.
template <bool kSparse, class Swz>
struct MlaKvLoader {
    const MlaTcArgs& a;
    const MlaWork& w;
    const int32_t* idx_row;  // sparse: the token's index list
    int* ok_s;               // sparse: [2 stages][kN] row-holds-a-key flags
    uint32_t kv_base;
    int stage_bytes;
    int ld_row, ld_c;
    Swz swz;
    int next_slot[2] = {-1, -1};  // raw index values (validated by issue())
    bool tile_any = false;        // sparse: this thread's rows of the last issued tile hold a key

    __device__ __forceinline__ void fetch_slots(int kt) {
        for (int pass = 0; pass < 2; ++pass) {
            const int key = kt * kN + ld_row + 32 * pass;
            next_slot[pass] = key < a.top_k ? idx_row[key] : -1;
        }
    }
    __device__ __forceinline__ void issue(int kt, int st) {
        const uint32_t dst0 = kv_base + static_cast<uint32_t>(st * stage_bytes);
        for (int pass = 0; pass < 2; ++pass) {
            const int row = ld_row + 32 * pass;
            bool ok;
            const bf16* src = a.kv;
            if constexpr (kSparse) {
                const int slot = next_slot[pass];
                ok = slot >= 0 && slot < a.n_slots;
                if (ok) src = a.kv + static_cast<int64_t>(slot) * a.kv0;
                if (ld_c == 0) ok_s[st * kN + row] = ok ? 1 : 0;
                if (pass == 0) tile_any = false;
                tile_any = tile_any || (ok && ld_c == 0);
            } else {
                const int key = kt * kN + row;
                ok = key < w.block_keys;
                if (ok) src = a.kv + static_cast<int64_t>(w.k_begin + key) * a.kv0;
            }
#pragma unroll
            for (int j = 0; j < kChunks / 8; ++j) {
                const int c = ld_c + 8 * j;
                cp_async_16(dst0 + swz(row, c), src + 8 * c, ok);
            }
        }
    }
    // Tile 0 into stage 0 (and, sparse, tile 1's slots), one commit group.
    __device__ __forceinline__ void prologue(int n_tiles) {
        if (n_tiles > 0) {
            if constexpr (kSparse) fetch_slots(0);
            issue(0, 0);
            if constexpr (kSparse) {
                if (n_tiles > 1) fetch_slots(1);
            }
        }
        cp_async_commit();
    }
};

using tile::store2;

// Host launchers (grid: n_ctas CTAs of kThreads). out_f32: sparse only.
void launch_mma_sync(const MlaTcArgs& a, bool sparse, bool out_f32, int64_t n_ctas, cudaStream_t stream);
void launch_wgmma(const MlaTcArgs& a, bool sparse, bool out_f32, int64_t n_ctas, cudaStream_t stream);
// Sparse only: the warp-specialised wgmma kernel (a producer warpgroup gathers, two consumer warpgroups compute).
void launch_wgmma_ws_sparse(const MlaTcArgs& a, bool out_f32, int64_t n_ctas, cudaStream_t stream);
// Sparse only: the paired-tile kernel (mla_wgmma_pair.cu: each consumer warpgroup owns a whole tile of a pair).
// skip_tail: the pairs after the index list's last valid key are not run (kWgmmaPair); false runs every pair.
void launch_wgmma_pair_sparse(const MlaTcArgs& a, bool out_f32, bool skip_tail, int64_t n_ctas, cudaStream_t stream);

}  // namespace penstock::cuda::mla_detail
