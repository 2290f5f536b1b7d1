// cuda::quantize_e4m3 and the fp8.cuh conversion, bit for bit against penstock::float_to_e4m3 (and PyTorch's own
// table in tests/data/e4m3_torch_bf16.bin): every bf16 pattern (as f32 and as bf16 input), seeded random patterns and
// values, the specials (+-0, +-inf, NaNs, +-448/464/465/480, subnormal grid midpoints), and sizes / pointer offsets
// that exercise the 16-byte path, the scalar path and the tail. The host sweep needs no GPU and always runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/ref_test_util.h"

namespace penstock::test {
namespace {

// Fails with the number of mismatching bytes and the first few (index, input bits, got, expected).
::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& expect,
                                      const std::vector<uint32_t>& input_bits) {
    if (got.size() != expect.size()) {
        return ::testing::AssertionFailure() << "size " << got.size() << " vs " << expect.size();
    }
    int64_t n_bad = 0;
    std::ostringstream first;
    for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] == expect[i]) continue;
        if (n_bad++ < 8) {
            char line[96];
            std::snprintf(line, sizeof(line), "\n  [%zu] input 0x%08x (%g): got 0x%02x expected 0x%02x", i,
                          input_bits[i], static_cast<double>(bits_float(input_bits[i])), got[i], expect[i]);
            first << line;
        }
    }
    if (n_bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << n_bad << " of " << got.size() << " bytes differ; first:" << first.str();
}

std::vector<uint8_t> expected_e4m3(const std::vector<uint32_t>& bits) {
    std::vector<uint8_t> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = float_to_e4m3(bits_float(bits[i]));
    return out;
}

// Special and boundary inputs, as f32 bit patterns.
std::vector<uint32_t> special_bits() {
    std::vector<float> v = {0.0f,
                            448.0f,
                            464.0f,
                            465.0f,
                            480.0f,
                            449.0f,
                            463.99f,
                            464.01f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            std::ldexp(1.0f, -6),
                            std::ldexp(1.0f, -7),
                            std::ldexp(1.0f, -9),
                            std::ldexp(1.0f, -10),
                            std::ldexp(3.0f, -11),
                            std::ldexp(1.0f, -11),
                            1.0f,
                            1.0625f,
                            1.1875f};
    // Every midpoint between neighbouring e4m3 magnitudes, and the floats either side of it.
    for (uint32_t m = 0; m < 0x7e; ++m) {
        const float mid = 0.5f * (e4m3_to_float(static_cast<uint8_t>(m)) + e4m3_to_float(static_cast<uint8_t>(m + 1)));
        v.push_back(mid);
        v.push_back(std::nextafter(mid, 0.0f));
        v.push_back(std::nextafter(mid, 1e9f));
        v.push_back(e4m3_to_float(static_cast<uint8_t>(m)));
    }
    std::vector<uint32_t> bits;
    for (float x : v) {
        bits.push_back(float_bits(x));
        bits.push_back(float_bits(x) ^ 0x80000000u);  // and its negation
    }
    for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u}) bits.push_back(nan);
    return bits;
}

TEST(Fp8HostTest, DeviceRoutineMatchesCoreOnSweepOfAllFloats) {
    // The same routine the kernel runs, compiled for the host: every 4099th f32 pattern (~1M, prime stride, so all
    // exponents and sign bits are hit) plus the specials. (It was also checked exhaustively over all 2^32 patterns.)
    std::vector<uint32_t> bits = special_bits();
    for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) bits.push_back(static_cast<uint32_t>(u));
    std::vector<uint8_t> got(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) got[i] = cuda::e4m3_from_f32_bits(bits[i]);
    EXPECT_TRUE(same_bytes(got, expected_e4m3(bits), bits));
}

// fp8.cuh div_by_recip, the FP8 quantisers' quotient, against IEEE division (the CPU reference's), on the quantiser's
// operands: s = max(amax, 1e-4) / 448 and x = any bf16 or f32 with |x| <= amax, amax over every binade of bf16 (and
// 0). The e4m3 bytes must be equal everywhere, the f32 quotients wherever |x / s| >= 2^-10 (every quotient the
// cast can tell apart from 0). Seeded; ~8M pairs, plus x = +-amax, +-0 and NaN in every block.
TEST(Fp8HostTest, DivByRecipCastsLikeTheDivision) {
    PENSTOCK_SEEDED(4242);
    std::mt19937 rng(4242);
    std::uniform_int_distribution<uint32_t> bits16(0, 0xffff);
    auto bf16_value = [](uint32_t b16) { return bits_float(b16 << 16); };
    int64_t checked = 0, bad_bytes = 0, bad_f32 = 0;
    for (int block = 0; block < 40000; ++block) {
        float amax = std::fabs(bf16_value(bits16(rng) & 0x7fffu));
        if (!std::isfinite(amax)) amax = 0.0f;
        const float s = std::max(amax, 1e-4f) / 448.0f;
        const float r = 1.0f / s;
        std::vector<float> xs = {amax, -amax, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
        for (int i = 0; i < 200; ++i) {
            const float x = bf16_value(bits16(rng));
            if (std::fabs(x) <= amax) xs.push_back(x);
            // and a value scaled into [-amax, amax] with bf16 rounding, so small amax blocks get many
            xs.push_back(bf16_value(float_bits(amax * (static_cast<float>(rng() % 2001) / 1000.0f - 1.0f)) >> 16));
            // and an f32 value (fp8_act_quant's f32 inputs)
            xs.push_back(
                amax * std::ldexp(static_cast<float>(rng() % (1u << 24)) / 16777216.0f, -static_cast<int>(rng() % 40)) *
                (rng() % 2 == 0 ? 1.0f : -1.0f));
        }
        for (const float x : xs) {
            if (std::fabs(x) > amax) continue;
            const float want = x / s, got = cuda::div_by_recip(x, s, r);
            const uint8_t wb = std::isnan(want) ? 0x7f : cuda::e4m3_from_f32_bits(float_bits(want));
            const uint8_t gb = std::isnan(got) ? 0x7f : cuda::e4m3_from_f32_bits(float_bits(got));
            if (wb != gb && bad_bytes++ < 5) {
                std::printf("[fp8] div_by_recip mismatch: x %a s %a: %a (0x%02x) vs %a (0x%02x)\n",
                            static_cast<double>(x), static_cast<double>(s), static_cast<double>(got), gb,
                            static_cast<double>(want), wb);
            }
            if (std::fabs(want) >= 0x1p-10f && float_bits(want) != float_bits(got)) ++bad_f32;
            ++checked;
        }
    }
    std::printf("[fp8] div_by_recip: %lld pairs, %lld e4m3 / %lld f32 mismatches\n", static_cast<long long>(checked),
                static_cast<long long>(bad_bytes), static_cast<long long>(bad_f32));
    EXPECT_GT(checked, 4000000);
    EXPECT_EQ(bad_bytes, 0);
    EXPECT_EQ(bad_f32, 0);
}

class QuantizeE4m3Test : public CudaTest {
  protected:
    // Quantises `bits` (f32 patterns) on the GPU from `in_dtype` storage, with the input and output views starting
    // `in_offset` / `out_offset` elements into their buffers. bf16 input uses the top 16 bits of each pattern.
    std::vector<uint8_t> quantize(const std::vector<uint32_t>& bits, DType in_dtype, int64_t in_offset,
                                  int64_t out_offset) {
        const auto n = static_cast<int64_t>(bits.size());
        Tensor in_host = Tensor::empty({n + in_offset}, in_dtype);
        for (int64_t i = 0; i < n; ++i) {
            const uint32_t b = bits[static_cast<size_t>(i)];
            if (in_dtype == DType::kF32) {
                in_host.ptr<uint32_t>()[in_offset + i] = b;
            } else {
                in_host.ptr<uint16_t>()[in_offset + i] = static_cast<uint16_t>(b >> 16);
            }
        }
        const Tensor in_dev = cuda::to_device(in_host, alloc(), stream());
        const Tensor out_dev = Tensor::empty({n + out_offset}, DType::kF8E4M3, alloc());
        cuda::fill_bytes_async(out_dev, 0xa5, stream());
        cuda::quantize_e4m3({.out = out_dev.view().slice(0, out_offset, out_offset + n),
                             .in = in_dev.view().slice(0, in_offset, in_offset + n)},
                            raw_stream());
        const Tensor out_host = cuda::to_host(out_dev, stream());
        const auto* o = out_host.ptr<uint8_t>();
        for (int64_t i = 0; i < out_offset; ++i) EXPECT_EQ(o[i], 0xa5) << "byte " << i << " before the view written";
        return std::vector<uint8_t>(o + out_offset, o + out_offset + n);
    }
};

TEST_F(QuantizeE4m3Test, AllBf16PatternsMatchCoreAndTorch) {
    std::vector<uint32_t> bits(65536);
    for (uint32_t h = 0; h < 65536; ++h) bits[h] = h << 16;
    const std::vector<uint8_t> expect = expected_e4m3(bits);
    EXPECT_TRUE(same_bytes(quantize(bits, DType::kF32, 0, 0), expect, bits)) << "f32 input";
    EXPECT_TRUE(same_bytes(quantize(bits, DType::kBF16, 0, 0), expect, bits)) << "bf16 input";

    // PyTorch's own answer, bf16 pattern h -> byte h (written by tools/make_variant_fixtures.py).
    const std::string path = std::string(PENSTOCK_TEST_DATA_DIR) + "/e4m3_torch_bf16.bin";
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) GTEST_SKIP() << "no " << path;
    std::vector<uint8_t> torch_table(65536);
    const size_t read = std::fread(torch_table.data(), 1, torch_table.size(), f);
    std::fclose(f);
    ASSERT_EQ(read, torch_table.size()) << path;
    EXPECT_TRUE(same_bytes(quantize(bits, DType::kBF16, 0, 0), torch_table, bits)) << "vs torch";
}

TEST_F(QuantizeE4m3Test, RandomPatternsValuesAndSpecialsMatchCore) {
    const uint32_t seed = 42;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    std::vector<uint32_t> bits = special_bits();
    std::uniform_int_distribution<uint32_t> any_bits;
    for (int i = 0; i < (1 << 20); ++i) bits.push_back(any_bits(rng));
    // Values concentrated on e4m3's range: N(0, 1) * 2^k, k in [-14, 10].
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-14, 10);
    for (int i = 0; i < (1 << 20); ++i) bits.push_back(float_bits(std::ldexp(normal(rng), exponent(rng))));
    EXPECT_TRUE(same_bytes(quantize(bits, DType::kF32, 0, 0), expected_e4m3(bits), bits));
}

TEST_F(QuantizeE4m3Test, SizesAndOffsetsCoverVectorScalarAndTail) {
    const uint32_t seed = 7;
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 64.0f);
    for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{15}, int64_t{16},
                            int64_t{17}, int64_t{255}, int64_t{1000003}}) {
        std::vector<uint32_t> bits(static_cast<size_t>(n));
        for (uint32_t& b : bits) b = float_bits(normal(rng)) & 0xffff0000u;  // bf16-representable: same for both
        const std::vector<uint8_t> expect = expected_e4m3(bits);
        for (const DType dtype : {DType::kF32, DType::kBF16}) {
            for (const int64_t in_offset : {int64_t{0}, int64_t{1}}) {
                for (const int64_t out_offset : {int64_t{0}, int64_t{1}}) {
                    EXPECT_TRUE(same_bytes(quantize(bits, dtype, in_offset, out_offset), expect, bits))
                        << "n=" << n << " dtype=" << dtype_name(dtype) << " in_offset=" << in_offset
                        << " out_offset=" << out_offset;
                }
            }
        }
    }
}

}  // namespace
}  // namespace penstock::test
