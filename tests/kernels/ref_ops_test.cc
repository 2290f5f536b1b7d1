// CPU reference tests for the row-wise ops (embedding, norms, gemm, elementwise, softmax, rope): each op against a
// naive double-precision computation written here, on seeded random inputs, including 1 row, odd sizes, strided views
// (whose padding must stay untouched), in-place aliasing and thread-count independence.
#include "kernels/ref/ref_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "ref_test_util.h"

namespace penstock::test {
namespace {

struct RowCase {
    int64_t n_rows;
    int64_t dim;
    bool strided;
};

const std::vector<RowCase> kRowCases = {{1, 1, false}, {1, 7, true}, {5, 33, false}, {5, 33, true}, {17, 64, true}};

// Expected contents of a whole backing buffer: the original, with `view_values` (row-major over `view`) in place.
std::vector<double> expected_backing(const Buffer& b, const std::vector<float>& original,
                                     const std::vector<double>& view_values) {
    std::vector<double> expect = to_double(original);
    const float* base = b.backing.ptr<float>();
    size_t i = 0;
    for_each_index(b.view.shape_vec(), [&](const std::vector<int64_t>& idx) {
        const int64_t off = (b.view.ptr<float>() + offset_of(b.view, idx)) - base;
        expect[static_cast<size_t>(off)] = view_values[i++];
    });
    return expect;
}

std::vector<float> backing_values(const Buffer& b) { return read_f32(b.backing.view()); }

TEST(RefEmbedding, F32AndBf16TablesMatchNaive) {
    constexpr uint32_t kSeed = 101;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (int64_t n_tokens : {1, 7}) {
        for (int64_t hidden : {1, 13}) {
            const int64_t vocab = 11;
            std::vector<int32_t> ids(static_cast<size_t>(n_tokens));
            for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
            const Tensor ids_t = i32_tensor(ids);
            const std::vector<float> table = random_floats(rng, vocab * hidden);
            std::vector<uint16_t> table_bf16(table.size());
            for (size_t i = 0; i < table.size(); ++i) table_bf16[i] = float_to_bf16(table[i]);
            Tensor t_f32 = Tensor::from_f32({vocab, hidden}, table);
            Tensor t_bf16 = Tensor::empty({vocab, hidden}, DType::kBF16);
            std::memcpy(t_bf16.ptr<uint16_t>(), table_bf16.data(), table_bf16.size() * 2);

            std::vector<double> expect_f32, expect_bf16;
            for (int32_t id : ids) {
                for (int64_t i = 0; i < hidden; ++i) {
                    const size_t j = static_cast<size_t>(id * hidden + i);
                    expect_f32.push_back(table[j]);
                    const uint32_t bits = static_cast<uint32_t>(table_bf16[j]) << 16;  // bf16 is the top half of f32
                    float f;
                    std::memcpy(&f, &bits, 4);
                    expect_bf16.push_back(f);
                }
            }
            Tensor out = Tensor::zeros({n_tokens, hidden}, DType::kF32);
            ref::embedding({.out = out, .table = t_f32, .ids = ids_t}, nullptr);
            EXPECT_TRUE(all_close(read_f32(out), expect_f32, kExact)) << "f32 n_tokens=" << n_tokens;
            ref::embedding({.out = out, .table = t_bf16, .ids = ids_t}, nullptr);
            EXPECT_TRUE(all_close(read_f32(out), expect_bf16, kExact)) << "bf16 n_tokens=" << n_tokens;
        }
    }
}

TEST(RefEmbeddingDeathTest, OutOfRangeIdAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenBLAS has started threads by now
    Tensor table = Tensor::zeros({4, 2}, DType::kF32);
    Tensor out = Tensor::zeros({1, 2}, DType::kF32);
    const Tensor ids = i32_tensor({4});
    EXPECT_DEATH(ref::embedding({.out = out, .table = table, .ids = ids}, nullptr), "has id 4, vocab 4");
}

TEST(RefRmsNorm, MatchesNaiveIncludingStridedAndInPlace) {
    constexpr uint32_t kSeed = 202;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const RowCase& c : kRowCases) {
        for (float eps : {1e-6f, 0.25f}) {  // a large eps makes its effect visible
            SCOPED_TRACE(::testing::Message()
                         << "n_rows=" << c.n_rows << " dim=" << c.dim << " strided=" << c.strided << " eps=" << eps);
            Buffer in = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -2.0f, 2.0f);
            Buffer out = random_buffer(rng, {c.n_rows, c.dim}, c.strided);
            const Tensor w = Tensor::from_f32({c.dim}, random_floats(rng, c.dim, 0.5f, 1.5f));
            const std::vector<float> x = read_f32(in.view);
            std::vector<double> expect;
            for (int64_t r = 0; r < c.n_rows; ++r) {
                double ss = 0;
                for (int64_t i = 0; i < c.dim; ++i) ss += double(x[size_t(r * c.dim + i)]) * x[size_t(r * c.dim + i)];
                const double inv = 1.0 / std::sqrt(ss / double(c.dim) + eps);
                for (int64_t i = 0; i < c.dim; ++i)
                    expect.push_back(w.ptr<float>()[i] * (x[size_t(r * c.dim + i)] * inv));
            }
            const std::vector<float> out_orig = backing_values(out);
            ref::rms_norm({.out = out.view, .in = in.view, .weight = w, .eps = eps}, nullptr);
            EXPECT_TRUE(all_close(backing_values(out), expected_backing(out, out_orig, expect), kF32Reduction,
                                  out.backing.view().shape_vec()));
            // In place: out aliases in.
            const std::vector<float> in_orig = backing_values(in);
            ref::rms_norm({.out = in.view, .in = in.view, .weight = w, .eps = eps}, nullptr);
            EXPECT_TRUE(all_close(backing_values(in), expected_backing(in, in_orig, expect), kF32Reduction));
        }
    }
}

// The fused residual add and FP8 quantisation equal the ops in sequence (add on the rows, rms_norm, fp8_act_quant
// of out) bit for bit, on strided rows with whole and partial 128-column groups.
TEST(RefRmsNorm, FusedResidualAndQuantEqualTheOpsInSequence) {
    constexpr uint32_t kSeed = 203;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const RowCase& c : {RowCase{1, 7, true}, RowCase{5, 200, false}, RowCase{6, 256, true}}) {
        SCOPED_TRACE(::testing::Message() << "n_rows=" << c.n_rows << " dim=" << c.dim << " strided=" << c.strided);
        const int64_t kb = (c.dim + 127) / 128;
        Buffer in = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -2.0f, 2.0f);
        Buffer res = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -2.0f, 2.0f);
        const Tensor w = Tensor::from_f32({c.dim}, random_floats(rng, c.dim, 0.5f, 1.5f));
        // The sequence on a copy of in.
        const std::vector<float> x = read_f32(in.view), d = read_f32(res.view);
        std::vector<float> sum(x.size());
        for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + d[i];
        const Tensor sum_t = Tensor::from_f32({c.n_rows, c.dim}, sum);
        Tensor want_out = Tensor::zeros({c.n_rows, c.dim}, DType::kF32);
        Tensor want_q = Tensor::zeros({c.n_rows, c.dim}, DType::kF8E4M3);
        Tensor want_s = Tensor::zeros({c.n_rows, kb}, DType::kF32);
        ref::rms_norm({.out = want_out, .in = sum_t, .weight = w, .eps = 1e-6f}, nullptr);
        ref::fp8_act_quant({.out = want_q, .scale = want_s, .in = want_out}, nullptr);
        // The fused op, scales in the transposed layout.
        Buffer out = random_buffer(rng, {c.n_rows, c.dim}, c.strided);
        Tensor got_q = Tensor::zeros({c.n_rows, c.dim}, DType::kF8E4M3);
        Tensor got_s = Tensor::zeros({kb * c.n_rows}, DType::kF32);
        ref::rms_norm({.out = out.view,
                       .in = in.view,
                       .weight = w,
                       .eps = 1e-6f,
                       .residual = res.view,
                       .quant_out = got_q,
                       .quant_scale = got_s.view().as_strided(0, {c.n_rows, kb}, {1, c.n_rows})},
                      nullptr);
        EXPECT_EQ(read_f32(in.view), sum) << "in holds the residual sum";
        EXPECT_EQ(read_f32(out.view), read_f32(want_out.view()));
        EXPECT_EQ(0, std::memcmp(got_q.view().data, want_q.view().data, static_cast<size_t>(c.n_rows * c.dim)));
        for (int64_t r = 0; r < c.n_rows; ++r) {
            for (int64_t g = 0; g < kb; ++g)
                EXPECT_EQ(got_s.ptr<float>()[g * c.n_rows + r], want_s.ptr<float>()[r * kb + g]);
        }
    }
}

TEST(RefLayerNorm, MatchesNaiveWithAndWithoutBias) {
    constexpr uint32_t kSeed = 303;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const RowCase& c : kRowCases) {
        for (bool with_bias : {false, true}) {
            const float eps = with_bias ? 1e-5f : 0.25f;  // a large eps makes its effect visible
            SCOPED_TRACE(::testing::Message() << "n_rows=" << c.n_rows << " dim=" << c.dim << " bias=" << with_bias);
            Buffer in = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -1.0f, 3.0f);
            Buffer out = random_buffer(rng, {c.n_rows, c.dim}, c.strided);
            const Tensor w = Tensor::from_f32({c.dim}, random_floats(rng, c.dim, 0.5f, 1.5f));
            const Tensor b = Tensor::from_f32({c.dim}, random_floats(rng, c.dim));
            const std::vector<float> x = read_f32(in.view);
            std::vector<double> expect;
            for (int64_t r = 0; r < c.n_rows; ++r) {
                double mean = 0, var = 0;
                for (int64_t i = 0; i < c.dim; ++i) mean += x[size_t(r * c.dim + i)];
                mean /= double(c.dim);
                for (int64_t i = 0; i < c.dim; ++i) var += std::pow(x[size_t(r * c.dim + i)] - mean, 2);
                var /= double(c.dim);
                for (int64_t i = 0; i < c.dim; ++i) {
                    double y = (x[size_t(r * c.dim + i)] - mean) / std::sqrt(var + eps) * w.ptr<float>()[i];
                    if (with_bias) y += b.ptr<float>()[i];
                    expect.push_back(y);
                }
            }
            const std::vector<float> out_orig = backing_values(out);
            const TensorView bias = with_bias ? b.view() : TensorView{};
            ref::layer_norm({.out = out.view, .in = in.view, .weight = w, .bias = bias, .eps = eps}, nullptr);
            EXPECT_TRUE(all_close(backing_values(out), expected_backing(out, out_orig, expect), kF32Reduction));
        }
    }
}

struct GemmCase {
    int64_t m, n, k;
    bool trans_b;
    float alpha, beta;
    bool strided;
};

TEST(RefGemm, MatchesNaive) {
    constexpr uint32_t kSeed = 404;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const std::vector<GemmCase> cases = {
        {1, 1, 1, true, 1.0f, 0.0f, false},    {1, 13, 7, true, 1.0f, 0.0f, true},
        {7, 13, 5, false, 1.0f, 0.0f, false},  {7, 13, 5, false, 0.5f, 2.0f, true},
        {33, 17, 65, true, 1.0f, 1.0f, true},  {33, 17, 65, false, -1.5f, 0.25f, true},
        {64, 96, 48, true, 1.0f, 0.0f, false},
    };
    for (const GemmCase& c : cases) {
        SCOPED_TRACE(::testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k << " trans_b=" << c.trans_b
                                          << " alpha=" << c.alpha << " beta=" << c.beta << " strided=" << c.strided);
        Buffer a = random_buffer(rng, {c.m, c.k}, c.strided);
        Buffer b = random_buffer(rng, c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.strided);
        Buffer out = random_buffer(rng, {c.m, c.n}, c.strided);
        const std::vector<float> av = read_f32(a.view), bv = read_f32(b.view), ov = read_f32(out.view);
        std::vector<double> expect;
        for (int64_t i = 0; i < c.m; ++i) {
            for (int64_t j = 0; j < c.n; ++j) {
                double acc = 0;
                for (int64_t l = 0; l < c.k; ++l) {
                    const double bl = c.trans_b ? bv[size_t(j * c.k + l)] : bv[size_t(l * c.n + j)];
                    acc += double(av[size_t(i * c.k + l)]) * bl;
                }
                expect.push_back(c.alpha * acc + double(c.beta) * ov[size_t(i * c.n + j)]);
            }
        }
        const std::vector<float> out_orig = backing_values(out);
        ref::gemm({.out = out.view, .a = a.view, .b = b.view, .trans_b = c.trans_b, .alpha = c.alpha, .beta = c.beta},
                  nullptr);
        EXPECT_TRUE(all_close(backing_values(out), expected_backing(out, out_orig, expect), kF32Gemm));
    }
}

// Batched (3-D) views with the batch as a strided middle dim, as MLA's per-head absorption passes them: the product of
// each batch index against a naive double computation.
TEST(RefGemm, BatchedStridedViewsMatchNaive) {
    constexpr uint32_t kSeed = 405;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    constexpr int64_t kH = 3, kN = 5, kK = 4, kM = 6;  // batch (heads), rows, contraction, columns
    for (int trans_b = 0; trans_b < 2; ++trans_b) {
        SCOPED_TRACE(::testing::Message() << "trans_b=" << trans_b);
        // a: [n, H, k + 2] (the last 2 columns are not part of the product); b per head: rows of a [H * rows, cols]
        Buffer a = random_buffer(rng, {kN, kH, kK + 2}, false);
        const int64_t b_rows = trans_b ? kM + 1 : kK + 1;
        const int64_t b_cols = trans_b ? kK : kM;
        Buffer b = random_buffer(rng, {kH * b_rows, b_cols}, false);
        Buffer out = random_buffer(rng, {kN, kH, kM}, false);
        const std::vector<float> av = read_f32(a.view), bv = read_f32(b.view);
        const TensorView a3 = a.view.as_strided(0, {kH, kN, kK}, {kK + 2, kH * (kK + 2), 1});
        const TensorView b3 = trans_b ? b.view.as_strided(0, {kH, kM, kK}, {b_rows * kK, kK, 1})
                                      : b.view.as_strided(0, {kH, kK, kM}, {b_rows * kM, kM, 1});
        const TensorView o3 = out.view.as_strided(0, {kH, kN, kM}, {kM, kH * kM, 1});
        ref::gemm({.out = o3, .a = a3, .b = b3, .trans_b = trans_b != 0, .alpha = 1.0f, .beta = 0.0f}, nullptr);
        const std::vector<float> got = read_f32(out.view);
        for (int64_t h = 0; h < kH; ++h) {
            for (int64_t i = 0; i < kN; ++i) {
                for (int64_t j = 0; j < kM; ++j) {
                    double acc = 0;
                    for (int64_t l = 0; l < kK; ++l) {
                        const double x = av[size_t((i * kH + h) * (kK + 2) + l)];
                        const double y = trans_b ? bv[size_t((h * b_rows + j) * kK + l)]
                                                 : bv[size_t((h * b_rows + l) * kM + j)];
                        acc += x * y;
                    }
                    EXPECT_NEAR(got[size_t((i * kH + h) * kM + j)], acc, 1e-5 * (1.0 + std::abs(acc)))
                        << "h=" << h << " i=" << i << " j=" << j;
                }
            }
        }
    }
}

TEST(RefGemm, BetaZeroDoesNotReadOutAndKZeroScales) {
    const Tensor a = Tensor::from_f32({2, 1}, std::vector<float>{2.0f, 3.0f});
    const Tensor b = Tensor::from_f32({2, 1}, std::vector<float>{5.0f, 7.0f});  // [n, k], trans_b
    Tensor out = Tensor::from_f32({2, 2}, std::vector<float>{NAN, INFINITY, NAN, -INFINITY});
    ref::gemm({.out = out, .a = a, .b = b, .trans_b = true, .alpha = 1.0f, .beta = 0.0f}, nullptr);
    EXPECT_TRUE(all_close(read_f32(out), {10, 14, 15, 21}, kExact));

    const Tensor a0 = Tensor::zeros({2, 0}, DType::kF32);
    const Tensor b0 = Tensor::zeros({2, 0}, DType::kF32);
    ref::gemm({.out = out, .a = a0, .b = b0, .trans_b = true, .alpha = 1.0f, .beta = 0.5f}, nullptr);
    EXPECT_TRUE(all_close(read_f32(out), {5, 7, 7.5, 10.5}, kExact));
}

TEST(RefSiluMul, MatchesNaiveIncludingStridedAndAliased) {
    constexpr uint32_t kSeed = 505;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const RowCase& c : kRowCases) {
        SCOPED_TRACE(::testing::Message() << "n_rows=" << c.n_rows << " dim=" << c.dim << " strided=" << c.strided);
        Buffer gate = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -6.0f, 6.0f);
        Buffer up = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -2.0f, 2.0f);
        Buffer out = random_buffer(rng, {c.n_rows, c.dim}, c.strided);
        const std::vector<float> g = read_f32(gate.view), u = read_f32(up.view);
        std::vector<double> expect;
        for (size_t i = 0; i < g.size(); ++i) expect.push_back(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
        const std::vector<float> out_orig = backing_values(out);
        ref::silu_mul({.out = out.view, .gate = gate.view, .up = up.view}, nullptr);
        EXPECT_TRUE(all_close(backing_values(out), expected_backing(out, out_orig, expect), kF32Elementwise));
        const std::vector<float> gate_orig = backing_values(gate);
        ref::silu_mul({.out = gate.view, .gate = gate.view, .up = up.view}, nullptr);
        EXPECT_TRUE(all_close(backing_values(gate), expected_backing(gate, gate_orig, expect), kF32Elementwise));
    }
}

// bf16 silu_mul from one [rows, 2 dim] GEMM output (dim 1, 3, 2051): the f32 result on the same values rounded once,
// bit for bit, also in place over the gate half.
TEST(RefSiluMul, Bf16FromFusedGateUpRoundsTheF32ResultOnce) {
    uint32_t seed = 515;
    for (const auto& [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 3}, {3, 2051}}) {
        SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        Buffer gu = random_buffer(rng, {rows, 2 * dim}, /*strided=*/false, -6.0f, 6.0f);
        const Buffer gu16 = to_bf16_buffer(gu);
        Tensor out = Tensor::empty({rows, dim}, DType::kF32);
        ref::silu_mul({.out = out, .gate = gu.view.slice(1, 0, dim), .up = gu.view.slice(1, dim, 2 * dim)}, nullptr);
        const std::vector<float> want = rounded_bf16(read_f32(out));
        const TensorView gate16 = gu16.view.slice(1, 0, dim);
        ref::silu_mul({.out = gate16, .gate = gate16, .up = gu16.view.slice(1, dim, 2 * dim)}, nullptr);
        EXPECT_TRUE(same_bits(read_bf16(gate16), want));
    }
}

TEST(RefAdd, MatchesNaiveIncludingAliased) {
    constexpr uint32_t kSeed = 606;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const Shape& shape : {Shape{1}, Shape{3, 5, 7}, Shape{2, 4097}}) {
        const int64_t n = numel_of(shape);
        const std::vector<float> av = random_floats(rng, n), bv = random_floats(rng, n);
        std::vector<double> expect;
        for (size_t i = 0; i < av.size(); ++i) expect.push_back(av[i] + bv[i]);
        Tensor a = Tensor::from_f32(shape, av);
        const Tensor b = Tensor::from_f32(shape, bv);
        Tensor out = Tensor::zeros(shape, DType::kF32);
        ThreadPool pool(3);
        ref::add({.out = out, .a = a, .b = b}, &pool);
        EXPECT_TRUE(all_close(read_f32(out), expect, kExact));
        ref::add({.out = a, .a = a, .b = b}, nullptr);
        EXPECT_TRUE(all_close(read_f32(a), expect, kExact));
    }
}

TEST(RefSoftmax, MatchesNaiveAndIsStableForLargeInputs) {
    constexpr uint32_t kSeed = 707;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const RowCase& c : kRowCases) {
        for (float range : {3.0f, 300.0f}) {  // exp(300) overflows f32: only a max-subtracted softmax survives
            SCOPED_TRACE(::testing::Message() << "n_rows=" << c.n_rows << " dim=" << c.dim << " range=" << range);
            Buffer in = random_buffer(rng, {c.n_rows, c.dim}, c.strided, -range, range);
            Buffer out = random_buffer(rng, {c.n_rows, c.dim}, c.strided);
            const std::vector<float> x = read_f32(in.view);
            std::vector<double> expect;
            for (int64_t r = 0; r < c.n_rows; ++r) {
                double mx = -INFINITY, sum = 0;
                for (int64_t i = 0; i < c.dim; ++i) mx = std::max(mx, double(x[size_t(r * c.dim + i)]));
                for (int64_t i = 0; i < c.dim; ++i) sum += std::exp(x[size_t(r * c.dim + i)] - mx);
                for (int64_t i = 0; i < c.dim; ++i) expect.push_back(std::exp(x[size_t(r * c.dim + i)] - mx) / sum);
            }
            const std::vector<float> out_orig = backing_values(out);
            ref::softmax({.out = out.view, .in = in.view}, nullptr);
            EXPECT_TRUE(all_close(backing_values(out), expected_backing(out, out_orig, expect), kF32Reduction));
            const std::vector<float> in_orig = backing_values(in);
            ref::softmax({.out = in.view, .in = in.view}, nullptr);
            EXPECT_TRUE(all_close(backing_values(in), expected_backing(in, in_orig, expect), kF32Reduction));
        }
    }
}

// inv_freq[i] = base^(-2i / rot_dim), computed in f32 like Hugging Face's default RoPE.
Tensor default_inv_freq(int64_t rot_dim, float base = 10000.0f) {
    std::vector<float> f(static_cast<size_t>(rot_dim / 2));
    for (int64_t i = 0; i < rot_dim / 2; ++i) {
        f[size_t(i)] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
    }
    return Tensor::from_f32({rot_dim / 2}, f);
}

// Naive rope of one rot_dim vector in double. The angle is the spec's f32 product float(pos) * inv_freq[i].
std::vector<double> naive_rope(const float* x, int64_t rot_dim, int32_t pos, const float* inv_freq, double factor,
                               bool interleaved) {
    const int64_t half = rot_dim / 2;
    std::vector<double> out(static_cast<size_t>(rot_dim));
    for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<float>(pos) * inv_freq[i];
        const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
        const double x1 = interleaved ? x[2 * i] : x[i];
        const double x2 = interleaved ? x[2 * i + 1] : x[i + half];
        out[size_t(i)] = x1 * c - x2 * s;
        out[size_t(i + half)] = x2 * c + x1 * s;
    }
    return out;
}

TEST(RefRope, BothLayoutsMatchNaiveOnStridedViews) {
    constexpr uint32_t kSeed = 808;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (bool interleaved : {true, false}) {
        for (int64_t n_tokens : {1, 7}) {
            for (int64_t n_heads : {1, 3}) {
                for (int64_t rot_dim : {2, 8, 64}) {
                    for (bool strided : {false, true}) {
                        const float factor = strided ? 1.25f : 1.0f;
                        SCOPED_TRACE(::testing::Message()
                                     << "interleaved=" << interleaved << " n_tokens=" << n_tokens
                                     << " n_heads=" << n_heads << " rot_dim=" << rot_dim << " strided=" << strided);
                        Buffer x = random_buffer(rng, {n_tokens, n_heads, rot_dim}, strided);
                        std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
                        for (auto& p : pos) p = static_cast<int32_t>(rng() % 70000);
                        const Tensor pos_t = i32_tensor(pos);
                        const Tensor inv_freq = default_inv_freq(rot_dim);
                        const std::vector<float> xv = read_f32(x.view);
                        std::vector<double> expect;
                        for (int64_t t = 0; t < n_tokens; ++t) {
                            for (int64_t h = 0; h < n_heads; ++h) {
                                const auto v = naive_rope(&xv[size_t((t * n_heads + h) * rot_dim)], rot_dim,
                                                          pos[size_t(t)], inv_freq.ptr<float>(), factor, interleaved);
                                expect.insert(expect.end(), v.begin(), v.end());
                            }
                        }
                        const std::vector<float> orig = backing_values(x);
                        ref::rope({.x = x.view,
                                   .positions = pos_t,
                                   .inv_freq = inv_freq,
                                   .attention_factor = factor,
                                   .interleaved = interleaved},
                                  nullptr);
                        EXPECT_TRUE(all_close(backing_values(x), expected_backing(x, orig, expect), kF32Elementwise));
                    }
                }
            }
        }
    }
}

// Rotating q at position p and k at p + d gives a dot product that depends on d only:
// sum_i [(q1 k1 + q2 k2) cos(d w_i) + (q2 k1 - q1 k2) sin(d w_i)] * factor^2 over the pairs (q1, q2), (k1, k2).
TEST(RefRope, DotProductDependsOnlyOnDistance) {
    constexpr uint32_t kSeed = 909;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const int64_t rot_dim = 16, half = 8;
    const float factor = 1.1f;
    const Tensor inv_freq = default_inv_freq(rot_dim);
    const std::vector<float> q = random_floats(rng, rot_dim), k = random_floats(rng, rot_dim);
    for (bool interleaved : {true, false}) {
        for (int32_t d : {0, 1, 5, 17}) {
            double expect = 0;
            for (int64_t i = 0; i < half; ++i) {
                const double q1 = interleaved ? q[size_t(2 * i)] : q[size_t(i)];
                const double q2 = interleaved ? q[size_t(2 * i + 1)] : q[size_t(i + half)];
                const double k1 = interleaved ? k[size_t(2 * i)] : k[size_t(i)];
                const double k2 = interleaved ? k[size_t(2 * i + 1)] : k[size_t(i + half)];
                const double phi = d * double(inv_freq.ptr<float>()[i]);
                expect += ((q1 * k1 + q2 * k2) * std::cos(phi) + (q2 * k1 - q1 * k2) * std::sin(phi)) * factor * factor;
            }
            for (int32_t p : {0, 3, 40, 100}) {
                SCOPED_TRACE(::testing::Message() << "interleaved=" << interleaved << " d=" << d << " p=" << p);
                std::vector<float> both(q);
                both.insert(both.end(), k.begin(), k.end());
                Tensor x = Tensor::from_f32({2, 1, rot_dim}, both);
                const Tensor pos = i32_tensor({p, p + d});
                ref::rope({.x = x,
                           .positions = pos,
                           .inv_freq = inv_freq,
                           .attention_factor = factor,
                           .interleaved = interleaved},
                          nullptr);
                double dot = 0;
                for (int64_t i = 0; i < rot_dim; ++i) dot += double(x.ptr<float>()[i]) * x.ptr<float>()[rot_dim + i];
                EXPECT_NEAR(dot, expect, 1e-4);
            }
        }
    }
}

TEST(RefRowOps, ThreadCountIndependent) {
    constexpr uint32_t kSeed = 1010;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const int64_t n_rows = 203, dim = 37;
    Buffer x = random_buffer(rng, {n_rows, dim}, true, -3.0f, 3.0f);
    const Tensor w = Tensor::from_f32({dim}, random_floats(rng, dim));
    const Tensor inv_freq = default_inv_freq(8);
    std::vector<int32_t> pos(static_cast<size_t>(n_rows));
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 5000);
    const Tensor pos_t = i32_tensor(pos);
    Buffer rope_x = random_buffer(rng, {n_rows, 3, 8}, true);

    auto run = [&](ThreadPool* pool) {
        std::vector<float> all;
        Tensor y = Tensor::zeros({n_rows, dim}, DType::kF32);
        ref::rms_norm({.out = y, .in = x.view, .weight = w}, pool);
        all = read_f32(y);
        ref::layer_norm({.out = y, .in = x.view, .weight = w, .bias = w}, pool);
        for (float v : read_f32(y)) all.push_back(v);
        ref::softmax({.out = y, .in = x.view}, pool);
        for (float v : read_f32(y)) all.push_back(v);
        ref::silu_mul({.out = y, .gate = x.view, .up = x.view}, pool);
        for (float v : read_f32(y)) all.push_back(v);
        Tensor r = Tensor::zeros({n_rows, 3, 8}, DType::kF32);
        write_f32(r, read_f32(rope_x.view));
        ref::rope({.x = r, .positions = pos_t, .inv_freq = inv_freq}, pool);
        for (float v : read_f32(r)) all.push_back(v);
        return all;
    };
    ThreadPool pool1(1), pool3(3);
    const std::vector<float> serial = run(nullptr);
    EXPECT_TRUE(same_bits(serial, run(&pool1)));
    EXPECT_TRUE(same_bits(serial, run(&pool3)));
}

}  // namespace
}  // namespace penstock::test
