// fp8_act_quant on the GPU (kernels/ops.h Fp8ActQuantParams): DeepSeek-V3's per-token, per-128-column quantiser,
// bit-exact with ref::fp8_act_quant. Parallel mapping: one warp per (row, 128-column group), warp index
// w = row * kb + group over [0, m * kb); lane l holds columns 4 l .. 4 l + 3 of the group (one 8- or 16-byte load and
// one 4-byte store when rows are aligned and k % 4 == 0, else 4 strided scalar accesses). Numerics: amax by a warp
// max (exact, order-free), s = amax / 448 and x / s by __fdiv_rn (IEEE round to nearest, independent of fast-math
// flags), the e4m3 cast by fp8.cuh's integer routine (torch's .to(float8_e4m3fn)), NaN quotients as 0x7f. Rows that
// allow it take the wider mappings below, with one reciprocal per group and the hardware cast: eight lanes of 16
// columns per group (k % 16 == 0, 16-byte aligned rows), else half a warp of 8 columns (k % 8 == 0).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch_util.cuh"

namespace penstock::cuda {

namespace {

using kernels::kFp8Block;

struct QuantArgs {
    uint8_t* out;
    float* scale;
    const void* in;
    int64_t m, k, kb, ld_in, ld_out, ss_row, ss_col;
};

template <class In, bool kVec>
__global__ void fp8_act_quant_kernel(QuantArgs p) {
    const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;  // range [0, m * kb)
    const int lane = static_cast<int>(threadIdx.x) & 31;
    if (w >= p.m * p.kb) return;  // uniform across the warp
    const int64_t r = w / p.kb;
    const int64_t gi = w - r * p.kb;
    const In* in = static_cast<const In*>(p.in) + r * p.ld_in;
    uint8_t* out = p.out + r * p.ld_out;
    float v[4];
    if constexpr (kVec) {
        const int64_t c = gi * kFp8Block + 4 * lane;
        if (c < p.k) {
            const Pack<In, 4> x = *reinterpret_cast<const Pack<In, 4>*>(in + c);
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = to_f32(x.v[j]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t c = gi * kFp8Block + lane + 32 * j;
            v[j] = c < p.k ? to_f32(in[c]) : 0.0f;
        }
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fabsf(v[j]));
    amax = fmaxf(warp_reduce_max(amax), 1e-4f);
    const float s = __fdiv_rn(amax, 448.0f);
    uint8_t q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float y = __fdiv_rn(v[j], s);
        q[j] = isnan(y) ? uint8_t{0x7f} : e4m3_from_f32_bits(__float_as_uint(y));  // NaN: 0x7f, any sign (ops.h)
    }
    if constexpr (kVec) {
        const int64_t c = gi * kFp8Block + 4 * lane;
        if (c < p.k) {
            *reinterpret_cast<uint32_t*>(out + c) = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 8) |
                                                    (static_cast<uint32_t>(q[2]) << 16) |
                                                    (static_cast<uint32_t>(q[3]) << 24);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t c = gi * kFp8Block + lane + 32 * j;
            if (c < p.k) out[c] = q[j];
        }
    }
    if (lane == 0) p.scale[r * p.ss_row + gi * p.ss_col] = s;
}

// Eight consecutive elements from a 16-byte aligned address (bf16: one 16-byte load; f32: two).
__device__ __forceinline__ void load8(const bf16* src, float (&v)[8]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        v[2 * j] = __uint_as_float(w[j] << 16);
        v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
}
__device__ __forceinline__ void load8(const float* src, float (&v)[8]) {
    const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// A lane's N consecutive columns (N a multiple of 8) from 16-byte aligned src when valid, else zeros; returns their
// largest magnitude (the lane's share of the group's amax).
template <int N, class In>
__device__ __forceinline__ float load_cols(const In* src, bool valid, float (&v)[N]) {
    static_assert(N % 8 == 0, "whole 16-byte bf16 packs");
    if (valid) {
#pragma unroll
        for (int i = 0; i < N / 8; ++i) {
            float part[8];
            load8(src + 8 * i, part);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[8 * i + j] = part[j];
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) v[j] = 0.0f;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) amax = fmaxf(amax, fabsf(v[j]));
    return amax;
}

// The wide mapping (k % 8 == 0, 16-byte aligned input rows, 8-byte aligned output rows): a half-warp per (row,
// group), lane l of it holds columns 8 l .. 8 l + 7 (one 16-byte bf16 load or two f32 ones, one 8-byte store), the
// group's amax by four xor-shuffles inside the half-warp, the quotients from one reciprocal of s (fp8.cuh
// div_by_recip: the e4m3 bytes of the division, with no division per element) and the cast by the hardware, two
// values per instruction (fp8.cuh e4m3x2_in_range: the same bytes for quotients in range). Twice the columns per
// thread and half the shuffles of the kernel above.
template <class In>
__global__ void fp8_act_quant_x8_kernel(QuantArgs p) {
    const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 4;  // range [0, m * kb)
    const int sub = static_cast<int>(threadIdx.x) & 15;
    if (w >= p.m * p.kb) return;  // uniform across the half-warp
    const unsigned mask = (threadIdx.x & 16) != 0 ? 0xffff0000u : 0x0000ffffu;
    const int64_t r = w / p.kb;
    const int64_t gi = w - r * p.kb;
    const int64_t c = gi * kFp8Block + 8 * sub;
    const bool valid = c < p.k;  // k % 8 == 0: all eight columns or none
    float v[8];
    float amax = load_cols(static_cast<const In*>(p.in) + r * p.ld_in + c, valid, v);
#pragma unroll
    for (int d = 8; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, d));
    uint32_t q[2];
    const float s = act_quant_group(v, amax, q);
    if (valid) *reinterpret_cast<uint2*>(p.out + r * p.ld_out + c) = make_uint2(q[0], q[1]);
    if (sub == 0) p.scale[r * p.ss_row + gi * p.ss_col] = s;
}

// The 16-column mapping (k % 16 == 0, 16-byte aligned input and output rows), the default where it applies: eight
// lanes per (row, group), lane l of them holding columns 16 l .. 16 l + 15 (two 16-byte bf16 loads or four f32 ones,
// one 16-byte store), the group's amax by three xor-shuffles within the eight lanes. Per byte moved it issues about
// half the instructions of the 8-column kernel above (which Nsight Compute found issue-bound, not DRAM-bound:
// docs/perf/2026-12-01-fp8-wide-tile.md): the per-group work (the index, s, its reciprocal, the shuffles) is shared
// by twice the columns, the row index is a multiply-high (DivU32) instead of a 64-bit division, and each thread has
// twice the bytes in flight. Same numerics as the 8-column kernel (act_quant_group).
template <class In>
__global__ void fp8_act_quant_x16_kernel(QuantArgs p, DivU32 by_kb) {
    const uint32_t unit = (blockIdx.x * blockDim.x + threadIdx.x) >> 3;  // (row, group), < m * kb < 2^28
    const uint32_t sub = threadIdx.x & 7u;
    if (unit >= static_cast<uint32_t>(p.m * p.kb)) return;  // uniform across the eight lanes
    const uint32_t r = by_kb.div(unit);
    const uint32_t gi = unit - r * by_kb.d;
    const int64_t c = static_cast<int64_t>(gi) * kFp8Block + 16 * sub;
    const bool valid = c < p.k;  // k % 16 == 0: all sixteen columns or none
    float v[16];
    float amax = load_cols(static_cast<const In*>(p.in) + static_cast<int64_t>(r) * p.ld_in + c, valid, v);
    const unsigned mask = 0xffu << (threadIdx.x & 24u);
#pragma unroll
    for (int d = 4; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, d));
    uint32_t q[4];
    const float s = act_quant_group(v, amax, q);
    if (valid)
        *reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(r) * p.ld_out + c) = make_uint4(q[0], q[1], q[2], q[3]);
    if (sub == 0) p.scale[static_cast<int64_t>(r) * p.ss_row + static_cast<int64_t>(gi) * p.ss_col] = s;
}

void check_2d(const TensorView& v, int64_t rows, int64_t cols, const char* name) {
    check_on_gpu(v, "fp8_act_quant", name);
    PENSTOCK_CHECK(v.ndim == 2 && v.size(0) == rows && v.size(1) == cols)
        << "fp8_act_quant: " << name << " " << v.shape_string() << ", expected [" << rows << ", " << cols << "]";
}

}  // namespace

void fp8_act_quant(const kernels::Fp8ActQuantParams& p, void* stream) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << "fp8_act_quant: in " << p.in.shape_string();
    const int64_t m = p.in.size(0), k = p.in.size(1), kb = (k + kFp8Block - 1) / kFp8Block;
    check_2d(p.in, m, k, "in");
    check_2d(p.out, m, k, "out");
    check_2d(p.scale, m, kb, "scale");
    PENSTOCK_CHECK(p.in.dtype == DType::kF32 || p.in.dtype == DType::kBF16)
        << "fp8_act_quant: in must be f32 or bf16, got " << dtype_name(p.in.dtype);
    PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3)
        << "fp8_act_quant: out must be f8e4m3, got " << dtype_name(p.out.dtype);
    PENSTOCK_CHECK(p.scale.dtype == DType::kF32)
        << "fp8_act_quant: scale must be f32, got " << dtype_name(p.scale.dtype);
    PENSTOCK_CHECK((p.in.stride(1) == 1 || k <= 1) && (p.out.stride(1) == 1 || k <= 1))
        << "fp8_act_quant: last dims must be contiguous";
    if (m == 0 || k == 0) return;
    QuantArgs a{};
    a.out = p.out.ptr<uint8_t>();
    a.scale = p.scale.ptr<float>();
    a.in = p.in.data;
    a.m = m;
    a.k = k;
    a.kb = kb;
    a.ld_in = m > 1 ? p.in.stride(0) : k;
    a.ld_out = m > 1 ? p.out.stride(0) : k;
    a.ss_row = p.scale.stride(0);
    a.ss_col = p.scale.stride(1);
    const int64_t in_bytes = p.in.dtype == DType::kF32 ? 4 : 2;
    const auto addr = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr); };
    const bool vec = k % 4 == 0 && addr(p.in.data) % static_cast<uintptr_t>(4 * in_bytes) == 0 &&
                     (a.ld_in * in_bytes) % (4 * in_bytes) == 0 && addr(p.out.data) % 4 == 0 && a.ld_out % 4 == 0;
    const bool wide = k % 8 == 0 && addr(p.in.data) % 16 == 0 && (a.ld_in * in_bytes) % 16 == 0 &&
                      addr(p.out.data) % 8 == 0 && a.ld_out % 8 == 0;
    const bool x16 = wide && k % 16 == 0 && addr(p.out.data) % 16 == 0 && a.ld_out % 16 == 0 &&
                     m * kb < (int64_t{1} << 28) && !membw_baseline();
    constexpr int kThreads = 256;
    PENSTOCK_CHECK_LE(m * kb, (int64_t{1} << 31) - 1)
        << "fp8_act_quant: m * ceil(k / 128) warps, m " << m << " k " << k;
    const auto blocks = static_cast<unsigned>((m * kb * 32 + kThreads - 1) / kThreads);
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.in.dtype, "fp8_act_quant", [&](auto tag) {
        using In = decltype(tag);
        if (x16) {
            const auto x16_blocks = static_cast<unsigned>((m * kb * 8 + kThreads - 1) / kThreads);
            fp8_act_quant_x16_kernel<In><<<x16_blocks, kThreads, 0, s>>>(a, DivU32(static_cast<uint32_t>(kb)));
        } else if (wide) {
            const auto wide_blocks = static_cast<unsigned>((m * kb * 16 + kThreads - 1) / kThreads);
            fp8_act_quant_x8_kernel<In><<<wide_blocks, kThreads, 0, s>>>(a);
        } else if (vec) {
            fp8_act_quant_kernel<In, true><<<blocks, kThreads, 0, s>>>(a);
        } else {
            fp8_act_quant_kernel<In, false><<<blocks, kThreads, 0, s>>>(a);
        }
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
