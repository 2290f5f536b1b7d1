// Sparse (DSA) MLA absorbed-form attention with paired key tiles (MlaTcVariant::kWgmmaPair; contract
// kernels/cuda/mla_tc.h, shared pieces mla_tc_common.cuh and mla_wgmma_common.cuh). sm_90a only.
//
// Why: the kWgmma / kWgmmaWs kernels split every 64-key tile's S = Q K^T between the two consumer warpgroups (32 keys
// each, wgmma.m64n32k16), so each warpgroup re-reads the whole 72 KiB Q tile from shared memory for 32 keys: about
// 296 KB of shared-memory reads per 64 keys against ~2200 clocks of tensor work, and the two warpgroups move in
// lockstep around a P tile. Here each warpgroup owns a whole tile of a pair (N = 64: Q is read once per 64 keys), and
// the warpgroups run staggered so that one's softmax overlaps the other's MMAs (the schedule of FlashMLA's sm90 sparse
// prefill kernel, read for its structure; no code is shared).
//
// CTA = 64 query rows (heads [64 hb, +64) of one token, as mla_work<true>) x 384 threads:
//   warpgroup 2, the producer: Q once, then per pair p the key tiles 2p (into stage K0) and 2p + 1 (K1) by cp.async
//     (with a 256-byte L2 prefetch: the 1152-byte rows are read whole), in
//     column halves L = blocks 0-3 (value columns 0-255) and R = blocks 4-8 (value columns 256-511 and the rope), in
//     the order K0.L, K1.R, K0.R, K1.L: each half has its own ready / free mbarriers, so a half is refilled as soon as
//     its last reader is done. The row flags (which keys exist) follow with their own barrier.
//   warpgroup 0: S0 = Q K0^T (36 wgmma.m64n64k16, L half first); m0 = max(m, rowmax S0); P0 = exp2(S0 - m0); m0 to
//     shared; O.L += P0 V0.L (A = P0 from registers); then waits for warpgroup 1's m1, rescales P0 and O.L by
//     exp2(m0 - m1), writes P0 (bf16) for warpgroup 1 into K0's rope block (dead once S0 is done), and adds
//     O.L += P1 V1.L (A = P1 from shared memory). The next pair's S0 is issued while that MMA runs.
//   warpgroup 1: S1 = Q K1^T (R half first); after m0 arrives, m1 = max(m0, rowmax S1) (so m1 is the pair's max);
//     P1 = exp2(S1 - m1); O.R += P1 V1.R (registers); P1 into its own shared tile; O.R += P0 V0.R (shared).
// Each warpgroup keeps O for its 256 value columns (128 f32 registers per thread) and the row sums of its own tiles;
// after the last pair both hold the same running max, and mla_store_rows adds the two sums. Masked keys (index -1,
// out of range, or past top_k) are -inf logits; the running max starts at -1e30 (finite) so that a row with no key yet
// gets P = 0 and a correction of 1, never exp2(-inf + inf); a row with no key at all stores 0 and lse -inf. Pairs
// after the last valid index are not run (the producer scans the list at the start, its loads in flight with the
// first pair's; kWgmmaPairFull runs every pair).
// Numerics as the other variants: fp32 accumulation, base-2 online softmax, P rounded to bf16 for P V (warpgroup 0's
// P0 is rounded once at m0 for its own P V and once at m1 for warpgroup 1's).
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

constexpr int kPairThreads = 384;  // consumer warpgroups 0, 1 + the producer warpgroup 2
constexpr int kQOff = 0;
constexpr int kK0Off = kTileBytes;
constexpr int kK1Off = 2 * kTileBytes;
constexpr int kP0Off = kK0Off + 8 * kBlockBytes;  // P0 overlays K0's rope block
constexpr int kP1Off = 3 * kTileBytes;
constexpr int kMOff = kP1Off + kBlockBytes;  // [64 rows] f32: m0, then m1
constexpr int kLOff = kMOff + kM * 4;        // [64 rows][2 warpgroups] f32: row sums at the end
constexpr int kOkOff = kLOff + kM * 2 * 4;   // [2 tiles of the pair][64] i32 row flags
constexpr int kCountOff = kOkOff + 2 * kN * 4;  // i32: last key with a valid index, pairs to run
constexpr int kBarOff = kCountOff + 16;
// mbarriers: q_ready, k_ready[stage][half], k_free[stage][half], ok_ready, count_ready
constexpr int kBarQ = 0;
constexpr int kBarReady = 1;  // + 2 stage + half
constexpr int kBarFree = 5;   // + 2 stage + half
constexpr int kBarOk = 9;
constexpr int kBarCount = 10;  // the count of pairs to run is in pairs_s
constexpr int kNumBars = 11;
constexpr int kPairSmemUsed = kBarOff + kNumBars * 8;
constexpr int kPairSmemBytes = kPairSmemUsed + 1024;  // + slack to align the base to 1024 bytes
static_assert(kPairSmemBytes <= 227 * 1024, "shared memory");

// Named barriers (0 is __syncthreads): each is 256 threads, one warpgroup arriving and the other waiting.
constexpr int kNbM0 = 1;  // m0 written (warpgroup 0 -> 1)
constexpr int kNbM1 = 2;  // m1 written (1 -> 0)
constexpr int kNbP0 = 3;  // P0 in shared memory (0 -> 1)
constexpr int kNbP1 = 4;  // P1 in shared memory (1 -> 0)
constexpr int kNbL = 5;   // row sums exchanged (both)
constexpr int kNbProd = 6;  // the producer warpgroup's own (128 threads)

constexpr int kHalfL = 0;  // blocks 0-3
constexpr int kHalfR = 1;  // blocks 4-8

constexpr float kMaxInit = -1e30f;

// S (+)= Q K^T over column blocks [kB0, kB1) of the stage at k_base; the first k-step overwrites S when `first`.
template <int kB0, int kB1>
__device__ __forceinline__ void qk_blocks(float (&s)[32], uint32_t q_base, uint32_t k_base, bool first) {
    constexpr uint32_t kLboUnused = 16;  // K-major swizzled: not used
#pragma unroll
    for (int kb = kB0; kb < kB1; ++kb) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const uint64_t da = wgmma::desc(q_base + kb * kBlockBytes + ks * 32, kLboUnused, 1024);
            const uint64_t db = wgmma::desc(k_base + kb * kBlockBytes + ks * 32, kLboUnused, 1024);
            wgmma::m64n64k16_bf16(s, da, db, (first && kb == kB0 && ks == 0) ? 0 : 1);
        }
    }
}

// O += P V over the value blocks [4 half, +4) of the stage at v_base, P from registers (pa[kk]: keys [16 kk, +16)).
__device__ __forceinline__ void pv_local(float (&o)[128], const uint32_t (&pa)[4][4], uint32_t v_base, int half) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t db = wgmma::desc(v_base + 4 * half * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024);
        wgmma::m64n256k16_bf16_rs_nmajor(o, pa[kk], db);
    }
}

// The same with P (64 x 64 bf16, K-major swizzled) from shared memory at p_base.
__device__ __forceinline__ void pv_remote(float (&o)[128], uint32_t p_base, uint32_t v_base, int half) {
    constexpr uint32_t kLboUnused = 16;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t da = wgmma::desc(p_base + kk * 32, kLboUnused, 1024);
        const uint64_t db = wgmma::desc(v_base + 4 * half * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024);
        wgmma::m64n256k16_bf16<1>(o, da, db, 1);
    }
}

// Masks S (flags ok[col]: the key exists) and takes it to base-2 logits; returns this row pair's tile maxima (reduced
// over the quad).
__device__ __forceinline__ void mask_scale_max(float (&s)[32], const int* ok, float scale_log2, int t,
                                               float (&mx)[2]) {
    mx[0] = -INFINITY;
    mx[1] = -INFINITY;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const bool v = ok[8 * i + 2 * t + e] != 0;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float& x = s[4 * i + 2 * hf + e];
                x = v ? x * scale_log2 : -INFINITY;
                mx[hf] = fmaxf(mx[hf], x);
            }
        }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
    }
}

// P = exp2(S - m_new) in place, the running sum and O rescaled to m_new (m_run becomes m_new).
__device__ __forceinline__ void softmax_to(MlaConsumerState& cs, float (&s)[32], const float (&m_new)[2]) {
    float corr[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        corr[hf] = ex2(cs.m_run[hf] - m_new[hf]);
        cs.m_run[hf] = m_new[hf];
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = s[4 * i + 2 * hf + e];
                x = ex2(x - m_new[hf]);
                sum += x;
            }
        }
        cs.l_run[hf] = cs.l_run[hf] * corr[hf] + sum;
    }
    scale_o(cs, corr);
}

// Keeps the A fragments of an in-flight register-sourced wgmma allocated (the compiler sees the asm's register inputs as
// consumed at issue and could otherwise reuse them while the tensor cores still read them): call after its wait.
__device__ __forceinline__ void keep_live(uint32_t (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(pa[kk][j])::"memory");
    }
}

// P (f32, the m64n64 accumulator layout) as the bf16 A fragments of the four k16 steps of P V.
__device__ __forceinline__ void pack_p(const float (&s)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) pa[kk][j] = pack_bf16(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
    }
}

// The packed P into a 64 x 64 K-major swizzled shared tile (rows 16 wr + 8 hf + g, key chunk i = 2 kk + (j >> 1)).
__device__ __forceinline__ void store_p(uint8_t* p_tile, const uint32_t (&pa)[4][4], int wr, int g, int t) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = 16 * wr + 8 * (j & 1) + g;
            const int chunk = (2 * kk + (j >> 1)) ^ (r & 7);
            *reinterpret_cast<uint32_t*>(p_tile + r * 128 + chunk * 16 + 4 * t) = pa[kk][j];
        }
    }
}

// cp.async of 16 bytes (zero-filled when !ok) with a 256-byte L2 prefetch of the source row. (With an L2 cache-policy
// operand as well, nvcc 13.0's ptxas placed the policy in an odd uniform register pair: an illegal instruction.)
__device__ __forceinline__ void cp_async_16_pf(uint32_t dst, const void* src, bool ok) {
    const int n = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

template <class OutT, bool kSkipTail>
__global__ void __launch_bounds__(kPairThreads, 1) mla_wgmma_pair_kernel(MlaTcArgs a) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t* smem = smem_raw + pad;
    const uint32_t sbase = raw + pad;
    float* m_s = reinterpret_cast<float*>(smem + kMOff);
    float* l_s = reinterpret_cast<float*>(smem + kLOff);
    int* ok_s = reinterpret_cast<int*>(smem + kOkOff);
    int* last_s = reinterpret_cast<int*>(smem + kCountOff);
    int* pairs_s = last_s + 1;
    const auto bar = [&](int i) { return sbase + kBarOff + 8u * static_cast<uint32_t>(i); };
    const auto ready = [&](int st, int half) { return bar(kBarReady + 2 * st + half); };
    const auto free_ = [&](int st, int half) { return bar(kBarFree + 2 * st + half); };
    const int tid = static_cast<int>(threadIdx.x);
    const MlaWork w = mla_work<true>(a);
    const int n_pairs = (w.n_tiles + 1) / 2;
    if (tid == 0) {
        tma::mbar_init(bar(kBarQ), 128);
        for (int i = 0; i < 4; ++i) {
            tma::mbar_init(bar(kBarReady + i), 128);
            tma::mbar_init(bar(kBarFree + i), 128);
        }
        tma::mbar_init(bar(kBarOk), 16);
        tma::mbar_init(bar(kBarCount), 1);
        tma::fence_mbar_init();
        *last_s = -1;
    }
    __syncthreads();

    if (tid >= 256) {
        // ------------------------------------------------------------ producer (warpgroup 2)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
        const int p = tid - 256;
        const int grp = p / 8;  // rows grp + 16 lr of a tile
        const int ci = p % 8;   // 16-byte chunk ci of each 64-column block
        const int32_t* idx_row = a.indices + w.tok_base * a.i0;
        int slot[2][4];  // [tile of the pair][lr]: the selected row, -1 when there is no key
        const auto load_slots = [&](int pair) {
#pragma unroll
            for (int tt = 0; tt < 2; ++tt) {
#pragma unroll
                for (int lr = 0; lr < 4; ++lr) {
                    const int key = (2 * pair + tt) * kN + 16 * lr + grp;
                    const int v = key < a.top_k ? __ldg(idx_row + key) : -1;
                    slot[tt][lr] = (v >= 0 && v < a.n_slots) ? v : -1;
                }
            }
        };
        int n_run = n_pairs;
        if (n_pairs > 0) load_slots(0);
        int last = -1;
        if constexpr (kSkipTail) {
            // Trailing pairs without a key are skipped (a causal row shorter than top_k ends its list in -1s; a
            // skipped all-masked tile would change nothing: P = 0, correction 1). The list's loads are issued right
            // behind the first pair's, before Q's copies, so that the scan costs no latency of its own on the way to
            // the first copies.
#pragma unroll 16
            for (int key = p; key < a.top_k; key += 128) {
                const int v = __ldg(idx_row + key);
                if (v >= 0 && v < a.n_slots) last = key;
            }
        }
#pragma unroll 1
        for (int lr = 0; lr < kM / 16; ++lr) {
            const int row = grp + 16 * lr;
            const bool ok = row < w.n_valid;
            const bf16* src = ok ? a.q + w.tok_base * a.q0 + static_cast<int64_t>(w.row_flat0 + row) * a.q1 : a.q;
#pragma unroll
            for (int b = 0; b < kDqk / 64; ++b) {
                cp_async_16(sbase + kQOff + swz128(row, 8 * b + ci), src + 64 * b + 8 * ci, ok);
            }
        }
        cp_async_mbar_arrive_noinc(bar(kBarQ));
        if constexpr (kSkipTail) {
            last = __reduce_max_sync(0xffffffffu, last);
            if (p % 32 == 0) atomicMax(last_s, last);
            tma::named_sync(kNbProd, 128);
            const int tiles = (*last_s + kN) / kN;
            n_run = min(n_pairs, max(1, (tiles + 1) / 2));
        }
        if (p == 0) {
            *pairs_s = n_run;
            tma::mbar_arrive(bar(kBarCount));  // release: pairs_s (the consumers read it when the first pair is done)
        }
        // Row grp + 16 lr, chunk 8 b + ci of a stage: swz128 = b * 8 KiB + lr * 2 KiB + (this thread's row offset), all
        // but the last immediate offsets of one register.
        const uint32_t row_off = static_cast<uint32_t>(grp * 128 + (((ci ^ grp) & 7) << 4));
        const auto copy_half = [&](int tt, int half) {
            const uint32_t dst0 = sbase + (tt == 0 ? kK0Off : kK1Off) + row_off;
            const int b0 = half == kHalfL ? 0 : 4;
            const int b1 = half == kHalfL ? 4 : kDqk / 64;
#pragma unroll
            for (int lr = 0; lr < 4; ++lr) {
                const int sl = slot[tt][lr];
                const bf16* src = a.kv + (sl >= 0 ? static_cast<int64_t>(sl) * a.kv0 : 0) + 8 * ci;
#pragma unroll
                for (int b = b0; b < b1; ++b) {
                    cp_async_16_pf(dst0 + b * kBlockBytes + lr * 16 * 128, src + 64 * b, sl >= 0);
                }
            }
        };
#pragma unroll 1
        for (int pr = 0; pr < n_run; ++pr) {
            const uint32_t fph = (pr & 1) ^ 1;  // the free phase of the previous pair (passes at once for pair 0)
            tma::mbar_wait(free_(0, kHalfL), fph);
            copy_half(0, kHalfL);
            cp_async_mbar_arrive_noinc(ready(0, kHalfL));
            tma::mbar_wait(free_(1, kHalfR), fph);
            copy_half(1, kHalfR);
            cp_async_mbar_arrive_noinc(ready(1, kHalfR));
            tma::mbar_wait(free_(0, kHalfR), fph);
            copy_half(0, kHalfR);
            cp_async_mbar_arrive_noinc(ready(0, kHalfR));
            tma::mbar_wait(free_(1, kHalfL), fph);
            copy_half(1, kHalfL);
            cp_async_mbar_arrive_noinc(ready(1, kHalfL));
            // Row flags of the pair. Both consumers finished reading the previous pair's flags: their masks precede
            // the frees waited above.
            if (ci == 0) {
#pragma unroll
                for (int tt = 0; tt < 2; ++tt) {
#pragma unroll
                    for (int lr = 0; lr < 4; ++lr) ok_s[tt * kN + grp + 16 * lr] = slot[tt][lr] >= 0 ? 1 : 0;
                }
                tma::mbar_arrive(bar(kBarOk));  // release: the flags
            }
            if (pr + 1 < n_run) load_slots(pr + 1);  // first read at the next pair's copies, after its waits
        }
        cp_async_wait_all();  // no copy may outlive the thread
        return;
    }

    // ---------------------------------------------------------------- consumers (warpgroups 0, 1)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    const int lane = tid % 32;
    const int wg = tid / 128;
    const int wr = (tid / 32) % 4;
    const int g = lane / 4;
    const int t = lane % 4;
    const uint32_t q_base = sbase + kQOff;
    const uint32_t k0 = sbase + kK0Off;
    const uint32_t k1 = sbase + kK1Off;
    MlaConsumerState cs;
    cs.m_run[0] = kMaxInit;
    cs.m_run[1] = kMaxInit;
#pragma unroll
    for (int i = 0; i < 128; ++i) cs.o[i] = 0.0f;
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    uint32_t pa[4][4];
    const int r0 = 16 * wr + g;  // rows r0 (hf 0) and r0 + 8 (hf 1)
    int n_run = n_pairs;         // becomes the producer's count of pairs with a key after the first pair
    tma::mbar_wait(bar(kBarQ), 0);

    if (wg == 0) {
        if (n_pairs > 0) {
            tma::mbar_wait(ready(0, kHalfL), 0);
            wgmma::reg_fence(s);
            wgmma::fence();
            qk_blocks<0, 4>(s, q_base, k0, true);
            wgmma::commit();
            tma::mbar_wait(ready(0, kHalfR), 0);
            wgmma::reg_fence(s);
            wgmma::fence();
            qk_blocks<4, 9>(s, q_base, k0, false);
            wgmma::commit();
            wgmma::wait<0>();
            wgmma::reg_fence(s);
        }
#pragma unroll 1
        for (int pr = 0; pr < n_run; ++pr) {
            const uint32_t ph = pr & 1;
            tma::mbar_wait(bar(kBarOk), ph);
            float mx[2];
            mask_scale_max(s, ok_s, a.scale_log2, t, mx);
            const float m0[2] = {fmaxf(cs.m_run[0], mx[0]), fmaxf(cs.m_run[1], mx[1])};
            softmax_to(cs, s, m0);
            if (t == 0) {
                m_s[r0] = m0[0];
                m_s[r0 + 8] = m0[1];
            }
            tma::named_arrive(kNbM0, 256);
            pack_p(s, pa);
            // O.L += P0 V0.L
            wgmma::reg_fence(cs.o);
            wgmma::fence();
            pv_local(cs.o, pa, k0, 0);
            wgmma::commit();
            wgmma::wait<0>();
            wgmma::reg_fence(cs.o);
            keep_live(pa);
            tma::mbar_arrive(free_(0, kHalfL));
            // m1: rescale P0 (to shared for warpgroup 1), O and the sum.
            tma::named_sync(kNbM1, 256);
            float sc[2];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float m1 = m_s[r0 + 8 * hf];
                sc[hf] = ex2(cs.m_run[hf] - m1);
                cs.m_run[hf] = m1;
                cs.l_run[hf] *= sc[hf];
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    s[4 * i + e] *= sc[0];
                    s[4 * i + 2 + e] *= sc[1];
                }
            }
            pack_p(s, pa);
            store_p(smem + kP0Off, pa, wr, g, t);
            wgmma::fence_proxy_async();
            tma::named_arrive(kNbP0, 256);
            scale_o(cs, sc);
            // O.L += P1 V1.L, then the next pair's S0 behind it.
            tma::named_sync(kNbP1, 256);
            wgmma::reg_fence(cs.o);
            wgmma::fence();
            pv_remote(cs.o, sbase + kP1Off, k1, 0);
            wgmma::commit();
            if (pr == 0) {
                tma::mbar_wait(bar(kBarCount), 0);
                n_run = *pairs_s;
            }
            if (pr + 1 < n_run) {
                tma::mbar_wait(ready(0, kHalfL), ph ^ 1);
                wgmma::reg_fence(s);
                wgmma::fence();
                qk_blocks<0, 4>(s, q_base, k0, true);
                wgmma::commit();
                wgmma::wait<1>();
                tma::mbar_arrive(free_(1, kHalfL));
                tma::mbar_wait(ready(0, kHalfR), ph ^ 1);
                wgmma::reg_fence(s);
                wgmma::fence();
                qk_blocks<4, 9>(s, q_base, k0, false);
                wgmma::commit();
                wgmma::wait<0>();
            } else {
                wgmma::wait<0>();
                tma::mbar_arrive(free_(1, kHalfL));
            }
            wgmma::reg_fence(cs.o);
            wgmma::reg_fence(s);
        }
    } else {
#pragma unroll 1
        for (int pr = 0; pr < n_run; ++pr) {
            const uint32_t ph = pr & 1;
            tma::mbar_wait(ready(1, kHalfR), ph);
            wgmma::reg_fence(s);
            wgmma::fence();
            qk_blocks<4, 9>(s, q_base, k1, true);
            tma::mbar_wait(ready(1, kHalfL), ph);
            wgmma::reg_fence(s);
            wgmma::fence();
            qk_blocks<0, 4>(s, q_base, k1, false);
            wgmma::commit();
            wgmma::wait<0>();
            wgmma::reg_fence(s);
            tma::mbar_wait(bar(kBarOk), ph);
            float mx[2];
            mask_scale_max(s, ok_s + kN, a.scale_log2, t, mx);
            tma::named_sync(kNbM0, 256);
            const float m1[2] = {fmaxf(m_s[r0], mx[0]), fmaxf(m_s[r0 + 8], mx[1])};
            softmax_to(cs, s, m1);
            __syncwarp();  // the quad's reads of m0 before its m1 replaces it
            if (t == 0) {
                m_s[r0] = m1[0];
                m_s[r0 + 8] = m1[1];
            }
            tma::named_arrive(kNbM1, 256);
            pack_p(s, pa);
            // O.R += P1 V1.R (registers), P1 to shared, O.R += P0 V0.R (shared)
            wgmma::reg_fence(cs.o);
            wgmma::fence();
            pv_local(cs.o, pa, k1, 1);
            wgmma::commit();
            store_p(smem + kP1Off, pa, wr, g, t);
            wgmma::fence_proxy_async();
            tma::named_sync(kNbP0, 256);
            wgmma::fence();  // every batch opens with a fence (an HGMMA after a committed group without one faults)
            pv_remote(cs.o, sbase + kP0Off, k0, 1);
            wgmma::commit();
            tma::named_arrive(kNbP1, 256);
            wgmma::wait<1>();
            keep_live(pa);
            tma::mbar_arrive(free_(1, kHalfR));
            wgmma::wait<0>();
            wgmma::reg_fence(cs.o);
            tma::mbar_arrive(free_(0, kHalfR));
            if (pr == 0) {
                tma::mbar_wait(bar(kBarCount), 0);
                n_run = *pairs_s;
            }
        }
    }
    const auto sync = [] { tma::named_sync(kNbL, 256); };
    mla_store_rows<true, OutT>(cs, a, w, l_s, wg, wr, g, t, sync);
}

}  // namespace

void launch_wgmma_pair_sparse(const MlaTcArgs& a, bool out_f32, bool skip_tail, int64_t n_ctas, cudaStream_t stream) {
    if (out_f32) {
        launch_mla_kernel(skip_tail ? mla_wgmma_pair_kernel<float, true> : mla_wgmma_pair_kernel<float, false>,
                          kPairThreads, kPairSmemBytes, a, n_ctas, stream);
    } else {
        launch_mla_kernel(skip_tail ? mla_wgmma_pair_kernel<bf16, true> : mla_wgmma_pair_kernel<bf16, false>,
                          kPairThreads, kPairSmemBytes, a, n_ctas, stream);
    }
}

}  // namespace penstock::cuda::mla_detail
