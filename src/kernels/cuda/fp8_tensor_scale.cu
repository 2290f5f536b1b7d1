// Per-tensor FP8 quantise / dequantise on the GPU (kernels/ops.h Fp8TensorScaleParams), bit-exact with
// ref::fp8_quantize_tensor / ref::fp8_dequantize_tensor. A view is walked as [d0, d1, d2] rows of d2 contiguous
// elements (leading dims of size 1 added); thread t of the grid takes packs t, t + grid, ... of V elements (16-byte
// loads of the wider side when every row start is aligned, else V = 1; rows found with at most one 32-bit division,
// pack_offset).
//   quantize: (1) memset of a scratch amax word; (2) a grid-stride max of |x| per thread, block max, one atomicMax
//   per block on the float's bits (non-negative floats order like their bit patterns; a NaN's pattern is above +inf's,
//   so a NaN wins, as in the reference); (3) the cast: every thread derives s = amax / 448 (1 for amax 0) and
//   inv = 1 / s with IEEE division, writes e4m3(x * inv) by the hardware e4m3x2 cast (fp8.cuh e4m3x4_finite: equal
//   to the integer routine for these quotients; the integer routine when the amax or inv is not finite, 0x7f for
//   NaN), and block 0 writes scale[0] = s. The amax word is
//   separate from `scale` so the cast's readers never race its writer. dequantize: e4m3_to_f32_exact(q) * scale[0],
//   rounded once to the output dtype. fp8_cast_scaled (cuda_ops.h, FP8 attention's fallback): e4m3(x * mult[0]) with
//   the caller's device multiplier.
// fp8_quantize_heads (bit-exact with ref::fp8_quantize_heads): one unit = a block of rows of one head; block 1 takes a
// group of lanes per unit (a power of two holding the row in <= 4 packs per lane: 8 lanes for a 192-wide bf16 row,
// 4 units per warp; row_quant_kernel), a longer block a CTA (block_quant_kernel: a group of lanes per row, 3 or 4
// packs per lane, each row at its own base address, the block held in registers; head_quant_kernel's general walk
// for the other shapes). The unit's threads read its packs (V elements of [in ; in_tail], walked
// without a division per pack) into registers for the max |x| (shuffles, then shared memory across a CTA's warps;
// NaN wins as above) and cast them with inv = 1 / s by the hardware e4m3x2 cast (the quotients are <= 448.0001, where
// it equals the software rounding): one read per element (a unit too large for the registers, > 4 packs per lane or
// 16 per thread of a CTA, reads them again, from L1 / L2). The per-tensor cast takes the hardware cast too (its
// quotients are bounded the same way). Both take the software rounding instead for a unit (or tensor) whose amax or
// 1 / s is not finite, and fp8_cast_scaled's caller-given multiplier always does. Blocks of a sequence are found
// without a prefix sum: unit x of the grid belongs to the last sequence s with cu[s] / block + s
// <= x (binary search), as block x - cu[s] / block - s of it; such a base grows by at least the sequence's block count,
// so at most n / block + n_seqs units cover every block and the surplus ones (past their sequence's rows) return at
// once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/vec.cuh"

namespace penstock::cuda {

namespace {

constexpr int kThreads = 256;

// A view as [d0, d1, d2] with row strides (elements); d2 contiguous.
struct Rows3 {
    int64_t d0 = 1, d1 = 1, d2 = 1;
    int64_t s0 = 0, s1 = 0;  // strides of dims 0 and 1
};

Rows3 rows_of(const TensorView& v) {
    Rows3 r;
    const auto dim = [&](int back) { return static_cast<size_t>(v.ndim - back); };  // back <= ndim checked below
    if (v.ndim < 1 || v.ndim > 3) return r;
    r.d2 = v.shape[dim(1)];
    if (v.ndim >= 2) {
        r.d1 = v.shape[dim(2)];
        r.s1 = v.strides[dim(2)];
    }
    if (v.ndim >= 3) {
        r.d0 = v.shape[dim(3)];
        r.s0 = v.strides[dim(3)];
    }
    return r;
}

// Element offset of pack p (V elements along d2; d2 % V == 0). Views whose dims 0 and 1 collapse (s0 == d1 * s1: every
// view FP8 attention passes) are rows of stride s1: one 32-bit division per pack (or none when the rows are packed,
// s1 == d2); anything else takes the general 64-bit walk.
template <int V>
__device__ __forceinline__ int64_t pack_offset(int64_t p, const Rows3& r) {
    if (r.s0 == r.d1 * r.s1 || r.d0 == 1) {
        if (r.s1 == r.d2 || r.d0 * r.d1 == 1) return p * V;
        const auto per_row = static_cast<uint32_t>(r.d2 / V);
        if (p < (int64_t{1} << 32)) {
            const auto pu = static_cast<uint32_t>(p);
            const uint32_t row = pu / per_row;
            return static_cast<int64_t>(row) * r.s1 + static_cast<int64_t>(pu - row * per_row) * V;
        }
    }
    const int64_t per_row = r.d2 / V;
    const int64_t row = p / per_row;
    const int64_t col = (p - row * per_row) * V;
    const int64_t i = row / r.d1;
    return i * r.s0 + (row - i * r.d1) * r.s1 + col;
}

__device__ __forceinline__ float abs_max_bits_merge(float a, float b) {
    // max on the bit patterns of non-negative floats: NaN (0x7fc...) beats +inf (0x7f800000), like the reference.
    return __uint_as_float(max(__float_as_uint(a), __float_as_uint(b)));
}

// The unsigned word type of B bytes (a pack's raw form).
template <int B>
struct RawWords;
template <>
struct RawWords<2> {
    using type = uint16_t;
};
template <>
struct RawWords<4> {
    using type = uint32_t;
};
template <>
struct RawWords<8> {
    using type = uint2;
};
template <>
struct RawWords<16> {
    using type = uint4;
};

// Stores the e4m3 bytes of x * m for one pack at dst (V-byte aligned). finite (the quantisers' promise for a unit, or
// a tensor, whose amax and m = 1 / s are finite: no quotient is NaN and each is <= 448.0001): the hardware cast, four
// values per e4m3x4_finite; otherwise (an infinity or a NaN in the unit, 1 / s overflowed, or fp8_cast_scaled's
// caller-given multiplier) the software rounding, NaN -> 0x7f, as the reference. Every quantiser of this file casts its
// packs here. Both branches make whole 32-bit words and one V-byte store writes them: a byte array merged from the two
// was split into bytes and joined again by NVVM (a pack of 8 stored as four 2-byte halves).
template <class In, int V>
__device__ __forceinline__ void store_e4m3_pack(uint8_t* dst, Pack<In, V> x, float m, bool finite) {
    auto soft = [&](int j) {
        const float y = __fmul_rn(to_f32(x.v[j]), m);
        return isnan(y) ? uint8_t{0x7f} : float_to_e4m3(y);
    };
    if constexpr (V % 4 == 0) {
        uint32_t wq[V / 4];
        if (finite) {
#pragma unroll
            for (int i = 0; i < V / 4; ++i) {
                wq[i] = e4m3x4_finite(__fmul_rn(to_f32(x.v[4 * i]), m), __fmul_rn(to_f32(x.v[4 * i + 1]), m),
                                      __fmul_rn(to_f32(x.v[4 * i + 2]), m), __fmul_rn(to_f32(x.v[4 * i + 3]), m));
            }
        } else {
#pragma unroll
            for (int i = 0; i < V / 4; ++i) {
                wq[i] = static_cast<uint32_t>(soft(4 * i)) | static_cast<uint32_t>(soft(4 * i + 1)) << 8 |
                        static_cast<uint32_t>(soft(4 * i + 2)) << 16 | static_cast<uint32_t>(soft(4 * i + 3)) << 24;
            }
        }
        using W = typename RawWords<V>::type;
        W w;
        static_assert(sizeof(w) == sizeof(wq), "V e4m3 bytes");
        memcpy(&w, wq, sizeof(w));
        *reinterpret_cast<W*>(dst) = w;
    } else {
        Pack<uint8_t, V> q;
#pragma unroll
        for (int j = 0; j < V; ++j) q.v[j] = soft(j);
        *reinterpret_cast<Pack<uint8_t, V>*>(dst) = q;
    }
}

template <class In, int V>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(unsigned* amax_bits, const In* __restrict__ in, Rows3 r, int64_t n_packs) {
    float m = 0.0f;
    for (int64_t p = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; p < n_packs;
         p += static_cast<int64_t>(gridDim.x) * kThreads) {
        const Pack<In, V> x = *reinterpret_cast<const Pack<In, V>*>(in + pack_offset<V>(p, r));
#pragma unroll
        for (int j = 0; j < V; ++j) m = abs_max_bits_merge(m, fabsf(to_f32(x.v[j])));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = abs_max_bits_merge(m, __shfl_xor_sync(0xffffffffu, m, o));
    __shared__ float warp_max[kThreads / 32];
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; ++w) m = abs_max_bits_merge(m, warp_max[w]);
        atomicMax(amax_bits, __float_as_uint(m));
    }
}

// out = e4m3(x * m), NaN -> 0x7f. kFromAmax (fp8_quantize_tensor): m = 1 / s with s derived from the amax word, and
// block 0 writes scale[0] = s; else (fp8_cast_scaled) m = mult[0].
template <class In, int V, bool kFromAmax>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(uint8_t* __restrict__ out, const In* __restrict__ in, const float* mult, const unsigned* amax_bits,
                float* scale, Rows3 ro, Rows3 ri, int64_t n_packs) {
    float m;
    bool finite = false;  // kFromAmax: the amax and m finite, so no quotient is NaN
    if constexpr (kFromAmax) {
        const float amax = __uint_as_float(*amax_bits);
        const float s = amax > 0.0f || isnan(amax) ? __fdiv_rn(amax, 448.0f) : 1.0f;
        m = __fdiv_rn(1.0f, s);
        finite = isfinite(amax) && isfinite(m);
        if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s;
    } else {
        m = *mult;
    }
    for (int64_t p = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; p < n_packs;
         p += static_cast<int64_t>(gridDim.x) * kThreads) {
        const Pack<In, V> x = *reinterpret_cast<const Pack<In, V>*>(in + pack_offset<V>(p, ri));
        store_e4m3_pack(out + pack_offset<V>(p, ro), x, m, finite);
    }
}

template <class Out, int V>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(Out* __restrict__ out, const uint8_t* __restrict__ in,
                                                              const float* scale, Rows3 ro, Rows3 ri, int64_t n_packs) {
    const float s = *scale;
    for (int64_t p = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; p < n_packs;
         p += static_cast<int64_t>(gridDim.x) * kThreads) {
        const Pack<uint8_t, V> q = *reinterpret_cast<const Pack<uint8_t, V>*>(in + pack_offset<V>(p, ri));
        Pack<Out, V> y;
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = from_f32<Out>(__fmul_rn(e4m3_to_f32_exact(q.v[j]), s));
        *reinterpret_cast<Pack<Out, V>*>(out + pack_offset<V>(p, ro)) = y;
    }
}

// Rows of `v` start on `bytes`-aligned addresses (so V-element packs of its element size are aligned).
bool rows_aligned(const TensorView& v, const Rows3& r, int64_t elem_bytes, int64_t bytes) {
    if (reinterpret_cast<uintptr_t>(v.data) % static_cast<uintptr_t>(bytes) != 0) return false;
    return (r.s0 * elem_bytes) % bytes == 0 && (r.s1 * elem_bytes) % bytes == 0;
}

void check_pair(const TensorView& out, const TensorView& in, const TensorView& scale, const char* op,
                bool with_scale = true) {
    check_on_gpu(out, op, "out");
    check_on_gpu(in, op, "in");
    if (with_scale) {
        check_on_gpu(scale, op, "scale");
        PENSTOCK_CHECK(scale.dtype == DType::kF32 && scale.numel() == 1 && scale.data != nullptr)
            << op << ": scale must be a [1] f32 tensor, got " << scale.shape_string();
    }
    PENSTOCK_CHECK(in.ndim >= 1 && in.ndim <= 3 && out.ndim == in.ndim) << op << ": 1- to 3-d views of one shape";
    for (int d = 0; d < in.ndim; ++d) {
        PENSTOCK_CHECK_EQ(out.size(d), in.size(d))
            << op << ": out " << out.shape_string() << " vs in " << in.shape_string();
    }
    const Rows3 ri = rows_of(in), ro = rows_of(out);
    const auto last = static_cast<size_t>(in.ndim - 1);
    PENSTOCK_CHECK((in.strides[last] == 1 || ri.d2 <= 1) && (out.strides[last] == 1 || ro.d2 <= 1))
        << op << ": last dims must be contiguous";
}

unsigned grid_for(int64_t n_packs) {
    const unsigned b = blocks_for(n_packs, kThreads);
    return b < 132u * 16u ? b : 132u * 16u;
}

// The e4m3 cast of `in` into `out` (cast_kernel); kFromAmax: the amax of `in` first (amax_kernel, into amax_bits).
template <class In, bool kFromAmax>
void cast_typed(const TensorView& out, const TensorView& in, const float* mult, unsigned* amax_bits, float* scale,
                cudaStream_t s) {
    const Rows3 ri = rows_of(in), ro = rows_of(out);
    constexpr int kV = 16 / static_cast<int>(sizeof(In));
    const bool vec = ri.d2 % kV == 0 && rows_aligned(in, ri, sizeof(In), 16) && rows_aligned(out, ro, 1, kV);
    const int64_t n = ri.d0 * ri.d1 * ri.d2;
    auto launch = [&](auto v_tag) {
        constexpr int V = decltype(v_tag)::value;
        const int64_t n_packs = n / V;
        const In* x = static_cast<const In*>(in.data);
        if constexpr (kFromAmax) {
            if (n_packs > 0) amax_kernel<In, V><<<grid_for(n_packs), kThreads, 0, s>>>(amax_bits, x, ri, n_packs);
            PENSTOCK_CUDA_LAUNCH_CHECK();
        } else if (n_packs == 0) {
            return;
        }
        // (kFromAmax launches even with no packs: block 0 still writes the scale.)
        cast_kernel<In, V, kFromAmax><<<grid_for(n_packs), kThreads, 0, s>>>(static_cast<uint8_t*>(out.data), x, mult,
                                                                           amax_bits, scale, ro, ri, n_packs);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    };
    if (vec) {
        launch(std::integral_constant<int, kV>{});
    } else {
        launch(std::integral_constant<int, 1>{});
    }
}

template <class Out>
void dequantize_typed(const kernels::Fp8TensorScaleParams& p, cudaStream_t s) {
    const Rows3 ri = rows_of(p.in), ro = rows_of(p.out);
    constexpr int kV = 8;
    const bool vec = ri.d2 % kV == 0 && rows_aligned(p.in, ri, 1, kV) &&
                     rows_aligned(p.out, ro, sizeof(Out), std::min<int64_t>(16, kV * sizeof(Out)));
    const int64_t n = ri.d0 * ri.d1 * ri.d2;
    auto launch = [&](auto v_tag) {
        constexpr int V = decltype(v_tag)::value;
        const int64_t n_packs = n / V;
        if (n_packs == 0) return;
        dequantize_kernel<Out, V><<<grid_for(n_packs), kThreads, 0, s>>>(
            static_cast<Out*>(p.out.data), static_cast<const uint8_t*>(p.in.data),
            static_cast<const float*>(p.scale.data), ro, ri, n_packs);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    };
    if (vec) {
        launch(std::integral_constant<int, kV>{});
    } else {
        launch(std::integral_constant<int, 1>{});
    }
}

struct HeadQuantArgs {
    int64_t n, h, d, dt;  // rows, heads, in's and in_tail's last dims
    int64_t s0, s1;       // in's row / head strides (elements)
    int64_t t0, t1;       // in_tail's
    int64_t o0, o1;       // out's
    int64_t c0, c1;       // scale's
    const int32_t* cu;    // null: one sequence of n rows
    int n_seqs, block;
    // Fp8HeadQuantParams::rope (kRope): row r's (cos, sin) * attention_factor of pair i at rope_cs[r * rope_half + i]
    // (rope_table_kernel), the rope columns [rope_col, rope_col + 2 * rope_half) of in.
    const float2* rope_cs;
    int rope_col, rope_half;
    bool rope_interleaved;
};

// RoPE's (cos, sin) * attention_factor of every row and pair (rope.cuh, as kernels::rope computes them), for the
// quantiser's fused RoPE: [n, half] float2, read from L2 by the heads of a row.
__global__ void __launch_bounds__(kThreads)
    rope_table_kernel(float2* tab, const int32_t* positions, const float* inv_freq, int64_t n, int half,
                      float attention_factor) {
    for (int64_t x = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; x < n * half;
         x += static_cast<int64_t>(gridDim.x) * kThreads) {
        const int64_t r = x / half;
        const int i = static_cast<int>(x - r * half);
        tab[x] = rope_math::cos_sin(positions[r], inv_freq[i], attention_factor);
    }
}

// A pack of V elements of In as the raw words it travels in until used: a pack of 16-bit elements held as such would be
// split into halves (PRMT) right where its load's branches join, which waits for the load.
template <class In, int V>
using RawPack = typename RawWords<sizeof(Pack<In, V>)>::type;

template <class In, int V>
__device__ __forceinline__ Pack<In, V> unpack_raw(RawPack<In, V> r) {
    Pack<In, V> x;
    memcpy(&x, &r, sizeof(x));
    return x;
}

// max(m, the largest |x| of a raw pack), NaN winning (abs_max_bits_merge). bf16 packs stay in their 32-bit words: |x|
// per half-word by a mask and the maximum per half-word (__vmaxu2: the order of the bit patterns). Working on unpacked
// halves kept both forms live between the maximum and the cast: 169 registers in head_quant_kernel, one CTA per SM.
// The pack is taken by value: through a const reference the quantisers' registers grew (row_quant_kernel 40 -> 50,
// block_quant_kernel 79 -> 120, ptxas -v), and the per-row q quantiser ran 3% slower (docs/perf/2026-12-04-s31.md).
template <class In, int V>
__device__ __forceinline__ float raw_abs_max(float m, RawPack<In, V> r) {
    if constexpr (std::is_same_v<In, __nv_bfloat16> && V % 2 == 0) {
        constexpr int kNumWords = sizeof(r) / 4;
        uint32_t wd[kNumWords];
        memcpy(wd, &r, sizeof(wd));
        uint32_t acc = 0;
#pragma unroll
        for (int i = 0; i < kNumWords; ++i) acc = __vmaxu2(acc, wd[i] & 0x7fff7fffu);
        return abs_max_bits_merge(m, __uint_as_float(max(acc & 0xffffu, acc >> 16) << 16));
    } else {
        const Pack<In, V> x = unpack_raw<In, V>(r);
#pragma unroll
        for (int j = 0; j < V; ++j) m = abs_max_bits_merge(m, fabsf(to_f32(x.v[j])));
        return m;
    }
}

// A unit's packs, i = lane, lane + width, ... of n_packs, walked as (row, pack column) with no division per step.
struct PackWalk {
    int row, col;      // of the current pack, row relative to the unit's first row
    int d_row, d_col;  // the step of width packs: width = d_row * per_row + d_col
    int per_row;
    __device__ __forceinline__ PackWalk(int lane, int width, int per_row_)
        : row(lane / per_row_),
          col(lane % per_row_),
          d_row(width / per_row_),
          d_col(width % per_row_),
          per_row(per_row_) {}
    __device__ __forceinline__ void next() {
        row += d_row;
        col += d_col;
        if (col >= per_row) {
            col -= per_row;
            ++row;
        }
    }
};

// The unit (block of rows, head) of CTA `flat` of a per-block grid: its first row r0, head and row count. Head fastest,
// so that the CTAs resident together read whole rows (all heads of a few blocks), not one head's slice of every row.
// False for a surplus unit past its sequence's rows (see the header: the grid has n / block + n_seqs units per head).
__device__ __forceinline__ bool block_unit(const HeadQuantArgs& a, int64_t flat, int64_t& r0, int64_t& head,
                                           int& rows) {
    int64_t x = flat / a.h, base = 0, end = a.n;
    head = flat - x * a.h;
    if (a.cu != nullptr) {
        int lo = 0, hi = a.n_seqs - 1;  // the last s with cu[s] / block + s <= x
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (__ldg(a.cu + mid) / a.block + mid <= x) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        base = __ldg(a.cu + lo);
        end = __ldg(a.cu + lo + 1);
        x -= base / a.block + lo;
    }
    r0 = base + x * a.block;
    if (r0 >= end) return false;
    rows = static_cast<int>(min(end - r0, static_cast<int64_t>(a.block)));
    return true;
}

// kHeld: packs a thread keeps in registers between the max and the cast; a unit with more packs than kHeld times its
// group's threads reads them again in the cast (from L1 / L2). kLaneGroups (block 1): a unit = (row, head) per group
// of `group` lanes (a power of two up to 32, picked on the host so that a row's packs fill about kHeld per lane),
// 32 / group units per warp; else a unit = (block, head) per CTA.
template <class In, int V, bool kLaneGroups, int kHeld>
__global__ void __launch_bounds__(kThreads)
    head_quant_kernel(uint8_t* __restrict__ out, float* __restrict__ scale, const In* __restrict__ in,
                      const In* __restrict__ tail, HeadQuantArgs a, int group) {
    int64_t r0 = 0, head = 0;
    int rows = 0, lane, width;
    if constexpr (kLaneGroups) {  // u = row * h + head < 2^31 (checked on the host)
        const uint32_t warp = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
        const uint32_t lane32 = threadIdx.x % 32, per_warp = 32u / static_cast<uint32_t>(group);
        const uint32_t units = static_cast<uint32_t>(a.n * a.h);
        if (warp * per_warp >= units) return;  // (the whole warp: its shuffles need every lane)
        const uint32_t u = warp * per_warp + lane32 / static_cast<uint32_t>(group);
        if (u < units) {  // a group past the end joins the shuffles with no packs
            const uint32_t row = u / static_cast<uint32_t>(a.h);
            r0 = row;
            head = u - row * static_cast<uint32_t>(a.h);
            rows = 1;
        }
        lane = static_cast<int>(lane32 % static_cast<uint32_t>(group));
        width = group;
    } else {
        if (!block_unit(a, blockIdx.x, r0, head, rows)) return;  // (uniform over the CTA)
        lane = static_cast<int>(threadIdx.x);
        width = kThreads;
    }
    // (a row of no columns has no packs; the walk still needs a positive row length)
    const int per_row = max(1, static_cast<int>((a.d + a.dt) / V)), n_packs = a.d + a.dt > 0 ? rows * per_row : 0;
    const In* in_u = in + r0 * a.s0 + head * a.s1;
    const In* tail_u = tail + r0 * a.t0 + head * a.t1;
    uint8_t* out_u = out + r0 * a.o0 + head * a.o1;
    using Raw = RawPack<In, V>;
    auto load = [&](const PackWalk& w) {
        const int64_t c = static_cast<int64_t>(w.col) * V;
        const In* src = c < a.d ? in_u + w.row * a.s0 + c : tail_u + w.row * a.t0 + (c - a.d);
        return *reinterpret_cast<const Raw*>(src);
    };
    // Every load of a batch is issued before the first use of any: a use right after its load (the obvious loop)
    // makes the warp wait out the memory latency once per pack, which held the per-block k quantiser to 0.9 TB/s.
    // An absent pack reads as zeros, which leave the maximum alone.
    auto load_batch = [&](Raw* dst, int n, PackWalk& w, int first) {
#pragma unroll
        for (int k = 0; k < n; ++k) {
            dst[k] = first + k * width < n_packs ? load(w) : Raw{};
            w.next();
        }
    };
    constexpr int kBatch = 4;  // the walk past kHeld * width packs
    static_assert(kBatch <= kHeld, "a batch lands in keep");
    const bool held = n_packs <= kHeld * width;
    Raw keep[kHeld];
    float m = 0.0f;
    {
        PackWalk w(lane, width, per_row);
        if (held) {
            load_batch(keep, kHeld, w, lane);
#pragma unroll
            for (int k = 0; k < kHeld; ++k) m = raw_abs_max<In, V>(m, keep[k]);
        } else {
            for (int i = lane; i < n_packs; i += kBatch * width) {
                load_batch(keep, kBatch, w, i);
#pragma unroll
                for (int k = 0; k < kBatch; ++k) m = raw_abs_max<In, V>(m, keep[k]);
            }
        }
    }
    if constexpr (kLaneGroups) {
        for (int o = group / 2; o > 0; o /= 2) m = abs_max_bits_merge(m, __shfl_xor_sync(0xffffffffu, m, o));
    } else {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) m = abs_max_bits_merge(m, __shfl_xor_sync(0xffffffffu, m, o));
        __shared__ float warp_max[kThreads / 32];
        if (lane % 32 == 0) warp_max[lane / 32] = m;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kThreads / 32; ++i) m = abs_max_bits_merge(m, warp_max[i]);
    }
    if (rows == 0) return;
    const float sc = m > 0.0f || isnan(m) ? __fdiv_rn(m, 448.0f) : 1.0f;
    const float inv = __fdiv_rn(1.0f, sc);
    // e4m3 of x * inv. With a finite amax and a finite inv no quotient is NaN and each is <= 448.0001, where the
    // hardware cast equals the software rounding (fp8.cuh e4m3x2_in_range): four values per e4m3x4_finite, without
    // NaN fix-ups. Otherwise (a NaN or an infinity in the unit, or an amax so small that 1 / s overflows) the
    // software rounding, NaN -> 0x7f, as in the reference (where the hardware would saturate an infinite quotient).
    // The branch is the unit's, uniform over its lanes.
    const bool finite = isfinite(m) && isfinite(inv);
    auto store = [&](const PackWalk& w, const Raw& r) {
        store_e4m3_pack(out_u + w.row * a.o0 + static_cast<int64_t>(w.col) * V, unpack_raw<In, V>(r), inv, finite);
    };
    PackWalk w(lane, width, per_row);
    if (held) {
#pragma unroll
        for (int k = 0; k < kHeld; ++k) {
            if (lane + k * width < n_packs) store(w, keep[k]);
            w.next();
        }
    } else {
        for (int i = lane; i < n_packs; i += kBatch * width) {
            PackWalk wl = w;
            load_batch(keep, kBatch, wl, i);
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                if (i + k * width < n_packs) store(w, keep[k]);
                w.next();
            }
        }
    }
    for (int r = lane; r < rows; r += width) scale[(r0 + r) * a.c0 + head * a.c1] = sc;
}

// fp8_quantize_heads per row (block 1) over rows of d contiguous elements, 16-byte packs, no in_tail (FP8 attention's
// q): a group of `group` lanes (a power of two) per (row, head) unit, 32 / group units per warp, pack pc = lane +
// k * group (k < kPer) of the unit at one 64-bit base address, every load issued before the first use and the packs
// past the row's end predicated off. head_quant_kernel's general walk (strides, tails, blocks) spent about 30
// integer instructions per pack on its addresses and branches, which held q's quantiser at 2.4 TB/s
// (docs/perf/2026-12-04-s30.md). The maximum and the cast as there (the same bytes).
// kRope (Fp8HeadQuantParams::rope): the rope packs (columns [rope_col, rope_col + 2 half), whole packs) go to shared
// memory as f32, and each lane then rotates its own pack's elements from their pairs' values (rope.cuh), rounded to In
// as kernels::rope stores them; (cos, sin) from the host-launched table a.rope_cs.
constexpr int kRopeWarpFloats = 256;  // kRope: a warp's units' rope columns (32 / group x 2 half <= this)

template <class In, int V, int kPer, bool kRope>
__global__ void __launch_bounds__(kThreads) row_quant_kernel(uint8_t* __restrict__ out, float* __restrict__ scale,
                                                             const In* __restrict__ in, HeadQuantArgs a, int group) {
    using Raw = RawPack<In, V>;
    const uint32_t warp = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
    const uint32_t lane32 = threadIdx.x % 32, per_warp = 32u / static_cast<uint32_t>(group);
    const uint32_t units = static_cast<uint32_t>(a.n * a.h);
    if (warp * per_warp >= units) return;  // (the whole warp: its shuffles need every lane)
    const uint32_t slot = lane32 / static_cast<uint32_t>(group);
    const uint32_t u = warp * per_warp + slot;
    const bool valid = u < units;  // a group past the end joins the shuffles with no packs
    const uint32_t row = valid ? u / static_cast<uint32_t>(a.h) : 0;
    const uint32_t head = valid ? u - row * static_cast<uint32_t>(a.h) : 0;
    const int lane = static_cast<int>(lane32 % static_cast<uint32_t>(group));
    const int per_row = static_cast<int>(a.d / V);
    const In* src = in + static_cast<int64_t>(row) * a.s0 + static_cast<int64_t>(head) * a.s1;
    Raw x[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int pc = lane + k * group;
        x[k] = valid && pc < per_row ? *reinterpret_cast<const Raw*>(src + pc * V) : Raw{};
    }
    if constexpr (kRope) {
        // 16-byte shared and table accesses: rot and half are multiples of V (checked on the host), so a pack's
        // columns, its pairs' values and its (cos, sin) run start on 16 bytes
        static_assert(V % 4 == 0, "whole float4s per pack");
        __shared__ __align__(16) float rope_buf[kThreads / 32][kRopeWarpFloats];
        const int half = a.rope_half, rot = 2 * half;
        float* buf = rope_buf[threadIdx.x / 32] + slot * rot;
        const int c0 = a.rope_col / V, c1 = (a.rope_col + rot) / V;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int pc = lane + k * group;
            if (valid && pc >= c0 && pc < c1) {
                Pack<In, V> p;
                memcpy(&p, &x[k], sizeof(p));
#pragma unroll
                for (int j = 0; j < V; j += 4) {
                    *reinterpret_cast<float4*>(buf + pc * V - a.rope_col + j) =
                        make_float4(to_f32(p.v[j]), to_f32(p.v[j + 1]), to_f32(p.v[j + 2]), to_f32(p.v[j + 3]));
                }
            }
        }
        __syncwarp();
        const float2* cs_row = a.rope_cs + static_cast<int64_t>(row) * half;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int pc = lane + k * group;
            if (valid && pc >= c0 && pc < c1) {
                const int rr0 = pc * V - a.rope_col;  // the pack's first rope column
                const bool first = rr0 < half;        // (a pack lies wholly in one half)
                const int i0 = first ? rr0 : rr0 - half;
                float x1[V], x2[V];
                float2 cs[V];
#pragma unroll
                for (int j = 0; j < V; j += 2) {
                    const float4 t = *reinterpret_cast<const float4*>(cs_row + i0 + j);
                    cs[j] = make_float2(t.x, t.y);
                    cs[j + 1] = make_float2(t.z, t.w);
                    if (a.rope_interleaved) {  // pair i at (2i, 2i + 1)
                        const float4 v = *reinterpret_cast<const float4*>(buf + 2 * (i0 + j));
                        x1[j] = v.x;
                        x2[j] = v.y;
                        x1[j + 1] = v.z;
                        x2[j + 1] = v.w;
                    }
                }
                if (!a.rope_interleaved) {  // pair i at (i, i + half)
#pragma unroll
                    for (int j = 0; j < V; j += 4) {
                        const float4 v1 = *reinterpret_cast<const float4*>(buf + i0 + j);
                        const float4 v2 = *reinterpret_cast<const float4*>(buf + i0 + half + j);
                        x1[j] = v1.x, x1[j + 1] = v1.y, x1[j + 2] = v1.z, x1[j + 3] = v1.w;
                        x2[j] = v2.x, x2[j + 1] = v2.y, x2[j + 2] = v2.z, x2[j + 3] = v2.w;
                    }
                }
                // the second element x2 c + x1 s as first(x2, -x1): the same products and sum, bit for bit
                Pack<In, V> p;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    p.v[j] = from_f32<In>(first ? rope_math::first(x1[j], x2[j], cs[j])
                                                : rope_math::first(x2[j], -x1[j], cs[j]));
                }
                memcpy(&x[k], &p, sizeof(p));
            }
        }
    }
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) m = raw_abs_max<In, V>(m, x[k]);
    for (int o = group / 2; o > 0; o /= 2) m = abs_max_bits_merge(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (!valid) return;
    const float sc = m > 0.0f || isnan(m) ? __fdiv_rn(m, 448.0f) : 1.0f;
    const float inv = __fdiv_rn(1.0f, sc);
    const bool finite = isfinite(m) && isfinite(inv);  // (see head_quant_kernel's store)
    uint8_t* dst = out + static_cast<int64_t>(row) * a.o0 + static_cast<int64_t>(head) * a.o1;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int pc = lane + k * group;
        if (pc >= per_row) continue;
        store_e4m3_pack(dst + pc * V, unpack_raw<In, V>(x[k]), inv, finite);
    }
    if (lane == 0) scale[static_cast<int64_t>(row) * a.c0 + static_cast<int64_t>(head) * a.c1] = sc;
}

// fp8_quantize_heads per block of rows (block > 1: FP8 attention's k per 128-key block) over rows of whole 16-byte
// packs of [in ; in_tail]: a CTA per (block, head) unit, as head_quant_kernel, but each row taken by a group of `group`
// lanes (a power of two up to 32, 256 / group rows per pass), pack pc = lane + k * group (k < kPer) of the row at the
// row's own base address of in or in_tail, kPasses passes of rows, every load issued before the first use. The held
// packs (kPer x kPasses <= 16 per thread) are the unit's whole block, so it is read once. head_quant_kernel's general
// walk (a (row, column) step and a tail test per pack, 64-bit addresses) held this case to 2.0 TB/s
// (docs/perf/2026-12-04-s30.md), as it had held q's per-row quantiser before row_quant_kernel. The maximum, scale
// and cast as there (the same bytes).
template <class In, int V, int kPer, int kPasses>
__global__ void __launch_bounds__(kThreads)
    block_quant_kernel(uint8_t* __restrict__ out, float* __restrict__ scale, const In* __restrict__ in,
                       const In* __restrict__ tail, HeadQuantArgs a, int group) {
    static_assert(kPer * kPasses <= 16, "packs held per thread");
    using Raw = RawPack<In, V>;
    int64_t r0 = 0, head = 0;
    int rows = 0;
    if (!block_unit(a, blockIdx.x, r0, head, rows)) return;  // (uniform over the CTA)
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & (group - 1), row_step = kThreads / group;
    const int r_first = tid / group;
    const int per_row = static_cast<int>((a.d + a.dt) / V), in_packs = static_cast<int>(a.d / V);
    const In* in_u = in + r0 * a.s0 + head * a.s1;
    const In* tail_u = tail + r0 * a.t0 + head * a.t1;
    Raw x[kPasses][kPer];
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
        const int r = r_first + ps * row_step;
        const In* in_r = in_u + static_cast<int64_t>(r) * a.s0;
        const In* tail_r = tail_u + static_cast<int64_t>(r) * a.t0;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int pc = lane + k * group;
            const In* src = pc < in_packs ? in_r + pc * V : tail_r + (pc - in_packs) * V;
            x[ps][k] = r < rows && pc < per_row ? *reinterpret_cast<const Raw*>(src) : Raw{};
        }
    }
    float m = 0.0f;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
#pragma unroll
        for (int k = 0; k < kPer; ++k) m = raw_abs_max<In, V>(m, x[ps][k]);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = abs_max_bits_merge(m, __shfl_xor_sync(0xffffffffu, m, o));
    __shared__ float warp_max[kThreads / 32];
    if (tid % 32 == 0) warp_max[tid / 32] = m;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) m = abs_max_bits_merge(m, warp_max[i]);
    const float sc = m > 0.0f || isnan(m) ? __fdiv_rn(m, 448.0f) : 1.0f;
    const float inv = __fdiv_rn(1.0f, sc);
    const bool finite = isfinite(m) && isfinite(inv);  // (see head_quant_kernel's store)
    uint8_t* out_u = out + r0 * a.o0 + head * a.o1;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
        const int r = r_first + ps * row_step;
        uint8_t* out_r = out_u + static_cast<int64_t>(r) * a.o0;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int pc = lane + k * group;
            if (r < rows && pc < per_row) {
                store_e4m3_pack(out_r + pc * V, unpack_raw<In, V>(x[ps][k]), inv, finite);
            }
        }
    }
    for (int r = tid; r < rows; r += kThreads) scale[(r0 + r) * a.c0 + head * a.c1] = sc;
}

}  // namespace

void fp8_quantize_heads(const kernels::Fp8HeadQuantParams& p, void* stream) {
    const char* op = "fp8_quantize_heads";
    check_on_gpu(p.out, op, "out");
    check_on_gpu(p.in, op, "in");
    check_on_gpu(p.scale, op, "scale");
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << op << ": in must be f32 or bf16, got " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3) << op << ": out must be f8e4m3, got " << dtype_name(p.out.dtype);
    PENSTOCK_CHECK(p.scale.dtype == DType::kF32 && p.scale.ndim == 2) << op << ": scale must be [n, H] f32";
    PENSTOCK_CHECK(p.in.ndim == 3 && p.out.ndim == 3) << op << ": in and out are [n, H, d]";
    const bool has_tail = p.in_tail.data != nullptr;
    HeadQuantArgs a{};
    a.n = p.in.size(0);
    a.h = p.in.size(1);
    a.d = p.in.size(2);
    a.dt = has_tail ? p.in_tail.size(2) : 0;
    if (has_tail) {
        check_on_gpu(p.in_tail, op, "in_tail");
        PENSTOCK_CHECK(p.in_tail.dtype == p.in.dtype && p.in_tail.ndim == 3 && p.in_tail.size(0) == a.n &&
                       p.in_tail.size(1) == a.h)
            << op << ": in_tail must be [n, H, d_tail] of in's dtype, got " << p.in_tail.shape_string();
        PENSTOCK_CHECK(p.in_tail.stride(2) == 1 || a.dt <= 1) << op << ": in_tail's last dim must be contiguous";
        a.t0 = p.in_tail.stride(0);
        a.t1 = p.in_tail.stride(1);
    }
    PENSTOCK_CHECK(p.out.size(0) == a.n && p.out.size(1) == a.h && p.out.size(2) == a.d + a.dt)
        << op << ": out " << p.out.shape_string() << " vs in " << p.in.shape_string() << " + " << a.dt;
    PENSTOCK_CHECK(p.scale.size(0) == a.n && p.scale.size(1) == a.h) << op << ": scale " << p.scale.shape_string();
    PENSTOCK_CHECK((p.in.stride(2) == 1 || a.d <= 1) && (p.out.stride(2) == 1 || a.d + a.dt <= 1))
        << op << ": last dims must be contiguous";
    PENSTOCK_CHECK_GE(p.block, 1) << op << ": block";
    a.s0 = p.in.stride(0);
    a.s1 = p.in.stride(1);
    a.o0 = p.out.stride(0);
    a.o1 = p.out.stride(1);
    a.c0 = p.scale.stride(0);
    a.c1 = p.scale.stride(1);
    a.block = p.block;
    a.n_seqs = 1;
    if (p.cu_seqlens.data != nullptr) {
        check_on_gpu(p.cu_seqlens, op, "cu_seqlens");
        PENSTOCK_CHECK(p.cu_seqlens.dtype == DType::kI32 && p.cu_seqlens.ndim == 1 && p.cu_seqlens.size(0) >= 1 &&
                       p.cu_seqlens.stride(0) == 1)
            << op << ": cu_seqlens must be a contiguous [n_seqs + 1] i32 tensor";
        a.cu = p.cu_seqlens.ptr<const int32_t>();
        a.n_seqs = static_cast<int>(p.cu_seqlens.size(0) - 1);
    }
    const bool rope = p.rope.inv_freq.data != nullptr;
    int64_t half = 0;
    if (rope) {
        half = p.rope.inv_freq.size(0);
        check_on_gpu(p.rope.inv_freq, op, "rope.inv_freq");
        check_on_gpu(p.rope.positions, op, "rope.positions");
        PENSTOCK_CHECK(p.block == 1 && !has_tail) << op << ": RoPE with block 1 and no in_tail only";
        PENSTOCK_CHECK(p.rope.inv_freq.dtype == DType::kF32 && p.rope.inv_freq.ndim == 1 &&
                       (p.rope.inv_freq.stride(0) == 1 || half <= 1))
            << op << ": rope.inv_freq must be a contiguous [half] f32 tensor";
        PENSTOCK_CHECK(p.rope.positions.dtype == DType::kI32 && p.rope.positions.ndim == 1 &&
                       p.rope.positions.size(0) == a.n && (p.rope.positions.stride(0) == 1 || a.n <= 1))
            << op << ": rope.positions must be a contiguous [n] i32 tensor";
        PENSTOCK_CHECK(half >= 1 && p.rope_col >= 0 && p.rope_col + 2 * half <= a.d)
            << op << ": rope columns [" << p.rope_col << ", " << p.rope_col + 2 * half << ") outside in's " << a.d;
    }
    if (a.n == 0 || a.h == 0 || a.n_seqs == 0) return;
    PENSTOCK_CHECK_LE(a.h, 65535) << op << ": heads";
    PENSTOCK_CHECK_LT(a.n * a.h, int64_t{1} << 31) << op << ": rows x heads";
    PENSTOCK_CHECK_LT((a.d + a.dt) * std::max<int64_t>(p.block, 1), int64_t{1} << 31) << op << ": block size";
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.in.dtype, op, [&](auto t) {
        using In = decltype(t);
        constexpr int kV = 16 / static_cast<int>(sizeof(In));
        auto aligned = [](const void* ptr, int64_t st0, int64_t st1, int64_t elem, int64_t bytes) {
            return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0 && (st0 * elem) % bytes == 0 &&
                   (st1 * elem) % bytes == 0;
        };
        const bool vec = a.d % kV == 0 && a.dt % kV == 0 && aligned(p.in.data, a.s0, a.s1, sizeof(In), 16) &&
                         (!has_tail || aligned(p.in_tail.data, a.t0, a.t1, sizeof(In), 16)) &&
                         aligned(p.out.data, a.o0, a.o1, 1, kV) && (a.d + a.dt) % kV == 0;
        auto launch = [&](auto v_tag) {
            constexpr int V = decltype(v_tag)::value;
            auto* o = static_cast<uint8_t*>(p.out.data);
            auto* sc = static_cast<float*>(p.scale.data);
            const auto* x = static_cast<const In*>(p.in.data);
            const auto* tl = has_tail ? static_cast<const In*>(p.in_tail.data) : x;
            if (p.block == 1) {
                // lanes per (row, head): the smallest power of two that holds the row in at most 4 packs per lane
                constexpr int kHeldRow = 4;
                const int64_t per_row = (a.d + a.dt) / V;
                int group = 1;
                while (group < 32 && group * kHeldRow < per_row) group *= 2;
                const int64_t units_per_cta = (kThreads / 32) * (32 / group);
                const auto grid = static_cast<unsigned>((a.n * a.h + units_per_cta - 1) / units_per_cta);
                // rows of whole packs held by the group: row_quant_kernel (a base address per row); its fused RoPE
                // when the rope columns are whole packs, each within one half, and the warp's fit its buffer
                constexpr bool kRowKernel = V % 4 == 0;  // (row_quant_kernel's four-value casts)
                const bool rows_fast = kRowKernel && !has_tail && per_row <= kHeldRow * group;
                const bool rope_fast = rows_fast && rope && p.rope_col % V == 0 && half % V == 0 &&
                                       (32 / group) * 2 * half <= kRopeWarpFloats;
                if (!rope) {
                    if constexpr (kRowKernel) {
                        if (rows_fast) {
                            row_quant_kernel<In, V, kHeldRow, false><<<grid, kThreads, 0, s>>>(o, sc, x, a, group);
                        } else {
                            head_quant_kernel<In, V, true, kHeldRow><<<grid, kThreads, 0, s>>>(o, sc, x, tl, a, group);
                        }
                    } else {
                        head_quant_kernel<In, V, true, kHeldRow><<<grid, kThreads, 0, s>>>(o, sc, x, tl, a, group);
                    }
                } else if (kRowKernel && rope_fast) {
                    // (cos, sin) of every row and pair from a table (rope.cuh's arithmetic), then the fused kernel
                    const auto ints = [](int64_t v) { return static_cast<int>(v); };
                    float2* tab = nullptr;
                    PENSTOCK_CUDA_CHECK(
                        cudaMallocAsync(reinterpret_cast<void**>(&tab), sizeof(float2) * a.n * half, s));
                    rope_table_kernel<<<grid_for(a.n * half), kThreads, 0, s>>>(
                        tab, p.rope.positions.ptr<const int32_t>(), p.rope.inv_freq.ptr<const float>(), a.n, ints(half),
                        p.rope.attention_factor);
                    PENSTOCK_CUDA_LAUNCH_CHECK();
                    HeadQuantArgs ar = a;
                    ar.rope_cs = tab;
                    ar.rope_col = ints(p.rope_col);
                    ar.rope_half = ints(half);
                    ar.rope_interleaved = p.rope.interleaved;
                    if constexpr (kRowKernel) {
                        row_quant_kernel<In, V, kHeldRow, true><<<grid, kThreads, 0, s>>>(o, sc, x, ar, group);
                    }
                    PENSTOCK_CUDA_LAUNCH_CHECK();
                    PENSTOCK_CUDA_CHECK(cudaFreeAsync(tab, s));
                } else {
                    // otherwise the composition: in copied, kernels::rope on the copy's slice, then this op
                    In* buf = nullptr;
                    PENSTOCK_CUDA_CHECK(
                        cudaMallocAsync(reinterpret_cast<void**>(&buf), sizeof(In) * a.n * a.h * a.d, s));
                    const int64_t shape[3] = {a.n, a.h, a.d};
                    const TensorView bv =
                        TensorView::contiguous(buf, p.in.dtype, shape, Device::kCUDA, p.in.device_index);
                    copy({.out = bv, .in = p.in}, stream);
                    kernels::RopeParams rp = p.rope;
                    rp.x = bv.slice(2, p.rope_col, p.rope_col + 2 * half);
                    cuda::rope(rp, stream);
                    kernels::Fp8HeadQuantParams plain = p;
                    plain.in = bv;
                    plain.rope = {};
                    fp8_quantize_heads(plain, stream);
                    PENSTOCK_CUDA_CHECK(cudaFreeAsync(buf, s));
                }
            } else {
                const int64_t units = a.cu != nullptr ? a.n / a.block + a.n_seqs : (a.n + a.block - 1) / a.block;
                PENSTOCK_CHECK_LT(units * a.h, int64_t{1} << 31) << op << ": blocks x heads";
                const auto grid = static_cast<unsigned>(units * a.h);
                // rows of whole packs whose block the CTA holds: block_quant_kernel (a base address per row), with
                // kPer 3 or 4 packs per lane, whichever leaves fewer lanes idle (a 192-wide bf16 row: 8 lanes x 3)
                const int64_t per_row = (a.d + a.dt) / V;
                auto group_for = [&](int per) {
                    int g = 1;
                    while (g < 32 && g * per < per_row) g *= 2;
                    return g;
                };
                const int g3 = group_for(3), g4 = group_for(4);
                const bool three = 3 * g3 <= 4 * g4 && 3 * g3 >= per_row;
                const int group = three ? g3 : g4;
                constexpr int kPasses = 4;
                const bool block_fast = per_row > 0 && per_row <= (three ? 3 : 4) * group &&
                                        a.block <= static_cast<int64_t>(kPasses) * (kThreads / group);
                if constexpr (V > 1) {  // (16-byte packs only)
                    if (block_fast) {
                        if (three) {
                            block_quant_kernel<In, V, 3, kPasses><<<grid, kThreads, 0, s>>>(o, sc, x, tl, a, group);
                        } else {
                            block_quant_kernel<In, V, 4, kPasses><<<grid, kThreads, 0, s>>>(o, sc, x, tl, a, group);
                        }
                        PENSTOCK_CUDA_LAUNCH_CHECK();
                        return;
                    }
                }
                head_quant_kernel<In, V, false, 16><<<grid, kThreads, 0, s>>>(o, sc, x, tl, a, kThreads);
            }
            PENSTOCK_CUDA_LAUNCH_CHECK();
        };
        if (vec) {
            launch(std::integral_constant<int, kV>{});
        } else {
            launch(std::integral_constant<int, 1>{});
        }
    });
}

void fp8_cast_scaled(const TensorView& out, const TensorView& in, const float* mult, void* stream) {
    const char* op = "fp8_cast_scaled";
    check_pair(out, in, TensorView{}, op, /*with_scale=*/false);
    PENSTOCK_CHECK(out.dtype == DType::kF8E4M3) << op << ": out must be f8e4m3";
    dispatch_float(in.dtype, op, [&](auto t) {
        cast_typed<decltype(t), false>(out, in, mult, nullptr, nullptr, static_cast<cudaStream_t>(stream));
    });
}

void fp8_quantize_tensor(const kernels::Fp8TensorScaleParams& p, void* stream) {
    const char* op = "fp8_quantize_tensor";
    check_pair(p.out, p.in, p.scale, op);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3) << op << ": out must be f8e4m3, got " << dtype_name(p.out.dtype);
    const auto s = static_cast<cudaStream_t>(stream);
    unsigned* amax_bits = nullptr;
    PENSTOCK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&amax_bits), sizeof(unsigned), s));
    PENSTOCK_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), s));
    dispatch_float(p.in.dtype, op, [&](auto t) {
        cast_typed<decltype(t), true>(p.out, p.in, nullptr, amax_bits, static_cast<float*>(p.scale.data), s);
    });
    PENSTOCK_CUDA_CHECK(cudaFreeAsync(amax_bits, s));
}

void fp8_dequantize_tensor(const kernels::Fp8TensorScaleParams& p, void* stream) {
    const char* op = "fp8_dequantize_tensor";
    check_pair(p.out, p.in, p.scale, op);
    PENSTOCK_CHECK(p.in.dtype == DType::kF8E4M3) << op << ": in must be f8e4m3, got " << dtype_name(p.in.dtype);
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.out.dtype, op, [&](auto t) { dequantize_typed<decltype(t)>(p, s); });
}

}  // namespace penstock::cuda
