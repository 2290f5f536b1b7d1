// Reference KDA ops: short causal conv with state, l2norm, sigmoid, the KDA gate, the gated delta rule (recurrent and
// chunkwise WY/UT forms), the sigmoid-gated RMSNorm and SiTU-GLU. Values are f32 in memory; every reduction and the
// delta-rule state inside a call are double, rounded to f32 once on output (so a result never depends on the thread
// count). Parallel mapping: one task per (sequence, head) for the delta rule, per channel for the conv, per row
// elsewhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "kernels/ref/ref_kda.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/ref/ref_rows.h"

namespace penstock::ref {

namespace {

void check_f32(const TensorView& v, int ndim, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, ndim) << name;
    PENSTOCK_CHECK(v.dtype == DType::kF32) << name << " must be f32";
    PENSTOCK_CHECK_EQ(v.stride(ndim - 1), 1) << name << ": last dim must be contiguous";
}

void check_rows(const TensorView& v, int64_t n_rows, int64_t dim, const char* name) {
    check_f32(v, 2, name);
    PENSTOCK_CHECK_EQ(v.size(0), n_rows) << name;
    PENSTOCK_CHECK_EQ(v.size(1), dim) << name;
}

// [n_rows, dim] rows of `dtype` (f32 or bf16), last dim contiguous.
void check_act_rows(const TensorView& v, int64_t n_rows, int64_t dim, DType dtype, const char* name) {
    PENSTOCK_CHECK_EQ(v.ndim, 2) << name;
    PENSTOCK_CHECK(is_activation_dtype(dtype) && v.dtype == dtype)
        << name << " must be " << dtype_name(dtype) << " (f32 or bf16), got " << dtype_name(v.dtype);
    PENSTOCK_CHECK_EQ(v.size(0), n_rows) << name;
    PENSTOCK_CHECK_EQ(v.size(1), dim) << name;
    PENSTOCK_CHECK(v.stride(1) == 1 || dim <= 1) << name << ": last dim must be contiguous";
}

void check_3d(const TensorView& v, int64_t a, int64_t b, int64_t c, const char* name) {
    check_f32(v, 3, name);
    PENSTOCK_CHECK_EQ(v.size(0), a) << name;
    PENSTOCK_CHECK_EQ(v.size(1), b) << name;
    PENSTOCK_CHECK_EQ(v.size(2), c) << name;
}

// Validates cu_seqlens / state_slots against n_tokens and n_slots; returns n_seqs.
int64_t check_seqs(const TensorView& cu, const TensorView& slots, int64_t n_tokens, int64_t n_slots) {
    PENSTOCK_CHECK(cu.dtype == DType::kI32 && cu.ndim == 1 && cu.is_contiguous()) << "cu_seqlens: [n_seqs + 1] i32";
    PENSTOCK_CHECK(slots.dtype == DType::kI32 && slots.ndim == 1 && slots.is_contiguous())
        << "state_slots: [n_seqs] i32";
    const int64_t n_seqs = cu.size(0) - 1;
    PENSTOCK_CHECK_EQ(slots.size(0), n_seqs);
    const int32_t* c = cu.ptr<const int32_t>();
    PENSTOCK_CHECK_EQ(c[0], 0);
    PENSTOCK_CHECK_EQ(c[n_seqs], n_tokens);
    for (int64_t s = 0; s < n_seqs; ++s) {
        PENSTOCK_CHECK_LE(c[s], c[s + 1]) << "cu_seqlens must be non-decreasing";
        const int32_t slot = slots.ptr<const int32_t>()[s];
        PENSTOCK_CHECK(slot >= 0 && slot < n_slots) << "state slot " << slot << " outside [0, " << n_slots << ")";
        for (int64_t r = 0; r < s; ++r) {
            PENSTOCK_CHECK_NE(slots.ptr<const int32_t>()[r], slot) << "two sequences share state slot " << slot;
        }
    }
    return n_seqs;
}

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct DeltaRuleShape {
    int64_t n_tokens, n_heads, k_dim, v_dim, n_slots, n_seqs;
};

DeltaRuleShape check_delta_rule(const kernels::GatedDeltaRuleParams& p) {
    PENSTOCK_CHECK_EQ(p.q.ndim, 3);
    PENSTOCK_CHECK_EQ(p.v.ndim, 3);
    PENSTOCK_CHECK_EQ(p.state.ndim, 4);
    DeltaRuleShape s{.n_tokens = p.q.size(0),
                     .n_heads = p.q.size(1),
                     .k_dim = p.q.size(2),
                     .v_dim = p.v.size(2),
                     .n_slots = p.state.size(0),
                     .n_seqs = 0};
    check_3d(p.q, s.n_tokens, s.n_heads, s.k_dim, "delta rule q");
    check_3d(p.k, s.n_tokens, s.n_heads, s.k_dim, "delta rule k");
    check_3d(p.g, s.n_tokens, s.n_heads, s.k_dim, "delta rule g");
    check_3d(p.v, s.n_tokens, s.n_heads, s.v_dim, "delta rule v");
    check_3d(p.out, s.n_tokens, s.n_heads, s.v_dim, "delta rule out");
    check_rows(p.beta, s.n_tokens, s.n_heads, "delta rule beta");
    PENSTOCK_CHECK(p.state.dtype == DType::kF32 && p.state.is_contiguous()) << "state: contiguous f32";
    PENSTOCK_CHECK_EQ(p.state.size(1), s.n_heads);
    PENSTOCK_CHECK_EQ(p.state.size(2), s.k_dim);
    PENSTOCK_CHECK_EQ(p.state.size(3), s.v_dim);
    s.n_seqs = check_seqs(p.cu_seqlens, p.state_slots, s.n_tokens, s.n_slots);
    return s;
}

float* state_ptr(const kernels::GatedDeltaRuleParams& p, const DeltaRuleShape& s, int64_t seq, int64_t h) {
    const int32_t slot = p.state_slots.ptr<const int32_t>()[seq];
    return p.state.ptr<float>() + ((static_cast<int64_t>(slot) * s.n_heads + h) * s.k_dim) * s.v_dim;
}

// Runs fn(seq, head, row_begin, row_end) for every (sequence, head) pair.
template <class Fn>
void for_each_seq_head(const kernels::GatedDeltaRuleParams& p, const DeltaRuleShape& s, ThreadPool* pool, Fn fn) {
    const int32_t* cu = p.cu_seqlens.ptr<const int32_t>();
    parallel_for(pool, s.n_seqs * s.n_heads, /*grain=*/1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const int64_t seq = i / s.n_heads;
            const int64_t h = i % s.n_heads;
            if (cu[seq + 1] > cu[seq]) fn(seq, h, static_cast<int64_t>(cu[seq]), static_cast<int64_t>(cu[seq + 1]));
        }
    });
}

}  // namespace

void short_conv(const kernels::ShortConvParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_tokens = p.in.size(0);
    const int64_t channels = p.in.size(1);
    check_rows(p.in, n_tokens, channels, "short_conv in");
    check_rows(p.out, n_tokens, channels, "short_conv out");
    PENSTOCK_CHECK(p.weight.is_contiguous()) << "short_conv weight";
    check_f32(p.weight, 2, "short_conv weight");
    PENSTOCK_CHECK_EQ(p.weight.size(0), channels);
    const int64_t kernel = p.weight.size(1);
    PENSTOCK_CHECK_GE(kernel, 1);
    const int64_t hist = kernel - 1;
    PENSTOCK_CHECK(p.conv_state.is_contiguous()) << "short_conv conv_state";
    check_3d(p.conv_state, p.conv_state.size(0), hist, channels, "short_conv conv_state");
    const int64_t n_seqs = check_seqs(p.cu_seqlens, p.state_slots, n_tokens, p.conv_state.size(0));
    const int32_t* cu = p.cu_seqlens.ptr<const int32_t>();
    const float* w = p.weight.ptr<const float>();

    for (int64_t s = 0; s < n_seqs; ++s) {
        const int64_t row0 = cu[s];
        const int64_t n = cu[s + 1] - row0;
        if (n == 0) continue;
        float* state = p.conv_state.ptr<float>() + p.state_slots.ptr<const int32_t>()[s] * hist * channels;
        parallel_for(pool, channels, /*grain=*/16, [&](int64_t begin, int64_t end) {
            std::vector<float> window(static_cast<size_t>(hist + n));
            for (int64_t c = begin; c < end; ++c) {
                for (int64_t i = 0; i < hist; ++i) window[static_cast<size_t>(i)] = state[i * channels + c];
                for (int64_t t = 0; t < n; ++t) {
                    window[static_cast<size_t>(hist + t)] = p.in.at<const float>({row0 + t})[c];
                }
                for (int64_t t = 0; t < n; ++t) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < kernel; ++j) {
                        acc += static_cast<double>(w[c * kernel + j]) * window[static_cast<size_t>(t + j)];
                    }
                    p.out.at<float>({row0 + t})[c] = static_cast<float>(p.silu ? acc * sigmoid_d(acc) : acc);
                }
                for (int64_t i = 0; i < hist; ++i) state[i * channels + c] = window[static_cast<size_t>(n + i)];
            }
        });
    }
    if (p.norm_channels == 0) return;
    PENSTOCK_CHECK(p.norm_dim > 0 && p.norm_channels % p.norm_dim == 0 && p.norm_channels <= channels)
        << "short_conv: norm_channels " << p.norm_channels << " in groups of " << p.norm_dim << " of " << channels;
    const int64_t groups = p.norm_channels / p.norm_dim;
    const TensorView heads =
        p.out.as_strided(0, {n_tokens, groups, p.norm_dim}, {p.out.stride(0), p.norm_dim, 1});
    l2norm({.out = heads, .in = heads, .eps = p.norm_eps}, pool);
}

void l2norm(const kernels::L2NormParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 3);
    const int64_t n_tokens = p.in.size(0);
    const int64_t n_heads = p.in.size(1);
    const int64_t dim = p.in.size(2);
    check_3d(p.in, n_tokens, n_heads, dim, "l2norm in");
    check_3d(p.out, n_tokens, n_heads, dim, "l2norm out");
    parallel_for(pool, n_tokens * n_heads, /*grain=*/16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* x = p.in.at<const float>({r / n_heads, r % n_heads});
            float* y = p.out.at<float>({r / n_heads, r % n_heads});
            double sum_sq = 0.0;
            for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
            const double norm = std::sqrt(sum_sq + static_cast<double>(p.eps));
            for (int64_t i = 0; i < dim; ++i) y[i] = static_cast<float>(x[i] / norm);
        }
    });
}

void sigmoid(const kernels::SigmoidParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, "sigmoid in");
    check_rows(p.out, n_rows, dim, "sigmoid out");
    parallel_for(pool, n_rows, /*grain=*/64, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* x = p.in.at<const float>({r});
            float* y = p.out.at<float>({r});
            for (int64_t i = 0; i < dim; ++i) y[i] = static_cast<float>(sigmoid_d(x[i]));
        }
    });
}

void sigmoid_gate(const kernels::SigmoidGateParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_act_rows(p.in, n_rows, dim, p.in.dtype, "sigmoid_gate in");
    check_act_rows(p.gate, n_rows, dim, p.gate.dtype, "sigmoid_gate gate");
    check_act_rows(p.out, n_rows, dim, p.in.dtype, "sigmoid_gate out");
    parallel_for(pool, n_rows, /*grain=*/64, [&](int64_t begin, int64_t end) {
        std::vector<float> xb, gb;
        for (int64_t r = begin; r < end; ++r) {
            const float* x = row_as_f32(element_ptr(p.in, {r}), p.in.dtype, dim, xb);
            const float* g = row_as_f32(element_ptr(p.gate, {r}), p.gate.dtype, dim, gb);
            write_row(element_ptr(p.out, {r}), p.out.dtype, dim, [&](int64_t i) { return x[i] * sigmoid_d(g[i]); });
        }
    });
}

void kda_gate(const kernels::KdaGateParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.f.ndim, 3);
    const int64_t n_tokens = p.f.size(0);
    const int64_t n_heads = p.f.size(1);
    const int64_t dim = p.f.size(2);
    check_3d(p.f, n_tokens, n_heads, dim, "kda_gate f");
    check_3d(p.out, n_tokens, n_heads, dim, "kda_gate out");
    PENSTOCK_CHECK(p.f.is_contiguous() && p.out.is_contiguous()) << "kda_gate: contiguous f and out";
    check_f32(p.a_log, 1, "kda_gate a_log");
    PENSTOCK_CHECK_EQ(p.a_log.size(0), n_heads);
    check_f32(p.dt_bias, 1, "kda_gate dt_bias");
    PENSTOCK_CHECK_EQ(p.dt_bias.size(0), n_heads * dim);
    const float* a_log = p.a_log.ptr<const float>();
    const float* dt_bias = p.dt_bias.ptr<const float>();
    const float* f = p.f.ptr<const float>();
    float* out = p.out.ptr<float>();
    const int64_t row = n_heads * dim;
    parallel_for(pool, n_tokens, /*grain=*/16, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            for (int64_t i = 0; i < row; ++i) {
                const double rate = std::exp(static_cast<double>(a_log[i / dim]));
                const double u = static_cast<double>(f[t * row + i]) + dt_bias[i];
                double g = 0.0;
                switch (p.form) {
                    case kernels::KdaGateForm::kSoftplus:
                        g = -rate * (u > 20.0 ? u : std::log1p(std::exp(u)));
                        break;
                    case kernels::KdaGateForm::kLowerBound:
                        g = p.lower_bound * sigmoid_d(rate * u);
                        break;
                }
                out[t * row + i] = static_cast<float>(g);
            }
        }
    });
}

void gated_delta_rule_recurrent(const kernels::GatedDeltaRuleParams& p, ThreadPool* pool) {
    const DeltaRuleShape s = check_delta_rule(p);
    const int64_t kd = s.k_dim, vd = s.v_dim;
    for_each_seq_head(p, s, pool, [&](int64_t seq, int64_t h, int64_t row0, int64_t row1) {
        float* state = state_ptr(p, s, seq, h);
        std::vector<double> S(state, state + kd * vd);
        std::vector<double> delta(static_cast<size_t>(vd));
        for (int64_t t = row0; t < row1; ++t) {
            const float* q = p.q.at<const float>({t, h});
            const float* k = p.k.at<const float>({t, h});
            const float* v = p.v.at<const float>({t, h});
            const float* g = p.g.at<const float>({t, h});
            const double beta = p.beta.at<const float>({t})[h];
            for (int64_t d = 0; d < kd; ++d) {
                const double decay = std::exp(static_cast<double>(g[d]));
                for (int64_t j = 0; j < vd; ++j) S[d * vd + j] *= decay;
            }
            for (int64_t j = 0; j < vd; ++j) {
                double mem = 0.0;
                for (int64_t d = 0; d < kd; ++d) mem += S[d * vd + j] * k[d];
                delta[j] = beta * (v[j] - mem);
            }
            for (int64_t d = 0; d < kd; ++d) {
                for (int64_t j = 0; j < vd; ++j) S[d * vd + j] += k[d] * delta[j];
            }
            float* o = p.out.at<float>({t, h});
            for (int64_t j = 0; j < vd; ++j) {
                double acc = 0.0;
                for (int64_t d = 0; d < kd; ++d) acc += S[d * vd + j] * (static_cast<double>(q[d]) * p.scale);
                o[j] = static_cast<float>(acc);
            }
        }
        for (int64_t i = 0; i < kd * vd; ++i) state[i] = static_cast<float>(S[i]);
    });
}

// Chunkwise form, per chunk of n <= C rows with chunk-local cumulative log decay G_i = sum_{s <= i} g_s:
//   L[i,j] = beta_i sum_d K[i,d] K[j,d] exp(G_i[d] - G_j[d])  (j < i);  X = (I + L)^-1 Diag(beta) [V | exp(G) * K]
//   U, W = the V and K column blocks of X;  V' = U - W S;  O = (scale Q * exp(G)) S + Aqk V',
//   Aqk[i,j] = sum_d scale Q[i,d] K[j,d] exp(G_i[d] - G_j[d])  (j <= i);
//   S <- Diag(exp(G_n)) S + (K * exp(G_n - G))^T V'.
// Every exponent is a difference G_i - G_j with j <= i (<= 0) or G itself, so nothing overflows.
void gated_delta_rule_chunk(const kernels::GatedDeltaRuleParams& p, ThreadPool* pool) {
    const DeltaRuleShape s = check_delta_rule(p);
    PENSTOCK_CHECK_GE(p.chunk_size, 1);
    const int64_t kd = s.k_dim, vd = s.v_dim, C = p.chunk_size;
    for_each_seq_head(p, s, pool, [&](int64_t seq, int64_t h, int64_t row0, int64_t row1) {
        float* state = state_ptr(p, s, seq, h);
        std::vector<double> S(state, state + kd * vd);
        std::vector<double> G(static_cast<size_t>(C * kd)), L(static_cast<size_t>(C * C));
        std::vector<double> U(static_cast<size_t>(C * vd)), W(static_cast<size_t>(C * kd));
        std::vector<double> Vp(static_cast<size_t>(C * vd)), S_new(static_cast<size_t>(kd * vd));
        for (int64_t c0 = row0; c0 < row1; c0 += C) {
            const int64_t n = std::min(C, row1 - c0);
            auto K = [&](int64_t i, int64_t d) { return static_cast<double>(p.k.at<const float>({c0 + i, h})[d]); };
            auto Q = [&](int64_t i, int64_t d) {
                return static_cast<double>(p.q.at<const float>({c0 + i, h})[d]) * p.scale;
            };
            auto V = [&](int64_t i, int64_t j) { return static_cast<double>(p.v.at<const float>({c0 + i, h})[j]); };
            auto B = [&](int64_t i) { return static_cast<double>(p.beta.at<const float>({c0 + i})[h]); };
            for (int64_t i = 0; i < n; ++i) {
                const float* g = p.g.at<const float>({c0 + i, h});
                for (int64_t d = 0; d < kd; ++d) G[i * kd + d] = (i > 0 ? G[(i - 1) * kd + d] : 0.0) + g[d];
            }
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t j = 0; j < i; ++j) {
                    double acc = 0.0;
                    for (int64_t d = 0; d < kd; ++d) acc += K(i, d) * K(j, d) * std::exp(G[i * kd + d] - G[j * kd + d]);
                    L[i * C + j] = B(i) * acc;
                }
            }
            // Forward substitution on the unit lower-triangular (I + L).
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t j = 0; j < vd; ++j) U[i * vd + j] = B(i) * V(i, j);
                for (int64_t d = 0; d < kd; ++d) W[i * kd + d] = B(i) * std::exp(G[i * kd + d]) * K(i, d);
                for (int64_t m = 0; m < i; ++m) {
                    const double l = L[i * C + m];
                    for (int64_t j = 0; j < vd; ++j) U[i * vd + j] -= l * U[m * vd + j];
                    for (int64_t d = 0; d < kd; ++d) W[i * kd + d] -= l * W[m * kd + d];
                }
            }
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t j = 0; j < vd; ++j) {
                    double acc = U[i * vd + j];
                    for (int64_t d = 0; d < kd; ++d) acc -= W[i * kd + d] * S[d * vd + j];
                    Vp[i * vd + j] = acc;
                }
            }
            for (int64_t i = 0; i < n; ++i) {
                std::vector<double> o(static_cast<size_t>(vd), 0.0);
                for (int64_t d = 0; d < kd; ++d) {
                    const double qd = Q(i, d) * std::exp(G[i * kd + d]);
                    for (int64_t j = 0; j < vd; ++j) o[j] += qd * S[d * vd + j];
                }
                for (int64_t m = 0; m <= i; ++m) {
                    double a = 0.0;
                    for (int64_t d = 0; d < kd; ++d) a += Q(i, d) * K(m, d) * std::exp(G[i * kd + d] - G[m * kd + d]);
                    for (int64_t j = 0; j < vd; ++j) o[j] += a * Vp[m * vd + j];
                }
                float* out = p.out.at<float>({c0 + i, h});
                for (int64_t j = 0; j < vd; ++j) out[j] = static_cast<float>(o[j]);
            }
            const double* g_last = &G[(n - 1) * kd];
            for (int64_t d = 0; d < kd; ++d) {
                const double decay = std::exp(g_last[d]);
                for (int64_t j = 0; j < vd; ++j) S_new[d * vd + j] = decay * S[d * vd + j];
                for (int64_t i = 0; i < n; ++i) {
                    const double kk = K(i, d) * std::exp(g_last[d] - G[i * kd + d]);
                    for (int64_t j = 0; j < vd; ++j) S_new[d * vd + j] += kk * Vp[i * vd + j];
                }
            }
            S.swap(S_new);
        }
        for (int64_t i = 0; i < kd * vd; ++i) state[i] = static_cast<float>(S[i]);
    });
}

void gated_rms_norm(const kernels::GatedRmsNormParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.in.ndim, 2);
    const int64_t n_rows = p.in.size(0);
    const int64_t dim = p.in.size(1);
    check_rows(p.in, n_rows, dim, "gated_rms_norm in");
    check_rows(p.gate, n_rows, dim, "gated_rms_norm gate");
    check_act_rows(p.out, n_rows, dim, p.out.dtype, "gated_rms_norm out");
    check_f32(p.weight, 1, "gated_rms_norm weight");
    PENSTOCK_CHECK_EQ(p.weight.size(0), dim);
    const float* w = p.weight.ptr<const float>();
    parallel_for(pool, n_rows, /*grain=*/16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* x = p.in.at<const float>({r});
            const float* gate = p.gate.at<const float>({r});
            double sum_sq = 0.0;
            for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
            const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + static_cast<double>(p.eps));
            write_row(element_ptr(p.out, {r}), p.out.dtype, dim, [&](int64_t i) {
                return static_cast<double>(w[i]) * (x[i] * inv_rms) * sigmoid_d(gate[i]);
            });
        }
    });
    // The fused quantisation is fp8_act_quant of the finished output, a token's heads as one row (ops_kda.h).
    if (p.quant_out.data != nullptr) {
        fp8_act_quant({.out = p.quant_out, .scale = p.quant_scale, .in = kernels::gated_norm_quant_rows(p)}, pool);
    }
}

void situ_mul(const kernels::SituMulParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.gate.ndim, 2);
    const int64_t n_rows = p.gate.size(0);
    const int64_t dim = p.gate.size(1);
    check_act_rows(p.gate, n_rows, dim, p.gate.dtype, "situ_mul gate");
    check_act_rows(p.up, n_rows, dim, p.gate.dtype, "situ_mul up");
    check_act_rows(p.out, n_rows, dim, p.gate.dtype, "situ_mul out");
    PENSTOCK_CHECK(p.beta > 0.0f && p.linear_beta > 0.0f) << "situ betas must be > 0";
    const double b = p.beta, bl = p.linear_beta;
    parallel_for(pool, n_rows, /*grain=*/8, [&](int64_t begin, int64_t end) {
        std::vector<float> gb, ub;
        for (int64_t r = begin; r < end; ++r) {
            const float* g = row_as_f32(element_ptr(p.gate, {r}), p.gate.dtype, dim, gb);
            const float* u = row_as_f32(element_ptr(p.up, {r}), p.up.dtype, dim, ub);
            write_row(element_ptr(p.out, {r}), p.out.dtype, dim, [&](int64_t i) {
                const double gi = g[i], ui = u[i];
                return b * std::tanh(gi / b) * sigmoid_d(gi) * bl * std::tanh(ui / bl);
            });
        }
    });
}

void attn_res_mix(const kernels::AttnResMixParams& p, ThreadPool* pool) {
    PENSTOCK_CHECK_EQ(p.partial.ndim, 2);
    const int64_t n_tokens = p.partial.size(0);
    const int64_t hidden = p.partial.size(1);
    check_act_rows(p.partial, n_tokens, hidden, p.partial.dtype, "attn_res_mix partial");
    check_act_rows(p.out, n_tokens, hidden, p.partial.dtype, "attn_res_mix out");
    PENSTOCK_CHECK_EQ(p.bank.ndim, 3);
    const int64_t n_blocks = p.bank.size(1);
    PENSTOCK_CHECK(is_activation_dtype(p.bank.dtype)) << "attn_res_mix bank must be f32 or bf16";
    if (n_blocks > 0) {
        PENSTOCK_CHECK_EQ(p.bank.size(0), n_tokens) << "attn_res_mix bank";
        PENSTOCK_CHECK_EQ(p.bank.size(2), hidden) << "attn_res_mix bank";
        PENSTOCK_CHECK(p.bank.stride(2) == 1 || hidden <= 1) << "attn_res_mix bank: last dim must be contiguous";
    }
    check_f32(p.query, 1, "attn_res_mix query");
    check_f32(p.norm_weight, 1, "attn_res_mix norm_weight");
    PENSTOCK_CHECK_EQ(p.query.size(0), hidden);
    PENSTOCK_CHECK_EQ(p.norm_weight.size(0), hidden);
    const float* q = p.query.ptr<const float>();
    const float* w = p.norm_weight.ptr<const float>();
    parallel_for(pool, n_tokens, /*grain=*/4, [&](int64_t begin, int64_t end) {
        const auto n_cand = static_cast<size_t>(n_blocks + 1);
        std::vector<const float*> rows(n_cand);
        std::vector<std::vector<float>> bufs(n_cand);
        std::vector<double> logits(n_cand), acc(static_cast<size_t>(hidden));
        for (int64_t t = begin; t < end; ++t) {
            for (int64_t i = 0; i < n_blocks; ++i) {
                const auto k = static_cast<size_t>(i);
                rows[k] = row_as_f32(element_ptr(p.bank, {t, i}), p.bank.dtype, hidden, bufs[k]);
            }
            rows[n_cand - 1] = row_as_f32(element_ptr(p.partial, {t}), p.partial.dtype, hidden, bufs[n_cand - 1]);
            double max_logit = -INFINITY;
            for (int64_t i = 0; i <= n_blocks; ++i) {
                const float* v = rows[static_cast<size_t>(i)];
                double sum_sq = 0.0, dot = 0.0;
                for (int64_t h = 0; h < hidden; ++h) sum_sq += static_cast<double>(v[h]) * v[h];
                const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + p.eps);
                for (int64_t h = 0; h < hidden; ++h) dot += static_cast<double>(q[h]) * w[h] * v[h] * inv_rms;
                logits[static_cast<size_t>(i)] = dot;
                max_logit = std::max(max_logit, dot);
            }
            double denom = 0.0;
            for (double& l : logits) {
                l = std::exp(l - max_logit);
                denom += l;
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t i = 0; i <= n_blocks; ++i) {
                const double a = logits[static_cast<size_t>(i)] / denom;
                const float* v = rows[static_cast<size_t>(i)];
                for (int64_t h = 0; h < hidden; ++h) acc[static_cast<size_t>(h)] += a * v[h];
            }
            write_row(element_ptr(p.out, {t}), p.out.dtype, hidden,
                      [&](int64_t h) { return acc[static_cast<size_t>(h)]; });
        }
    });
}

}  // namespace penstock::ref
