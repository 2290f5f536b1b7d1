// Core module tests: Status/Result and their macros, check-macro death messages, TensorView view arithmetic,
// ThreadPool coverage and nesting, and the dtype conversions, including float -> e4m3fn exhaustively over every bf16
// bit pattern against a table derived here from the rounding rule (and against PyTorch's output when present).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace penstock {
namespace {

// ---- Status / Result -------------------------------------------------------------------------------------------

TEST(Status, OkAndErrors) {
    const Status ok;
    EXPECT_TRUE(ok.ok());
    EXPECT_EQ(ok.code(), StatusCode::kOk);
    EXPECT_EQ(ok.to_string(), "OK");
    EXPECT_TRUE(ok_status().ok());

    const Status bad = invalid_argument("bad shape");
    EXPECT_FALSE(bad.ok());
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.message(), "bad shape");
    EXPECT_EQ(bad.to_string(), "InvalidArgument: bad shape");
    EXPECT_EQ(bad.with_context("loading x").to_string(), "InvalidArgument: loading x: bad shape");
    EXPECT_TRUE(ok.with_context("ignored").ok());
    EXPECT_EQ(not_found("f").code(), StatusCode::kNotFound);
    EXPECT_EQ(data_loss("f").code(), StatusCode::kDataLoss);
    EXPECT_EQ(resource_exhausted("f").code(), StatusCode::kResourceExhausted);
    EXPECT_STREQ(status_code_name(StatusCode::kFailedPrecondition), "FailedPrecondition");
}

Result<int> checked_small(int x) {
    if (x > 100) return out_of_range("too big");
    return x;
}

TEST(Result, ValueOrStatus) {
    const Result<int> v = checked_small(42);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, 42);
    EXPECT_EQ(v.value(), 42);
    EXPECT_TRUE(v.status().ok());
    const Result<int> e = checked_small(101);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ(e.status().message(), "too big");

    Result<std::unique_ptr<std::string>> p = std::make_unique<std::string>("abc");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->get()->size(), 3u);
    std::unique_ptr<std::string> moved = std::move(p).value();
    EXPECT_EQ(*moved, "abc");
}

Status fails_if_negative(int x) { return x < 0 ? invalid_argument("negative") : ok_status(); }

Result<int> half_of_even(int x) {
    if (x % 2 != 0) return invalid_argument("odd");
    return x / 2;
}

int g_reached = 0;

Status chain(int x) {
    PENSTOCK_RETURN_IF_ERROR(fails_if_negative(x));
    ++g_reached;
    return ok_status();
}

Result<int> quarter(int x) {
    PENSTOCK_ASSIGN_OR_RETURN(const int h, half_of_even(x));
    PENSTOCK_ASSIGN_OR_RETURN(int q, half_of_even(h));
    return q;
}

TEST(StatusMacros, ReturnIfErrorAndAssignOrReturn) {
    g_reached = 0;
    EXPECT_TRUE(chain(1).ok());
    EXPECT_EQ(g_reached, 1);
    const Status s = chain(-1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(g_reached, 1);  // returned before the increment

    const Result<int> q = quarter(12);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(*q, 3);
    EXPECT_EQ(quarter(6).status().message(), "odd");  // second step fails (6 / 2 = 3 is odd)
    EXPECT_EQ(quarter(5).status().message(), "odd");
}

// ---- Checks ----------------------------------------------------------------------------------------------------

TEST(CheckDeathTest, PrintsBothOperandsAndContext) {
    const int64_t rows = 3;
    const int cols = 5;
    EXPECT_DEATH(PENSTOCK_CHECK_EQ(rows, cols) << "while testing",
                 "Check failed: rows == cols \\(3 vs\\. 5\\) while testing");
    EXPECT_DEATH(PENSTOCK_CHECK_LT(cols, rows), "cols < rows \\(5 vs\\. 3\\)");
    EXPECT_DEATH(PENSTOCK_CHECK(rows > 7) << "ctx " << 42, "core_test\\.cc:[0-9]+: Check failed: rows > 7 ctx 42");
    PENSTOCK_CHECK_EQ(rows, 3);  // passing checks do nothing
    PENSTOCK_CHECK_GE(cols, rows) << "never printed";
}

// ---- TensorView ------------------------------------------------------------------------------------------------

TEST(TensorView, StridesSliceSelectReshape) {
    std::vector<float> data(24);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    const Tensor t = Tensor::from_f32({2, 3, 4}, data);
    const TensorView& v = t.view();
    EXPECT_EQ(v.ndim, 3);
    EXPECT_EQ(v.stride(0), 12);
    EXPECT_EQ(v.stride(1), 4);
    EXPECT_EQ(v.stride(-1), 1);
    EXPECT_EQ(v.size(-1), 4);
    EXPECT_EQ(v.numel(), 24);
    EXPECT_EQ(v.nbytes(), 96u);
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.shape_string(), "[2, 3, 4]");
    EXPECT_EQ(*v.at<float>({1, 2, 3}), 23.0f);
    EXPECT_EQ(*v.at<float>({1}), 12.0f);

    const TensorView s = v.slice(1, 1, 3);  // [2, 2, 4], strides unchanged
    EXPECT_EQ(s.shape_string(), "[2, 2, 4]");
    EXPECT_EQ(s.stride(0), 12);
    EXPECT_FALSE(s.is_contiguous());
    EXPECT_EQ(*s.at<float>({0, 0, 0}), 4.0f);
    EXPECT_EQ(*s.at<float>({1, 1, 2}), 12.0f + 8.0f + 2.0f);
    const TensorView cols = v.slice(2, 1, 3);  // a column slice: strided rows
    EXPECT_EQ(*cols.at<float>({1, 2, 1}), 12.0f + 8.0f + 2.0f);
    EXPECT_TRUE(v.slice(0, 1, 2).is_contiguous());

    const TensorView sel = v.select(0, 1);  // [3, 4]
    EXPECT_EQ(sel.ndim, 2);
    EXPECT_EQ(sel.stride(0), 4);
    EXPECT_EQ(*sel.at<float>({2, 1}), 21.0f);
    const TensorView mid = v.select(1, 2);  // [2, 4] with row stride 12
    EXPECT_EQ(mid.shape_string(), "[2, 4]");
    EXPECT_EQ(mid.stride(0), 12);
    EXPECT_EQ(*mid.at<float>({1, 3}), 23.0f);

    const TensorView r = v.reshape({6, -1});
    EXPECT_EQ(r.shape_string(), "[6, 4]");
    EXPECT_EQ(r.stride(0), 4);
    EXPECT_EQ(*r.at<float>({5, 3}), 23.0f);
    EXPECT_EQ(v.reshape({24}).ndim, 1);
    EXPECT_DEATH((void)s.reshape({16}), "reshape of a non-contiguous view");
    EXPECT_DEATH((void)v.slice(1, 2, 4), "slice");
    EXPECT_DEATH((void)v.reshape({5, -1}), "reshape");

    EXPECT_EQ(dtype_bytes(DType::kBF16, 3), 6u);
    EXPECT_EQ(dtype_bytes(DType::kFP4E2M1, 3), 2u);
}

TEST(Tensor, CopyAliasesCloneCopies) {
    Tensor a = Tensor::zeros({2, 2}, DType::kF32);
    Tensor alias = a;
    Tensor copy = a.clone();
    a.ptr<float>()[3] = 7.0f;
    EXPECT_EQ(alias.ptr<float>()[3], 7.0f);
    EXPECT_EQ(copy.ptr<float>()[3], 0.0f);
    EXPECT_EQ(a.reshape({4}).ptr<float>()[3], 7.0f);

    Tensor b = Tensor::empty({3}, DType::kBF16);
    const float vals[3] = {1.5f, -2.0f, 0.25f};
    for (int i = 0; i < 3; ++i) b.ptr<uint16_t>()[i] = float_to_bf16(vals[i]);
    const Tensor f = to_f32(b);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(f.ptr<float>()[i], vals[i]);
}

// ---- ThreadPool ------------------------------------------------------------------------------------------------

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
    for (int threads : {1, 2, 3, 4}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 1001}) {
            for (int64_t grain : {1, 2, 3, 7, 100, 2000}) {
                SCOPED_TRACE(::testing::Message() << "threads=" << threads << " n=" << n << " grain=" << grain);
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::mutex mu;
                std::vector<std::pair<int64_t, int64_t>> ranges;
                pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
                    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
                    std::lock_guard<std::mutex> lock(mu);
                    ranges.emplace_back(begin, end);
                });
                for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
                for (const auto& [b, e] : ranges) {
                    EXPECT_LT(b, e);
                    if (e != n) {
                        EXPECT_GE(e - b, grain) << "range [" << b << ", " << e << ")";
                    }
                }
            }
        }
    }
    std::vector<int> hits(10, 0);
    parallel_for(nullptr, 10, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    EXPECT_EQ(hits, std::vector<int>(10, 1));
}

TEST(ThreadPool, NestedCallRunsInlineOnTheCallingThread) {
    ThreadPool pool(3);
    std::atomic<int64_t> total{0};
    std::atomic<int> not_inline{0};
    pool.parallel_for(64, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const auto outer_thread = std::this_thread::get_id();
            int calls = 0;
            // Both the member and the free function; the nested body must run once, inline, on this thread.
            pool.parallel_for(50, 1, [&](int64_t b, int64_t e) {
                ++calls;
                if (std::this_thread::get_id() != outer_thread || b != 0 || e != 50) not_inline++;
                total += e - b;
            });
            parallel_for(&pool, 50, 1, [&](int64_t b, int64_t e) {
                ++calls;
                if (std::this_thread::get_id() != outer_thread) not_inline++;
                total += e - b;
            });
            if (calls != 2) not_inline++;
        }
    });
    EXPECT_EQ(not_inline.load(), 0);
    EXPECT_EQ(total.load(), 64 * 100);
}

TEST(ThreadPool, ConcurrentCallersAreSerialised) {
    ThreadPool pool(3);
    std::atomic<int64_t> sum{0};
    auto work = [&] {
        for (int rep = 0; rep < 50; ++rep) {
            pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) sum += i;
            });
        }
    };
    std::thread t1(work), t2(work);
    t1.join();
    t2.join();
    EXPECT_EQ(sum.load(), 2 * 50 * 4950);
}

// ---- bf16 / f16 ------------------------------------------------------------------------------------------------

TEST(Dtype, Bf16RoundTripAndTiesToEven) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const auto code = static_cast<uint16_t>(h);
        const float f = bf16_to_float(code);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        ASSERT_EQ(bits, h << 16);  // bf16 is the top half of an f32
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << h;
            EXPECT_EQ(float_to_bf16(f) & 0x8000u, h & 0x8000u) << h;
        } else {
            ASSERT_EQ(float_to_bf16(f), code) << h;
        }
    }
    // Exact midpoints between consecutive finite codes round to the even code; one f32 ulp off rounds to nearest.
    for (uint32_t h = 0; h < 0x7f80; ++h) {
        for (uint32_t sign : {0u, 0x8000u}) {
            const float mid = bits_float(((h | sign) << 16) + 0x8000u);
            const auto even = static_cast<uint16_t>((h & 1u) ? (h + 1) | sign : h | sign);
            ASSERT_EQ(float_to_bf16(mid), even) << h;
            ASSERT_EQ(float_to_bf16(bits_float(((h | sign) << 16) + 0x7fffu)), h | sign) << h;
            ASSERT_EQ(float_to_bf16(bits_float(((h | sign) << 16) + 0x8001u)), (h + 1) | sign) << h;
        }
    }
}

// f16 value from the IEEE rule, independent of f16_to_float.
double f16_value(uint16_t h) {
    const int exp = (h >> 10) & 0x1f;
    const int man = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exp == 31) return man ? NAN : sign * INFINITY;
    if (exp == 0) return sign * std::ldexp(man, -24);
    return sign * std::ldexp(1024 + man, exp - 25);
}

TEST(Dtype, F16RoundTripAndTiesToEven) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const auto code = static_cast<uint16_t>(h);
        const float f = f16_to_float(code);
        const double want = f16_value(code);
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(f)) << h;
            EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f)))) << h;
            continue;
        }
        ASSERT_EQ(static_cast<double>(f), want) << h;
        ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
        ASSERT_EQ(float_to_f16(f), code) << h;
    }
    for (uint32_t h = 0; h < 0x7c00; ++h) {  // every positive finite code and its successor (0x7c00 = inf)
        for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
            const auto lo = static_cast<uint16_t>(h | sign), hi = static_cast<uint16_t>((h + 1) | sign);
            const double hi_value = h + 1 == 0x7c00 ? (sign ? -65536.0 : 65536.0) : f16_value(hi);  // would-be 2^16
            const auto mid = static_cast<float>((f16_value(lo) + hi_value) / 2);  // exact: 12 significant bits
            ASSERT_EQ(float_to_f16(mid), (h & 1u) ? hi : lo) << h;
            ASSERT_EQ(float_to_f16(std::nextafter(mid, 0.0f)), lo) << h;
            if (h + 1 < 0x7c00) {
                ASSERT_EQ(float_to_f16(std::nextafter(mid, sign ? -INFINITY : INFINITY)), hi) << h;
            }
        }
    }
    EXPECT_EQ(float_to_f16(65519.0f), 0x7bffu);
    EXPECT_EQ(float_to_f16(65520.0f), 0x7c00u);
    EXPECT_EQ(float_to_f16(-1e6f), 0xfc00u);
    EXPECT_EQ(float_to_f16(-0.0f), 0x8000u);
}

// ---- float8 e4m3fn ---------------------------------------------------------------------------------------------

// Exact value of a positive e4m3fn code 0x00..0x7e: subnormal man * 2^-9, normal (8 + man) * 2^(exp - 10).
double e4m3_value(int code) {
    const int exp = (code >> 3) & 0xf;
    const int man = code & 0x7;
    return exp == 0 ? std::ldexp(man, -9) : std::ldexp(8 + man, exp - 10);
}

// The rule: |x| > 464, +-inf and NaN -> 0x7f | sign; otherwise the nearest of the 127 finite magnitudes, ties to
// the code whose mantissa LSB is 0, with the input's sign bit (so -0 and negatives rounding to 0 give 0x80).
uint8_t e4m3_by_rule(float x) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    const double a = std::fabs(static_cast<double>(x));
    if (std::isnan(x) || a > 464.0) return sign | 0x7f;
    int best = 0;
    for (int c = 1; c <= 0x7e; ++c) {
        const double d = std::fabs(a - e4m3_value(c)), best_d = std::fabs(a - e4m3_value(best));
        if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) best = c;
    }
    return sign | static_cast<uint8_t>(best);
}

TEST(DtypeE4m3, DecodeEveryCode) {
    for (int c = 0; c < 256; ++c) {
        const float f = e4m3_to_float(static_cast<uint8_t>(c));
        if ((c & 0x7f) == 0x7f) {
            EXPECT_TRUE(std::isnan(f)) << c;
            continue;
        }
        const double want = (c & 0x80 ? -1.0 : 1.0) * e4m3_value(c & 0x7f);
        EXPECT_EQ(static_cast<double>(f), want) << c;
        EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << c;
    }
    EXPECT_EQ(e4m3_value(0x7e), 448.0);
    EXPECT_EQ(e4m3_value(0x01), std::ldexp(1.0, -9));
}

TEST(DtypeE4m3, ExhaustiveOverBf16MatchesRule) {
    int mismatches = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        const float x = bf16_to_float(static_cast<uint16_t>(h));
        const uint8_t got = float_to_e4m3(x);
        const uint8_t want = e4m3_by_rule(x);
        if (got != want && ++mismatches <= 10) {
            ADD_FAILURE() << "bf16 0x" << std::hex << h << " (" << x << "): got 0x" << int(got) << " want 0x"
                          << int(want);
        }
    }
    EXPECT_EQ(mismatches, 0);
    // The documented corner cases.
    EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
    EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);
    EXPECT_EQ(float_to_e4m3(464.00003f), 0x7f);
    EXPECT_EQ(float_to_e4m3(-464.0f), 0xfe);
    EXPECT_EQ(float_to_e4m3(-500.0f), 0xff);
    EXPECT_EQ(float_to_e4m3(INFINITY), 0x7f);
    EXPECT_EQ(float_to_e4m3(-INFINITY), 0xff);
    EXPECT_EQ(float_to_e4m3(NAN), 0x7f);
    EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
    EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
    EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -11)), 0x80);  // rounds to -0
    EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);   // tie between 0 and 2^-9 -> even (0)
    EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);   // tie between 1 and 2 (x 2^-9) -> even (2)
    EXPECT_EQ(float_to_e4m3(std::ldexp(15.0f, -10)), 0x08);  // tie 7 * 2^-9 / 2^-6 -> normal 0x08
}

TEST(DtypeE4m3, RoundTripEveryCode) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        const float f = e4m3_to_float(static_cast<uint8_t>(c));
        EXPECT_EQ(e4m3_to_float(float_to_e4m3(f)), f) << c;
        EXPECT_EQ(float_to_e4m3(f), c) << c;
    }
}

TEST(DtypeE4m3, MatchesTorchTableWhenPresent) {
    const std::string path = std::string(PENSTOCK_TEST_DATA_DIR) + "/e4m3_torch_bf16.bin";
    std::ifstream f(path, std::ios::binary);
    if (!f) GTEST_SKIP() << path << " not present";
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.size(), 65536u) << path;
    int mismatches = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint8_t got = float_to_e4m3(bf16_to_float(static_cast<uint16_t>(h)));
        const auto want = static_cast<uint8_t>(bytes[h]);
        if (got != want && ++mismatches <= 10) {
            ADD_FAILURE() << "bf16 0x" << std::hex << h << ": got 0x" << int(got) << " torch 0x" << int(want);
        }
    }
    EXPECT_EQ(mismatches, 0);
}

// ---- small formats ---------------------------------------------------------------------------------------------

TEST(Dtype, E8m0E2m1AndNames) {
    EXPECT_EQ(e8m0_to_float(127), 1.0f);
    EXPECT_EQ(e8m0_to_float(130), 8.0f);
    EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
    EXPECT_TRUE(std::isnan(e8m0_to_float(0xff)));
    const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (uint8_t n = 0; n < 16; ++n) EXPECT_EQ(e2m1_to_float(n), (n & 8) ? -e2m1[n & 7] : e2m1[n & 7]) << int(n);
    DType d;
    ASSERT_TRUE(dtype_from_safetensors("F8_E4M3", &d));
    EXPECT_EQ(d, DType::kF8E4M3);
    ASSERT_TRUE(dtype_from_safetensors("BF16", &d));
    EXPECT_EQ(d, DType::kBF16);
    EXPECT_FALSE(dtype_from_safetensors("F64", &d));
    EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
    EXPECT_EQ(dtype_bits(DType::kFP4E2M1), 4);
}

}  // namespace
}  // namespace penstock
