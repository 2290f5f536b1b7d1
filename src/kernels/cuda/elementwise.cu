// Elementwise and row-wise ops on the GPU: silu_mul, add, softmax, layer_norm, rope, merge_attention. Same contracts
// as kernels/ref/{elementwise,norm,rope,attention}.cc, plus bf16 activations (every activation tensor of one call has
// the same dtype; weights f32 or bf16). fp32 math throughout; bf16 outputs are rounded once (nearest even).
// Accurate expf/sincosf for f32 outputs so they stay within the f32 tolerances of the reference; silu_mul's bf16
// path uses the fast exp / divide intrinsics (see SiluOp).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/glu_act.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/rows_vec.cuh"
#include "kernels/cuda/tile_util.cuh"

namespace penstock::cuda {

namespace {

constexpr int kThreads = 256;

// ---- silu_mul: rows_vec.cuh's vectorised row pass. bf16 outputs use the fast exp / divide (error ~1e-7 relative,
// far below the one bf16 rounding at the output); f32 outputs the accurate expf and an IEEE divide.
template <bool kFast>
struct SiluOp {
    __device__ float operator()(float g, float u) const {
        if constexpr (kFast) {
            return silu_mul_fast(g, u);  // glu_act.cuh (shared with the grouped GEMM's fused epilogue)
        } else {
            return g / (1.0f + expf(-g)) * u;
        }
    }
};

// ---- add: contiguous, any shape.
template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
    }
}

// The same over 16-byte packs (all three 16-byte aligned; the caller handles the tail past the last whole pack).
template <class T>
__global__ void add_vec_kernel(T* out, const T* a, const T* b, int64_t n_packs) {
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    using P = Pack<T, V>;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_packs;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const P x = reinterpret_cast<const P*>(a)[i];
        const P y = reinterpret_cast<const P*>(b)[i];
        P o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_f32<T>(to_f32(x.v[j]) + to_f32(y.v[j]));
        reinterpret_cast<P*>(out)[i] = o;
    }
}

// ---- softmax: one block per row; max, sum of exp (fp32), then write. out may alias in: the write pass re-reads x
// element by element in the same thread before overwriting it.
template <class T>
__global__ void softmax_kernel(T* out, const T* in, int64_t dim, int64_t os, int64_t is) {
    __shared__ float scratch[32];
    const T* x = in + blockIdx.x * is;
    T* y = out + blockIdx.x * os;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) m = fmaxf(m, to_f32(x[i]));
    m = block_reduce<true>(m, scratch);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += expf(to_f32(x[i]) - m);
    sum = block_reduce<false>(sum, scratch);
    const float inv = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[i] = from_f32<T>(expf(to_f32(x[i]) - m) * inv);
}

// ---- layer_norm: one block per row; two passes (mean, then biased variance of x - mean), fp32.
template <class T, class W>
__global__ void layer_norm_kernel(T* out, const T* in, const W* weight, const W* bias, int64_t dim, int64_t os,
                                  int64_t is, float eps) {
    __shared__ float scratch[32];
    const T* x = in + blockIdx.x * is;
    T* y = out + blockIdx.x * os;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += to_f32(x[i]);
    const float mean = block_reduce<false>(sum, scratch) / static_cast<float>(dim);
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float c = to_f32(x[i]) - mean;
        sq += c * c;
    }
    const float var = block_reduce<false>(sq, scratch) / static_cast<float>(dim);
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = ((to_f32(x[i]) - mean) * rstd) * to_f32(weight[i]);
        if (bias != nullptr) v += to_f32(bias[i]);
        y[i] = from_f32<T>(v);
    }
}

// ---- rope: one warp per (token, head); the row is staged in shared memory (the interleaved layout writes pair i to
// positions i and i + half, which other lanes still have to read), then rotated back in place.
template <class T>
__global__ void rope_kernel(T* x, const int32_t* positions, const float* inv_freq, int64_t n_tokens, int n_heads,
                            int rot_dim, int64_t s0, int64_t s1, float attention_factor, bool interleaved) {
    extern __shared__ float rope_smem[];
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
    if (item >= n_tokens * n_heads) return;
    const int64_t t = item / n_heads;
    const int64_t h = item % n_heads;
    float* buf = rope_smem + static_cast<int64_t>(warp) * rot_dim;
    T* row = x + t * s0 + h * s1;
    for (int i = lane; i < rot_dim; i += 32) buf[i] = to_f32(row[i]);
    __syncwarp();
    const int32_t pos = positions[t];
    const int half = rot_dim / 2;
    for (int i = lane; i < half; i += 32) {
        const float2 cs = rope_math::cos_sin(pos, inv_freq[i], attention_factor);
        const float x1 = interleaved ? buf[2 * i] : buf[i];
        const float x2 = interleaved ? buf[2 * i + 1] : buf[i + half];
        row[i] = from_f32<T>(rope_math::first(x1, x2, cs));
        row[i + half] = from_f32<T>(rope_math::second(x1, x2, cs));
    }
}

// The item of this warp when each warp takes one token and a run of `run` heads (tokens major): its token t and first
// head h0; false for a warp past the last item.
__device__ __forceinline__ bool rope_warp_item(int64_t n_tokens, int n_heads, int run, int64_t& t, int& h0) {
    const int runs = (n_heads + run - 1) / run;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + static_cast<int>(threadIdx.x) / 32;
    if (item >= n_tokens * runs) return false;
    t = item / runs;
    h0 = static_cast<int>(item % runs) * run;
    return true;
}

// The token's (cos, sin) of pairs lane, lane + 32, ... (pairs past `half`: position 0's, unused).
template <int kN>
__device__ __forceinline__ void rope_lane_cos_sin(float2 (&cs)[kN], int lane, int32_t pos, const float* inv_freq,
                                                  int half, float attention_factor) {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
        const int i = lane + 32 * j;
        cs[j] = rope_math::cos_sin(i < half ? pos : 0, i < half ? inv_freq[i] : 0.0f, attention_factor);
    }
}

// The same, one warp per (token, run of kRopeHeads heads) with the token's cos / sin computed once (rot_dim / 2 <=
// 32 * kPairs pairs, lane l holding pairs l, l + 32, ...): each head's pairs are read into registers, the warp
// synchronises (the interleaved layout writes positions other lanes read), then writes. Same arithmetic as rope_kernel
// (rope.cuh, shared with the FP8 q quantiser's fused RoPE).
constexpr int kRopeHeads = 8;

template <class T, int kPairs>
__global__ void rope_heads_kernel(T* x, const int32_t* positions, const float* inv_freq, int64_t n_tokens, int n_heads,
                                  int rot_dim, int64_t s0, int64_t s1, float attention_factor, bool interleaved) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    int64_t t = 0;
    int h0 = 0;
    if (!rope_warp_item(n_tokens, n_heads, kRopeHeads, t, h0)) return;
    const int half = rot_dim / 2;
    float2 cs[kPairs];
    rope_lane_cos_sin(cs, lane, positions[t], inv_freq, half, attention_factor);
    const int h1 = min(h0 + kRopeHeads, n_heads);
    for (int h = h0; h < h1; ++h) {
        T* row = x + t * s0 + h * s1;
        float x1[kPairs], x2[kPairs];
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
            const int i = lane + 32 * j;
            if (i < half) {
                x1[j] = to_f32(interleaved ? row[2 * i] : row[i]);
                x2[j] = to_f32(interleaved ? row[2 * i + 1] : row[i + half]);
            }
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
            const int i = lane + 32 * j;
            if (i < half) {
                row[i] = from_f32<T>(rope_math::first(x1[j], x2[j], cs[j]));
                row[i + half] = from_f32<T>(rope_math::second(x1[j], x2[j], cs[j]));
            }
        }
        __syncwarp();  // the next head's reads stay after these writes (rows do not overlap; kept for clarity)
    }
}

// ---- rope on bf16 rows in 16-byte chunks (rot_dim = 8 kC, kC in {2, 4, 8, 16, 32}; chunk-aligned rows): one warp
// per (token, run of kRopeVecRun heads), each pass over 32 / kC heads at once, lane l holding chunk l % kC (8
// elements) of head l / kC. A chunk is read with one 16-byte load and written with one store; the values a lane needs
// from elsewhere come by shuffles: with halves, the partner chunk kC / 2 away (pair i is (x[i], x[i + half])); with
// the interleaved layout, output chunk c (pairs 8 (c mod kC / 2) .. + 7, their first or second elements) reads
// input chunks 2 (c mod kC / 2) and the next, whose words are those pairs. The token's cos / sin are computed once per
// warp, one pair per lane and slot (kSlots = ceil(half / 32)), and handed to the lanes that need them by shuffles.
// Same arithmetic (rope.cuh) as rope_heads_kernel, so bit for bit its results; rope_heads_kernel moved 2 bytes per
// lane access and ran DeepSeek-V3's q at ~1.7 TB/s (docs/perf/2026-12-04-s32.md).
constexpr int kRopeVecRun = 32;

// A bf16x2 word's two values (low half first), exactly.
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

template <int kC>
__global__ void rope_bf16x8_kernel(bf16* x, const int32_t* positions, const float* inv_freq, int64_t n_tokens,
                                   int n_heads, int64_t s0, int64_t s1, float attention_factor, bool interleaved) {
    constexpr int kHalf = 4 * kC;              // pairs
    constexpr int kSlots = (kHalf + 31) / 32;  // cos / sin pairs per lane
    constexpr int kGroup = 32 / kC;            // heads per pass
    const int lane = static_cast<int>(threadIdx.x) % 32;
    int64_t t = 0;
    int h0 = 0;
    if (!rope_warp_item(n_tokens, n_heads, kRopeVecRun, t, h0)) return;
    float2 own[kSlots];
    rope_lane_cos_sin(own, lane, positions[t], inv_freq, kHalf, attention_factor);
    const int c = lane % kC;
    const int cm = c % (kC / 2);
    const bool first_half = c < kC / 2;
    // Output element j of this chunk belongs to pair (8 c + j) mod half either way.
    float2 cs[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int p = (8 * c + j) % kHalf;
        float cx = own[0].x, cy = own[0].y;
#pragma unroll
        for (int k = 0; k < kSlots; ++k) {
            const float ox = __shfl_sync(0xffffffffu, own[k].x, p % 32);
            const float oy = __shfl_sync(0xffffffffu, own[k].y, p % 32);
            if (p / 32 == k) {
                cx = ox;
                cy = oy;
            }
        }
        cs[j] = make_float2(cx, cy);
    }
    const int base = lane - c;  // this head's first lane
    const int src0 = base + 2 * cm;
    const int h1 = min(h0 + kRopeVecRun, n_heads);
    // kAhead passes' chunks are loaded before any is rotated: more bytes in flight per warp (one pass at a time ran
    // DeepSeek-V3's q at ~70% of the copy rate).
    constexpr int kAhead = kC < 4 ? kC : 4;
    for (int hb0 = h0; hb0 < h1; hb0 += kAhead * kGroup) {
        uint4 v[kAhead];
        uint4* chunk[kAhead];
        bool live[kAhead];
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
            const int hb = hb0 + a * kGroup;
            const int h = hb + lane / kC;
            live[a] = h < h1;
            chunk[a] = reinterpret_cast<uint4*>(x + t * s0 + static_cast<int64_t>(live[a] ? h : h0) * s1) + c;
            v[a] = live[a] ? *chunk[a] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
            const uint32_t w[4] = {v[a].x, v[a].y, v[a].z, v[a].w};
            float x1[8], x2[8];
            if (!interleaved) {
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const uint32_t o = __shfl_xor_sync(0xffffffffu, w[k], kC / 2);
                    const float2 mine = unpack_bf16x2(w[k]), other = unpack_bf16x2(o);
                    x1[2 * k] = first_half ? mine.x : other.x;
                    x1[2 * k + 1] = first_half ? mine.y : other.y;
                    x2[2 * k] = first_half ? other.x : mine.x;
                    x2[2 * k + 1] = first_half ? other.y : mine.y;
                }
            } else {
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float2 p0 = unpack_bf16x2(__shfl_sync(0xffffffffu, w[k], src0));
                    const float2 p1 = unpack_bf16x2(__shfl_sync(0xffffffffu, w[k], src0 + 1));
                    x1[k] = p0.x;
                    x2[k] = p0.y;
                    x1[4 + k] = p1.x;
                    x2[4 + k] = p1.y;
                }
            }
            float y[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                y[j] = first_half ? rope_math::first(x1[j], x2[j], cs[j]) : rope_math::second(x1[j], x2[j], cs[j]);
            }
            if (live[a]) {
                *chunk[a] = make_uint4(tile::pack_bf16x2(y[0], y[1]), tile::pack_bf16x2(y[2], y[3]),
                                       tile::pack_bf16x2(y[4], y[5]), tile::pack_bf16x2(y[6], y[7]));
            }
        }
    }
}

// ---- merge_attention: one warp per (row, head). Every lane reads both lse values before lane 0 rewrites lse.
template <class T>
__global__ void merge_attention_kernel(T* out, float* lse, const T* in_out, const float* in_lse, int64_t n_items,
                                       int n_heads, int d_v, int64_t o0, int64_t o1, int64_t l0, int64_t l1,
                                       int64_t io0, int64_t io1, int64_t il0, int64_t il1) {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
    if (item >= n_items) return;
    const int64_t r = item / n_heads;
    const int64_t h = item % n_heads;
    T* o = out + r * o0 + h * o1;
    const T* io = in_out + r * io0 + h * io1;
    float* lse_p = lse + r * l0 + h * l1;
    const float a = *lse_p;
    const float b = in_lse[r * il0 + h * il1];
    __syncwarp();
    if (b == -INFINITY) return;  // nothing to merge
    if (a == -INFINITY) {        // the running result is empty: take the partial one
        for (int i = lane; i < d_v; i += 32) o[i] = io[i];
        if (lane == 0) *lse_p = b;
        return;
    }
    const float m = fmaxf(a, b);
    const float merged = m + logf(expf(a - m) + expf(b - m));
    const float wa = expf(a - merged);
    const float wb = expf(b - merged);
    for (int i = lane; i < d_v; i += 32) o[i] = from_f32<T>(wa * to_f32(o[i]) + wb * to_f32(io[i]));
    if (lane == 0) *lse_p = merged;
}

void check_rows(const TensorView& v, int64_t n_rows, int64_t dim, DType dtype, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK_EQ(v.ndim, 2) << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.size(0) == n_rows && v.size(1) == dim) << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.stride(1) == 1 || dim <= 1) << op << ": " << name << " last dim must be contiguous";
    PENSTOCK_CHECK(v.dtype == dtype) << op << ": " << name << " dtype " << dtype_name(v.dtype) << ", expected "
                                     << dtype_name(dtype);
}

void check_vec(const TensorView& v, int64_t dim, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.ndim == 1 && v.size(0) == dim && (v.stride(0) == 1 || dim <= 1))
        << op << ": " << name << " " << v.shape_string();
    PENSTOCK_CHECK(is_float_dtype(v.dtype)) << op << ": " << name << " dtype " << dtype_name(v.dtype);
}

int row_block_threads(int64_t dim) { return dim >= 2048 ? 512 : (dim >= 512 ? 256 : (dim >= 128 ? 128 : 32)); }

}  // namespace

void silu_mul(const kernels::SiluMulParams& p, void* stream) {
    PENSTOCK_CHECK_EQ(p.gate.ndim, 2) << "silu_mul: gate " << p.gate.shape_string();
    const int64_t n_rows = p.gate.size(0);
    const int64_t dim = p.gate.size(1);
    check_rows(p.gate, n_rows, dim, p.gate.dtype, "silu_mul", "gate");
    check_rows(p.up, n_rows, dim, p.gate.dtype, "silu_mul", "up");
    check_rows(p.out, n_rows, dim, p.gate.dtype, "silu_mul", "out");
    const bool vec = rows_vectorizable(p.out) && rows_vectorizable(p.gate) && rows_vectorizable(p.up);
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.gate.dtype, "silu_mul", [&](auto t) {
        using T = decltype(t);
        const BinaryRows<T, T, T> e{.out = p.out.ptr<T>(),
                                    .a = p.gate.ptr<const T>(),
                                    .b = p.up.ptr<const T>(),
                                    .out0 = p.out.stride(0),
                                    .a0 = p.gate.stride(0),
                                    .b0 = p.up.stride(0),
                                    .n_rows = n_rows,
                                    .dim = dim};
        launch_binary_rows(e, SiluOp<std::is_same_v<T, bf16>>{}, vec, s);
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void add(const kernels::AddParams& p, void* stream) {
    check_on_gpu(p.out, "add", "out");
    check_on_gpu(p.a, "add", "a");
    check_on_gpu(p.b, "add", "b");
    PENSTOCK_CHECK(p.out.is_contiguous() && p.a.is_contiguous() && p.b.is_contiguous()) << "add: contiguous only";
    PENSTOCK_CHECK(p.out.numel() == p.a.numel() && p.out.numel() == p.b.numel())
        << "add: shapes differ: out " << p.out.shape_string() << " a " << p.a.shape_string() << " b "
        << p.b.shape_string();
    PENSTOCK_CHECK(p.out.dtype == p.a.dtype && p.out.dtype == p.b.dtype) << "add: dtypes differ";
    const int64_t n = p.out.numel();
    if (n == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.out.dtype, "add", [&](auto t) {
        using T = decltype(t);
        constexpr int64_t V = 16 / static_cast<int64_t>(sizeof(T));
        int64_t done = 0;
        if (is_aligned16(p.out.data) && is_aligned16(p.a.data) && is_aligned16(p.b.data) && n >= V) {
            const int64_t n_packs = n / V;
            add_vec_kernel<T><<<blocks_for(n_packs, kThreads), kThreads, 0, s>>>(p.out.ptr<T>(), p.a.ptr<const T>(),
                                                                                 p.b.ptr<const T>(), n_packs);
            done = n_packs * V;
        }
        if (done < n) {
            add_kernel<T><<<blocks_for(n - done, kThreads), kThreads, 0, s>>>(
                p.out.ptr<T>() + done, p.a.ptr<const T>() + done, p.b.ptr<const T>() + done, n - done);
        }
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void softmax(const kernels::SoftmaxParams& p, void* stream) {
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, p.in.dtype, "softmax", "in");
    check_rows(p.out, n_rows, dim, p.in.dtype, "softmax", "out");
    if (n_rows == 0 || dim == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.in.dtype, "softmax", [&](auto t) {
        using T = decltype(t);
        softmax_kernel<T><<<static_cast<unsigned>(n_rows), row_block_threads(dim), 0, s>>>(
            p.out.ptr<T>(), p.in.ptr<const T>(), dim, p.out.stride(0), p.in.stride(0));
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void layer_norm(const kernels::LayerNormParams& p, void* stream) {
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, p.in.dtype, "layer_norm", "in");
    check_rows(p.out, n_rows, dim, p.in.dtype, "layer_norm", "out");
    check_vec(p.weight, dim, "layer_norm", "weight");
    const bool has_bias = p.bias.data != nullptr;
    if (has_bias) {
        check_vec(p.bias, dim, "layer_norm", "bias");
        PENSTOCK_CHECK(p.bias.dtype == p.weight.dtype) << "layer_norm: bias and weight dtypes differ";
    }
    if (n_rows == 0 || dim == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.in.dtype, "layer_norm", [&](auto t) {
        dispatch_float(p.weight.dtype, "layer_norm weight", [&](auto w) {
            using T = decltype(t);
            using W = decltype(w);
            layer_norm_kernel<T, W><<<static_cast<unsigned>(n_rows), row_block_threads(dim), 0, s>>>(
                p.out.ptr<T>(), p.in.ptr<const T>(), p.weight.ptr<const W>(),
                has_bias ? p.bias.ptr<const W>() : nullptr, dim, p.out.stride(0), p.in.stride(0), p.eps);
        });
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void rope(const kernels::RopeParams& p, void* stream) {
    check_on_gpu(p.x, "rope", "x");
    PENSTOCK_CHECK_EQ(p.x.ndim, 3) << "rope: x " << p.x.shape_string();
    PENSTOCK_CHECK_EQ(p.x.stride(2), 1) << "rope: last dim of x must be contiguous";
    const int64_t n_tokens = p.x.size(0);
    const int64_t n_heads = p.x.size(1);
    const int64_t rot_dim = p.x.size(2);
    PENSTOCK_CHECK_EQ(rot_dim % 2, 0) << "rope: rot_dim must be even";
    PENSTOCK_CHECK_LE(rot_dim, 4096) << "rope: rot_dim";
    check_on_gpu(p.positions, "rope", "positions");
    PENSTOCK_CHECK(p.positions.ndim == 1 && p.positions.dtype == DType::kI32 && p.positions.size(0) == n_tokens &&
                   (p.positions.stride(0) == 1 || n_tokens <= 1))
        << "rope: positions [n_tokens] i32";
    check_on_gpu(p.inv_freq, "rope", "inv_freq");
    PENSTOCK_CHECK(p.inv_freq.ndim == 1 && p.inv_freq.dtype == DType::kF32 && p.inv_freq.size(0) == rot_dim / 2 &&
                   (p.inv_freq.stride(0) == 1 || rot_dim <= 2))
        << "rope: inv_freq [rot_dim / 2] f32";
    const int64_t n_items = n_tokens * n_heads;
    if (n_items == 0 || rot_dim == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    // bf16 rows of 16-byte chunks: rope_bf16x8_kernel.
    const int64_t kc = rot_dim / 8;
    if (p.x.dtype == DType::kBF16 && rot_dim % 8 == 0 && (kc == 2 || kc == 4 || kc == 8 || kc == 16 || kc == 32) &&
        reinterpret_cast<uintptr_t>(p.x.data) % 16 == 0 && (n_tokens <= 1 || p.x.stride(0) % 8 == 0) &&
        (n_heads <= 1 || p.x.stride(1) % 8 == 0)) {
        constexpr int kVecWarps = 8;
        const int64_t items = n_tokens * ((n_heads + kRopeVecRun - 1) / kRopeVecRun);
        auto launch = [&](auto kernel) {
            kernel<<<blocks_for(items, kVecWarps), kVecWarps * 32, 0, s>>>(
                p.x.ptr<bf16>(), p.positions.ptr<const int32_t>(), p.inv_freq.ptr<const float>(), n_tokens,
                static_cast<int>(n_heads), p.x.stride(0), p.x.stride(1), p.attention_factor, p.interleaved);
        };
        switch (kc) {
            case 2:
                launch(rope_bf16x8_kernel<2>);
                break;
            case 4:
                launch(rope_bf16x8_kernel<4>);
                break;
            case 8:
                launch(rope_bf16x8_kernel<8>);
                break;
            case 16:
                launch(rope_bf16x8_kernel<16>);
                break;
            default:
                launch(rope_bf16x8_kernel<32>);
                break;
        }
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    if (rot_dim <= 256) {  // the token's cos / sin fit 4 pairs per lane
        constexpr int kHeadWarps = 8;
        const int64_t items = n_tokens * ((n_heads + kRopeHeads - 1) / kRopeHeads);
        dispatch_float(p.x.dtype, "rope", [&](auto t) {
            using T = decltype(t);
            auto launch = [&](auto kernel) {
                kernel<<<blocks_for(items, kHeadWarps), kHeadWarps * 32, 0, s>>>(
                    p.x.ptr<T>(), p.positions.ptr<const int32_t>(), p.inv_freq.ptr<const float>(), n_tokens,
                    static_cast<int>(n_heads), static_cast<int>(rot_dim), p.x.stride(0), p.x.stride(1),
                    p.attention_factor, p.interleaved);
            };
            if (rot_dim <= 64) {
                launch(rope_heads_kernel<T, 1>);
            } else if (rot_dim <= 128) {
                launch(rope_heads_kernel<T, 2>);
            } else {
                launch(rope_heads_kernel<T, 4>);
            }
        });
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    constexpr int kWarps = 4;
    const size_t smem = sizeof(float) * static_cast<size_t>(kWarps * rot_dim);
    dispatch_float(p.x.dtype, "rope", [&](auto t) {
        using T = decltype(t);
        rope_kernel<T><<<blocks_for(n_items, kWarps), kWarps * 32, smem, s>>>(
            p.x.ptr<T>(), p.positions.ptr<const int32_t>(), p.inv_freq.ptr<const float>(), n_tokens,
            static_cast<int>(n_heads), static_cast<int>(rot_dim), p.x.stride(0), p.x.stride(1), p.attention_factor,
            p.interleaved);
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void merge_attention(const kernels::MergeAttentionParams& p, void* stream) {
    const char* op = "merge_attention";
    check_on_gpu(p.out, op, "out");
    check_on_gpu(p.in_out, op, "in_out");
    check_on_gpu(p.lse, op, "lse");
    check_on_gpu(p.in_lse, op, "in_lse");
    PENSTOCK_CHECK(p.out.ndim == 3 && p.in_out.ndim == 3 && p.lse.ndim == 2 && p.in_lse.ndim == 2) << op;
    const int64_t n_rows = p.out.size(0);
    const int64_t n_heads = p.out.size(1);
    const int64_t d_v = p.out.size(2);
    for (int d = 0; d < 3; ++d) PENSTOCK_CHECK_EQ(p.in_out.size(d), p.out.size(d)) << op << ": in_out dim " << d;
    PENSTOCK_CHECK(p.lse.size(0) == n_rows && p.lse.size(1) == n_heads && p.in_lse.size(0) == n_rows &&
                   p.in_lse.size(1) == n_heads)
        << op << ": lse shapes";
    PENSTOCK_CHECK(p.out.stride(2) == 1 && p.in_out.stride(2) == 1) << op << ": last dim must be contiguous";
    PENSTOCK_CHECK(p.lse.dtype == DType::kF32 && p.in_lse.dtype == DType::kF32) << op << ": lse must be f32";
    PENSTOCK_CHECK(p.out.dtype == p.in_out.dtype) << op << ": out and in_out dtypes differ";
    const int64_t n_items = n_rows * n_heads;
    if (n_items == 0) return;
    constexpr int kWarps = 8;
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.out.dtype, op, [&](auto t) {
        using T = decltype(t);
        merge_attention_kernel<T><<<blocks_for(n_items, kWarps), kWarps * 32, 0, s>>>(
            p.out.ptr<T>(), p.lse.ptr<float>(), p.in_out.ptr<const T>(), p.in_lse.ptr<const float>(), n_items,
            static_cast<int>(n_heads), static_cast<int>(d_v), p.out.stride(0), p.out.stride(1), p.lse.stride(0),
            p.lse.stride(1), p.in_out.stride(0), p.in_out.stride(1), p.in_lse.stride(0), p.in_lse.stride(1));
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
