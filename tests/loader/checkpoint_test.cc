// Checkpoint: FP8 block dequantisation (hand-made partial-block example and the real FP8 fixture against its bf16
// twin), float conversion, index handling and errors, and per-stage layer-range loading of a sharded checkpoint.
#include "loader/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_convert.h"
#include "test_util.h"

namespace penstock::loader {
namespace {

using testing::contains;
using testing::TempDir;

const std::filesystem::path kFixtures = PENSTOCK_FIXTURES_DIR;

auto all() {
    return [](std::string_view) { return true; };
}

WeightMap load_all(const std::filesystem::path& dir, const LoadOptions& options, LoadStats* stats = nullptr) {
    Result<Checkpoint> ck = Checkpoint::open(dir);
    EXPECT_TRUE(ck.ok()) << ck.status().to_string();
    if (!ck.ok()) return {};
    Result<WeightMap> m = ck->load(all(), options, 128, 128, stats);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : WeightMap{};
}

// A [rows, cols] e4m3 weight of seeded random finite bytes (no NaN patterns 0x7f / 0xff).
std::vector<uint8_t> random_fp8(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> w(static_cast<size_t>(rows * cols));
    for (auto& b : w) {
        do {
            b = static_cast<uint8_t>(rng());
        } while ((b & 0x7f) == 0x7f);
    }
    return w;
}

struct Fp8Example {
    Shape shape = {130, 200};
    std::vector<uint8_t> weight;
    Shape scale_shape = {2, 2};
    std::vector<float> scale = {0.5f, 2.0f, 0.25f, 8.0f};
    std::vector<uint16_t> norm = {0x3f80, 0x4000, 0xbf80};  // bf16 1, 2, -1
    Shape norm_shape = {3};

    Fp8Example() : weight(random_fp8(130, 200, 7)) {}
    NamedViews views() {
        return {{"layer.proj.weight", TensorView::contiguous(weight.data(), DType::kF8E4M3, shape)},
                {"layer.proj.weight_scale_inv", TensorView::contiguous(scale.data(), DType::kF32, scale_shape)},
                {"layer.norm.weight", TensorView::contiguous(norm.data(), DType::kBF16, norm_shape)}};
    }
};

TEST(CheckpointTest, DequantisesFp8WithPartialEdgeBlocks) {
    Fp8Example ex;
    TempDir dir;
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", ex.views()).ok());
    for (DType target : {DType::kF32, DType::kBF16}) {
        LoadStats stats;
        const WeightMap m = load_all(dir.path(), {.target = target}, &stats);
        ASSERT_EQ(m.size(), 2u);  // the scale is consumed, not returned
        EXPECT_EQ(stats.n_fp8_block, 1);
        EXPECT_EQ(m.count("layer.proj.weight_scale_inv"), 0u);
        EXPECT_EQ(stats.n_tensors, 2);
        EXPECT_EQ(stats.files_opened, std::vector<std::string>{"model.safetensors"});
        const Tensor& w = m.at("layer.proj.weight");
        ASSERT_EQ(w.dtype(), target);
        ASSERT_EQ(w.view().shape_vec(), ex.shape);
        int mismatches = 0;
        for (int64_t r = 0; r < 130; ++r) {
            for (int64_t c = 0; c < 200; ++c) {
                const float s = ex.scale[static_cast<size_t>((r / 128) * 2 + c / 128)];
                const float want = e4m3_to_float(ex.weight[static_cast<size_t>(r * 200 + c)]) * s;
                const float got =
                    target == DType::kF32 ? w.ptr<float>()[r * 200 + c] : bf16_to_float(w.ptr<uint16_t>()[r * 200 + c]);
                const float want_t = target == DType::kF32 ? want : bf16_to_float(float_to_bf16(want));
                if (float_bits(got) != float_bits(want_t) && mismatches++ < 5) {
                    ADD_FAILURE() << "[" << r << ", " << c << "] got " << got << " want " << want_t;
                }
            }
        }
        EXPECT_EQ(mismatches, 0);
        const Tensor& n = m.at("layer.norm.weight");
        ASSERT_EQ(n.dtype(), target);
        const float n0 = target == DType::kF32 ? n.ptr<float>()[2] : bf16_to_float(n.ptr<uint16_t>()[2]);
        EXPECT_EQ(n0, -1.0f);
    }
    // Other block sizes: [64, 64] blocks need a [3, 4] scale, so the file's [2, 2] scale is a shape error.
    Result<Checkpoint> ck = Checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok());
    Result<WeightMap> wrong = ck->load(all(), {}, 64, 64, nullptr);
    ASSERT_FALSE(wrong.ok());
    EXPECT_TRUE(contains(wrong.status().message(), "layer.proj.weight")) << wrong.status().message();
    EXPECT_TRUE(contains(wrong.status().message(), "[3, 4]")) << wrong.status().message();
    // Raw mode returns the e4m3 bytes and the scale for native FP8 kernels.
    Result<WeightMap> raw = ck->load(all(), {.dequantize_fp8 = false}, 128, 128, nullptr);
    ASSERT_TRUE(raw.ok());
    EXPECT_EQ(raw->at("layer.proj.weight").dtype(), DType::kF8E4M3);
    EXPECT_EQ(raw->at("layer.proj.weight_scale_inv").dtype(), DType::kF32);
    EXPECT_EQ(std::memcmp(raw->at("layer.proj.weight").ptr<uint8_t>(), ex.weight.data(), ex.weight.size()), 0);
    // load_one.
    Result<Tensor> one = ck->load_one("layer.proj.weight", {});
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->ptr<float>()[129 * 200 + 199], e4m3_to_float(ex.weight.back()) * 8.0f);
    EXPECT_EQ(ck->load_one("nope", {}).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, Fp8ErrorsAreReported) {
    Fp8Example ex;
    TempDir dir;
    NamedViews v = ex.views();
    v.erase(v.begin() + 1);  // drop the scale
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", v).ok());
    Result<Checkpoint> ck = Checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok());
    Result<WeightMap> m = ck->load(all(), {}, 128, 128, nullptr);
    ASSERT_FALSE(m.ok());
    EXPECT_TRUE(contains(m.status().message(), "layer.proj.weight_scale_inv")) << m.status().message();

    ex.scale_shape = {2, 1};  // wrong scale shape
    ex.scale.resize(2);
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", ex.views()).ok());
    m = ck->load(all(), {}, 128, 128, nullptr);
    ASSERT_FALSE(m.ok());
    EXPECT_TRUE(contains(m.status().message(), "[2, 1]")) << m.status().message();
    EXPECT_FALSE(ck->load(all(), {.target = DType::kF16}, 128, 128, nullptr).ok());
}

// compressed-tensors MXFP4 (Kimi K3's routed experts): `X.weight_packed` u8 [..., cols / 2] (element 2i in the low
// nibble) + `X.weight_scale` u8 [..., ceil(cols / 32)] (e8m0) -> `X.weight`. The expected values use this test's own
// e2m1 table and std::ldexp, not the loader's decoder.
float e2m1_value(uint8_t nibble) {
    static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = kMag[nibble & 7u];
    return (nibble & 8u) ? -m : m;
}

struct Mxfp4Example {
    Shape shape;                 // the dequantised shape [..., cols]
    std::vector<uint8_t> codes;  // one e2m1 code per element
    std::vector<uint8_t> packed, scale;
    Shape packed_shape, scale_shape;

    Mxfp4Example(Shape s, uint32_t seed) : shape(std::move(s)) {
        std::mt19937 rng(seed);
        const int64_t cols = shape.back(), groups = (cols + 31) / 32;
        int64_t rows = 1;
        for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
        codes.resize(static_cast<size_t>(rows * cols));
        for (auto& c : codes) c = static_cast<uint8_t>(rng() & 15u);
        for (int64_t i = 0; i < rows * cols; i += 2) {
            packed.push_back(
                static_cast<uint8_t>(codes[static_cast<size_t>(i)] | (codes[static_cast<size_t>(i + 1)] << 4)));
        }
        scale.resize(static_cast<size_t>(rows * groups));
        for (auto& e : scale) e = static_cast<uint8_t>(100 + rng() % 50);  // 2^-27 .. 2^22
        scale[0] = 0;                                                      // 2^-127: a subnormal f32 product
        packed_shape = shape;
        packed_shape.back() = cols / 2;
        scale_shape = shape;
        scale_shape.back() = groups;
    }
    float want(int64_t flat) const {
        const int64_t cols = shape.back(), groups = (cols + 31) / 32;
        const int64_t r = flat / cols, c = flat % cols;
        return std::ldexp(e2m1_value(codes[static_cast<size_t>(flat)]),
                          static_cast<int>(scale[static_cast<size_t>(r * groups + c / 32)]) - 127);
    }
    NamedViews views(const std::string& base) {
        return {{base + ".weight_packed", TensorView::contiguous(packed.data(), DType::kU8, packed_shape)},
                {base + ".weight_scale", TensorView::contiguous(scale.data(), DType::kU8, scale_shape)}};
    }
};

TEST(CheckpointTest, DequantisesMxfp4) {
    // 2-D with a partial last group (70 columns: groups of 32, 32, 6) and stacked 3-D experts [2, 4, 64]
    Mxfp4Example a({3, 70}, 11), b({2, 4, 64}, 12);
    TempDir dir;
    NamedViews v = a.views("layers.0.experts.0.w1");
    for (auto& x : b.views("layers.0.experts.w13")) v.push_back(x);
    std::vector<uint16_t> norm = {0x3f80};
    v.push_back({"layers.0.norm.weight", TensorView::contiguous(norm.data(), DType::kBF16, Shape{1})});
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", v).ok());
    for (DType target : {DType::kF32, DType::kBF16}) {
        {  // (native FP8 loads re-encode MXFP4 as block FP8 instead: Mxfp4BecomesBlockFp8ForNativeLoads)
            LoadStats stats;
            const WeightMap m = load_all(dir.path(), {.target = target, .dequantize_fp8 = true}, &stats);
            ASSERT_EQ(m.size(), 3u);
            EXPECT_EQ(stats.n_mxfp4, 2);
            EXPECT_EQ(stats.n_fp8_block + stats.n_fp8_scaled, 0);
            EXPECT_EQ(m.count("layers.0.experts.0.w1.weight_packed"), 0u);
            EXPECT_EQ(m.count("layers.0.experts.0.w1.weight_scale"), 0u);
            for (const Mxfp4Example* ex : {&a, &b}) {
                const std::string name = ex == &a ? "layers.0.experts.0.w1.weight" : "layers.0.experts.w13.weight";
                ASSERT_EQ(m.count(name), 1u) << name;
                const Tensor& w = m.at(name);
                ASSERT_EQ(w.dtype(), target);
                ASSERT_EQ(w.view().shape_vec(), ex->shape);
                int bad = 0;
                for (int64_t i = 0; i < w.numel(); ++i) {
                    const float want = target == DType::kF32 ? ex->want(i) : bf16_to_float(float_to_bf16(ex->want(i)));
                    const float got = target == DType::kF32 ? w.ptr<float>()[i] : bf16_to_float(w.ptr<uint16_t>()[i]);
                    if (float_bits(got) != float_bits(want) && bad++ < 5) {
                        ADD_FAILURE() << name << "[" << i << "] got " << got << " want " << want;
                    }
                }
                EXPECT_EQ(bad, 0);
            }
        }
    }
    // The known values: codes 0x1 (0.5) and 0xF (-6) in byte 0 of row 0 with scale 0 -> 2^-128 and -6 * 2^-127.
    Mxfp4Example c({1, 32}, 13);
    c.packed[0] = 0xF1;
    c.scale[0] = 127;
    TempDir dir2;
    ASSERT_TRUE(write_safetensors(dir2.path() / "model.safetensors", c.views("p")).ok());
    const WeightMap m = load_all(dir2.path(), {});
    EXPECT_EQ(m.at("p.weight").ptr<float>()[0], 0.5f);
    EXPECT_EQ(m.at("p.weight").ptr<float>()[1], -6.0f);
    // the same bytes stored as i8 (packed) and e8m0 (scale) decode the same way
    NamedViews v2 = c.views("p");
    v2[0].second.dtype = DType::kI8;
    v2[1].second.dtype = DType::kE8M0;
    TempDir dir3;
    ASSERT_TRUE(write_safetensors(dir3.path() / "model.safetensors", v2).ok());
    const WeightMap m3 = load_all(dir3.path(), {});
    ASSERT_EQ(m3.count("p.weight"), 1u);
    EXPECT_EQ(std::memcmp(m3.at("p.weight").ptr<float>(), m.at("p.weight").ptr<float>(), 32 * sizeof(float)), 0);
}

// Native FP8 loads (dequantize_fp8 false): an MXFP4 weight becomes X.weight e4m3 + X.weight_scale_inv (one power of
// two per 128 x 128 block, [.., ceil(out/128), ceil(in/128)]) for the FP8 kernels. With group exponents within a few
// binades of each other e4m3 holds every element exactly (bit for bit the dequantised value); with exponents 50
// binades apart the small groups round into e4m3's subnormals, and exactly those elements are counted as inexact.
TEST(CheckpointTest, Mxfp4BecomesBlockFp8ForNativeLoads) {
    // a: 2-D with a partial group and two column blocks (200 columns), exponents 120..126; b: stacked [2, 130, 64]
    // (two row blocks), exponents 118..127; c: exponents 100..149 (as Mxfp4Example draws them), not all exact.
    Mxfp4Example a({3, 200}, 21), b({2, 130, 64}, 22), c({4, 96}, 23);
    std::mt19937 rng(24);
    for (auto& e : a.scale) e = static_cast<uint8_t>(120 + rng() % 7);
    for (auto& e : b.scale) e = static_cast<uint8_t>(118 + rng() % 10);
    TempDir dir;
    NamedViews v = a.views("l.0.e.0.w1");
    for (auto& x : b.views("l.0.e.w13")) v.push_back(x);
    for (auto& x : c.views("l.0.e.1.w1")) v.push_back(x);
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", v).ok());
    LoadStats stats;
    const WeightMap m = load_all(dir.path(), {.target = DType::kBF16, .dequantize_fp8 = false}, &stats);
    ASSERT_EQ(m.size(), 6u);
    EXPECT_EQ(stats.n_mxfp4_fp8, 3);
    EXPECT_EQ(stats.n_mxfp4, 0);
    int64_t inexact = 0;
    for (const auto& [ex, name] :
         {std::pair<const Mxfp4Example*, std::string>{&a, "l.0.e.0.w1"}, {&b, "l.0.e.w13"}, {&c, "l.0.e.1.w1"}}) {
        ASSERT_EQ(m.count(name + ".weight"), 1u) << name;
        ASSERT_EQ(m.count(name + ".weight_scale_inv"), 1u) << name;
        const Tensor& w = m.at(name + ".weight");
        const Tensor& sc = m.at(name + ".weight_scale_inv");
        ASSERT_EQ(w.dtype(), DType::kF8E4M3);
        ASSERT_EQ(w.view().shape_vec(), ex->shape);
        ASSERT_EQ(sc.dtype(), DType::kF32);
        const int64_t rows = ex->shape[ex->shape.size() - 2], cols = ex->shape.back();
        const int64_t sr = (rows + 127) / 128, scn = (cols + 127) / 128;
        Shape want_sshape(ex->shape.begin(), ex->shape.end() - 2);
        want_sshape.push_back(sr);
        want_sshape.push_back(scn);
        ASSERT_EQ(sc.view().shape_vec(), want_sshape);
        int64_t here = 0;
        for (int64_t i = 0; i < w.numel(); ++i) {
            const int64_t mat = i / (rows * cols), r = (i / cols) % rows, col = i % cols;
            const float step = sc.ptr<float>()[(mat * sr + r / 128) * scn + col / 128];
            ASSERT_EQ(step, std::ldexp(1.0f, std::ilogb(step))) << name << ": scales are powers of two";
            const float got = e4m3_to_float(w.ptr<uint8_t>()[i]) * step, want = ex->want(i);
            if (float_bits(got) == float_bits(want)) continue;
            ++here;
            // rounded in e4m3's subnormal range (steps of 2^-9 of the scale): off by at most half a step
            EXPECT_LE(std::fabs(got - want), std::ldexp(step, -10)) << name << "[" << i << "]";
            EXPECT_LT(std::fabs(want), std::ldexp(step, -6)) << name << "[" << i << "]: only subnormals round";
        }
        if (ex != &c) {
            EXPECT_EQ(here, 0) << name << ": within a few binades every element is exact";
        }
        inexact += here;
    }
    EXPECT_GT(inexact, 0) << "c's exponents 50 binades apart must round some elements";
    EXPECT_EQ(stats.n_mxfp4_fp8_inexact, inexact);
    // The 2-D one through the loader's own block dequantiser: bit for bit the MXFP4 values.
    const Result<Tensor> back = dequantize_fp8_blocks(
        m.at("l.0.e.0.w1.weight").view(), m.at("l.0.e.0.w1.weight_scale_inv").view(), 128, 128, DType::kF32);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    for (int64_t i = 0; i < back->numel(); ++i) ASSERT_EQ(float_bits(back->ptr<float>()[i]), float_bits(a.want(i)));
}

TEST(CheckpointTest, Mxfp4ErrorsAreReported) {
    auto load_err = [](const NamedViews& v) {
        TempDir dir;
        EXPECT_TRUE(write_safetensors(dir.path() / "model.safetensors", v).ok());
        Result<Checkpoint> ck = Checkpoint::open(dir.path());
        EXPECT_TRUE(ck.ok());
        Result<WeightMap> m = ck->load(all(), {}, 128, 128, nullptr);
        EXPECT_FALSE(m.ok());
        return m.ok() ? Status() : m.status();
    };
    Mxfp4Example ex({2, 64}, 21);
    NamedViews v = ex.views("q");
    Status st = load_err({v[0]});  // no scale
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(st.message(), "q.weight_scale")) << st.message();
    ex.scale_shape = {2, 1};  // 64 columns need 2 exponents per row
    ex.scale.resize(2);
    st = load_err(ex.views("q"));
    EXPECT_TRUE(contains(st.message(), "[2, 2]")) << st.message();
    Mxfp4Example nan({2, 64}, 22);
    nan.scale[3] = 0xff;
    st = load_err(nan.views("q"));
    EXPECT_TRUE(contains(st.message(), "NaN")) << st.message();
    // NVFP4 (a global scale beside the packed weight) is not MXFP4
    Mxfp4Example nv({2, 64}, 23);
    NamedViews vn = nv.views("q");
    float g = 1.0f;
    vn.push_back({"q.weight_global_scale", TensorView::contiguous(&g, DType::kF32, Shape{1})});
    st = load_err(vn);
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_TRUE(contains(st.message(), "NVFP4")) << st.message();
}

// compressed-tensors FP8 (Kimi K3's attention / shared experts): `X.weight` e4m3 + `X.weight_scale` (a multiplier)
// per tensor, per output channel or per block; a `weight_scale` beside a non-FP8 weight is an ordinary tensor.
TEST(CheckpointTest, DequantisesCompressedTensorsFp8) {
    const std::vector<uint8_t> w = random_fp8(130, 200, 9);
    const Shape shape = {130, 200};
    float per_tensor = 0.125f;
    std::vector<float> per_channel(130);
    for (size_t r = 0; r < per_channel.size(); ++r) per_channel[r] = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    std::vector<float> per_block = {0.5f, 2.0f, 0.25f, 8.0f};
    std::vector<uint16_t> other = {0x3f80, 0x4000};
    std::vector<float> other_scale = {3.0f};
    TempDir dir;
    ASSERT_TRUE(
        write_safetensors(dir.path() / "model.safetensors",
                          {{"t.weight", TensorView::contiguous(const_cast<uint8_t*>(w.data()), DType::kF8E4M3, shape)},
                           {"t.weight_scale", TensorView::contiguous(&per_tensor, DType::kF32, Shape{1})},
                           {"c.weight", TensorView::contiguous(const_cast<uint8_t*>(w.data()), DType::kF8E4M3, shape)},
                           {"c.weight_scale", TensorView::contiguous(per_channel.data(), DType::kF32, Shape{130, 1})},
                           {"b.weight", TensorView::contiguous(const_cast<uint8_t*>(w.data()), DType::kF8E4M3, shape)},
                           {"b.weight_scale", TensorView::contiguous(per_block.data(), DType::kF32, Shape{2, 2})},
                           {"o.weight", TensorView::contiguous(other.data(), DType::kBF16, Shape{2})},
                           {"o.weight_scale", TensorView::contiguous(other_scale.data(), DType::kF32, Shape{1})}})
            .ok());
    LoadStats stats;
    const WeightMap m = load_all(dir.path(), {}, &stats);
    ASSERT_EQ(m.size(), 5u);  // t, c, b weights; o.weight and its (non-FP8) o.weight_scale
    EXPECT_EQ(stats.n_fp8_scaled, 3);
    EXPECT_EQ(stats.n_fp8_block + stats.n_mxfp4, 0);
    EXPECT_EQ(m.count("o.weight_scale"), 1u);
    EXPECT_EQ(m.count("t.weight_scale"), 0u);
    int bad = 0;
    for (int64_t r = 0; r < 130; ++r) {
        for (int64_t c = 0; c < 200; ++c) {
            const float x = e4m3_to_float(w[static_cast<size_t>(r * 200 + c)]);
            const float want[3] = {x * per_tensor, x * per_channel[static_cast<size_t>(r)],
                                   x * per_block[static_cast<size_t>((r / 128) * 2 + c / 128)]};
            const char* names[3] = {"t.weight", "c.weight", "b.weight"};
            for (int k = 0; k < 3; ++k) {
                const float got = m.at(names[k]).ptr<float>()[r * 200 + c];
                if (float_bits(got) != float_bits(want[k]) && bad++ < 5) {
                    ADD_FAILURE() << names[k] << "[" << r << ", " << c << "] got " << got << " want " << want[k];
                }
            }
        }
    }
    EXPECT_EQ(bad, 0);
}

// The FP8 fixture is the bf16 fixture quantised per 128x128 block (scale s = the block's multiplier). e4m3 keeps 3
// mantissa bits, so rounding a normal value moves it by at most half an ulp = 2^-4 of its magnitude, and a value in
// e4m3's subnormal range (|b/s| < 2^-6, step 2^-9) by at most 2^-10 * s. Hence per element
//   |dequant - bf16| <= |bf16| / 16 + s / 1024   (plus fp32 rounding of the product, ~2^-24 relative).
TEST(CheckpointTest, Fp8FixtureMatchesBf16Fixture) {
    const WeightMap ref = load_all(kFixtures / "deepseek_v3_tiny", {});
    const WeightMap deq = load_all(kFixtures / "deepseek_v3_tiny_fp8", {});
    Result<Checkpoint> ck = Checkpoint::open(kFixtures / "deepseek_v3_tiny_fp8");
    ASSERT_TRUE(ck.ok());
    Result<WeightMap> raw = ck->load(all(), {.dequantize_fp8 = false}, 128, 128, nullptr);
    ASSERT_TRUE(raw.ok());
    ASSERT_EQ(ref.size(), 129u);
    ASSERT_EQ(deq.size(), ref.size());
    int n_fp8 = 0;
    int64_t n_changed = 0;
    for (const auto& [name, b] : ref) {
        ASSERT_EQ(deq.count(name), 1u) << name;
        const Tensor& a = deq.at(name);
        ASSERT_EQ(a.view().shape_vec(), b.view().shape_vec()) << name;
        ASSERT_EQ(a.dtype(), DType::kF32);
        const int64_t n = b.numel();
        if (raw->at(name).dtype() != DType::kF8E4M3) {  // untouched bf16 tensors are identical
            EXPECT_EQ(std::memcmp(a.ptr<float>(), b.ptr<float>(), static_cast<size_t>(n) * 4), 0) << name;
            continue;
        }
        ++n_fp8;
        const Tensor& scale = raw->at(name + "_scale_inv");
        ASSERT_EQ(b.ndim(), 2) << name;
        const int64_t rows = b.size(0), cols = b.size(1), scols = (cols + 127) / 128;
        ASSERT_EQ(scale.view().shape_vec(), (Shape{(rows + 127) / 128, scols})) << name;
        float worst = 0.0f, max_ref = 0.0f;
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                const float s = scale.ptr<float>()[(r / 128) * scols + c / 128];
                const float x = a.ptr<float>()[r * cols + c], y = b.ptr<float>()[r * cols + c];
                const float bound = std::fabs(y) / 16.0f + s / 1024.0f + 1e-6f * std::fabs(y);
                ASSERT_LE(std::fabs(x - y), bound) << name << " [" << r << ", " << c << "] s=" << s;
                worst = std::max(worst, std::fabs(x - y));
                max_ref = std::max(max_ref, std::fabs(y));
                n_changed += x != y;
            }
        }
        EXPECT_LE(worst, max_ref / 16.0f) << name;
    }
    EXPECT_EQ(n_fp8, 104);    // reference.json: "104 linear weights"
    EXPECT_GT(n_changed, 0);  // quantisation did change values: the comparison is not vacuous
}

TEST(CheckpointTest, ConvertsBf16ExactlyAndThreadsAgree) {
    const std::filesystem::path dir = kFixtures / "deepseek_v3_tiny";
    const WeightMap f32 = load_all(dir, {});
    const WeightMap bf16 = load_all(dir, {.target = DType::kBF16});
    const WeightMap threaded = load_all(dir, {.n_threads = 4});
    Result<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::open(dir / "model.safetensors");
    ASSERT_TRUE(file.ok());
    for (const TensorInfo& t : (*file)->tensors()) {
        const std::span<const uint8_t> bytes = (*file)->bytes(t);
        const Tensor& b = bf16.at(t.name);
        ASSERT_EQ(b.dtype(), DType::kBF16);
        EXPECT_EQ(std::memcmp(b.ptr<uint8_t>(), bytes.data(), bytes.size()), 0) << t.name;
        const Tensor& f = f32.at(t.name);
        for (int64_t i = 0; i < f.numel(); ++i) {
            ASSERT_EQ(float_to_bf16(f.ptr<float>()[i]), b.ptr<uint16_t>()[i]) << t.name << " " << i;
        }
        EXPECT_EQ(std::memcmp(threaded.at(t.name).ptr<float>(), f.ptr<float>(), f.nbytes()), 0) << t.name;
    }
}

TEST(CheckpointTest, IndexLessCheckpoint) {
    Result<Checkpoint> ck = Checkpoint::open(kFixtures / "deepseek_v3_tiny");
    ASSERT_TRUE(ck.ok());
    EXPECT_FALSE(ck->indexed());
    EXPECT_EQ(ck->tensor_names().size(), 129u);
    EXPECT_EQ(ck->shard_files(), std::vector<std::string>{"model.safetensors"});
    LoadStats stats;
    Result<WeightMap> none = ck->load([](std::string_view) { return false; }, {}, 128, 128, &stats);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
    EXPECT_EQ(stats.files_opened.size(), 1u);  // the header had to be read to learn the names
    ASSERT_TRUE(ck->load([](std::string_view n) { return n == "lm_head.weight"; }, {}, 128, 128, &stats).ok());
    EXPECT_EQ(stats.files_opened.size(), 2u);  // stats accumulate over calls
    EXPECT_EQ(stats.n_tensors, 1);
    Result<Tensor> norm = ck->load_one("model.norm.weight", {});
    ASSERT_TRUE(norm.ok());
    EXPECT_EQ(norm->view().shape_vec(), Shape{128});
}

TEST(LayerRangeTest, SelectsAStagesTensors) {
    const LayerRange first{0, 2}, last{2, 4}, full{0, 4};
    EXPECT_TRUE(tensor_in_layer_range("model.layers.0.mlp.gate.weight", first, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.layers.2.mlp.gate.weight", first, 4, false));
    EXPECT_TRUE(tensor_in_layer_range("model.layers.3.self_attn.o_proj.weight", last, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.layers.1.self_attn.o_proj.weight", last, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.layers.10.x", LayerRange{0, 2}, 12, false));  // not layer 1
    EXPECT_TRUE(tensor_in_layer_range("model.layers.1.x", LayerRange{0, 2}, 12, false));
    // MTP layers (index >= num_hidden_layers) are never needed.
    EXPECT_FALSE(tensor_in_layer_range("model.layers.4.eh_proj.weight", full, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.layers.4.eh_proj.weight", LayerRange{2, 5}, 4, false));
    EXPECT_TRUE(tensor_in_layer_range("model.embed_tokens.weight", first, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.embed_tokens.weight", last, 4, false));
    EXPECT_TRUE(tensor_in_layer_range("model.embed_tokens.weight", last, 4, true));  // tied to lm_head
    EXPECT_TRUE(tensor_in_layer_range("model.norm.weight", last, 4, false));
    EXPECT_TRUE(tensor_in_layer_range("lm_head.weight", last, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("lm_head.weight", first, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.norm_extra.weight", last, 4, false));  // unknown prefix
    EXPECT_TRUE(tensor_in_layer_range("model.norm_extra.weight", full, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("model.layers.x.weight", first, 4, false));
    EXPECT_TRUE(tensor_in_layer_range("language_model.model.layers.1.x", first, 4, false));
    EXPECT_FALSE(tensor_in_layer_range("vision_tower.blocks.0.w", first, 4, false));
}

// Re-shards the bf16 fixture: one shard per layer, embed, head (norm + lm_head), and an MTP layer 4 shard.
std::map<std::string, std::string> write_sharded(const std::filesystem::path& dir) {
    Result<std::unique_ptr<SafetensorsFile>> src =
        SafetensorsFile::open(kFixtures / "deepseek_v3_tiny" / "model.safetensors");
    EXPECT_TRUE(src.ok());
    std::map<std::string, NamedViews> shards;
    std::map<std::string, std::string> weight_map;
    for (const TensorInfo& t : (*src)->tensors()) {
        std::string shard = "model-head.safetensors";
        if (t.name.starts_with("model.embed_tokens.")) shard = "model-embed.safetensors";
        if (t.name.starts_with("model.layers.")) shard = "model-layer-0" + t.name.substr(13, 1) + ".safetensors";
        shards[shard].emplace_back(t.name, (*src)->view(t));
        weight_map[t.name] = shard;
    }
    float mtp[4] = {1, 2, 3, 4};
    const Shape mtp_shape = {2, 2};
    shards["model-mtp.safetensors"].emplace_back("model.layers.4.eh_proj.weight",
                                                 TensorView::contiguous(mtp, DType::kF32, mtp_shape));
    weight_map["model.layers.4.eh_proj.weight"] = "model-mtp.safetensors";
    for (const auto& [file, views] : shards) EXPECT_TRUE(write_safetensors(dir / file, views).ok());
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    testing::write_text(dir / "model.safetensors.index.json", index.dump(1));
    return weight_map;
}

TEST(CheckpointTest, StageLoadsOnlyItsShards) {
    TempDir dir;
    const std::map<std::string, std::string> weight_map = write_sharded(dir.path());
    Result<Checkpoint> ck = Checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    EXPECT_TRUE(ck->indexed());
    EXPECT_EQ(ck->tensor_names().size(), 130u);
    EXPECT_EQ(ck->shard_files().size(), 7u);

    LoadStats full_stats;
    Result<WeightMap> full = ck->load(
        [](std::string_view n) {
            return tensor_in_layer_range(n, {0, 4}, 4, false);
        },
        {}, 128, 128, &full_stats);
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    EXPECT_EQ(full->size(), 129u);  // everything but the MTP layer
    EXPECT_EQ(full_stats.files_opened.size(), 6u);

    LoadStats stage_stats;
    auto stage = [](std::string_view n) { return tensor_in_layer_range(n, {2, 4}, 4, false); };
    Result<WeightMap> part = ck->load(stage, {}, 128, 128, &stage_stats);
    ASSERT_TRUE(part.ok()) << part.status().to_string();
    std::vector<std::string> opened = stage_stats.files_opened;
    std::sort(opened.begin(), opened.end());
    EXPECT_EQ(opened, (std::vector<std::string>{"model-head.safetensors", "model-layer-02.safetensors",
                                                "model-layer-03.safetensors"}));
    EXPECT_LT(stage_stats.bytes_read, full_stats.bytes_read);
    EXPECT_EQ(stage_stats.n_tensors, static_cast<int64_t>(part->size()));
    size_t expected = 0;
    for (const auto& [name, shard] : weight_map) {
        if (!stage(name)) {
            EXPECT_EQ(part->count(name), 0u) << name;
            continue;
        }
        ++expected;
        ASSERT_EQ(part->count(name), 1u) << name;
        const Tensor& a = part->at(name);
        EXPECT_EQ(std::memcmp(a.ptr<uint8_t>(), full->at(name).ptr<uint8_t>(), a.nbytes()), 0) << name;
    }
    EXPECT_EQ(part->size(), expected);
    EXPECT_EQ(expected, 2 * 38 + 2u);  // layers 2 and 3, norm, lm_head
    // bytes_read = the selected tensors' bytes (bf16 on disk) + the opened shards' headers.
    uint64_t want_bytes = 0;
    for (const auto& [name, t] : *part) want_bytes += t.nbytes() / 2;
    for (const std::string& f : opened) {
        Result<std::unique_ptr<SafetensorsFile>> sf = SafetensorsFile::open(dir.path() / f);
        ASSERT_TRUE(sf.ok());
        want_bytes += (*sf)->header_bytes();
    }
    EXPECT_EQ(stage_stats.bytes_read, want_bytes);

    // A stage's host may lack other stages' shards: loading the first stage still works without layer 3's shard.
    std::filesystem::remove(dir.path() / "model-layer-03.safetensors");
    LoadStats first_stats;
    Result<WeightMap> first = ck->load(
        [](std::string_view n) {
            return tensor_in_layer_range(n, {0, 2}, 4, false);
        },
        {}, 128, 128, &first_stats);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first_stats.files_opened.size(), 3u);  // embed, layer 0, layer 1
    Result<WeightMap> second = ck->load(stage, {}, 128, 128, nullptr);
    ASSERT_FALSE(second.ok());
    EXPECT_TRUE(contains(second.status().message(), "model-layer-03.safetensors")) << second.status().message();
}

TEST(CheckpointTest, IndexErrors) {
    TempDir dir;
    EXPECT_EQ(Checkpoint::open(dir.path() / "absent").status().code(), StatusCode::kNotFound);
    Result<Checkpoint> empty = Checkpoint::open(dir.path());
    ASSERT_FALSE(empty.ok());
    EXPECT_TRUE(contains(empty.status().message(), "model.safetensors.index.json"));

    const auto index = dir.path() / "model.safetensors.index.json";
    auto open_err = [&](std::string_view text, std::string_view needle) {
        testing::write_text(index, text);
        Result<Checkpoint> ck = Checkpoint::open(dir.path());
        ASSERT_FALSE(ck.ok()) << text;
        EXPECT_TRUE(contains(ck.status().message(), index.string())) << ck.status().message();
        EXPECT_TRUE(contains(ck.status().message(), needle)) << ck.status().message();
    };
    open_err("{\"weight_map\": {\"a\": }", "byte");
    open_err("{\"metadata\": {}}", "weight_map");
    open_err("{\"weight_map\": []}", "weight_map");
    open_err("{\"weight_map\": {\"a\": 3}}", "'a'");
    open_err("{\"weight_map\": {\"a\": \"../model.safetensors\"}}", "../model.safetensors");
    open_err("{\"weight_map\": {\"a\": \"/etc/x.safetensors\"}}", "/etc/x.safetensors");

    // The index names a tensor its shard lacks; and a shard that does not exist.
    float x[2] = {1, 2};
    const Shape s = {2};
    ASSERT_TRUE(
        write_safetensors(dir.path() / "s1.safetensors", {{"a", TensorView::contiguous(x, DType::kF32, s)}}).ok());
    testing::write_text(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
                                                  "c": "s2.safetensors"}})");
    Result<Checkpoint> ck = Checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    Result<WeightMap> b = ck->load([](std::string_view n) { return n == "b"; }, {}, 128, 128, nullptr);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(contains(b.status().message(), "'b'")) << b.status().message();
    EXPECT_TRUE(contains(b.status().message(), "s1.safetensors")) << b.status().message();
    Result<WeightMap> c = ck->load([](std::string_view n) { return n == "c"; }, {}, 128, 128, nullptr);
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(contains(c.status().message(), "s2.safetensors")) << c.status().message();
    Result<WeightMap> a = ck->load([](std::string_view n) { return n == "a"; }, {}, 128, 128, nullptr);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->at("a").ptr<float>()[1], 2.0f);
}

}  // namespace
}  // namespace penstock::loader
