// The KDA / SiTU ops on the GPU (kernels::* through a CUDA Context, i.e. the ops_kda.cc dispatch) against the CPU
// reference on the same seeded inputs, f32 (the reference's only dtype):
//  - short_conv: kernels 1 / 2 / 4, SiLU on and off, ragged batches (1 token; 63 / 0 / 65; 2 / 129 / 5) in permuted
//    slots with random carried-in state; out and the whole state tensor (untouched slots included) compared.
//  - short_conv's fused q/k norm bit for bit against short_conv then l2norm on the GPU (SPEC section 2), over the
//    4-wide and the scalar kernels of both ops.
//  - l2norm (4-wide heads of 4 to 128 channels, and the strided kernel), sigmoid, sigmoid_gate, situ_mul,
//  gated_rms_norm (f32 and bf16 out; 4-wide rows of 4 to 128 channels and the scalar kernel; its fused FP8
//    quantisation bit for bit the norm then fp8_act_quant), kda_gate (both forms,
//    the softplus u > 20 branch; 4-wide and scalar),
//    attn_res_mix (0 / 1 / 7 bank blocks, hidden 256 and 7168): 1 row, row counts at 63/64/65 and 127/128/129, odd
//    widths, 3 and 96 heads, strided views, in-place (out aliasing in) where the contract allows it.
//  - gated_delta_rule_recurrent and _chunk: T = 1, 63, 64, 65, 129, 200; 3 and 96 heads; k/v dims 128/128 and
//    64/48 (recurrent also 100/160); chunk sizes 64 and 16; both gate forms; ragged batches with an empty sequence
//    and permuted slots; q/k/v strided views of one fused buffer; out and the final state compared (kF32DeltaRule).
// PENSTOCK_CUDA_PERF=1 adds timing at Kimi K3 shapes (KdaPerf).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops_kda.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

using kernels::KdaGateForm;

std::string dims(const std::string& base, const std::vector<int64_t>& d) {
    std::string s = base;
    for (int64_t x : d) s.append("_").append(std::to_string(x));
    return s;
}

std::vector<int32_t> cumsum(const std::vector<int32_t>& lens) {
    std::vector<int32_t> cu(1, 0);
    for (int32_t l : lens) cu.push_back(cu.back() + l);
    return cu;
}

class KdaOpTest : public CudaTest {
protected:
    kernels::Context gpu() { return {.device = Device::kCUDA, .pool = nullptr, .stream = raw_stream(), .alloc = &alloc()}; }
    static kernels::Context cpu() { return {}; }
};

// ------------------------------------------------------------------------------------------------ short_conv
TEST_F(KdaOpTest, ShortConvMatchesReference) {
    struct ConvCase {
        std::vector<int32_t> lens;
        int64_t channels, kernel;
        bool silu, strided;
        int64_t norm_dim = 0, norm_channels = 0;  // fused per-head L2 norm of the first norm_channels
    };
    uint32_t seed = 5100;
    // The vectorised kernel takes kernel 2..4 with 16-byte rows, and fuses the norm for heads of 4 * 2^i channels;
    // the rest (kernel 1, odd widths, strides) the scalar kernel; unfused norms (heads such as 12, or after the
    // scalar kernel) run l2norm after the conv. Runs of 32 tokens cross sequence
    // starts (63 / 0 / 65, 300 / 1 / 200) and partial 128-channel chunks (196, 384 + 16-wide heads).
    for (const ConvCase& c : std::vector<ConvCase>{{{1}, 96, 4, true, false},
                                                   {{63, 0, 65}, 130, 4, true, true},
                                                   {{2, 129, 5}, 96, 4, false, false},
                                                   {{64, 1}, 33, 2, true, true},
                                                   {{17, 3}, 40, 1, true, false},
                                                   {{40}, 196, 4, true, false},
                                                   {{63, 0, 65}, 384, 4, true, false, 128, 256},
                                                   {{300, 1, 200}, 768, 4, true, false, 128, 512},
                                                   {{33, 40}, 48, 3, true, false, 16, 32},
                                                   {{1, 7}, 72, 2, true, false, 8, 48},
                                                   {{5, 70}, 96, 4, true, false, 12, 24},
                                                   {{64, 65}, 384, 4, true, true, 64, 256}}) {
        const std::vector<int32_t> cu = cumsum(c.lens);
        const auto n_seqs = static_cast<int64_t>(c.lens.size());
        const int64_t n_tokens = cu.back(), n_slots = n_seqs + 2, hist = c.kernel - 1;
        std::string name = dims("conv_C_k", {c.channels, c.kernel}) + "_lens";
        for (int32_t l : c.lens) name.append("_").append(std::to_string(l));
        name += c.silu ? "_silu" : "_linear";
        if (c.norm_dim > 0) name += "_l2norm" + std::to_string(c.norm_channels) + "x" + std::to_string(c.norm_dim);
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        std::vector<int32_t> slots(static_cast<size_t>(n_seqs));
        for (int64_t s = 0; s < n_seqs; ++s) slots[static_cast<size_t>(s)] = static_cast<int32_t>((s * 3 + 1) % n_slots);
        const Pair in = random_pair(rng, {n_tokens, c.channels}, DType::kF32, c.strided, alloc(), stream(), -2.0f, 2.0f);
        const Pair w = random_pair(rng, {c.channels, c.kernel}, DType::kF32, false, alloc(), stream());
        Pair state = random_pair(rng, {n_slots, hist, c.channels}, DType::kF32, false, alloc(), stream());
        Pair out = poisoned_pair({n_tokens, c.channels}, DType::kF32, c.strided, alloc(), stream());
        const Tensor cu_d = dev_i32(cu, alloc(), stream()), slots_d = dev_i32(slots, alloc(), stream());
        const Tensor cu_h = i32_tensor(cu), slots_h = i32_tensor(slots);
        kernels::short_conv({.out = out.dv, .in = in.dv, .weight = w.dv, .conv_state = state.dv, .cu_seqlens = cu_d,
                             .state_slots = slots_d, .silu = c.silu, .norm_channels = c.norm_channels,
                             .norm_dim = c.norm_dim},
                            gpu());
        kernels::short_conv({.out = out.hv, .in = in.hv, .weight = w.hv, .conv_state = state.hv, .cu_seqlens = cu_h,
                             .state_slots = slots_h, .silu = c.silu, .norm_channels = c.norm_channels,
                             .norm_dim = c.norm_dim},
                            cpu());
        conf_pair("short_conv", name + " out", out, out.hv, kF32Tol, stream());
        conf_close("short_conv", name + " state", read_pair(state, stream(), false).values, read_f32(state.hv), kF32Tol);
        if (HasFatalFailure()) return;
    }
}

// SPEC section 2: the fused q/k norm of short_conv is bit for bit short_conv without it followed by l2norm on the
// same heads, on the GPU: output bytes and conv state. Heads of 128, 16 and 8 channels take the 4-wide kernels of
// both ops (the norm fused); 12-channel heads the 4-wide conv, then l2norm's strided kernel; strided rows the scalar
// conv, then that l2norm.
TEST_F(KdaOpTest, ShortConvFusedNormIsShortConvThenL2Norm) {
    struct NormCase {
        std::vector<int32_t> lens;
        int64_t channels, kernel;
        bool strided;
        int64_t norm_dim, norm_channels;
    };
    uint32_t seed = 5150;
    for (const NormCase& c : std::vector<NormCase>{{{63, 0, 65}, 384, 4, false, 128, 256},
                                                   {{300, 1, 200}, 768, 4, false, 128, 512},
                                                   {{33, 40}, 48, 3, false, 16, 32},
                                                   {{1, 7}, 72, 2, false, 8, 48},
                                                   {{64, 65}, 384, 4, true, 64, 256},
                                                   {{5, 70}, 96, 4, false, 12, 24}}) {
        const std::vector<int32_t> cu = cumsum(c.lens);
        const auto n_seqs = static_cast<int64_t>(c.lens.size());
        const int64_t n_tokens = cu.back(), hist = c.kernel - 1;
        SCOPED_TRACE(dims("conv_C_k_norm", {c.channels, c.kernel, c.norm_dim, c.norm_channels}) +
                     (c.strided ? "_strided" : ""));
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        std::vector<int32_t> slots(static_cast<size_t>(n_seqs));
        for (int64_t s = 0; s < n_seqs; ++s) slots[static_cast<size_t>(s)] = static_cast<int32_t>(s);
        const Pair in =
            random_pair(rng, {n_tokens, c.channels}, DType::kF32, c.strided, alloc(), stream(), -2.0f, 2.0f);
        const Pair w = random_pair(rng, {c.channels, c.kernel}, DType::kF32, false, alloc(), stream());
        const std::vector<float> st = random_floats(rng, n_seqs * hist * c.channels, -1.0f, 1.0f);
        Pair state_f = make_pair_from(st, {n_seqs, hist, c.channels}, DType::kF32, false, alloc(), stream());
        Pair state_u = make_pair_from(st, {n_seqs, hist, c.channels}, DType::kF32, false, alloc(), stream());
        Pair out_f = poisoned_pair({n_tokens, c.channels}, DType::kF32, c.strided, alloc(), stream());
        Pair out_u = poisoned_pair({n_tokens, c.channels}, DType::kF32, c.strided, alloc(), stream());
        const Tensor cu_d = dev_i32(cu, alloc(), stream()), slots_d = dev_i32(slots, alloc(), stream());
        kernels::short_conv({.out = out_f.dv,
                             .in = in.dv,
                             .weight = w.dv,
                             .conv_state = state_f.dv,
                             .cu_seqlens = cu_d,
                             .state_slots = slots_d,
                             .silu = true,
                             .norm_channels = c.norm_channels,
                             .norm_dim = c.norm_dim},
                            gpu());
        kernels::short_conv({.out = out_u.dv,
                             .in = in.dv,
                             .weight = w.dv,
                             .conv_state = state_u.dv,
                             .cu_seqlens = cu_d,
                             .state_slots = slots_d,
                             .silu = true},
                            gpu());
        const int64_t heads = c.norm_channels / c.norm_dim;
        const TensorView hv =
            out_u.dv.as_strided(0, {n_tokens, heads, c.norm_dim}, {out_u.dv.stride(0), c.norm_dim, 1});
        kernels::l2norm({.out = hv, .in = hv, .eps = 1e-6f}, gpu());
        const std::vector<float> f = read_pair(out_f, stream(), false).values,
                                 u = read_pair(out_u, stream(), false).values;
        ASSERT_EQ(f.size(), u.size());
        int64_t bad = 0;
        for (size_t i = 0; i < f.size(); ++i) bad += std::memcmp(&f[i], &u[i], sizeof(float)) != 0;
        EXPECT_EQ(bad, 0) << "output floats differ of " << f.size();
        const std::vector<float> sf = read_pair(state_f, stream(), false).values;
        const std::vector<float> su = read_pair(state_u, stream(), false).values;
        EXPECT_EQ(0, std::memcmp(sf.data(), su.data(), sf.size() * sizeof(float))) << "conv states differ";
    }
}

// ------------------------------------------------------------------------------------------------ row / elementwise
TEST_F(KdaOpTest, L2NormMatchesReference) {
    uint32_t seed = 5200;
    for (const auto& [t, h, d, strided, in_place] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, bool, bool>>{{1, 3, 128, false, false},
                                                                        {65, 3, 128, true, false},
                                                                        {64, 96, 128, false, true},
                                                                        {129, 4, 100, true, false},
                                                                        {63, 2, 33, false, true},
                                                                        {70, 5, 16, false, false},
                                                                        {33, 7, 4, false, true},
                                                                        {9, 3, 64, false, false}}) {
        const std::string name = dims("l2norm_T_H_D", {t, h, d}) + (strided ? "_strided" : "") + (in_place ? "_inplace" : "");
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        Pair x = random_pair(rng, {t, h, d}, DType::kF32, strided, alloc(), stream(), -3.0f, 3.0f);
        Pair out = in_place ? x : poisoned_pair({t, h, d}, DType::kF32, strided, alloc(), stream());
        kernels::l2norm({.out = out.dv, .in = x.dv, .eps = 1e-6f}, gpu());
        kernels::l2norm({.out = out.hv, .in = x.hv, .eps = 1e-6f}, cpu());
        if (in_place) {
            conf_close("l2norm", name, read_pair(out, stream(), false).values, read_f32(out.hv), kF32Tol);
        } else {
            conf_pair("l2norm", name, out, out.hv, kF32Tol, stream());
        }
        if (HasFatalFailure()) return;
    }
}

struct RowShape {
    int64_t rows, dim;
    bool strided;
};

const std::vector<RowShape>& row_shapes() {
    static const std::vector<RowShape> s{{1, 1, false},    {1, 128, true},     {63, 127, false}, {64, 128, true},
                                         {65, 129, false}, {127, 64, true},    {128, 3, false},  {129, 2049, true}};
    return s;
}

TEST_F(KdaOpTest, ElementwiseMatchReference) {
    uint32_t seed = 5300;
    for (const RowShape& s : row_shapes()) {
        const std::string shape = dims("", {s.rows, s.dim}) + (s.strided ? "_strided" : "");
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Pair a = random_pair(rng, {s.rows, s.dim}, DType::kF32, s.strided, alloc(), stream(), -8.0f, 8.0f);
        const Pair b = random_pair(rng, {s.rows, s.dim}, DType::kF32, s.strided, alloc(), stream(), -40.0f, 40.0f);
        {
            Pair out = poisoned_pair({s.rows, s.dim}, DType::kF32, s.strided, alloc(), stream());
            kernels::sigmoid({.out = out.dv, .in = a.dv}, gpu());
            kernels::sigmoid({.out = out.hv, .in = a.hv}, cpu());
            conf_pair("sigmoid", "rows_dim" + shape, out, out.hv, kF32Tol, stream());
        }
        {
            Pair out = poisoned_pair({s.rows, s.dim}, DType::kF32, s.strided, alloc(), stream());
            kernels::sigmoid_gate({.out = out.dv, .in = a.dv, .gate = b.dv}, gpu());
            kernels::sigmoid_gate({.out = out.hv, .in = a.hv, .gate = b.hv}, cpu());
            conf_pair("sigmoid_gate", "rows_dim" + shape, out, out.hv, kF32Tol, stream());
        }
        {
            Pair out = poisoned_pair({s.rows, s.dim}, DType::kF32, s.strided, alloc(), stream());
            kernels::situ_mul({.out = out.dv, .gate = a.dv, .up = b.dv, .beta = 4.0f, .linear_beta = 25.0f}, gpu());
            kernels::situ_mul({.out = out.hv, .gate = a.hv, .up = b.hv, .beta = 4.0f, .linear_beta = 25.0f}, cpu());
            conf_pair("situ_mul", "rows_dim" + shape, out, out.hv, kF32Tol, stream());
        }
        {
            const Pair w = random_pair(rng, {s.dim}, DType::kF32, false, alloc(), stream(), 0.5f, 1.5f);
            Pair out = poisoned_pair({s.rows, s.dim}, DType::kF32, s.strided, alloc(), stream());
            kernels::gated_rms_norm({.out = out.dv, .in = a.dv, .gate = b.dv, .weight = w.dv, .eps = 1e-5f}, gpu());
            kernels::gated_rms_norm({.out = out.hv, .in = a.hv, .gate = b.hv, .weight = w.hv, .eps = 1e-5f}, cpu());
            conf_pair("gated_rms_norm", "rows_dim" + shape, out, out.hv, kF32Tol, stream());
            // bf16 out (the KDA o_proj input): the f32 result rounded once.
            Pair out16 = poisoned_pair({s.rows, s.dim}, DType::kBF16, s.strided, alloc(), stream());
            kernels::gated_rms_norm({.out = out16.dv, .in = a.dv, .gate = b.dv, .weight = w.dv, .eps = 1e-5f}, gpu());
            kernels::gated_rms_norm({.out = out16.hv, .in = a.hv, .gate = b.hv, .weight = w.hv, .eps = 1e-5f}, cpu());
            conf_pair("gated_rms_norm", "rows_dim" + shape + "_bf16_out", out16, out16.hv, kBF16Tol, stream());
        }
        if (HasFatalFailure()) return;
    }
    // In place: sigmoid_gate with out = gate, situ_mul with out = up, gated_rms_norm with out = in.
    std::mt19937 rng(seed);
    Pair a = random_pair(rng, {65, 129}, DType::kF32, true, alloc(), stream(), -4.0f, 4.0f);
    Pair b = random_pair(rng, {65, 129}, DType::kF32, true, alloc(), stream(), -4.0f, 4.0f);
    kernels::sigmoid_gate({.out = b.dv, .in = a.dv, .gate = b.dv}, gpu());
    kernels::sigmoid_gate({.out = b.hv, .in = a.hv, .gate = b.hv}, cpu());
    conf_close("sigmoid_gate", "65_129_inplace_gate", read_pair(b, stream(), false).values, read_f32(b.hv), kF32Tol);
    kernels::situ_mul({.out = b.dv, .gate = a.dv, .up = b.dv}, gpu());
    kernels::situ_mul({.out = b.hv, .gate = a.hv, .up = b.hv}, cpu());
    conf_close("situ_mul", "65_129_inplace_up", read_pair(b, stream(), false).values, read_f32(b.hv), kF32Tol);
}

// gated_rms_norm's fused FP8 quantisation (quant_out: a token's heads as one row, KDA's o_proj input) is bit for bit
// the norm followed by fp8_act_quant of its out on the GPU (SPEC section 2): fused in the 4-wide kernel for heads of
// 128 channels, the quantiser after the norm otherwise (heads of 64 and 48: groups straddle heads; a strided out with
// one head per row), bf16 and f32 out, row-major and column-major (the FP8 GEMMs') scales; with out_scratch (the
// FP8 rows only) the same bytes and scales.
TEST_F(KdaOpTest, GatedRmsNormFusedQuantIsNormThenQuant) {
    struct QuantCase {
        int64_t tokens, heads, dim;
        DType out_dtype;
        bool transposed_scale, strided;
        bool out_scratch = false;
    };
    uint32_t seed = 5400;
    for (const QuantCase& c : std::vector<QuantCase>{{65, 12, 128, DType::kBF16, true, false},
                                                     {33, 3, 128, DType::kF32, false, false},
                                                     {1, 96, 128, DType::kBF16, true, false},
                                                     {17, 4, 64, DType::kBF16, true, false},
                                                     {5, 7, 48, DType::kBF16, false, false},
                                                     {9, 1, 128, DType::kBF16, true, true},
                                                     {65, 12, 128, DType::kBF16, true, false, true},
                                                     {17, 4, 64, DType::kBF16, true, false, true}}) {
        const int64_t rows = c.tokens * c.heads, width = c.heads * c.dim, kb = (width + 127) / 128;
        SCOPED_TRACE(dims("tokens_heads_dim", {c.tokens, c.heads, c.dim}) + "_" + std::string(dtype_name(c.out_dtype)) +
                     (c.transposed_scale ? "_colmajor_scale" : "") + (c.strided ? "_strided" : "") +
                     (c.out_scratch ? "_out_scratch" : ""));
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Pair x = random_pair(rng, {rows, c.dim}, DType::kF32, false, alloc(), stream(), -4.0f, 4.0f);
        const Pair g = random_pair(rng, {rows, c.dim}, DType::kF32, false, alloc(), stream(), -6.0f, 6.0f);
        const Pair w = random_pair(rng, {c.dim}, DType::kF32, false, alloc(), stream(), 0.5f, 1.5f);
        Pair out[2] = {poisoned_pair({rows, c.dim}, c.out_dtype, c.strided, alloc(), stream()),
                       poisoned_pair({rows, c.dim}, c.out_dtype, c.strided, alloc(), stream())};
        Tensor q[2], sc[2];
        for (int k = 0; k < 2; ++k) {
            q[k] = Tensor::empty({c.tokens, width}, DType::kF8E4M3, alloc());
            sc[k] = Tensor::empty({c.tokens * kb}, DType::kF32, alloc());
            cuda::fill_bytes_async(q[k], 0xee, stream());
            cuda::fill_bytes_async(sc[k], 0xee, stream());
        }
        const auto scales = [&](const Tensor& t) {
            return c.transposed_scale ? t.view().as_strided(0, {c.tokens, kb}, {1, c.tokens})
                                      : t.view().as_strided(0, {c.tokens, kb}, {kb, 1});
        };
        kernels::gated_rms_norm({.out = out[0].dv,
                                 .in = x.dv,
                                 .gate = g.dv,
                                 .weight = w.dv,
                                 .eps = 1e-5f,
                                 .quant_out = q[0],
                                 .quant_scale = scales(sc[0]),
                                 .quant_heads = c.heads,
                                 .out_scratch = c.out_scratch},
                                gpu());
        kernels::gated_rms_norm({.out = out[1].dv, .in = x.dv, .gate = g.dv, .weight = w.dv, .eps = 1e-5f}, gpu());
        kernels::fp8_act_quant({.out = q[1],
                                .scale = scales(sc[1]),
                                .in = c.heads == 1 ? out[1].dv : out[1].dv.reshape({c.tokens, width})},
                               gpu());
        const auto same_bytes = [&](const TensorView& a, const TensorView& b, const char* what) {
            const Tensor ha = cuda::to_host(a, stream()), hb = cuda::to_host(b, stream());
            const auto nbytes = static_cast<size_t>(ha.numel() * dtype_bits(ha.dtype()) / 8);
            ASSERT_EQ(nbytes, static_cast<size_t>(hb.numel() * dtype_bits(hb.dtype()) / 8));
            int64_t diff = 0;
            for (size_t i = 0; i < nbytes; ++i) {
                diff +=
                    static_cast<const uint8_t*>(ha.view().data)[i] != static_cast<const uint8_t*>(hb.view().data)[i];
            }
            EXPECT_EQ(diff, 0) << what << ": bytes differ from the unfused ops (of " << nbytes << ")";
        };
        if (!c.out_scratch) same_bytes(out[0].dev, out[1].dev, "out");
        same_bytes(q[0], q[1], "quant_out");
        same_bytes(sc[0], sc[1], "quant_scale");
        // Not all zero or poison: the scales are the groups' amax / 448 of a non-trivial output.
        const Tensor hs = cuda::to_host(sc[0], stream());
        EXPECT_GT(hs.view().ptr<const float>()[0], 0.0f);
        EXPECT_LT(hs.view().ptr<const float>()[0], 1.0f);
        if (HasFatalFailure()) return;
    }
}

TEST_F(KdaOpTest, KdaGateMatchesReference) {
    uint32_t seed = 5400;
    for (const KdaGateForm form : {KdaGateForm::kSoftplus, KdaGateForm::kLowerBound}) {
        for (const auto& [t, h, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                 {1, 3, 128}, {65, 3, 128}, {64, 96, 128}, {129, 4, 64}, {7, 3, 5}}) {
            const std::string name =
                dims(form == KdaGateForm::kSoftplus ? "softplus_T_H_D" : "lower_bound_T_H_D", {t, h, d});
            SCOPED_TRACE(name);
            PENSTOCK_SEEDED(seed);
            std::mt19937 rng(seed++);
            const Pair f = random_pair(rng, {t, h, d}, DType::kF32, false, alloc(), stream(), -30.0f, 30.0f);
            const Pair a_log = random_pair(rng, {h}, DType::kF32, false, alloc(), stream(), -1.0f, 1.5f);
            const Pair dt = random_pair(rng, {h * d}, DType::kF32, false, alloc(), stream(), -2.0f, 1.0f);
            Pair out = poisoned_pair({t, h, d}, DType::kF32, false, alloc(), stream());
            kernels::kda_gate({.out = out.dv, .f = f.dv, .a_log = a_log.dv, .dt_bias = dt.dv, .form = form,
                               .lower_bound = -5.0f},
                              gpu());
            kernels::kda_gate({.out = out.hv, .f = f.hv, .a_log = a_log.hv, .dt_bias = dt.hv, .form = form,
                               .lower_bound = -5.0f},
                              cpu());
            conf_pair("kda_gate", name, out, out.hv, kF32Tol, stream());
            if (HasFatalFailure()) return;
        }
    }
}

TEST_F(KdaOpTest, AttnResMixMatchesReference) {
    uint32_t seed = 5500;
    for (const auto& [t, blocks, hidden, strided, in_place] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, bool, bool>>{{1, 0, 256, true, false},
                                                                       {17, 1, 256, true, false},
                                                                       {65, 7, 256, true, true},
                                                                       {3, 7, 7168, false, false},
                                                                       {64, 3, 1000, false, true}}) {
        const std::string name = dims("T_blocks_hidden", {t, blocks, hidden}) + (strided ? "_strided" : "") +
                                 (in_place ? "_inplace" : "");
        SCOPED_TRACE(name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed++);
        const Pair bank = random_pair(rng, {t, blocks, hidden}, DType::kF32, strided, alloc(), stream(), -2.0f, 2.0f);
        Pair partial = random_pair(rng, {t, hidden}, DType::kF32, strided, alloc(), stream(), -2.0f, 2.0f);
        const Pair query = random_pair(rng, {hidden}, DType::kF32, false, alloc(), stream(), -0.1f, 0.1f);
        const Pair w = random_pair(rng, {hidden}, DType::kF32, false, alloc(), stream(), 0.5f, 1.5f);
        Pair out = in_place ? partial : poisoned_pair({t, hidden}, DType::kF32, strided, alloc(), stream());
        kernels::attn_res_mix({.out = out.dv, .bank = bank.dv, .partial = partial.dv, .query = query.dv,
                               .norm_weight = w.dv, .eps = 1e-5f},
                              gpu());
        kernels::attn_res_mix({.out = out.hv, .bank = bank.hv, .partial = partial.hv, .query = query.hv,
                               .norm_weight = w.hv, .eps = 1e-5f},
                              cpu());
        if (in_place) {
            conf_close("attn_res_mix", name, read_pair(out, stream(), false).values, read_f32(out.hv), kF32Tol);
        } else {
            conf_pair("attn_res_mix", name, out, out.hv, kF32Tol, stream());
        }
        if (HasFatalFailure()) return;
    }
}

// ------------------------------------------------------------------------------------------------ delta rule
struct DeltaCase {
    std::vector<int32_t> lens;
    int64_t n_heads, k_dim, v_dim, chunk;
    KdaGateForm form;
    bool chunked;
    kernels::DeltaRulePrecision precision = kernels::DeltaRulePrecision::kF32;
    float f_hi = 3.0f;  // gate pre-activations uniform in [-f_hi, f_hi]: larger values decay faster
};

// Inputs as the model makes them (and as tests/kernels/ref_kda_test.cc does): q, k, v strided views of one fused
// [T, H * (2K + V)] buffer, q and k l2-normalised, g from the gate, beta in (0.05, 1). Built on the host with the
// reference ops, then copied to the device (both sides see identical inputs).
void run_delta(KdaOpTest* self, const DeltaCase& c, uint32_t seed, cuda::CudaCachingAllocator& alloc,
               const cuda::Stream& stream, const kernels::Context& gpu) {
    const std::vector<int32_t> cu = cumsum(c.lens);
    const auto n_seqs = static_cast<int64_t>(c.lens.size());
    const int64_t T = cu.back(), H = c.n_heads, K = c.k_dim, V = c.v_dim, n_slots = n_seqs + 1;
    std::string name = std::string(c.chunked ? "chunk" : "recurrent") + dims("_H_K_V", {H, K, V});
    if (c.chunked) name.append("_C").append(std::to_string(c.chunk));
    if (c.precision == kernels::DeltaRulePrecision::kTensorCore) name += "_tc";
    if (c.precision == kernels::DeltaRulePrecision::kTensorCoreSplit) name += "_split";
    if (c.f_hi != 3.0f) name.append("_fhi").append(std::to_string(static_cast<int>(c.f_hi)));
    name += c.form == KdaGateForm::kSoftplus ? "_softplus_lens" : "_lowerbound_lens";
    if (c.lens.size() <= 8) {
        for (int32_t l : c.lens) name.append("_").append(std::to_string(l));
    } else {  // long batches: the count and the total
        name.append("_").append(std::to_string(c.lens.size())).append("seqs_").append(std::to_string(cu.back()));
    }
    SCOPED_TRACE(name);
    PENSTOCK_SEEDED(seed);
    std::mt19937 rng(seed);
    const kernels::Context cpu{};
    const int64_t width = H * (2 * K + V);
    Tensor qkv = Tensor::from_f32({T, width}, random_floats(rng, T * width));
    const TensorView q = qkv.view().as_strided(0, {T, H, K}, {width, K, 1});
    const TensorView k = qkv.view().as_strided(H * K, {T, H, K}, {width, K, 1});
    const TensorView v = qkv.view().as_strided(2 * H * K, {T, H, V}, {width, V, 1});
    if (T > 0) {
        kernels::l2norm({.out = q, .in = q}, cpu);
        kernels::l2norm({.out = k, .in = k}, cpu);
    }
    Tensor f = Tensor::from_f32({T, H, K}, random_floats(rng, T * H * K, -c.f_hi, c.f_hi));
    Tensor a_log = Tensor::from_f32({H}, random_floats(rng, H, -1.0f, 1.5f));
    Tensor dt = Tensor::from_f32({H * K}, random_floats(rng, H * K, -2, 1));
    Tensor g = Tensor::empty({T, H, K}, DType::kF32);
    kernels::kda_gate({.out = g, .f = f, .a_log = a_log, .dt_bias = dt, .form = c.form, .lower_bound = -5.0f}, cpu);
    Tensor beta = Tensor::from_f32({T, H}, random_floats(rng, T * H, 0.05f, 1.0f));
    Tensor state_h = Tensor::from_f32({n_slots, H, K, V}, random_floats(rng, n_slots * H * K * V, -0.5f, 0.5f));
    std::vector<int32_t> slots(static_cast<size_t>(n_seqs));
    for (int64_t s = 0; s < n_seqs; ++s) slots[static_cast<size_t>(s)] = static_cast<int32_t>(n_seqs - 1 - s);

    const Tensor qkv_d = cuda::to_device(qkv, alloc, stream);
    const Tensor g_d = cuda::to_device(g, alloc, stream), beta_d = cuda::to_device(beta, alloc, stream);
    const Tensor state_d = cuda::to_device(state_h, alloc, stream);
    const Tensor cu_d = dev_i32(cu, alloc, stream), slots_d = dev_i32(slots, alloc, stream);
    Tensor out_d = Tensor::empty({T, H, V}, DType::kF32, alloc);
    if (T > 0) cuda::fill_bytes_async(out_d.view(), 0xff, stream);
    Tensor out_h = Tensor::zeros({T, H, V}, DType::kF32);
    const Tensor cu_h = i32_tensor(cu), slots_h = i32_tensor(slots);
    const float scale = 1.0f / std::sqrt(static_cast<float>(K));
    const kernels::GatedDeltaRuleParams pd{.out = out_d,
                                           .q = qkv_d.view().as_strided(0, {T, H, K}, {width, K, 1}),
                                           .k = qkv_d.view().as_strided(H * K, {T, H, K}, {width, K, 1}),
                                           .v = qkv_d.view().as_strided(2 * H * K, {T, H, V}, {width, V, 1}),
                                           .g = g_d,
                                           .beta = beta_d,
                                           .state = state_d,
                                           .cu_seqlens = cu_d,
                                           .state_slots = slots_d,
                                           .scale = scale,
                                           .chunk_size = c.chunk,
                                           .precision = c.precision};
    kernels::GatedDeltaRuleParams ph = pd;
    ph.out = out_h;
    ph.q = q;
    ph.k = k;
    ph.v = v;
    ph.g = g;
    ph.beta = beta;
    ph.state = state_h;
    ph.cu_seqlens = cu_h;
    ph.state_slots = slots_h;
    if (c.chunked) {
        kernels::gated_delta_rule_chunk(pd, gpu);
        kernels::gated_delta_rule_chunk(ph, cpu);
    } else {
        kernels::gated_delta_rule_recurrent(pd, gpu);
        kernels::gated_delta_rule_recurrent(ph, cpu);
    }
    const char* op = c.chunked ? "gated_delta_rule_chunk" : "gated_delta_rule_recurrent";
    const Tolerance tol = c.precision == kernels::DeltaRulePrecision::kF32 ? kF32DeltaRule
                          : c.precision == kernels::DeltaRulePrecision::kTensorCore ? kTf32DeltaRule
                                                                                     : kBf16DeltaRule;
    const Tensor out_g = cuda::to_host(out_d, stream);
    conf_close(op, name + " out", read_f32(out_g.view()), read_f32(out_h.view()), tol, {T, H, V});
    const Tensor st_g = cuda::to_host(state_d, stream);
    conf_close(op, name + " state", read_f32(st_g.view()), read_f32(state_h.view()), tol);

    (void)self;
}

std::vector<DeltaCase> delta_cases(bool chunked) {
    std::vector<DeltaCase> c{
        {{1}, 3, 128, 128, 64, KdaGateForm::kSoftplus, chunked},
        {{63}, 3, 128, 128, 64, KdaGateForm::kLowerBound, chunked},
        {{64}, 3, 128, 128, 64, KdaGateForm::kSoftplus, chunked},
        {{65}, 3, 128, 128, 64, KdaGateForm::kLowerBound, chunked},
        {{129}, 2, 128, 128, 64, KdaGateForm::kSoftplus, chunked},
        {{5, 0, 65, 130}, 3, 128, 128, 64, KdaGateForm::kLowerBound, chunked},
        {{33, 200}, 2, 64, 48, 16, KdaGateForm::kSoftplus, chunked},
        {{70}, 96, 128, 128, 64, KdaGateForm::kLowerBound, chunked},
    };
    if (!chunked) c.push_back({{40, 7}, 3, 100, 160, 64, KdaGateForm::kSoftplus, false});
    return c;
}

TEST_F(KdaOpTest, DeltaRuleRecurrentMatchesReference) {
    uint32_t seed = 5600;
    for (const DeltaCase& c : delta_cases(false)) {
        run_delta(this, c, seed++, alloc(), stream(), gpu());
        if (HasFatalFailure()) return;
    }
}

TEST_F(KdaOpTest, DeltaRuleChunkMatchesReference) {
    uint32_t seed = 5700;
    for (const DeltaCase& c : delta_cases(true)) {
        run_delta(this, c, seed++, alloc(), stream(), gpu());
        if (HasFatalFailure()) return;
    }
}

// The tensor-core chunk kernels (precision kTensorCore, kTensorCoreSplit): the shapes above (chunk 16 falls back to
// the fp32 kernel), plus k/v dims that are not multiples of 8 (and 30 / 50: not even of 4), a 1000-token sequence (16
// chunks of state carried across), many short sequences, and fast decays (f up to 8: every diagonal block exceeds the
// factored form's span bound and is computed exactly; the lower-bound gate, g >= -5, never does).
std::vector<DeltaCase> tensor_core_delta_cases() {
    std::vector<DeltaCase> cases = delta_cases(true);
    cases.push_back({{1000}, 2, 128, 128, 64, KdaGateForm::kLowerBound, true});
    cases.push_back({{1, 2, 3, 64, 127, 17, 0, 300}, 3, 100, 72, 64, KdaGateForm::kSoftplus, true});
    cases.push_back({{77}, 5, 64, 128, 64, KdaGateForm::kLowerBound, true});
    // dims that are not multiples of 4: rows not 16-byte aligned, so the kernels stage with plain loads (kVec false)
    cases.push_back({{90, 3}, 2, 30, 50, 64, KdaGateForm::kLowerBound, true});
    cases.push_back({{150}, 3, 128, 128, 64, KdaGateForm::kSoftplus, true, {}, 8.0f});
    cases.push_back({{150}, 3, 128, 128, 64, KdaGateForm::kLowerBound, true, {}, 8.0f});
    return cases;
}

TEST_F(KdaOpTest, DeltaRuleChunkTensorCoreMatchesReference) {
    uint32_t seed = 5750;
    for (DeltaCase& c : tensor_core_delta_cases()) {
        c.precision = kernels::DeltaRulePrecision::kTensorCore;
        run_delta(this, c, seed++, alloc(), stream(), gpu());
        if (HasFatalFailure()) return;
    }
}

// The split form (precision kTensorCoreSplit: the chunk-parallel products of every chunk in one launch, kept as bf16,
// then the state pass on bf16 tensor cores), on the same cases plus 70 sequences of many residues mod 64 and 1100
// short sequences (two tiles of the chunk-offset scan; deep binary searches from chunk to sequence).
TEST_F(KdaOpTest, DeltaRuleChunkSplitMatchesReference) {
    uint32_t seed = 5770;
    std::vector<DeltaCase> cases = tensor_core_delta_cases();
    std::vector<int32_t> many;
    for (int i = 0; i < 70; ++i) many.push_back((i * 37) % 131);
    cases.push_back({many, 2, 128, 128, 64, KdaGateForm::kLowerBound, true});
    std::vector<int32_t> lots(1100, 3);
    lots[17] = 0;
    lots[1099] = 200;
    cases.push_back({lots, 1, 64, 64, 64, KdaGateForm::kSoftplus, true});
    for (DeltaCase& c : cases) {
        c.precision = kernels::DeltaRulePrecision::kTensorCoreSplit;
        run_delta(this, c, seed++, alloc(), stream(), gpu());
        if (HasFatalFailure()) return;
    }
}

// ------------------------------------------------------------------------------------------------ perf
// Kimi K3 shapes (96 KDA heads x 128, short conv over q/k/v = 3 x 12288 channels, hidden 7168), one 8192-token
// sequence; CUDA events, median of 10 after 3 warm-ups (delta rule: 3 after 1).
TEST_F(KdaOpTest, Perf) {
    if (!perf_enabled()) GTEST_SKIP() << "set PENSTOCK_CUDA_PERF=1";
    std::mt19937 rng(5800);
    const kernels::Context ctx = gpu();
    const int64_t T = 8192, H = 96, D = 128;
    const std::vector<int32_t> cu{0, static_cast<int32_t>(T)}, slot{0};
    const Tensor cu_d = dev_i32(cu, alloc(), stream()), slot_d = dev_i32(slot, alloc(), stream());
    auto report_gbs = [](const char* op, double bytes, double us) {
        std::printf("[perf] %s | %.0f GB/s\n", op, bytes / us * 1e-3);
    };
    {
        const int64_t C = 3 * H * D;
        const Pair in = random_pair(rng, {T, C}, DType::kF32, false, alloc(), stream());
        const Pair w = random_pair(rng, {C, 4}, DType::kF32, false, alloc(), stream());
        Tensor st = Tensor::empty({1, 3, C}, DType::kF32, alloc());
        cuda::fill_bytes_async(st.view(), 0, stream());
        Tensor out = Tensor::empty({T, C}, DType::kF32, alloc());
        const double us = perf_time("short_conv", "T 8192 x 36864 channels, kernel 4, SiLU", stream(), [&] {
            kernels::short_conv({.out = out, .in = in.dv, .weight = w.dv, .conv_state = st, .cu_seqlens = cu_d,
                                 .state_slots = slot_d, .silu = true},
                                ctx);
        });
        report_gbs("short_conv", 8.0 * T * C, us);
        const double us_norm = perf_time("short_conv", "T 8192 x 36864 channels, kernel 4, SiLU, q/k L2 norm fused",
                                         stream(), [&] {
            kernels::short_conv({.out = out, .in = in.dv, .weight = w.dv, .conv_state = st, .cu_seqlens = cu_d,
                                 .state_slots = slot_d, .silu = true, .norm_channels = 2 * H * D, .norm_dim = D},
                                ctx);
        });
        report_gbs("short_conv + l2norm", 8.0 * T * C, us_norm);
    }
    const Pair x = random_pair(rng, {T, H, D}, DType::kF32, false, alloc(), stream());
    const Pair y = random_pair(rng, {T, H, D}, DType::kF32, false, alloc(), stream());
    Tensor o = Tensor::empty({T, H, D}, DType::kF32, alloc());
    const double n = static_cast<double>(T * H * D);
    const TensorView x2 = x.dv.reshape({T * H, D}), y2 = y.dv.reshape({T * H, D}), o2 = o.view().reshape({T * H, D});
    report_gbs("l2norm", 8 * n, perf_time("l2norm", "8192 x 96 x 128", stream(), [&] {
                   kernels::l2norm({.out = o, .in = x.dv}, ctx);
               }));
    report_gbs("sigmoid", 8 * n, perf_time("sigmoid", "786432 x 128", stream(), [&] {
                   kernels::sigmoid({.out = o2, .in = x2}, ctx);
               }));
    report_gbs("sigmoid_gate", 12 * n, perf_time("sigmoid_gate", "786432 x 128", stream(), [&] {
                   kernels::sigmoid_gate({.out = o2, .in = x2, .gate = y2}, ctx);
               }));
    report_gbs("situ_mul", 12 * n, perf_time("situ_mul", "786432 x 128", stream(), [&] {
                   kernels::situ_mul({.out = o2, .gate = x2, .up = y2}, ctx);
               }));
    {
        const Pair w = random_pair(rng, {D}, DType::kF32, false, alloc(), stream());
        report_gbs("gated_rms_norm", 12 * n, perf_time("gated_rms_norm", "786432 x 128", stream(), [&] {
                       kernels::gated_rms_norm({.out = o2, .in = x2, .gate = y2, .weight = w.dv}, ctx);
                   }));
        const Pair a_log = random_pair(rng, {H}, DType::kF32, false, alloc(), stream());
        const Pair dt = random_pair(rng, {H * D}, DType::kF32, false, alloc(), stream());
        report_gbs("kda_gate", 8 * n, perf_time("kda_gate", "8192 x 96 x 128, lower bound", stream(), [&] {
                       kernels::kda_gate({.out = o, .f = x.dv, .a_log = a_log.dv, .dt_bias = dt.dv,
                                          .form = KdaGateForm::kLowerBound},
                                         ctx);
                   }));
    }
    {
        const int64_t hidden = 7168, blocks = 7, t = 2048;
        const Pair bank = random_pair(rng, {t, blocks, hidden}, DType::kF32, false, alloc(), stream());
        const Pair part = random_pair(rng, {t, hidden}, DType::kF32, false, alloc(), stream());
        const Pair qv = random_pair(rng, {hidden}, DType::kF32, false, alloc(), stream(), -0.1f, 0.1f);
        const Pair w = random_pair(rng, {hidden}, DType::kF32, false, alloc(), stream());
        Tensor out = Tensor::empty({t, hidden}, DType::kF32, alloc());
        report_gbs("attn_res_mix", 4.0 * t * hidden * (blocks + 2),
                   perf_time("attn_res_mix", "T 2048, 7 blocks + partial, hidden 7168", stream(), [&] {
                       kernels::attn_res_mix({.out = out, .bank = bank.dv, .partial = part.dv, .query = qv.dv,
                                              .norm_weight = w.dv},
                                             ctx);
                   }));
    }
    {
        // Delta rule: q/k l2-normalised-ish magnitudes are irrelevant for timing; g in (-5, 0), beta in (0, 1).
        const Pair g = random_pair(rng, {T, H, D}, DType::kF32, false, alloc(), stream(), -0.5f, 0.0f);
        const Pair beta = random_pair(rng, {T, H}, DType::kF32, false, alloc(), stream(), 0.0f, 1.0f);
        Tensor state = Tensor::empty({1, H, D, D}, DType::kF32, alloc());
        cuda::fill_bytes_async(state.view(), 0, stream());
        const kernels::GatedDeltaRuleParams p{.out = o, .q = x.dv, .k = y.dv, .v = x.dv, .g = g.dv, .beta = beta.dv,
                                              .state = state, .cu_seqlens = cu_d, .state_slots = slot_d,
                                              .scale = 0.088f, .chunk_size = 64};
        perf_time("gated_delta_rule_chunk", "T 8192, 96 heads, 128/128, chunk 64", stream(),
                  [&] { kernels::gated_delta_rule_chunk(p, ctx); }, 1, 3);
        perf_time("gated_delta_rule_recurrent", "T 8192, 96 heads, 128/128", stream(),
                  [&] { kernels::gated_delta_rule_recurrent(p, ctx); }, 1, 3);
    }
}

}  // namespace
}  // namespace penstock::test
