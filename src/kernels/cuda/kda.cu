// KDA / SiTU ops on the GPU, all but the delta rule (kernels/ops_kda.h; reference kernels/ref/kda.cc): short_conv,
// l2norm, sigmoid, sigmoid_gate, kda_gate, gated_rms_norm, situ_mul, attn_res_mix. Memory-bound; fp32 math except
// attn_res_mix's reductions (double for f32 activations, as its logits can be large enough that an f32 sum would move
// the softmax by more than the f32 tolerance). Rows may be strided wherever the reference allows it. sigmoid_gate,
// situ_mul and attn_res_mix also take bf16 activations (gated_rms_norm a bf16 output): read as bf16 (16-byte vectors
// where the views allow it, rows_vec.cuh), computed in f32 with fast arithmetic whose error stays below one bf16
// rounding (exp / divide intrinsics; SiTU's tanh per cuda::SituMath; f32 partial sums in attn_res_mix), written as
// bf16 once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/glu_act.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/rows_vec.cuh"
#include "kernels/cuda/tma_util.cuh"

namespace penstock::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxConvKernel = 16;

void check_rows(const TensorView& v, int64_t n_rows, int64_t dim, DType dtype, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.ndim == 2 && v.dtype == dtype && v.size(0) == n_rows && v.size(1) == dim &&
                   (v.stride(1) == 1 || dim <= 1))
        << op << ": " << name << " must be [" << n_rows << ", " << dim << "] " << dtype_name(dtype)
        << " with contiguous rows, got " << v.shape_string() << " " << dtype_name(v.dtype);
}

void check_rows(const TensorView& v, int64_t n_rows, int64_t dim, const char* op, const char* name) {
    check_rows(v, n_rows, dim, DType::kF32, op, name);
}

void check_3d(const TensorView& v, int64_t a, int64_t b, int64_t c, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.ndim == 3 && v.dtype == DType::kF32 && v.size(0) == a && v.size(1) == b && v.size(2) == c &&
                   (v.stride(2) == 1 || c <= 1))
        << op << ": " << name << " must be [" << a << ", " << b << ", " << c << "] f32, last dim contiguous, got "
        << v.shape_string();
}

void check_vec(const TensorView& v, int64_t n, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.ndim == 1 && v.dtype == DType::kF32 && v.size(0) == n && (v.stride(0) == 1 || n <= 1))
        << op << ": " << name << " must be [" << n << "] f32 contiguous, got " << v.shape_string();
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------------------------------------------
// Elementwise ops over [n_rows, dim] views with row strides: rows_vec.cuh's binary_rows_kernel with these functors.
// kFast = the output is bf16 (sigmoid_of's note).
struct SigmoidOp {
    __device__ float operator()(float x, float /*unused*/) const { return 1.0f / (1.0f + expf(-x)); }
};

template <bool kFast>
struct SigmoidGateOp {
    __device__ float operator()(float x, float g) const {
        if constexpr (kFast) {
            return __fdividef(x, 1.0f + __expf(-g));
        } else {
            return x * sigmoid_of<false>(g);
        }
    }
};

template <bool kFast, cuda::SituMath kMath>
struct SituOpT {
    float beta, linear_beta;
    float inv_beta, inv_linear_beta;  // 1 / beta, 1 / linear_beta (kFast: multiplies instead of divides)
    __device__ float operator()(float g, float u) const {
        if constexpr (!kFast) {
            return beta * tanhf(g / beta) * sigmoid_of<false>(g) * linear_beta * tanhf(u / linear_beta);
        } else {
            return situ_mul_fast<kMath>(g, u, beta, linear_beta, inv_beta, inv_linear_beta);
        }
    }
};

template <cuda::SituMath kMath>
struct SituWith {
    template <bool kFast>
    using Op = SituOpT<kFast, kMath>;
};

// The same op for f32 or bf16 activations: out and a share a dtype; b (gate / up) has `b_dtype` (f32 or bf16).
template <template <bool> class OpT, class... Args>
void launch_gated(const TensorView& out, const TensorView& a, const TensorView& b, const char* op, void* stream,
                  Args... args) {
    const auto s = static_cast<cudaStream_t>(stream);
    const bool vec = rows_vectorizable(out) && rows_vectorizable(a) && rows_vectorizable(b);
    dispatch_float(out.dtype, op, [&](auto to) {
        using T = decltype(to);
        dispatch_float(b.dtype, op, [&](auto tb) {
            using B = decltype(tb);
            const BinaryRows<T, T, B> e{.out = out.ptr<T>(),
                                        .a = a.ptr<const T>(),
                                        .b = b.ptr<const B>(),
                                        .out0 = out.stride(0),
                                        .a0 = a.stride(0),
                                        .b0 = b.stride(0),
                                        .n_rows = a.size(0),
                                        .dim = a.size(1)};
            launch_binary_rows(e, OpT<std::is_same_v<T, bf16>>{args...}, vec, s);
        });
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------------------------
// short_conv. Pass 1: one thread per (token, channel) output, reading the window from the old conv state and the
// input rows (the token's sequence found by binary search over cu_seqlens). Pass 2: one thread per (sequence,
// channel) rewrites that channel's kernel - 1 state rows (read all first, then write), after pass 1 has read them.
struct ConvArgs {
    float* out;
    const float* in;
    const float* weight;  // [channels, kernel]
    float* state;         // [n_slots, kernel - 1, channels]
    const int32_t* cu;
    const int32_t* slots;
    int64_t out0, in0;
    int64_t n_tokens, channels;
    int n_seqs, kernel;
    bool silu;
};

__device__ __forceinline__ int find_seq(const int32_t* cu, int n_seqs, int64_t t) {
    int lo = 0, hi = n_seqs - 1;  // the last s with cu[s] <= t (empty sequences skipped by the strict bound)
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

__global__ void short_conv_kernel(ConvArgs a) {
    const int64_t n = a.n_tokens * a.channels;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int hist = a.kernel - 1;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t t = i / a.channels;
        const int64_t c = i % a.channels;
        const int s = find_seq(a.cu, a.n_seqs, t);
        const int64_t row0 = a.cu[s];
        const int64_t local = t - row0;
        const float* st = a.state + static_cast<int64_t>(a.slots[s]) * hist * a.channels;
        float acc = 0.0f;
        for (int j = 0; j < a.kernel; ++j) {
            const int64_t x = local + j;  // window position: [state rows ; sequence rows]
            const float w = x < hist ? st[x * a.channels + c] : a.in[(row0 + x - hist) * a.in0 + c];
            acc = fmaf(a.weight[c * a.kernel + j], w, acc);
        }
        a.out[t * a.out0 + c] = a.silu ? acc * sigmoidf(acc) : acc;
    }
}

__global__ void short_conv_state_kernel(ConvArgs a) {
    const int64_t n = static_cast<int64_t>(a.n_seqs) * a.channels;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int hist = a.kernel - 1;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int s = static_cast<int>(i / a.channels);
        const int64_t c = i % a.channels;
        const int64_t row0 = a.cu[s];
        const int64_t len = a.cu[s + 1] - row0;
        if (len == 0) continue;
        float* st = a.state + static_cast<int64_t>(a.slots[s]) * hist * a.channels;
        float v[kMaxConvKernel];
#pragma unroll
        for (int k = 0; k < kMaxConvKernel - 1; ++k) {
            if (k < hist) {
                const int64_t x = len + k;  // window row len + k becomes state row k
                v[k] = x < hist ? st[x * a.channels + c] : a.in[(row0 + x - hist) * a.in0 + c];
            }
        }
#pragma unroll
        for (int k = 0; k < kMaxConvKernel - 1; ++k) {
            if (k < hist) st[k * a.channels + c] = v[k];
        }
    }
}

// A head's L2 norm over lanes that each hold 4 of its channels, lanes_per_head (a power of two <= 32) consecutive
// lanes per head: head_sum_sq is the head's sum of squares (each lane's four squares by one fma chain, then xor
// shuffles over the head's lanes; every lane of the warp must call it), l2_scale the factor 1 / sqrt(sum + eps). The
// fused norm of short_conv_vec_kernel and l2norm_vec_kernel both go through these, so the fused kernel's output is
// bit for bit short_conv followed by l2norm (SPEC section 2).
__device__ __forceinline__ float head_sum_sq(float4 v, int lanes_per_head) {
    float ss = fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, v.x * v.x)));
    for (int o = lanes_per_head / 2; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    return ss;
}
__device__ __forceinline__ float l2_scale(float sum_sq, float eps) { return 1.0f / sqrtf(sum_sq + eps); }
// Host side: the lanes per head of head_sum_sq's 4-wide layout for heads of dim channels (dim / 4, a power of two
// <= 32), or 0 where dim does not take it; and log2 of such a lane count.
inline int head_lanes_4wide(int64_t dim) {
    const int64_t lanes = dim / 4;
    return dim % 4 == 0 && lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0 ? static_cast<int>(lanes) : 0;
}
inline int lanes_log2(int lanes) {
    int shift = 0;
    while ((1 << shift) < lanes) ++shift;
    return shift;
}

// short_conv, vectorised (K = kernel 2..4, the configs' sizes): a warp owns 128 channels (4 per lane, float4) of a run
// of kConvRun consecutive tokens and slides the window along them in registers, so each input row is read once per
// run (plus K - 1 rows of history at the run's start or a sequence start, from the old conv state where the sequence
// begins). With the fused L2 norm, a head of norm_dim channels spans norm_dim / 4 consecutive lanes (a power of two
// dividing 32), reduced with xor shuffles. Lanes past the channels compute zeros and store nothing.
// kBatch: the input rows of kBatch consecutive tokens are loaded (read-only path) before any of their outputs is
// computed or stored, so each lane keeps kBatch independent 16-byte loads in flight instead of one (out must not
// alias in, so the early loads are safe; the compiler cannot prove that and would otherwise not hoist them above the
// stores). kConvBatch = 8 is the shipped value; 1 is the previous kernel (PENSTOCK_MEMBW_BASELINE=1, for A/B runs).
// The arithmetic per output is unchanged, so both give bit-identical results. Tried and dropped (session 20,
// docs/perf/2026-12-02-s20.md): computing the whole batch before storing any of it, so that the fused norm's sums
// reduce as kBatch interleaved shuffle chains, made both forms slower (663 -> 820 us without the norm, 834 -> 912
// with).
constexpr int kConvRun = 32;
constexpr int kConvBatch = 8;

template <int K, int kBatch>
__global__ void __launch_bounds__(kThreads) short_conv_vec_kernel(ConvArgs a, int64_t norm_channels,
                                                                  int lanes_per_head, float norm_eps) {
    constexpr int kHist = K - 1;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
    const int64_t chunks = (a.channels + 127) / 128;
    const int64_t run = warp / chunks;
    const int64_t c = (warp % chunks) * 128 + 4 * lane;
    const int64_t t0 = run * kConvRun;
    if (t0 >= a.n_tokens) return;  // warp-uniform
    const int64_t t1 = min(t0 + static_cast<int64_t>(kConvRun), a.n_tokens);
    const bool live = c < a.channels;
    const bool norm = c < norm_channels;  // uniform over a head's lanes (norm_channels is a multiple of the head)
    float4 w[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
        w[j] = live ? make_float4(a.weight[c * K + j], a.weight[(c + 1) * K + j], a.weight[(c + 2) * K + j],
                                  a.weight[(c + 3) * K + j])
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float4 win[kHist > 0 ? kHist : 1];
    int s = find_seq(a.cu, a.n_seqs, t0);
    int64_t seq_end = a.cu[s + 1];
    auto fill = [&](int64_t t) {  // the window before token t of sequence s
        const int64_t row0 = a.cu[s];
        const float* st = a.state + static_cast<int64_t>(a.slots[s]) * kHist * a.channels;
#pragma unroll
        for (int i = 0; i < kHist; ++i) {
            const int64_t pos = t - row0 - kHist + i;  // < 0: conv state row kHist + pos
            const float* src = pos < 0 ? st + (kHist + pos) * a.channels : a.in + (row0 + pos) * a.in0;
            win[i] = live ? *reinterpret_cast<const float4*>(src + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    fill(t0);
    for (int64_t tb = t0; tb < t1; tb += kBatch) {
        float4 xs[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            xs[u] = live && tb + u < t1 ? __ldg(reinterpret_cast<const float4*>(a.in + (tb + u) * a.in0 + c))
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int64_t t = tb + u;
            if (t >= t1) break;  // warp-uniform
            if (t >= seq_end) {  // a new sequence starts at t (empty ones skipped)
                while (a.cu[s + 1] <= t) ++s;
                seq_end = a.cu[s + 1];
                fill(t);
            }
            const float4 x = xs[u];
            float4 acc = make_float4(w[kHist].x * x.x, w[kHist].y * x.y, w[kHist].z * x.z, w[kHist].w * x.w);
#pragma unroll
            for (int i = 0; i < kHist; ++i) {
                acc.x = fmaf(w[i].x, win[i].x, acc.x);
                acc.y = fmaf(w[i].y, win[i].y, acc.y);
                acc.z = fmaf(w[i].z, win[i].z, acc.z);
                acc.w = fmaf(w[i].w, win[i].w, acc.w);
            }
#pragma unroll
            for (int i = 0; i + 1 < kHist; ++i) win[i] = win[i + 1];
            if constexpr (kHist > 0) win[kHist - 1] = x;
            if (a.silu) {
                acc.x *= sigmoidf(acc.x);
                acc.y *= sigmoidf(acc.y);
                acc.z *= sigmoidf(acc.z);
                acc.w *= sigmoidf(acc.w);
            }
            if (lanes_per_head > 0) {  // every lane shuffles; only the normalised heads use the sum
                const float ss = head_sum_sq(acc, lanes_per_head);
                if (norm) {
                    const float inv = l2_scale(ss, norm_eps);
                    acc.x *= inv;
                    acc.y *= inv;
                    acc.z *= inv;
                    acc.w *= inv;
                }
            }
            if (live) *reinterpret_cast<float4*>(a.out + t * a.out0 + c) = acc;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Row-wise ops: one warp per row (l2norm: per (token, head)), lanes stride the row; fp32 sums.
struct L2Args {
    float* out;
    const float* in;
    int64_t o0, o1, i0, i1;
    int64_t n_tokens, n_heads, dim;
    float eps;
};

__global__ void l2norm_kernel(L2Args a) {
    const int64_t n_rows = a.n_tokens * a.n_heads;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
    for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < n_rows; r += warps) {
        const int64_t t = r / a.n_heads, h = r % a.n_heads;
        const float* x = a.in + t * a.i0 + h * a.i1;
        float* y = a.out + t * a.o0 + h * a.o1;
        float ss = 0.0f;
        for (int64_t i = lane; i < a.dim; i += 32) ss = fmaf(x[i], x[i], ss);
        ss = warp_reduce_sum(ss);
        const float norm = sqrtf(ss + a.eps);
        for (int64_t i = lane; i < a.dim; i += 32) y[i] = x[i] / norm;  // out may alias in: same element, same lane
    }
}

// l2norm, 4-wide: heads of dim = 4 * lanes_per_head channels (lanes_per_head a power of two <= 32) on 16-byte aligned
// rows; lane l of a head's lanes holds channels 4 l .. 4 l + 3 and the warp covers 32 / lanes_per_head heads. The
// arithmetic is the fused short_conv norm's (head_sum_sq, l2_scale, a multiply per element). Lanes past the last
// head load zeros and store nothing, but take part in the shuffles.
__global__ void l2norm_vec_kernel(L2Args a, DivU32 by_heads, int lanes_per_head, int lane_shift) {
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t n_rows = a.n_tokens * a.n_heads;
    if ((tid & ~int64_t{31}) >= (n_rows << lane_shift)) return;  // whole warps past the end
    const int64_t r = tid >> lane_shift;
    const int sub = static_cast<int>(tid & (lanes_per_head - 1));
    const bool live = r < n_rows;
    const uint32_t t = live ? by_heads.div(static_cast<uint32_t>(r)) : 0u;
    const int64_t h = r - static_cast<int64_t>(t) * a.n_heads;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (live) v = *reinterpret_cast<const float4*>(a.in + t * a.i0 + h * a.i1 + 4 * sub);
    const float inv = l2_scale(head_sum_sq(v, lanes_per_head), a.eps);
    if (live) {
        *reinterpret_cast<float4*>(a.out + t * a.o0 + h * a.o1 + 4 * sub) =
            make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    }
}

template <class TO>
struct GatedNormArgs {
    TO* out;
    const float* in;
    const float* gate;
    const float* weight;
    int64_t o0, i0, g0;
    int64_t n_rows, dim;
    float eps;
    // The fused FP8 quantisation (GatedRmsNormParams::quant_out; vec kernel, dim 128: a row is one group): row r =
    // token r / q_heads, head r % q_heads; its bytes at q + token * q0 + head * 128, its scale at token * qs0 +
    // head * qs1.
    uint8_t* q = nullptr;
    float* q_scale = nullptr;
    int64_t q0 = 0, qs0 = 0, qs1 = 0;
    int q_heads = 1;        // n_rows < 2^31 on the fused path: 32-bit row arithmetic
    bool store_out = true;  // false: GatedRmsNormParams::out_scratch on the fused path
};

// bf16 out: the f32 value rounded once (the KDA output feeding a bf16 o_proj, without an f32 copy in between).
template <class TO>
__global__ void gated_rms_norm_kernel(GatedNormArgs<TO> a) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
    for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < a.n_rows; r += warps) {
        const float* x = a.in + r * a.i0;
        const float* g = a.gate + r * a.g0;
        TO* y = a.out + r * a.o0;
        float ss = 0.0f;
        for (int64_t i = lane; i < a.dim; i += 32) ss = fmaf(x[i], x[i], ss);
        ss = warp_reduce_sum(ss);
        const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(a.dim) + a.eps);
        for (int64_t i = lane; i < a.dim; i += 32) {
            y[i] = from_f32<TO>(a.weight[i] * (x[i] * inv_rms) * sigmoidf(g[i]));
        }
    }
}

// gated_rms_norm, 4-wide: rows of dim = 4 * lanes_per_head channels (lanes_per_head a power of two <= 32) on 16-byte
// aligned rows (out: 8-byte for bf16); lane l of a row's lanes holds channels 4 l .. 4 l + 3, the warp covers
// 32 / lanes_per_head rows per step, and each thread loads its kBatch steps' rows (rows r, r + rows_per_step, ...)
// before computing any, so 2 kBatch 16-byte loads are in flight per thread. The sum of squares is head_sum_sq's (a
// different association than the scalar kernel's lane-strided sum: f32-rounding differences only); the element
// formula is the scalar kernel's. Lanes past the last row load zeros and store nothing, but take part in the shuffles.
// kQuant (dim 128, lanes_per_head 32): each row is also one 128-column group of fp8_act_quant: its amax over the
// rounded outputs by xor shuffles over the warp, then fp8.cuh act_quant_group: fp8_act_quant's bytes and scales.
constexpr int kNormBatch = 4;
template <class TO, bool kQuant>
__global__ void gated_rms_norm_vec_kernel(GatedNormArgs<TO> a, int lanes_per_head, int lane_shift) {
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t rows_per_step = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> lane_shift;
    const int sub = static_cast<int>(tid & (lanes_per_head - 1));
    const float4 w = __ldg(reinterpret_cast<const float4*>(a.weight) + sub);
    // The warp's first row decides the loop (uniform over the warp: every lane must reach the shuffles).
    for (int64_t r0 = tid >> lane_shift, warp_r0 = (tid & ~int64_t{31}) >> lane_shift; warp_r0 < a.n_rows;
         r0 += kNormBatch * rows_per_step, warp_r0 += kNormBatch * rows_per_step) {
        float4 x[kNormBatch], g[kNormBatch];
#pragma unroll
        for (int j = 0; j < kNormBatch; ++j) {
            const int64_t r = r0 + j * rows_per_step;
            x[j] = g[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < a.n_rows) {
                x[j] = __ldg(reinterpret_cast<const float4*>(a.in + r * a.i0) + sub);
                g[j] = __ldg(reinterpret_cast<const float4*>(a.gate + r * a.g0) + sub);
            }
        }
#pragma unroll
        for (int j = 0; j < kNormBatch; ++j) {
            const int64_t r = r0 + j * rows_per_step;
            const float inv_rms = 1.0f / sqrtf(head_sum_sq(x[j], lanes_per_head) / static_cast<float>(a.dim) + a.eps);
            float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // the stored (rounded) outputs, the quantiser's input
            if (r < a.n_rows) {
                const float y0 = w.x * (x[j].x * inv_rms) * sigmoidf(g[j].x);
                const float y1 = w.y * (x[j].y * inv_rms) * sigmoidf(g[j].y);
                const float y2 = w.z * (x[j].z * inv_rms) * sigmoidf(g[j].z);
                const float y3 = w.w * (x[j].w * inv_rms) * sigmoidf(g[j].w);
                TO* y = a.out + r * a.o0 + 4 * sub;
                if constexpr (std::is_same_v<TO, float>) {
                    if (!kQuant || a.store_out) *reinterpret_cast<float4*>(y) = make_float4(y0, y1, y2, y3);
                    f[0] = y0, f[1] = y1, f[2] = y2, f[3] = y3;
                } else {
                    const __nv_bfloat162 lo = __floats2bfloat162_rn(y0, y1), hi = __floats2bfloat162_rn(y2, y3);
                    uint2 packed;
                    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
                    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
                    if (!kQuant || a.store_out) *reinterpret_cast<uint2*>(y) = packed;
                    const float2 flo = __bfloat1622float2(lo), fhi = __bfloat1622float2(hi);
                    f[0] = flo.x, f[1] = flo.y, f[2] = fhi.x, f[3] = fhi.y;
                }
            }
            if constexpr (kQuant) {
                float amax = fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3])));
#pragma unroll
                for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
                uint32_t qw[1];
                const float sc = act_quant_group(f, amax, qw);
                if (r < a.n_rows) {
                    const int rr = static_cast<int>(r), t = rr / a.q_heads, h = rr - t * a.q_heads;
                    reinterpret_cast<uint32_t*>(a.q + t * a.q0 + h * 128)[sub] = qw[0];
                    if (sub == 0) a.q_scale[t * a.qs0 + h * a.qs1] = sc;
                }
            }
        }
    }
}

__device__ __forceinline__ float kda_gate_of(float f, float dt_bias, float rate, bool lower_bound_form,
                                             float lower_bound) {
    const float u = f + dt_bias;
    return lower_bound_form ? lower_bound * sigmoidf(rate * u) : -rate * (u > 20.0f ? u : log1pf(expf(u)));
}

// kda_gate: contiguous [n_tokens, n_heads, head_dim]; grid-stride over elements.
__global__ void kda_gate_kernel(float* out, const float* f, const float* a_log, const float* dt_bias, int64_t n,
                                int64_t row, int64_t head_dim, bool lower_bound_form, float lower_bound) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % row;
        out[i] = kda_gate_of(f[i], dt_bias[c], expf(a_log[c / head_dim]), lower_bound_form, lower_bound);
    }
}

// kda_gate, 4-wide (row and head_dim multiples of 4, 16-byte aligned f and out): a block per token (grid-stride over
// tokens), its threads over the row's 4-channel chunks, kBatch chunks loaded before any is computed. 32-bit channel
// arithmetic (row < 2^31); the element formula is the scalar kernel's, so the two agree bit for bit.
constexpr int kGateBatch = 4;
__global__ void kda_gate_vec_kernel(float* out, const float* f, const float* a_log, const float* dt_bias,
                                    int64_t n_tokens, int row4, int head_dim, bool lower_bound_form,
                                    float lower_bound) {
    const auto* db4 = reinterpret_cast<const float4*>(dt_bias);
    const int step = static_cast<int>(blockDim.x) * kGateBatch;
    for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        const auto* f4 = reinterpret_cast<const float4*>(f + t * 4 * row4);
        auto* o4 = reinterpret_cast<float4*>(out + t * 4 * row4);
        for (int c0 = static_cast<int>(threadIdx.x); c0 < row4; c0 += step) {
            float4 v[kGateBatch];
#pragma unroll
            for (int j = 0; j < kGateBatch; ++j) {
                const int c = c0 + j * static_cast<int>(blockDim.x);
                if (c < row4) v[j] = __ldg(f4 + c);
            }
#pragma unroll
            for (int j = 0; j < kGateBatch; ++j) {
                const int c = c0 + j * static_cast<int>(blockDim.x);
                if (c >= row4) break;
                const float rate = expf(__ldg(a_log + 4 * c / head_dim));
                const float4 b = __ldg(db4 + c);
                o4[c] = make_float4(kda_gate_of(v[j].x, b.x, rate, lower_bound_form, lower_bound),
                                    kda_gate_of(v[j].y, b.y, rate, lower_bound_form, lower_bound),
                                    kda_gate_of(v[j].z, b.z, rate, lower_bound_form, lower_bound),
                                    kda_gate_of(v[j].w, b.w, rate, lower_bound_form, lower_bound));
            }
        }
    }
}

// One candidate's (sum v^2, dot) of a warp: its lanes' partial sums added in double (butterfly), stored by lane 0 as
// out[0], out[1].
__device__ __forceinline__ void store_warp_partials(double ss, double dot, double* out, int lane) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
        dot += __shfl_xor_sync(0xffffffffu, dot, o);
    }
    if (lane == 0) {
        out[0] = ss;
        out[1] = dot;
    }
}

// attn_res_mix: one block per token (grid-stride), kMixThreads threads over the row's chunks of kRowVec elements
// (16-byte loads of bf16, two of f32, when every row allows it; rows_vec.cuh; 128 threads: K3's hidden 7168 is 896
// chunks, 7 per thread, none idle). Pass 1: each thread accumulates sum(v^2) and sum(query * w * v) of every
// candidate row (bank rows, then partial) in Acc; warp shuffles, one barrier and a cross-warp sum per candidate in
// double; softmax over the n_blocks + 1 logits in double. Pass 2: each thread mixes its chunks in Acc, rounded once
// to the output dtype; the rows it re-reads were read by this block moments before, but with ~1200 tokens in flight
// they come from L2 only for a few bank rows (at K3's 8 they mostly miss: attn_res_mix_ws_kernel below, which bf16
// takes where it applies).
// Acc = double for f32 activations (the f32 tolerance: an f32 sum of large logits would move the softmax too much)
// and float for bf16 ones (a thread's f32 partial sums over its 56 of 7168 elements are ~1e-6 relative, far below
// one bf16 rounding; f64 conversions and arithmetic would otherwise bound the kernel well under bandwidth).
// Every read of `partial` in pass 1 precedes the barrier, and in pass 2 a thread reads a chunk of partial before
// writing the same chunk of out, so out may alias partial.
constexpr int kMixThreads = 128;
constexpr int kMaxCandidates = 64;

template <class T, class B>
struct MixArgs {
    T* out;
    const B* bank;
    const T* partial;
    const float* query;
    const float* norm_weight;
    int64_t out0, b0, b1, p0;
    int64_t n_tokens, hidden;
    int n_blocks;
    float eps;
};

template <class T, class B, bool kVec>
__global__ void __launch_bounds__(kMixThreads) attn_res_mix_kernel(MixArgs<T, B> a) {
    using Acc = std::conditional_t<std::is_same_v<T, float>, double, float>;
    constexpr int V = kRowVec;
    constexpr int kWarps = kMixThreads / 32;
    __shared__ double partials[kWarps][2 * kMaxCandidates];  // per warp: (sum v^2, dot) of each candidate
    __shared__ double weights[kMaxCandidates];
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int n_cand = a.n_blocks + 1;
    const int64_t n_chunks = (a.hidden + V - 1) / V;
    for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x) {
        for (int i = 0; i < n_cand; ++i) {
            Acc ss = 0, dot = 0;
            for (int64_t c = tid; c < n_chunks; c += kMixThreads) {
                const int64_t c0 = c * V;
                float x[V], q[V], w[V];
                if (i < a.n_blocks) {
                    load_chunk<B, V, kVec>(a.bank + t * a.b0 + i * a.b1, c0, a.hidden, x);
                } else {
                    load_chunk<T, V, kVec>(a.partial + t * a.p0, c0, a.hidden, x);
                }
                load_chunk<float, V, kVec>(a.query, c0, a.hidden, q);
                load_chunk<float, V, kVec>(a.norm_weight, c0, a.hidden, w);
#pragma unroll
                for (int j = 0; j < V; ++j) {  // out-of-range tail elements load as 0 and add nothing
                    const Acc xa = x[j];
                    ss = fma(xa, xa, ss);
                    dot = fma(static_cast<Acc>(q[j]) * static_cast<Acc>(w[j]), xa, dot);
                }
            }
            store_warp_partials(ss, dot, partials[warp] + 2 * i, lane);
        }
        __syncthreads();
        if (tid < n_cand) {
            double ss = 0.0, dot = 0.0;
            for (int w = 0; w < kWarps; ++w) {  // fixed order: the result does not depend on scheduling
                ss += partials[w][2 * tid];
                dot += partials[w][2 * tid + 1];
            }
            weights[tid] = dot / sqrt(ss / static_cast<double>(a.hidden) + a.eps);
        }
        __syncthreads();
        if (tid == 0) {
            double mx = -INFINITY;
            for (int i = 0; i < n_cand; ++i) mx = fmax(mx, weights[i]);
            double denom = 0.0;
            for (int i = 0; i < n_cand; ++i) {
                weights[i] = exp(weights[i] - mx);
                denom += weights[i];
            }
            for (int i = 0; i < n_cand; ++i) weights[i] /= denom;
        }
        __syncthreads();
        for (int64_t c = tid; c < n_chunks; c += kMixThreads) {
            const int64_t c0 = c * V;
            Acc acc[V] = {};
            for (int i = 0; i < n_cand; ++i) {
                float x[V];
                if (i < a.n_blocks) {
                    load_chunk<B, V, kVec>(a.bank + t * a.b0 + i * a.b1, c0, a.hidden, x);
                } else {
                    load_chunk<T, V, kVec>(a.partial + t * a.p0, c0, a.hidden, x);
                }
                const auto wi = static_cast<Acc>(weights[i]);
#pragma unroll
                for (int j = 0; j < V; ++j) acc[j] = fma(wi, static_cast<Acc>(x[j]), acc[j]);
            }
            float y[V];
#pragma unroll
            for (int j = 0; j < V; ++j) y[j] = static_cast<float>(acc[j]);
            store_chunk<T, V, kVec>(a.out + t * a.out0, c0, a.hidden, y);
        }
        __syncthreads();  // weights and partials are reused by the next token
    }
}

// attn_res_mix for bf16 activations and a bf16 bank, warp-specialised, one block per SM walking tokens blockIdx.x,
// + gridDim.x, ... . The two-pass kernel above re-reads every candidate row in pass 2; with ~9 tokens resident per SM
// (~1200 on an H200, 8 bank rows: 150 MB between the two reads of a row) those re-reads miss the 50 MB L2 and it
// moves up to twice the bytes it must (40-52% of copy bandwidth). Here each row is read from DRAM once, into a ring of
// n_slots row slots in shared memory: a producer warp (the block's last) issues one 1-d bulk copy per row as soon as
// its slot is free, so the next tokens' rows stream in while the consumer warps reduce and mix the current one, and
// the consumers free each slot (one arrival per warp) as soon as the mix has used it. (An L2 prefetch of the block's
// next token where the ring holds fewer than two tokens' rows, K3's 8 bank rows, made it slower: 840 vs 803 us,
// docs/perf/2026-12-02-s19.md.) The consumers form kMixWsGroups groups that take the block's tokens in turn (group g
// the tokens g, g + G, ... of the block, each group with its own named barrier), so that one group's serial chain per
// token (the reductions, the softmax on its first warp, the mix) overlaps the others' work; each consumer holds q * w
// for its kPer chunks in registers. Waits sleep (mbar_wait_sleep) rather than spin, and ring positions advance
// incrementally. Per element the arithmetic is the two-pass kernel's (f32 partial sums per thread with q * w rounded to
// f32, double across threads, the logits and softmax in double, the mix in f32 in candidate order, rounded once); only
// the grouping of the partial sums differs. A token's rows are all in shared memory before its first write: out may
// alias partial.
constexpr int kMixWsMaxCand = 16;
constexpr int kMixWsGroups = 2;
constexpr int kMixWsMaxSlots = 64;
constexpr int kMixWsSmemBytes = 200 * 1024;  // the ring's bytes

using MixPack = Pack<bf16, kRowVec>;

struct MixWsArgs {
    MixArgs<bf16, bf16> a;
    int n_slots;  // row slots in the ring, >= n_blocks + 1
};

// Largest block (consumers + the producer warp) of attn_res_mix_ws_kernel<kPer, kMaxCand>: 1024 where its registers
// (q * w and the mix's accumulators, 16 floats per chunk, and two per candidate) fit 64 per thread.
constexpr int mix_ws_max_threads(int per, int max_cand) { return per * 16 + 2 * max_cand <= 50 ? 1024 : 544; }

// y rounded to bf16 (to nearest even, as store_chunk) and stored as one 16-byte access at dst (16-byte aligned). The
// ws kernel's chunks are whole (hidden % 8 == 0); there a store_chunk of its second chunk per thread compiled to eight
// 2- and 4-byte stores (4x the store instructions and L2 write sectors of the output: call H of
// docs/perf/2026-12-02-s19.md). dst is a generic address of global memory (st.global takes it as is on sm_90).
__device__ __forceinline__ void store_bf16x8(bf16* dst, const float (&y)[kRowVec]) {
    uint32_t w[kRowVec / 2];
#pragma unroll
    for (int j = 0; j < kRowVec / 2; ++j) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(y[2 * j], y[2 * j + 1]);  // .x (lower address) = y[2 j]
        w[j] = *reinterpret_cast<const uint32_t*>(&h);
    }
    // st.global.v4 by hand: with a uint4 store as well, NVVM split the second chunk's store into four 4-byte ones.
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}

template <int kPer, int kMaxCand>
__global__ void __launch_bounds__(mix_ws_max_threads(kPer, kMaxCand), 1) attn_res_mix_ws_kernel(MixWsArgs m) {
    static_assert(kMaxCand <= 32, "the softmax runs on warp 0's lanes");
    constexpr int V = kRowVec;
    extern __shared__ __align__(128) unsigned char mix_slots[];
    __shared__ __align__(8) uint64_t full[kMixWsMaxSlots], empty[kMixWsMaxSlots];
    __shared__ double partials[32][2 * kMaxCand];
    __shared__ double weights[kMixWsGroups][kMaxCand];
    const MixArgs<bf16, bf16>& a = m.a;
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int n_consumers = static_cast<int>(blockDim.x) - 32, consumer_warps = n_consumers / 32;
    const int group_threads = n_consumers / kMixWsGroups, group_warps = group_threads / 32;
    const int n_cand = a.n_blocks + 1, n_slots = m.n_slots;
    const int64_t n_chunks = a.hidden / V;  // hidden % 8 == 0 (the launcher's condition)
    const auto row_bytes = static_cast<uint32_t>(a.hidden * 2);
    const auto bar_addr = [](uint64_t* b) { return static_cast<uint32_t>(__cvta_generic_to_shared(b)); };
    const auto row_src = [&](int64_t t, int i) -> const bf16* {
        return i < a.n_blocks ? a.bank + t * a.b0 + i * a.b1 : a.partial + t * a.p0;
    };
    if (tid == 0) {
        for (int s = 0; s < n_slots; ++s) {
            tma::mbar_init(bar_addr(&full[s]), 1);
            tma::mbar_init(bar_addr(&empty[s]), static_cast<uint32_t>(group_warps));  // one group consumes a row
        }
        tma::fence_mbar_init();
    }
    __syncthreads();
    if (warp == consumer_warps) {  // producer: rows in token order, each into the next slot once it is free
        if (lane == 0) {
            const uint32_t slots_base = bar_addr(reinterpret_cast<uint64_t*>(mix_slots));
            int s = 0;
            uint32_t phase = 0;  // of the slot's fills: fill k waits for the consumers' release k - 1
            bool first_round = true;
            for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x) {
                for (int i = 0; i < n_cand; ++i) {
                    if (!first_round) tma::mbar_wait_sleep(bar_addr(&empty[s]), phase ^ 1u);
                    tma::mbar_expect_tx(bar_addr(&full[s]), row_bytes);
                    tma::load_1d(slots_base + s * row_bytes, row_src(t, i), row_bytes, bar_addr(&full[s]));
                    if (++s == n_slots) {
                        s = 0;
                        phase ^= 1u;
                        first_round = false;
                    }
                }
            }
        }
        return;  // each consumer group synchronises on its own named barrier (1 + group) from here on
    }
    const int group = warp / group_warps, gtid = tid - group * group_threads, gwarp = warp - group * group_warps;
    const int bar_id = 1 + group;
    double* group_weights = weights[group];
    // The ring position of this group's next token's first row: the block's token j starts at row j * n_cand.
    int s0 = 0;                           // its slot
    uint32_t phase0 = 0;                  // its fill's parity
    const auto advance = [&](int rows) {  // rows <= n_slots
        s0 += rows;
        if (s0 >= n_slots) {
            s0 -= n_slots;
            phase0 ^= 1u;
        }
    };
    for (int g = 0; g < group; ++g) advance(n_cand);
    float qw[kPer][V];  // query * norm_weight over this thread's chunks, the same for every token
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int64_t c = gtid + static_cast<int64_t>(k) * group_threads;
        float q[V] = {}, w[V] = {};
        if (c < n_chunks) {
            load_chunk<float, V, true>(a.query, c * V, a.hidden, q);
            load_chunk<float, V, true>(a.norm_weight, c * V, a.hidden, w);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) qw[k][e] = q[e] * w[e];
    }
    const int64_t token_step = static_cast<int64_t>(kMixWsGroups) * gridDim.x;
    for (int64_t t = blockIdx.x + static_cast<int64_t>(group) * gridDim.x; t < a.n_tokens; t += token_step) {
        float ss[kMaxCand] = {}, dot[kMaxCand] = {};
        {
            int s = s0;
            uint32_t phase = phase0;
#pragma unroll
            for (int i = 0; i < kMaxCand; ++i) {
                if (i < n_cand) {
                    tma::mbar_wait_sleep(bar_addr(&full[s]), phase);
                    const bf16* x = reinterpret_cast<const bf16*>(mix_slots) + static_cast<int64_t>(s) * a.hidden;
#pragma unroll
                    for (int k = 0; k < kPer; ++k) {
                        const int64_t c = gtid + static_cast<int64_t>(k) * group_threads;
                        if (c < n_chunks) {
                            const MixPack p = *reinterpret_cast<const MixPack*>(x + c * V);
#pragma unroll
                            for (int e = 0; e < V; ++e) {
                                const float xa = __bfloat162float(p.v[e]);
                                ss[i] = fmaf(xa, xa, ss[i]);
                                dot[i] = fmaf(qw[k][e], xa, dot[i]);
                            }
                        }
                    }
                    if (++s == n_slots) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < kMaxCand; ++i) {
            if (i < n_cand) {
                store_warp_partials(ss[i], dot[i], partials[warp] + 2 * i, lane);
            }
        }
        tma::named_sync(bar_id, group_threads);
        if (gwarp == 0) {  // logits and softmax on lanes [0, n_cand) of the group's first warp
            double logit = -INFINITY;
            if (lane < n_cand) {
                double sum_ss = 0.0, sum_dot = 0.0;
                for (int w = group * group_warps; w < (group + 1) * group_warps; ++w) {  // fixed order
                    sum_ss += partials[w][2 * lane];
                    sum_dot += partials[w][2 * lane + 1];
                }
                logit = sum_dot / sqrt(sum_ss / static_cast<double>(a.hidden) + a.eps);
            }
            double mx = logit;
#pragma unroll
            for (int o = 16; o > 0; o /= 2) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const double e = lane < n_cand ? exp(logit - mx) : 0.0;
            double denom = e;
#pragma unroll
            for (int o = 16; o > 0; o /= 2) denom += __shfl_xor_sync(0xffffffffu, denom, o);
            if (lane < n_cand) group_weights[lane] = e / denom;
        }
        tma::named_sync(bar_id, group_threads);
        // The mix, candidate by candidate (each element still sums in candidate order), freeing each slot after use.
        // partials is next written, and weights next read, only after every consumer of the group passed this token's
        // barriers. The other groups' tokens sit between this one's and the group's next in the ring.
        float acc[kPer][V] = {};
#pragma unroll
        for (int i = 0; i < kMaxCand; ++i) {
            if (i < n_cand) {
                const bf16* x = reinterpret_cast<const bf16*>(mix_slots) + static_cast<int64_t>(s0) * a.hidden;
                const auto wi = static_cast<float>(group_weights[i]);
#pragma unroll
                for (int k = 0; k < kPer; ++k) {
                    const int64_t c = gtid + static_cast<int64_t>(k) * group_threads;
                    if (c < n_chunks) {
                        const MixPack p = *reinterpret_cast<const MixPack*>(x + c * V);
#pragma unroll
                        for (int e = 0; e < V; ++e) acc[k][e] = fmaf(wi, __bfloat162float(p.v[e]), acc[k][e]);
                    }
                }
                __syncwarp();
                if (lane == 0) tma::mbar_arrive(bar_addr(&empty[s0]));
                advance(1);
            }
        }
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int64_t c = gtid + static_cast<int64_t>(k) * group_threads;
            if (c < n_chunks) store_bf16x8(a.out + t * a.out0 + c * V, acc[k]);
        }
        for (int g = 1; g < kMixWsGroups; ++g) advance(n_cand);  // past the other groups' tokens
    }
}

unsigned row_blocks(int64_t n_rows, int rows_per_block) {
    int64_t b = (n_rows + rows_per_block - 1) / rows_per_block;
    if (b > 65536) b = 65536;  // grid-stride loops cover the rest
    return static_cast<unsigned>(b > 0 ? b : 1);
}

// Launches attn_res_mix_ws_kernel where it applies: hidden % 8 == 0 (rows of whole 16-byte units), at most
// kMixWsMaxCand candidates and a ring of at least one token's rows within kMixWsSmemBytes, at most 4 chunks per
// consumer thread. One block per SM. False: the two-pass kernel runs instead.
template <int kPer, int kMaxCand>
void launch_mix_ws(const MixWsArgs& m, int threads, cudaStream_t s) {
    auto kernel = attn_res_mix_ws_kernel<kPer, kMaxCand>;
    const auto smem = static_cast<int>(m.n_slots * m.a.hidden * 2);
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const auto grid = static_cast<unsigned>(std::min<int64_t>(m.a.n_tokens, current_device_sms()));
    kernel<<<grid, threads, smem, s>>>(m);
}

template <int kMaxCand>
bool launch_mix_ws_cand(const MixWsArgs& m, cudaStream_t s) {
    const int64_t n_chunks = m.a.hidden / kRowVec;
    const auto group = [&](int per) { return ((n_chunks + per - 1) / per + 31) / 32 * 32; };  // threads of a group
    const auto fits = [&](int per) { return kMixWsGroups * group(per) + 32 <= mix_ws_max_threads(per, kMaxCand); };
    const auto threads = [&](int per) { return static_cast<int>(kMixWsGroups * group(per) + 32); };
    if (fits(1)) {
        launch_mix_ws<1, kMaxCand>(m, threads(1), s);
    } else if (fits(2)) {
        launch_mix_ws<2, kMaxCand>(m, threads(2), s);
    } else if (fits(4)) {
        launch_mix_ws<4, kMaxCand>(m, threads(4), s);
    } else {
        return false;
    }
    return true;
}

bool launch_attn_res_mix_ws(const MixArgs<bf16, bf16>& a, cudaStream_t s) {
    const int n_cand = a.n_blocks + 1;
    const int64_t row_bytes = a.hidden * 2;
    const int64_t slots = std::min<int64_t>(kMixWsSmemBytes / std::max<int64_t>(row_bytes, 1), kMixWsMaxSlots);
    if (a.hidden % kRowVec != 0 || n_cand > kMixWsMaxCand || slots < n_cand) return false;
    const MixWsArgs m{.a = a, .n_slots = static_cast<int>(slots)};
    if (n_cand <= 4) return launch_mix_ws_cand<4>(m, s);
    if (n_cand <= 9) return launch_mix_ws_cand<9>(m, s);
    return launch_mix_ws_cand<kMixWsMaxCand>(m, s);
}

}  // namespace

void sigmoid(const kernels::SigmoidParams& p, void* stream) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << "sigmoid: in " << p.in.shape_string();
    const int64_t n_rows = p.in.size(0), dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, "sigmoid", "in");
    check_rows(p.out, n_rows, dim, "sigmoid", "out");
    const BinaryRows<float, float, float> e{.out = p.out.ptr<float>(),
                                            .a = p.in.ptr<const float>(),
                                            .b = nullptr,
                                            .out0 = p.out.stride(0),
                                            .a0 = p.in.stride(0),
                                            .b0 = 0,
                                            .n_rows = n_rows,
                                            .dim = dim};
    launch_binary_rows(e, SigmoidOp{}, rows_vectorizable(p.in) && rows_vectorizable(p.out),
                       static_cast<cudaStream_t>(stream));
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void sigmoid_gate(const kernels::SigmoidGateParams& p, void* stream) {
    const char* op = "sigmoid_gate";
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << op << ": in " << p.in.shape_string();
    const int64_t n_rows = p.in.size(0), dim = p.in.size(1);
    PENSTOCK_CHECK(is_float_dtype(p.in.dtype) && is_float_dtype(p.gate.dtype))
        << op << ": in and gate must be f32 or bf16, got " << dtype_name(p.in.dtype) << " / "
        << dtype_name(p.gate.dtype);
    check_rows(p.in, n_rows, dim, p.in.dtype, op, "in");
    check_rows(p.gate, n_rows, dim, p.gate.dtype, op, "gate");
    check_rows(p.out, n_rows, dim, p.in.dtype, op, "out");
    launch_gated<SigmoidGateOp>(p.out, p.in, p.gate, op, stream);
}

void situ_mul_variant(const kernels::SituMulParams& p, SituMath math, void* stream) {
    const char* op = "situ_mul";
    PENSTOCK_CHECK_EQ(p.gate.ndim, 2) << op << ": gate " << p.gate.shape_string();
    const int64_t n_rows = p.gate.size(0), dim = p.gate.size(1);
    PENSTOCK_CHECK(is_float_dtype(p.gate.dtype))
        << op << ": gate must be f32 or bf16, got " << dtype_name(p.gate.dtype);
    check_rows(p.gate, n_rows, dim, p.gate.dtype, op, "gate");
    check_rows(p.up, n_rows, dim, p.gate.dtype, op, "up");
    check_rows(p.out, n_rows, dim, p.gate.dtype, op, "out");
    PENSTOCK_CHECK(p.beta > 0.0f && p.linear_beta > 0.0f) << op << ": betas must be > 0";
    const float inv_beta = 1.0f / p.beta, inv_linear_beta = 1.0f / p.linear_beta;
    switch (math) {
        case SituMath::kRational:
            launch_gated<SituWith<SituMath::kRational>::Op>(p.out, p.gate, p.up, op, stream, p.beta, p.linear_beta,
                                                             inv_beta, inv_linear_beta);
            return;
        case SituMath::kTanhApprox:
            launch_gated<SituWith<SituMath::kTanhApprox>::Op>(p.out, p.gate, p.up, op, stream, p.beta,
                                                               p.linear_beta, inv_beta, inv_linear_beta);
            return;
    }
}

void situ_mul(const kernels::SituMulParams& p, void* stream) { situ_mul_variant(p, kDefaultSituMath, stream); }

void short_conv(const kernels::ShortConvParams& p, void* stream) {
    const char* op = "short_conv";
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << op << ": in " << p.in.shape_string();
    const int64_t n_tokens = p.in.size(0), channels = p.in.size(1);
    check_rows(p.in, n_tokens, channels, op, "in");
    check_rows(p.out, n_tokens, channels, op, "out");
    PENSTOCK_CHECK(p.weight.ndim == 2 && p.weight.is_contiguous() && p.weight.size(0) == channels &&
                   p.weight.dtype == DType::kF32)
        << op << ": weight [channels, kernel] f32 contiguous, got " << p.weight.shape_string();
    check_on_gpu(p.weight, op, "weight");
    const int64_t kernel = p.weight.size(1);
    PENSTOCK_CHECK(kernel >= 1 && kernel <= kMaxConvKernel) << op << ": kernel " << kernel;
    check_on_gpu(p.conv_state, op, "conv_state");
    PENSTOCK_CHECK(p.conv_state.ndim == 3 && p.conv_state.is_contiguous() && p.conv_state.dtype == DType::kF32 &&
                   p.conv_state.size(1) == kernel - 1 && p.conv_state.size(2) == channels)
        << op << ": conv_state [n_slots, kernel - 1, channels] f32 contiguous, got " << p.conv_state.shape_string();
    check_on_gpu(p.cu_seqlens, op, "cu_seqlens");
    check_on_gpu(p.state_slots, op, "state_slots");
    PENSTOCK_CHECK(p.cu_seqlens.ndim == 1 && p.cu_seqlens.dtype == DType::kI32 && p.cu_seqlens.is_contiguous())
        << op << ": cu_seqlens [n_seqs + 1] i32";
    const int64_t n_seqs = p.cu_seqlens.size(0) - 1;
    PENSTOCK_CHECK(n_seqs >= 0 && p.state_slots.ndim == 1 && p.state_slots.dtype == DType::kI32 &&
                   p.state_slots.size(0) == n_seqs && p.state_slots.is_contiguous())
        << op << ": state_slots [n_seqs] i32";
    if (n_seqs == 0 || channels == 0) return;
    ConvArgs a{.out = p.out.ptr<float>(),
               .in = p.in.ptr<const float>(),
               .weight = p.weight.ptr<const float>(),
               .state = p.conv_state.ptr<float>(),
               .cu = p.cu_seqlens.ptr<const int32_t>(),
               .slots = p.state_slots.ptr<const int32_t>(),
               .out0 = p.out.stride(0),
               .in0 = p.in.stride(0),
               .n_tokens = n_tokens,
               .channels = channels,
               .n_seqs = static_cast<int>(n_seqs),
               .kernel = static_cast<int>(kernel),
               .silu = p.silu};
    const auto s = static_cast<cudaStream_t>(stream);
    PENSTOCK_CHECK(p.norm_channels == 0 ||
                   (p.norm_dim > 0 && p.norm_channels % p.norm_dim == 0 && p.norm_channels <= channels))
        << op << ": norm_channels " << p.norm_channels << " in groups of " << p.norm_dim << " of " << channels;
    // The vectorised kernel: kernel 2..4, 16-byte aligned rows of whole float4s. It fuses the norm for heads of
    // 4 * 2^i <= 128 channels; other heads take the unfused sequence, exactly as a caller would run it: this op
    // without the norm (the same kernel choice), then l2norm (SPEC section 2: the fused form is bit for bit that).
    const bool vec = kernel >= 2 && kernel <= 4 && channels % 4 == 0 && p.in.stride(0) % 4 == 0 &&
                     p.out.stride(0) % 4 == 0 && is_aligned16(p.in.ptr<const float>()) &&
                     is_aligned16(p.out.ptr<float>()) && is_aligned16(p.conv_state.ptr<float>());
    const int head_lanes = head_lanes_4wide(p.norm_dim);
    const bool fuse_norm = p.norm_channels > 0 && vec && head_lanes > 0;
    const int lanes = fuse_norm ? head_lanes : 0;
    const int64_t fused_norm_channels = fuse_norm ? p.norm_channels : 0;
    if (n_tokens > 0 && vec) {
        const int64_t warps = ((n_tokens + kConvRun - 1) / kConvRun) * ((channels + 127) / 128);
        const auto blocks = static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads);
        const auto launch = [&](auto batch) {
            constexpr int kB = decltype(batch)::value;
            switch (kernel) {
                case 2:
                    short_conv_vec_kernel<2, kB><<<blocks, kThreads, 0, s>>>(a, fused_norm_channels, lanes, p.norm_eps);
                    break;
                case 3:
                    short_conv_vec_kernel<3, kB><<<blocks, kThreads, 0, s>>>(a, fused_norm_channels, lanes, p.norm_eps);
                    break;
                default:
                    short_conv_vec_kernel<4, kB><<<blocks, kThreads, 0, s>>>(a, fused_norm_channels, lanes, p.norm_eps);
                    break;
            }
        };
        if (membw_baseline()) {
            launch(std::integral_constant<int, 1>{});
        } else {
            launch(std::integral_constant<int, kConvBatch>{});
        }
        PENSTOCK_CUDA_LAUNCH_CHECK();
    } else if (n_tokens > 0) {
        short_conv_kernel<<<blocks_for(n_tokens * channels, kThreads), kThreads, 0, s>>>(a);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    }
    if (n_tokens > 0 && p.norm_channels > 0 && !fuse_norm) {
        const int64_t heads = p.norm_channels / p.norm_dim;
        const TensorView v = p.out.as_strided(0, {n_tokens, heads, p.norm_dim}, {p.out.stride(0), p.norm_dim, 1});
        l2norm({.out = v, .in = v, .eps = p.norm_eps}, stream);
    }
    if (kernel > 1) {
        short_conv_state_kernel<<<blocks_for(n_seqs * channels, kThreads), kThreads, 0, s>>>(a);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    }
}

void l2norm(const kernels::L2NormParams& p, void* stream) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 3) << "l2norm: in " << p.in.shape_string();
    const int64_t n_tokens = p.in.size(0), n_heads = p.in.size(1), dim = p.in.size(2);
    check_3d(p.in, n_tokens, n_heads, dim, "l2norm", "in");
    check_3d(p.out, n_tokens, n_heads, dim, "l2norm", "out");
    if (n_tokens * n_heads == 0) return;
    const L2Args a{.out = p.out.ptr<float>(),
                   .in = p.in.ptr<const float>(),
                   .o0 = p.out.stride(0),
                   .o1 = p.out.stride(1),
                   .i0 = p.in.stride(0),
                   .i1 = p.in.stride(1),
                   .n_tokens = n_tokens,
                   .n_heads = n_heads,
                   .dim = dim,
                   .eps = p.eps};
    const auto s = static_cast<cudaStream_t>(stream);
    // The 4-wide kernel (the fused short_conv norm's arithmetic) where the heads allow it, as short_conv's own test.
    const int lanes = head_lanes_4wide(dim);
    const auto al4 = [](int64_t stride) { return stride % 4 == 0; };
    if (lanes > 0 && is_aligned16(a.in) && is_aligned16(a.out) && al4(a.i0) && al4(a.i1) && al4(a.o0) && al4(a.o1) &&
        n_tokens * n_heads * lanes < (int64_t{1} << 31)) {
        const int shift = lanes_log2(lanes);
        const auto blocks = static_cast<unsigned>((n_tokens * n_heads * lanes + kThreads - 1) / kThreads);
        l2norm_vec_kernel<<<blocks, kThreads, 0, s>>>(a, DivU32(static_cast<uint32_t>(n_heads)), lanes, shift);
    } else {
        l2norm_kernel<<<row_blocks(n_tokens * n_heads, kThreads / 32), kThreads, 0, s>>>(a);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void kda_gate(const kernels::KdaGateParams& p, void* stream) {
    const char* op = "kda_gate";
    PENSTOCK_CHECK_EQ(p.f.ndim, 3) << op << ": f " << p.f.shape_string();
    const int64_t n_tokens = p.f.size(0), n_heads = p.f.size(1), head_dim = p.f.size(2);
    check_3d(p.f, n_tokens, n_heads, head_dim, op, "f");
    check_3d(p.out, n_tokens, n_heads, head_dim, op, "out");
    PENSTOCK_CHECK(p.f.is_contiguous() && p.out.is_contiguous()) << op << ": contiguous f and out";
    check_vec(p.a_log, n_heads, op, "a_log");
    check_vec(p.dt_bias, n_heads * head_dim, op, "dt_bias");
    const int64_t n = n_tokens * n_heads * head_dim;
    if (n == 0) return;
    const int64_t row = n_heads * head_dim;
    const bool lb = p.form == kernels::KdaGateForm::kLowerBound;
    const auto s = static_cast<cudaStream_t>(stream);
    if (head_dim % 4 == 0 && row < (int64_t{1} << 31) && is_aligned16(p.f.data) && is_aligned16(p.out.data) &&
        is_aligned16(p.dt_bias.data)) {
        const auto blocks = static_cast<unsigned>(std::min<int64_t>(n_tokens, 65535));
        kda_gate_vec_kernel<<<blocks, kThreads, 0, s>>>(
            p.out.ptr<float>(), p.f.ptr<const float>(), p.a_log.ptr<const float>(), p.dt_bias.ptr<const float>(),
            n_tokens, static_cast<int>(row / 4), static_cast<int>(head_dim), lb, p.lower_bound);
    } else {
        kda_gate_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(
            p.out.ptr<float>(), p.f.ptr<const float>(), p.a_log.ptr<const float>(), p.dt_bias.ptr<const float>(), n,
            row, head_dim, lb, p.lower_bound);
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void gated_rms_norm(const kernels::GatedRmsNormParams& p, void* stream) {
    const char* op = "gated_rms_norm";
    PENSTOCK_CHECK_EQ(p.in.ndim, 2) << op << ": in " << p.in.shape_string();
    const int64_t n_rows = p.in.size(0), dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, op, "in");
    check_rows(p.gate, n_rows, dim, op, "gate");
    PENSTOCK_CHECK(is_float_dtype(p.out.dtype)) << op << ": out must be f32 or bf16";
    check_rows(p.out, n_rows, dim, p.out.dtype, op, "out");
    check_vec(p.weight, dim, op, "weight");
    const bool quant = p.quant_out.data != nullptr;
    if (quant) {
        const TensorView rows = kernels::gated_norm_quant_rows(p);  // checks quant_heads against out
        check_on_gpu(p.quant_out, op, "quant_out");
        check_on_gpu(p.quant_scale, op, "quant_scale");
        const int64_t nt = rows.size(0), width = rows.size(1), kb = (width + 127) / 128;
        PENSTOCK_CHECK(p.quant_out.ndim == 2 && p.quant_out.size(0) == nt && p.quant_out.size(1) == width &&
                       p.quant_out.dtype == DType::kF8E4M3 && p.quant_out.stride(1) == 1)
            << op << ": quant_out " << p.quant_out.shape_string() << " " << dtype_name(p.quant_out.dtype)
            << ", expected [" << nt << ", " << width << "] f8e4m3 with contiguous rows";
        PENSTOCK_CHECK(p.quant_scale.ndim == 2 && p.quant_scale.size(0) == nt && p.quant_scale.size(1) == kb &&
                       p.quant_scale.dtype == DType::kF32)
            << op << ": quant_scale " << p.quant_scale.shape_string() << ", expected [" << nt << ", " << kb << "] f32";
    }
    if (n_rows == 0) return;
    bool fused = false;
    dispatch_float(p.out.dtype, op, [&](auto to) {
        using TO = decltype(to);
        GatedNormArgs<TO> a{.out = p.out.ptr<TO>(),
                            .in = p.in.ptr<const float>(),
                            .gate = p.gate.ptr<const float>(),
                            .weight = p.weight.ptr<const float>(),
                            .o0 = p.out.stride(0),
                            .i0 = p.in.stride(0),
                            .g0 = p.gate.stride(0),
                            .n_rows = n_rows,
                            .dim = dim,
                            .eps = p.eps};
        const auto s = static_cast<cudaStream_t>(stream);
        const int lanes = head_lanes_4wide(dim);
        const auto al4 = [](int64_t stride) { return stride % 4 == 0; };
        if (lanes > 0 && is_aligned16(a.in) && is_aligned16(a.gate) && is_aligned16(a.weight) &&
            reinterpret_cast<uintptr_t>(a.out) % (4 * sizeof(TO)) == 0 && al4(a.i0) && al4(a.g0) && al4(a.o0)) {
            const int shift = lanes_log2(lanes);
            // One quantisation group per row: 128 channels (32 lanes), 4-byte aligned e4m3 rows.
            const bool fuse_quant = quant && dim == 128 && n_rows < (int64_t{1} << 31) &&
                                    reinterpret_cast<uintptr_t>(p.quant_out.data) % 4 == 0 &&
                                    p.quant_out.stride(0) % 4 == 0;
            const int64_t threads_needed = ((n_rows + kNormBatch - 1) / kNormBatch) * lanes;
            const auto blocks =
                static_cast<unsigned>(std::min<int64_t>((threads_needed + kThreads - 1) / kThreads, int64_t{1} << 20));
            if (fuse_quant) {
                a.q = p.quant_out.ptr<uint8_t>();
                a.q_scale = p.quant_scale.ptr<float>();
                a.q0 = p.quant_out.stride(0);
                a.qs0 = p.quant_scale.stride(0);
                a.qs1 = p.quant_scale.stride(1);
                a.q_heads = static_cast<int>(p.quant_heads);
                a.store_out = !p.out_scratch;
                gated_rms_norm_vec_kernel<TO, true><<<blocks, kThreads, 0, s>>>(a, lanes, shift);
            } else {
                gated_rms_norm_vec_kernel<TO, false><<<blocks, kThreads, 0, s>>>(a, lanes, shift);
            }
            fused = fuse_quant;
        } else {
            gated_rms_norm_kernel<TO><<<row_blocks(n_rows, kThreads / 32), kThreads, 0, s>>>(a);
        }
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
    // Off the fused path the quantiser reads the finished out (the same bytes, one pass more).
    if (quant && !fused) {
        fp8_act_quant({.out = p.quant_out, .scale = p.quant_scale, .in = kernels::gated_norm_quant_rows(p)}, stream);
    }
}

void attn_res_mix(const kernels::AttnResMixParams& p, void* stream) {
    const char* op = "attn_res_mix";
    PENSTOCK_CHECK_EQ(p.partial.ndim, 2) << op << ": partial " << p.partial.shape_string();
    const int64_t n_tokens = p.partial.size(0), hidden = p.partial.size(1);
    PENSTOCK_CHECK(is_float_dtype(p.partial.dtype)) << op << ": partial must be f32 or bf16";
    check_rows(p.partial, n_tokens, hidden, p.partial.dtype, op, "partial");
    check_rows(p.out, n_tokens, hidden, p.partial.dtype, op, "out");
    PENSTOCK_CHECK_EQ(p.bank.ndim, 3) << op << ": bank " << p.bank.shape_string();
    const int64_t n_blocks = p.bank.size(1);
    PENSTOCK_CHECK(is_float_dtype(p.bank.dtype)) << op << ": bank must be f32 or bf16";
    if (n_blocks > 0) {
        check_on_gpu(p.bank, op, "bank");
        PENSTOCK_CHECK(p.bank.size(0) == n_tokens && p.bank.size(2) == hidden && (p.bank.stride(2) == 1 || hidden <= 1))
            << op << ": bank must be [" << n_tokens << ", n_blocks, " << hidden << "], last dim contiguous, got "
            << p.bank.shape_string();
    }
    check_vec(p.query, hidden, op, "query");
    check_vec(p.norm_weight, hidden, op, "norm_weight");
    PENSTOCK_CHECK_LT(n_blocks, kMaxCandidates) << op << ": n_blocks";
    if (n_tokens == 0) return;
    const auto es = [](DType d) { return static_cast<int64_t>(dtype_bytes(d, 1)); };
    const bool bank_vec =
        n_blocks == 0 || (is_aligned16(p.bank.data) && (p.bank.stride(0) * es(p.bank.dtype)) % 16 == 0 &&
                          (p.bank.stride(1) * es(p.bank.dtype)) % 16 == 0);
    const bool vec = bank_vec && rows_vectorizable(p.partial) && rows_vectorizable(p.out) &&
                     is_aligned16(p.query.data) && is_aligned16(p.norm_weight.data);
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.partial.dtype, op, [&](auto tp) {
        using T = decltype(tp);
        dispatch_float(p.bank.dtype, op, [&](auto tb) {
            using B = decltype(tb);
            const MixArgs<T, B> a{.out = p.out.ptr<T>(),
                                  .bank = n_blocks > 0 ? p.bank.ptr<const B>() : nullptr,
                                  .partial = p.partial.ptr<const T>(),
                                  .query = p.query.ptr<const float>(),
                                  .norm_weight = p.norm_weight.ptr<const float>(),
                                  .out0 = p.out.stride(0),
                                  .b0 = n_blocks > 0 ? p.bank.stride(0) : 0,
                                  .b1 = n_blocks > 0 ? p.bank.stride(1) : 0,
                                  .p0 = p.partial.stride(0),
                                  .n_tokens = n_tokens,
                                  .hidden = hidden,
                                  .n_blocks = static_cast<int>(n_blocks),
                                  .eps = p.eps};
            if constexpr (std::is_same_v<T, bf16> && std::is_same_v<B, bf16>) {
                if (vec && !membw_baseline() && launch_attn_res_mix_ws(a, s)) return;
            }
            if (vec) {
                attn_res_mix_kernel<T, B, true><<<row_blocks(n_tokens, 1), kMixThreads, 0, s>>>(a);
            } else {
                attn_res_mix_kernel<T, B, false><<<row_blocks(n_tokens, 1), kMixThreads, 0, s>>>(a);
            }
        });
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
