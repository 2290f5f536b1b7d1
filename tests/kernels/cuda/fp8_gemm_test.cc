// The block-scaled FP8 ops on CUDA (kernels/cuda/fp8_gemm.h) against the CPU reference (kernels/ref/fp8.cc) on seeded
// inputs. fp8_act_quant: bit-exact bytes and scales (f32 / bf16 input, k = 1, 130 (scalar path), 132 (4-wide path),
// 200 and 7176 (ragged, 8-wide path), 128 to 7168 and 1040 (16-wide path, a ragged last group), strided rows, both
// scale layouts, zero / NaN / inf groups). fp8_gemm: every variant on m = 1, m not a multiple of the 128-row tile, k =
// 128 j and ragged k, n not a multiple of 128, the DeepSeek-V3 projection shapes; each variant must take the calls
// fp8_gemm.h promises it (cuBLASLt: bf16 out; whether it takes f32 out is printed). fp8_grouped_gemm: empty and 1-row
// groups, tile edges, 256 groups, the DeepSeek-V3 expert shapes, rows past offsets[n_groups] untouched, and under
// CUDA-graph capture (no host sync). Fp8Test covers cuBLASLt, the cp.async wgmma kernel and the CUDA-core kernel;
// Fp8TmaTest the warp-specialised TMA kernel and the default dispatch. Tolerances: bf16 out kBF16Tol, f32 out
// kFp8GemmF32 (tests/kernels/tolerance.h); inputs are scaled so outputs are O(1). Each case prints its max abs error.
// Skips without a GPU (CudaTest); the wgmma / cuBLASLt expectations need sm_90. fp8_grouped_gemm_glu
// (Fp8TmaTest.GroupedGemmGluBitExact): the fused epilogue's e4m3 bytes and scales equal the unfused GEMM + activation +
// fp8_act_quant on the GPU, for both tile widths of the GEMM.
#include "kernels/cuda/fp8_gemm.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

using kernels::kFp8Block;

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

bool is_sm90() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major == 9;
}

std::vector<float> read_any(const Tensor& dev, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(dev, stream);
    std::vector<float> v(static_cast<size_t>(h.numel()));
    for (int64_t i = 0; i < h.numel(); ++i) v[static_cast<size_t>(i)] = element_f32(h.ptr<void>(), h.dtype(), i);
    return v;
}

// One quantised activation matrix on both sides: host (what the reference reads: row-major scales) and device (scales
// row-major, or transposed [kb, rows] viewed as [rows, kb] for cuBLASLt).
struct Activations {
    Tensor a_h, scale_h, scale_t_h;
    Tensor a_d, scale_d;
    TensorView scale_dv;
};

Activations make_activations(std::mt19937& rng, int64_t rows, int64_t k, bool transposed_scale,
                             cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream) {
    Activations x;
    const int64_t kb = blocks_of(k);
    const Tensor in = Tensor::from_f32({rows, k}, random_floats(rng, rows * k, -1.0f, 1.0f));
    x.a_h = Tensor::empty({rows, k}, DType::kF8E4M3);
    x.scale_h = Tensor::empty({rows, kb}, DType::kF32);
    ref::fp8_act_quant({.out = x.a_h, .scale = x.scale_h, .in = in}, nullptr);
    x.a_d = cuda::to_device(x.a_h, alloc, stream);
    if (transposed_scale) {
        x.scale_t_h = Tensor::empty({kb, rows}, DType::kF32);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t g = 0; g < kb; ++g)
                x.scale_t_h.ptr<float>()[g * rows + r] = x.scale_h.ptr<float>()[r * kb + g];
        x.scale_d = cuda::to_device(x.scale_t_h, alloc, stream);
        x.scale_dv = x.scale_d.view().as_strided(0, {rows, kb}, {1, rows});
    } else {
        x.scale_d = cuda::to_device(x.scale_h, alloc, stream);
        x.scale_dv = x.scale_d.view();
    }
    stream.synchronize();
    return x;
}

// Weights [groups, n, k] e4m3 (values up to +-448) with 128 x 128 scales sized so that dequantised weights are
// ~ U(-1, 1) / sqrt(k): outputs are O(1).
struct Weights {
    Tensor b_h, scale_h, b_d, scale_d;
};

Weights make_weights(std::mt19937& rng, int64_t groups, int64_t n, int64_t k, cuda::CudaCachingAllocator& alloc,
                     const cuda::Stream& stream) {
    Weights w;
    const int64_t nb = blocks_of(n), kb = blocks_of(k);
    w.b_h = Tensor::empty({groups, n, k}, DType::kF8E4M3);
    std::uniform_real_distribution<float> u(-448.0f, 448.0f);
    for (int64_t i = 0; i < w.b_h.numel(); ++i) w.b_h.ptr<uint8_t>()[i] = float_to_e4m3(u(rng));
    const float base = 1.0f / (448.0f * std::sqrt(static_cast<float>(k)));
    w.scale_h = Tensor::from_f32({groups, nb, kb}, random_floats(rng, groups * nb * kb, 0.5f * base, 1.5f * base));
    w.b_d = cuda::to_device(w.b_h, alloc, stream);
    w.scale_d = cuda::to_device(w.scale_h, alloc, stream);
    stream.synchronize();
    return w;
}

// Compares rows [0, used) of a device output with the reference's f32 rows and checks that the rest kept the poison.
void expect_out(const Tensor& out_d, const Tensor& ref_h, int64_t used, const cuda::Stream& stream, const char* what) {
    const std::vector<float> got = read_any(out_d, stream);
    const std::vector<float> ref = read_f32(ref_h);
    const int64_t n = out_d.view().size(1);
    const std::vector<float> head(got.begin(), got.begin() + used * n);
    const std::vector<float> ref_head(ref.begin(), ref.begin() + used * n);
    double max_abs = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < head.size(); ++i) {
        if (std::isnan(ref_head[i]) && std::isnan(head[i])) continue;  // untouched rows (reference NaN too)
        const double d = std::fabs(static_cast<double>(head[i]) - ref_head[i]);
        max_abs = std::max(max_abs, std::isnan(d) ? INFINITY : d);
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref_head[i])));
    }
    std::printf("[fp8] %-44s max|err| %.3g (max|ref| %.3g)\n", what, max_abs, max_ref);
    const Tolerance tol = out_d.dtype() == DType::kF32 ? kFp8GemmF32 : kBF16Tol;
    EXPECT_TRUE(all_close(head, to_double(ref_head), tol, {used, n})) << what;
    int64_t written = 0;
    for (size_t i = head.size(); i < got.size(); ++i) written += !std::isnan(got[i]);
    EXPECT_EQ(written, 0) << what << ": rows past the used rows were written";
}

class Fp8Test : public CudaTest {
public:
    using CudaTest::alloc;
    using CudaTest::raw_stream;
    using CudaTest::stream;
};

TEST_F(Fp8Test, ActQuantBitExact) {
    struct Q {
        int64_t m, k;
        DType dt;
        int64_t pad;  // input row stride k + pad
        bool transposed_scale;
    };
    // Mappings (fp8_act_quant.cu): 16 columns per lane for k % 16 == 0 with 16-byte aligned rows (k 128, 7168, 2048,
    // 1040 with a last group of one 16-column chunk, 512 over 3000 rows, pad 16), 8 per lane for k % 8 == 0 (200,
    // 7176), 4 per lane (132), scalar (130, 1, and pad 3).
    const Q kCases[] = {
        {1, 128, DType::kF32, 0, false},    {37, 7168, DType::kBF16, 0, true},  {5, 200, DType::kBF16, 0, false},
        {6, 130, DType::kF32, 0, true},     {300, 576, DType::kBF16, 3, false}, {4, 1, DType::kF32, 0, false},
        {129, 2048, DType::kF32, 0, true},  {9, 132, DType::kBF16, 0, false},   {11, 1040, DType::kBF16, 0, true},
        {3000, 512, DType::kBF16, 0, true}, {7, 7176, DType::kBF16, 0, false},  {13, 1024, DType::kBF16, 16, false},
        {5, 272, DType::kF32, 4, true}};
    uint32_t seed = 900;
    for (const Q& q : kCases) {
        SCOPED_TRACE(::testing::Message() << "m=" << q.m << " k=" << q.k << " " << dtype_name(q.dt) << " pad=" << q.pad
                                          << " transposed=" << q.transposed_scale);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const int64_t kb = blocks_of(q.k);
        const int64_t ld = q.k + q.pad;
        std::vector<float> x = random_floats(rng, q.m * ld, -5.0f, 5.0f);
        if (q.m > 2) {
            std::fill(x.begin() + ld, x.begin() + ld + q.k, 0.0f);  // an all-zero row: scale 1e-4 / 448
            x[static_cast<size_t>(2 * ld)] = NAN;                   // NaN: ignored by amax, quantised to 0x7f
            if (q.m > 3) x[static_cast<size_t>(3 * ld)] = INFINITY;
        }
        const Pair in = make_pair_from(x, {q.m, ld}, q.dt, false, alloc(), stream());
        const TensorView in_h = in.hv.slice(1, 0, q.k), in_d = in.dv.slice(1, 0, q.k);
        Tensor out_h = Tensor::empty({q.m, q.k}, DType::kF8E4M3), scale_h = Tensor::empty({q.m, kb}, DType::kF32);
        ref::fp8_act_quant({.out = out_h, .scale = scale_h, .in = in_h}, nullptr);
        Tensor out_d = Tensor::empty({q.m, q.k}, DType::kF8E4M3, alloc());
        Tensor scale_d = Tensor::empty({q.m * kb}, DType::kF32, alloc());
        cuda::fill_bytes_async(out_d, 0xa5, stream());
        cuda::fill_bytes_async(scale_d, 0xff, stream());
        const TensorView scale_dv = q.transposed_scale ? scale_d.view().as_strided(0, {q.m, kb}, {1, q.m})
                                                       : scale_d.view().as_strided(0, {q.m, kb}, {kb, 1});
        cuda::fp8_act_quant({.out = out_d, .scale = scale_dv, .in = in_d}, raw_stream());
        const Tensor got = cuda::to_host(out_d, stream());
        const Tensor got_s = cuda::to_host(scale_d, stream());
        int64_t bad = 0;
        for (int64_t i = 0; i < q.m * q.k; ++i) bad += got.ptr<uint8_t>()[i] != out_h.ptr<uint8_t>()[i];
        EXPECT_EQ(bad, 0) << "e4m3 bytes differ";
        int64_t bad_s = 0;
        for (int64_t r = 0; r < q.m; ++r) {
            for (int64_t g = 0; g < kb; ++g) {
                const float e = scale_h.ptr<float>()[r * kb + g];
                const float v = got_s.ptr<float>()[q.transposed_scale ? g * q.m + r : r * kb + g];
                bad_s += std::memcmp(&e, &v, sizeof(float)) != 0;
            }
        }
        EXPECT_EQ(bad_s, 0) << "scales differ";
    }
}

// Every quotient the e4m3 cast can be asked for, through the op: rows whose first column is 448 (so s = 1 and the
// quotients are the inputs themselves) carry every e4m3 rounding tie (the midpoints of adjacent e4m3 values,
// subnormals included) and the f32 values either side of it, every bf16 value of magnitude <= 448, and 2^20 seeded
// f32 patterns in that range, both signs, NaN; as f32 and as bf16 input. Bytes and scales must equal the reference's
// (the 16-wide kernel these rows take casts with the hardware instruction: fp8.cuh e4m3x2_in_range).
TEST_F(Fp8Test, ActQuantCastsEveryTiePoint) {
    std::vector<float> vals;
    std::vector<float> grid;  // the non-negative e4m3 values, in order
    for (uint32_t b = 0; b < 0x7f; ++b) grid.push_back(e4m3_to_float(static_cast<uint8_t>(b)));
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
        const float mid = 0.5f * (grid[i] + grid[i + 1]);  // exact: adjacent e4m3 values differ in few bits
        for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), grid[i]}) {
            vals.push_back(x);
            vals.push_back(-x);
        }
    }
    for (uint32_t h = 0; h < 0x8000u; ++h) {
        const float x = bits_float(h << 16);
        if (x <= 448.0f) {
            vals.push_back(x);
            vals.push_back(-x);
        }
    }
    PENSTOCK_SEEDED(3300);
    std::mt19937 rng(3300);
    const uint32_t max_bits = float_bits(448.0f);
    for (int i = 0; i < (1 << 20); ++i) {
        const uint32_t b = rng() % (max_bits + 1);
        vals.push_back((rng() & 1) != 0 ? -bits_float(b) : bits_float(b));
    }
    vals.push_back(NAN);
    constexpr int64_t kCols = 128;
    const int64_t rows = (static_cast<int64_t>(vals.size()) + kCols - 2) / (kCols - 1);
    std::vector<float> x(static_cast<size_t>(rows * kCols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) x[static_cast<size_t>(r * kCols)] = (r % 2 == 0) ? 448.0f : -448.0f;
    for (size_t i = 0; i < vals.size(); ++i) {
        const auto r = static_cast<int64_t>(i) / (kCols - 1), c = 1 + static_cast<int64_t>(i) % (kCols - 1);
        x[static_cast<size_t>(r * kCols + c)] = vals[i];
    }
    for (const DType dt : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(dtype_name(dt));
        const Pair in = make_pair_from(x, {rows, kCols}, dt, false, alloc(), stream());
        Tensor out_h = Tensor::empty({rows, kCols}, DType::kF8E4M3), scale_h = Tensor::empty({rows, 1}, DType::kF32);
        ref::fp8_act_quant({.out = out_h, .scale = scale_h, .in = in.hv}, nullptr);
        Tensor out_d = Tensor::empty({rows, kCols}, DType::kF8E4M3, alloc());
        Tensor scale_d = Tensor::empty({rows, 1}, DType::kF32, alloc());
        cuda::fill_bytes_async(out_d, 0xa5, stream());
        cuda::fp8_act_quant({.out = out_d, .scale = scale_d, .in = in.dv}, raw_stream());
        const Tensor got = cuda::to_host(out_d, stream()), got_s = cuda::to_host(scale_d, stream());
        int64_t bad = 0, bad_s = 0;
        for (int64_t i = 0; i < rows * kCols; ++i) {
            const uint8_t g = got.ptr<uint8_t>()[i], e = out_h.ptr<uint8_t>()[i];
            if (g != e && bad++ < 5) {
                std::printf("[fp8] tie test %s: input %a -> 0x%02x, reference 0x%02x\n", dtype_name(dt).data(),
                            static_cast<double>(x[static_cast<size_t>(i)]), g, e);
            }
        }
        for (int64_t r = 0; r < rows; ++r) bad_s += got_s.ptr<float>()[r] != scale_h.ptr<float>()[r];
        std::printf("[fp8] tie test %s: %lld values, %lld bytes / %lld scales differ\n", dtype_name(dt).data(),
                    static_cast<long long>(rows * kCols), static_cast<long long>(bad), static_cast<long long>(bad_s));
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(bad_s, 0);
    }
}

using Variants = std::vector<cuda::Fp8GemmVariant>;

void run_dense_cases(Fp8Test& test, const Variants& variants) {
    const bool sm90 = is_sm90();
    struct G {
        const char* name;
        int64_t m, n, k;
        DType out;
    };
    const G kCases[] = {
        {"m=1", 1, 128, 128, DType::kBF16},
        {"m=1 kv_a 7168->576", 1, 576, 7168, DType::kBF16},
        {"m=200 q_a 7168->1536", 200, 1536, 7168, DType::kBF16},
        {"m=129 f32 out", 129, 256, 384, DType::kF32},
        {"n=200 (not 16-aligned for cuBLASLt)", 129, 200, 384, DType::kBF16},
        {"ragged k=208", 64, 264, 208, DType::kBF16},
        {"ragged k=400 m=77", 77, 256, 400, DType::kBF16},
        {"ragged k=400 m=76", 76, 256, 400, DType::kBF16},
        {"m=4", 4, 1536, 7168, DType::kBF16},
        {"m=256 f32 out k=1024", 256, 512, 1024, DType::kF32},
        {"ragged k=100 (CUDA core only)", 33, 72, 100, DType::kF32},
        {"m=300 o_proj 16384->7168", 300, 7168, 16384, DType::kBF16},
        {"m=257 down 2048->7168 f32", 257, 7168, 2048, DType::kF32},
    };
    uint32_t seed = 1000;
    for (const G& g : kCases) {
        for (const bool transposed : {true, false}) {
            SCOPED_TRACE(::testing::Message() << g.name << " m=" << g.m << " n=" << g.n << " k=" << g.k
                                              << " out=" << dtype_name(g.out) << " transposed a_scale=" << transposed);
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const Activations x = make_activations(rng, g.m, g.k, transposed, test.alloc(), test.stream());
            const Weights w = make_weights(rng, 1, g.n, g.k, test.alloc(), test.stream());
            const TensorView b_h = w.b_h.view().select(0, 0), bs_h = w.scale_h.view().select(0, 0);
            const TensorView b_d = w.b_d.view().select(0, 0), bs_d = w.scale_d.view().select(0, 0);
            Tensor ref_out = Tensor::empty({g.m, g.n}, DType::kF32);
            ref::fp8_gemm({.out = ref_out, .a = x.a_h, .a_scale = x.scale_h, .b = b_h, .b_scale = bs_h}, nullptr);
            const int64_t kb = blocks_of(g.k);
            // fp8_gemm.h's layout conditions (the weights here are contiguous [nb, kb]). cuBLASLt's heuristic must
            // then take every bf16-out call; whether it offers f32 out is printed, not asserted (the contract lets
            // the variant decline, and kAuto falls back to wgmma).
            const int64_t nb = blocks_of(g.n);
            const bool lt_layout =
                sm90 && transposed && g.m % 4 == 0 && g.k % 16 == 0 && g.n % 16 == 0 && (nb == 1 || kb % 4 == 0);
            const bool wgmma_expected = sm90 && g.k % 16 == 0 && g.n % 8 == 0;
            for (const cuda::Fp8GemmVariant v : variants) {
                if (v == cuda::Fp8GemmVariant::kCudaCore && g.m * g.n * g.k > (int64_t{1} << 34)) continue;
                Tensor out = Tensor::empty({g.m, g.n}, g.out, test.alloc());
                cuda::fill_bytes_async(out, 0xff, test.stream());
                const bool ran = cuda::fp8_gemm_variant(
                    {.out = out, .a = x.a_d, .a_scale = x.scale_dv, .b = b_d, .b_scale = bs_d}, v, test.raw_stream());
                const std::string what = std::string(g.name) + " " + cuda::fp8_gemm_variant_name(v) +
                                         (transposed ? " sT" : " sR") + (g.out == DType::kF32 ? " f32" : " bf16");
                if (v == cuda::Fp8GemmVariant::kCublasLt) {
                    if (!lt_layout || g.out == DType::kBF16) {
                        EXPECT_EQ(ran, lt_layout) << what;
                    }
                } else if (v == cuda::Fp8GemmVariant::kWgmma || v == cuda::Fp8GemmVariant::kWgmmaTma ||
                           v == cuda::Fp8GemmVariant::kWgmmaTmaWide || v == cuda::Fp8GemmVariant::kWgmmaTmaPair) {
                    EXPECT_EQ(ran, wgmma_expected) << what;
                } else if (v == cuda::Fp8GemmVariant::kWgmmaTmaN192) {
                    EXPECT_EQ(ran, wgmma_expected && g.out == DType::kBF16) << what;
                } else {
                    EXPECT_TRUE(ran) << what;
                }
                if (!ran) {
                    std::printf("[fp8] %-44s not taken\n", what.c_str());
                    continue;
                }
                expect_out(out, ref_out, g.m, test.stream(), what.c_str());
            }
        }
    }
}

struct GroupedCase {
    const char* name;
    int64_t n_rows, n, k;
    std::vector<int32_t> sizes;
    DType out = DType::kBF16;
    bool graph = false;
};

void run_grouped_cases(Fp8Test& test, const Variants& variants) {
    const bool sm90 = is_sm90();
    std::mt19937 srng(1300);
    std::vector<GroupedCase> cases = {
        {"one row", 1, 128, 128, {1}},
        {"1-row groups + empties", 40, 256, 128, {1, 0, 1, 1, 0, 0, 1}},
        {"tile edges", 400, 512, 256, {127, 128, 129, 0, 15}},
        {"n,k not tile multiples", 300, 200, 208, {17, 100, 0, 0, 183}},
        {"f32 out", 300, 264, 384, {129, 0, 150}, DType::kF32},
        {"trailing rows untouched", 120, 128, 128, {1, 33, 0, 60}},
        {"256 groups", 1600, 128, 256, random_sizes(srng, 256, 6, 0.2)},
        {"256 groups graph", 1600, 136, 128, random_sizes(srng, 256, 6, 0.2), DType::kBF16, true},
        {"DSV3 gate_up 7168->4096", 300, 4096, 7168, {0, 130, 161}},
        {"DSV3 down 2048->7168", 300, 7168, 2048, {200, 0, 1}},
        {"ragged k=100 (CUDA core)", 50, 64, 100, {20, 0, 30}, DType::kF32},
    };
    uint32_t seed = 1400;
    for (GroupedCase& c : cases) {
        int64_t used = 0;
        for (int32_t s : c.sizes) used += s;
        if (used > c.n_rows) c.n_rows = used + 3;
        SCOPED_TRACE(::testing::Message() << c.name << ": rows=" << c.n_rows << " n=" << c.n << " k=" << c.k
                                          << " groups=" << c.sizes.size() << " out=" << dtype_name(c.out));
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const auto n_groups = static_cast<int64_t>(c.sizes.size());
        std::vector<int32_t> off(1, 0);
        for (int32_t s : c.sizes) off.push_back(off.back() + s);
        const Activations x =
            make_activations(rng, c.n_rows, c.k, /*transposed_scale=*/seed % 2 == 0, test.alloc(), test.stream());
        const Weights w = make_weights(rng, n_groups, c.n, c.k, test.alloc(), test.stream());
        const Tensor off_d = dev_i32(off, test.alloc(), test.stream());
        Tensor ref_out =
            Tensor::from_f32({c.n_rows, c.n}, std::vector<float>(static_cast<size_t>(c.n_rows * c.n), NAN));
        ref::fp8_grouped_gemm({.out = ref_out,
                               .a = x.a_h,
                               .a_scale = x.scale_h,
                               .b = w.b_h,
                               .b_scale = w.scale_h,
                               .offsets = i32_tensor(off)},
                              nullptr);
        const bool wgmma_expected = sm90 && c.k % 16 == 0 && c.n % 8 == 0;
        for (const cuda::Fp8GemmVariant v : variants) {
            Tensor out = Tensor::empty({c.n_rows, c.n}, c.out, test.alloc());
            cuda::fill_bytes_async(out, 0xff, test.stream());
            const kernels::Fp8GroupedGemmParams p{
                .out = out, .a = x.a_d, .a_scale = x.scale_dv, .b = w.b_d, .b_scale = w.scale_d, .offsets = off_d};
            const std::string what = std::string(c.name) + " " + cuda::fp8_gemm_variant_name(v);
            bool ran = true;
            if (c.graph) {
                const auto s = static_cast<cudaStream_t>(test.raw_stream());
                cudaGraph_t graph = nullptr;
                cudaGraphExec_t exec = nullptr;
                ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
                ran = cuda::fp8_grouped_gemm_variant(p, v, test.raw_stream());  // must not sync while capturing
                ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
                ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
                ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
                ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
                (void)cudaGraphExecDestroy(exec);
                (void)cudaGraphDestroy(graph);
            } else {
                ran = cuda::fp8_grouped_gemm_variant(p, v, test.raw_stream());
            }
            if (v == cuda::Fp8GemmVariant::kWgmma || v == cuda::Fp8GemmVariant::kWgmmaTma ||
                v == cuda::Fp8GemmVariant::kWgmmaTmaWide || v == cuda::Fp8GemmVariant::kWgmmaTmaPair) {
                EXPECT_EQ(ran, wgmma_expected) << what;
            } else if (v == cuda::Fp8GemmVariant::kWgmmaTmaN192) {
                EXPECT_EQ(ran, wgmma_expected && c.out == DType::kBF16) << what;
            }
            if (!ran) {
                std::printf("[fp8] %-44s not taken\n", what.c_str());
                continue;
            }
            expect_out(out, ref_out, c.n_rows, test.stream(), what.c_str());
        }
    }
}

// The cuBLASLt, cp.async wgmma and CUDA-core variants.
TEST_F(Fp8Test, DenseGemmVariants) {
    run_dense_cases(*this,
                    {cuda::Fp8GemmVariant::kCublasLt, cuda::Fp8GemmVariant::kWgmma, cuda::Fp8GemmVariant::kCudaCore});
}
TEST_F(Fp8Test, GroupedGemmVariants) {
    run_grouped_cases(*this, {cuda::Fp8GemmVariant::kWgmma, cuda::Fp8GemmVariant::kCudaCore});
}
// The warp-specialised TMA kernel and the default dispatch (which takes it), in their own suite so that a run can
// tell them apart (tools/fp8_gemm_run.sh runs this suite on its own).
class Fp8TmaTest : public Fp8Test {};
TEST_F(Fp8TmaTest, DenseGemm) {
    run_dense_cases(
        *this, {cuda::Fp8GemmVariant::kWgmmaTma, cuda::Fp8GemmVariant::kWgmmaTmaWide,
                cuda::Fp8GemmVariant::kWgmmaTmaPair, cuda::Fp8GemmVariant::kWgmmaTmaN192, cuda::Fp8GemmVariant::kAuto});
}
TEST_F(Fp8TmaTest, GroupedGemm) {
    run_grouped_cases(
        *this, {cuda::Fp8GemmVariant::kWgmmaTma, cuda::Fp8GemmVariant::kWgmmaTmaWide,
                cuda::Fp8GemmVariant::kWgmmaTmaPair, cuda::Fp8GemmVariant::kWgmmaTmaN192, cuda::Fp8GemmVariant::kAuto});
}

}  // namespace
}  // namespace penstock::test

namespace penstock::test {
namespace {

// Launch after launch at GLM-5.3's expert shapes (256 groups; gate_up 6144 -> 4096, down 2048 -> 6144) with
// tail-heavy routing, where one consumer warpgroup of many tiles passes the stages on without products: every launch
// must finish, and every valid element must be K (inputs and scales 1.0, exact in f32 and bf16). Before the skipping
// warpgroup met at a named barrier on each stage, a lagging warp could miss its stage's phase and wait forever
// (tma_util.cuh, "Warps that skip"); `penstock serve` of GLM-5.3 hung so after 1-10 steps.
TEST_F(Fp8TmaTest, GroupedGemmTailHeavyRoutingFinishes) {
    if (!is_sm90()) GTEST_SKIP() << "the TMA kernel needs sm_90";
    constexpr int64_t kGroups = 256, kRows = 24576, kLaunches = 40;
    std::mt19937 rng(2611);
    PENSTOCK_SEEDED(2611);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 6144}, {6144, 2048}}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k);
        Tensor a = Tensor::empty({kRows, k}, DType::kF8E4M3, alloc());
        Tensor b = Tensor::empty({kGroups, n, k}, DType::kF8E4M3, alloc());
        cuda::fill_bytes_async(a, 0x38, stream());  // e4m3 1.0
        cuda::fill_bytes_async(b, 0x38, stream());
        const Tensor a_scale =
            cuda::to_device(Tensor::from_f32({kRows, blocks_of(k)},
                                             std::vector<float>(static_cast<size_t>(kRows * blocks_of(k)), 1.0f)),
                            alloc(), stream());
        const Tensor b_scale = cuda::to_device(
            Tensor::from_f32({kGroups, blocks_of(n), blocks_of(k)},
                             std::vector<float>(static_cast<size_t>(kGroups * blocks_of(n) * blocks_of(k)), 1.0f)),
            alloc(), stream());
        Tensor out = Tensor::empty({kRows, n}, DType::kBF16, alloc());
        int64_t checked = 0;
        for (int64_t it = 0; it < kLaunches; ++it) {
            const std::vector<int32_t> off = offsets_of(tail_heavy_sizes(rng, static_cast<int>(kGroups), kRows));
            const Tensor off_d = dev_i32(off, alloc(), stream());
            cuda::fill_bytes_async(out, 0xff, stream());  // NaN: a tile left unwritten shows
            const kernels::Fp8GroupedGemmParams p{
                .out = out, .a = a, .a_scale = a_scale, .b = b, .b_scale = b_scale, .offsets = off_d};
            // The three tile widths and the CTA pairs in turn; each is checked on at least two launches.
            constexpr cuda::Fp8GemmVariant kTurns[4] = {
                cuda::Fp8GemmVariant::kWgmmaTma, cuda::Fp8GemmVariant::kWgmmaTmaWide,
                cuda::Fp8GemmVariant::kWgmmaTmaPair, cuda::Fp8GemmVariant::kWgmmaTmaN192};
            const cuda::Fp8GemmVariant v = kTurns[it % 4];
            ASSERT_TRUE(cuda::fp8_grouped_gemm_variant(p, v, raw_stream()));
            finish_or_exit(
                raw_stream(), 30.0,
                "[fp8] launch " + std::to_string(it) + " (n=" + std::to_string(n) + " k=" + std::to_string(k) + ")");
            ASSERT_EQ(cudaGetLastError(), cudaSuccess);
            if (it % 12 < 8) continue;  // launches 8-11, 20-23, 32-35: each variant three times
            const std::vector<float> got = read_any(out, stream());
            int64_t bad = 0;
            for (int64_t i = 0; i < off.back() * n; ++i) bad += got[static_cast<size_t>(i)] != static_cast<float>(k);
            EXPECT_EQ(bad, 0) << "launch " << it << " (" << cuda::fp8_gemm_variant_name(v)
                              << "): valid elements that are not K";
            checked += off.back() * n;
        }
        std::printf("[fp8] tail-heavy routing n=%lld k=%lld: %lld launches finished, %lld elements checked\n",
                    static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(kLaunches),
                    static_cast<long long>(checked));
    }
}

// kWgmmaTmaN192 computes each element as the other TMA variants do (the same block sums, promotion products and
// order): its bf16 bytes equal kWgmmaTmaWide's at the expert GEMMs' shapes, with group tails that put the TMA-store
// epilogue and the register stores in the same tiles, 16-byte aligned out rows (TMA stores) and a row stride that is
// not (register stores only), and both ways its activation scales come: by TMA with the stages (the transposed layout
// with a row count that is a multiple of 4, a single row too) and by global loads (row-major scales, or transposed
// with a row count that is not).
TEST_F(Fp8TmaTest, GroupedGemmN192MatchesWide) {
    if (!is_sm90()) GTEST_SKIP() << "the TMA kernel needs sm_90";
    struct C {
        const char* name;
        int64_t n, k;
        int groups, mean;
        int64_t ldo_pad;    // out row stride n + ldo_pad
        bool scale_by_tma;  // transposed scales and rows % 4 == 0; else row-major (odd seeds) or rows % 4 != 0
    };
    const C kCases[] = {
        {"DSV3 down 2048->7168", 7168, 2048, 48, 300, 0, true},
        {"DSV3 gate_up 7168->4096", 4096, 7168, 32, 200, 0, true},
        {"GLM-5.3 down 2048->6144", 6144, 2048, 24, 200, 0, false},
        {"n=968 k=400, out stride n+4", 968, 400, 20, 150, 4, false},
        {"Kimi K3 down-like 2048->7168, 1 row", 7168, 2048, 1, 1, 0, true},
    };
    uint32_t seed = 2700;
    for (const C& c : kCases) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const std::vector<int32_t> sizes =
            c.mean == 1 ? std::vector<int32_t>{1} : random_sizes(rng, c.groups, c.mean, 0.1);
        const std::vector<int32_t> off = offsets_of(sizes);
        int64_t rows = off.back() + 5;  // trailing rows in no group
        if (c.scale_by_tma) rows = (rows + 3) / 4 * 4;
        if (!c.scale_by_tma && rows % 4 == 0) ++rows;
        const bool transposed = c.scale_by_tma || seed % 2 == 0;
        const Activations x = make_activations(rng, rows, c.k, transposed, alloc(), stream());
        const Weights w = make_weights(rng, static_cast<int64_t>(sizes.size()), c.n, c.k, alloc(), stream());
        const Tensor off_d = dev_i32(off, alloc(), stream());
        std::vector<uint8_t> bytes[2];
        const cuda::Fp8GemmVariant vs[2] = {cuda::Fp8GemmVariant::kWgmmaTmaWide, cuda::Fp8GemmVariant::kWgmmaTmaN192};
        for (int i = 0; i < 2; ++i) {
            Tensor buf = Tensor::empty({rows, c.n + c.ldo_pad}, DType::kBF16, alloc());
            cuda::fill_bytes_async(buf, 0xff, stream());
            const TensorView out = buf.view().slice(1, 0, c.n);
            ASSERT_TRUE(cuda::fp8_grouped_gemm_variant(
                {.out = out, .a = x.a_d, .a_scale = x.scale_dv, .b = w.b_d, .b_scale = w.scale_d, .offsets = off_d},
                vs[i], raw_stream()))
                << cuda::fp8_gemm_variant_name(vs[i]);
            const Tensor h = cuda::to_host(buf, stream());
            bytes[i].assign(h.ptr<uint8_t>(), h.ptr<uint8_t>() + h.nbytes());
        }
        int64_t diff = 0, unwritten = 0;
        const int64_t ld = c.n + c.ldo_pad;
        for (int64_t r = 0; r < off.back(); ++r) {
            for (int64_t j = 0; j < c.n; ++j) {
                const size_t at = static_cast<size_t>(2 * (r * ld + j));
                diff += std::memcmp(&bytes[0][at], &bytes[1][at], 2) != 0;
                unwritten += bytes[1][at] == 0xff && bytes[1][at + 1] == 0xff;
            }
        }
        // rows past the groups and the stride padding stay untouched
        int64_t touched = 0;
        for (size_t i = 0; i < bytes[1].size(); ++i) {
            const int64_t e = static_cast<int64_t>(i / 2);
            if (e / ld >= off.back() || e % ld >= c.n) touched += bytes[1][i] != 0xff;
        }
        std::printf(
            "[fp8] n192 vs wide %-36s rows %lld, scales %s: %lld elements differ, %lld unwritten, %lld "
            "outside touched\n",
            c.name, static_cast<long long>(off.back()),
            c.scale_by_tma ? "by TMA" : (transposed ? "loaded (sT)" : "loaded (sR)"), static_cast<long long>(diff),
            static_cast<long long>(unwritten), static_cast<long long>(touched));
        EXPECT_EQ(diff, 0);
        EXPECT_EQ(unwritten, 0);
        EXPECT_EQ(touched, 0);
    }
}

// The scales through shared memory (fp8_gemm_common.cuh scale_smem_ok: the activation scales in the transposed layout,
// by TMA with each stage; the weight scales by cp.async) give the same bytes as the loads from global memory that any
// other layout takes: the same scales once transposed ([kb, m], rows a multiple of 4) and once row-major, through the
// 256-wide kernel, its CTA pairs, kWgmmaTmaN192 and the gated GEMM (single CTA and pairs; out bytes and scales).
TEST_F(Fp8TmaTest, ScaleSmemMatchesLoads) {
    if (!is_sm90()) GTEST_SKIP() << "the TMA kernel needs sm_90";
    struct C {
        const char* name;
        int64_t n, k;
        int groups, mean;
    };
    const C kCases[] = {
        {"DSV3 down 2048->7168", 7168, 2048, 24, 260},
        {"gate_up I=1024 k=1536, tails", 2048, 1536, 12, 90},
        {"2 rows", 512, 384, 1, 2},
    };
    uint32_t seed = 2900;
    for (const C& c : kCases) {
        SCOPED_TRACE(c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const std::vector<int32_t> sizes =
            c.groups == 1 ? std::vector<int32_t>{c.mean} : random_sizes(rng, c.groups, c.mean, 0.1);
        const std::vector<int32_t> off = offsets_of(sizes);
        const int64_t used = off.back(), rows = (used + 7) / 4 * 4;
        const Activations x = make_activations(rng, rows, c.k, /*transposed_scale=*/true, alloc(), stream());
        const Tensor scale_rm = cuda::to_device(x.scale_h, alloc(), stream());  // the same scales, row-major
        const Weights w = make_weights(rng, static_cast<int64_t>(sizes.size()), c.n, c.k, alloc(), stream());
        const Tensor off_d = dev_i32(off, alloc(), stream());
        auto bytes_of = [&](const Tensor& t) {
            const Tensor h = cuda::to_host(t, stream());
            return std::vector<uint8_t>(h.ptr<uint8_t>(), h.ptr<uint8_t>() + h.nbytes());
        };
        for (const cuda::Fp8GemmVariant v : {cuda::Fp8GemmVariant::kWgmmaTmaWide, cuda::Fp8GemmVariant::kWgmmaTmaPair,
                                             cuda::Fp8GemmVariant::kWgmmaTmaN192}) {
            std::vector<uint8_t> got[2];
            for (int layout = 0; layout < 2; ++layout) {
                Tensor out = Tensor::empty({rows, c.n}, DType::kBF16, alloc());
                cuda::fill_bytes_async(out, 0xff, stream());
                const TensorView sv = layout == 0 ? x.scale_dv : scale_rm.view();
                ASSERT_TRUE(cuda::fp8_grouped_gemm_variant(
                    {.out = out, .a = x.a_d, .a_scale = sv, .b = w.b_d, .b_scale = w.scale_d, .offsets = off_d}, v,
                    raw_stream()))
                    << cuda::fp8_gemm_variant_name(v);
                got[layout] = bytes_of(out);
            }
            int64_t diff = 0, unwritten = 0;
            for (int64_t i = 0; i < used * c.n; ++i) {
                const auto at = static_cast<size_t>(2 * i);
                diff += std::memcmp(&got[0][at], &got[1][at], 2) != 0;
                unwritten += got[0][at] == 0xff && got[0][at + 1] == 0xff;
            }
            std::printf("[fp8] scales smem vs loads %-30s %-16s rows %lld: %lld elements differ, %lld unwritten\n",
                        c.name, cuda::fp8_gemm_variant_name(v), static_cast<long long>(used),
                        static_cast<long long>(diff), static_cast<long long>(unwritten));
            EXPECT_EQ(diff, 0) << cuda::fp8_gemm_variant_name(v);
            EXPECT_EQ(unwritten, 0) << cuda::fp8_gemm_variant_name(v);
        }
        if (c.n % 256 != 0) continue;
        // The gated GEMM: I = n / 2, gate rows first.
        const int64_t inter = c.n / 2, ib = blocks_of(inter);
        for (const bool pair : {false, true}) {
            std::vector<uint8_t> got[2], got_s[2];
            for (int layout = 0; layout < 2; ++layout) {
                Tensor out = Tensor::empty({rows, inter}, DType::kF8E4M3, alloc());
                Tensor scale = Tensor::empty({ib * rows}, DType::kF32, alloc());
                cuda::fill_bytes_async(out, 0xff, stream());
                cuda::fill_bytes_async(scale, 0xff, stream());
                const kernels::Fp8GroupedGluGemmParams glu{
                    .out = out,
                    .out_scale = scale.view().as_strided(0, {rows, ib}, {1, rows}),
                    .a = x.a_d,
                    .a_scale = layout == 0 ? x.scale_dv : scale_rm.view(),
                    .b = w.b_d,
                    .b_scale = w.scale_d,
                    .offsets = off_d,
                    .gate_up = TensorView::contiguous(nullptr, DType::kBF16, std::array<int64_t, 2>{rows, c.n},
                                                      Device::kCUDA, out.view().device_index),
                    .act = kernels::GluKind::kSilu};
                cuda::fp8_wgmma_tma_glu(glu, pair, raw_stream());
                got[layout] = bytes_of(out);
                got_s[layout] = bytes_of(scale);
            }
            int64_t diff = 0, diff_s = 0;
            for (int64_t i = 0; i < used * inter; ++i)
                diff += got[0][static_cast<size_t>(i)] != got[1][static_cast<size_t>(i)];
            for (int64_t b = 0; b < ib; ++b) {
                for (int64_t r = 0; r < used; ++r) {
                    const auto at = static_cast<size_t>(4 * (b * rows + r));
                    diff_s += std::memcmp(&got_s[0][at], &got_s[1][at], 4) != 0;
                }
            }
            std::printf("[fp8] scales smem vs loads %-30s glu %-10s rows %lld: %lld bytes, %lld scales differ\n",
                        c.name, pair ? "pair" : "single-CTA", static_cast<long long>(used),
                        static_cast<long long>(diff), static_cast<long long>(diff_s));
            EXPECT_EQ(diff, 0) << (pair ? "glu pair" : "glu single-CTA");
            EXPECT_EQ(diff_s, 0) << (pair ? "glu pair" : "glu single-CTA");
        }
    }
}

// fp8_grouped_gemm_glu: bit-exact with its unfused sequence (kernels/ops.h) run op by op on the GPU, with the GEMM of
// either TMA tile width; the fused cases leave gate_up untouched (so the fused epilogue did run) and give the same
// bytes with gate_up only described (null data, fp8_grouped_gemm_glu_needs_scratch false), the others (I not a
// multiple of 128, f32 activations) take the unfused path, say they need gate_up, and must equal it too.
TEST_F(Fp8TmaTest, GroupedGemmGluBitExact) {
    if (!is_sm90()) GTEST_SKIP() << "the TMA kernel needs sm_90";
    struct C {
        const char* name;
        int64_t inter, k;
        std::vector<int32_t> sizes;
        kernels::GluKind act;
        DType act_dtype;
        bool fused;
    };
    std::mt19937 srng(2700);
    const std::vector<C> cases = {
        {"silu I=256 tile edges", 256, 384, {127, 0, 129, 64, 1}, kernels::GluKind::kSilu, DType::kBF16, true},
        {"situ I=384 16 groups", 384, 256, random_sizes(srng, 16, 40, 0.2), kernels::GluKind::kSitu, DType::kBF16,
         true},
        {"silu DSV3 I=2048 k=7168", 2048, 7168, {0, 130, 161}, kernels::GluKind::kSilu, DType::kBF16, true},
        {"silu I=200 (unfused)", 200, 256, {50, 0, 77}, kernels::GluKind::kSilu, DType::kBF16, false},
        {"situ f32 (unfused)", 256, 128, {33, 95}, kernels::GluKind::kSitu, DType::kF32, false},
    };
    uint32_t seed = 2800;
    for (const C& c : cases) {
        SCOPED_TRACE(::testing::Message() << c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const std::vector<int32_t> off = offsets_of(c.sizes);
        const int64_t used = off.back(), rows = used + 5, n2 = 2 * c.inter, kb = blocks_of(c.inter);
        const auto groups = static_cast<int64_t>(c.sizes.size());
        const Activations x = make_activations(rng, rows, c.k, /*transposed_scale=*/true, alloc(), stream());
        const Weights w = make_weights(rng, groups, n2, c.k, alloc(), stream());
        const Tensor off_d = dev_i32(off, alloc(), stream());
        // The op under test, poisoned outputs; scales in fp8_quantize_rows' transposed layout.
        Tensor gate_up = Tensor::empty({rows, n2}, c.act_dtype, alloc());
        Tensor out = Tensor::empty({rows, c.inter}, DType::kF8E4M3, alloc());
        Tensor scale = Tensor::empty({kb * rows}, DType::kF32, alloc());
        for (const Tensor* t : {&gate_up, &out, &scale}) cuda::fill_bytes_async(*t, 0xff, stream());
        const TensorView scale_v = scale.view().as_strided(0, {rows, kb}, {1, rows});
        const kernels::Fp8GroupedGluGemmParams glu{.out = out,
                                                   .out_scale = scale_v,
                                                   .a = x.a_d,
                                                   .a_scale = x.scale_dv,
                                                   .b = w.b_d,
                                                   .b_scale = w.scale_d,
                                                   .offsets = off_d,
                                                   .gate_up = gate_up,
                                                   .act = c.act};
        EXPECT_EQ(cuda::fp8_grouped_gemm_glu_needs_scratch(glu, raw_stream()), !c.fused);
        cuda::fp8_grouped_gemm_glu(glu, raw_stream());
        const Tensor got = cuda::to_host(out, stream()), got_s = cuda::to_host(scale, stream());
        const Tensor got_gu = cuda::to_host(gate_up, stream());
        int64_t gu_written = 0;
        const auto gu_bytes = static_cast<int64_t>(dtype_bytes(c.act_dtype, static_cast<size_t>(used * n2)));
        for (int64_t i = 0; i < gu_bytes; ++i) gu_written += got_gu.ptr<uint8_t>()[i] != 0xff;
        // The used rows' scales (transposed layout) that differ from the op's.
        auto scale_diffs = [&](const Tensor& other) {
            int64_t n = 0;
            for (int64_t r = 0; r < used; ++r) {
                for (int64_t b = 0; b < kb; ++b) {
                    n += std::memcmp(other.ptr<float>() + b * rows + r, got_s.ptr<float>() + b * rows + r,
                                     sizeof(float)) != 0;
                }
            }
            return n;
        };
        if (c.fused) {
            EXPECT_EQ(gu_written, 0) << "the fused epilogue must leave gate_up untouched";
            {
                // Without the buffer (only its shape and dtype, as the model passes it when no scratch is needed):
                // the same bytes.
                Tensor out_n = Tensor::empty({rows, c.inter}, DType::kF8E4M3, alloc());
                Tensor scale_n = Tensor::empty({kb * rows}, DType::kF32, alloc());
                cuda::fill_bytes_async(out_n, 0xff, stream());
                cuda::fill_bytes_async(scale_n, 0xff, stream());
                kernels::Fp8GroupedGluGemmParams bare = glu;
                bare.out = out_n;
                bare.out_scale = scale_n.view().as_strided(0, {rows, kb}, {1, rows});
                bare.gate_up = TensorView::contiguous(nullptr, c.act_dtype, std::array<int64_t, 2>{rows, n2},
                                                      Device::kCUDA, gate_up.view().device_index);
                EXPECT_FALSE(cuda::fp8_grouped_gemm_glu_needs_scratch(bare, raw_stream()));
                cuda::fp8_grouped_gemm_glu(bare, raw_stream());
                const Tensor gn = cuda::to_host(out_n, stream()), gns = cuda::to_host(scale_n, stream());
                EXPECT_EQ(std::memcmp(gn.ptr<uint8_t>(), got.ptr<uint8_t>(), static_cast<size_t>(used * c.inter)), 0)
                    << "fused without gate_up: other bytes";
                EXPECT_EQ(scale_diffs(gns), 0) << "fused without gate_up: other scales";
            }
            // The CTA-pair kernel and the single-CTA one (whichever the dispatch did not take): the same bytes.
            for (const bool pair : {false, true}) {
                Tensor out_p = Tensor::empty({rows, c.inter}, DType::kF8E4M3, alloc());
                Tensor scale_p = Tensor::empty({kb * rows}, DType::kF32, alloc());
                cuda::fill_bytes_async(out_p, 0xff, stream());
                cuda::fill_bytes_async(scale_p, 0xff, stream());
                kernels::Fp8GroupedGluGemmParams forced = glu;  // the op's inputs, this kernel's outputs
                forced.out = out_p;
                forced.out_scale = scale_p.view().as_strided(0, {rows, kb}, {1, rows});
                cuda::fp8_wgmma_tma_glu(forced, pair, raw_stream());
                const Tensor gp = cuda::to_host(out_p, stream()), gps = cuda::to_host(scale_p, stream());
                int64_t diff = 0;
                for (int64_t i = 0; i < used * c.inter; ++i) diff += gp.ptr<uint8_t>()[i] != got.ptr<uint8_t>()[i];
                const int64_t diff_s = scale_diffs(gps);
                std::printf("[fp8] glu %-28s %s kernel vs the dispatch: %lld bytes, %lld scales differ\n", c.name,
                            pair ? "pair" : "single-CTA", static_cast<long long>(diff), static_cast<long long>(diff_s));
                EXPECT_EQ(diff, 0) << (pair ? "pair" : "single-CTA");
                EXPECT_EQ(diff_s, 0) << (pair ? "pair" : "single-CTA");
            }
        } else {
            EXPECT_GT(gu_written, 0) << "the unfused path writes gate_up";
        }
        for (const cuda::Fp8GemmVariant v : {cuda::Fp8GemmVariant::kWgmmaTmaWide, cuda::Fp8GemmVariant::kWgmmaTma}) {
            // The unfused sequence, op by op.
            Tensor gu2 = Tensor::empty({rows, n2}, c.act_dtype, alloc());
            Tensor out2 = Tensor::empty({rows, c.inter}, DType::kF8E4M3, alloc());
            Tensor scale2 = Tensor::empty({rows, kb}, DType::kF32, alloc());
            ASSERT_TRUE(cuda::fp8_grouped_gemm_variant(
                {.out = gu2, .a = x.a_d, .a_scale = x.scale_dv, .b = w.b_d, .b_scale = w.scale_d, .offsets = off_d}, v,
                raw_stream()));
            const TensorView g = gu2.view().slice(1, 0, c.inter), u = gu2.view().slice(1, c.inter, n2);
            if (c.act == kernels::GluKind::kSilu) {
                cuda::silu_mul({.out = g, .gate = g, .up = u}, raw_stream());
            } else {
                cuda::situ_mul({.out = g, .gate = g, .up = u, .beta = 4.0f, .linear_beta = 25.0f}, raw_stream());
            }
            cuda::fp8_act_quant({.out = out2, .scale = scale2, .in = g}, raw_stream());
            const Tensor want = cuda::to_host(out2, stream()), want_s = cuda::to_host(scale2, stream());
            int64_t bad = 0, bad_s = 0;
            for (int64_t i = 0; i < used * c.inter; ++i) bad += got.ptr<uint8_t>()[i] != want.ptr<uint8_t>()[i];
            for (int64_t r = 0; r < used; ++r) {
                for (int64_t b = 0; b < kb; ++b) {
                    const float e = want_s.ptr<float>()[r * kb + b], a = got_s.ptr<float>()[b * rows + r];
                    bad_s += std::memcmp(&e, &a, sizeof(float)) != 0;
                }
            }
            std::printf("[fp8] glu %-28s vs unfused (%s GEMM): %lld / %lld bytes, %lld / %lld scales differ\n", c.name,
                        cuda::fp8_gemm_variant_name(v), static_cast<long long>(bad),
                        static_cast<long long>(used * c.inter), static_cast<long long>(bad_s),
                        static_cast<long long>(used * kb));
            EXPECT_EQ(bad, 0) << cuda::fp8_gemm_variant_name(v);
            EXPECT_EQ(bad_s, 0) << cuda::fp8_gemm_variant_name(v);
        }
    }
}

}  // namespace
}  // namespace penstock::test
