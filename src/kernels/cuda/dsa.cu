// DSA ops on the GPU (kernels/ops_dsa.h; the CPU reference kernels/ref/dsa.cc is the spec): the lightning-indexer
// logits, the FP8 index quantiser and sparse MLA attention. dsa_topk lives in dsa_topk.cu.
// The fp8 indexer runs on Hopper wgmma where it applies (dsa_indexer_wgmma.cu: head_dim 128, 32 / 64 heads),
// else on tensor cores with mma.sync (below); the rest on CUDA cores, except bf16 sparse MLA (wgmma tensor cores,
// mla_tc.h) and the quantiser's 128-wide rows (one warp per row). All indexer variants skip key tiles past the rows'
// q_pos when it is given. Fusing the top-k into the logits is TODO(#7).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_ops_dsa.h"
#include "kernels/cuda/dsa_indexer_wgmma.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/mla_tc.h"
#include "kernels/cuda/tile_util.cuh"

namespace penstock::cuda {

namespace {

void check_view(const TensorView& v, int ndim, DType dtype, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK_EQ(v.ndim, ndim) << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.dtype == dtype) << op << ": " << name << " has dtype " << dtype_name(v.dtype) << ", want "
                                     << dtype_name(dtype);
    PENSTOCK_CHECK(v.stride(ndim - 1) == 1 || v.size(ndim - 1) <= 1)
        << op << ": " << name << " last dim must be contiguous";
}

// e4m3fn -> f32, exact (no inf; S.1111.111 is NaN).
__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
    const uint32_t sign = (v & 0x80u) << 24;
    const uint32_t e = (v >> 3) & 0xfu;
    const uint32_t m = v & 0x7u;
    if (e == 0xfu && m == 0x7u) return __uint_as_float(sign | 0x7fc00000u);
    if (e == 0) {
        const float mag = static_cast<float>(m) * 0.001953125f;  // m * 2^-9, exact
        return sign ? -mag : mag;
    }
    return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// ---------------------------------------------------------------------------------------------------------------
// dsa_indexer_logits. Block tile: kRowsT query rows x kKeysT keys, 256 threads; thread (ty, tx) owns rows ty and
// ty + 8 and keys tx and tx + 32 (4 logits). The key tile (kKeysT x head_dim, as f32, rows padded by one float so lane
// j reading key j is conflict free) is staged once; then per head the kRowsT query rows and their gates are staged
// and each thread adds gate * ReLU(score) for its 4 (row, key) pairs. fp32 accumulation of the dot (e4m3 products
// are exact in f32) and of the head sum; the reference accumulates in double.
constexpr int kRowsT = 16;
constexpr int kKeysT = 64;
constexpr int kIdxThreads = 256;

struct IndexerArgs {
    float* logits;
    const void* q;
    const void* k;
    const float* weights;
    const float* q_scale;
    const float* k_scale;
    const int32_t* q_pos;  // nullptr: score every key
    int64_t lg0, q0, q1, k0, w0, qs0, qs1, ks0, qp0;
    int n_rows, n_heads, head_dim, n_keys;
    float scale;
};

// One past the last key that any of rows [row0, row0 + n) sees (with q_pos; keys past it need no logits), else
// n_keys. Block-uniform.
__device__ __forceinline__ int visible_key_end(const IndexerArgs& a, int row0, int n) {
    if (a.q_pos == nullptr) return a.n_keys;
    int m = -1;
    for (int i = 0; i < n && row0 + i < a.n_rows; ++i) {
        m = max(m, __ldg(a.q_pos + static_cast<int64_t>(row0 + i) * a.qp0));
    }
    return m >= a.n_keys ? a.n_keys : m + 1;
}

template <bool kFp8>
__device__ __forceinline__ float load_elem(const void* base, int64_t i) {
    if constexpr (kFp8) {
        return e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    } else {
        return static_cast<const float*>(base)[i];
    }
}

template <bool kFp8>
__global__ void __launch_bounds__(kIdxThreads) dsa_indexer_logits_kernel(IndexerArgs a) {
    extern __shared__ float idx_smem[];
    const int d = a.head_dim;
    const int k_pitch = d + 1;
    float* k_s = idx_smem;                // [kKeysT][d + 1]
    float* q_s = k_s + kKeysT * k_pitch;  // [kRowsT][d]
    float* gate_s = q_s + kRowsT * d;     // [kRowsT]
    const int tid = static_cast<int>(threadIdx.x);
    const int tx = tid % 32;
    const int ty = tid / 32;
    const int key0 = static_cast<int>(blockIdx.x) * kKeysT;
    const int row0 = static_cast<int>(blockIdx.y) * kRowsT;
    if (key0 >= visible_key_end(a, row0, kRowsT)) return;  // block-uniform: every key of the tile is masked

    for (int i = tid; i < kKeysT * d; i += kIdxThreads) {
        const int key = i / d;
        const int c = i % d;
        float x = 0.0f;
        if (key0 + key < a.n_keys) x = load_elem<kFp8>(a.k, static_cast<int64_t>(key0 + key) * a.k0 + c);
        k_s[key * k_pitch + c] = x;
    }
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    for (int h = 0; h < a.n_heads; ++h) {
        __syncthreads();  // previous head's q_s consumed (and k_s written, on the first pass)
        for (int i = tid; i < kRowsT * d; i += kIdxThreads) {
            const int r = i / d;
            const int c = i % d;
            float x = 0.0f;
            if (row0 + r < a.n_rows) {
                x = load_elem<kFp8>(a.q, static_cast<int64_t>(row0 + r) * a.q0 + static_cast<int64_t>(h) * a.q1 + c);
            }
            q_s[r * d + c] = x;
        }
        if (tid < kRowsT) {
            float g = 0.0f;
            if (row0 + tid < a.n_rows) {
                const int64_t r = row0 + tid;
                g = a.weights[r * a.w0 + h];
                if constexpr (kFp8) g = g * a.q_scale[r * a.qs0 + static_cast<int64_t>(h) * a.qs1] * a.scale;
            }
            gate_s[tid] = g;
        }
        __syncthreads();
        float dot[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        const float* qa = q_s + ty * d;
        const float* qb = q_s + (ty + 8) * d;
        const float* ka = k_s + tx * k_pitch;
        const float* kb = k_s + (tx + 32) * k_pitch;
        for (int c = 0; c < d; ++c) {
            const float x0 = qa[c], x1 = qb[c], y0 = ka[c], y1 = kb[c];
            dot[0][0] = fmaf(x0, y0, dot[0][0]);
            dot[0][1] = fmaf(x0, y1, dot[0][1]);
            dot[1][0] = fmaf(x1, y0, dot[1][0]);
            dot[1][1] = fmaf(x1, y1, dot[1][1]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float g = gate_s[ty + 8 * i];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const float score = kFp8 ? dot[i][j] : a.scale * dot[i][j];
                const float relu = score > 0.0f ? score : 0.0f;
                acc[i][j] += g * relu;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = row0 + ty + 8 * i;
        if (r >= a.n_rows) continue;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int s = key0 + tx + 32 * j;
            if (s >= a.n_keys) continue;
            float v = acc[i][j];
            if constexpr (kFp8) v *= a.k_scale[static_cast<int64_t>(s) * a.ks0];
            a.logits[static_cast<int64_t>(r) * a.lg0 + s] = v;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dsa_indexer_logits with f32 q / k (the default indexer: transformers' computation), register-tiled on CUDA cores
// (IndexerVariant::kF32Tiled; kAuto's where q / k rows are 16-byte aligned and head_dim % 4 == 0, <= 128, and the TF32
// kernel below does not apply; IndexerVariant::kCudaCore forces the kernel above). Block tile kTileRows query rows x
// kTileKeys keys, 512 threads, one block per SM; thread (ty = warp, tx = lane) owns rows 8 ty .. 8 ty + 7 and keys 4 tx
// .. 4 tx + 3 (32 logits). The key tile is staged once, transposed
// ([head_dim][keys]: a lane's 4 keys at one column are one 16-byte load). The heads' q rows (row-major, as in memory)
// and gates go through a two-slot ring by cp.async: head h + 1 lands while head h's products run, so a head costs one
// barrier and no exposed load (session 32's kernel staged each head's q transposed through registers between two
// barriers: ~31 TFLOP/s at 64 rows x 128 keys, two blocks per SM). Per 4 columns a thread loads its 8 rows' q as
// 8 broadcast 16-byte loads and 4 key vectors: 12 shared loads for 128 FMAs. Per (row, key) the dot runs over the
// columns in order and the head sum over the heads in order, with the same expressions as the kernel above: its
// results bit for bit.
constexpr int kTileRows = 128;
constexpr int kTileKeys = 128;
constexpr int kTileThreads = 512;
constexpr int kTileMaxDim = 128;

size_t f32_tiled_smem_bytes(int64_t head_dim) {
    return sizeof(float) * (static_cast<size_t>(head_dim) * (kTileKeys + 2 * kTileRows) + 2 * kTileRows);
}

// kD: head_dim when it is a compile-time constant (128: GLM-5.3 and DeepSeek-V3.2; 64), else 0 and a.head_dim. With
// kD the 8 rows' loads are one base plus immediate offsets; with a run-time pitch each row took its own address
// arithmetic (27% of the issued instructions were not FMAs at head_dim 128, Nsight Compute).
template <int kD>
__global__ void __launch_bounds__(kTileThreads, 1) dsa_indexer_logits_f32_tiled_kernel(IndexerArgs a) {
    extern __shared__ float4 tile_smem4[];
    float* k_s = reinterpret_cast<float*>(tile_smem4);  // [head_dim][kTileKeys]
    const int d = kD > 0 ? kD : a.head_dim;
    float* q_s = k_s + d * kTileKeys;         // [2][kTileRows][head_dim]
    float* gate_s = q_s + 2 * d * kTileRows;  // [2][kTileRows]
    const int tid = static_cast<int>(threadIdx.x);
    const int tx = tid % 32;
    const int ty = tid / 32;
    const int key0 = static_cast<int>(blockIdx.x) * kTileKeys;
    const int row0 = static_cast<int>(blockIdx.y) * kTileRows;
    if (key0 >= visible_key_end(a, row0, kTileRows)) return;  // block-uniform: every key of the tile is masked
    const int d4 = d / 4;
    const float* k = static_cast<const float*>(a.k);
    const float* q = static_cast<const float*>(a.q);
    // Head h's q rows into slot `slot`: warp w copies rows w, w + 16, ..., lane c4 the row's 16-byte chunk c4 (rows
    // past n_rows zero-filled); threads 0 .. kTileRows - 1 copy one gate each.
    const auto issue_head = [&](int h, int slot) {
        float* qd = q_s + slot * d * kTileRows;
        for (int r = ty; r < kTileRows; r += kTileThreads / 32) {
            const bool ok = row0 + r < a.n_rows;
            const float* src = q + (ok ? static_cast<int64_t>(row0 + r) * a.q0 + static_cast<int64_t>(h) * a.q1 : 0);
            for (int c4 = tx; c4 < d4; c4 += 32)
                tile::cp_async_16(tile::smem_u32(qd + r * d + 4 * c4), src + 4 * c4, ok);
        }
        if (tid < kTileRows) {
            const bool ok = row0 + tid < a.n_rows;
            const float* src = a.weights + (ok ? static_cast<int64_t>(row0 + tid) * a.w0 + h : 0);
            tile::cp_async_4(tile::smem_u32(gate_s + slot * kTileRows + tid), src, ok);
        }
        tile::cp_async_commit();
    };
    issue_head(0, 0);
    // Thread i stages columns 4 (i / kTileKeys) .. + 3 of key i % kTileKeys: a warp writes 32 consecutive keys of one
    // column, conflict free.
    for (int i = tid; i < kTileKeys * d4; i += kTileThreads) {
        const int key = i % kTileKeys;
        const int c = 4 * (i / kTileKeys);
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (key0 + key < a.n_keys)
            x = *reinterpret_cast<const float4*>(k + static_cast<int64_t>(key0 + key) * a.k0 + c);
        k_s[c * kTileKeys + key] = x.x;
        k_s[(c + 1) * kTileKeys + key] = x.y;
        k_s[(c + 2) * kTileKeys + key] = x.z;
        k_s[(c + 3) * kTileKeys + key] = x.w;
    }
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    }
    const float* kc = k_s + 4 * tx;
    for (int h = 0; h < a.n_heads; ++h) {
        const int slot = h & 1;
        tile::cp_async_wait_all();  // head h's rows and gates (this thread's copies)
        __syncthreads();            // everyone's copies landed; slot 1 - slot (head h - 1) consumed; k_s written
        if (h + 1 < a.n_heads) issue_head(h + 1, 1 - slot);
        float dot[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) dot[i][j] = 0.0f;
        }
        const float* qr = q_s + slot * d * kTileRows + 8 * ty * d;
#pragma unroll 4
        for (int c = 0; c < d; c += 4) {
            float4 qv[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) qv[i] = *reinterpret_cast<const float4*>(qr + i * d + c);
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const float4 kv = *reinterpret_cast<const float4*>(kc + (c + cc) * kTileKeys);
                const float kw[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float x = cc == 0 ? qv[i].x : cc == 1 ? qv[i].y : cc == 2 ? qv[i].z : qv[i].w;
#pragma unroll
                    for (int j = 0; j < 4; ++j) dot[i][j] = fmaf(x, kw[j], dot[i][j]);
                }
            }
        }
        const float* gates = gate_s + slot * kTileRows + 8 * ty;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float g = gates[i];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float score = a.scale * dot[i][j];
                const float relu = score > 0.0f ? score : 0.0f;
                acc[i][j] += g * relu;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + 8 * ty + i;
        if (r >= a.n_rows) continue;
        float* out = a.logits + static_cast<int64_t>(r) * a.lg0 + key0 + 4 * tx;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (key0 + 4 * tx + j < a.n_keys) out[j] = acc[i][j];
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dsa_indexer_logits with f32 q / k on TF32 tensor cores, three products per dot (IndexerVariant::kMmaTf32; kAuto's
// f32 kernel for calls of many rows, 32 or 64 heads, where the wgmma kernels of dsa_indexer_wgmma_tf32.cu do not
// apply: 60 vs 40 TFLOP/s for the tiled kernel, docs/perf/2026-12-05-s36.md). Each f32 x is split as hi = x with its
// low 13 mantissa bits cleared (the bits a tf32 operand keeps) and lo = x - hi (exact); q.k ~ lo_q.hi_k + hi_q.lo_k +
// hi_q.hi_k on mma.sync.m16n8k8 tf32 with f32 accumulation (lo's own low bits dropped by the tensor core: ~2^-22
// relative per product). Not bit-equal to the CUDA-core kernels; held to the reference's kF32IndexerLogits tolerance.
// Block: kT32Rows = 128 / n_heads query rows (N = 128 (row, head) pairs) x all visible keys in tiles of kT32Keys,
// 8 warps, warp w the tile's keys 16 w .. 16 w + 15 (one m16 tile) against all 16 n8 tiles. Column c of n8 tile j is
// the pair (row (c / 2) / L, head 2 L j + 2 ((c / 2) % L) + c % 2) with L = 4 / kT32Rows lanes per row, so lane
// (g = lane / 4, t = lane % 4) accumulates keys g and g + 8 of row t / L over heads 2 L j + 2 (t % L) + {0, 1}: the
// gated ReLU head sum stays in the lane (L = 2: one xor-1 shuffle). q is staged once, in pair order ([j][c][d], pitch
// head_dim + 4: conflict-free fragment loads); key tiles ([key][d], same pitch) double-buffered by cp.async.
constexpr int kT32Keys = 128;
constexpr int kT32Warps = 8;
constexpr int kT32Pairs = 128;

__device__ __forceinline__ void mma_tf32_1688(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void tf32_split(float x, uint32_t& hi, uint32_t& lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

size_t tf32_indexer_smem_bytes(int64_t head_dim) {
    const size_t pitch = static_cast<size_t>(head_dim) + 4;
    return sizeof(float) * (pitch * (kT32Pairs + 2 * kT32Keys) + kT32Pairs);
}

template <int kRowsB>
__global__ void __launch_bounds__(kT32Warps * 32, 1) dsa_indexer_logits_tf32_kernel(IndexerArgs a) {
    constexpr int kHeads = kT32Pairs / kRowsB;
    constexpr int kL = 4 / kRowsB;  // lanes per row in a quad
    extern __shared__ float4 t32_smem4[];
    const int d = a.head_dim;
    const int pitch = d + 4;
    float* q_s = reinterpret_cast<float*>(t32_smem4);  // [16 n8 tiles][8 columns][pitch]
    float* k_s = q_s + kT32Pairs * pitch;              // [2][kT32Keys][pitch]
    float* gate_s = k_s + 2 * kT32Keys * pitch;        // [kT32Pairs]: (row, head) at row * kHeads + head
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    // The last rows first (causal: the most keys).
    const int row0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * kRowsB;
    const int key_end = visible_key_end(a, row0, kRowsB);
    const int n_tiles = (key_end + kT32Keys - 1) / kT32Keys;
    if (n_tiles == 0) return;  // block-uniform: no row sees a key (nothing copied yet)
    const float* q = static_cast<const float*>(a.q);
    const float* k = static_cast<const float*>(a.k);
    const int d4 = d / 4;
    // q in pair order: (row r, head h) -> tile j = h / (2 kL), column c = 2 (kL r + (h / 2) % kL) + h % 2.
    for (int i = tid; i < kT32Pairs * d4; i += kT32Warps * 32) {
        const int pair = i / d4, c4 = i % d4;
        const int r = pair / kHeads, h = pair % kHeads;
        const int j = h / (2 * kL), c = 2 * (kL * r + (h / 2) % kL) + h % 2;
        const bool ok = row0 + r < a.n_rows;
        const float* src =
            q + (ok ? static_cast<int64_t>(row0 + r) * a.q0 + static_cast<int64_t>(h) * a.q1 + 4 * c4 : 0);
        tile::cp_async_16(tile::smem_u32(q_s + (8 * j + c) * pitch + 4 * c4), src, ok);
    }
    if (tid < kT32Pairs) {
        const int r = tid / kHeads, h = tid % kHeads;
        gate_s[tid] = row0 + r < a.n_rows ? a.weights[static_cast<int64_t>(row0 + r) * a.w0 + h] : 0.0f;
    }
    const auto load_keys = [&](int tile_i, int buf) {
        float* dst = k_s + buf * kT32Keys * pitch;
        const int key0 = tile_i * kT32Keys;
        const int c4 = tid % d4;  // d4 divides the block (head_dim a power of two): no divisions per copy
        for (int key = tid / d4; key < kT32Keys; key += kT32Warps * 32 / d4) {
            const bool ok = key0 + key < a.n_keys;
            const float* src = k + (ok ? static_cast<int64_t>(key0 + key) * a.k0 + 4 * c4 : 0);
            tile::cp_async_16(tile::smem_u32(dst + key * pitch + 4 * c4), src, ok);
        }
        tile::cp_async_commit();
    };
    load_keys(0, 0);  // q's copies ride in the same group
    const int my_row = t / kL;
    for (int ti = 0; ti < n_tiles; ++ti) {
        const int buf = ti & 1;
        tile::cp_async_wait_all();
        __syncthreads();  // tile ti (and q, gates) landed for all; buffer 1 - buf free (tile ti - 1 consumed)
        if (ti + 1 < n_tiles) load_keys(ti + 1, 1 - buf);
        float acc[16][4];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
        }
        const float* ka = k_s + buf * kT32Keys * pitch + (16 * warp + g) * pitch + t;
        const float* qb = q_s + g * pitch + t;
        for (int k0 = 0; k0 < d; k0 += 8) {
            uint32_t a_hi[4], a_lo[4];
            tf32_split(ka[k0], a_hi[0], a_lo[0]);
            tf32_split(ka[8 * pitch + k0], a_hi[1], a_lo[1]);
            tf32_split(ka[k0 + 4], a_hi[2], a_lo[2]);
            tf32_split(ka[8 * pitch + k0 + 4], a_hi[3], a_lo[3]);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                uint32_t b0_hi, b0_lo, b1_hi, b1_lo;
                tf32_split(qb[8 * j * pitch + k0], b0_hi, b0_lo);
                tf32_split(qb[8 * j * pitch + k0 + 4], b1_hi, b1_lo);
                mma_tf32_1688(acc[j], a_lo, b0_hi, b1_hi);  // the small terms first
                mma_tf32_1688(acc[j], a_hi, b0_lo, b1_lo);
                mma_tf32_1688(acc[j], a_hi, b0_hi, b1_hi);
            }
        }
        // acc[j][0 / 1]: key g, heads 2 kL j + 2 (t % kL) + 0 / 1 of row my_row; [2 / 3]: key g + 8.
        float out0 = 0.0f, out1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int h = 2 * kL * j + 2 * (t % kL) + e;
                const float gate = gate_s[my_row * kHeads + h];
                const float s0 = a.scale * acc[j][e], s1 = a.scale * acc[j][2 + e];
                out0 += gate * (s0 > 0.0f ? s0 : 0.0f);
                out1 += gate * (s1 > 0.0f ? s1 : 0.0f);
            }
        }
        if constexpr (kL == 2) {
            out0 += __shfl_xor_sync(0xffffffffu, out0, 1);
            out1 += __shfl_xor_sync(0xffffffffu, out1, 1);
        }
        const int r = row0 + my_row;
        const int key = ti * kT32Keys + 16 * warp + g;
        if (t % kL == 0 && r < a.n_rows) {
            float* out = a.logits + static_cast<int64_t>(r) * a.lg0;
            if (key < a.n_keys) out[key] = out0;
            if (key + 8 < a.n_keys) out[key + 8] = out1;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dsa_indexer_logits, fp8 on tensor cores (IndexerVariant::kMma): mma.sync.m16n8k32 e4m3 x e4m3 -> f32 (exact e4m3
// products, f32 accumulation, as the CUDA-core variant). The GEMM is [rows x heads, head_dim] x [head_dim, keys]:
// an m16 tile is 16 heads of one query row, so the ReLU-gated head sum happens in the accumulator fragment.
// Block = 4 warps; warp w owns keys [blockIdx.x * 256 + 64 w, + 64) and keeps their B fragments (8 n8 tiles x
// head_dim / 32 k32 steps, k read as 4-byte words straight from global) in registers; it walks the block's
// kMmaRows query rows and, per row, the heads in chunks of 16 (heads past n_heads load zeros and gate 0).
// Fragment layouts (PTX ISA, m16n8k32 with 8-bit A/B): g = lane / 4, t = lane % 4;
//   A regs 0..3: (row g, k 4t..4t+3), (row g+8, same k), (row g, k 16+4t..), (row g+8, k 16+4t..);
//   B regs 0..1: (n g, k 4t..4t+3), (n g, k 16+4t..);   C: (row g, n 2t, 2t+1), (row g+8, n 2t, 2t+1).
// Per chunk each thread adds gate[g] ReLU(c0) + gate[g+8] ReLU(c2) (and c1 / c3) into its per-key partials; after
// the last chunk the 8 row groups are summed with shuffles and lanes 0..3 write 2 keys per n8 tile (times k_scale).
constexpr int kMmaWarps = 4;
constexpr int kMmaKeysPerWarp = 64;
constexpr int kMmaRows = 16;
constexpr int kMmaMaxSteps = 4;  // head_dim <= 128

__device__ __forceinline__ void mma_e4m3_16832(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(kMmaWarps * 32) dsa_indexer_logits_mma_kernel(IndexerArgs a) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int g = lane / 4;
    const int t = lane % 4;
    const int n_steps = a.head_dim / 32;
    const int block_key0 = static_cast<int>(blockIdx.x) * (kMmaWarps * kMmaKeysPerWarp);
    if (block_key0 >= visible_key_end(a, static_cast<int>(blockIdx.y) * kMmaRows, kMmaRows)) return;  // all masked
    const int key0 = block_key0 + warp * kMmaKeysPerWarp;
    const auto* kb = static_cast<const uint8_t*>(a.k);
    const auto* qb = static_cast<const uint8_t*>(a.q);

    uint32_t bf[8][kMmaMaxSteps][2];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        const int s = key0 + nt * 8 + g;
        const uint8_t* krow = kb + static_cast<int64_t>(s) * a.k0;
#pragma unroll
        for (int ks = 0; ks < kMmaMaxSteps; ++ks) {
            const bool ok = s < a.n_keys && ks < n_steps;
            bf[nt][ks][0] = ok ? *reinterpret_cast<const uint32_t*>(krow + ks * 32 + 4 * t) : 0u;
            bf[nt][ks][1] = ok ? *reinterpret_cast<const uint32_t*>(krow + ks * 32 + 16 + 4 * t) : 0u;
        }
    }
    const int row_end = min(a.n_rows, static_cast<int>(blockIdx.y + 1) * kMmaRows);
    for (int r = static_cast<int>(blockIdx.y) * kMmaRows; r < row_end; ++r) {
        float part[8][2];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) part[nt][0] = part[nt][1] = 0.0f;
        for (int h0 = 0; h0 < a.n_heads; h0 += 16) {
            const int ha = h0 + g, hb = h0 + g + 8;
            const bool oka = ha < a.n_heads, okb = hb < a.n_heads;
            const uint8_t* qa = qb + static_cast<int64_t>(r) * a.q0 + static_cast<int64_t>(oka ? ha : 0) * a.q1;
            const uint8_t* qbp = qb + static_cast<int64_t>(r) * a.q0 + static_cast<int64_t>(okb ? hb : 0) * a.q1;
            const float* w = a.weights + static_cast<int64_t>(r) * a.w0;
            const float* qs = a.q_scale + static_cast<int64_t>(r) * a.qs0;
            const float gate_a = oka ? w[ha] * qs[static_cast<int64_t>(ha) * a.qs1] * a.scale : 0.0f;
            const float gate_b = okb ? w[hb] * qs[static_cast<int64_t>(hb) * a.qs1] * a.scale : 0.0f;
            float c[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < kMmaMaxSteps; ++ks) {
                if (ks >= n_steps) break;  // warp-uniform
                uint32_t af[4];
                af[0] = oka ? *reinterpret_cast<const uint32_t*>(qa + ks * 32 + 4 * t) : 0u;
                af[1] = okb ? *reinterpret_cast<const uint32_t*>(qbp + ks * 32 + 4 * t) : 0u;
                af[2] = oka ? *reinterpret_cast<const uint32_t*>(qa + ks * 32 + 16 + 4 * t) : 0u;
                af[3] = okb ? *reinterpret_cast<const uint32_t*>(qbp + ks * 32 + 16 + 4 * t) : 0u;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) mma_e4m3_16832(c[nt], af, bf[nt][ks][0], bf[nt][ks][1]);
            }
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                part[nt][0] += gate_a * fmaxf(c[nt][0], 0.0f) + gate_b * fmaxf(c[nt][2], 0.0f);
                part[nt][1] += gate_a * fmaxf(c[nt][1], 0.0f) + gate_b * fmaxf(c[nt][3], 0.0f);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float v = part[nt][j];
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                const int s = key0 + nt * 8 + 2 * t + j;
                if (g == 0 && s < a.n_keys) {
                    a.logits[static_cast<int64_t>(r) * a.lg0 + s] = v * a.k_scale[static_cast<int64_t>(s) * a.ks0];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dsa_quantize_fp8: one block of kQuantThreads per row (grid-stride over rows), the row staged in shared memory.
// Bit-exactness with the reference: the butterflies are the same f32 adds and subtracts on the same pairs (each
// output of a stage is one rounding of a + b or a - b, whatever the thread order), the normalisation is one f32
// multiply by the host-computed d^-0.5, the max is order-free, s = max(amax, 1e-4) / 448 is an IEEE division, and
// ue8m0 takes ceil of log2 rounded to f32 (log2 in double, then one rounding: the f32 value glibc's log2f returns
// for these arguments), then an exact power of two. Explicit _rn intrinsics keep nvcc from contracting anything.
constexpr int kQuantThreads = 128;

__global__ void __launch_bounds__(kQuantThreads)
    dsa_quantize_fp8_kernel(uint8_t* out, float* scale, const float* in, int64_t out0, int64_t scale0, int64_t in0,
                            int n_rows, int dim, bool rotate, bool ue8m0, float norm) {
    extern __shared__ float qy[];
    __shared__ float red[32];
    const int tid = static_cast<int>(threadIdx.x);
    for (int r = static_cast<int>(blockIdx.x); r < n_rows; r += static_cast<int>(gridDim.x)) {
        const float* x = in + static_cast<int64_t>(r) * in0;
        for (int i = tid; i < dim; i += kQuantThreads) qy[i] = x[i];
        __syncthreads();
        if (rotate) {
            for (int h = 1; h < dim; h *= 2) {
                for (int p = tid; p < dim / 2; p += kQuantThreads) {
                    const int j = (p / h) * 2 * h + (p % h);  // pair (j, j + h) inside its block of 2h
                    const float a = qy[j];
                    const float b = qy[j + h];
                    qy[j] = __fadd_rn(a, b);
                    qy[j + h] = __fsub_rn(a, b);
                }
                __syncthreads();
            }
            for (int i = tid; i < dim; i += kQuantThreads) qy[i] = __fmul_rn(qy[i], norm);
            __syncthreads();
        }
        float amax = 0.0f;
        for (int i = tid; i < dim; i += kQuantThreads) amax = fmaxf(amax, fabsf(qy[i]));
        amax = block_reduce<true>(amax, red);
        float s = __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f);
        if (ue8m0) {
            const float l = static_cast<float>(log2(static_cast<double>(s)));
            s = ldexpf(1.0f, static_cast<int>(ceilf(l)));
        }
        uint8_t* o = out + static_cast<int64_t>(r) * out0;
        for (int i = tid; i < dim; i += kQuantThreads) {
            float v = __fdiv_rn(qy[i], s);
            v = v < -448.0f ? -448.0f : (448.0f < v ? 448.0f : v);  // std::clamp (NaN passes through)
            o[i] = float_to_e4m3(v);
        }
        if (tid == 0) scale[static_cast<int64_t>(r) * scale0] = s;
        __syncthreads();  // qy reused by the next row
    }
}

// The same for dim 128 (the indexer's head_dim), eight lanes per row: lane g of a row's group holds elements
// [16 g, 16 g + 16) (four 16-byte loads; one 16-byte store, or four 4-byte ones when the out rows are only 4-byte
// aligned). The butterflies of h = 1 .. 8 pair elements inside a lane, those of h = 16, 32, 64 pair lane g with lane
// g ^ (h / 16) at the same slot; the lane holding j (bit h of j clear) forms a + b, the one holding j + h forms
// a - b from the same a (= element j) and b, so every output is the rounding of the reference's own sum or difference.
// The amax is a max over the group's lanes. ue8m0: s = 2^ceil(log2(s0)) for s0 = max(amax, 1e-4) / 448, where the
// reference rounds log2 (in double) to f32 before the ceil; for a finite normal s0 with mantissa field M that is
// exponent(s0) when M = 0 and exponent(s0) + 1 when M >= 64 (log2(1 + 64 * 2^-23) > 1.1e-5 exceeds half an f32 ulp
// of any exponent up to 127, so the rounded sum never falls back to the integer below), and the few other s0 take the
// reference's own steps. v / s for s = 2^e is v * 2^-e exactly; otherwise the quotient of one reciprocal
// (fp8.cuh ActQuantStep: the division's e4m3 bytes). The bytes from the hardware cast (|v / s| <= 448 after the
// reference's clamp; a NaN quotient is the GPU's positive NaN, 0x7f, as before). Session 9's warp-per-row kernel took
// 1.12 ms for the 65536 x 32 query rows of a GLM-5.3 layer at 64K (28% of the copy rate): a double log2, a division
// and a software cast per element and 25 shuffles per row.
constexpr int kQuant128Warps = 8;
constexpr int kQuant128RowsPerWarp = 4;

// ceil(log2(s)) as the reference computes it (float(log2(double(s))), then ceilf), with the exponent shortcut above.
__device__ __forceinline__ int ue8m0_exponent(float s) {
    const uint32_t b = __float_as_uint(s);
    const uint32_t e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
    if (e != 0 && e != 255 && (m == 0 || m >= 64)) return static_cast<int>(e) - 127 + (m != 0 ? 1 : 0);
    return static_cast<int>(ceilf(static_cast<float>(log2(static_cast<double>(s)))));
}

__global__ void __launch_bounds__(kQuant128Warps * 32)
    dsa_quantize_fp8_128_kernel(uint8_t* out, float* scale, const float* in, int64_t out0, int64_t scale0, int64_t in0,
                                int n_rows, bool rotate, bool ue8m0, float norm, bool store16) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int g = lane % 8, sub = lane / 8;
    constexpr int kRowsPerBlock = kQuant128Warps * kQuant128RowsPerWarp;
    // Warp-uniform bounds: every lane reaches the shuffles; a lane past n_rows works on zeros and stores nothing.
    for (int64_t base = (static_cast<int64_t>(blockIdx.x) * kQuant128Warps + warp) * kQuant128RowsPerWarp;
         base < n_rows; base += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
        const int64_t r = base + sub;
        const bool valid = r < n_rows;
        float v[16];
        if (valid) {
            const auto* x4 = reinterpret_cast<const float4*>(in + r * in0 + 16 * g);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 t = x4[i];
                v[4 * i] = t.x;
                v[4 * i + 1] = t.y;
                v[4 * i + 2] = t.z;
                v[4 * i + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = 0.0f;
        }
        if (rotate) {
#pragma unroll
            for (int h = 1; h < 16; h *= 2) {
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    if ((j & h) != 0) continue;
                    const float a = v[j], b = v[j + h];
                    v[j] = __fadd_rn(a, b);
                    v[j + h] = __fsub_rn(a, b);
                }
            }
#pragma unroll
            for (int m = 1; m < 8; m *= 2) {  // h = 16 m
                const bool upper = (g & m) != 0;
#pragma unroll
                for (int k = 0; k < 16; ++k) {
                    const float other = __shfl_xor_sync(0xffffffffu, v[k], m);
                    v[k] = upper ? __fsub_rn(other, v[k]) : __fadd_rn(v[k], other);
                }
            }
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = __fmul_rn(v[k], norm);
        }
        float amax = 0.0f;
#pragma unroll
        for (int k = 0; k < 16; ++k) amax = fmaxf(amax, fabsf(v[k]));
#pragma unroll
        for (int m = 1; m < 8; m *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        float y[16];
        float s;
        if (ue8m0) {
            const int e = ue8m0_exponent(__fdiv_rn(fmaxf(amax, 1e-4f), 448.0f));
            s = ldexpf(1.0f, e);
            if (e >= -126 && e <= 126) {
                const float inv = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);  // 2^-e, a normal f32
#pragma unroll
                for (int k = 0; k < 16; ++k) y[k] = __fmul_rn(v[k], inv);
            } else {
#pragma unroll
                for (int k = 0; k < 16; ++k) y[k] = __fdiv_rn(v[k], s);
            }
        } else {
            const ActQuantStep step(amax);
            s = step.s;
#pragma unroll
            for (int k = 0; k < 16; ++k) y[k] = step.quotient(v[k]);
        }
        uint32_t q[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float c[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float t = y[4 * i + k];
                c[k] = t < -448.0f ? -448.0f : (448.0f < t ? 448.0f : t);  // std::clamp (NaN passes through)
            }
            q[i] = e4m3x2_in_range(c[0], c[1]) | (e4m3x2_in_range(c[2], c[3]) << 16);
        }
        if (valid) {
            uint8_t* o = out + r * out0 + 16 * g;
            if (store16) {
                *reinterpret_cast<uint4*>(o) = make_uint4(q[0], q[1], q[2], q[3]);
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) reinterpret_cast<uint32_t*>(o)[i] = q[i];
            }
            if (g == 0) scale[r * scale0] = s;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// sparse_mla_attention: block = kMlaWarps heads of one query row (grid.x = row, grid.y = head group); warp w owns
// head blockIdx.y * kMlaWarps + w. The row's index list is walked in tiles of kMlaKeys entries: the tile's kv rows
// (d_qk, padded by one float) and v rows are gathered into shared memory as f32 once for all the block's heads;
// lane j scores entry j of the tile (-1 / out-of-range entries score -inf), the warp updates the running max and
// sum, and each lane accumulates d_v / 32 output columns. A tile with no valid entry is skipped by the whole block.
// fp32 online softmax (the reference: double, two passes).
constexpr int kMlaWarps = 8;
constexpr int kMlaKeys = 32;
constexpr int kMlaMaxDqk = 576;
constexpr int kMlaMaxDv = 512;

struct MlaArgs {
    float* out;
    float* lse;
    const float* q;
    const float* kv;
    const float* v;
    const int32_t* indices;
    int64_t o0, o1, l0, q0, q1, kv0, v0, i0;
    int n_rows, n_heads, d_qk, d_v, top_k, n_slots;
    float scale;
};

template <int kDvPerLane>
__global__ void __launch_bounds__(kMlaWarps * 32) sparse_mla_attention_kernel(MlaArgs a) {
    extern __shared__ float mla_smem[];
    const int d_qk = a.d_qk;
    const int d_v = a.d_v;
    const int k_pitch = d_qk + 1;
    float* q_s = mla_smem;                  // [kMlaWarps][d_qk]
    float* k_s = q_s + kMlaWarps * d_qk;    // [kMlaKeys][d_qk + 1]
    float* v_s = k_s + kMlaKeys * k_pitch;  // [kMlaKeys][d_v]
    __shared__ int slot_s[kMlaKeys];
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t r = blockIdx.x;
    const int h = static_cast<int>(blockIdx.y) * kMlaWarps + warp;
    const bool head_ok = h < a.n_heads;
    const int32_t* idx = a.indices + r * a.i0;

    if (head_ok) {
        const float* qrow = a.q + r * a.q0 + static_cast<int64_t>(h) * a.q1;
        for (int c = lane; c < d_qk; c += 32) q_s[warp * d_qk + c] = qrow[c];
    }
    float m = -INFINITY;
    float l = 0.0f;
    float acc[kDvPerLane];
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) acc[t] = 0.0f;

    for (int j0 = 0; j0 < a.top_k; j0 += kMlaKeys) {
        __syncthreads();  // previous tile consumed (and q_s written, on the first pass)
        const int n_tile = min(kMlaKeys, a.top_k - j0);
        int my_slot = -1;
        if (threadIdx.x < kMlaKeys && static_cast<int>(threadIdx.x) < n_tile) {
            const int s = idx[j0 + static_cast<int>(threadIdx.x)];
            my_slot = (s >= 0 && s < a.n_slots) ? s : -1;
        }
        if (threadIdx.x < kMlaKeys) slot_s[threadIdx.x] = my_slot;
        if (!__syncthreads_or(my_slot >= 0)) continue;  // block-uniform: no valid entry in this tile
        for (int i = static_cast<int>(threadIdx.x); i < kMlaKeys * d_qk; i += kMlaWarps * 32) {
            const int key = i / d_qk;
            const int c = i % d_qk;
            const int s = slot_s[key];
            k_s[key * k_pitch + c] = s >= 0 ? a.kv[static_cast<int64_t>(s) * a.kv0 + c] : 0.0f;
        }
        for (int i = static_cast<int>(threadIdx.x); i < kMlaKeys * d_v; i += kMlaWarps * 32) {
            const int key = i / d_v;
            const int c = i % d_v;
            const int s = slot_s[key];
            v_s[key * d_v + c] = s >= 0 ? a.v[static_cast<int64_t>(s) * a.v0 + c] : 0.0f;
        }
        __syncthreads();
        if (!head_ok) continue;  // warp-uniform; the barriers above still see every thread

        const bool valid = slot_s[lane] >= 0;
        float score = -INFINITY;
        if (valid) {
            const float* qv = q_s + warp * d_qk;
            const float* kv = k_s + lane * k_pitch;
            float dot = 0.0f;
            for (int c = 0; c < d_qk; ++c) dot = fmaf(qv[c], kv[c], dot);
            score = dot * a.scale;
        }
        const float m_new = fmaxf(m, warp_reduce_max(score));  // finite: the tile has a valid entry
        const float p = valid ? expf(score - m_new) : 0.0f;
        const float corr = expf(m - m_new);  // 0 on the first valid tile (m = -inf)
        l = l * corr + warp_reduce_sum(p);
#pragma unroll
        for (int t = 0; t < kDvPerLane; ++t) acc[t] *= corr;
        for (int jj = 0; jj < n_tile; ++jj) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            if (pj == 0.0f) continue;  // warp-uniform (pj is broadcast)
            const float* vrow = v_s + jj * d_v;
#pragma unroll
            for (int t = 0; t < kDvPerLane; ++t) {
                const int c = lane + 32 * t;
                if (c < d_v) acc[t] = fmaf(pj, vrow[c], acc[t]);
            }
        }
        m = m_new;
    }

    if (!head_ok) return;
    float* orow = a.out + r * a.o0 + static_cast<int64_t>(h) * a.o1;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < d_v) orow[c] = acc[t] * inv;
    }
    if (lane == 0) a.lse[r * a.l0 + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <int kDvPerLane>
void launch_mla(const MlaArgs& args, cudaStream_t stream) {
    const size_t smem = sizeof(float) * (static_cast<size_t>(kMlaWarps) * static_cast<size_t>(args.d_qk) +
                                         static_cast<size_t>(kMlaKeys) * static_cast<size_t>(args.d_qk + 1) +
                                         static_cast<size_t>(kMlaKeys) * static_cast<size_t>(args.d_v));
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(sparse_mla_attention_kernel<kDvPerLane>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const dim3 grid(static_cast<unsigned>(args.n_rows),
                    static_cast<unsigned>((args.n_heads + kMlaWarps - 1) / kMlaWarps));
    sparse_mla_attention_kernel<kDvPerLane><<<grid, kMlaWarps * 32, smem, stream>>>(args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void dsa_indexer_logits(const kernels::DsaIndexerLogitsParams& p, IndexerVariant variant, void* stream) {
    const char* op = "dsa_indexer_logits";
    PENSTOCK_CHECK_EQ(p.q.ndim, 3) << op << ": q " << p.q.shape_string();
    const bool fp8 = p.q.dtype == DType::kF8E4M3;
    PENSTOCK_CHECK(p.q.dtype == DType::kF32 || fp8) << op << ": q must be f32 or f8e4m3";
    const int64_t n_rows = p.q.size(0), n_heads = p.q.size(1), head_dim = p.q.size(2);
    const int64_t n_keys = p.k.size(0);
    check_view(p.q, 3, p.q.dtype, op, "q");
    check_view(p.k, 2, p.q.dtype, op, "k");
    check_view(p.weights, 2, DType::kF32, op, "weights");
    check_view(p.logits, 2, DType::kF32, op, "logits");
    PENSTOCK_CHECK(p.k.size(1) == head_dim && p.weights.size(0) == n_rows && p.weights.size(1) == n_heads &&
                   p.logits.size(0) == n_rows && p.logits.size(1) == n_keys)
        << op << ": shapes q " << p.q.shape_string() << " k " << p.k.shape_string() << " weights "
        << p.weights.shape_string() << " logits " << p.logits.shape_string();
    if (fp8) {
        check_view(p.q_scale, 2, DType::kF32, op, "q_scale");
        check_on_gpu(p.k_scale, op, "k_scale");
        PENSTOCK_CHECK(p.k_scale.ndim == 1 && p.k_scale.dtype == DType::kF32 && p.k_scale.size(0) == n_keys)
            << op << ": k_scale [n_keys] f32, got " << p.k_scale.shape_string();
        PENSTOCK_CHECK(p.q_scale.size(0) == n_rows && p.q_scale.size(1) == n_heads) << op << ": q_scale shape";
    } else {
        PENSTOCK_CHECK(p.q_scale.data == nullptr && p.k_scale.data == nullptr) << op << ": scales are for fp8 only";
    }
    if (p.q_pos.data != nullptr) {
        check_on_gpu(p.q_pos, op, "q_pos");
        PENSTOCK_CHECK(p.q_pos.ndim == 1 && p.q_pos.dtype == DType::kI32 && p.q_pos.size(0) == n_rows)
            << op << ": q_pos [n_rows] i32, got " << p.q_pos.shape_string();
    }
    PENSTOCK_CHECK(head_dim >= 1 && head_dim <= 256) << op << ": head_dim " << head_dim << " (1..256)";
    PENSTOCK_CHECK(n_rows < (int64_t{1} << 31) && n_keys < (int64_t{1} << 31)) << op << ": sizes";
    if (n_rows == 0 || n_keys == 0) return;
    PENSTOCK_CHECK(!fp8 || (variant != IndexerVariant::kMmaTf32 && variant != IndexerVariant::kF32Tiled &&
                            variant != IndexerVariant::kWgmmaTf32 && variant != IndexerVariant::kWgmmaF16x3))
        << op << ": the tf32 and tiled f32 variants are for f32 q / k";
    const bool wgmma_ok = dsa_indexer_wgmma_supported(p);
    PENSTOCK_CHECK((variant != IndexerVariant::kWgmma && variant != IndexerVariant::kWgmmaFp8) || wgmma_ok)
        << op
        << ": the wgmma variant needs an sm_90 device, fp8, head_dim 128, 32 or 64 heads and 16-byte aligned "
           "q / k bases and strides";
    if (wgmma_ok && variant != IndexerVariant::kCudaCore && variant != IndexerVariant::kMma) {
        // Both kernels free-run their consumers: e4m3 accumulation 1-3% faster than the ping-pong at 4K-64K
        // (2026-12-02-s16); f16, with the per-lane row sums (2026-12-02-s17), +0.5% at 4K, +5% at 16K, -0.6% at 64K.
        const bool fp8_acc =
            variant == IndexerVariant::kWgmmaFp8 || (variant == IndexerVariant::kAuto && p.fp8_accumulate);
        const WgmmaIndexerOptions options{.fp8_accumulate = fp8_acc};  // the defaults: free-running consumers
        dsa_indexer_logits_wgmma(p, options, stream);
        return;
    }
    IndexerArgs a{};
    a.logits = p.logits.ptr<float>();
    a.q = p.q.data;
    a.k = p.k.data;
    a.weights = p.weights.ptr<const float>();
    a.q_scale = fp8 ? p.q_scale.ptr<const float>() : nullptr;
    a.k_scale = fp8 ? p.k_scale.ptr<const float>() : nullptr;
    a.q_pos = p.q_pos.data != nullptr ? p.q_pos.ptr<const int32_t>() : nullptr;
    a.lg0 = p.logits.stride(0);
    a.q0 = p.q.stride(0);
    a.q1 = p.q.stride(1);
    a.k0 = p.k.stride(0);
    a.w0 = p.weights.stride(0);
    a.qs0 = fp8 ? p.q_scale.stride(0) : 0;
    a.qs1 = fp8 ? p.q_scale.stride(1) : 0;
    a.ks0 = fp8 ? p.k_scale.stride(0) : 0;
    a.qp0 = p.q_pos.data != nullptr ? p.q_pos.stride(0) : 0;
    a.n_rows = static_cast<int>(n_rows);
    a.n_heads = static_cast<int>(n_heads);
    a.head_dim = static_cast<int>(head_dim);
    a.n_keys = static_cast<int>(n_keys);
    a.scale = p.scale;
    const auto s = static_cast<cudaStream_t>(stream);
    const bool mma_ok = dsa_indexer_mma_supported(p);
    PENSTOCK_CHECK(variant != IndexerVariant::kMma || mma_ok) << op
                                                              << ": the mma variant needs fp8, head_dim % 32 == 0 "
                                                                 "(<= 128) and 4-byte aligned q / k rows";
    if (mma_ok && (variant == IndexerVariant::kAuto || variant == IndexerVariant::kMma)) {
        const dim3 grid(
            static_cast<unsigned>((n_keys + kMmaWarps * kMmaKeysPerWarp - 1) / (kMmaWarps * kMmaKeysPerWarp)),
            static_cast<unsigned>((n_rows + kMmaRows - 1) / kMmaRows));
        PENSTOCK_CHECK_LE(grid.y, 65535u) << op << ": too many rows for one call";
        dsa_indexer_logits_mma_kernel<<<grid, kMmaWarps * 32, 0, s>>>(a);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    PENSTOCK_CHECK(variant != IndexerVariant::kMmaTf32 || dsa_indexer_tf32_supported(p))
        << op
        << ": the tf32 variant needs f32 q / k, 32 or 64 heads, head_dim a power of two in 8..128 and 16-byte "
           "aligned q / k rows";
    PENSTOCK_CHECK(variant != IndexerVariant::kF32Tiled || dsa_indexer_f32_tiled_supported(p))
        << op << ": the tiled f32 variant needs f32 q / k, head_dim % 4 == 0 (<= 128) and 16-byte aligned q / k rows";
    PENSTOCK_CHECK(variant != IndexerVariant::kWgmmaTf32 || dsa_indexer_wgmma_tf32_supported(p))
        << op
        << ": the tf32 wgmma variant needs an sm_90 device, f32 q / k, head_dim 128, 32 or 64 heads, contiguous "
           "16-byte aligned rows";
    PENSTOCK_CHECK(variant != IndexerVariant::kWgmmaF16x3 || dsa_indexer_wgmma_tf32_supported(p))
        << op
        << ": the f16 wgmma variant needs an sm_90 device, f32 q / k, head_dim 128, 32 or 64 heads, contiguous "
           "16-byte aligned rows";
    if (variant == IndexerVariant::kWgmmaTf32 || variant == IndexerVariant::kWgmmaF16x3 ||
        (variant == IndexerVariant::kAuto && dsa_indexer_wgmma_tf32_supported(p))) {
        // kAuto: the f16 form, 1.20x the tf32 one and closer to the reference (docs/perf/2026-12-05-s36.md).
        dsa_indexer_logits_wgmma_tf32(p, variant != IndexerVariant::kWgmmaTf32, stream);
        return;
    }
    // kAuto takes the mma.sync TF32 kernel only where its one-block-per-row-group grid fills the GPU twice over (it
    // walks all of a row group's keys in one block; the tiled kernel also splits the keys, for calls of few rows).
    const int t32_rows = n_heads == 32 ? 4 : 2;
    if (variant == IndexerVariant::kMmaTf32 ||
        (!fp8 && variant == IndexerVariant::kAuto && dsa_indexer_tf32_supported(p) &&
         (n_rows + t32_rows - 1) / t32_rows >= 2 * static_cast<int64_t>(current_device_sms()))) {
        const size_t smem = tf32_indexer_smem_bytes(head_dim);
        const auto kernel = n_heads == 32 ? dsa_indexer_logits_tf32_kernel<4> : dsa_indexer_logits_tf32_kernel<2>;
        PENSTOCK_CHECK_LE((n_rows + t32_rows - 1) / t32_rows, int64_t{0x7fffffff}) << op << ": too many rows";
        PENSTOCK_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        kernel<<<static_cast<unsigned>((n_rows + t32_rows - 1) / t32_rows), kT32Warps * 32, smem, s>>>(a);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    if (!fp8 && (variant == IndexerVariant::kAuto || variant == IndexerVariant::kF32Tiled) &&
        dsa_indexer_f32_tiled_supported(p)) {
        const size_t tsmem = f32_tiled_smem_bytes(head_dim);
        const dim3 tgrid(static_cast<unsigned>((n_keys + kTileKeys - 1) / kTileKeys),
                         static_cast<unsigned>((n_rows + kTileRows - 1) / kTileRows));
        PENSTOCK_CHECK_LE(tgrid.y, 65535u) << op << ": too many rows for one call";
        const auto kernel = head_dim == 128  ? dsa_indexer_logits_f32_tiled_kernel<128>
                            : head_dim == 64 ? dsa_indexer_logits_f32_tiled_kernel<64>
                                             : dsa_indexer_logits_f32_tiled_kernel<0>;
        PENSTOCK_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(tsmem)));
        kernel<<<tgrid, kTileThreads, tsmem, s>>>(a);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    const size_t smem = sizeof(float) * (static_cast<size_t>(kKeysT) * static_cast<size_t>(head_dim + 1) +
                                         static_cast<size_t>(kRowsT) * static_cast<size_t>(head_dim) + kRowsT);
    const dim3 grid(static_cast<unsigned>((n_keys + kKeysT - 1) / kKeysT),
                    static_cast<unsigned>((n_rows + kRowsT - 1) / kRowsT));
    PENSTOCK_CHECK_LE(grid.y, 65535u) << op << ": too many rows for one call";
    if (fp8) {
        PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(dsa_indexer_logits_kernel<true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        dsa_indexer_logits_kernel<true><<<grid, kIdxThreads, smem, s>>>(a);
    } else {
        PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(dsa_indexer_logits_kernel<false>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        dsa_indexer_logits_kernel<false><<<grid, kIdxThreads, smem, s>>>(a);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void dsa_indexer_logits(const kernels::DsaIndexerLogitsParams& p, void* stream) {
    dsa_indexer_logits(p, IndexerVariant::kAuto, stream);
}

bool dsa_indexer_f32_tiled_supported(const kernels::DsaIndexerLogitsParams& p) {
    if (p.q.dtype != DType::kF32 || p.k.dtype != DType::kF32 || p.q.ndim != 3 || p.k.ndim != 2) return false;
    const int64_t d = p.q.size(2);
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    return d % 4 == 0 && d >= 4 && d <= kTileMaxDim && aligned(p.q.data) && aligned(p.k.data) &&
           p.q.stride(0) % 4 == 0 && p.q.stride(1) % 4 == 0 && (p.k.size(0) <= 1 || p.k.stride(0) % 4 == 0);
}

bool dsa_indexer_tf32_supported(const kernels::DsaIndexerLogitsParams& p) {
    if (!dsa_indexer_f32_tiled_supported(p)) return false;
    const int64_t heads = p.q.size(1), d = p.q.size(2);
    return (heads == 32 || heads == 64) && d >= 8 && (d & (d - 1)) == 0;
}

bool dsa_indexer_mma_supported(const kernels::DsaIndexerLogitsParams& p) {
    if (p.q.dtype != DType::kF8E4M3 || p.q.ndim != 3 || p.k.ndim != 2) return false;
    const int64_t d = p.q.size(2);
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 == 0; };
    return d % 32 == 0 && d <= 32 * kMmaMaxSteps && aligned(p.q.data) && aligned(p.k.data) && p.q.stride(0) % 4 == 0 &&
           p.q.stride(1) % 4 == 0 && p.k.stride(0) % 4 == 0;
}

void dsa_quantize_fp8(const kernels::DsaQuantizeFp8Params& p, void* stream) {
    const char* op = "dsa_quantize_fp8";
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << op << ": in " << p.in.shape_string();
    const int64_t n_rows = p.in.size(0), dim = p.in.size(1);
    check_view(p.in, 2, DType::kF32, op, "in");
    check_view(p.out, 2, DType::kF8E4M3, op, "out");
    check_on_gpu(p.scale, op, "scale");
    PENSTOCK_CHECK(p.out.size(0) == n_rows && p.out.size(1) == dim) << op << ": out " << p.out.shape_string();
    PENSTOCK_CHECK(p.scale.ndim == 1 && p.scale.size(0) == n_rows && p.scale.dtype == DType::kF32)
        << op << ": scale [n_rows] f32, got " << p.scale.shape_string();
    PENSTOCK_CHECK(!p.rotate || (dim > 0 && (dim & (dim - 1)) == 0)) << op << ": Hadamard needs a power-of-two dim";
    PENSTOCK_CHECK(dim <= 12288) << op << ": dim " << dim << " (the row is staged in 48 KiB of shared memory)";
    PENSTOCK_CHECK_LT(n_rows, int64_t{1} << 31) << op;
    if (n_rows == 0 || dim == 0) return;
    const float norm = 1.0f / std::sqrt(static_cast<float>(dim));  // the reference's host-side value
    const auto addr = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
    if (dim == 128 && addr(p.in.data) % 16 == 0 && p.in.stride(0) % 4 == 0 && addr(p.out.data) % 4 == 0 &&
        p.out.stride(0) % 4 == 0) {
        constexpr int64_t kRowsPerBlock = kQuant128Warps * kQuant128RowsPerWarp;
        const int64_t blocks128 =
            std::min<int64_t>((n_rows + kRowsPerBlock - 1) / kRowsPerBlock, int64_t{current_device_sms()} * 16);
        const bool store16 = addr(p.out.data) % 16 == 0 && p.out.stride(0) % 16 == 0;
        dsa_quantize_fp8_128_kernel<<<static_cast<unsigned>(blocks128), kQuant128Warps * 32, 0,
                                      static_cast<cudaStream_t>(stream)>>>(
            p.out.ptr<uint8_t>(), p.scale.ptr<float>(), p.in.ptr<const float>(), p.out.stride(0), p.scale.stride(0),
            p.in.stride(0), static_cast<int>(n_rows), p.rotate, p.ue8m0, norm, store16);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    const int64_t blocks = n_rows < 65536 ? n_rows : 65536;
    dsa_quantize_fp8_kernel<<<static_cast<unsigned>(blocks), kQuantThreads, sizeof(float) * static_cast<size_t>(dim),
                              static_cast<cudaStream_t>(stream)>>>(
        p.out.ptr<uint8_t>(), p.scale.ptr<float>(), p.in.ptr<const float>(), p.out.stride(0), p.scale.stride(0),
        p.in.stride(0), static_cast<int>(n_rows), static_cast<int>(dim), p.rotate, p.ue8m0, norm);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void sparse_mla_attention(const kernels::SparseMlaAttentionParams& p, void* stream) {
    const char* op = "sparse_mla_attention";
    if (p.q.dtype == DType::kBF16) {  // bf16: the tensor-core kernel (mla_tc.cu); f32 stays on the kernel below
        mla_tc_sparse_attention(p, stream);
        return;
    }
    PENSTOCK_CHECK_EQ(p.q.ndim, 3) << op << ": q " << p.q.shape_string();
    const int64_t n_rows = p.q.size(0), n_heads = p.q.size(1), d_qk = p.q.size(2);
    const int64_t n_slots = p.kv.size(0), d_v = p.v.size(1);
    check_view(p.q, 3, DType::kF32, op, "q");
    check_view(p.kv, 2, DType::kF32, op, "kv");
    check_view(p.v, 2, DType::kF32, op, "v");
    check_view(p.out, 3, DType::kF32, op, "out");
    check_view(p.lse, 2, DType::kF32, op, "lse");
    check_view(p.indices, 2, DType::kI32, op, "indices");
    PENSTOCK_CHECK(p.kv.size(1) == d_qk && p.v.size(0) == n_slots) << op << ": kv / v shapes";
    PENSTOCK_CHECK(p.out.size(0) == n_rows && p.out.size(1) == n_heads && p.out.size(2) == d_v)
        << op << ": out " << p.out.shape_string();
    PENSTOCK_CHECK(p.lse.size(0) == n_rows && p.lse.size(1) == n_heads && (p.lse.stride(1) == 1 || n_heads <= 1))
        << op << ": lse " << p.lse.shape_string();
    PENSTOCK_CHECK_EQ(p.indices.size(0), n_rows) << op << ": indices";
    PENSTOCK_CHECK(d_qk >= 1 && d_qk <= kMlaMaxDqk) << op << ": d_qk " << d_qk;
    PENSTOCK_CHECK(d_v >= 1 && d_v <= kMlaMaxDv) << op << ": d_v " << d_v;
    PENSTOCK_CHECK(n_rows < (int64_t{1} << 31) && n_slots < (int64_t{1} << 31)) << op << ": sizes";
    PENSTOCK_CHECK_LE((n_heads + kMlaWarps - 1) / kMlaWarps, 65535) << op << ": n_heads";
    if (n_rows == 0 || n_heads == 0) return;
    MlaArgs a{};
    a.out = p.out.ptr<float>();
    a.lse = p.lse.ptr<float>();
    a.q = p.q.ptr<const float>();
    a.kv = p.kv.ptr<const float>();
    a.v = p.v.ptr<const float>();
    a.indices = p.indices.ptr<const int32_t>();
    a.o0 = p.out.stride(0);
    a.o1 = p.out.stride(1);
    a.l0 = p.lse.stride(0);
    a.q0 = p.q.stride(0);
    a.q1 = p.q.stride(1);
    a.kv0 = p.kv.stride(0);
    a.v0 = p.v.stride(0);
    a.i0 = p.indices.stride(0);
    a.n_rows = static_cast<int>(n_rows);
    a.n_heads = static_cast<int>(n_heads);
    a.d_qk = static_cast<int>(d_qk);
    a.d_v = static_cast<int>(d_v);
    a.top_k = static_cast<int>(p.indices.size(1));
    a.n_slots = static_cast<int>(n_slots);
    a.scale = p.scale;
    const auto s = static_cast<cudaStream_t>(stream);
    if (d_v <= 128) {
        launch_mla<4>(a, s);
    } else if (d_v <= 256) {
        launch_mla<8>(a, s);
    } else {
        launch_mla<16>(a, s);
    }
}

}  // namespace penstock::cuda
