// The KDA gated delta rule on the GPU (kernels/ops_kda.h GatedDeltaRuleParams; reference kernels/ref/kda.cc):
// the token-by-token recurrent form and the chunkwise WY/UT form. fp32 throughout (state, products, exps); the
// reference keeps the state in double inside a call. Both read state[slot] at the start of a sequence and write it
// back at its end; zero-length sequences leave it untouched.
// fp32 versions on CUDA cores; the chunk form with precision kTensorCore (chunk 64, dims <= 128) runs the tensor-core
// kernel of kda_chunk_tc.cu instead.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/cuda/kda_chunk_tc.h"
#include "kernels/cuda/kda_delta_args.h"
#include "kernels/cuda/launch_util.cuh"

namespace penstock::cuda {

namespace {

constexpr int kMaxKDim = 128;
constexpr int kMaxVDimChunk = 128;
constexpr int kMaxChunk = 64;

// ---------------------------------------------------------------------------------------------------------------
// Recurrent form. Block = 256 threads = 32 value columns x 8 key groups of one (sequence, head); grid.x = sequence *
// n_heads + head, grid.y = value tile. Lane l of warp w: column j = tile * 32 + w * 4 + l / 8, key group kg = l % 8,
// holding S[d, j] for d = kg + 8 m (m < 16) in registers (interleaved so the 8 lanes of a column read 8 consecutive
// smem words of k / q / decay). Per token: the block stages scale * q, k and exp(g) in shared memory; each thread
// decays its S entries, the 8 lanes of a column reduce S^T k with shuffles, apply the delta update and reduce S^T q.
constexpr int kRecThreads = 256;
constexpr int kRecCols = 32;
constexpr int kRecPer = kMaxKDim / 8;

__global__ void __launch_bounds__(kRecThreads) delta_rule_recurrent_kernel(DeltaArgs a) {
    __shared__ float q_s[2][kMaxKDim];
    __shared__ float k_s[2][kMaxKDim];
    __shared__ float e_s[2][kMaxKDim];
    const int seq = static_cast<int>(blockIdx.x) / a.n_heads;
    const int h = static_cast<int>(blockIdx.x) % a.n_heads;
    const int row0 = a.cu[seq];
    const int row1 = a.cu[seq + 1];
    if (row1 <= row0) return;  // block-uniform
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32;
    const int warp = tid / 32;
    const int j = static_cast<int>(blockIdx.y) * kRecCols + warp * 4 + lane / 8;
    const int kg = lane % 8;
    const bool col_ok = j < a.v_dim;
    float* st = a.state + ((static_cast<int64_t>(a.slots[seq]) * a.n_heads + h) * a.k_dim) * a.v_dim;

    float S[kRecPer];
#pragma unroll
    for (int m = 0; m < kRecPer; ++m) {
        const int d = kg + 8 * m;
        S[m] = (col_ok && d < a.k_dim) ? st[static_cast<int64_t>(d) * a.v_dim + j] : 0.0f;
    }
    for (int t = row0; t < row1; ++t) {
        const int buf = (t - row0) & 1;  // double-buffered: one barrier per token
        for (int d = tid; d < a.k_dim; d += kRecThreads) {
            q_s[buf][d] = a.q[static_cast<int64_t>(t) * a.q0 + static_cast<int64_t>(h) * a.q1 + d] * a.scale;
            k_s[buf][d] = a.k[static_cast<int64_t>(t) * a.k0 + static_cast<int64_t>(h) * a.k1 + d];
            e_s[buf][d] = expf(a.g[static_cast<int64_t>(t) * a.g0 + static_cast<int64_t>(h) * a.g1 + d]);
        }
        __syncthreads();
        const float beta = a.beta[static_cast<int64_t>(t) * a.b0 + h];
        const float vj = col_ok ? a.v[static_cast<int64_t>(t) * a.v0 + static_cast<int64_t>(h) * a.v1 + j] : 0.0f;
        float mem = 0.0f;
#pragma unroll
        for (int m = 0; m < kRecPer; ++m) {
            const int d = kg + 8 * m;
            if (d < a.k_dim) {
                S[m] *= e_s[buf][d];
                mem = fmaf(S[m], k_s[buf][d], mem);
            }
        }
        mem += __shfl_xor_sync(0xffffffffu, mem, 1);
        mem += __shfl_xor_sync(0xffffffffu, mem, 2);
        mem += __shfl_xor_sync(0xffffffffu, mem, 4);
        const float delta = beta * (vj - mem);
        float o = 0.0f;
#pragma unroll
        for (int m = 0; m < kRecPer; ++m) {
            const int d = kg + 8 * m;
            if (d < a.k_dim) {
                S[m] = fmaf(k_s[buf][d], delta, S[m]);
                o = fmaf(S[m], q_s[buf][d], o);
            }
        }
        o += __shfl_xor_sync(0xffffffffu, o, 1);
        o += __shfl_xor_sync(0xffffffffu, o, 2);
        o += __shfl_xor_sync(0xffffffffu, o, 4);
        if (col_ok && kg == 0) a.out[static_cast<int64_t>(t) * a.o0 + static_cast<int64_t>(h) * a.o1 + j] = o;
    }
#pragma unroll
    for (int m = 0; m < kRecPer; ++m) {
        const int d = kg + 8 * m;
        if (col_ok && d < a.k_dim) st[static_cast<int64_t>(d) * a.v_dim + j] = S[m];
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Chunkwise form, one block of 256 threads per (sequence, head) (grid.x = sequence * n_heads + head), the fp32 state
// S [K][V] and one chunk of n <= C rows in shared memory. Per chunk (formulas of the reference):
//   1. stage K, raw g, V (into U), beta;        2. G = cumsum(g) per key channel (thread per channel);
//   3. L[i][m] = beta_i sum_d K_i K_m exp(G_i - G_m), m < i (exponent <= 0: masked before exp);
//   4. forward substitution for X = [W | U]: thread per column, rows in order (a column depends only on itself);
//   5. V' = U - W S (in place over U);          6. stage scale * Q over W;
//   7. A[i][m] = sum_d Q_i K_m exp(G_i - G_m), m <= i (over L);      8. Q <- Q * exp(G);
//   9. O = Q S + A V' -> out;                   10. K <- K * exp(G_n - G);
//   11. S <- exp(G_n) S + K^T V'.
// Shared rows of K, G and W/Q are padded by one float so that threads walking m (or i) read distinct banks.
constexpr int kChunkThreads = 256;

struct ChunkSmem {
    int kp;  // pitch of K / G / W rows: k_dim + 1
    int vp;  // pitch of U rows: v_dim
    int lp;  // pitch of L / A rows: chunk + 1
    size_t floats(int k_dim, int v_dim, int chunk) const {
        return static_cast<size_t>(k_dim) * v_dim + 3 * static_cast<size_t>(chunk) * kp +
               static_cast<size_t>(chunk) * vp + static_cast<size_t>(chunk) * lp + chunk;
    }
};

__global__ void __launch_bounds__(kChunkThreads) delta_rule_chunk_kernel(DeltaArgs a) {
    extern __shared__ float ch_smem[];
    const int K = a.k_dim, V = a.v_dim, C = a.chunk;
    const int kp = K + 1, lp = C + 1;
    float* S = ch_smem;         // [K][V]
    float* Gs = S + K * V;      // [C][kp]
    float* Ks = Gs + C * kp;    // [C][kp]
    float* Ws = Ks + C * kp;    // [C][kp]  (W, then Q)
    float* Us = Ws + C * kp;    // [C][V]   (U, then V')
    float* Ls = Us + C * V;     // [C][lp]  (L, then A)
    float* Bs = Ls + C * lp;    // [C]
    const int seq = static_cast<int>(blockIdx.x) / a.n_heads;
    const int h = static_cast<int>(blockIdx.x) % a.n_heads;
    const int row0 = a.cu[seq];
    const int row1 = a.cu[seq + 1];
    if (row1 <= row0) return;  // block-uniform
    const int tid = static_cast<int>(threadIdx.x);
    float* st = a.state + ((static_cast<int64_t>(a.slots[seq]) * a.n_heads + h) * K) * V;
    for (int e = tid; e < K * V; e += kChunkThreads) S[e] = st[e];

    for (int c0 = row0; c0 < row1; c0 += C) {
        const int n = min(C, row1 - c0);
        __syncthreads();  // S loaded / previous chunk's S update done
        // 1. stage
        for (int e = tid; e < n * K; e += kChunkThreads) {
            const int i = e / K, d = e % K;
            const int64_t t = c0 + i;
            Ks[i * kp + d] = a.k[t * a.k0 + static_cast<int64_t>(h) * a.k1 + d];
            Gs[i * kp + d] = a.g[t * a.g0 + static_cast<int64_t>(h) * a.g1 + d];
        }
        for (int e = tid; e < n * V; e += kChunkThreads) {
            const int i = e / V, j = e % V;
            Us[i * V + j] = a.v[static_cast<int64_t>(c0 + i) * a.v0 + static_cast<int64_t>(h) * a.v1 + j];
        }
        for (int i = tid; i < n; i += kChunkThreads) Bs[i] = a.beta[static_cast<int64_t>(c0 + i) * a.b0 + h];
        __syncthreads();
        // 2. cumulative log decay
        for (int d = tid; d < K; d += kChunkThreads) {
            float acc = 0.0f;
            for (int i = 0; i < n; ++i) {
                acc += Gs[i * kp + d];
                Gs[i * kp + d] = acc;
            }
        }
        __syncthreads();
        // 3. L (strictly lower)
        for (int e = tid; e < n * n; e += kChunkThreads) {
            const int i = e / n, m = e % n;
            if (m >= i) continue;
            const float* ki = Ks + i * kp;
            const float* km = Ks + m * kp;
            const float* gi = Gs + i * kp;
            const float* gm = Gs + m * kp;
            float acc = 0.0f;
            for (int d = 0; d < K; ++d) acc = fmaf(ki[d] * km[d], expf(gi[d] - gm[d]), acc);
            Ls[i * lp + m] = Bs[i] * acc;
        }
        __syncthreads();
        // 4. forward substitution: column c of [W | U]
        for (int c = tid; c < K + V; c += kChunkThreads) {
            if (c < K) {
                for (int i = 0; i < n; ++i) {
                    float x = Bs[i] * expf(Gs[i * kp + c]) * Ks[i * kp + c];
                    for (int m = 0; m < i; ++m) x = fmaf(-Ls[i * lp + m], Ws[m * kp + c], x);
                    Ws[i * kp + c] = x;
                }
            } else {
                const int j = c - K;
                for (int i = 0; i < n; ++i) {
                    float x = Bs[i] * Us[i * V + j];
                    for (int m = 0; m < i; ++m) x = fmaf(-Ls[i * lp + m], Us[m * V + j], x);
                    Us[i * V + j] = x;
                }
            }
        }
        __syncthreads();
        // 5. V' = U - W S
        for (int e = tid; e < n * V; e += kChunkThreads) {
            const int i = e / V, j = e % V;
            const float* wi = Ws + i * kp;
            float acc = Us[i * V + j];
            for (int d = 0; d < K; ++d) acc = fmaf(-wi[d], S[d * V + j], acc);
            Us[i * V + j] = acc;
        }
        __syncthreads();
        // 6. Q (scaled) over W
        for (int e = tid; e < n * K; e += kChunkThreads) {
            const int i = e / K, d = e % K;
            Ws[i * kp + d] = a.q[static_cast<int64_t>(c0 + i) * a.q0 + static_cast<int64_t>(h) * a.q1 + d] * a.scale;
        }
        __syncthreads();
        // 7. A (lower, with the diagonal) over L
        for (int e = tid; e < n * n; e += kChunkThreads) {
            const int i = e / n, m = e % n;
            if (m > i) continue;
            const float* qi = Ws + i * kp;
            const float* km = Ks + m * kp;
            const float* gi = Gs + i * kp;
            const float* gm = Gs + m * kp;
            float acc = 0.0f;
            for (int d = 0; d < K; ++d) acc = fmaf(qi[d] * km[d], expf(gi[d] - gm[d]), acc);
            Ls[i * lp + m] = acc;
        }
        __syncthreads();
        // 8. Q <- Q * exp(G)
        for (int e = tid; e < n * K; e += kChunkThreads) {
            const int i = e / K, d = e % K;
            Ws[i * kp + d] *= expf(Gs[i * kp + d]);
        }
        __syncthreads();
        // 9. O = Q S + A V'
        for (int e = tid; e < n * V; e += kChunkThreads) {
            const int i = e / V, j = e % V;
            const float* qi = Ws + i * kp;
            float acc = 0.0f;
            for (int d = 0; d < K; ++d) acc = fmaf(qi[d], S[d * V + j], acc);
            for (int m = 0; m <= i; ++m) acc = fmaf(Ls[i * lp + m], Us[m * V + j], acc);
            a.out[static_cast<int64_t>(c0 + i) * a.o0 + static_cast<int64_t>(h) * a.o1 + j] = acc;
        }
        __syncthreads();
        // 10. K <- K * exp(G_n - G)
        const float* g_last = Gs + (n - 1) * kp;
        for (int e = tid; e < n * K; e += kChunkThreads) {
            const int i = e / K, d = e % K;
            Ks[i * kp + d] *= expf(g_last[d] - Gs[i * kp + d]);
        }
        __syncthreads();
        // 11. S <- exp(G_n) S + K^T V'
        for (int e = tid; e < K * V; e += kChunkThreads) {
            const int d = e / V, j = e % V;
            float acc = expf(g_last[d]) * S[e];
            for (int i = 0; i < n; ++i) acc = fmaf(Ks[i * kp + d], Us[i * V + j], acc);
            S[e] = acc;
        }
    }
    __syncthreads();
    for (int e = tid; e < K * V; e += kChunkThreads) st[e] = S[e];
}

DeltaArgs check_and_pack(const kernels::GatedDeltaRuleParams& p, const char* op, int64_t* n_seqs_out) {
    PENSTOCK_CHECK(p.q.ndim == 3 && p.v.ndim == 3 && p.state.ndim == 4) << op << ": q, v 3-d; state 4-d";
    const int64_t n_tokens = p.q.size(0), n_heads = p.q.size(1), k_dim = p.q.size(2), v_dim = p.v.size(2);
    auto check3 = [&](const TensorView& v, int64_t c, const char* name) {
        check_on_gpu(v, op, name);
        PENSTOCK_CHECK(v.ndim == 3 && v.dtype == DType::kF32 && v.size(0) == n_tokens && v.size(1) == n_heads &&
                       v.size(2) == c && (v.stride(2) == 1 || c <= 1))
            << op << ": " << name << " must be [" << n_tokens << ", " << n_heads << ", " << c << "] f32, got "
            << v.shape_string();
    };
    check3(p.q, k_dim, "q");
    check3(p.k, k_dim, "k");
    check3(p.g, k_dim, "g");
    check3(p.v, v_dim, "v");
    check3(p.out, v_dim, "out");
    check_on_gpu(p.beta, op, "beta");
    PENSTOCK_CHECK(p.beta.ndim == 2 && p.beta.dtype == DType::kF32 && p.beta.size(0) == n_tokens &&
                   p.beta.size(1) == n_heads && (p.beta.stride(1) == 1 || n_heads <= 1))
        << op << ": beta [n_tokens, n_heads] f32, got " << p.beta.shape_string();
    check_on_gpu(p.state, op, "state");
    PENSTOCK_CHECK(p.state.dtype == DType::kF32 && p.state.is_contiguous() && p.state.size(1) == n_heads &&
                   p.state.size(2) == k_dim && p.state.size(3) == v_dim)
        << op << ": state [n_slots, n_heads, k_dim, v_dim] f32 contiguous, got " << p.state.shape_string();
    check_on_gpu(p.cu_seqlens, op, "cu_seqlens");
    check_on_gpu(p.state_slots, op, "state_slots");
    PENSTOCK_CHECK(p.cu_seqlens.ndim == 1 && p.cu_seqlens.dtype == DType::kI32 && p.cu_seqlens.is_contiguous())
        << op << ": cu_seqlens [n_seqs + 1] i32";
    const int64_t n_seqs = p.cu_seqlens.size(0) - 1;
    PENSTOCK_CHECK(n_seqs >= 0 && p.state_slots.ndim == 1 && p.state_slots.dtype == DType::kI32 &&
                   p.state_slots.size(0) == n_seqs && p.state_slots.is_contiguous())
        << op << ": state_slots [n_seqs] i32";
    PENSTOCK_CHECK(k_dim >= 1 && k_dim <= kMaxKDim) << op << ": k_dim " << k_dim << " (1.." << kMaxKDim << ")";
    PENSTOCK_CHECK(n_tokens < (int64_t{1} << 31) && n_seqs * n_heads < (int64_t{1} << 31)) << op << ": sizes";
    *n_seqs_out = n_seqs;
    return DeltaArgs{.out = p.out.ptr<float>(),
                     .q = p.q.ptr<const float>(),
                     .k = p.k.ptr<const float>(),
                     .v = p.v.ptr<const float>(),
                     .g = p.g.ptr<const float>(),
                     .beta = p.beta.ptr<const float>(),
                     .state = p.state.ptr<float>(),
                     .cu = p.cu_seqlens.ptr<const int32_t>(),
                     .slots = p.state_slots.ptr<const int32_t>(),
                     .o0 = p.out.stride(0),
                     .o1 = p.out.stride(1),
                     .q0 = p.q.stride(0),
                     .q1 = p.q.stride(1),
                     .k0 = p.k.stride(0),
                     .k1 = p.k.stride(1),
                     .v0 = p.v.stride(0),
                     .v1 = p.v.stride(1),
                     .g0 = p.g.stride(0),
                     .g1 = p.g.stride(1),
                     .b0 = p.beta.stride(0),
                     .n_heads = static_cast<int>(n_heads),
                     .k_dim = static_cast<int>(k_dim),
                     .v_dim = static_cast<int>(v_dim),
                     .chunk = static_cast<int>(p.chunk_size),
                     .scale = p.scale};
}

}  // namespace

void gated_delta_rule_recurrent(const kernels::GatedDeltaRuleParams& p, void* stream) {
    int64_t n_seqs = 0;
    const DeltaArgs a = check_and_pack(p, "gated_delta_rule_recurrent", &n_seqs);
    if (n_seqs == 0 || a.n_heads == 0 || a.v_dim == 0) return;
    const dim3 grid(static_cast<unsigned>(n_seqs * a.n_heads), static_cast<unsigned>((a.v_dim + kRecCols - 1) / kRecCols));
    delta_rule_recurrent_kernel<<<grid, kRecThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void gated_delta_rule_chunk(const kernels::GatedDeltaRuleParams& p, void* stream) {
    const char* op = "gated_delta_rule_chunk";
    int64_t n_seqs = 0;
    const DeltaArgs a = check_and_pack(p, op, &n_seqs);
    PENSTOCK_CHECK(p.chunk_size >= 1 && p.chunk_size <= kMaxChunk) << op << ": chunk_size " << p.chunk_size;
    PENSTOCK_CHECK(a.v_dim <= kMaxVDimChunk) << op << ": v_dim " << a.v_dim << " (<= " << kMaxVDimChunk << ")";
    if (n_seqs == 0 || a.n_heads == 0 || a.v_dim == 0) return;
    if (p.precision != kernels::DeltaRulePrecision::kF32 && delta_rule_chunk_tc_supported(a.k_dim, a.v_dim, a.chunk)) {
        if (p.precision == kernels::DeltaRulePrecision::kTensorCoreSplit) {
            delta_rule_chunk_split(a, n_seqs, p.q.shape[0], stream);
        } else {
            delta_rule_chunk_tc(a, n_seqs, stream);
        }
        return;
    }
    const ChunkSmem layout{.kp = a.k_dim + 1, .vp = a.v_dim, .lp = a.chunk + 1};
    const size_t smem = sizeof(float) * layout.floats(a.k_dim, a.v_dim, a.chunk);
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)));
    delta_rule_chunk_kernel<<<static_cast<unsigned>(n_seqs * a.n_heads), kChunkThreads, smem,
                              static_cast<cudaStream_t>(stream)>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
