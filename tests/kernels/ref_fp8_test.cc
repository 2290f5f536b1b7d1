// CPU reference of the block-scaled FP8 ops (kernels/ref/fp8.cc) against definitions written here: the activation
// quantiser's formula (scale = max(amax, 1e-4) / 448, out = e4m3(x / scale)), hand-computed values, NaN / inf, the
// group maximum landing exactly on +-448, bf16 input, the transposed scale layout, ragged k; fp8_gemm /
// fp8_grouped_gemm against a double-precision sum over the dequantised blocks, empty and 1-row groups, rows past
// offsets[n_groups] untouched. Seeds are fixed and printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/ref/ref_ops.h"
#include "ref_test_util.h"

namespace penstock::test {
namespace {

using kernels::kFp8Block;

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

Tensor f8_tensor(const std::vector<uint8_t>& bytes, const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::kF8E4M3);
    PENSTOCK_CHECK_EQ(t.numel(), static_cast<int64_t>(bytes.size()));
    std::memcpy(t.ptr<uint8_t>(), bytes.data(), bytes.size());
    return t;
}

TEST(RefFp8ActQuantTest, HandComputedValues) {
    // Group max 2 -> s = 2 / 448; x / s = 224 x: 1 -> 224, -2 -> -448, 0.5 -> 112, 0.001 -> 0.224 = 1.792 * 2^-3,
    // which rounds to 1.75 * 2^-3 = 0.21875 on e4m3's 3-bit mantissa.
    std::vector<float> x(130, 0.0f);
    x[0] = 1.0f;
    x[1] = -2.0f;
    x[2] = 0.5f;
    x[3] = 0.001f;
    x[128] = 3e-5f;  // second group (2 columns): amax below the 1e-4 floor -> s = 1e-4 / 448
    Tensor in = Tensor::from_f32({1, 130}, x);
    Tensor out = Tensor::empty({1, 130}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({1, 2}, DType::kF32);
    ref::fp8_act_quant({.out = out, .scale = scale, .in = in}, nullptr);
    EXPECT_EQ(scale.ptr<float>()[0], 2.0f / 448.0f);
    EXPECT_EQ(scale.ptr<float>()[1], 1e-4f / 448.0f);
    const uint8_t* q = out.ptr<uint8_t>();
    EXPECT_EQ(e4m3_to_float(q[0]), 224.0f);
    EXPECT_EQ(e4m3_to_float(q[1]), -448.0f);
    EXPECT_EQ(e4m3_to_float(q[2]), 112.0f);
    EXPECT_EQ(q[3], float_to_e4m3(0.001f / (2.0f / 448.0f)));
    EXPECT_EQ(e4m3_to_float(q[3]), 0.21875f);
    for (int c = 4; c < 128; ++c) EXPECT_EQ(q[c], 0) << c;
    EXPECT_EQ(q[128], float_to_e4m3(3e-5f / (1e-4f / 448.0f)));  // 134.4 -> 128 (e4m3 step 16 in [128, 256))
    EXPECT_EQ(e4m3_to_float(q[128]), 128.0f);
    EXPECT_EQ(q[129], 0);
}

TEST(RefFp8ActQuantTest, NanAndInfinity) {
    // Group 0: a NaN (ignored by amax; quantised to 0x7f) beside 2; group 1: +inf -> s = inf, finite / inf = 0,
    // inf / inf = NaN -> 0x7f (not x86's negative default NaN 0xff).
    std::vector<float> x(256, 0.5f);
    x[3] = -NAN;
    x[0] = 2.0f;
    x[130] = INFINITY;
    Tensor in = Tensor::from_f32({1, 256}, x);
    Tensor out = Tensor::empty({1, 256}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({1, 2}, DType::kF32);
    ref::fp8_act_quant({.out = out, .scale = scale, .in = in}, nullptr);
    EXPECT_EQ(scale.ptr<float>()[0], 2.0f / 448.0f);
    EXPECT_TRUE(std::isinf(scale.ptr<float>()[1]));
    const uint8_t* q = out.ptr<uint8_t>();
    EXPECT_EQ(q[0], 0x7e);  // 448
    EXPECT_EQ(q[3], 0x7f);
    EXPECT_EQ(e4m3_to_float(q[1]), 112.0f);
    EXPECT_EQ(q[130], 0x7f);
    EXPECT_EQ(q[131], 0x00);
}

TEST(RefFp8ActQuantTest, FormulaLayoutsAndBf16) {
    const uint32_t seed = 801;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    for (const auto& [m, k] : {std::pair<int64_t, int64_t>{1, 128}, {5, 200}, {3, 7168}, {4, 1}}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << k);
        std::vector<float> x = random_floats(rng, m * k, -3.0f, 3.0f);
        for (float& v : x) v = bf16_to_float(float_to_bf16(v));        // bf16-representable: both inputs are equal
        if (m > 1) std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);  // an all-zero row
        const int64_t kb = blocks_of(k);
        Tensor in = Tensor::from_f32({m, k}, x);
        Tensor in_bf16 = Tensor::empty({m, k}, DType::kBF16);
        for (int64_t i = 0; i < m * k; ++i) in_bf16.ptr<uint16_t>()[i] = float_to_bf16(x[static_cast<size_t>(i)]);
        Tensor out = Tensor::empty({m, k}, DType::kF8E4M3);
        Tensor out2 = Tensor::empty({m, k}, DType::kF8E4M3);
        Tensor scale = Tensor::empty({m, kb}, DType::kF32);
        Tensor scale_t = Tensor::empty({kb, m}, DType::kF32);  // the cuBLASLt layout, viewed as [m, kb]
        ref::fp8_act_quant({.out = out, .scale = scale, .in = in}, nullptr);
        ref::fp8_act_quant({.out = out2, .scale = scale_t.view().as_strided(0, {m, kb}, {1, m}), .in = in_bf16},
                           nullptr);
        for (int64_t r = 0; r < m; ++r) {
            for (int64_t g = 0; g < kb; ++g) {
                const int64_t c0 = g * kFp8Block, c1 = std::min(k, c0 + kFp8Block);
                float amax = 0.0f;
                for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * k + c)]));
                const float s = std::max(amax, 1e-4f) / 448.0f;
                ASSERT_EQ(scale.ptr<float>()[r * kb + g], s) << "row " << r << " group " << g;
                ASSERT_EQ(scale_t.ptr<float>()[g * m + r], s) << "transposed layout, row " << r << " group " << g;
                bool hit_max = amax < 1e-4f;
                for (int64_t c = c0; c < c1; ++c) {
                    const float v = x[static_cast<size_t>(r * k + c)];
                    const uint8_t q = out.ptr<uint8_t>()[r * k + c];
                    ASSERT_EQ(q, float_to_e4m3(v / s)) << "row " << r << " col " << c;
                    ASSERT_EQ(q, out2.ptr<uint8_t>()[r * k + c]) << "bf16 input, row " << r << " col " << c;
                    // Dequantised error: half an e4m3 step (2^-4 relative) or half the subnormal step (2^-10 s).
                    ASSERT_LE(std::fabs(e4m3_to_float(q) * s - v), std::max(std::fabs(v) / 16, s / 1024) * 1.0001f);
                    if (std::fabs(e4m3_to_float(q)) == 448.0f) hit_max = true;
                }
                EXPECT_TRUE(hit_max) << "the group maximum maps to +-448 (row " << r << " group " << g << ")";
            }
        }
    }
}

// sum over k of dequantised a * b in double.
double dot_dequant(const Tensor& a, const Tensor& a_scale, int64_t r, const Tensor& b, const Tensor& b_scale,
                   int64_t b_off, int64_t bs_off, int64_t j, int64_t k) {
    const int64_t kb = blocks_of(k);
    double acc = 0.0;
    for (int64_t c = 0; c < k; ++c) {
        const double av = e4m3_to_float(a.ptr<uint8_t>()[r * k + c]) * a_scale.ptr<float>()[r * kb + c / kFp8Block];
        const double bv = e4m3_to_float(b.ptr<uint8_t>()[b_off + j * k + c]) *
                          b_scale.ptr<float>()[bs_off + (j / kFp8Block) * kb + c / kFp8Block];
        acc += av * bv;
    }
    return acc;
}

// e4m3 bytes of values in [-448, 448] (no NaN).
std::vector<uint8_t> random_e4m3(std::mt19937& rng, int64_t n) {
    const std::vector<float> v = random_floats(rng, n, -448.0f, 448.0f);
    std::vector<uint8_t> q(v.size());
    for (size_t i = 0; i < v.size(); ++i) q[i] = float_to_e4m3(v[i]);
    return q;
}

std::vector<float> random_scales(std::mt19937& rng, int64_t n, int64_t k) {
    // Dequantised magnitudes ~ 1 / sqrt(k), so sums over k stay O(1) and kF32Gemm applies.
    const float base = 1.0f / (448.0f * std::sqrt(static_cast<float>(k)));
    return random_floats(rng, n, 0.5f * base, 1.5f * base);
}

TEST(RefFp8GemmTest, MatchesDoubleSumOverDequantisedBlocks) {
    const uint32_t seed = 802;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    struct G {
        int64_t m, n, k;
    };
    for (const G g : {G{1, 1, 1}, G{3, 130, 128}, G{7, 200, 200}, G{9, 128, 300}}) {
        SCOPED_TRACE(::testing::Message() << "m=" << g.m << " n=" << g.n << " k=" << g.k);
        const int64_t kb = blocks_of(g.k), nb = blocks_of(g.n);
        const Tensor a = f8_tensor(random_e4m3(rng, g.m * g.k), {g.m, g.k});
        const Tensor a_scale = Tensor::from_f32({g.m, kb}, random_floats(rng, g.m * kb, 0.5f / 448, 1.5f / 448));
        const Tensor b = f8_tensor(random_e4m3(rng, g.n * g.k), {g.n, g.k});
        const Tensor b_scale = Tensor::from_f32({nb, kb}, random_scales(rng, nb * kb, g.k));
        Tensor out = Tensor::empty({g.m, g.n}, DType::kF32);
        ref::fp8_gemm({.out = out, .a = a, .a_scale = a_scale, .b = b, .b_scale = b_scale}, nullptr);
        std::vector<double> expect;
        for (int64_t r = 0; r < g.m; ++r)
            for (int64_t j = 0; j < g.n; ++j) expect.push_back(dot_dequant(a, a_scale, r, b, b_scale, 0, 0, j, g.k));
        EXPECT_TRUE(all_close(read_f32(out), expect, kF32Gemm, {g.m, g.n}));
    }
}

TEST(RefFp8GemmTest, GroupedRowsEmptyGroupsAndUntouchedTail) {
    const uint32_t seed = 803;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const int64_t n = 136, k = 256, kb = blocks_of(k), nb = blocks_of(n), n_rows = 12;
    const std::vector<int32_t> off = {0, 1, 1, 6, 6, 10};  // groups of 1, 0, 5, 0, 4 rows; rows 10, 11 unused
    const int64_t n_groups = static_cast<int64_t>(off.size()) - 1;
    const Tensor a = f8_tensor(random_e4m3(rng, n_rows * k), {n_rows, k});
    const Tensor a_scale = Tensor::from_f32({n_rows, kb}, random_floats(rng, n_rows * kb, 0.5f / 448, 1.5f / 448));
    const Tensor b = f8_tensor(random_e4m3(rng, n_groups * n * k), {n_groups, n, k});
    const Tensor b_scale = Tensor::from_f32({n_groups, nb, kb}, random_scales(rng, n_groups * nb * kb, k));
    Tensor out = Tensor::from_f32({n_rows, n}, std::vector<float>(static_cast<size_t>(n_rows * n), NAN));
    ref::fp8_grouped_gemm(
        {.out = out, .a = a, .a_scale = a_scale, .b = b, .b_scale = b_scale, .offsets = i32_tensor(off)}, nullptr);
    std::vector<double> expect;
    for (int64_t r = 0; r < n_rows; ++r) {
        int64_t g = 0;
        while (g < n_groups && off[static_cast<size_t>(g) + 1] <= r) ++g;
        for (int64_t j = 0; j < n; ++j) {
            expect.push_back(g == n_groups ? NAN
                                           : dot_dequant(a, a_scale, r, b, b_scale, g * n * k, g * nb * kb, j, k));
        }
    }
    EXPECT_TRUE(all_close(read_f32(out), expect, kF32Gemm, {n_rows, n}));
}

// Per-tensor FP8 (Fp8TensorScaleParams): the scale is the whole view's amax / 448 and every element is
// e4m3(x * (1 / s)); strided views (dims 0 and 1) are read and written in place of contiguous ones; bf16 input; an
// all-zero tensor gets scale 1; dequantisation is e4m3 * s and recovers x to e4m3's half-step (1/16 relative).
TEST(RefFp8TensorTest, QuantizeIsAmaxScaledCastOverStridedViews) {
    constexpr uint32_t kSeed = 4242;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    // [5, 3, 7] view of a [5, 4, 9] buffer (head 3 and the last 2 columns unused).
    std::vector<float> buf(5 * 4 * 9);
    for (float& x : buf) x = u(rng);
    buf[2 * 36 + 1 * 9 + 4] = -7.5f;   // the amax, inside the view
    buf[3 * 36 + 3 * 9 + 0] = 100.0f;  // outside the view: ignored
    Tensor whole = Tensor::from_f32({5, 4, 9}, buf);
    const TensorView in = whole.view().slice(1, 0, 3).slice(2, 0, 7);
    Tensor qbuf = Tensor::empty({5, 3, 16}, DType::kF8E4M3);
    std::memset(qbuf.ptr<uint8_t>(), 0xaa, 5 * 3 * 16);
    const TensorView out = qbuf.view().slice(2, 2, 9);
    Tensor scale = Tensor::empty({1}, DType::kF32);
    ref::fp8_quantize_tensor({.out = out, .scale = scale, .in = in}, nullptr);
    const float s = 7.5f / 448.0f;
    EXPECT_EQ(scale.ptr<float>()[0], s);
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < 5; ++i) {
        for (int64_t h = 0; h < 3; ++h) {
            for (int64_t c = 0; c < 16; ++c) {
                const uint8_t got = qbuf.ptr<uint8_t>()[(i * 3 + h) * 16 + c];
                if (c < 2 || c >= 9) {
                    EXPECT_EQ(got, 0xaa) << "outside the view " << i << "," << h << "," << c;
                } else {
                    EXPECT_EQ(got, float_to_e4m3(buf[i * 36 + h * 9 + (c - 2)] * inv)) << i << "," << h << "," << c;
                }
            }
        }
    }
    EXPECT_EQ(e4m3_to_float(qbuf.ptr<uint8_t>()[(2 * 3 + 1) * 16 + 2 + 4]), -448.0f);

    // Dequantised back into a strided f32 view: within half an e4m3 step of x.
    Tensor back_buf = Tensor::from_f32({5, 3, 8}, std::vector<float>(5 * 3 * 8, -1.0f));
    const TensorView back = back_buf.view().slice(2, 1, 8);
    ref::fp8_dequantize_tensor({.out = back, .scale = scale, .in = out}, nullptr);
    for (int64_t i = 0; i < 5; ++i) {
        for (int64_t h = 0; h < 3; ++h) {
            EXPECT_EQ(back_buf.ptr<float>()[(i * 3 + h) * 8], -1.0f);
            for (int64_t c = 0; c < 7; ++c) {
                const float x = buf[i * 36 + h * 9 + c];
                const float y = back_buf.ptr<float>()[(i * 3 + h) * 8 + 1 + c];
                EXPECT_EQ(y, e4m3_to_float(float_to_e4m3(x * inv)) * s);
                EXPECT_LE(std::fabs(y - x), std::fabs(x) / 16.0f + s * 0.002f) << x;
            }
        }
    }
}

TEST(RefFp8TensorTest, Bf16InputZerosAndNan) {
    // bf16 in: widened exactly, then the same formula.
    const std::vector<float> x = {0.5f, -0.25f, 2.0f, 0.0f};
    Tensor in = Tensor::empty({2, 2}, DType::kBF16);
    for (size_t i = 0; i < x.size(); ++i) in.ptr<uint16_t>()[i] = float_to_bf16(x[i]);
    Tensor out = Tensor::empty({2, 2}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({1}, DType::kF32);
    ref::fp8_quantize_tensor({.out = out, .scale = scale, .in = in}, nullptr);
    EXPECT_EQ(scale.ptr<float>()[0], 2.0f / 448.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[0]), 112.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[1]), -56.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[2]), 448.0f);
    EXPECT_EQ(out.ptr<uint8_t>()[3], 0);
    Tensor bf = Tensor::empty({2, 2}, DType::kBF16);
    ref::fp8_dequantize_tensor({.out = bf, .scale = scale, .in = out}, nullptr);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bf16_to_float(bf.ptr<uint16_t>()[i]), x[i]) << i;

    // All zeros: scale 1, zeros out.
    Tensor z = Tensor::from_f32({3}, std::vector<float>{0.0f, -0.0f, 0.0f});
    Tensor zq = Tensor::empty({3}, DType::kF8E4M3);
    ref::fp8_quantize_tensor({.out = zq, .scale = scale, .in = z}, nullptr);
    EXPECT_EQ(scale.ptr<float>()[0], 1.0f);
    EXPECT_EQ(zq.ptr<uint8_t>()[0], 0);
    EXPECT_EQ(zq.ptr<uint8_t>()[2], 0);

    // A NaN makes the scale NaN and every output the NaN pattern.
    Tensor n = Tensor::from_f32({3}, std::vector<float>{1.0f, NAN, 2.0f});
    ref::fp8_quantize_tensor({.out = zq, .scale = scale, .in = n}, nullptr);
    EXPECT_TRUE(std::isnan(scale.ptr<float>()[0]));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(zq.ptr<uint8_t>()[i], 0x7f) << i;
}

TEST(RefFp8TensorTest, RejectsWrongDtypesAndShapes) {
    Tensor f = Tensor::from_f32({2, 3}, std::vector<float>(6, 1.0f));
    Tensor q = Tensor::empty({2, 3}, DType::kF8E4M3);
    Tensor q_bad = Tensor::empty({3, 2}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({1}, DType::kF32);
    Tensor scale2 = Tensor::empty({2}, DType::kF32);
    EXPECT_DEATH(ref::fp8_quantize_tensor({.out = f, .scale = scale, .in = f}, nullptr), "out must be f8e4m3");
    EXPECT_DEATH(ref::fp8_quantize_tensor({.out = q_bad, .scale = scale, .in = f}, nullptr), "out");
    EXPECT_DEATH(ref::fp8_quantize_tensor({.out = q, .scale = scale2, .in = f}, nullptr), "scale must be");
    EXPECT_DEATH(ref::fp8_dequantize_tensor({.out = f, .scale = scale, .in = f}, nullptr), "in must be f8e4m3");
}

// fp8_quantize_heads: per head, blocks of `block` rows counted from each sequence's first row share s = amax / 448
// (the amax over the block's rows of [in ; in_tail]); every element is e4m3(x * (1 / s)) and every row of the block
// gets scale s. Two sequences (5 and 2 rows) in blocks of 2 (the first sequence's last block has one row), a tail
// broadcast over the heads by a stride-0 view, out a strided view whose padding stays untouched.
TEST(RefFp8HeadsTest, BlocksPerSequenceWithBroadcastTail) {
    constexpr uint32_t kSeed = 4343;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    constexpr int64_t n = 7, h = 2, d = 4, dt = 2;
    std::vector<float> x(n * h * d), t(n * dt);
    for (float& v : x) v = u(rng);
    for (float& v : t) v = u(rng);
    x[(3 * h + 1) * d + 2] = -9.0f;  // row 3, head 1: its block (rows 2, 3) gets 9 / 448 on head 1 only
    t[6 * dt + 1] = 5.0f;            // row 6's tail: block (5, 6) gets 5 / 448 on both heads
    Tensor in = Tensor::from_f32({n, h, d}, x);
    Tensor tail_buf = Tensor::from_f32({n, dt}, t);
    const TensorView tail = tail_buf.view().as_strided(0, {n, h, dt}, {dt, 0, 1});
    Tensor obuf = Tensor::empty({n, h, 8}, DType::kF8E4M3);
    std::memset(obuf.ptr<uint8_t>(), 0xaa, static_cast<size_t>(n * h * 8));
    const TensorView out = obuf.view().slice(2, 1, 1 + d + dt);
    Tensor scale = Tensor::empty({n, h}, DType::kF32);
    const Tensor cu = Tensor::from_i32({3}, std::vector<int32_t>{0, 5, 7});
    ref::fp8_quantize_heads({.out = out, .scale = scale, .in = in, .in_tail = tail, .cu_seqlens = cu, .block = 2},
                            nullptr);
    auto value = [&](int64_t r, int64_t hh, int64_t c) { return c < d ? x[(r * h + hh) * d + c] : t[r * dt + c - d]; };
    const std::vector<std::pair<int64_t, int64_t>> blocks = {{0, 2}, {2, 4}, {4, 5}, {5, 7}};
    for (const auto& [r0, r1] : blocks) {
        for (int64_t hh = 0; hh < h; ++hh) {
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t c = 0; c < d + dt; ++c) amax = std::max(amax, std::fabs(value(r, hh, c)));
            }
            const float sc = amax / 448.0f;
            for (int64_t r = r0; r < r1; ++r) {
                EXPECT_EQ(scale.ptr<float>()[r * h + hh], sc) << r << "," << hh;
                const uint8_t* row = obuf.ptr<uint8_t>() + (r * h + hh) * 8;
                EXPECT_EQ(row[0], 0xaa);
                EXPECT_EQ(row[7], 0xaa);
                for (int64_t c = 0; c < d + dt; ++c) {
                    EXPECT_EQ(row[1 + c], float_to_e4m3(value(r, hh, c) * (1.0f / sc))) << r << "," << hh << "," << c;
                }
            }
        }
    }
    EXPECT_EQ(scale.ptr<float>()[2 * h + 1], 9.0f / 448.0f);
    EXPECT_EQ(scale.ptr<float>()[3 * h + 1], 9.0f / 448.0f);
    EXPECT_EQ(scale.ptr<float>()[5 * h + 0], 5.0f / 448.0f);
    EXPECT_EQ(e4m3_to_float(obuf.ptr<uint8_t>()[(3 * h + 1) * 8 + 1 + 2]), -448.0f);
}

// Per row (block 1, no sequences), bf16 input: a zero row gets scale 1 and zeros, a NaN row scale NaN and 0x7f
// everywhere, and neither touches its neighbours.
TEST(RefFp8HeadsTest, PerRowBf16ZerosAndNan) {
    const std::vector<float> x = {0.5f, -2.0f, 0.0f, 0.0f, 1.0f, NAN, 3.0f, 0.75f};  // [4, 1, 2]
    Tensor in = Tensor::empty({4, 1, 2}, DType::kBF16);
    for (size_t i = 0; i < x.size(); ++i) in.ptr<uint16_t>()[i] = float_to_bf16(x[i]);
    Tensor out = Tensor::empty({4, 1, 2}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({4, 1}, DType::kF32);
    ref::fp8_quantize_heads({.out = out, .scale = scale, .in = in}, nullptr);
    EXPECT_EQ(scale.ptr<float>()[0], 2.0f / 448.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[0]), 112.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[1]), -448.0f);
    EXPECT_EQ(scale.ptr<float>()[1], 1.0f);
    EXPECT_EQ(out.ptr<uint8_t>()[2], 0);
    EXPECT_EQ(out.ptr<uint8_t>()[3], 0);
    EXPECT_TRUE(std::isnan(scale.ptr<float>()[2]));
    EXPECT_EQ(out.ptr<uint8_t>()[4], 0x7f);
    EXPECT_EQ(out.ptr<uint8_t>()[5], 0x7f);
    EXPECT_EQ(scale.ptr<float>()[3], 3.0f / 448.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[6]), 448.0f);
    EXPECT_EQ(e4m3_to_float(out.ptr<uint8_t>()[7]), 112.0f);  // 0.75 * 448 / 3
}

// The fused RoPE (Fp8HeadQuantParams::rope): bit for bit ref::rope on the rope columns of a copy, then the plain op,
// with the rope columns in the middle of the row and at its end, interleaved or not, an attention factor; the input is
// not written. bf16 input: the rotated values rounded to bf16 (as kernels::rope writes a bf16 q) before the quantiser.
TEST(RefFp8HeadsTest, RopeIsRopeThenQuantise) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    const int64_t n = 7, h = 3, d = 24, half = 4;
    std::vector<float> x(static_cast<size_t>(n * h * d));
    for (float& v : x) v = u(rng);
    const Tensor positions = Tensor::from_i32({n}, std::vector<int32_t>{0, 1, 5, 9, 100, 4095, 70000});
    const Tensor inv_freq = Tensor::from_f32({half}, std::vector<float>{1.0f, 0.1f, 0.01f, 0.001f});
    for (const DType dt : {DType::kF32, DType::kBF16}) {
        for (const int64_t col : {int64_t{16}, int64_t{4}}) {
            for (const bool interleaved : {true, false}) {
                SCOPED_TRACE(::testing::Message()
                             << dtype_name(dt) << " col " << col << " interleaved " << interleaved);
                // in, and the expected composition's rotated copy (f32; rounded to bf16 after the RoPE for bf16)
                Tensor in = Tensor::empty({n, h, d}, dt);
                Tensor want_in = Tensor::from_f32({n, h, d}, x);
                for (size_t i = 0; i < x.size(); ++i) {
                    if (dt == DType::kF32) {
                        in.ptr<float>()[i] = x[i];
                    } else {
                        in.ptr<uint16_t>()[i] = float_to_bf16(x[i]);
                        want_in.ptr<float>()[i] = bf16_to_float(float_to_bf16(x[i]));
                    }
                }
                std::vector<uint8_t> in_bytes(static_cast<size_t>(in.nbytes()));
                std::memcpy(in_bytes.data(), in.ptr<uint8_t>(), in_bytes.size());
                const kernels::RopeParams rope{.x = {},
                                               .positions = positions,
                                               .inv_freq = inv_freq,
                                               .attention_factor = 1.25f,
                                               .interleaved = interleaved};
                kernels::RopeParams on_copy = rope;
                on_copy.x = want_in.view().slice(2, col, col + 2 * half);
                ref::rope(on_copy, nullptr);
                if (dt == DType::kBF16) {
                    for (int64_t i = 0; i < want_in.numel(); ++i) {
                        want_in.ptr<float>()[i] = bf16_to_float(float_to_bf16(want_in.ptr<float>()[i]));
                    }
                }
                Tensor got = Tensor::empty({n, h, d}, DType::kF8E4M3), want = Tensor::empty({n, h, d}, DType::kF8E4M3);
                Tensor got_s = Tensor::empty({n, h}, DType::kF32), want_s = Tensor::empty({n, h}, DType::kF32);
                ref::fp8_quantize_heads({.out = got, .scale = got_s, .in = in, .rope = rope, .rope_col = col}, nullptr);
                ref::fp8_quantize_heads({.out = want, .scale = want_s, .in = want_in}, nullptr);
                EXPECT_EQ(std::memcmp(got.ptr<uint8_t>(), want.ptr<uint8_t>(), static_cast<size_t>(got.nbytes())), 0);
                EXPECT_EQ(std::memcmp(got_s.ptr<float>(), want_s.ptr<float>(), static_cast<size_t>(got_s.nbytes())), 0);
                EXPECT_EQ(std::memcmp(in.ptr<uint8_t>(), in_bytes.data(), in_bytes.size()), 0) << "in was written";
                // the rotation moved something: the unrotated quantisation differs
                Tensor plain = Tensor::empty({n, h, d}, DType::kF8E4M3);
                ref::fp8_quantize_heads({.out = plain, .scale = got_s, .in = in}, nullptr);
                EXPECT_NE(std::memcmp(got.ptr<uint8_t>(), plain.ptr<uint8_t>(), static_cast<size_t>(got.nbytes())), 0);
            }
        }
    }
    // RoPE only per row and without in_tail; its columns inside the row.
    Tensor in = Tensor::from_f32({n, h, d}, x);
    Tensor out = Tensor::empty({n, h, d}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({n, h}, DType::kF32);
    const kernels::RopeParams rope{.x = {}, .positions = positions, .inv_freq = inv_freq};
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out, .scale = scale, .in = in, .block = 2, .rope = rope}, nullptr),
                 "RoPE");
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out, .scale = scale, .in = in, .rope = rope, .rope_col = 20}, nullptr),
                 "rope columns");
}

TEST(RefFp8HeadsTest, RejectsBadShapesAndSequences) {
    Tensor in = Tensor::from_f32({4, 2, 8}, std::vector<float>(64, 1.0f));
    Tensor out = Tensor::empty({4, 2, 8}, DType::kF8E4M3);
    Tensor out_wide = Tensor::empty({4, 2, 10}, DType::kF8E4M3);
    Tensor scale = Tensor::empty({4, 2}, DType::kF32);
    Tensor scale_bad = Tensor::empty({4, 1}, DType::kF32);
    Tensor tail_bf16 = Tensor::empty({4, 2, 2}, DType::kBF16);
    Tensor cu_bad = Tensor::from_i32({2}, std::vector<int32_t>{0, 3});
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out_wide, .scale = scale, .in = in}, nullptr), "out");
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out, .scale = scale_bad, .in = in}, nullptr), "scale");
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out_wide, .scale = scale, .in = in, .in_tail = tail_bf16}, nullptr),
                 "in_tail");
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out, .scale = scale, .in = in, .cu_seqlens = cu_bad}, nullptr),
                 "cu_seqlens");
    EXPECT_DEATH(ref::fp8_quantize_heads({.out = out, .scale = scale, .in = in, .block = 0}, nullptr), "block");
}

}  // namespace
}  // namespace penstock::test
