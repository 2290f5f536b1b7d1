// Varlen attention on the GPU: a tiled flash-attention-style kernel (online softmax, fp32 accumulation), same
// contract as kernels/ref/attention.cc (AttentionParams): varlen via cu_seqlens_q/k, GQA/MQA head groups, causal mask
// in absolute positions (q_pos0/k_pos0), strides on dims 0/1, d_qk up to 576 and d_v up to 512 (the MLA absorbed form),
// lse output, rows that see no key -> out 0 and lse -inf. q/k/v f32 or bf16 (one dtype), out the same dtype as q,
// lse f32.
//
// Mapping: block = kWarps query rows of one sequence and one head (grid.y = head); warp w owns query row w of the tile.
// Blocks walk the sequences' query tiles: grid.x = ceil(total_q / kWarps) + n_seqs is an upper bound on
// sum_s ceil(len_q(s) / kWarps), and each block finds its (sequence, tile) by a scan over cu_seqlens_q (no host read
// of device metadata, so the launch is graph capturable). Key tiles of kKeys rows of K and V are staged in shared
// memory as fp32 (K rows padded by one float so lane j reading key j is conflict free); lane j computes the score of
// key j of the tile, the warp updates the running max / sum, and each lane accumulates d_v / 32 output columns.
// CUDA cores only: correct first.
// Calls whose mask the caller promised (AttentionParams::mask_kind) go to Penstock's bf16 wgmma kernel first
// (attention_bf16_wgmma.h: sm_90, the common head dims), then to cuDNN's SDPA when the build has it
// (attention_cudnn.h); this kernel runs whatever those paths decline.
// The bf16 MLA absorbed form goes to the tensor-core kernel of mla_tc.h (after the shape checks below).
// FP8 q / k / v (per-tensor descales, kernels/ops.h) go to Penstock's FP8 wgmma kernel (attention_fp8_wgmma.h), else
// cuDNN's FP8 SDPA, else through bf16 copies (attention_fp8).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kernels/cuda/attention_bf16_wgmma.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_fp8_wgmma.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/mla_tc.h"

namespace penstock::cuda {

namespace {

constexpr int kWarps = 8;  // query rows per block
constexpr int kKeys = 32;  // keys per tile (one per lane)
constexpr int kMaxDqk = 576;
constexpr int kMaxDv = 512;

struct AttnArgs {
    const void* q;
    const void* k;
    const void* v;
    void* out;
    float* lse;
    const int32_t* cu_q;
    const int32_t* cu_k;
    const int32_t* q_pos0;
    const int32_t* k_pos0;
    int n_seqs;
    int n_heads;
    int group;  // n_heads / n_kv_heads
    int d_qk;
    int d_v;
    int64_t q0, q1, k0, k1, v0, v1, o0, o1, l0, l1;  // strides (elements)
    float scale;
    bool causal;
    int q_pos_step;
};

template <class T, int kDvPerLane>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttnArgs a) {
    extern __shared__ float attn_smem[];
    const int d_qk = a.d_qk;
    const int d_v = a.d_v;
    const int k_pitch = d_qk + 1;
    float* q_s = attn_smem;              // [kWarps][d_qk]
    float* k_s = q_s + kWarps * d_qk;    // [kKeys][d_qk + 1]
    float* v_s = k_s + kKeys * k_pitch;  // [kKeys][d_v]
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int h = static_cast<int>(blockIdx.y);
    const int kvh = h / a.group;

    // Find this block's (sequence, tile).
    int tile = static_cast<int>(blockIdx.x);
    int s = 0;
    for (; s < a.n_seqs; ++s) {
        const int len = a.cu_q[s + 1] - a.cu_q[s];
        const int tiles = (len + kWarps - 1) / kWarps;
        if (tile < tiles) break;
        tile -= tiles;
    }
    if (s >= a.n_seqs) return;  // a spare block of the upper bound (uniform across the block)
    const int q_begin = a.cu_q[s];
    const int len_q = a.cu_q[s + 1] - q_begin;
    const int k_begin = a.cu_k[s];
    const int len_k = a.cu_k[s + 1] - k_begin;
    const int64_t qp0 = a.q_pos0[s];
    const int64_t kp0 = a.k_pos0[s];
    const int i_first = tile * kWarps;
    const int i_last = min(i_first + kWarps, len_q) - 1;  // last query row of the tile (sequence-relative)

    auto visible = [&](int i) -> int {  // keys visible to sequence row i: a prefix [0, n)
        if (!a.causal) return len_k;
        const int64_t n = qp0 + static_cast<int64_t>(i) * a.q_pos_step - kp0 + 1;
        return static_cast<int>(n < 0 ? 0 : (n > len_k ? len_k : n));
    };
    const int block_keys = visible(i_last);  // visibility grows with i
    const int i = i_first + warp;
    const bool row_ok = i <= i_last;
    const int n_vis = row_ok ? visible(i) : 0;
    const int64_t r = static_cast<int64_t>(q_begin) + i;

    const T* qg = static_cast<const T*>(a.q);
    const T* kg = static_cast<const T*>(a.k);
    const T* vg = static_cast<const T*>(a.v);
    if (row_ok) {
        const T* qrow = qg + r * a.q0 + static_cast<int64_t>(h) * a.q1;
        for (int c = lane; c < d_qk; c += 32) q_s[warp * d_qk + c] = to_f32(qrow[c]);
    }

    float m = -INFINITY;  // running max of scores (scaled)
    float l = 0.0f;       // running sum of exp(score - m)
    float acc[kDvPerLane];
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) acc[t] = 0.0f;

    for (int j0 = 0; j0 < block_keys; j0 += kKeys) {
        __syncthreads();  // previous tile consumed (and q_s written, on the first pass)
        const int n_tile = min(kKeys, block_keys - j0);
        for (int idx = static_cast<int>(threadIdx.x); idx < kKeys * d_qk; idx += kWarps * 32) {
            const int key = idx / d_qk;
            const int c = idx % d_qk;
            float x = 0.0f;
            if (key < n_tile) {
                x = to_f32(kg[static_cast<int64_t>(k_begin + j0 + key) * a.k0 + static_cast<int64_t>(kvh) * a.k1 + c]);
            }
            k_s[key * k_pitch + c] = x;
        }
        for (int idx = static_cast<int>(threadIdx.x); idx < kKeys * d_v; idx += kWarps * 32) {
            const int key = idx / d_v;
            const int c = idx % d_v;
            float x = 0.0f;
            if (key < n_tile) {
                x = to_f32(vg[static_cast<int64_t>(k_begin + j0 + key) * a.v0 + static_cast<int64_t>(kvh) * a.v1 + c]);
            }
            v_s[key * d_v + c] = x;
        }
        __syncthreads();
        if (!row_ok || j0 >= n_vis) continue;  // warp-uniform; the barriers above still see every thread

        const bool vis = j0 + lane < n_vis;
        float score = -INFINITY;
        if (vis) {
            const float* qv = q_s + warp * d_qk;
            const float* kv = k_s + lane * k_pitch;
            float dot = 0.0f;
            for (int c = 0; c < d_qk; ++c) dot = fmaf(qv[c], kv[c], dot);
            score = dot * a.scale;
        }
        const float m_new = fmaxf(m, warp_reduce_max(score));  // finite: key j0 is visible (j0 < n_vis)
        const float p = vis ? expf(score - m_new) : 0.0f;
        const float corr = expf(m - m_new);  // 0 on the first visible tile (m = -inf)
        l = l * corr + warp_reduce_sum(p);
#pragma unroll
        for (int t = 0; t < kDvPerLane; ++t) acc[t] *= corr;
        const int n_keys = min(kKeys, n_vis - j0);
        for (int jj = 0; jj < n_keys; ++jj) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            const float* vrow = v_s + jj * d_v;
#pragma unroll
            for (int t = 0; t < kDvPerLane; ++t) {
                const int c = lane + 32 * t;
                if (c < d_v) acc[t] = fmaf(pj, vrow[c], acc[t]);
            }
        }
        m = m_new;
    }

    if (!row_ok) return;
    T* orow = static_cast<T*>(a.out) + r * a.o0 + static_cast<int64_t>(h) * a.o1;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < d_v) orow[c] = from_f32<T>(acc[t] * inv);
    }
    if (lane == 0) a.lse[r * a.l0 + static_cast<int64_t>(h) * a.l1] = l > 0.0f ? m + logf(l) : -INFINITY;
}

void check_3d(const TensorView& v, int64_t n0, int64_t n1, int64_t n2, const char* name) {
    check_on_gpu(v, "attention", name);
    PENSTOCK_CHECK_EQ(v.ndim, 3) << "attention: " << name << " " << v.shape_string();
    PENSTOCK_CHECK(v.size(0) == n0 && v.size(1) == n1 && v.size(2) == n2)
        << "attention: " << name << " " << v.shape_string() << ", expected [" << n0 << ", " << n1 << ", " << n2 << "]";
    PENSTOCK_CHECK(v.stride(2) == 1 || n2 <= 1) << "attention: " << name << " last dim must be contiguous";
}

void check_meta(const TensorView& v, int64_t n, const char* name) {
    check_on_gpu(v, "attention", name);
    PENSTOCK_CHECK(v.ndim == 1 && v.size(0) == n && v.dtype == DType::kI32 && (v.stride(0) == 1 || n <= 1))
        << "attention: " << name << " must be [" << n << "] i32 contiguous, got " << v.shape_string();
}

template <class T, int kDvPerLane>
void launch(const AttnArgs& args, int64_t total_q, cudaStream_t stream) {
    const size_t smem = sizeof(float) * (static_cast<size_t>(kWarps) * static_cast<size_t>(args.d_qk) +
                                         static_cast<size_t>(kKeys) * static_cast<size_t>(args.d_qk + 1) +
                                         static_cast<size_t>(kKeys) * static_cast<size_t>(args.d_v));
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<T, kDvPerLane>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int64_t tiles = (total_q + kWarps - 1) / kWarps + args.n_seqs;
    PENSTOCK_CHECK_LT(tiles, int64_t{1} << 31) << "attention: too many query tiles";
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(args.n_heads));
    attention_kernel<T, kDvPerLane><<<grid, kWarps * 32, smem, stream>>>(args);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

// FP8 attention's scales: out_descale = v_descale * headroom, scale_o = 1 / out_descale (kernels/ops.h).
__global__ void fp8_out_scale_kernel(float* out_descale, float* scale_o, const float* v_descale) {
    const float d = __fmul_rn(*v_descale, kernels::kFp8AttnOutHeadroom);
    *out_descale = d;
    *scale_o = __fdiv_rn(1.0f, d);
}

// The FP8 fallback's widening with per-row descales: out[r, h, :] = e4m3(x[r, h, :]) * descale[r d0 + h d1], one CTA
// row of threads per (r, h) pair; out contiguous.
template <class Out>
__global__ void dequantize_rows_kernel(Out* __restrict__ out, const uint8_t* __restrict__ x, const float* descale,
                                       int64_t n_rows, int64_t heads, int64_t d, int64_t x0, int64_t x1, int64_t d0,
                                       int64_t d1) {
    const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
    if (u >= n_rows * heads) return;
    const int64_t r = u / heads, h = u - r * heads;
    const float s = descale[r * d0 + h * d1];
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        out[u * d + c] = from_f32<Out>(__fmul_rn(e4m3_to_f32_exact(x[r * x0 + h * x1 + c]), s));
    }
}

// FP8 q / k / v (kernels/ops.h): the FP8 wgmma kernel when it takes the call (attention_fp8_wgmma.h: bf16 or FP8 out,
// promised masks, Hopper), else cuDNN's FP8 SDPA (FP8 out, equal lengths: attention_cudnn.h); otherwise the inputs
// are widened to bf16 (device scratch), the bf16 attention runs and an FP8 out is cast back.
void attention_fp8(const kernels::AttentionParams& p, cudaStream_t stream) {
    const char* op = "attention";
    PENSTOCK_CHECK(p.q.dtype == DType::kF8E4M3 && p.k.dtype == DType::kF8E4M3 && p.v.dtype == DType::kF8E4M3)
        << op << ": q, k and v are all f8e4m3 or none is";
    PENSTOCK_CHECK(p.q.ndim == 3 && p.k.ndim == 3 && p.v.ndim == 3 && p.out.ndim == 3) << op << ": 3-d views";
    for (const TensorView* t : {&p.q_descale, &p.k_descale, &p.v_descale}) {
        check_on_gpu(*t, op, "descale");
        PENSTOCK_CHECK(t->dtype == DType::kF32 && t->data != nullptr) << op << ": FP8 q, k, v need f32 descales";
    }
    PENSTOCK_CHECK(p.v_descale.numel() == 1) << op << ": v_descale is per tensor ([1])";
    for (const auto& [x, t] : {std::pair{&p.q, &p.q_descale}, std::pair{&p.k, &p.k_descale}}) {
        PENSTOCK_CHECK(t->numel() == 1 || (t->ndim == 2 && t->size(0) == x->size(0) && t->size(1) == x->size(1)))
            << op << ": q_descale / k_descale must be [1] or [rows, heads], got " << t->shape_string();
    }
    if (p.out_scale.data != nullptr) {  // FP8 out per row and head (kernels/ops.h)
        PENSTOCK_CHECK(p.out.dtype == DType::kF8E4M3) << op << ": out_scale needs an f8e4m3 out";
        const TensorView rows = kernels::fp8_attention_out_rows(p);
        check_on_gpu(p.out_scale, op, "out_scale");
        if (attention_fp8_wgmma(p, nullptr, stream)) return;
        // else the result in out_scale_from (any FP8 path), then its rows' block quantisation
        void* ptr = nullptr;
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(
            &ptr, dtype_bytes(p.out_scale_from, static_cast<size_t>(std::max<int64_t>(rows.numel(), 1))), stream));
        kernels::AttentionParams b = p;
        b.out = TensorView::contiguous(ptr, p.out_scale_from,
                                       std::array<int64_t, 3>{p.out.size(0), p.out.size(1), p.out.size(2)},
                                       Device::kCUDA, p.out.device_index);
        b.out_scale = {};
        attention_fp8(b, stream);
        fp8_act_quant({.out = rows, .scale = p.out_scale, .in = b.out.reshape({rows.size(0), rows.size(1)})}, stream);
        PENSTOCK_CUDA_CHECK(cudaFreeAsync(ptr, stream));
        return;
    }
    const bool fp8_out = p.out.dtype == DType::kF8E4M3;
    float* scale_o = nullptr;
    if (fp8_out) {
        check_on_gpu(p.out_descale, op, "out_descale");
        PENSTOCK_CHECK(p.out_descale.dtype == DType::kF32 && p.out_descale.numel() == 1 &&
                       p.out_descale.data != nullptr)
            << op << ": FP8 out needs a [1] f32 out_descale";
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scale_o), sizeof(float), stream));
        fp8_out_scale_kernel<<<1, 1, 0, stream>>>(p.out_descale.ptr<float>(), scale_o, p.v_descale.ptr<const float>());
        PENSTOCK_CUDA_LAUNCH_CHECK();
        if (attention_fp8_wgmma(p, scale_o, stream) ||
            (p.mask_kind != kernels::AttentionMaskKind::kGeneral && attention_cudnn(p, stream, scale_o))) {
            PENSTOCK_CUDA_CHECK(cudaFreeAsync(scale_o, stream));
            return;
        }
    } else if (attention_fp8_wgmma(p, nullptr, stream)) {
        return;
    }
    // Fallback: bf16 copies of the dequantised inputs (and of the result), f32 ones for an f32 out.
    std::vector<void*> owned;
    const DType wide = p.out.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
    auto widened = [&](const TensorView& x, const TensorView& descale) {
        void* ptr = nullptr;
        const int64_t n = x.size(0) * x.size(1) * x.size(2);
        PENSTOCK_CUDA_CHECK(
            cudaMallocAsync(&ptr, dtype_bytes(wide, static_cast<size_t>(std::max<int64_t>(n, 1))), stream));
        owned.push_back(ptr);
        const std::array<int64_t, 3> shape{x.size(0), x.size(1), x.size(2)};
        TensorView w = TensorView::contiguous(ptr, wide, shape, Device::kCUDA, x.device_index);
        if (descale.numel() == 1) {
            fp8_dequantize_tensor({.out = w, .scale = descale, .in = x}, stream);
            return w;
        }
        const int64_t units = x.size(0) * x.size(1);
        if (units == 0) return w;
        PENSTOCK_CHECK(x.stride(2) == 1 || x.size(2) <= 1) << op << ": last dims must be contiguous";
        const dim3 block(32, 8);
        const auto grid = static_cast<unsigned>((units + 7) / 8);
        auto* xin = static_cast<const uint8_t*>(x.data);
        const auto* ds = descale.ptr<const float>();
        if (wide == DType::kF32) {
            dequantize_rows_kernel<float><<<grid, block, 0, stream>>>(static_cast<float*>(ptr), xin, ds, x.size(0),
                                                                      x.size(1), x.size(2), x.stride(0), x.stride(1),
                                                                      descale.stride(0), descale.stride(1));
        } else {
            dequantize_rows_kernel<bf16><<<grid, block, 0, stream>>>(static_cast<bf16*>(ptr), xin, ds, x.size(0),
                                                                     x.size(1), x.size(2), x.stride(0), x.stride(1),
                                                                     descale.stride(0), descale.stride(1));
        }
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return w;
    };
    kernels::AttentionParams b = p;
    b.q = widened(p.q, p.q_descale);
    b.k = widened(p.k, p.k_descale);
    b.v = widened(p.v, p.v_descale);
    if (fp8_out) {
        void* ptr = nullptr;
        const int64_t n = p.out.size(0) * p.out.size(1) * p.out.size(2);
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(&ptr, static_cast<size_t>(std::max<int64_t>(n, 1)) * 2, stream));
        owned.push_back(ptr);
        const std::array<int64_t, 3> shape{p.out.size(0), p.out.size(1), p.out.size(2)};
        b.out = TensorView::contiguous(ptr, DType::kBF16, shape, Device::kCUDA, p.out.device_index);
    }
    attention(b, stream);
    if (fp8_out) {
        fp8_cast_scaled(p.out, b.out, scale_o, stream);
        PENSTOCK_CUDA_CHECK(cudaFreeAsync(scale_o, stream));
    }
    for (void* ptr : owned) PENSTOCK_CUDA_CHECK(cudaFreeAsync(ptr, stream));
}

}  // namespace

void attention(const kernels::AttentionParams& p, void* stream) {
    if (p.k_rope.data != nullptr) {
        // K = [k ; k_rope] (kernels/ops.h): Penstock's bf16 wgmma kernel loads the two parts itself; every other path
        // gets them concatenated into one k first.
        PENSTOCK_CHECK(p.k.dtype != DType::kF8E4M3 && p.q.dtype != DType::kF8E4M3)
            << "attention: k_rope is not taken with FP8 q / k / v";
        if (p.mask_kind != kernels::AttentionMaskKind::kGeneral &&
            attention_bf16_wgmma(p, static_cast<cudaStream_t>(stream))) {
            return;
        }
        PENSTOCK_CHECK(p.k.ndim == 3 && p.k_rope.ndim == 3 && p.k_rope.size(0) == p.k.size(0) &&
                       p.k_rope.size(1) == p.k.size(1) && p.k_rope.dtype == p.k.dtype)
            << "attention: k_rope " << p.k_rope.shape_string() << " must match k " << p.k.shape_string()
            << " in rows, heads and dtype";
        const auto s = static_cast<cudaStream_t>(stream);
        const int64_t dk = p.k.size(2), dr = p.k_rope.size(2);
        const std::array<int64_t, 3> shape{p.k.size(0), p.k.size(1), dk + dr};
        void* ptr = nullptr;
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(
            &ptr, dtype_bytes(p.k.dtype, static_cast<size_t>(std::max<int64_t>(shape[0] * shape[1] * shape[2], 1))),
            s));
        const TensorView k = TensorView::contiguous(ptr, p.k.dtype, shape, Device::kCUDA, p.k.device_index);
        copy({.out = k.slice(2, 0, dk), .in = p.k}, stream);
        copy({.out = k.slice(2, dk, dk + dr), .in = p.k_rope}, stream);
        kernels::AttentionParams joined = p;
        joined.k = k;
        joined.k_rope = TensorView{};
        attention(joined, stream);
        PENSTOCK_CUDA_CHECK(cudaFreeAsync(ptr, s));
        return;
    }
    if (p.q.dtype == DType::kF8E4M3 || p.k.dtype == DType::kF8E4M3 || p.v.dtype == DType::kF8E4M3) {
        attention_fp8(p, static_cast<cudaStream_t>(stream));
        return;
    }
    PENSTOCK_CHECK(p.out.dtype != DType::kF8E4M3) << "attention: FP8 out needs FP8 q, k and v";
    // Dense bf16 attention whose mask the caller promised (mask_kind) goes to Penstock's wgmma kernel
    // (attention_bf16_wgmma.h), else to cuDNN's SDPA when it takes the case (attention_cudnn.h); everything else, and
    // everything in a build without cuDNN, runs the kernel below.
    if (p.mask_kind != kernels::AttentionMaskKind::kGeneral) {
        if (attention_bf16_wgmma(p, static_cast<cudaStream_t>(stream))) return;
        if (attention_cudnn(p, stream)) return;
    }
    if (p.lse.data == nullptr) {  // lse not wanted (cuDNN then skips it); the kernels below write one: scratch
        PENSTOCK_CHECK(p.q.ndim == 3) << "attention: q must be 3-d";
        const auto s = static_cast<cudaStream_t>(stream);
        void* ptr = nullptr;
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(
            &ptr, static_cast<size_t>(std::max<int64_t>(p.q.size(0) * p.q.size(1), 1)) * sizeof(float), s));
        kernels::AttentionParams with_lse = p;
        const std::array<int64_t, 2> shape{p.q.size(0), p.q.size(1)};
        with_lse.lse = TensorView::contiguous(ptr, DType::kF32, shape, Device::kCUDA, p.q.device_index);
        attention(with_lse, stream);
        PENSTOCK_CUDA_CHECK(cudaFreeAsync(ptr, s));
        return;
    }
    PENSTOCK_CHECK(p.q.ndim == 3 && p.k.ndim == 3 && p.v.ndim == 3) << "attention: q, k, v must be 3-d";
    const int64_t total_q = p.q.size(0);
    const int64_t n_heads = p.q.size(1);
    const int64_t d_qk = p.q.size(2);
    const int64_t total_k = p.k.size(0);
    const int64_t n_kv_heads = p.k.size(1);
    const int64_t d_v = p.v.size(2);
    check_3d(p.q, total_q, n_heads, d_qk, "q");
    check_3d(p.k, total_k, n_kv_heads, d_qk, "k");
    check_3d(p.v, total_k, n_kv_heads, d_v, "v");
    check_3d(p.out, total_q, n_heads, d_v, "out");
    check_on_gpu(p.lse, "attention", "lse");
    PENSTOCK_CHECK(p.lse.ndim == 2 && p.lse.size(0) == total_q && p.lse.size(1) == n_heads &&
                   p.lse.dtype == DType::kF32)
        << "attention: lse [total_q, n_heads] f32, got " << p.lse.shape_string();
    PENSTOCK_CHECK(is_float_dtype(p.q.dtype) && p.k.dtype == p.q.dtype && p.v.dtype == p.q.dtype &&
                   p.out.dtype == p.q.dtype)
        << "attention: q, k, v and out must share one dtype (f32 or bf16)";
    PENSTOCK_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0)
        << "attention: n_heads " << n_heads << " must be a multiple of n_kv_heads " << n_kv_heads;
    PENSTOCK_CHECK(d_qk >= 1 && d_qk <= kMaxDqk) << "attention: d_qk " << d_qk << " (1.." << kMaxDqk << ")";
    PENSTOCK_CHECK(d_v >= 1 && d_v <= kMaxDv) << "attention: d_v " << d_v << " (1.." << kMaxDv << ")";
    PENSTOCK_CHECK_LE(n_heads, 65535) << "attention: n_heads";
    const int64_t n_seqs = p.cu_seqlens_q.size(0) - 1;
    PENSTOCK_CHECK_GE(n_seqs, 0) << "attention: cu_seqlens_q";
    check_meta(p.cu_seqlens_q, n_seqs + 1, "cu_seqlens_q");
    check_meta(p.cu_seqlens_k, n_seqs + 1, "cu_seqlens_k");
    check_meta(p.q_pos0, n_seqs, "q_pos0");
    check_meta(p.k_pos0, n_seqs, "k_pos0");
    PENSTOCK_CHECK(total_q < (int64_t{1} << 31) && total_k < (int64_t{1} << 31)) << "attention: sizes";
    if (total_q == 0 || n_heads == 0 || n_seqs == 0) return;
    // The bf16 MLA absorbed form (one 576-wide latent head, v = its first 512 columns) runs on tensor cores.
    if (mla_tc_attention_supported(p)) {
        mla_tc_attention(p, stream);
        return;
    }

    AttnArgs args{};
    args.q = p.q.data;
    args.k = p.k.data;
    args.v = p.v.data;
    args.out = p.out.data;
    args.lse = p.lse.ptr<float>();
    args.cu_q = p.cu_seqlens_q.ptr<const int32_t>();
    args.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
    args.q_pos0 = p.q_pos0.ptr<const int32_t>();
    PENSTOCK_CHECK_GE(p.q_pos_step, 1) << "attention: q_pos_step";
    args.q_pos_step = p.q_pos_step;
    args.k_pos0 = p.k_pos0.ptr<const int32_t>();
    args.n_seqs = static_cast<int>(n_seqs);
    args.n_heads = static_cast<int>(n_heads);
    args.group = static_cast<int>(n_heads / n_kv_heads);
    args.d_qk = static_cast<int>(d_qk);
    args.d_v = static_cast<int>(d_v);
    args.q0 = p.q.stride(0);
    args.q1 = p.q.stride(1);
    args.k0 = p.k.stride(0);
    args.k1 = p.k.stride(1);
    args.v0 = p.v.stride(0);
    args.v1 = p.v.stride(1);
    args.o0 = p.out.stride(0);
    args.o1 = p.out.stride(1);
    args.l0 = p.lse.stride(0);
    args.l1 = p.lse.stride(1);
    args.scale = p.scale;
    args.causal = p.causal;
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.q.dtype, "attention", [&](auto t) {
        using T = decltype(t);
        if (d_v <= 128) {
            launch<T, 4>(args, total_q, s);
        } else if (d_v <= 256) {
            launch<T, 8>(args, total_q, s);
        } else {
            launch<T, 16>(args, total_q, s);
        }
    });
}

}  // namespace penstock::cuda
