// cuda::{silu_mul, add, softmax, layer_norm, rope, merge_attention} against the CPU reference on seeded inputs, f32
// (kF32Tol) and bf16 (kBF16Tol; the reference runs on the same bf16-rounded inputs in f32), contiguous and strided,
// in place where the op allows it, over shapes with 1 row, odd widths and widths off the block sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

class ElementwiseOpTest : public CudaTest {};

const DType kDtypes[] = {DType::kF32, DType::kBF16};
const int64_t kRowShapes[][2] = {{1, 1}, {1, 7}, {3, 33}, {17, 128}, {5, 1000}, {2, 4097}, {130, 64}};

TEST_F(ElementwiseOpTest, SiluMul) {
    uint32_t seed = 500;
    for (const auto& sh : kRowShapes) {
        for (DType dt : kDtypes) {
            for (int strided = 0; strided < 2; ++strided) {
                SCOPED_TRACE(::testing::Message()
                             << "n=" << sh[0] << " d=" << sh[1] << " " << dtype_name(dt) << " strided=" << strided);
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const Shape shape = {sh[0], sh[1]};
                const Pair gate = random_pair(rng, shape, dt, strided, alloc(), stream(), -6.0f, 6.0f);
                const Pair up = random_pair(rng, shape, dt, strided, alloc(), stream(), -2.0f, 2.0f);
                Pair out = poisoned_pair(shape, dt, strided, alloc(), stream());
                cuda::silu_mul({.out = out.dv, .gate = gate.dv, .up = up.dv}, raw_stream());
                ref::silu_mul({.out = out.hv, .gate = gate.hv, .up = up.hv}, nullptr);
                expect_pair_close(out, out.hv, tol_for(dt), stream());
            }
        }
    }
}

TEST_F(ElementwiseOpTest, AddInPlace) {
    uint32_t seed = 600;
    for (const auto& sh : kRowShapes) {
        for (DType dt : kDtypes) {
            SCOPED_TRACE(::testing::Message() << "n=" << sh[0] << " d=" << sh[1] << " " << dtype_name(dt));
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const Shape shape = {sh[0], sh[1]};
            Pair a = random_pair(rng, shape, dt, false, alloc(), stream());
            const Pair b = random_pair(rng, shape, dt, false, alloc(), stream());
            cuda::add({.out = a.dv, .a = a.dv, .b = b.dv}, raw_stream());
            ref::add({.out = a.hv, .a = a.hv, .b = b.hv}, nullptr);
            expect_pair_close(a, a.hv, tol_for(dt), stream(), false);
        }
    }
}

// kernels/ops.cc routes Device::kCUDA to the CUDA launchers (PENSTOCK_ENABLE_CUDA follows the build).
TEST_F(ElementwiseOpTest, OpsDispatchRoutesCudaContextToTheGpu) {
    std::mt19937 rng(77);
    const Pair a = random_pair(rng, {3, 5}, DType::kBF16, false, alloc(), stream());
    const Pair b = random_pair(rng, {3, 5}, DType::kBF16, false, alloc(), stream());
    Pair out = poisoned_pair({3, 5}, DType::kBF16, false, alloc(), stream());
    kernels::add({.out = out.dv, .a = a.dv, .b = b.dv},
                 kernels::Context{.device = Device::kCUDA, .pool = nullptr, .stream = raw_stream()});
    kernels::add({.out = out.hv, .a = a.hv, .b = b.hv}, kernels::Context{});
    expect_pair_close(out, out.hv, kBF16Tol, stream());
}

TEST_F(ElementwiseOpTest, Softmax) {
    uint32_t seed = 700;
    for (const auto& sh : kRowShapes) {
        for (DType dt : kDtypes) {
            for (int strided = 0; strided < 2; ++strided) {
                SCOPED_TRACE(::testing::Message()
                             << "n=" << sh[0] << " d=" << sh[1] << " " << dtype_name(dt) << " strided=" << strided);
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const Shape shape = {sh[0], sh[1]};
                const Pair in = random_pair(rng, shape, dt, strided, alloc(), stream(), -8.0f, 8.0f);
                Pair out = poisoned_pair(shape, dt, strided, alloc(), stream());
                cuda::softmax({.out = out.dv, .in = in.dv}, raw_stream());
                ref::softmax({.out = out.hv, .in = in.hv}, nullptr);
                expect_pair_close(out, out.hv, tol_for(dt), stream());
            }
        }
    }
}

TEST_F(ElementwiseOpTest, LayerNorm) {
    uint32_t seed = 800;
    for (const auto& sh : kRowShapes) {
        for (DType dt : kDtypes) {
            for (int variant = 0; variant < 3; ++variant) {  // 0: strided + bias, 1: no bias, 2: in place + bias
                SCOPED_TRACE(::testing::Message()
                             << "n=" << sh[0] << " d=" << sh[1] << " " << dtype_name(dt) << " variant=" << variant);
                PENSTOCK_SEEDED(seed);
                std::mt19937 rng(seed++);
                const Shape shape = {sh[0], sh[1]};
                Pair in = random_pair(rng, shape, dt, variant == 0, alloc(), stream(), -3.0f, 5.0f);
                const Pair w = random_pair(rng, {sh[1]}, DType::kF32, false, alloc(), stream(), -2.0f, 2.0f);
                const Pair b = random_pair(rng, {sh[1]}, DType::kF32, false, alloc(), stream());
                Pair out = variant == 2 ? in : poisoned_pair(shape, dt, variant == 0, alloc(), stream());
                const bool bias = variant != 1;
                cuda::layer_norm(
                    {.out = out.dv, .in = in.dv, .weight = w.dv, .bias = bias ? b.dv : TensorView{}, .eps = 1e-5f},
                    raw_stream());
                ref::layer_norm(
                    {.out = out.hv, .in = in.hv, .weight = w.hv, .bias = bias ? b.hv : TensorView{}, .eps = 1e-5f},
                    nullptr);
                // Normalised values reach ~|5|/std: relative f32 error of the fp32 mean/variance path ~1e-6.
                expect_pair_close(out, out.hv, tol_for(dt), stream(), variant == 0);
            }
        }
    }
}

TEST_F(ElementwiseOpTest, Rope) {
    struct RopeCase {
        int64_t n_tokens, n_heads, rot_dim;
    };
    // bf16 rows of 16-byte chunks with rot_dim 16 .. 256 a power of two (not strided): a warp per (token, 32 heads),
    // 32 / (rot_dim / 8) heads per pass (37 heads: a partial pass); other rot_dim <= 256, f32 and strided rows: a warp
    // per (token, 8 heads) with the cos / sin held per lane (1, 2 or 4 pairs); 576: per head.
    const RopeCase kCases[] = {{1, 1, 2},   {3, 3, 64},   {17, 96, 64}, {7, 37, 64}, {5, 3, 16},
                               {5, 8, 128}, {4, 13, 192}, {3, 9, 256},  {2, 1, 576}};
    uint32_t seed = 900;
    for (const RopeCase& c : kCases) {
        for (DType dt : kDtypes) {
            for (int interleaved = 0; interleaved < 2; ++interleaved) {
                for (int strided = 0; strided < 2; ++strided) {
                    SCOPED_TRACE(::testing::Message()
                                 << "n=" << c.n_tokens << " heads=" << c.n_heads << " rot=" << c.rot_dim << " "
                                 << dtype_name(dt) << " interleaved=" << interleaved << " strided=" << strided);
                    PENSTOCK_SEEDED(seed);
                    std::mt19937 rng(seed++);
                    Pair x = random_pair(rng, {c.n_tokens, c.n_heads, c.rot_dim}, dt, strided, alloc(), stream());
                    std::vector<int32_t> pos(static_cast<size_t>(c.n_tokens));
                    std::uniform_int_distribution<int32_t> pick(0, 200000);
                    for (auto& p : pos) p = pick(rng);
                    pos[0] = 0;
                    std::vector<float> inv(static_cast<size_t>(c.rot_dim / 2));
                    for (size_t i = 0; i < inv.size(); ++i) {
                        inv[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.rot_dim));
                    }
                    const Tensor pos_dev = dev_i32(pos, alloc(), stream());
                    const Tensor pos_host = i32_tensor(pos);
                    const Pair inv_freq = make_pair_from(inv, {c.rot_dim / 2}, DType::kF32, false, alloc(), stream());
                    cuda::rope({.x = x.dv,
                                .positions = pos_dev,
                                .inv_freq = inv_freq.dv,
                                .attention_factor = 1.25f,
                                .interleaved = interleaved != 0},
                               raw_stream());
                    const kernels::RopeParams ph{.x = x.hv,
                                                 .positions = pos_host,
                                                 .inv_freq = inv_freq.hv,
                                                 .attention_factor = 1.25f,
                                                 .interleaved = interleaved != 0};
                    ref::rope(ph, nullptr);
                    // Angles up to 2e5 rad: cosf/sinf of the same f32 angle agree to a few ulp.
                    expect_pair_close(x, x.hv, tol_for(dt), stream(), false);
                }
            }
        }
    }
}

TEST_F(ElementwiseOpTest, MergeAttention) {
    uint32_t seed = 1000;
    for (int64_t d_v : {1, 64, 128, 512}) {
        for (DType dt : kDtypes) {
            SCOPED_TRACE(::testing::Message() << "d_v=" << d_v << " " << dtype_name(dt));
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const int64_t n = 9, h = 3;
            Pair out = random_pair(rng, {n, h, d_v}, dt, true, alloc(), stream());
            const Pair in_out = random_pair(rng, {n, h, d_v}, dt, false, alloc(), stream());
            std::vector<float> lse = random_floats(rng, n * h, -3.0f, 8.0f);
            std::vector<float> in_lse = random_floats(rng, n * h, -3.0f, 8.0f);
            const float inf = std::numeric_limits<float>::infinity();
            lse[0] = -inf;     // running empty
            in_lse[1] = -inf;  // partial empty
            lse[2] = in_lse[2] = -inf;
            Pair lse_p = make_pair_from(lse, {n, h}, DType::kF32, false, alloc(), stream());
            const Pair in_lse_p = make_pair_from(in_lse, {n, h}, DType::kF32, false, alloc(), stream());
            cuda::merge_attention({.out = out.dv, .lse = lse_p.dv, .in_out = in_out.dv, .in_lse = in_lse_p.dv},
                                  raw_stream());
            ref::merge_attention({.out = out.hv, .lse = lse_p.hv, .in_out = in_out.hv, .in_lse = in_lse_p.hv}, nullptr);
            expect_pair_close(out, out.hv, tol_for(dt), stream(), false);
            expect_pair_close(lse_p, lse_p.hv, kF32Tol, stream(), false);
        }
    }
}

}  // namespace
}  // namespace penstock::test
