// KDA reference ops: the chunkwise gated delta rule against the recurrent form (T = 1, 17, 64, 65, 200, both gate
// forms, random carried-in state, ragged batches with permuted slots, strided q/k/v), one call vs two calls with the
// carried state, the recurrent form against the paper's matrix form written here in double, the short conv with its
// state against a zero-padded naive conv (whole and split), and the gate / l2norm / gated norm / SiTU against naive
// double formulas; bf16 SiTU (fused [rows, 2I] gate|up), sigmoid_gate and AttnRes reads equal the f32 result rounded
// once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ops_kda.h"
#include "ref_test_util.h"

namespace penstock::test {
namespace {

using kernels::KdaGateForm;

const kernels::Context kCtx{};

struct DeltaInputs {
    int64_t n_tokens, n_heads, k_dim, v_dim;
    Tensor qkv;   // [n_tokens, n_heads * (2 k_dim + v_dim)]: q, k, v side by side (as the model's fused buffer)
    Tensor g;     // [n_tokens, n_heads, k_dim]
    Tensor beta;  // [n_tokens, n_heads]
    TensorView q() const { return qkv.view().as_strided(0, {n_tokens, n_heads, k_dim}, {qkv.size(1), k_dim, 1}); }
    TensorView k() const {
        return qkv.view().as_strided(n_heads * k_dim, {n_tokens, n_heads, k_dim}, {qkv.size(1), k_dim, 1});
    }
    TensorView v() const {
        return qkv.view().as_strided(2 * n_heads * k_dim, {n_tokens, n_heads, v_dim}, {qkv.size(1), v_dim, 1});
    }
};

// Random KDA inputs: l2-normalised q and k, v in [-1, 1), beta in (0, 1), g from the requested gate form.
DeltaInputs make_inputs(std::mt19937& rng, int64_t n_tokens, int64_t n_heads, int64_t k_dim, int64_t v_dim,
                        KdaGateForm form) {
    DeltaInputs in{n_tokens, n_heads, k_dim, v_dim, {}, {}, {}};
    const int64_t width = n_heads * (2 * k_dim + v_dim);
    in.qkv = Tensor::from_f32({n_tokens, width}, random_floats(rng, n_tokens * width));
    kernels::l2norm({.out = in.q(), .in = in.q()}, kCtx);
    kernels::l2norm({.out = in.k(), .in = in.k()}, kCtx);
    Tensor f = Tensor::from_f32({n_tokens, n_heads, k_dim}, random_floats(rng, n_tokens * n_heads * k_dim, -3, 3));
    Tensor a_log = Tensor::from_f32({n_heads}, random_floats(rng, n_heads, -1.0f, 1.5f));
    Tensor dt = Tensor::from_f32({n_heads * k_dim}, random_floats(rng, n_heads * k_dim, -2, 1));
    in.g = Tensor::empty({n_tokens, n_heads, k_dim}, DType::kF32);
    kernels::kda_gate({.out = in.g, .f = f, .a_log = a_log, .dt_bias = dt, .form = form, .lower_bound = -5.0f}, kCtx);
    in.beta = Tensor::from_f32({n_tokens, n_heads}, random_floats(rng, n_tokens * n_heads, 0.05f, 1.0f));
    return in;
}

struct DeltaRun {
    std::vector<float> out, state;
};

// Runs one form on rows [r0, r1) split into sequences by `cu` (relative to r0), sequence s in slot slots[s], with
// every slot's state initialised from `state0`.
DeltaRun run_delta(const DeltaInputs& in, int64_t r0, int64_t r1, const std::vector<int32_t>& cu,
                   const std::vector<int32_t>& slots, const std::vector<float>& state0, bool chunked,
                   int64_t chunk_size = 64) {
    const int64_t n_slots = static_cast<int64_t>(state0.size()) / (in.n_heads * in.k_dim * in.v_dim);
    Tensor state = Tensor::from_f32({n_slots, in.n_heads, in.k_dim, in.v_dim}, state0);
    Tensor out = Tensor::zeros({r1 - r0, in.n_heads, in.v_dim}, DType::kF32);
    Tensor cu_t = i32_tensor(cu), slots_t = i32_tensor(slots);
    const kernels::GatedDeltaRuleParams p{.out = out,
                                          .q = in.q().slice(0, r0, r1),
                                          .k = in.k().slice(0, r0, r1),
                                          .v = in.v().slice(0, r0, r1),
                                          .g = in.g.view().slice(0, r0, r1),
                                          .beta = in.beta.view().slice(0, r0, r1),
                                          .state = state,
                                          .cu_seqlens = cu_t,
                                          .state_slots = slots_t,
                                          .scale = 1.0f / std::sqrt(static_cast<float>(in.k_dim)),
                                          .chunk_size = chunk_size};
    if (chunked) {
        kernels::gated_delta_rule_chunk(p, kCtx);
    } else {
        kernels::gated_delta_rule_recurrent(p, kCtx);
    }
    return {read_f32(out), read_f32(state)};
}

DeltaRun run_whole(const DeltaInputs& in, const std::vector<float>& state0, bool chunked, int64_t chunk_size = 64) {
    return run_delta(in, 0, in.n_tokens, {0, static_cast<int32_t>(in.n_tokens)}, {0}, state0, chunked, chunk_size);
}

class DeltaRuleForms : public ::testing::TestWithParam<std::tuple<int64_t, KdaGateForm>> {};

TEST_P(DeltaRuleForms, ChunkwiseMatchesRecurrent) {
    const auto [n_tokens, form] = GetParam();
    const int seed = 100 + static_cast<int>(n_tokens) + (form == KdaGateForm::kLowerBound ? 1000 : 0);
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t H = 3, K = 32, V = 16;
    DeltaInputs in = make_inputs(rng, n_tokens, H, K, V, form);
    const std::vector<float> state0 = random_floats(rng, H * K * V, -0.5f, 0.5f);  // carried in
    const DeltaRun rec = run_whole(in, state0, false);
    for (int64_t chunk : {64, 5}) {
        SCOPED_TRACE(::testing::Message() << "chunk_size " << chunk);
        const DeltaRun chk = run_whole(in, state0, true, chunk);
        EXPECT_TRUE(all_close(chk.out, to_double(rec.out), kF32Reduction, {n_tokens, H, V}));
        EXPECT_TRUE(all_close(chk.state, to_double(rec.state), kF32Reduction, {H, K, V}));
    }
}

TEST_P(DeltaRuleForms, TwoCallsWithCarriedStateEqualOne) {
    const auto [n_tokens, form] = GetParam();
    const int seed = 300 + static_cast<int>(n_tokens) + (form == KdaGateForm::kLowerBound ? 1000 : 0);
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t H = 2, K = 16, V = 8;
    DeltaInputs in = make_inputs(rng, n_tokens, H, K, V, form);
    const std::vector<float> state0 = random_floats(rng, H * K * V, -0.5f, 0.5f);
    const int64_t split = n_tokens < 2 ? 0 : n_tokens / 3 + 1;  // T = 1: an empty first call
    for (bool chunked : {false, true}) {
        SCOPED_TRACE(chunked ? "chunkwise" : "recurrent");
        const DeltaRun whole = run_whole(in, state0, chunked);
        const DeltaRun a = run_delta(in, 0, split, {0, static_cast<int32_t>(split)}, {0}, state0, chunked);
        const DeltaRun b =
            run_delta(in, split, n_tokens, {0, static_cast<int32_t>(n_tokens - split)}, {0}, a.state, chunked);
        std::vector<float> joined = a.out;
        joined.insert(joined.end(), b.out.begin(), b.out.end());
        EXPECT_TRUE(all_close(joined, to_double(whole.out), kF32Reduction, {n_tokens, H, V}));
        EXPECT_TRUE(all_close(b.state, to_double(whole.state), kF32Reduction, {H, K, V}));
    }
}

INSTANTIATE_TEST_SUITE_P(Lengths, DeltaRuleForms,
                         ::testing::Combine(::testing::Values(1, 17, 64, 65, 200),
                                            ::testing::Values(KdaGateForm::kSoftplus, KdaGateForm::kLowerBound)));

// A ragged batch of three sequences (one empty) in permuted slots equals each sequence alone; untouched slots stay.
TEST(DeltaRule, RaggedBatchWithPermutedSlots) {
    PENSTOCK_SEEDED(7);
    std::mt19937 rng(7);
    const int64_t H = 2, K = 16, V = 8, S = H * K * V;
    DeltaInputs in = make_inputs(rng, 70 + 0 + 9, H, K, V, KdaGateForm::kSoftplus);
    const std::vector<float> state0 = random_floats(rng, 4 * S, -0.5f, 0.5f);  // 4 slots
    const std::vector<int32_t> cu{0, 70, 70, 79};
    const std::vector<int32_t> slots{3, 0, 1};
    for (bool chunked : {false, true}) {
        SCOPED_TRACE(chunked ? "chunkwise" : "recurrent");
        const DeltaRun batch = run_delta(in, 0, 79, cu, slots, state0, chunked);
        for (size_t s = 0; s < 3; ++s) {
            const int64_t r0 = cu[s], r1 = cu[s + 1];
            const std::vector<float> own(state0.begin() + slots[s] * S, state0.begin() + (slots[s] + 1) * S);
            if (r1 == r0) {
                const std::vector<float> kept(batch.state.begin() + slots[s] * S,
                                              batch.state.begin() + (slots[s] + 1) * S);
                EXPECT_TRUE(same_bits(kept, own)) << "empty sequence's state changed";
                continue;
            }
            const DeltaRun alone = run_delta(in, r0, r1, {0, static_cast<int32_t>(r1 - r0)}, {0}, own, chunked);
            const std::vector<float> got(batch.out.begin() + r0 * H * V, batch.out.begin() + r1 * H * V);
            EXPECT_TRUE(same_bits(got, alone.out)) << "sequence " << s;
            const std::vector<float> st(batch.state.begin() + slots[s] * S, batch.state.begin() + (slots[s] + 1) * S);
            EXPECT_TRUE(same_bits(st, alone.state)) << "sequence " << s;
        }
        const std::vector<float> slot2(batch.state.begin() + 2 * S, batch.state.begin() + 3 * S);
        EXPECT_TRUE(same_bits(slot2, std::vector<float>(state0.begin() + 2 * S, state0.begin() + 3 * S)));
    }
}

// The recurrent op against the paper's form S_t = (I - beta k k^T) Diag(exp(g)) S_{t-1} + beta k v^T,
// o_t = S_t^T (scale q), written here in double.
TEST(DeltaRule, RecurrentMatchesPaperForm) {
    PENSTOCK_SEEDED(11);
    std::mt19937 rng(11);
    const int64_t T = 23, H = 2, K = 8, V = 4;
    DeltaInputs in = make_inputs(rng, T, H, K, V, KdaGateForm::kLowerBound);
    const std::vector<float> state0 = random_floats(rng, H * K * V, -0.5f, 0.5f);
    const DeltaRun rec = run_whole(in, state0, false);
    const std::vector<float> q = read_f32(in.q()), k = read_f32(in.k()), v = read_f32(in.v()), g = read_f32(in.g),
                             beta = read_f32(in.beta);
    const double scale = 1.0 / std::sqrt(static_cast<double>(K));
    std::vector<double> want_out(static_cast<size_t>(T * H * V)), want_state(static_cast<size_t>(H * K * V));
    for (int64_t h = 0; h < H; ++h) {
        std::vector<double> S(state0.begin() + h * K * V, state0.begin() + (h + 1) * K * V);
        for (int64_t t = 0; t < T; ++t) {
            auto at = [&](const std::vector<float>& x, int64_t d, int64_t dim) {
                return double(x[(t * H + h) * dim + d]);
            };
            std::vector<double> D(static_cast<size_t>(K * V));  // Diag(exp(g)) S
            for (int64_t a = 0; a < K; ++a) {
                for (int64_t j = 0; j < V; ++j) D[a * V + j] = std::exp(at(g, a, K)) * S[a * V + j];
            }
            const double b = beta[t * H + h];
            for (int64_t a = 0; a < K; ++a) {
                for (int64_t j = 0; j < V; ++j) {
                    double projected = 0.0;  // (k k^T D)[a, j]
                    for (int64_t c = 0; c < K; ++c) projected += at(k, a, K) * at(k, c, K) * D[c * V + j];
                    S[a * V + j] = D[a * V + j] - b * projected + b * at(k, a, K) * at(v, j, V);
                }
            }
            for (int64_t j = 0; j < V; ++j) {
                double o = 0.0;
                for (int64_t a = 0; a < K; ++a) o += S[a * V + j] * at(q, a, K) * scale;
                want_out[static_cast<size_t>((t * H + h) * V + j)] = o;
            }
        }
        std::copy(S.begin(), S.end(), want_state.begin() + h * K * V);
    }
    EXPECT_TRUE(all_close(rec.out, want_out, kF32Reduction, {T, H, V}));
    EXPECT_TRUE(all_close(rec.state, want_state, kF32Reduction, {H, K, V}));
}

// ---- short conv ----

std::vector<float> run_conv(const TensorView& in, const Tensor& weight, std::vector<float>* state,
                            const std::vector<int32_t>& cu, const std::vector<int32_t>& slots, bool silu) {
    const int64_t channels = in.size(1), hist = weight.size(1) - 1;
    Tensor st = Tensor::from_f32({static_cast<int64_t>(state->size()) / (hist * channels), hist, channels}, *state);
    Tensor out = Tensor::zeros({in.size(0), channels}, DType::kF32);
    Tensor cu_t = i32_tensor(cu), slots_t = i32_tensor(slots);
    kernels::short_conv({.out = out,
                         .in = in,
                         .weight = weight,
                         .conv_state = st,
                         .cu_seqlens = cu_t,
                         .state_slots = slots_t,
                         .silu = silu},
                        kCtx);
    *state = read_f32(st);
    return read_f32(out);
}

// The fused per-head L2 norm equals the conv followed by l2norm on those heads; the other channels are untouched.
TEST(ShortConv, FusedL2NormEqualsConvThenL2Norm) {
    PENSTOCK_SEEDED(23);
    std::mt19937 rng(23);
    const int64_t T = 19, C = 12, KW = 3, D = 4;
    Buffer in = random_buffer(rng, {T, C}, /*strided=*/false);
    Tensor w = Tensor::from_f32({C, KW}, random_floats(rng, C * KW));
    std::vector<float> st0 = random_floats(rng, 2 * (KW - 1) * C);
    const std::vector<int32_t> cu{0, 7, 19}, slots{1, 0};
    std::vector<float> st_plain = st0, st_fused = st0;
    const std::vector<float> plain = run_conv(in.view, w, &st_plain, cu, slots, true);
    Tensor st = Tensor::from_f32({2, KW - 1, C}, st0);
    Tensor out = Tensor::zeros({T, C}, DType::kF32);
    Tensor cu_t = i32_tensor(cu), slots_t = i32_tensor(slots);
    kernels::short_conv({.out = out, .in = in.view, .weight = w, .conv_state = st, .cu_seqlens = cu_t,
                         .state_slots = slots_t, .silu = true, .norm_channels = 2 * D, .norm_dim = D, .norm_eps = 1e-6f},
                        kCtx);
    const std::vector<float> fused = read_f32(out);
    EXPECT_EQ(read_f32(st), st_plain);
    std::vector<double> want(plain.begin(), plain.end());
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t g = 0; g < 2; ++g) {
            double ss = 0.0;
            for (int64_t i = 0; i < D; ++i) ss += double(plain[t * C + g * D + i]) * plain[t * C + g * D + i];
            for (int64_t i = 0; i < D; ++i) want[t * C + g * D + i] = plain[t * C + g * D + i] / std::sqrt(ss + 1e-6);
        }
    }
    EXPECT_TRUE(all_close(fused, want, kF32Elementwise, {T, C}));
    for (int64_t t = 0; t < T; ++t) {  // the v channels are the plain conv, bit for bit
        for (int64_t c = 2 * D; c < C; ++c) EXPECT_EQ(fused[t * C + c], plain[t * C + c]);
    }
}

TEST(ShortConv, MatchesZeroPaddedConvAndSplitsCarryState) {
    PENSTOCK_SEEDED(21);
    std::mt19937 rng(21);
    const int64_t T = 41, C = 6, KW = 4;
    Buffer in = random_buffer(rng, {T, C}, /*strided=*/true);
    Tensor w = Tensor::from_f32({C, KW}, random_floats(rng, C * KW));
    const std::vector<float> x = read_f32(in.view);
    for (bool silu : {false, true}) {
        SCOPED_TRACE(silu ? "silu" : "linear");
        std::vector<double> want(static_cast<size_t>(T * C));
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t c = 0; c < C; ++c) {
                double acc = 0.0;
                for (int64_t j = 0; j < KW; ++j) {
                    const int64_t src = t - (KW - 1) + j;
                    if (src >= 0) acc += double(w.ptr<float>()[c * KW + j]) * x[src * C + c];
                }
                want[t * C + c] = silu ? acc / (1.0 + std::exp(-acc)) : acc;
            }
        }
        std::vector<float> state(static_cast<size_t>((KW - 1) * C), 0.0f);
        const std::vector<float> whole = run_conv(in.view, w, &state, {0, static_cast<int32_t>(T)}, {0}, silu);
        EXPECT_TRUE(all_close(whole, want, kF32Elementwise, {T, C}));
        const std::vector<float> final_state = state;
        // Pieces of 1, 2 (shorter than the history), 17 and the rest, each continuing from the carried state.
        std::fill(state.begin(), state.end(), 0.0f);
        std::vector<float> pieces;
        int64_t r = 0;
        for (int64_t len : {int64_t{1}, int64_t{2}, int64_t{17}, T - 20}) {
            const std::vector<float> part =
                run_conv(in.view.slice(0, r, r + len), w, &state, {0, static_cast<int32_t>(len)}, {0}, silu);
            pieces.insert(pieces.end(), part.begin(), part.end());
            r += len;
        }
        EXPECT_TRUE(same_bits(pieces, whole));
        EXPECT_TRUE(same_bits(state, final_state));
    }
}

TEST(ShortConv, RaggedBatchUsesEachSequencesSlot) {
    PENSTOCK_SEEDED(22);
    std::mt19937 rng(22);
    const int64_t C = 5, KW = 3;
    Tensor in = Tensor::from_f32({9, C}, random_floats(rng, 9 * C));
    Tensor w = Tensor::from_f32({C, KW}, random_floats(rng, C * KW));
    std::vector<float> state = random_floats(rng, 3 * (KW - 1) * C);  // 3 slots with history
    std::vector<float> batch_state = state;
    const std::vector<float> batch = run_conv(in, w, &batch_state, {0, 4, 9}, {2, 0}, true);
    for (int s = 0; s < 2; ++s) {
        const int32_t r0 = s == 0 ? 0 : 4, r1 = s == 0 ? 4 : 9, slot = s == 0 ? 2 : 0;
        const int64_t S = (KW - 1) * C;
        std::vector<float> own(state.begin() + slot * S, state.begin() + (slot + 1) * S);
        const std::vector<float> alone = run_conv(in.view().slice(0, r0, r1), w, &own, {0, r1 - r0}, {0}, true);
        EXPECT_TRUE(same_bits(std::vector<float>(batch.begin() + r0 * C, batch.begin() + r1 * C), alone));
        EXPECT_TRUE(
            same_bits(std::vector<float>(batch_state.begin() + slot * S, batch_state.begin() + (slot + 1) * S), own));
    }
    const int64_t S = (KW - 1) * C;
    EXPECT_TRUE(same_bits(std::vector<float>(batch_state.begin() + S, batch_state.begin() + 2 * S),
                          std::vector<float>(state.begin() + S, state.begin() + 2 * S)));
}

// ---- elementwise / norms ----

TEST(KdaGate, BothFormsMatchNaive) {
    PENSTOCK_SEEDED(31);
    std::mt19937 rng(31);
    const int64_t T = 5, H = 3, D = 4;
    std::vector<float> fv = random_floats(rng, T * H * D, -30.0f, 30.0f);  // crosses the softplus threshold 20
    Tensor f = Tensor::from_f32({T, H, D}, fv);
    Tensor a_log = Tensor::from_f32({H}, random_floats(rng, H, -1, 2));
    Tensor dt = Tensor::from_f32({H * D}, random_floats(rng, H * D, -1, 1));
    for (KdaGateForm form : {KdaGateForm::kSoftplus, KdaGateForm::kLowerBound}) {
        Tensor out = Tensor::empty({T, H, D}, DType::kF32);
        kernels::kda_gate({.out = out, .f = f, .a_log = a_log, .dt_bias = dt, .form = form, .lower_bound = -5.0f},
                          kCtx);
        std::vector<double> want(fv.size());
        for (int64_t i = 0; i < T * H * D; ++i) {
            const int64_t h = (i / D) % H;
            const double rate = std::exp(double(a_log.ptr<float>()[h]));
            const double u = double(fv[i]) + dt.ptr<float>()[i % (H * D)];
            want[i] = form == KdaGateForm::kSoftplus ? -rate * (u > 20 ? u : std::log(1 + std::exp(u)))
                                                     : -5.0 / (1.0 + std::exp(-rate * u));
        }
        EXPECT_TRUE(all_close(read_f32(out), want, kF32Elementwise, {T, H, D}));
    }
}

TEST(L2Norm, MatchesNaiveOnStridedHeads) {
    PENSTOCK_SEEDED(32);
    std::mt19937 rng(32);
    Buffer in = random_buffer(rng, {4, 3, 8}, /*strided=*/true);
    const std::vector<float> x = read_f32(in.view);
    std::vector<double> want(x.size());
    for (size_t r = 0; r < 12; ++r) {
        double ss = 0.0;
        for (size_t i = 0; i < 8; ++i) ss += double(x[r * 8 + i]) * x[r * 8 + i];
        for (size_t i = 0; i < 8; ++i) want[r * 8 + i] = x[r * 8 + i] / std::sqrt(ss + 1e-6);
    }
    kernels::l2norm({.out = in.view, .in = in.view, .eps = 1e-6f}, kCtx);
    EXPECT_TRUE(all_close(read_f32(in.view), want, kF32Reduction, {4, 3, 8}));
}

TEST(GatedRmsNorm, MatchesNaive) {
    PENSTOCK_SEEDED(33);
    std::mt19937 rng(33);
    const int64_t R = 6, D = 16;
    Buffer x = random_buffer(rng, {R, D}, /*strided=*/true, -2, 2);
    Tensor gate = Tensor::from_f32({R, D}, random_floats(rng, R * D, -4, 4));
    Tensor w = Tensor::from_f32({D}, random_floats(rng, D, 0.5f, 1.5f));
    const std::vector<float> xv = read_f32(x.view);
    std::vector<double> want(xv.size());
    for (int64_t r = 0; r < R; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < D; ++i) ss += double(xv[r * D + i]) * xv[r * D + i];
        const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
        for (int64_t i = 0; i < D; ++i) {
            const double gt = gate.ptr<float>()[r * D + i];
            want[r * D + i] = w.ptr<float>()[i] * xv[r * D + i] * inv / (1.0 + std::exp(-gt));
        }
    }
    Tensor out = Tensor::empty({R, D}, DType::kF32);
    kernels::gated_rms_norm({.out = out, .in = x.view, .gate = gate, .weight = w, .eps = 1e-5f}, kCtx);
    EXPECT_TRUE(all_close(read_f32(out), want, kF32Reduction, {R, D}));
}

TEST(SituMul, MatchesNaive) {
    PENSTOCK_SEEDED(34);
    std::mt19937 rng(34);
    const int64_t R = 3, D = 40;
    Tensor g = Tensor::from_f32({R, D}, random_floats(rng, R * D, -60, 60));  // saturates both tanh
    Tensor u = Tensor::from_f32({R, D}, random_floats(rng, R * D, -60, 60));
    std::vector<double> want(static_cast<size_t>(R * D));
    for (int64_t i = 0; i < R * D; ++i) {
        const double gi = g.ptr<float>()[i], ui = u.ptr<float>()[i];
        want[i] = 4.0 * std::tanh(gi / 4.0) / (1.0 + std::exp(-gi)) * 25.0 * std::tanh(ui / 25.0);
    }
    Tensor out = Tensor::empty({R, D}, DType::kF32);
    kernels::situ_mul({.out = out, .gate = g, .up = u, .beta = 4.0f, .linear_beta = 25.0f}, kCtx);
    EXPECT_TRUE(all_close(read_f32(out), want, kF32Elementwise, {R, D}));
}

// bf16 SiTU reads gate and up straight from one [rows, 2I] GEMM output and writes bf16: the f32 result on the same
// (bf16-valued) inputs rounded once, bit for bit, for I = 1, 3, 40, 2051 (odd rows); in place over the gate half the
// up half is left untouched.
TEST(SituMul, Bf16FromFusedGateUpRoundsTheF32ResultOnce) {
    uint32_t seed = 3400;
    for (const auto& [R, I] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 3}, {7, 40}, {5, 2051}}) {
        SCOPED_TRACE(::testing::Message() << "rows=" << R << " I=" << I);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        Buffer gu = random_buffer(rng, {R, 2 * I}, /*strided=*/false, -60, 60);
        const Buffer gu16 = to_bf16_buffer(gu);
        Tensor out = Tensor::empty({R, I}, DType::kF32);
        kernels::situ_mul({.out = out, .gate = gu.view.slice(1, 0, I), .up = gu.view.slice(1, I, 2 * I)}, kCtx);
        const std::vector<float> want = rounded_bf16(read_f32(out));
        Tensor out16 = Tensor::empty({R, I}, DType::kBF16);
        kernels::situ_mul({.out = out16, .gate = gu16.view.slice(1, 0, I), .up = gu16.view.slice(1, I, 2 * I)}, kCtx);
        EXPECT_TRUE(same_bits(read_bf16(out16), want));
        const std::vector<float> up_before = read_bf16(gu16.view.slice(1, I, 2 * I));
        const TensorView gate16 = gu16.view.slice(1, 0, I);
        kernels::situ_mul({.out = gate16, .gate = gate16, .up = gu16.view.slice(1, I, 2 * I)}, kCtx);
        EXPECT_TRUE(same_bits(read_bf16(gate16), want));
        EXPECT_TRUE(same_bits(read_bf16(gu16.view.slice(1, I, 2 * I)), up_before));
    }
}

// bf16 sigmoid_gate (strided rows; gate f32 or bf16): the f32 result rounded once, bit for bit.
TEST(SigmoidGate, Bf16RoundsTheF32ResultOnce) {
    PENSTOCK_SEEDED(3410);
    std::mt19937 rng(3410);
    const int64_t R = 5, D = 37;
    Buffer x = random_buffer(rng, {R, D}, /*strided=*/true, -4, 4);
    Buffer g = random_buffer(rng, {R, D}, /*strided=*/true, -30, 30);
    const Buffer x16 = to_bf16_buffer(x);
    const Buffer g16 = to_bf16_buffer(g);  // g now holds bf16 values too: both gate dtypes give the same result
    Tensor out = Tensor::empty({R, D}, DType::kF32);
    kernels::sigmoid_gate({.out = out, .in = x.view, .gate = g.view}, kCtx);
    const std::vector<float> want = rounded_bf16(read_f32(out));
    for (const TensorView& gate : {g.view, g16.view}) {
        Tensor out16 = Tensor::empty({R, D}, DType::kBF16);
        kernels::sigmoid_gate({.out = out16, .in = x16.view, .gate = gate}, kCtx);
        EXPECT_TRUE(same_bits(read_bf16(out16), want)) << "gate " << dtype_name(gate.dtype);
    }
    kernels::sigmoid_gate({.out = x16.view, .in = x16.view, .gate = g.view}, kCtx);  // in place
    EXPECT_TRUE(same_bits(read_bf16(x16.view), want));
}

// bf16 AttnRes read (bf16 partial and out; bank bf16 or f32, strided): the f32 result on the same values rounded
// once, bit for bit; in place over the partial rows too.
TEST(AttnResMix, Bf16RoundsTheF32ResultOnce) {
    PENSTOCK_SEEDED(3420);
    std::mt19937 rng(3420);
    const int64_t T = 3, NB = 3, H = 20;
    Buffer bank = random_buffer(rng, {T, NB, H}, /*strided=*/true, -2, 2);
    Buffer partial = random_buffer(rng, {T, H}, /*strided=*/true, -2, 2);
    const Buffer bank16 = to_bf16_buffer(bank);
    const Buffer partial16 = to_bf16_buffer(partial);
    Tensor q = Tensor::from_f32({H}, random_floats(rng, H, -0.5f, 0.5f));
    Tensor w = Tensor::from_f32({H}, random_floats(rng, H, 0.5f, 1.5f));
    Tensor out = Tensor::empty({T, H}, DType::kF32);
    kernels::attn_res_mix({.out = out, .bank = bank.view, .partial = partial.view, .query = q, .norm_weight = w}, kCtx);
    const std::vector<float> want = rounded_bf16(read_f32(out));
    for (const TensorView& b : {bank16.view, bank.view}) {
        Tensor out16 = Tensor::empty({T, H}, DType::kBF16);
        kernels::attn_res_mix({.out = out16, .bank = b, .partial = partial16.view, .query = q, .norm_weight = w}, kCtx);
        EXPECT_TRUE(same_bits(read_bf16(out16), want)) << "bank " << dtype_name(b.dtype);
    }
    kernels::attn_res_mix(
        {.out = partial16.view, .bank = bank16.view, .partial = partial16.view, .query = q, .norm_weight = w}, kCtx);
    EXPECT_TRUE(same_bits(read_bf16(partial16.view), want));
}

// gated_rms_norm into a bf16 out (the KDA o_proj input): the f32 result rounded once, bit for bit.
TEST(GatedRmsNorm, Bf16OutRoundsTheF32ResultOnce) {
    PENSTOCK_SEEDED(3430);
    std::mt19937 rng(3430);
    const int64_t R = 7, D = 130;
    const Buffer x = random_buffer(rng, {R, D}, /*strided=*/true, -3, 3);
    const Buffer g = random_buffer(rng, {R, D}, /*strided=*/true, -6, 6);
    Tensor w = Tensor::from_f32({D}, random_floats(rng, D, 0.5f, 1.5f));
    Tensor out = Tensor::empty({R, D}, DType::kF32);
    kernels::gated_rms_norm({.out = out, .in = x.view, .gate = g.view, .weight = w, .eps = 1e-5f}, kCtx);
    Tensor out16 = Tensor::empty({R, D}, DType::kBF16);
    kernels::gated_rms_norm({.out = out16, .in = x.view, .gate = g.view, .weight = w, .eps = 1e-5f}, kCtx);
    EXPECT_TRUE(same_bits(read_bf16(out16), rounded_bf16(read_f32(out))));
}

// gated_rms_norm's fused FP8 quantisation reads a token's heads as one row (KDA's o_proj input): heads of 48
// channels, so 128-column groups straddle heads; scales in the FP8 GEMMs' column-major layout, each the group's amax
// / 448 over the bf16 outputs.
TEST(GatedRmsNorm, FusedQuantTakesATokensHeadsAsOneRow) {
    PENSTOCK_SEEDED(3440);
    std::mt19937 rng(3440);
    const int64_t T = 5, H = 3, D = 48, W = H * D, kb = (W + 127) / 128;
    const Buffer x = random_buffer(rng, {T * H, D}, /*strided=*/false, -3, 3);
    const Buffer g = random_buffer(rng, {T * H, D}, /*strided=*/false, -6, 6);
    Tensor w = Tensor::from_f32({D}, random_floats(rng, D, 0.5f, 1.5f));
    Tensor out16 = Tensor::empty({T * H, D}, DType::kBF16);
    Tensor q = Tensor::zeros({T, W}, DType::kF8E4M3);
    Tensor sc = Tensor::zeros({kb * T}, DType::kF32);
    kernels::gated_rms_norm({.out = out16,
                             .in = x.view,
                             .gate = g.view,
                             .weight = w,
                             .eps = 1e-5f,
                             .quant_out = q,
                             .quant_scale = sc.view().as_strided(0, {T, kb}, {1, T}),
                             .quant_heads = H},
                            kCtx);
    Tensor plain = Tensor::empty({T * H, D}, DType::kBF16);
    kernels::gated_rms_norm({.out = plain, .in = x.view, .gate = g.view, .weight = w, .eps = 1e-5f}, kCtx);
    const std::vector<float> y = read_bf16(plain.view());
    EXPECT_TRUE(same_bits(read_bf16(out16), y));
    // The token rows by hand: head h of token t is row t * H + h.
    std::vector<float> rows(static_cast<size_t>(T * W));
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t i = 0; i < D; ++i) rows[size_t(t * W + h * D + i)] = y[size_t((t * H + h) * D + i)];
        }
    }
    Tensor want_q = Tensor::zeros({T, W}, DType::kF8E4M3);
    Tensor want_s = Tensor::zeros({T, kb}, DType::kF32);
    kernels::fp8_act_quant({.out = want_q, .scale = want_s, .in = Tensor::from_f32({T, W}, rows)}, kCtx);
    EXPECT_EQ(0, std::memcmp(q.view().data, want_q.view().data, static_cast<size_t>(T * W)));
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t b = 0; b < kb; ++b) {
            float amax = 0.0f;
            for (int64_t i = 128 * b; i < std::min(W, 128 * (b + 1)); ++i)
                amax = std::max(amax, std::fabs(rows[size_t(t * W + i)]));
            EXPECT_EQ(sc.ptr<float>()[b * T + t], std::max(amax, 1e-4f) / 448.0f) << "token " << t << " group " << b;
            EXPECT_EQ(sc.ptr<float>()[b * T + t], want_s.ptr<float>()[t * kb + b]);
        }
    }
}

// quant_heads must divide the rows.
TEST(GatedRmsNormDeathTest, QuantHeadsMustDivideTheRows) {
    Tensor x = Tensor::zeros({5, 8}, DType::kF32);
    Tensor w = Tensor::zeros({8}, DType::kF32);
    Tensor q = Tensor::zeros({2, 16}, DType::kF8E4M3);
    Tensor sc = Tensor::zeros({2, 1}, DType::kF32);
    EXPECT_DEATH(
        kernels::gated_rms_norm(
            {.out = x, .in = x, .gate = x, .weight = w, .quant_out = q, .quant_scale = sc, .quant_heads = 2}, kCtx),
        "quant_heads");
}

// Mixed activation dtypes are programmer errors that name the operand.
TEST(SituMulDeathTest, MixedDtypesAbort) {
    Tensor g = Tensor::zeros({2, 3}, DType::kBF16);
    Tensor u = Tensor::zeros({2, 3}, DType::kF32);
    EXPECT_DEATH(kernels::situ_mul({.out = g, .gate = g, .up = u}, kCtx), "situ_mul up");
}

// AttnRes read: softmax over depth of [bank rows ; partial] with logits query . RMSNorm_w(row), raw rows mixed; an
// empty bank returns the partial row unchanged.
TEST(AttnResMix, MatchesNaiveAndEmptyBankIsIdentity) {
    PENSTOCK_SEEDED(35);
    std::mt19937 rng(35);
    const int64_t T = 3, NB = 4, H = 12, used = 3;
    Buffer bank = random_buffer(rng, {T, NB, H}, /*strided=*/true, -2, 2);
    Buffer partial = random_buffer(rng, {T, H}, /*strided=*/true, -2, 2);
    Tensor q = Tensor::from_f32({H}, random_floats(rng, H, -0.5f, 0.5f));
    Tensor w = Tensor::from_f32({H}, random_floats(rng, H, 0.5f, 1.5f));
    const std::vector<float> bv = read_f32(bank.view), pv = read_f32(partial.view);
    std::vector<double> want(static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t) {
        std::vector<const float*> rows;
        for (int64_t i = 0; i < used; ++i) rows.push_back(&bv[(t * NB + i) * H]);
        rows.push_back(&pv[t * H]);
        std::vector<double> logit;
        for (const float* r : rows) {
            double ss = 0.0, dot = 0.0;
            for (int64_t h = 0; h < H; ++h) ss += double(r[h]) * r[h];
            for (int64_t h = 0; h < H; ++h)
                dot += double(q.ptr<float>()[h]) * w.ptr<float>()[h] * r[h] / std::sqrt(ss / H + 1e-5);
            logit.push_back(dot);
        }
        double z = 0.0;
        for (double l : logit) z += std::exp(l);
        for (int64_t h = 0; h < H; ++h) {
            double acc = 0.0;
            for (size_t i = 0; i < rows.size(); ++i) acc += std::exp(logit[i]) / z * rows[i][h];
            want[t * H + h] = acc;
        }
    }
    Tensor out = Tensor::empty({T, H}, DType::kF32);
    kernels::attn_res_mix({.out = out,
                           .bank = bank.view.slice(1, 0, used),
                           .partial = partial.view,
                           .query = q,
                           .norm_weight = w,
                           .eps = 1e-5f},
                          kCtx);
    EXPECT_TRUE(all_close(read_f32(out), want, kF32Reduction, {T, H}));
    kernels::attn_res_mix(
        {.out = out, .bank = bank.view.slice(1, 0, 0), .partial = partial.view, .query = q, .norm_weight = w}, kCtx);
    EXPECT_TRUE(same_bits(read_f32(out), pv));
}

TEST(Sigmoid, MatchesNaive) {
    Tensor x = Tensor::from_f32({2, 3}, std::vector<float>{-100.0f, -1.0f, 0.0f, 0.5f, 3.0f, 100.0f});
    Tensor out = Tensor::empty({2, 3}, DType::kF32);
    kernels::sigmoid({.out = out, .in = x}, kCtx);
    std::vector<double> want;
    for (float v : read_f32(x)) want.push_back(1.0 / (1.0 + std::exp(-double(v))));
    EXPECT_TRUE(all_close(read_f32(out), want, kF32Elementwise, {2, 3}));
}

}  // namespace
}  // namespace penstock::test
