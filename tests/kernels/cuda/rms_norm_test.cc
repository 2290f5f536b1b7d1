// cuda::rms_norm against penstock::ref::rms_norm on seeded inputs: f32 and bf16 activations, f32 and bf16 weights,
// every variant, contiguous / strided (aligned and unaligned, so both the 16-byte and the scalar path run) / in-place
// layouts, and a shape grid with 1 row, dim 1, dims off multiples of 32 and 128, and the model dims 7168 and 12288.
// Strided outputs are poisoned first and their padding must come back untouched. The fused residual add and FP8
// quantisation are checked byte for byte against the unfused ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/ref_test_util.h"
#include "tests/kernels/tolerance.h"

namespace penstock::test {
namespace {

struct Shape2 {
    int64_t n_rows;
    int64_t dim;
};

const std::vector<Shape2> kShapes = {
    {1, 1},    {1, 7},    {3, 31},   {2, 32},   {5, 33},   {4, 100},   {3, 127},   {2, 128},   {3, 129},
    {7, 1000}, {2, 1024}, {3, 1025}, {5, 4096}, {4, 7168}, {3, 12288}, {33, 7168}, {4099, 64}, {1031, 7168},
};

enum class Layout { kContiguous, kStridedAligned, kStridedUnaligned, kInPlace };

const char* layout_name(Layout l) {
    switch (l) {
        case Layout::kContiguous:
            return "contiguous";
        case Layout::kStridedAligned:
            return "strided_aligned";
        case Layout::kStridedUnaligned:
            return "strided_unaligned";
        case Layout::kInPlace:
            return "in_place";
    }
    return "?";
}

const char* variant_name(cuda::RmsNormVariant v) {
    switch (v) {
        case cuda::RmsNormVariant::kAuto:
            return "auto";
        case cuda::RmsNormVariant::kWarpPerRow:
            return "warp_per_row";
        case cuda::RmsNormVariant::kBlockPerRow:
            return "block_per_row";
    }
    return "?";
}

// A [n_rows, dim] device view into `backing` starting `offset` elements in, rows `row_stride` elements apart.
TensorView row_view(const Tensor& backing, int64_t n_rows, int64_t dim, int64_t row_stride, int64_t offset) {
    TensorView v = backing.view();
    v.data = static_cast<char*>(backing.view().data) + offset * static_cast<int64_t>(dtype_bits(v.dtype) / 8);
    v.ndim = 2;
    v.shape = {};
    v.strides = {};
    v.shape[0] = n_rows;
    v.shape[1] = dim;
    v.strides[0] = row_stride;
    v.strides[1] = 1;
    return v;
}

struct Case {
    Shape2 shape;
    DType dtype;
    DType weight_dtype;
    Layout layout;
    cuda::RmsNormVariant variant;
    uint32_t seed;
};

class RmsNormTest : public CudaTest {
  protected:
    void run(const Case& c) {
        SCOPED_TRACE(::testing::Message()
                     << "n_rows=" << c.shape.n_rows << " dim=" << c.shape.dim << " dtype=" << dtype_name(c.dtype)
                     << " weight=" << dtype_name(c.weight_dtype) << " layout=" << layout_name(c.layout)
                     << " variant=" << variant_name(c.variant));
        PENSTOCK_SEEDED(c.seed);
        std::mt19937 rng(c.seed);
        const int64_t n_rows = c.shape.n_rows;
        const int64_t dim = c.shape.dim;
        const bool strided = c.layout == Layout::kStridedAligned || c.layout == Layout::kStridedUnaligned;
        // Aligned padding is one 16-byte pack in either dtype (8 elements); unaligned is 3 elements plus a 1-element
        // offset, which forces the scalar path.
        const int64_t pad = c.layout == Layout::kStridedAligned ? 8 : (c.layout == Layout::kStridedUnaligned ? 3 : 0);
        const int64_t offset = c.layout == Layout::kStridedUnaligned ? 1 : 0;
        const int64_t row_stride = dim + pad;
        const int64_t n_backing = n_rows * row_stride + offset;

        // Inputs: N(0, 1) scaled per row by 10^U(-2, 2); the last row is all zeros when there are more than two.
        std::vector<float> in_values = random_floats(rng, n_backing, -1.0f, 1.0f);
        std::uniform_real_distribution<float> log_scale(-2.0f, 2.0f);
        for (int64_t r = 0; r < n_rows; ++r) {
            const float scale = std::pow(10.0f, log_scale(rng));
            const bool zero = n_rows > 2 && r == n_rows - 1;
            for (int64_t i = 0; i < dim; ++i) {
                float& x = in_values[static_cast<size_t>(offset + r * row_stride + i)];
                x = zero ? 0.0f : x * scale;
            }
        }
        in_values = round_to(in_values, c.dtype);
        const std::vector<float> w_values = round_to(random_floats(rng, dim, -2.0f, 2.0f), c.weight_dtype);

        const Tensor in_host = host_tensor(in_values, c.dtype, {n_backing});
        const Tensor w_host = host_tensor(w_values, c.weight_dtype, {dim});
        const Tensor in_dev = cuda::to_device(in_host, alloc(), stream());
        const Tensor w_dev = cuda::to_device(w_host, alloc(), stream());
        Tensor out_dev = in_dev;
        if (c.layout != Layout::kInPlace) {
            out_dev = Tensor::empty({n_backing}, c.dtype, alloc());
            cuda::fill_bytes_async(out_dev, 0xff, stream());  // NaN in f32 and bf16
        }
        const TensorView in_view = row_view(in_dev, n_rows, dim, row_stride, offset);
        const TensorView out_view = row_view(out_dev, n_rows, dim, row_stride, offset);

        cuda::rms_norm({.out = out_view, .in = in_view, .weight = w_dev.view(), .eps = kEps}, c.variant, raw_stream());
        const Tensor out_host = cuda::to_host(out_dev, stream());

        // The reference on the same (rounded) values, contiguous f32.
        std::vector<float> x(static_cast<size_t>(n_rows * dim));
        std::vector<float> got(x.size());
        for (int64_t r = 0; r < n_rows; ++r) {
            for (int64_t i = 0; i < dim; ++i) {
                const int64_t b = offset + r * row_stride + i;
                x[static_cast<size_t>(r * dim + i)] = in_values[static_cast<size_t>(b)];
                got[static_cast<size_t>(r * dim + i)] = element_f32(out_host.view().data, c.dtype, b);
            }
        }
        const Tensor x_ref = Tensor::from_f32({n_rows, dim}, x);
        const Tensor w_ref = Tensor::from_f32({dim}, w_values);
        Tensor y_ref = Tensor::zeros({n_rows, dim}, DType::kF32);
        ref::rms_norm({.out = y_ref, .in = x_ref, .weight = w_ref, .eps = kEps}, /*pool=*/nullptr);
        const std::vector<float> expect(y_ref.ptr<float>(), y_ref.ptr<float>() + y_ref.numel());
        EXPECT_TRUE(all_close(got, to_double(expect), c.dtype == DType::kF32 ? kF32Tol : kBF16Tol, {n_rows, dim}));

        // Padding (strided layouts) keeps the poison.
        if (strided) {
            const size_t elem = static_cast<size_t>(dtype_bits(c.dtype) / 8);
            const auto* got_bytes = static_cast<const uint8_t*>(out_host.view().data);
            int64_t touched = 0;
            for (int64_t b = 0; b < n_backing; ++b) {
                const int64_t rel = b - offset;
                if (rel >= 0 && rel % row_stride < dim) continue;
                for (size_t k = 0; k < elem; ++k) touched += got_bytes[static_cast<size_t>(b) * elem + k] != 0xff;
            }
            EXPECT_EQ(touched, 0) << "bytes written outside the view";
        }
    }

    static constexpr float kEps = 1e-6f;
};

TEST_F(RmsNormTest, MatchesReferenceOnShapeGrid) {
    const DType kCombos[][2] = {{DType::kF32, DType::kF32}, {DType::kBF16, DType::kBF16}, {DType::kBF16, DType::kF32}};
    const Layout kLayouts[] = {Layout::kContiguous, Layout::kStridedAligned, Layout::kStridedUnaligned,
                               Layout::kInPlace};
    const cuda::RmsNormVariant kVariants[] = {cuda::RmsNormVariant::kAuto, cuda::RmsNormVariant::kWarpPerRow,
                                              cuda::RmsNormVariant::kBlockPerRow};
    uint32_t seed = 1000;
    for (const Shape2& shape : kShapes) {
        for (const auto& combo : kCombos) {
            for (Layout layout : kLayouts) {
                for (cuda::RmsNormVariant variant : kVariants) {
                    run({.shape = shape,
                         .dtype = combo[0],
                         .weight_dtype = combo[1],
                         .layout = layout,
                         .variant = variant,
                         .seed = seed++});
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
}

// The fusions of RmsNormParams (residual add, FP8 rows of the output) against the unfused ops on the GPU, byte for
// byte (SPEC §2): the sum written back to in, out, the e4m3 rows and their scales. The unfused side gets the sum
// from the host (an f32 add rounded once to the dtype, which is what the add op computes), then runs rms_norm and
// fp8_act_quant with the same variant. Dims cover whole and partial 128-column groups (200, 1000), dims off the
// 16-byte path (129: the quantiser runs after the norm), warp- and block-per-row mappings, both scale layouts, a
// padded (strided) layout and the in-place one (out = in).
TEST_F(RmsNormTest, FusedResidualAndQuantMatchTheUnfusedOps) {
    struct FusedCase {
        Shape2 shape;
        DType dtype, weight_dtype;
        bool residual, quant, transposed_scale, in_place;
        int64_t pad;  // row padding in elements (0: contiguous)
        cuda::RmsNormVariant variant;
    };
    std::vector<FusedCase> cases;
    const Shape2 kFusedShapes[] = {{1, 128},   {3, 200}, {5, 512},   {7, 1000},   {4, 1536},
                                   {33, 7168}, {3, 129}, {4099, 64}, {257, 7168}, {2, 12288}};
    for (const Shape2& shape : kFusedShapes) {
        for (const auto& dt : {std::pair{DType::kBF16, DType::kBF16}, std::pair{DType::kBF16, DType::kF32},
                               std::pair{DType::kF32, DType::kF32}}) {
            for (const auto variant :
                 {cuda::RmsNormVariant::kAuto, cuda::RmsNormVariant::kWarpPerRow, cuda::RmsNormVariant::kBlockPerRow}) {
                const int64_t i = static_cast<int64_t>(cases.size());
                cases.push_back({.shape = shape,
                                 .dtype = dt.first,
                                 .weight_dtype = dt.second,
                                 .residual = i % 5 != 4,
                                 .quant = i % 5 != 3,
                                 .transposed_scale = i % 2 == 0,
                                 .in_place = i % 7 == 1,
                                 .pad = i % 3 == 2 ? 8 : 0,
                                 .variant = variant});
            }
        }
    }
    uint32_t seed = 5000;
    int n_fused_bytes = 0;
    for (const FusedCase& c : cases) {
        SCOPED_TRACE(::testing::Message()
                     << "n_rows=" << c.shape.n_rows << " dim=" << c.shape.dim << " dtype=" << dtype_name(c.dtype)
                     << " weight=" << dtype_name(c.weight_dtype) << " residual=" << c.residual << " quant=" << c.quant
                     << " transposed_scale=" << c.transposed_scale << " in_place=" << c.in_place << " pad=" << c.pad
                     << " variant=" << variant_name(c.variant));
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const int64_t n = c.shape.n_rows, dim = c.shape.dim, ld = dim + c.pad, kb = (dim + 127) / 128;
        const std::vector<float> x = round_to(random_floats(rng, n * ld, -3.0f, 3.0f), c.dtype);
        const std::vector<float> d = round_to(random_floats(rng, n * ld, -3.0f, 3.0f), c.dtype);
        const std::vector<float> w = round_to(random_floats(rng, dim, -2.0f, 2.0f), c.weight_dtype);
        std::vector<float> sum = x;  // the padding between rows keeps x's values: neither op touches it
        if (c.residual) {
            std::vector<float> added = x;
            for (size_t i = 0; i < added.size(); ++i) added[i] = x[i] + d[i];
            added = round_to(added, c.dtype);
            for (int64_t r = 0; r < n; ++r) {
                for (int64_t i = r * ld; i < r * ld + dim; ++i)
                    sum[static_cast<size_t>(i)] = added[static_cast<size_t>(i)];
            }
        }
        const Tensor w_dev = cuda::to_device(host_tensor(w, c.weight_dtype, {dim}), alloc(), stream());
        // Two runs: [0] the fused op on x (+ d), [1] rms_norm on the host sum, then fp8_act_quant of its out.
        Tensor in[2], out[2], q[2], sc[2];
        for (int k = 0; k < 2; ++k) {
            in[k] = cuda::to_device(host_tensor(k == 0 ? x : sum, c.dtype, {n * ld}), alloc(), stream());
            out[k] = c.in_place ? in[k] : Tensor::empty({n * ld}, c.dtype, alloc());
            if (!c.in_place) cuda::fill_bytes_async(out[k], 0xff, stream());
            q[k] = Tensor::empty({n * ld}, DType::kF8E4M3, alloc());
            sc[k] = Tensor::empty({n * kb}, DType::kF32, alloc());
            cuda::fill_bytes_async(q[k], 0xee, stream());
            cuda::fill_bytes_async(sc[k], 0xee, stream());
        }
        const Tensor d_dev = cuda::to_device(host_tensor(d, c.dtype, {n * ld}), alloc(), stream());
        const auto rows = [&](const Tensor& t) { return row_view(t, n, dim, ld, 0); };
        const auto scales = [&](const Tensor& t) {
            return c.transposed_scale ? t.view().as_strided(0, {n, kb}, {1, n})
                                      : t.view().as_strided(0, {n, kb}, {kb, 1});
        };
        cuda::rms_norm({.out = rows(out[0]),
                        .in = rows(in[0]),
                        .weight = w_dev,
                        .eps = kEps,
                        .residual = c.residual ? rows(d_dev) : TensorView{},
                        .quant_out = c.quant ? rows(q[0]) : TensorView{},
                        .quant_scale = c.quant ? scales(sc[0]) : TensorView{}},
                       c.variant, raw_stream());
        cuda::rms_norm({.out = rows(out[1]), .in = rows(in[1]), .weight = w_dev, .eps = kEps}, c.variant, raw_stream());
        if (c.quant) {
            cuda::fp8_act_quant({.out = rows(q[1]), .scale = scales(sc[1]), .in = rows(out[1])}, raw_stream());
        }
        const auto same_bytes = [&](const Tensor& a, const Tensor& b, const char* what) {
            const Tensor ha = cuda::to_host(a, stream()), hb = cuda::to_host(b, stream());
            const auto nbytes = static_cast<size_t>(ha.numel() * dtype_bits(ha.dtype()) / 8);
            int64_t diff = 0;
            for (size_t i = 0; i < nbytes; ++i) {
                diff +=
                    static_cast<const uint8_t*>(ha.view().data)[i] != static_cast<const uint8_t*>(hb.view().data)[i];
            }
            EXPECT_EQ(diff, 0) << what << ": bytes differ from the unfused ops";
            n_fused_bytes += static_cast<int>(nbytes > 0);
        };
        same_bytes(in[0], in[1], "in (the residual sum)");
        same_bytes(out[0], out[1], "out");
        if (c.quant) {
            same_bytes(q[0], q[1], "quant_out");
            same_bytes(sc[0], sc[1], "quant_scale");
        }
        if (HasFatalFailure()) return;
    }
    EXPECT_GT(n_fused_bytes, 0);
}

// The fused op refuses a residual that aliases in and a quant_out of the wrong shape.
TEST_F(RmsNormTest, FusedArgumentsAreChecked) {
    const Tensor w = Tensor::empty({256}, DType::kBF16, alloc());
    const Tensor x = Tensor::empty({4, 256}, DType::kBF16, alloc());
    const Tensor y = Tensor::empty({4, 256}, DType::kBF16, alloc());
    const Tensor q = Tensor::empty({4, 128}, DType::kF8E4M3, alloc());
    const Tensor s = Tensor::empty({4, 2}, DType::kF32, alloc());
    EXPECT_DEATH(cuda::rms_norm({.out = y, .in = x, .weight = w, .residual = x}, raw_stream()), "alias");
    EXPECT_DEATH(cuda::rms_norm({.out = y, .in = x, .weight = w, .quant_out = q, .quant_scale = s}, raw_stream()),
                 "quant_out");
}

TEST_F(RmsNormTest, ZeroRowsIsANoOp) {
    const Tensor w = Tensor::empty({64}, DType::kF32, alloc());
    const Tensor x = Tensor::empty({0, 64}, DType::kF32, alloc());
    cuda::rms_norm({.out = x, .in = x, .weight = w, .eps = kEps}, raw_stream());
    stream().synchronize();
}

}  // namespace
}  // namespace penstock::test
